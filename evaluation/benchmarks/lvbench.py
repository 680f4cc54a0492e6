"""LVBench's video_info.meta.jsonl, scored as its compute_accuracy.py."""

import json
import re

from vidprep.agents.base import Question
from vidprep.conf.checks import ManifestError
from vidprep.evaluation.benchmarks import Benchmark, json_file, json_lines, video_path


# LVBench's choices sit in its question text, one per line after the question: "(A) ...".
LVBENCH_CHOICE = re.compile(r"^\(([A-D])\) (.*)$")


def load(meta_jsonl: str, video_dir: str) -> list[Question]:
    """LVBench's video_info.meta.jsonl: a line per video {key, type, video_info, qa: [{uid, question,
    answer, question_type, time_reference}]}; the question text holds its four choices as "(A) ..."
    lines, the answer is a letter, question_type the categories it counts in (all of them, as its
    compute_accuracy.py counts it). The video is {key}.mp4."""
    questions = []
    for number, video in json_lines(meta_jsonl):
        try:
            for qa in video["qa"]:
                text, *options = qa["question"].split("\n")
                choices = [LVBENCH_CHOICE.match(o) for o in options]
                if len(choices) != 4 or not all(choices) or [c.group(1) for c in choices] != list("ABCD"):
                    raise ValueError(f"question {qa['uid']}: its text does not end in four '(A) ...' lines")
                questions.append(Question(
                    qid=str(qa["uid"]), video=video_path(video_dir, video["key"]), task="mcq", question=text.strip(),
                    choices=[c.group(2) for c in choices], answer="ABCD".index(qa["answer"]),
                    qtype="+".join(qa["question_type"]), categories=list(qa["question_type"])))
        except (KeyError, TypeError, ValueError) as error:
            raise ManifestError(f"{meta_jsonl}:{number}: not an LVBench video line ({error})") from error
    return questions


def lvbench_answers(rows: list[dict]) -> dict:
    """The answer file LVBench's compute_accuracy.py reads: {uid: letter}; an invalid answer is "",
    which it counts wrong."""
    return {r["qid"]: "ABCD"[json.loads(r["prediction_json"])] if r["valid"] else "" for r in rows}


# LVBench's leaderboard names (its scripts/test_acc.py) of the categories its compute_accuracy.py reports.
LEADERBOARD_NAMES = {"key information retrieval": "KIR", "event understanding": "EU", "summarization": "Sum",
                     "entity recognition": "ER", "reasoning": "Rea", "temporal grounding": "TG"}


def lvbench_result(rows: list[dict]) -> dict:
    """The result.json its leaderboard takes (scripts/test_acc.py): compute_accuracy's accuracies, overall
    and per category (a question counts in each of its categories), under the leaderboard's names."""
    right, total = {}, {}
    for row in rows:
        question = json.loads(row["question_json"])
        correct = row["valid"] and json.loads(row["prediction_json"]) == question["answer"]
        for category in [*question["categories"], "acc"]:
            right[category] = right.get(category, 0) + correct
            total[category] = total.get(category, 0) + 1
    return {LEADERBOARD_NAMES.get(c, "Overall" if c == "acc" else c): right[c] / total[c] for c in total}


BENCHMARK = Benchmark("lvbench", load, leaderboards={"lvbench_answers.json": json_file(lvbench_answers),
                                                     "result.json": json_file(lvbench_result)})
