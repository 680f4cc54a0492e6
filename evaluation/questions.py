"""Questions of the benchmarks in their own annotation formats, mapped to video files on disk."""

import csv
import json
import pickle
import re
from collections import Counter
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from vidprep.conf.checks import ManifestError
from vidprep.agents.base import TASKS, Question
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


def _read_json(path: str | Path, shape: type | None = None, expected: str = ""):
    """The file's JSON; ManifestError when it cannot be read or, with `shape`, is not a `shape`
    (`expected` says what the file should have been)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ManifestError(f"{path}: cannot read questions: {error}") from error
    if shape is not None and not isinstance(data, shape):
        raise ManifestError(f"{path}: not {expected}")
    return data


def _json_lines(path: str) -> list[tuple[int, object]]:
    """(line number, object) for each non-blank line of a JSON Lines file."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as error:
        raise ManifestError(f"{path}: cannot read questions: {error}") from error
    parsed = []
    for number, line in enumerate(lines, 1):
        if line.strip():
            try:
                parsed.append((number, json.loads(line)))
            except json.JSONDecodeError as error:
                raise ManifestError(f"{path}:{number}: not JSON ({error})") from error
    return parsed


def _video(video_dir: str | Path, name: str, suffix: str = ".mp4") -> str:
    """The absolute path or URI of a dataset's video (the store knows files by absolute path or URI)."""
    file = name if Path(name).suffix else name + suffix
    if is_uri(str(video_dir)):
        return f"{str(video_dir).rstrip('/')}/{file}"
    return str((Path(video_dir) / file).resolve())


# NExT-QA's question types by the family its results are also reported in (its eval_mc.py).
NEXTQA_FAMILIES = {"C": "causal", "T": "temporal", "D": "descriptive"}
NEXTQA_TYPES = {"CW", "CH", "TN", "TC", "DC", "DL", "DO"}


def nextqa(csv_path: str, video_dir: str, video_map: str | None = None, video_column: str = "video") -> list[Question]:
    """NExT-QA's CSV (video, frame_count, width, height, question, answer, qid, type, a0..a4), or IntentQA's,
    which is NExT-QA's with the video in `video_id` (and NExT-QA's videos); `video_map` is
    map_vid_vidorID.json when videos sit in VidOR's subfolders. A question's qtype is its type as both
    benchmarks' eval scripts score it (TP, "previous", counts as TN, as there), its one category the
    type's family: causal, temporal or descriptive."""
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
            qtype = "TN" if row["type"] == "TP" else row["type"]
            if qtype not in NEXTQA_TYPES:
                raise ValueError(f"type {row['type']!r} is none of {sorted(NEXTQA_TYPES | {'TP'})}")
            video = row[video_column]
            questions.append(Question(
                qid=f"{video}_{row['qid']}", video=_video(video_dir, folders.get(video, video)),
                task="mcq", question=row["question"].strip(), choices=choices, answer=int(row["answer"]),
                qtype=qtype, categories=[NEXTQA_FAMILIES[qtype[0]]],
            ))
        except (KeyError, ValueError) as error:
            raise ManifestError(f"{csv_path}:{number}: not a NExT-QA-style row ({error})") from error
    return questions


def star(json_path: str, video_dir: str) -> list[Question]:
    """STAR's STAR_{train,val}.json: a list of {question_id, question, video_id, start, end, answer,
    choices: [{choice_id, choice}], ...}; the answer is the text of one choice. The qtype is the
    question's template (Interaction_T1), its category the question type its results are reported by
    (Interaction, Sequence, Prediction, Feasibility). The video is Charades' {video_id}.mp4, and the
    question is about its clip from `start` to `end` seconds."""
    data = _read_json(json_path, list, "STAR's question list (a JSON list of questions)")
    questions = []
    for number, item in enumerate(data):
        try:
            choices = [c["choice"] for c in sorted(item["choices"], key=lambda c: c["choice_id"])]
            if item["answer"] not in choices:
                raise ValueError(f"its answer {item['answer']!r} is none of its choices")
            category, template = item["question_id"].split("_")[:2]
            clip = [float(item["start"]), float(item["end"])]
            if not 0 <= clip[0] < clip[1]:
                raise ValueError(f"its clip {clip} is not a range of seconds (start < end)")
            questions.append(Question(
                qid=item["question_id"], video=_video(video_dir, item["video_id"]), task="mcq",
                question=item["question"], choices=choices, answer=choices.index(item["answer"]),
                qtype=f"{category}_{template}", categories=[category], clip=clip))
        except (KeyError, TypeError, ValueError) as error:
            raise ManifestError(f"{json_path}: item {number}: not a STAR question ({error})") from error
    return questions


def perception_test(json_path: str, video_dir: str) -> list[Question]:
    """The Perception Test's multiple-choice annotations (mc_question_{split}.json or all_{split}.json):
    {video_id: {metadata, mc_question: [{id, question, options, answer_id, area, reasoning, tag}]}}.
    The qtype is the question's area, its categories its area and its type of reasoning, the two axes
    its results are reported by. The video is {video_id}.mp4."""
    data = _read_json(json_path, dict, "the Perception Test's annotations (a JSON object by video id)")
    questions = []
    for video, item in data.items():
        try:
            for mc in item["mc_question"]:
                questions.append(Question(
                    qid=f"{video}_{mc['id']}", video=_video(video_dir, video), task="mcq", question=mc["question"],
                    choices=list(mc["options"]), answer=mc.get("answer_id"), qtype=mc["area"],
                    categories=[mc["area"], mc["reasoning"]]))
        except (KeyError, TypeError) as error:
            raise ManifestError(f"{json_path}: video {video}: not a Perception Test entry ({error})") from error
    return questions


# Causal-VidQA's six questions per video in the order of its question keys ({video}_{k}): each kind
# of question and the choice list it takes from text.json; answer and reason of the commonsense
# kinds score as one (its eval_mc.py).
CAUSAL_VIDQA_QUESTIONS = [("D", "descriptive", "answer"), ("E", "explanatory", "answer"),
                          ("PA", "predictive", "answer"), ("PR", "predictive", "reason"),
                          ("CA", "counterfactual", "answer"), ("CR", "counterfactual", "reason")]


class _VideoListUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"holds {module}.{name}, not only a list of video ids")


def causal_vidqa(qa_dir: str, video_dir: str, split: str | None = None) -> list[Question]:
    """Causal-VidQA's QA folder as released: {video}/text.json ({kind: {question, answer: [5], reason:
    [5]}}) and {video}/answer.json ({kind: {answer, reason}}), for the videos of `split` (its split
    file, a pickled list of video ids; read without running code) or every folder. The reason question
    of the predictive and counterfactual kinds asks the same question with the reasons as its
    choices; it is scored with its answer question as one unit, right only when both are."""
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
        text, answers = (_read_json(Path(qa_dir) / video / name) for name in ("text.json", "answer.json"))
        try:
            for k, (qtype, kind, field) in enumerate(CAUSAL_VIDQA_QUESTIONS):
                questions.append(Question(
                    qid=f"{video}_{k}", video=_video(video_dir, video), task="mcq", question=text[kind]["question"],
                    choices=list(text[kind][field]), answer=int(answers[kind][field]), qtype=qtype,
                    categories=[kind], unit=f"{video}_{kind}"))
        except (KeyError, TypeError, ValueError) as error:
            raise ManifestError(f"{Path(qa_dir) / video}: not a Causal-VidQA question folder ({error})") from error
    return questions


def egoschema(questions_json: str, answers_json: str | None, video_dir: str) -> list[Question]:
    """EgoSchema: questions.json (q_uid, question, option 0..4) and, where known, subset_answers.json
    ({q_uid: option}); questions without an answer are answered, not scored (the grader scores them)."""
    answers = _read_json(answers_json) if answers_json else {}
    questions = []
    for number, item in enumerate(_read_json(questions_json)):
        try:
            uid = item["q_uid"]
            questions.append(Question(
                qid=uid, video=_video(video_dir, uid), task="mcq", question=item["question"],
                choices=[item[f"option {i}"] for i in range(5)], answer=answers.get(uid), qtype="egoschema",
            ))
        except (KeyError, TypeError) as error:
            raise ManifestError(f"{questions_json}: item {number}: not an EgoSchema question ({error})") from error
    return questions


# A time in an RTL answer, in seconds: "<12.5>", "<3>", "<.5>" (LITA's pattern).
RTL_TIME = re.compile(r"<(\d*\.\d+|\d+\.?)>")


def rtl_span(text: str, duration: float) -> list[float] | None:
    """The span LITA's evaluation reads from an answer: its first two times, clamped into the video,
    in order; None without two times."""
    times = [min(max(float(t), 0.0), duration) for t in RTL_TIME.findall(text)[:2]]
    return sorted(times) if len(times) == 2 else None


def activitynet_rtl(json_path: str, video_dir: str) -> list[Question]:
    """ActivityNet-RTL as LITA releases it, times in seconds: the evaluation file (annot_val_1_q229.json,
    a list of {question_id, vid, question, answer, duration}; the video is v_{vid}) or the training
    file ({v_id: {duration, QA: [{q, a}]}}). A training answer without two times is kept unscored."""
    data = _read_json(json_path)
    questions = []
    if isinstance(data, list):
        for number, item in enumerate(data):
            try:
                span = rtl_span(item["answer"], float(item["duration"]))
                if span is None:
                    raise ValueError(f"no two <seconds> marks in its answer {item['answer']!r}")
                questions.append(Question(
                    qid=str(item["question_id"]), video=_video(video_dir, f"v_{item['vid']}"), task="rtl",
                    question=item["question"], answer=span, qtype="rtl", duration=float(item["duration"])))
            except (KeyError, TypeError, ValueError) as error:
                raise ManifestError(f"{json_path}: item {number}: not an ActivityNet-RTL question ({error})") from error
        return questions
    for video, item in data.items():
        try:
            duration = float(item["duration"])
            questions += [Question(qid=f"{video}_{i}", video=_video(video_dir, video), task="rtl", question=qa["q"],
                                   answer=rtl_span(qa["a"], duration), qtype="rtl", duration=duration)
                          for i, qa in enumerate(item["QA"])]
        except (KeyError, TypeError, ValueError) as error:
            raise ManifestError(f"{json_path}: video {video}: not an ActivityNet-RTL entry ({error})") from error
    return questions


# LVBench's choices sit in its question text, one per line after the question: "(A) ...".
LVBENCH_CHOICE = re.compile(r"^\(([A-D])\) (.*)$")


def lvbench(meta_jsonl: str, video_dir: str) -> list[Question]:
    """LVBench's video_info.meta.jsonl: a line per video {key, type, video_info, qa: [{uid, question,
    answer, question_type, time_reference}]}; the question text holds its four choices as "(A) ..."
    lines, the answer is a letter, question_type the categories it counts in (all of them, as its
    compute_accuracy.py counts it). The video is {key}.mp4."""
    questions = []
    for number, video in _json_lines(meta_jsonl):
        try:
            for qa in video["qa"]:
                text, *options = qa["question"].split("\n")
                choices = [LVBENCH_CHOICE.match(o) for o in options]
                if len(choices) != 4 or not all(choices) or [c.group(1) for c in choices] != list("ABCD"):
                    raise ValueError(f"question {qa['uid']}: its text does not end in four '(A) ...' lines")
                questions.append(Question(
                    qid=str(qa["uid"]), video=_video(video_dir, video["key"]), task="mcq", question=text.strip(),
                    choices=[c.group(2) for c in choices], answer="ABCD".index(qa["answer"]),
                    qtype="+".join(qa["question_type"]), categories=list(qa["question_type"])))
        except (KeyError, TypeError, ValueError) as error:
            raise ManifestError(f"{meta_jsonl}:{number}: not an LVBench video line ({error})") from error
    return questions


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


def neptune(json_path: str, video_dir: str) -> list[Question]:
    """Neptune's neptune_{full,mmh,mma}.json, field by field as its README documents them: a list of
    {key, video_id (a YouTube URL), question, answer, answer_choice_0..4, answer_id (the right choice's
    index), question type}. Multiple choice over the five choices, scored by accuracy (its README's
    metric; the open-ended mode's Gemma-based GEM metric is not in vidprep). The qtype and category are
    the question type. The video is {YouTube id}.mp4."""
    data = _read_json(json_path, list, "Neptune's question list (a JSON list of questions)")
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
                qid=str(item["key"]), video=_video(video_dir, _youtube_id(item["video_id"])), task="mcq",
                question=item["question"], choices=choices, answer=answer, qtype=qtype, categories=[qtype]))
        except (KeyError, TypeError, ValueError) as error:
            raise ManifestError(f"{json_path}: item {number}: not a Neptune question ({error})") from error
    return questions


def jsonl(path: str, video_dir: str | None = None) -> list[Question]:
    """One JSON object per line: qid, video, task, question, choices, answer, qtype."""
    base = video_dir or str(Path(path).parent)
    questions = []
    for number, item in _json_lines(path):
        try:
            question = Question(**{**item, "video": _video(base, item["video"])})
        except (TypeError, KeyError) as error:
            raise ManifestError(f"{path}:{number}: not a question ({error})") from error
        if question.task not in TASKS:
            raise ManifestError(f"{path}:{number}: task must be one of {TASKS}, got {question.task!r}")
        questions.append(question)
    return questions
