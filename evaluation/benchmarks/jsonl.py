"""Questions of one's own, one JSON object per line (the sample's questions.jsonl, `dataset=folder`)."""

from pathlib import Path

from vidprep.agents.base import TASKS, Question
from vidprep.conf.checks import ManifestError
from vidprep.evaluation.benchmarks import Benchmark, json_lines, video_path


def load(path: str, video_dir: str | None = None) -> list[Question]:
    """One JSON object per line: qid, video, task, question, choices, answer, qtype."""
    base = video_dir or str(Path(path).parent)
    questions = []
    for number, item in json_lines(path):
        try:
            question = Question(**{**item, "video": video_path(base, item["video"])})
        except (TypeError, KeyError) as error:
            raise ManifestError(f"{path}:{number}: not a question ({error})") from error
        if question.task not in TASKS:
            raise ManifestError(f"{path}:{number}: task must be one of {TASKS}, got {question.task!r}")
        questions.append(question)
    return questions


BENCHMARK = Benchmark("questions.jsonl", load)
