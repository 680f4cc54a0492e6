"""Scores of an answer run, as each benchmark's own evaluation computes them: accuracy (overall, per
question type and category) for multiple choice, mIoU and recall at IoU thresholds for temporal
localisation (per question and, as LITA reports it, per video), token F1 for open answers; a 95%
bootstrap interval beside each figure, videos resampled (questions cluster in videos); and runs
compared pair by pair on the questions they share, with a paired interval and test.

Invalid answers are counted apart and score zero (ActivityNet-RTL: the whole video, as LITA scores
them); they are never replaced by a guess. Failed and refused questions (no answer came back) are left
out of every figure and shown as coverage."""

import json
import math
import re
import shlex
from collections import defaultdict
from collections.abc import Iterable

import numpy as np

# Resamples of the percentile bootstrap behind each 95% interval; a fixed seed makes a report
# reproducible.
RESAMPLES = 1000


def is_failure(error: str) -> bool:
    """A question whose LLM calls failed past the retry budget (a timeout, a dead endpoint): not an
    answer, counted apart from invalid answers and asked again next run."""
    return error.startswith("LLMError")


def is_refused(error: str) -> bool:
    """A question the endpoint refused (a 400, 413 or 422, such as a prompt past the context window): it
    would be refused again, so it is not asked again unless `answer.retry_refused=true`."""
    return error.startswith("LLMRefused")


def not_an_answer(error: str) -> str:
    """What a prediction that is not a valid answer is, by its error: failed, refused or invalid."""
    return "failed" if is_failure(error) else "refused" if is_refused(error) else "invalid"


# Questions named one per line at the end of a run and in the report; the rest are counted.
NAMED_PROBLEMS = 20


def problem_lines(rows: list[dict]) -> list[str]:
    """"QID: KIND: REASON" for each prediction that is not a valid answer, in the order given."""
    return [f"{row['qid']}: {not_an_answer(row['error'])}: {' '.join(row['error'].split())[:300]}"
            for row in rows if not row["valid"]]


def is_unanswered(row: dict) -> bool:
    """No answer came back (failed or refused): the question is left out of scores, not scored wrong."""
    error = row.get("error") or ""
    return is_failure(error) or is_refused(error)


def incomplete_note(record: dict, rows: list[dict]) -> str:
    """A line saying an answer run has fewer answered questions than it asked (its dataset, after its
    answer.per_type and answer.limit), with the command that completes it; "" when it is complete."""
    answered = sum(not is_unanswered(r) for r in rows)
    asked = record.get("questions")
    if asked is None:
        return (f"incomplete: {answered} questions have an answer, and the run left no record (killed before it "
                "was recorded); run its `vidprep answer` command again to complete it")
    if answered >= asked:
        return ""
    return (f"incomplete: {answered} of the {asked} questions asked have an answer ({len(rows) - answered} failed "
            f"or refused, {asked - len(rows)} not asked yet); complete it with {completing_command(record)}")


def completing_command(record: dict) -> str:
    """The command that asks an answer run's questions again (those answered are skipped): its own
    command line, where it was a Hydra job's."""
    overrides = (record.get("provenance") or {}).get("overrides")
    return f"`{shlex.join(['vidprep', 'answer', *overrides])}`" if overrides else "`vidprep answer` with the run's settings"


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


class Resamples:
    """Bootstrap draws of clusters (videos, or single questions) with replacement, drawn once from the
    clusters sorted by name with a fixed seed: a figure does not depend on the order its rows were read
    in, and every figure over the same clusters uses the same draws, which keeps two runs' answers to
    one question paired."""

    def __init__(self, clusters: Iterable[str], resamples: int = RESAMPLES):
        self.names = sorted(set(clusters))
        self._position = {name: i for i, name in enumerate(self.names)}
        self.draws = np.random.default_rng(0).integers(0, len(self.names), (resamples, len(self.names)))

    def means(self, values: list[float], clusters: list[str]) -> np.ndarray:
        """The mean of `values` (each in its cluster) in every resample; NaN where a resample drew none."""
        where = np.array([self._position[c] for c in clusters], dtype=int)
        sums = np.bincount(where, weights=np.asarray(values, dtype=float), minlength=len(self.names))
        counts = np.bincount(where, minlength=len(self.names))
        with np.errstate(invalid="ignore", divide="ignore"):
            return sums[self.draws].sum(axis=1) / counts[self.draws].sum(axis=1)


def percentiles(resampled: np.ndarray) -> tuple[float, float] | None:
    """The 95% percentile interval of a figure's resampled values."""
    finite = resampled[np.isfinite(resampled)]
    if len(finite) < len(resampled) / 2:
        return None
    low, high = np.percentile(finite, [2.5, 97.5])
    return float(low), float(high)


def interval(scores: list[float], clusters: list[str]) -> tuple[float, float] | None:
    """The 95% percentile-bootstrap interval of the mean score, clusters (each score's video, or its
    question) resampled with replacement; none from fewer than 2 clusters."""
    if len(set(clusters)) < 2:
        return None
    return percentiles(Resamples(clusters).means(scores, clusters))


def question_usd(row: dict, prices: dict) -> tuple[float | None, set[str]]:
    """A question's price from its tokens per model and `prices` (USD per 1M input / output tokens per
    model); None with the models that have no price (or when the row predates per-model usage)."""
    usage = json.loads(row.get("usage_json") or "null")
    if usage is None:
        return None, {"(not recorded)"}
    # A model that spent no tokens costs nothing, priced or not (random's client is never called).
    used = {model: u for model, u in usage.items() if u["prompt_tokens"] or u["completion_tokens"]}
    unpriced = {model for model in used if model not in prices}
    if unpriced:
        return None, unpriced
    return sum((u["prompt_tokens"] * prices[m]["input"] + u["completion_tokens"] * prices[m]["output"]) / 1e6
               for m, u in used.items()), set()


def scoring_units(rows: list[dict], questions: list[dict]) -> dict[str, list[tuple[dict, dict]]]:
    """Rows with their questions by scoring unit: Causal-VidQA's answer and reason are one unit, any other
    question its own."""
    units: dict[str, list] = defaultdict(list)
    for row, question in zip(rows, questions):
        units[question.get("unit") or row["qid"]].append((row, question))
    return units


def unit_score(parts: list[tuple[dict, dict]]) -> float | None:
    """A unit's score, right only when all its questions are; None where a part has no answer (failed,
    refused) or no known ground truth."""
    if any(is_unanswered(row) for row, _ in parts):
        return None
    scores = [score(row, question) for row, question in parts]
    return None if None in scores else min(scores)


def _cluster(question: dict, unit: str, by: str) -> str:
    # Rows stored before questions named their video are their own cluster.
    return question.get("video", unit) if by == "video" else unit


def _task_entry(task: str, items: list[dict], benchmark, by: str) -> dict:
    questions = [json.loads(r["question_json"]) for r in items]
    units = scoring_units(items, questions)
    unit_of = {row["qid"]: unit for unit, parts in units.items() for row, _ in parts}
    answered = [(r, q) for r, q in zip(items, questions) if not is_unanswered(r)]
    scored = [(r, q, s) for r, q in answered if (s := score(r, q)) is not None]
    unit_scores = [(unit, parts[0][1], s) for unit, parts in units.items() if (s := unit_score(parts)) is not None]
    resamples = Resamples(_cluster(q, unit_of[r["qid"]], by) for r, q, _ in scored)
    enough = len(resamples.names) >= 2

    def figure(values: list[float], clusters: list[str]) -> tuple[float, float] | None:
        return percentiles(resamples.means(values, clusters)) if enough and values else None

    values, clusters = [s for *_, s in unit_scores], [_cluster(q, u, by) for u, q, _ in unit_scores]
    entry = {"questions": len(items), "scored": len(scored),
             "failed": sum(is_failure(r.get("error") or "") for r in items),
             "refused": sum(is_refused(r.get("error") or "") for r in items),
             "invalid": sum(not r["valid"] for r, _ in answered),
             "unknown": len(answered) - len(scored),
             "score": float(np.mean(values)) if values else None, "interval": figure(values, clusters),
             "resampled": by}
    intervals: dict = {"per_type": {}, "per_category": {}}
    if any(len(parts) > 1 for parts in units.values()):
        entry["units"] = len(unit_scores)
    if task == "rtl":
        entry |= {f"R@{t}": sum(s >= t for *_, s in scored) / len(scored) if scored else None for t in (0.3, 0.5)}
        # LITA reports ActivityNet-RTL averaged per video first, then over videos: a figure over videos,
        # resampled by video whatever `by` says.
        by_video = defaultdict(list)
        for _, q, s in scored:
            by_video[q["video"]].append(s)
        videos = sorted(by_video)
        per_video = Resamples(videos) if len(videos) >= 2 else None
        for name, of_video in (("mIoU per video", np.mean), ("P@0.5 per video", lambda v: np.mean([s >= 0.5 for s in v]))):
            video_values = [float(of_video(by_video[v])) for v in videos]
            entry[name] = float(np.mean(video_values)) if videos else None
            intervals[name] = percentiles(per_video.means(video_values, videos)) if per_video else None
    per_type, per_category = defaultdict(list), defaultdict(list)
    for r, q, s in scored:
        per_type[r["qtype"]].append((s, _cluster(q, unit_of[r["qid"]], by)))
    for unit, q, s in unit_scores:
        for category in q.get("categories", []):
            per_category[category].append((s, _cluster(q, unit, by)))
    for name, groups in (("per_type", per_type), ("per_category", per_category)):
        entry[name] = {g: float(np.mean([v for v, _ in pairs])) for g, pairs in sorted(groups.items())}
        intervals[name] = {g: figure(*map(list, zip(*pairs))) for g, pairs in sorted(groups.items())}
    # A benchmark whose headline is the mean of its categories (STAR's "Mean" of its four question types)
    # gets it beside the mean over questions, its interval from the same draws.
    if benchmark is not None and benchmark.headline == "mean of categories" and entry["per_category"]:
        entry["mean of categories"] = float(np.mean(list(entry["per_category"].values())))
        if enough:
            stacked = np.stack([resamples.means(*map(list, zip(*pairs))) for pairs in per_category.values()])
            intervals["mean of categories"] = percentiles(stacked.mean(axis=0))
    entry["intervals"] = intervals
    return entry


def report(rows: list[dict], prices: dict | None = None, benchmark=None, by: str = "video") -> dict:
    """Per task: counts (failed, refused, invalid), mean score (accuracy / mIoU / token F1) over its
    scoring units, extras, and each figure's interval (`by`: what the bootstrap resamples); plus costs,
    money per question included when `prices` covers every model the run used. `benchmark` (its record)
    says where the headline number is computed its own way."""
    by_task: dict[str, list] = defaultdict(list)
    for row in rows:
        by_task[row["task"]].append(row)
    tasks = {task: _task_entry(task, items, benchmark, by) for task, items in sorted(by_task.items())}
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


def coverage(entry: dict) -> str:
    """How many questions the figures stand on, and what is missing: "scored 230 of 241; 11 failed; rerun
    to complete"."""
    parts = [f"scored {entry['scored']} of {entry['questions']}"]
    if entry["unknown"]:
        parts.append(f"{entry['unknown']} without a known answer")
    if entry["failed"]:
        parts.append(f"{entry['failed']} failed (LLM errors); rerun to complete")
    if entry["refused"]:
        parts.append(f"{entry['refused']} refused by the endpoint (answer.retry_refused=true asks them again)")
    return "; ".join(parts)


def _with_interval(value: float, found: tuple[float, float] | None) -> str:
    return f"{value:.3f}" + (" ({:.3f}-{:.3f})".format(*found) if found else "")


def format_categories(entry: dict) -> str:
    """A task's headline groups (NExT-QA's causal, temporal and descriptive families, STAR's question
    types, Perception Test's areas and reasoning), each with its interval: "C 0.512 (0.401-0.620), ..."."""
    return ", ".join(f"{c} {_with_interval(v, entry['intervals']['per_category'].get(c))}"
                     for c, v in entry["per_category"].items())


def format_report(method: str, key: str, result: dict) -> list[str]:
    lines = [f"{method}  ({key})"]
    for task, entry in result["tasks"].items():
        value = format_score(entry, "95% CI ")
        if "units" in entry:
            value += f" over {entry['units']} units (a unit right only when all its questions are)"
        intervals = entry["intervals"]
        extra = "".join(f", {k} {_with_interval(entry[k], intervals.get(k))}" for k in EXTRAS if entry.get(k) is not None)
        groups = "; per type: " + ", ".join(f"{t or '-'} {_with_interval(v, intervals['per_type'].get(t))}"
                                           for t, v in entry["per_type"].items())
        if entry["per_category"]:
            groups += "; per category: " + format_categories(entry)
        lines.append(f"  {task}: {coverage(entry)}; {entry['invalid']} invalid (scored wrong); {METRIC[task]} "
                     f"{value}{extra}{groups}")
    c = result["costs"]
    lines.append(f"  per question: {c['llm_calls_per_question']:.1f} LLM calls ({c['cached_share']:.0%} from the "
                 f"reply cache), {c['tokens_per_question']:.0f} tokens, "
                 f"{c['frames_viewed_per_question']:.1f} frames viewed, {c['seconds_per_question']:.1f} s, {format_usd(c)}")
    return lines


def mcnemar_exact(a_right: list[bool], b_right: list[bool]) -> float:
    """McNemar's exact test (two-sided): the binomial test of the questions only one of the runs got right."""
    only_a = sum(a and not b for a, b in zip(a_right, b_right))
    only_b = sum(b and not a for a, b in zip(a_right, b_right))
    n = only_a + only_b
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(only_a, only_b) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


# Sign flips of a paired permutation test: every one up to 2**EXACT_FLIPS, else this many drawn (seeded).
EXACT_FLIPS, DRAWN_FLIPS = 16, 20000


def sign_flip_test(differences: list[float]) -> float:
    """A paired permutation test (two-sided) of a mean difference: how often flipping the signs of the
    per-question differences gives a mean at least as far from 0."""
    d = np.asarray([x for x in differences if x != 0], dtype=float)
    if not len(d):
        return 1.0
    if len(d) <= EXACT_FLIPS:
        signs = 1 - 2 * ((np.arange(2 ** len(d))[:, None] >> np.arange(len(d))) & 1)
        return float(np.mean(np.abs(signs @ d) >= abs(d.sum()) - 1e-12))
    signs = np.random.default_rng(0).choice([-1.0, 1.0], (DRAWN_FLIPS, len(d)))
    return float((np.sum(np.abs(signs @ d) >= abs(d.sum()) - 1e-12) + 1) / (DRAWN_FLIPS + 1))


def paired_difference(task: str, a: dict[str, tuple[str, float]], b: dict[str, tuple[str, float]],
                      by: str) -> dict:
    """Run a minus run b on the units both scored (`a`, `b`: unit -> (its video, score)): the mean
    difference, its 95% bootstrap interval (the same draws of clusters for both runs) and a paired test,
    McNemar's exact test for multiple choice, else a sign-flip permutation test."""
    shared = sorted(set(a) & set(b))
    differences = [a[u][1] - b[u][1] for u in shared]
    clusters = [a[u][0] if by == "video" else u for u in shared]
    found = interval(differences, clusters) if shared else None
    if task == "mcq":
        test, p = "McNemar exact", mcnemar_exact([a[u][1] == 1.0 for u in shared], [b[u][1] == 1.0 for u in shared])
    else:
        test, p = "sign-flip permutation", sign_flip_test(differences)
    return {"task": task, "shared": len(shared), "difference": float(np.mean(differences)) if shared else None,
            "interval": found, "test": test, "p": p,
            "excludes_zero": found is not None and (found[0] > 0 or found[1] < 0)}


def _unit_scores(rows: list[dict]) -> dict[str, dict[str, tuple[str, float]]]:
    """Per task, each scored unit's video and score."""
    by_task: dict[str, dict] = defaultdict(dict)
    questions = [json.loads(r["question_json"]) for r in rows]
    for unit, parts in scoring_units(rows, questions).items():
        if (value := unit_score(parts)) is not None:
            by_task[parts[0][0]["task"]][unit] = (_cluster(parts[0][1], unit, "video"), value)
    return by_task


def comparison(runs: list[tuple[str, str]], rows: list[dict], benchmarks: dict | None = None,
               by: str = "video") -> dict:
    """Runs compared on the questions every one of them answered: a question that failed or was refused
    in any run is left out, and so is a unit (Causal-VidQA's answer and reason) any part of which is.
    Each run's report on those questions, and each pair's paired difference per task."""
    answered = {key: {r["qid"] for r in rows if r["run_key"] == key and not is_unanswered(r)} for _, key in runs}
    asked = {key: {r["qid"] for r in rows if r["run_key"] == key} for _, key in runs}
    shared = set.intersection(*answered.values())
    unit_of = {row["qid"]: json.loads(row["question_json"]).get("unit") for row in rows}
    parts: dict[str, set] = defaultdict(set)
    for qid, unit in unit_of.items():
        if unit:
            parts[unit].add(qid)
    shared = {q for q in shared if not unit_of[q] or parts[unit_of[q]] <= shared}
    mine = {key: [r for r in rows if r["run_key"] == key and r["qid"] in shared] for _, key in runs}
    units = {key: _unit_scores(mine[key]) for _, key in runs}
    pairs = []
    for i, (method_a, key_a) in enumerate(runs):
        for method_b, key_b in runs[i + 1:]:
            for task in sorted(set(units[key_a]) & set(units[key_b])):
                pairs.append({"a": (method_a, key_a), "b": (method_b, key_b),
                              **paired_difference(task, units[key_a][task], units[key_b][task], by)})
    return {"shared": len(shared), "same": all(q == shared for q in asked.values()),
            "answered": {key: len(q) for key, q in answered.items()}, "resampled": by,
            "reports": {key: report(mine[key], benchmark=(benchmarks or {}).get(key), by=by) for _, key in runs},
            "pairs": pairs}


def format_comparison(runs: list[tuple[str, str]], rows: list[dict], benchmarks: dict | None = None,
                      by: str = "video") -> list[str]:
    """Several runs side by side on the questions every one of them answered, then each pair's
    difference with its paired interval and test."""
    compared = comparison(runs, rows, benchmarks, by)
    if compared["same"]:
        lines = [f"compared on the same {compared['shared']} questions:"]
    else:
        counts = ", ".join(f"{method} {compared['answered'][key]}" for method, key in runs)
        lines = [f"the runs answered different questions ({counts} answered); compared on the {compared['shared']} "
                 "every run answered:"]
    for method, key in runs:
        for task, entry in compared["reports"][key]["tasks"].items():
            lines.append(f"  {method:<22} {key:<22} {task:<4} {METRIC[task]} {format_score(entry, '95% CI ')}, "
                         f"{entry['invalid']} invalid")
    if compared["pairs"]:
        lines.append(f"paired differences (first minus second, on the questions both scored; the interval "
                     f"resamples {by}s):")
    for pair in compared["pairs"]:
        lines.append("  " + format_pair(pair))
    return lines


def format_pair(pair: dict) -> str:
    (method_a, key_a), (method_b, key_b) = pair["a"], pair["b"]
    if pair["difference"] is None:
        return f"{method_a} ({key_a}) - {method_b} ({key_b}) {pair['task']}: no shared scored questions"
    found = " (95% CI {:+.3f} to {:+.3f})".format(*pair["interval"]) if pair["interval"] else ""
    return (f"{method_a} ({key_a}) - {method_b} ({key_b}) {pair['task']}: {pair['difference']:+.3f}{found}, "
            f"{pair['test']} p={pair['p']:.3g}, excludes 0: {'yes' if pair['excludes_zero'] else 'no'}, "
            f"{pair['shared']} shared")
