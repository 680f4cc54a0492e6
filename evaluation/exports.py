"""Files written from an answer run for tools outside vidprep: the benchmark's own evaluation or
submission file, where it has one, and one JSON line per question in the manner of lmms-eval's sample
logs (question, prediction, target, score, trace id)."""

import json
from pathlib import Path

from vidprep.evaluation.scoring import METRIC, score
from vidprep.store.store import ArtifactMissing, Store


def nextqa_results(rows: list[dict]) -> dict:
    """The result file NExT-QA's eval_mc.py reads, as do IntentQA's eval_intentqa.py and Causal-VidQA's
    eval_mc.py: {question key: {answer, prediction}}, in question key order (Causal-VidQA's script reads
    each video's six keys in a row); an invalid answer is prediction -1, which they count wrong."""
    return {r["qid"]: {"answer": json.loads(r["question_json"])["answer"],
                       "prediction": json.loads(r["prediction_json"]) if r["valid"] else -1} for r in rows}


def egoschema_answers(rows: list[dict]) -> dict:
    """The file EgoSchema's validate.py sends to its grading server: {q_uid: chosen option}; an
    invalid answer is -1, which matches no option."""
    return {r["qid"]: json.loads(r["prediction_json"]) if r["valid"] else -1 for r in rows}


def lvbench_answers(rows: list[dict]) -> dict:
    """The answer file LVBench's compute_accuracy.py reads: {uid: letter}; an invalid answer is "",
    which it counts wrong."""
    return {r["qid"]: "ABCD"[json.loads(r["prediction_json"])] if r["valid"] else "" for r in rows}


# Dataset name (as the answer run recorded it) -> (file name, what the benchmark's tool reads).
SUBMISSIONS = {
    "nextqa": ("nextqa_results.json", nextqa_results),
    "nextqa_dev": ("nextqa_results.json", nextqa_results),
    "intentqa": ("intentqa_results.json", nextqa_results),
    "causal_vidqa": ("causal_vidqa_results.json", nextqa_results),
    "egoschema": ("egoschema_answers.json", egoschema_answers),
    "lvbench": ("lvbench_answers.json", lvbench_answers),
}


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
    if submission := SUBMISSIONS.get(store.answer_runs().get(key, {}).get("dataset")):
        name, make = submission
        (folder / name).write_text(json.dumps(make(rows), indent=1) + "\n")
        written.append(folder / name)
    return written
