"""Neptune's question lists as its README documents them, multiple choice over five."""

from urllib.parse import parse_qs, urlparse

from vidprep.agents.base import Question
from vidprep.conf.checks import ManifestError
from vidprep.evaluation.benchmarks import Benchmark, read_json, video_path


def _youtube_id(video: str) -> str:
    """A YouTube video's id from its URL (watch?v=ID, youtu.be/ID, shorts/ID), or the value itself."""
    url = urlparse(video)
    if not url.netloc:
        return video
    found = parse_qs(url.query).get("v") or [part for part in url.path.split("/") if part][-1:]
    if not found:
        raise ValueError(f"video_id {video!r} names no YouTube video")
    return found[0]


NEPTUNE_CHOICES = 5


def load(json_path: str, video_dir: str) -> list[Question]:
    """Neptune's neptune_{full,mmh,mma}.json, field by field as its README documents them: a list of
    {key, video_id (a YouTube URL), question, answer, answer_choice_0..4, answer_id (the right choice's
    index), question type}. Multiple choice over the five choices, scored by accuracy (its README's
    metric; the open-ended mode's Gemma-based GEM metric is not in vidprep). The qtype and category are
    the question type. The video is {YouTube id}.mp4."""
    data = read_json(json_path, list, "Neptune's question list (a JSON list of questions)")
    questions = []
    for number, item in enumerate(data):
        try:
            choices = [str(item[f"answer_choice_{i}"]) for i in range(NEPTUNE_CHOICES)]
            answer = int(item["answer_id"])
            if not 0 <= answer < NEPTUNE_CHOICES:
                raise ValueError(f"answer_id {answer} is not a choice index 0..{NEPTUNE_CHOICES - 1}")
            # The README spells the field "question type"; JSON keys are usually snake case: either is read.
            qtype = next((item[k] for k in ("question type", "question_type") if k in item), None)
            if qtype is None:
                raise ValueError("it has no 'question type' field")
            questions.append(Question(
                qid=str(item["key"]), video=video_path(video_dir, _youtube_id(item["video_id"])), task="mcq",
                question=item["question"], choices=choices, answer=answer, qtype=qtype, categories=[qtype]))
        except (KeyError, TypeError, ValueError) as error:
            raise ManifestError(f"{json_path}: item {number}: not a Neptune question ({error})") from error
    return questions


BENCHMARK = Benchmark("neptune", load)
