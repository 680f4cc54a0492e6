"""Causal-VidQA's QA folder and split files, answer and reason scored as one (its eval_mc.py)."""

import pickle
from pathlib import Path

from vidprep.agents.base import Question
from vidprep.conf.checks import ManifestError
from vidprep.evaluation.benchmarks import Benchmark, json_file, read_json, video_path
from vidprep.evaluation.benchmarks.nextqa import nextqa_results


# Causal-VidQA's six questions per video in the order of its question keys ({video}_{k}): each kind
# of question and the choice list it takes from text.json; answer and reason of the commonsense
# kinds score as one (its eval_mc.py).
CAUSAL_VIDQA_QUESTIONS = [("D", "descriptive", "answer"), ("E", "explanatory", "answer"),
                          ("PA", "predictive", "answer"), ("PR", "predictive", "reason"),
                          ("CA", "counterfactual", "answer"), ("CR", "counterfactual", "reason")]
# The answer questions that carry their unit's reasons, for a method that picks both in one reply.
ANSWERS_WITH_REASONS = ("PA", "CA")


class _VideoListUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"holds {module}.{name}, not only a list of video ids")


def load(qa_dir: str, video_dir: str, split: str | None = None) -> list[Question]:
    """Causal-VidQA's QA folder as released: {video}/text.json ({kind: {question, answer: [5], reason:
    [5]}}) and {video}/answer.json ({kind: {answer, reason}}), for the videos of `split` (its split
    file, a pickled list of video ids; read without running code) or every folder. The reason question
    of the predictive and counterfactual kinds asks the same question with the reasons as its
    choices; it is scored with its answer question as one unit, right only when both are. The answer
    question also carries the reasons, so a method that picks both in one reply (TraveLER's public code)
    answers the unit at once."""
    if split:
        try:
            with open(split, "rb") as f:
                videos = _VideoListUnpickler(f).load()
        except (OSError, pickle.UnpicklingError, EOFError) as error:
            raise ManifestError(f"{split}: not a Causal-VidQA split file ({error})") from error
    else:
        videos = sorted(p.name for p in Path(qa_dir).iterdir() if p.is_dir()) if Path(qa_dir).is_dir() else []
    if not videos:
        raise ManifestError(f"{split or qa_dir}: no Causal-VidQA videos")
    questions = []
    for video in videos:
        text, answers = (read_json(Path(qa_dir) / video / name) for name in ("text.json", "answer.json"))
        try:
            for k, (qtype, kind, field) in enumerate(CAUSAL_VIDQA_QUESTIONS):
                reasons = list(text[kind]["reason"]) if qtype in ANSWERS_WITH_REASONS else []
                questions.append(Question(
                    qid=f"{video}_{k}", video=video_path(video_dir, video), task="mcq", question=text[kind]["question"],
                    choices=list(text[kind][field]), answer=int(answers[kind][field]), qtype=qtype,
                    categories=[kind], unit=f"{video}_{kind}", reasons=reasons))
        except (KeyError, TypeError, ValueError) as error:
            raise ManifestError(f"{Path(qa_dir) / video}: not a Causal-VidQA question folder ({error})") from error
    return questions


BENCHMARK = Benchmark("causal_vidqa", load, tuple(qtype for qtype, _, _ in CAUSAL_VIDQA_QUESTIONS),
                      leaderboards={"causal_vidqa_results.json": json_file(nextqa_results)})
