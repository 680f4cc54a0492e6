"""Scores of an answer run: accuracy (overall and per question type) for multiple choice, mIoU and
recall at IoU thresholds for temporal localisation, token F1 for open answers. Invalid answers are
counted apart and score zero; they are never replaced by a guess."""

import json
import re
from collections import defaultdict


def iou(predicted: list[float], truth: list[float]) -> float:
    inter = max(0.0, min(predicted[1], truth[1]) - max(predicted[0], truth[0]))
    union = max(predicted[1], truth[1]) - min(predicted[0], truth[0])
    return inter / union if union > 0 else 0.0


def token_f1(predicted: str, truth: str) -> float:
    a, b = re.findall(r"[a-z0-9]+", predicted.lower()), re.findall(r"[a-z0-9]+", truth.lower())
    common = sum(min(a.count(w), b.count(w)) for w in set(a))
    if not common:
        return 0.0
    precision, recall = common / len(a), common / len(b)
    return 2 * precision * recall / (precision + recall)


def score(row: dict) -> float | None:
    """The question's score in 0..1 (None when its ground truth is unknown)."""
    truth = json.loads(row["question_json"])["answer"]
    if truth is None:
        return None
    if not row["valid"]:
        return 0.0
    predicted = json.loads(row["prediction_json"])
    if row["task"] == "mcq":
        return float(predicted == truth)
    if row["task"] == "rtl":
        return iou(predicted, truth)
    return token_f1(predicted, str(truth))


def question_usd(row: dict, prices: dict) -> tuple[float | None, set[str]]:
    """A question's price from its tokens per model and `prices` (USD per 1M input / output tokens per
    model); None with the models that have no price (or when the row predates per-model usage)."""
    usage = json.loads(row.get("usage_json") or "null")
    if usage is None:
        return None, {"(not recorded)"}
    unpriced = {model for model in usage if model not in prices}
    if unpriced:
        return None, unpriced
    return sum((u["prompt_tokens"] * prices[m]["input"] + u["completion_tokens"] * prices[m]["output"]) / 1e6
               for m, u in usage.items()), set()


def report(rows: list[dict], prices: dict | None = None) -> dict:
    """Per task: count, invalid, mean score (accuracy / mIoU / token F1), extras; plus costs, money
    per question included when `prices` covers every model the run used."""
    by_task: dict[str, list] = defaultdict(list)
    for row in rows:
        by_task[row["task"]].append(row)
    tasks = {}
    for task, items in sorted(by_task.items()):
        scored = [(r, s) for r in items if (s := score(r)) is not None]
        entry = {"questions": len(items), "invalid": sum(not r["valid"] for r in items),
                 "score": sum(s for _, s in scored) / len(scored) if scored else None}
        if task == "rtl":
            entry |= {f"R@{t}": sum(s >= t for _, s in scored) / len(scored) if scored else None for t in (0.3, 0.5)}
        per_type = defaultdict(list)
        for r, s in scored:
            per_type[r["qtype"]].append(s)
        entry["per_type"] = {t: sum(v) / len(v) for t, v in sorted(per_type.items())}
        tasks[task] = entry
    n = max(len(rows), 1)
    costs = {"llm_calls_per_question": sum(r["llm_calls"] for r in rows) / n,
             "tokens_per_question": sum(r["prompt_tokens"] + r["completion_tokens"] for r in rows) / n,
             "seconds_per_question": sum(r["seconds"] for r in rows) / n,
             # Distinct frames a question's tools looked at (their timestamps, in `visited`).
             "frames_viewed_per_question": sum(len(set(r["visited"])) for r in rows) / n}
    priced = [question_usd(r, prices or {}) for r in rows]
    unpriced = sorted(set().union(*(missing for _, missing in priced))) if priced else []
    costs["usd_per_question"] = None if unpriced or not priced else sum(usd for usd, _ in priced) / n
    costs["unpriced_models"] = unpriced
    return {"tasks": tasks, "costs": costs}


def format_usd(costs: dict) -> str:
    if costs["usd_per_question"] is None:
        return f"USD n/a (no price for {', '.join(costs['unpriced_models'])}: add it under prices)"
    return f"USD {costs['usd_per_question']:.4f}"


METRIC = {"mcq": "accuracy", "rtl": "mIoU", "open": "token F1"}


def format_report(method: str, key: str, result: dict) -> list[str]:
    lines = [f"{method}  ({key})"]
    for task, entry in result["tasks"].items():
        value = "n/a" if entry["score"] is None else f"{entry['score']:.3f}"
        extra = "".join(f", {k} {entry[k]:.3f}" for k in ("R@0.3", "R@0.5") if entry.get(k) is not None)
        types = ", ".join(f"{t or '-'} {v:.3f}" for t, v in entry["per_type"].items())
        lines.append(f"  {task}: {entry['questions']} questions, {entry['invalid']} invalid, "
                     f"{METRIC[task]} {value}{extra}; per type: {types}")
    c = result["costs"]
    lines.append(f"  per question: {c['llm_calls_per_question']:.1f} LLM calls, {c['tokens_per_question']:.0f} tokens, "
                 f"{c['frames_viewed_per_question']:.1f} frames viewed, {c['seconds_per_question']:.1f} s, {format_usd(c)}")
    return lines
