"""Scores of an answer run, as each benchmark's own evaluation computes them: accuracy (overall, per
question type and category) for multiple choice, mIoU and recall at IoU thresholds for temporal
localisation (per question and, as LITA reports it, per video), token F1 for open answers; a 95%
bootstrap interval beside each mean. Invalid answers are counted apart and score zero (ActivityNet-RTL:
the whole video, as LITA scores them); they are never replaced by a guess."""

import json
import re
from collections import defaultdict

import numpy as np

# Resamples of the percentile bootstrap behind each 95% interval; a fixed seed makes a report
# reproducible.
RESAMPLES = 1000


def is_failure(error: str) -> bool:
    """A question whose LLM calls failed past the retry budget (a timeout, a dead endpoint): not an
    answer, counted apart from invalid answers and asked again next run."""
    return error.startswith("LLMError")


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


def score(row: dict, question: dict | None = None) -> float | None:
    """The question's score in 0..1 (None when its ground truth is unknown); `question` is the row's
    question_json, parsed, where the caller has it."""
    question = question or json.loads(row["question_json"])
    truth = question["answer"]
    if truth is None:
        return None
    predicted = json.loads(row["prediction_json"]) if row["valid"] else None
    if row["task"] == "rtl" and question.get("duration"):
        # As LITA's eval_model_rtl.py scores ActivityNet-RTL: an answer without a span counts as the
        # whole video, a span is clamped into the video.
        duration = question["duration"]
        return iou(sorted(min(max(t, 0.0), duration) for t in predicted) if predicted else [0.0, duration], truth)
    if predicted is None:
        return 0.0
    if row["task"] == "mcq":
        return float(predicted == truth)
    if row["task"] == "rtl":
        return iou(predicted, truth)
    return token_f1(predicted, str(truth))


def interval(scores: list[float]) -> tuple[float, float] | None:
    """The 95% percentile-bootstrap interval of the mean score, questions resampled with replacement."""
    if len(scores) < 2:
        return None
    # Sorted, so the interval does not depend on the order the rows were read in (evaluate and the
    # report read them in different orders; the resampled indices would pick different questions).
    values = np.sort(np.asarray(scores, dtype=float))
    means = values[np.random.default_rng(0).integers(0, len(values), (RESAMPLES, len(values)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


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


def _task_entry(task: str, items: list[dict], benchmark) -> dict:
    questions = [json.loads(r["question_json"]) for r in items]
    scored = [(r, q, s) for r, q in zip(items, questions) if (s := score(r, q)) is not None]
    # Questions of one unit (Causal-VidQA's answer and reason) score as one: right only when all are.
    units: dict[str, list] = defaultdict(list)
    for i, (_, q, s) in enumerate(scored):
        units[q.get("unit") or i].append((q, s))
    unit_scores = [(parts[0][0], min(s for _, s in parts)) for parts in units.values()]
    # Rows stored before these columns existed hold nulls.
    failed = sum(is_failure(r.get("error") or "") for r in items)
    entry = {"questions": len(items), "scored": len(scored), "failed": failed,
             "invalid": sum(not r["valid"] for r in items) - failed,
             "score": float(np.mean([s for _, s in unit_scores])) if unit_scores else None,
             "interval": interval([s for _, s in unit_scores])}
    if len(units) < len(scored):
        entry["units"] = len(units)
    if task == "rtl":
        entry |= {f"R@{t}": sum(s >= t for *_, s in scored) / len(scored) if scored else None for t in (0.3, 0.5)}
        # LITA reports ActivityNet-RTL averaged per video first, then over videos.
        by_video = defaultdict(list)
        for _, q, s in scored:
            by_video[q["video"]].append(s)
        videos = list(by_video.values())
        entry |= {"mIoU per video": float(np.mean([np.mean(v) for v in videos])) if videos else None,
                  "P@0.5 per video": float(np.mean([np.mean([s >= 0.5 for s in v]) for v in videos]))
                  if videos else None}
    per_type, per_category = defaultdict(list), defaultdict(list)
    for r, _, s in scored:
        per_type[r["qtype"]].append(s)
    for q, s in unit_scores:
        for category in q.get("categories", []):
            per_category[category].append(s)
    entry["per_type"] = {t: sum(v) / len(v) for t, v in sorted(per_type.items())}
    entry["per_category"] = {c: sum(v) / len(v) for c, v in sorted(per_category.items())}
    # A benchmark whose headline is the mean of its categories (STAR's "Mean" of its four question types)
    # gets it beside the mean over questions.
    if benchmark is not None and benchmark.headline == "mean of categories" and entry["per_category"]:
        entry["mean of categories"] = float(np.mean(list(entry["per_category"].values())))
    return entry


def report(rows: list[dict], prices: dict | None = None, benchmark=None) -> dict:
    """Per task: count, invalid, mean score (accuracy / mIoU / token F1) over its scoring units, extras;
    plus costs, money per question included when `prices` covers every model the run used. `benchmark`
    (its record) says where the headline number is computed its own way."""
    by_task: dict[str, list] = defaultdict(list)
    for row in rows:
        by_task[row["task"]].append(row)
    tasks = {task: _task_entry(task, items, benchmark) for task, items in sorted(by_task.items())}
    n = max(len(rows), 1)
    calls = sum(r["llm_calls"] for r in rows)
    costs = {"llm_calls_per_question": calls / n,
             # Cached replies count at the tokens they cost when made; this says how many there were.
             "cached_share": sum(r.get("cache_hits") or 0 for r in rows) / calls if calls else 0.0,
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


def format_score(entry: dict, interval_label: str = "") -> str:
    value = "n/a" if entry["score"] is None else f"{entry['score']:.3f}"
    if entry["interval"]:
        value += " ({}{:.3f}-{:.3f})".format(interval_label, *entry["interval"])
    return value


EXTRAS = ("R@0.3", "R@0.5", "mIoU per video", "P@0.5 per video", "mean of categories")


def format_report(method: str, key: str, result: dict) -> list[str]:
    lines = [f"{method}  ({key})"]
    for task, entry in result["tasks"].items():
        value = format_score(entry, "95% CI ")
        if "units" in entry:
            value += f" over {entry['units']} units (a unit right only when all its questions are)"
        extra = "".join(f", {k} {entry[k]:.3f}" for k in EXTRAS if entry.get(k) is not None)
        groups = "; per type: " + ", ".join(f"{t or '-'} {v:.3f}" for t, v in entry["per_type"].items())
        if entry["per_category"]:
            groups += "; per category: " + ", ".join(f"{c} {v:.3f}" for c, v in entry["per_category"].items())
        # EgoSchema's full set: only its public subset has answers here; its grader scores the rest.
        unknown = entry["questions"] - entry["scored"]
        counted = f"{entry['questions']} questions" + (f" ({unknown} without a known answer)" if unknown else "")
        failed = f", {entry['failed']} failed (LLM errors, asked again next run)" if entry["failed"] else ""
        lines.append(f"  {task}: {counted}, {entry['invalid']} invalid{failed}, {METRIC[task]} {value}{extra}{groups}")
    c = result["costs"]
    lines.append(f"  per question: {c['llm_calls_per_question']:.1f} LLM calls ({c['cached_share']:.0%} from the "
                 f"reply cache), {c['tokens_per_question']:.0f} tokens, "
                 f"{c['frames_viewed_per_question']:.1f} frames viewed, {c['seconds_per_question']:.1f} s, {format_usd(c)}")
    return lines


def format_comparison(runs: list[tuple[str, str]], rows: list[dict], benchmarks: dict | None = None) -> list[str]:
    """Several runs side by side, scored only on the questions every one of them answered: a run that
    answered other questions is not comparable on its own numbers. Says how many questions they share."""
    answered = {key: {r["qid"] for r in rows if r["run_key"] == key} for _, key in runs}
    shared = set.intersection(*answered.values())
    if all(qids == shared for qids in answered.values()):
        lines = [f"compared on the same {len(shared)} questions:"]
    else:
        counts = ", ".join(f"{method} {len(answered[key])}" for method, key in runs)
        lines = [f"the runs answered different questions ({counts}); compared on the {len(shared)} they share:"]
    for method, key in runs:
        result = report([r for r in rows if r["run_key"] == key and r["qid"] in shared],
                        benchmark=(benchmarks or {}).get(key))
        for task, entry in result["tasks"].items():
            lines.append(f"  {method:<22} {key:<22} {task:<4} {METRIC[task]} {format_score(entry)}, {entry['invalid']} invalid, "
                         f"{entry['failed']} failed")
    return lines
