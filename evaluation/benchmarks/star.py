"""STAR: STAR_{train,val}.json and Charades videos, each question about its clip; its headline is the
mean of its four question types."""

import json

from vidprep.agents.base import Question
from vidprep.conf.checks import ManifestError
from vidprep.evaluation.benchmarks import Benchmark, chosen, json_file, read_json, video_path


def load(json_path: str, video_dir: str) -> list[Question]:
    """STAR's STAR_{train,val}.json: a list of {question_id, question, video_id, start, end, answer,
    choices: [{choice_id, choice}], ...}; the answer is the text of one choice. The qtype is the
    question's template (Interaction_T1), its category the question type its results are reported by
    (Interaction, Sequence, Prediction, Feasibility). The video is Charades' {video_id}.mp4, and the
    question is about its clip from `start` to `end` seconds. STAR_test.json withholds `answer`: its
    questions load unscored."""
    data = read_json(json_path, list, "STAR's question list (a JSON list of questions)")
    questions = []
    for number, item in enumerate(data):
        try:
            choices = [c["choice"] for c in sorted(item["choices"], key=lambda c: c["choice_id"])]
            answer = item.get("answer")
            if answer is not None and answer not in choices:
                raise ValueError(f"its answer {answer!r} is none of its choices")
            category, template = item["question_id"].split("_")[:2]
            clip = [float(item["start"]), float(item["end"])]
            if not 0 <= clip[0] < clip[1]:
                raise ValueError(f"its clip {clip} is not a range of seconds (start < end)")
            questions.append(Question(
                qid=item["question_id"], video=video_path(video_dir, item["video_id"]), task="mcq",
                question=item["question"], choices=choices, answer=None if answer is None else choices.index(answer),
                qtype=f"{category}_{template}", categories=[category], clip=clip))
        except (KeyError, TypeError, ValueError) as error:
            raise ManifestError(f"{json_path}: item {number}: not a STAR question ({error})") from error
    return questions


QUESTION_TYPES = ("Interaction", "Sequence", "Prediction", "Feasibility")


def star_answers(rows: list[dict]) -> dict:
    """The file STAR's EvalAI leaderboard takes, as the test-split scripts built on Flipped-VQA's STAR
    loader write it: {question type: [{question_id, answer}]}, the answer the chosen choice's
    `choice_id` (the loaders order choices by it); an invalid answer is -1, which no choice_id is."""
    results: dict[str, list] = {kind: [] for kind in QUESTION_TYPES}
    for row in rows:
        category = json.loads(row["question_json"])["categories"][0]
        results[category].append({"question_id": row["qid"],
                                  "answer": chosen(row)})
    return results


BENCHMARK = Benchmark("star", load, QUESTION_TYPES, headline="mean of categories",
                      leaderboards={"star_test_predictions.json": json_file(star_answers)})
