"""Benchmarks' own evaluation scripts restated, as the reference vidprep's scores are checked against."""


def official_nextqa_accuracy(csv_rows: list[dict], predictions: dict, video_column: str = "video") -> dict:
    """NExT-QA's eval_mc.py restated (IntentQA's eval_intentqa.py is the same with the video in
    `video_id`): per type (TP counted as TN), per family (its first letter) and overall, in percent;
    `predictions` maps video_qid to {answer, prediction} as its result file does."""
    right, count = {}, {}
    for row in csv_rows:
        qtype = "TN" if row["type"] == "TP" else row["type"]
        entry = predictions[f"{row[video_column]}_{row['qid']}"]
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


def official_causal_vidqa_accuracy(predictions: dict) -> dict:
    """Causal-VidQA's eval_mc.py (accuracy_metric_all) restated: its result file read in order, six
    keys per video ({video}_{k}, k the question kind D, E, PA, PR, CA, CR); prediction P and
    counterfactual C right only when answer and reason both are; overall over four per video."""
    names = ["D", "E", "PA", "PR", "CA", "CR"]
    items = list(predictions.items())
    right = dict.fromkeys([*names, "P", "C", "all"], 0)
    count = dict.fromkeys([*names, "P", "C", "all"], 0)
    for start in range(0, len(items) // 6 * 6, 6):
        group = items[start:start + 6]
        correct = [entry["answer"] == entry["prediction"] for _, entry in group]
        for (key, _), ok in zip(group, correct):
            name = names[int(key.split("_")[-1])]
            right[name] += ok
            count[name] += 1
        count["P"] += 1
        count["C"] += 1
        count["all"] += 4
        right["P"] += correct[2] and correct[3]
        right["C"] += correct[4] and correct[5]
        right["all"] += correct[0] + correct[1] + (correct[2] and correct[3]) + (correct[4] and correct[5])
    return {name: right[name] * 100.0 / count[name] for name in count}


def official_star_accuracy(rows: list[dict], predictions: dict) -> dict:
    """STAR's reported figures restated (its paper's and leaderboard's table): accuracy per question type
    (Interaction, Sequence, Prediction, Feasibility), their mean ("Mean") and the accuracy over all
    questions (TraveLER's eval.py); `rows` carry the type and the true choice index, `predictions` map
    question_id to the chosen index."""
    right, count = {}, {}
    for row in rows:
        for group in (row["query_type"], "all"):
            right[group] = right.get(group, 0) + (predictions[row["question_id"]] == int(row["answer"]))
            count[group] = count.get(group, 0) + 1
    scores = {group: right[group] / count[group] for group in count}
    types = [t for t in scores if t != "all"]
    return {**scores, "Mean": sum(scores[t] for t in types) / len(types)}
