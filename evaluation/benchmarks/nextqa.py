"""NExT-QA (and the layout IntentQA shares): its val/test CSV and videos, scored as its eval_mc.py."""

import csv
import json

from vidprep.agents.base import Question
from vidprep.conf.checks import ManifestError
from vidprep.evaluation.benchmarks import Benchmark, chosen, json_file, read_json, video_path


# NExT-QA's question types by the family its results are also reported in (its eval_mc.py).
NEXTQA_FAMILIES = {"C": "causal", "T": "temporal", "D": "descriptive"}
NEXTQA_TYPES = {"CW", "CH", "TN", "TC", "DC", "DL", "DO"}


def load(csv_path: str, video_dir: str, video_map: str | None = None, video_column: str = "video") -> list[Question]:
    """NExT-QA's CSV (video, frame_count, width, height, question, answer, qid, type, a0..a4), or IntentQA's,
    which is NExT-QA's with the video in `video_id` (and NExT-QA's videos); `video_map` is
    map_vid_vidorID.json when videos sit in VidOR's subfolders. A question's qtype is its type as both
    benchmarks' eval scripts score it (TP, "previous", counts as TN, as there), its one category the
    type's family: causal, temporal or descriptive."""
    folders = read_json(video_map) if video_map else {}
    try:
        with open(csv_path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as error:
        raise ManifestError(f"{csv_path}: cannot read questions: {error}") from error
    questions = []
    for number, row in enumerate(rows, 2):
        try:
            choices = [row[f"a{i}"] for i in range(5)]
            qtype = "TN" if row["type"] == "TP" else row["type"]
            if qtype not in NEXTQA_TYPES:
                raise ValueError(f"type {row['type']!r} is none of {sorted(NEXTQA_TYPES | {'TP'})}")
            video = row[video_column]
            questions.append(Question(
                qid=f"{video}_{row['qid']}", video=video_path(video_dir, folders.get(video, video)),
                task="mcq", question=row["question"].strip(), choices=choices, answer=int(row["answer"]),
                qtype=qtype, categories=[NEXTQA_FAMILIES[qtype[0]]],
            ))
        except (KeyError, ValueError) as error:
            named = f" (question {row[video_column]}_{row['qid']})" if row.get(video_column) and row.get("qid") else ""
            raise ManifestError(f"{csv_path}:{number}{named}: not a NExT-QA-style row ({error})") from error
    return questions


def nextqa_results(rows: list[dict]) -> dict:
    """The result file NExT-QA's eval_mc.py reads, as do IntentQA's eval_intentqa.py and Causal-VidQA's
    eval_mc.py: {question key: {answer, prediction}}, in question key order (Causal-VidQA's script reads
    each video's six keys in a row); an invalid answer is prediction -1, which they count wrong."""
    return {r["qid"]: {"answer": json.loads(r["question_json"])["answer"],
                       "prediction": chosen(r)} for r in rows}


BENCHMARK = Benchmark("nextqa", load, tuple(sorted(NEXTQA_TYPES)),
                      leaderboards={"nextqa_results.json": json_file(nextqa_results)})
