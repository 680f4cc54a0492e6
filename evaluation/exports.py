"""Files written from an answer run for tools outside vidprep: the benchmark's own evaluation or
submission file, where its record has one (`evaluation/benchmarks/`), and one JSON line per question in the manner of lmms-eval's sample
logs (question, prediction, target, score, trace id)."""

import json
from pathlib import Path

from vidprep.evaluation.benchmarks import run_benchmark
from vidprep.evaluation.scoring import METRIC, completing_command, is_unanswered, score
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


def export_run(store: Store, key: str, folder: Path) -> tuple[list[Path], str]:
    """Write the run's files into `folder`: the paths written, and a line saying the run is incomplete
    ("" when it is not). The benchmark's file holds the questions that have an answer; where those are
    fewer than its dataset holds, the file's name says so, as its official script expects every one."""
    rows = sorted(store.predictions([key]), key=lambda r: r["qid"])
    if not rows:
        raise ArtifactMissing(f"answer run {key} has no predictions in {store.uri}")
    folder.mkdir(parents=True, exist_ok=True)
    samples = folder / "samples.jsonl"
    samples.write_text("".join(json.dumps(line) + "\n" for line in sample_lines(rows)))
    written, incomplete = [samples], ""
    record = store.answer_runs().get(key, {})
    answered = [r for r in rows if not is_unanswered(r)]
    # Runs recorded before the dataset's size was are taken as whole.
    total = record.get("dataset_questions") or len(rows)
    if len(answered) < total:
        incomplete = (f"incomplete: {len(answered)} of the dataset's {total} questions have an answer "
                      f"({len(rows) - len(answered)} failed or refused); the benchmark's file holds only those. "
                      f"Complete it with {completing_command(record)}, without answer.limit or answer.per_type")
    benchmark = run_benchmark(record)
    for name, write in (benchmark.leaderboards if benchmark else {}).items():
        path = folder / name
        if incomplete:
            path = path.with_name(f"{path.stem}.incomplete-{len(answered)}-of-{total}{path.suffix}")
        path.write_text(write(answered))
        written.append(path)
    return written, incomplete
