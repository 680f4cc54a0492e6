"""Benchmarks' own evaluation scripts restated, as the reference vidprep's scores are checked against."""


def official_nextqa_accuracy(csv_rows: list[dict], predictions: dict) -> dict:
    """NExT-QA's eval_mc.py restated: per type (TP counted as TN), per family (its first letter) and
    overall, in percent; `predictions` maps video_qid to {answer, prediction} as its result file does."""
    right, count = {}, {}
    for row in csv_rows:
        qtype = "TN" if row["type"] == "TP" else row["type"]
        entry = predictions[f"{row['video']}_{row['qid']}"]
        for group in (qtype, qtype[0], "all"):
            right[group] = right.get(group, 0) + (entry["answer"] == entry["prediction"])
            count[group] = count.get(group, 0) + 1
    return {group: right[group] * 100.0 / count[group] for group in count}


def official_lvbench_accuracy(meta_lines: list[dict], answers: dict) -> dict:
    """LVBench's compute_accuracy.py restated: over the questions its answer file names, overall and per
    category, a question counting in every category of its question_type."""
    right, total = {}, {}
    for video in meta_lines:
        for qa in video["qa"]:
            if str(qa["uid"]) not in answers:
                continue
            correct = answers[str(qa["uid"])] == qa["answer"]
            for group in [*qa["question_type"], "acc"]:
                right[group] = right.get(group, 0) + correct
                total[group] = total.get(group, 0) + 1
    return {group: right[group] / total[group] for group in total}
