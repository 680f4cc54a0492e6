"""ActivityNet-RTL as LITA releases it, times in seconds, scored as LITA's eval_model_rtl.py."""

import re

from vidprep.agents.base import Question
from vidprep.conf.checks import ManifestError
from vidprep.evaluation.benchmarks import Benchmark, read_json, video_path


# A time in an RTL answer, in seconds: "<12.5>", "<3>", "<.5>" (LITA's pattern).
RTL_TIME = re.compile(r"<(\d*\.\d+|\d+\.?)>")


def rtl_span(text: str, duration: float) -> list[float] | None:
    """The span LITA's evaluation reads from an answer: its first two times, clamped into the video,
    in order; None without two times."""
    times = [min(max(float(t), 0.0), duration) for t in RTL_TIME.findall(text)[:2]]
    return sorted(times) if len(times) == 2 else None


def load(json_path: str, video_dir: str) -> list[Question]:
    """ActivityNet-RTL as LITA releases it, times in seconds: the evaluation file (annot_val_1_q229.json,
    a list of {question_id, vid, question, answer, duration}; the video is v_{vid}) or the training
    file ({v_id: {duration, QA: [{q, a}]}}). A training answer without two times is kept unscored."""
    data = read_json(json_path)
    questions = []
    if isinstance(data, list):
        for number, item in enumerate(data):
            try:
                span = rtl_span(item["answer"], float(item["duration"]))
                if span is None:
                    raise ValueError(f"no two <seconds> marks in its answer {item['answer']!r}")
                questions.append(Question(
                    qid=str(item["question_id"]), video=video_path(video_dir, f"v_{item['vid']}"), task="rtl",
                    question=item["question"], answer=span, qtype="rtl", duration=float(item["duration"])))
            except (KeyError, TypeError, ValueError) as error:
                raise ManifestError(f"{json_path}: item {number}: not an ActivityNet-RTL question ({error})") from error
        return questions
    for video, item in data.items():
        try:
            duration = float(item["duration"])
            questions += [Question(qid=f"{video}_{i}", video=video_path(video_dir, video), task="rtl", question=qa["q"],
                                   answer=rtl_span(qa["a"], duration), qtype="rtl", duration=duration)
                          for i, qa in enumerate(item["QA"])]
        except (KeyError, TypeError, ValueError) as error:
            raise ManifestError(f"{json_path}: video {video}: not an ActivityNet-RTL entry ({error})") from error
    return questions


BENCHMARK = Benchmark("activitynet_rtl", load)
