"""Questions of the benchmarks in their own annotation formats, mapped to video files on disk."""

import csv
import json
import re
from collections import Counter
from pathlib import Path

from vidprep.pipeline.manifest import ManifestError
from vidprep.stages.agents.base import TASKS, Question
from vidprep.stages.media.files import is_uri

def first_per_type(questions: list[Question], n: int) -> list[Question]:
    """The first n questions of each qtype, in dataset order: a small run that still covers every type
    (NExT-QA's CSV lists a video's questions together, so its first N are often of one type)."""
    taken = Counter()
    chosen = []
    for question in questions:
        if taken[question.qtype] < n:
            taken[question.qtype] += 1
            chosen.append(question)
    return chosen


def _read_json(path: str | Path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ManifestError(f"{path}: cannot read questions: {error}") from error


def _video(video_dir: str | Path, name: str, suffix: str = ".mp4") -> str:
    """The absolute path or URI of a dataset's video (the store knows files by absolute path or URI)."""
    file = name if Path(name).suffix else name + suffix
    if is_uri(str(video_dir)):
        return f"{str(video_dir).rstrip('/')}/{file}"
    return str((Path(video_dir) / file).resolve())


# NExT-QA's question type codes (CW, CH, TN, TC, TP, DL, DO, DC) by the family results are reported in.
NEXTQA_FAMILIES = {"C": "causal", "T": "temporal", "D": "descriptive"}


def nextqa(csv_path: str, video_dir: str, video_map: str | None = None) -> list[Question]:
    """NExT-QA's CSV (video, frame_count, width, height, question, answer, qid, type, a0..a4);
    `video_map` is its map_vid_vidorID.json when videos sit in VidOR's subfolders. A question's
    qtype is its family (causal, temporal, descriptive)."""
    folders = _read_json(video_map) if video_map else {}
    try:
        with open(csv_path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as error:
        raise ManifestError(f"{csv_path}: cannot read questions: {error}") from error
    questions = []
    for number, row in enumerate(rows, 2):
        try:
            choices = [row[f"a{i}"] for i in range(5)]
            questions.append(Question(
                qid=f"{row['video']}_{row['qid']}", video=_video(video_dir, folders.get(row["video"], row["video"])),
                task="mcq", question=row["question"].strip(), choices=choices, answer=int(row["answer"]),
                qtype=NEXTQA_FAMILIES.get(row.get("type", "")[:1], row.get("type", "")),
            ))
        except (KeyError, ValueError) as error:
            raise ManifestError(f"{csv_path}:{number}: not a NExT-QA row ({error})") from error
    return questions


def egoschema(questions_json: str, answers_json: str | None, video_dir: str) -> list[Question]:
    """EgoSchema: questions.json (q_uid, question, option 0..4) and, where known, subset_answers.json."""
    answers = _read_json(answers_json) if answers_json else {}
    questions = []
    for item in _read_json(questions_json):
        uid = item["q_uid"]
        questions.append(Question(
            qid=uid, video=_video(video_dir, uid), task="mcq", question=item["question"],
            choices=[item[f"option {i}"] for i in range(5)], answer=answers.get(uid), qtype="egoschema",
        ))
    return questions


def activitynet_rtl(json_path: str, video_dir: str) -> list[Question]:
    """ActivityNet-RTL (LITA): {video: {duration, QA: [{q, a}]}}, the span as <p> tokens in the answer,
    p in hundredths of the duration."""
    questions = []
    for video, item in _read_json(json_path).items():
        for i, qa in enumerate(item["QA"]):
            marks = [float(m) for m in re.findall(r"<(\d+(?:\.\d+)?)>", qa["a"])[:2]]
            span = [m / 100 * item["duration"] for m in marks] if len(marks) == 2 else None
            questions.append(Question(qid=f"{video}_{i}", video=_video(video_dir, video), task="rtl",
                                      question=qa["q"], answer=span, qtype="rtl"))
    return questions


def jsonl(path: str, video_dir: str | None = None) -> list[Question]:
    """One JSON object per line: qid, video, task, question, choices, answer, qtype."""
    base = video_dir or str(Path(path).parent)
    questions = []
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as error:
        raise ManifestError(f"{path}: cannot read questions: {error}") from error
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            question = Question(**{**item, "video": _video(base, item["video"])})
        except (json.JSONDecodeError, TypeError, KeyError) as error:
            raise ManifestError(f"{path}:{number}: not a question ({error})") from error
        if question.task not in TASKS:
            raise ManifestError(f"{path}:{number}: task must be one of {TASKS}, got {question.task!r}")
        questions.append(question)
    return questions
