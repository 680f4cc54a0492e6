"""Files written from an answer run for tools outside vidprep: the benchmark's own evaluation or
submission file, where its record has one (`evaluation/benchmarks/`), and one JSON line per question in the manner of lmms-eval's sample
logs (question, prediction, target, score, trace id)."""

import json
from pathlib import Path

from vidprep.evaluation.benchmarks import run_benchmark
from vidprep.evaluation.scoring import METRIC, score
from vidprep.store.store import Store
from vidprep.conf.checks import ArtifactMissing


def sample_lines(rows: list[dict]) -> list[dict]:
    lines = []
    for r in rows:
        question = json.loads(r["question_json"])
        lines.append({"doc_id": r["qid"], "question": question["question"], "choices": question["choices"],
                      "qtype": r["qtype"], "categories": question.get("categories", []), "target": question["answer"],
                      "prediction": json.loads(r["prediction_json"]) if r["valid"] else None,
                      "valid": r["valid"], "error": r["error"], "metric": METRIC[r["task"]], "score": score(r, question),
                      "trace_id": r["row_id"]})
    return lines


def export_run(store: Store, key: str, folder: Path) -> list[Path]:
    """Write the run's files into `folder`; the paths written."""
    rows = sorted(store.predictions([key]), key=lambda r: r["qid"])
    if not rows:
        raise ArtifactMissing(f"answer run {key} has no predictions in {store.uri}")
    folder.mkdir(parents=True, exist_ok=True)
    samples = folder / "samples.jsonl"
    samples.write_text("".join(json.dumps(line) + "\n" for line in sample_lines(rows)))
    written = [samples]
    benchmark = run_benchmark(store.answer_runs().get(key, {}))
    if benchmark and benchmark.leaderboard:
        (folder / benchmark.leaderboard_file).write_text(json.dumps(benchmark.leaderboard(rows), indent=1) + "\n")
        written.append(folder / benchmark.leaderboard_file)
    return written
