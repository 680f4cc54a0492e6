"""`vidprep answer` and `vidprep evaluate` end to end with the real local LLM, on the sample questions."""

import ast
import csv
import gzip
import io
import itertools
import json
import pickle
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml
import pytest
from omegaconf import OmegaConf

from vidprep.pipeline.answer import AnswerWorker, answer, asked_with_reasons
from vidprep.pipeline.plan import build_plan
from vidprep.store.keys import content_id
from vidprep.conf.checks import ManifestError
from vidprep.evaluation.tracking import track_answer_run
from vidprep.evaluation.benchmarks import (activitynet_rtl, causal_vidqa, egoschema, intentqa, jsonl, lvbench,
                                         neptune, nextqa, perception_test, star)
from vidprep.agents.base import Question
from vidprep.evaluation.benchmarks import run_benchmark
from vidprep.evaluation.scoring import format_comparison, interval, iou, report, token_f1
from vidprep.store.settings import StoreSettings
from vidprep.conf.checks import ArtifactMissing
from tests.conftest import SHARED_VIDEOS, config_for
from tests.official_scoring import (official_causal_vidqa_accuracy, official_lvbench_accuracy,
                                    official_nextqa_accuracy, official_star_accuracy)
from vidprep.jobs.bench.endpoint import ScriptedEndpoint, fitting_reply

FIXTURES = Path(__file__).parent / "fixtures"

# Small iteration limits keep the tiny model's runs short; the control flow at the paper's
# defaults is pinned in test_agents.py.
METHODS = {
    "videoagent2": ["method.max_steps=1"],
    # The first iteration's frames are the initial ones.
    "traveler": ["method.max_iterations=1", "method.questions=1", "method.initial_captions=2"],
    "caviar": ["method.max_steps=1"],
    "caviar_agent": ["method.max_steps=1"],
    "caviar_single_program": [],
    "direct": [],
    "direct_transcript": [],
    "llovi": [],
    "random": [],
}


# Each method that asks the real local LLM answers one sample question, the three tasks spread over the
# methods; random, which asks nothing, answers all 7.
TASK_OF = {"videoagent2": "mcq", "caviar": "mcq", "llovi": "mcq", "traveler": "rtl", "caviar_single_program": "rtl",
           "direct": "rtl", "caviar_agent": "open", "direct_transcript": "open"}


def one_question(sample_dir: Path, task: str) -> list[str]:
    """Overrides that ask only the sample's first question of `task` (its file beside the sample)."""
    path = sample_dir.parent / f"first-{task}.jsonl"
    if not path.exists():
        lines = (sample_dir / "questions.jsonl").read_text().splitlines()
        path.write_text(next(line for line in lines if json.loads(line)["task"] == task) + "\n")
    return [f"dataset.questions.path={path}", f"+dataset.questions.video_dir={sample_dir}"]


def sample_config(precomputed, sample_dir, method: str, *extra: str):
    cfg, _, _ = precomputed
    selection = one_question(sample_dir, TASK_OF[method]) if method in TASK_OF else []
    return config_for(cfg.store.uri, sample_dir, f"method={method}", *METHODS[method], *selection, *extra)


@pytest.fixture(scope="module")
def answered(precomputed, sample_dir):
    summaries = {m: answer(sample_config(precomputed, sample_dir, m)) for m in METHODS}
    return precomputed[1], summaries


@pytest.mark.parametrize("method", list(METHODS))
def test_every_method_gives_a_valid_answer_and_a_trace_for_every_question(answered, method):
    store, summaries = answered
    summary = summaries[method]
    rows = store.scan("predictions", f"run_key = '{summary.run_key}'").to_pylist()
    assert (summary.questions, summary.answered, len(rows)) == (1 if method in TASK_OF else 7,) * 3
    # The offline describer's labels: every method that reads captions says they are not a VLM's.
    offline = [w for w in summary.warnings if "describer=shipped" in w]
    assert bool(offline) == (method in ("videoagent2", "traveler", "llovi"))
    # vision=stored: a method that asks visual questions is told, loudly, that no vision model answers them.
    assert bool(set(summary.warnings) - set(offline)) == (method not in ("llovi", "random"))
    assert all(line.startswith("warning: ") for line in summary.lines()[:len(summary.warnings)])
    if method == "caviar_single_program":
        # The tiny model's one program, run in the sandbox; whether it calls finish is the model's doing
        # (both outcomes are pinned with scripted programs in test_agents.py).
        assert all(any(s["kind"] == "program_result" for s in json.loads(r["trace_json"])) for r in rows)
        assert all(r["valid"] or r["error"].startswith("InvalidAnswer: no strategy gave an answer") for r in rows)
    else:
        # The tiny model may place a span after the sample's end: invalid, never stored inverted.
        invalid = [r for r in rows if not r["valid"]]
        assert all(r["task"] == "rtl" and "is not a range inside the video" in r["error"] for r in invalid), invalid
        assert summary.invalid == len(invalid)
    for row in rows:
        trace = json.loads(row["trace_json"])
        assert trace, row["qid"]
        if method not in ("random",):
            assert row["llm_calls"] + row["cache_hits"] > 0 and any("prompt" in s for s in trace)
    if method == "traveler":
        assert all(r["visited"] for r in rows)
    scores = report(rows)
    assert set(scores["tasks"]) == ({TASK_OF[method]} if method in TASK_OF else {"mcq", "open", "rtl"})
    if "rtl" in scores["tasks"]:
        assert scores["tasks"]["rtl"]["R@0.5"] is not None


def test_rerun_answers_nothing_again(answered, precomputed, sample_dir):
    again = answer(sample_config(precomputed, sample_dir, "videoagent2"))
    assert (again.answered, again.skipped, again.llm_calls) == (0, 1, 0)


def test_evaluate_prints_scores_per_method_and_export_writes_each_question(answered, precomputed, tmp_path):
    cfg, _, _ = precomputed
    _, summaries = answered
    done = subprocess.run([sys.executable, "-m", "vidprep.jobs.cli", "evaluate", f"store.uri={cfg.store.uri}"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    for method in METHODS:
        assert method in done.stdout
    assert "accuracy" in done.stdout and "mIoU" in done.stdout and "invalid" in done.stdout
    assert "LLM calls" in done.stdout
    # The run that answered every task.
    key = summaries["random"].run_key
    one = subprocess.run([sys.executable, "-m", "vidprep.jobs.cli", "evaluate", "--run", key,
                          f"store.uri={cfg.store.uri}"], capture_output=True, text=True, timeout=120)
    assert one.returncode == 0 and one.stdout.count("(answer-") == 1 and f"({key})" in one.stdout, one.stderr
    assert "95% CI" in one.stdout and "compared on" in done.stdout and "compared on" not in one.stdout
    # Each run's settings as overrides of its method's defaults, not only its key.
    assert "  settings: method=videoagent2 method.max_steps=1\n" in done.stdout
    assert "  settings: method=traveler method.initial_captions=2 method.max_iterations=1 method.questions=1" in done.stdout
    assert "  settings: method=llovi\n" in done.stdout
    exported = subprocess.run([sys.executable, "-m", "vidprep.jobs.cli", "export", "--run", key, "--out",
                               str(tmp_path), f"store.uri={cfg.store.uri}"], capture_output=True, text=True, timeout=120)
    # The sample is no benchmark: no submission file, only the per-question lines.
    assert exported.returncode == 0 and exported.stdout.split() == ["written:", str(tmp_path / "samples.jsonl")]
    lines = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert len(lines) == 7 and {line["metric"] for line in lines} == {"accuracy", "mIoU", "token F1"}
    assert all(line["trace_id"].startswith(key) and line["target"] is not None for line in lines), lines


def test_multirun_sweep_reuses_the_same_store(answered, precomputed, sample_dir):
    cfg, _, _ = precomputed
    args = [sys.executable, "-m", "vidprep.jobs.cli", "answer", "--multirun", "method=videoagent2,caviar",
            f"store.uri={cfg.store.uri}", "dataset=folder", f"dataset.manifest={sample_dir}",
            "method.max_steps=1", *one_question(sample_dir, "mcq"), "ray.progress_bars=false",
            f"hydra.sweep.dir={cfg.store.uri}-sweep"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=600)
    for method in ("videoagent2", "caviar"):
        assert f"({method}): 1 questions, 0 answered now, 1 already answered" in done.stdout, done.stderr[-2000:]
    # Each job's folder holds its run's metrics; the store holds what the run was made of.
    recorded = answered[0].answer_runs()
    for job, method in enumerate(("videoagent2", "caviar")):
        folder = Path(f"{cfg.store.uri}-sweep") / str(job)
        assert f"({method}): 1 questions, 0 answered now" in (folder / "answer.log").read_text()
        metrics = json.loads((folder / "metrics.json").read_text())
        assert metrics["tasks"]["mcq"]["questions"] == 1 and "tokens_per_question" in metrics["costs"]
        origin = recorded[metrics["run_key"]]["provenance"]
        assert f"method={method}" in origin["overrides"] and origin["config"]["method"]["max_steps"] == 1
        assert origin["packages"]["lancedb"] and origin["packages"]["vidprep"]
        # The suite runs from a git checkout (CI clones one).
        assert len(origin["git"]["commit"]) == 40


def test_tracker_mlflow_logs_settings_metrics_and_predictions_to_a_local_store(answered, precomputed, sample_dir,
                                                                              tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path}/mlflow/mlflow.db"
    cfg = sample_config(precomputed, sample_dir, "random", "tracker=mlflow", f"tracker.tracking_uri={uri}",
                        f"tracker.artifact_location={tmp_path}/artifacts")
    summary = answer(cfg)
    # As `vidprep answer` does: the run's scores are evaluation's, logged once the run is answered.
    track_answer_run(cfg, summary.run_key, answered[0])
    client = MlflowClient(uri)
    [run] = client.search_runs([client.get_experiment_by_name("vidprep").experiment_id])
    assert run.info.run_name == summary.run_key and run.info.status == "FINISHED"
    assert run.data.params["method._target_"] == '"vidprep.agents.baselines.RandomChoice"'
    store = answered[0]
    want = report(store.predictions([summary.run_key]), benchmark=jsonl.BENCHMARK)["tasks"]["mcq"]
    assert run.data.metrics["mcq.score"] == pytest.approx(want["score"])
    assert run.data.metrics["mcq.questions"] == 3 and "costs.tokens_per_question" in run.data.metrics
    assert {a.path for a in client.list_artifacts(run.info.run_id)} == {"provenance.json", "metrics.json",
                                                                        "samples.jsonl"}
    samples = Path(client.download_artifacts(run.info.run_id, "samples.jsonl", str(tmp_path))).read_text()
    assert len(samples.splitlines()) == 7


def test_sweep_on_the_ray_launcher_runs_each_job_as_a_ray_task(precomputed, sample_dir):
    import ray

    cfg, store, _ = precomputed
    answer(sample_config(precomputed, sample_dir, "random"))
    # The jobs join this session's Ray, as a sweep joins a cluster through ray.address.
    address = ray.get_runtime_context().gcs_address
    args = [sys.executable, "-m", "vidprep.jobs.cli", "answer", "--multirun", "hydra/launcher=ray_jobs", "method=random",
            "method.seed=0,1", f"ray.address={address}", f"store.uri={cfg.store.uri}", "dataset=folder",
            f"dataset.manifest={sample_dir}", "ray.progress_bars=false", f"hydra.sweep.dir={cfg.store.uri}-ray-sweep"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    summaries = [line for line in done.stdout.splitlines() if "questions," in line]
    # Ray prefixes what a task prints with its function and process.
    assert len(summaries) == 2 and all("sweep_job pid=" in line for line in summaries), done.stdout[-3000:]
    assert sum("7 questions, 0 answered now, 7 already answered" in line for line in summaries) == 1
    fresh = next(line for line in summaries if "7 answered now" in line)
    run_key = fresh.split("run ")[1].split()[0]
    assert store.scan("predictions", f"run_key = '{run_key}'").num_rows == 7


def _caviar_reply(body: dict) -> str:
    """CAViAR's strategies all finish with choice 0 (scenes_first's ground truth); the critic names 1."""
    schema = body["response_format"]["json_schema"]["schema"]["properties"]
    if "code" in schema:
        return json.dumps({"thought": "the first scene", "code": "finish(0)"})
    if "winners" in schema:
        return json.dumps({"critique": "strategy 1 reads the frames", "winners": [1]})
    reply = json.loads(fitting_reply(body))
    return json.dumps(reply | {"answer": 0} if isinstance(reply.get("answer"), int) else reply)


def test_critic_examples_command_writes_a_caviar_runs_traces_and_refuses_other_runs(answered, precomputed,
                                                                                   sample_dir, tmp_path):
    cfg, _, _ = precomputed
    shutil.copytree(cfg.store.uri, tmp_path / "db")
    server = ScriptedEndpoint(reply=_caviar_reply)
    try:
        conf = config_for(tmp_path / "db", sample_dir, "method=caviar", "method.max_steps=1", "llm=openai",
                          f"llm.client.base_url={server.base_url}", "llm.client.model=scripted",
                          "llm.client.cache=false", "llm.client.max_retries=0")
        plan = build_plan(conf.stages)
        worker = AnswerWorker(OmegaConf.to_yaml(conf, resolve=True), StoreSettings.from_config(conf.store),
                              plan.keys, "caviar-probe", OmegaConf.to_container(conf.model, resolve=True),
                              plan.frames_per_caption)
        question = next(q for q in jsonl.load(str(sample_dir / "questions.jsonl")) if q.qid == "scenes_first")
        assert worker.answer({"question_json": json.dumps(question.to_dict()),
                              "video_id": content_id(sample_dir / "scenes.mp4")})[0]["valid"]
    finally:
        server.close()
    out = tmp_path / "examples.txt"
    done = subprocess.run([sys.executable, "-m", "vidprep.jobs.cli", "critic-examples", "--run", "caviar-probe",
                           "--out", str(out), f"store.uri={tmp_path / 'db'}"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    text = out.read_text()
    assert text.startswith("Example 1\nQuestion: What is shown at the very beginning of the video?")
    assert "Strategy 3 (modules: find_when, get_segment, retrieval_qa, asr_understanding, think, finish)" in text
    assert "Winners: [1, 2, 3]" in text
    store, summaries = answered
    wrong = subprocess.run([sys.executable, "-m", "vidprep.jobs.cli", "critic-examples", "--run",
                            summaries["llovi"].run_key, "--out", str(out), f"store.uri={cfg.store.uri}"],
                           capture_output=True, text=True, timeout=120)
    assert wrong.returncode != 0 and "is not a CAViAR answer run" in wrong.stderr


def test_answering_loads_no_precompute_model(answered, precomputed, sample_dir):
    cfg, _, _ = precomputed
    # CAViAR's run of `answered` again, on its question: its tools read every kind of artifact; the
    # replies come from the store's reply cache, so only what answering itself loads is loaded.
    overrides = [f"store.uri={cfg.store.uri}", "dataset=folder", f"dataset.manifest={sample_dir}", "method=caviar",
                 *METHODS["caviar"], *one_question(sample_dir, TASK_OF["caviar"])]
    code = f"""
import json, sys
from vidprep.jobs.config import load_config
from omegaconf import OmegaConf
from vidprep.pipeline.answer import AnswerWorker
from vidprep.pipeline.plan import build_plan
from vidprep.store.settings import StoreSettings
from vidprep.store.keys import content_id
from hydra.utils import instantiate
cfg = load_config({json.dumps(overrides)})
plan = build_plan(cfg.stages)
worker = AnswerWorker(OmegaConf.to_yaml(cfg, resolve=True), StoreSettings.from_config(cfg.store), plan.keys, "probe",
                      OmegaConf.to_container(cfg.model, resolve=True), plan.frames_per_caption)
question = instantiate(cfg.dataset.questions, _convert_="all")[0]
row, = worker.answer({{"question_json": json.dumps(question.to_dict()), "video_id": content_id(question.video)}})
watched = ["faster_whisper", "ctranslate2", "rapidocr_onnxruntime", "onnxruntime", "cv2", "av"]
print(json.dumps([row["llm_calls"], row["cache_hits"], sorted(m for m in watched if m in sys.modules)]))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    calls, cached, loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert calls == cached > 0 and loaded == []


def test_a_missing_artifact_names_the_precompute_command(precomputed, sample_dir):
    cfg = sample_config(precomputed, sample_dir, "llovi", "stages.segments.seconds=5")
    with pytest.raises(ArtifactMissing, match="Run `vidprep precompute`") as missing:
        answer(cfg)
    assert "describer=shipped" not in str(missing.value)
    # A paper experiment names a VLM captioner; the store holds the offline describer's captions: the error
    # says how to answer from those (the run then says its captions are not a VLM's).
    vlm = sample_config(precomputed, sample_dir, "llovi", "describer=vlm", "llm=openai",
                        "profile@llm.client.profile=gpt-4o-mini")
    with pytest.raises(ArtifactMissing, match=r"answered from with describer=shipped added \(the run is then marked"):
        answer(vlm)


@pytest.mark.skipif(not (SHARED_VIDEOS.parent / "nextqa-dev" / "val.csv").exists(), reason="no NExT-QA subset here")
def test_nextqa_loader_reads_the_real_csv(tmp_path):
    questions = nextqa.load(str(SHARED_VIDEOS.parent / "nextqa-dev" / "val.csv"), str(tmp_path))
    assert len(questions) == 355 and len({q.qid for q in questions}) == 355
    first = questions[0]
    assert first.task == "mcq" and len(first.choices) == 5 and first.answer == 3
    assert (first.qtype, first.categories) == ("CW", ["causal"]) and first.video == str(tmp_path / "8132842161.mp4")
    # eval_mc.py scores its two TP ("previous") questions as TN.
    assert {q.qtype for q in questions} == {"CW", "CH", "TN", "TC", "DC", "DL", "DO"}
    rows = (SHARED_VIDEOS.parent / "nextqa-dev" / "val.csv").read_text().splitlines()
    (tmp_path / "bad.csv").write_text("\n".join([rows[0], rows[1], rows[2].replace(",CW,", ",XX,")]) + "\n")
    with pytest.raises(ManifestError, match=r"bad.csv:3 \(question \d+_\d+\): not a NExT-QA-style row \(type 'XX' is none of"):
        nextqa.load(str(tmp_path / "bad.csv"), str(tmp_path))


def test_nextqa_whole_released_val_file_loads_and_scores_as_eval_mc_and_exports_its_result_file(tmp_path):
    # NExT-QA's val.csv as released (4,996 questions; MIT licence; tests/fixtures/README.md).
    csv_path = tmp_path / "val.csv"
    csv_path.write_bytes(gzip.decompress((FIXTURES / "nextqa_val.csv.gz").read_bytes()))
    csv_rows = list(csv.DictReader(csv_path.open()))
    questions = nextqa.load(str(csv_path), str(tmp_path))
    assert len(questions) == len(csv_rows) == 4996
    rng = np.random.default_rng(11)
    predicted = [int(rng.integers(0, 5)) if i % 50 else None for i in range(len(questions))]
    rows = prediction_rows(questions, predicted)
    results = json.loads(nextqa.BENCHMARK.leaderboards["nextqa_results.json"](rows))
    official = official_nextqa_accuracy(csv_rows, results)
    entry = report(rows)["tasks"]["mcq"]
    assert entry["score"] * 100 == pytest.approx(official["all"]) and entry["invalid"] == 100
    assert {t: v * 100 for t, v in entry["per_type"].items()} == pytest.approx(
        {t: v for t, v in official.items() if len(t) == 2})
    # One malformed row of the 4,996 stops the load, named by its line and its id.
    lines = csv_path.read_text().splitlines()
    lines[3001] = lines[3001].replace(f",{csv_rows[3000]['type']},", ",XX,")
    (tmp_path / "bad.csv").write_text("\n".join(lines) + "\n")
    named = f"{csv_rows[3000]['video']}_{csv_rows[3000]['qid']}"
    with pytest.raises(ManifestError, match=rf"bad.csv:3002 \(question {named}\): not a NExT-QA-style row"):
        nextqa.load(str(tmp_path / "bad.csv"), str(tmp_path))


@pytest.mark.skipif(not (SHARED_VIDEOS.parent / "nextqa-dev" / "val.csv").exists(), reason="no NExT-QA subset here")
def test_nextqa_scores_as_its_official_script_on_real_rows(tmp_path):
    csv_path = SHARED_VIDEOS.parent / "nextqa-dev" / "val.csv"
    csv_rows = list(csv.DictReader(csv_path.open()))
    questions = nextqa.load(str(csv_path), str(tmp_path))
    # Right on every third question, a wrong choice on the others, and three invalid answers.
    rows, predictions = [], {}
    for i, question in enumerate(questions):
        choice = question.answer if i % 3 == 0 else (question.answer + 1) % 5
        valid = i not in (4, 40, 400)
        predictions[question.qid] = {"answer": question.answer, "prediction": choice if valid else -1}
        rows.append({"qid": question.qid, "task": "mcq", "qtype": question.qtype,
                     "question_json": json.dumps(question.to_dict()),
                     "prediction_json": json.dumps(choice if valid else None), "valid": valid})
    official = official_nextqa_accuracy(csv_rows, predictions)
    entry = report([dict(r, llm_calls=0, prompt_tokens=0, completion_tokens=0, seconds=0.0, visited=[])
                    for r in rows])["tasks"]["mcq"]
    assert entry["score"] * 100 == pytest.approx(official["all"]) and entry["invalid"] == 2
    assert {t: v * 100 for t, v in entry["per_type"].items()} == pytest.approx(
        {t: v for t, v in official.items() if len(t) == 2})
    families = {"C": "causal", "T": "temporal", "D": "descriptive"}
    assert {f: v * 100 for f, v in entry["per_category"].items()} == pytest.approx(
        {families[t]: v for t, v in official.items() if len(t) == 1})
    low, high = entry["interval"]
    assert low < entry["score"] < high and high - low < 0.12


def test_intentqa_loads_its_real_rows_and_scores_as_its_eval_script(tmp_path):
    csv_path = FIXTURES / "intentqa_test_head.csv"
    questions = intentqa.load(str(csv_path), str(tmp_path))
    assert [q.qid for q in questions[:2]] == ["6102982194_2", "8319941339_7"]
    assert (questions[0].answer, questions[0].choices[2], questions[0].video) == (
        2, "to energise him", str(tmp_path / "6102982194.mp4"))
    # eval_intentqa.py counts its TP ("previous") questions as TN, like NExT-QA's.
    assert [q.qtype for q in questions].count("TN") == 4 and {q.qtype for q in questions} == {"CW", "CH", "TN"}
    predicted = [q.answer if i % 2 else (q.answer + 1) % 5 for i, q in enumerate(questions)]
    predicted[3] = None
    rows = prediction_rows(questions, predicted)
    official = official_nextqa_accuracy(list(csv.DictReader(csv_path.open())), nextqa.nextqa_results(rows), "video_id")
    entry = report(rows)["tasks"]["mcq"]
    assert entry["score"] * 100 == pytest.approx(official["all"]) and entry["invalid"] == 1
    assert {t: v * 100 for t, v in entry["per_type"].items()} == pytest.approx(
        {t: v for t, v in official.items() if len(t) == 2})
    with pytest.raises(ManifestError, match=r"intentqa_test_head.csv:2: not a NExT-QA-style row \('video'\)"):
        nextqa.load(str(csv_path), str(tmp_path))


# STAR_val.json's layout, as STAR's site documents it and public STAR loaders read it (its rows are a
# download; these are made, not real): the answer is a choice's text, the type the id's first part.
STAR_VAL = [
    {"question_id": "Interaction_T1_4", "question": "Which object was eaten by the person?", "video_id": "TJZ0P",
     "start": 7.7, "end": 15.7, "answer": "The sandwich.", "question_program": [], "situations": {},
     "choices": [{"choice_id": 1, "choice": "The medicine.", "choice_program": []},
                 {"choice_id": 0, "choice": "The sandwich.", "choice_program": []},
                 {"choice_id": 2, "choice": "The book.", "choice_program": []},
                 {"choice_id": 3, "choice": "The blanket.", "choice_program": []}]},
    {"question_id": "Sequence_T3_7", "question": "What did the person do after sitting on the bed?",
     "video_id": "0BNML", "start": 2.0, "end": 9.5, "answer": "Took the phone.",
     "choices": [{"choice_id": k, "choice": c} for k, c in
                 enumerate(["Opened the door.", "Took the phone.", "Closed the window.", "Ate the food."])]},
    {"question_id": "Sequence_T1_9", "question": "Which object did the person put down before they opened the door?",
     "video_id": "0BNML", "start": 0.0, "end": 12.0, "answer": "The cup.",
     "choices": [{"choice_id": k, "choice": c} for k, c in
                 enumerate(["The cup.", "The shoe.", "The pillow.", "The laptop."])]},
]


def test_star_loads_its_released_layout_and_reports_the_mean_of_its_types(tmp_path):
    (tmp_path / "STAR_val.json").write_text(json.dumps(STAR_VAL))
    questions = star.load(str(tmp_path / "STAR_val.json"), str(tmp_path))
    assert [(q.qid, q.answer, q.qtype, q.categories) for q in questions] == [
        ("Interaction_T1_4", 0, "Interaction_T1", ["Interaction"]), ("Sequence_T3_7", 1, "Sequence_T3", ["Sequence"]),
        ("Sequence_T1_9", 0, "Sequence_T1", ["Sequence"])]
    assert questions[0].choices[:2] == ["The sandwich.", "The medicine."]
    assert questions[0].video == str(tmp_path / "TJZ0P.mp4")
    assert [q.clip for q in questions] == [[7.7, 15.7], [2.0, 9.5], [0.0, 12.0]]
    entry = report(prediction_rows(questions, [0, 1, 2]), benchmark=star.BENCHMARK)["tasks"]["mcq"]
    # Over questions 2/3; STAR's "Mean" is the mean of its types' accuracies: (1 + 1/2) / 2.
    assert entry["score"] == pytest.approx(2 / 3) and entry["mean of categories"] == pytest.approx(0.75)
    assert "mean of categories" not in report(prediction_rows(questions, [0, 1, 2]))["tasks"]["mcq"]
    # STAR_test.json withholds the answer: its questions load unscored. Its choices listed out of choice_id
    # order show that the leaderboard file holds the id of the choice picked, not its place in the list.
    shuffled = [{k: v for k, v in q.items() if k != "answer"} | {"choices": q["choices"][::-1]} for q in STAR_VAL]
    (tmp_path / "STAR_test.json").write_text(json.dumps(shuffled))
    test_split = star.load(str(tmp_path / "STAR_test.json"), str(tmp_path))
    assert [q.answer for q in test_split] == [None] * 3
    written = json.loads(star.BENCHMARK.leaderboards["star_test_predictions.json"](
        prediction_rows(test_split, [2, 1, None])))
    # The id as the scripts' loader (Flipped-VQA's STAR dataset) derives it: {choice_id: choice}, then the index.
    ids = [next(c["choice_id"] for c in raw["choices"] if c["choice"] == q.choices[p])
           for raw, q, p in zip(shuffled, test_split, [2, 1])]
    assert ids == [2, 1] and written == {
        "Interaction": [{"question_id": "Interaction_T1_4", "answer": 2}],
        "Sequence": [{"question_id": "Sequence_T3_7", "answer": 1}, {"question_id": "Sequence_T1_9", "answer": -1}],
        "Prediction": [], "Feasibility": []}
    (tmp_path / "bad.json").write_text(json.dumps([STAR_VAL[0], {**STAR_VAL[1], "answer": "Sat down."}]))
    with pytest.raises(ManifestError, match=r"bad.json: item 1: not a STAR question \(its answer 'Sat down.' is none"):
        star.load(str(tmp_path / "bad.json"), str(tmp_path))
    (tmp_path / "bad.json").write_text(json.dumps([{**STAR_VAL[0], "start": 15.7, "end": 7.7}]))
    with pytest.raises(ManifestError, match=r"bad.json: item 0: not a STAR question \(its clip \[15.7, 7.7\] is not a range"):
        star.load(str(tmp_path / "bad.json"), str(tmp_path))


def test_star_loads_real_rows_and_scores_as_its_reported_mean(tmp_path):
    # Real STAR val questions as TraveLER's public code redistributes them (a CSV of its own), written here
    # in STAR_val.json's layout: the answer a choice's text, the choices with their ids.
    with open(FIXTURES / "star_val_queries_head.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    released = [{"question_id": r["question_id"], "question": r["query"], "video_id": Path(r["video_name"]).stem,
                 "start": float(r["start"]), "end": float(r["end"]),
                 "answer": ast.literal_eval(r["possible_answers"])[int(r["answer"])],
                 "choices": [{"choice_id": k, "choice": c} for k, c in enumerate(ast.literal_eval(r["possible_answers"]))]}
                for r in rows]
    (tmp_path / "STAR_val.json").write_text(json.dumps(released))
    questions = star.load(str(tmp_path / "STAR_val.json"), str(tmp_path))
    assert [(q.qid, q.answer, q.categories, q.clip) for q in questions] == [
        (r["question_id"], int(r["answer"]), [r["query_type"]], [float(r["start"]), float(r["end"])]) for r in rows]
    assert questions[5].clip == [0.0, 4.1] and questions[5].video == str(tmp_path / "BEAAA.mp4")
    # Right on every other question, one invalid answer among the wrong ones.
    predicted = [q.answer if i % 2 == 0 else (None if i == 3 else (q.answer + 1) % 4) for i, q in enumerate(questions)]
    official = official_star_accuracy(rows, {q.qid: p for q, p in zip(questions, predicted)})
    entry = report(prediction_rows(questions, predicted), benchmark=star.BENCHMARK)["tasks"]["mcq"]
    assert entry["score"] == pytest.approx(official["all"]) and entry["invalid"] == 1
    assert entry["mean of categories"] == pytest.approx(official["Mean"])
    assert entry["per_category"] == pytest.approx({t: official[t] for t in ("Interaction", "Sequence", "Prediction",
                                                                           "Feasibility")})


def test_a_star_question_is_answered_from_its_clip_and_a_clip_past_the_video_is_named(precomputed, sample_dir, tmp_path):
    import shutil

    from vidprep.jobs.config import load_config
    from vidprep.evaluation.report import ReportWriter, question_file

    cfg, _, _ = precomputed
    # A copy: this run stays out of the store the other tests evaluate.
    shutil.copytree(cfg.store.uri, tmp_path / "db")
    # A STAR row about the coffee scene (9-16 s) of the sample's scenes.mp4, as if it were a Charades video.
    row = {"question_id": "Interaction_T1_1", "question": "Which object was on the table?", "video_id": "scenes",
           "start": 9.0, "end": 16.0, "answer": "The cup.",
           "choices": [{"choice_id": k, "choice": c} for k, c in
                       enumerate(["The cat.", "The cup.", "The rocket.", "The astronaut."])]}
    path = tmp_path / "STAR_val.json"

    def star_config(method: str = "direct"):
        # STAR's own segments are 2 s long; the store holds the sample's, of 10 s.
        return load_config([f"store.uri={tmp_path / 'db'}", "dataset=star", f"dataset.questions.json_path={path}",
                            f"dataset.questions.video_dir={sample_dir}", "ray.progress_bars=false", f"method={method}",
                            "stages.segments.seconds=10"])

    path.write_text(json.dumps([row]))
    summary = answer(star_config())
    assert (summary.answered, summary.failed) == (1, 0)
    store = StoreSettings.from_config(star_config().store).open()
    stored = store.predictions([summary.run_key])[0]
    assert stored["visited"] and all(9.0 <= t <= 16.0 for t in stored["visited"])
    asked = json.dumps(json.loads(stored["trace_json"])[-1]["prompt"])
    assert "Video length: 7.0 s" in asked and "t=0.0s" in asked
    # LLoVi reads the caption of the segment inside the clip (10-16 s), shown from the clip's start, and not
    # the one made from frames before it (0-10 s); the report puts the frames of its steps back at the
    # video's times and draws the clip asked about.
    llovi = answer(star_config("llovi"))
    captions = next(s for s in json.loads(store.predictions([llovi.run_key])[0]["trace_json"]) if s.get("tool"))
    assert captions["result"].startswith("[1-7s]") and captions["visited"] == [1.0], captions
    ReportWriter(store, tmp_path / "report").write([llovi.run_key])
    page = (tmp_path / "report" / question_file({"run_key": llovi.run_key, "qid": row["question_id"]})).read_text()
    assert "asked clip" in page and re.findall(r'data-t="([0-9.]+)"', page)[:1] == ["10.00"]
    path.write_text(json.dumps([{**row, "start": 20.0, "end": 30.0}]))
    with pytest.raises(ManifestError, match=r"question Interaction_T1_1: its clip \[20.0, 30.0\] starts after its "
                                            r"video .*scenes.mp4 ends \(16.0 s\)"):
        answer(star_config())


# The Perception Test's mc_question_valid.json layout, field by field as its README documents it (the
# annotation zip is a download; these rows are made): three options, areas and reasoning types.
PERCEPTION_TEST = {
    "video_10909": {"metadata": {"video_id": "video_10909", "split": "valid", "num_frames": 900, "frame_rate": 30},
                    "mc_question": [
                        {"id": 0, "question": "Is the camera moving or static?", "options": ["moving", "static",
                         "I don't know"], "answer_id": 1, "area": "physics", "reasoning": "descriptive",
                         "tag": ["motion"]},
                        {"id": 1, "question": "How many objects were put in the box?", "options": ["2", "3", "4"],
                         "answer_id": 2, "area": "memory", "reasoning": "descriptive", "tag": ["counting"]}]},
    "video_7491": {"metadata": {"video_id": "video_7491", "split": "valid"}, "mc_question": [
        {"id": 0, "question": "What will happen if the cup is pushed?", "options": ["it falls", "it stays",
         "it breaks"], "answer_id": 0, "area": "physics", "reasoning": "predictive", "tag": []}]},
}


def test_perception_test_real_test_questions_load_unscored_and_export_the_challenge_file(tmp_path):
    # Real Perception Test test-split questions as TraveLER's public code lists them (a CSV of its own: options
    # and video, no id, area or answer), written here in mc_question_test.json's layout. The CSV keeps each
    # video's questions in order but not their ids: they are numbered in that order.
    with open(FIXTURES / "perception_test_queries_head.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    test_file: dict = {}
    for r in rows:
        video = Path(r["video_name"]).stem
        entry = test_file.setdefault(video, {"metadata": {"video_id": video, "split": "test"}, "mc_question": []})
        entry["mc_question"].append({"id": len(entry["mc_question"]), "question": r["query"],
                                     "options": ast.literal_eval(r["possible_answers"])})
    (tmp_path / "mc_question_test.json").write_text(json.dumps(test_file))
    questions = perception_test.load(str(tmp_path / "mc_question_test.json"), str(tmp_path))
    assert [(q.question, q.choices) for q in questions] == [
        (r["query"], ast.literal_eval(r["possible_answers"])) for r in rows]
    assert questions[1].choices == ["no", "I don't know", "yes"] and questions[4].qid == "video_8257_0"
    assert all(q.answer is None and q.video == str(tmp_path / f"{q.qid.rsplit('_', 1)[0]}.mp4") for q in questions)
    predictions = prediction_rows(questions, [i % 3 for i in range(15)] + [None])
    entry = report(predictions, benchmark=perception_test.BENCHMARK)["tasks"]["mcq"]
    assert (entry["questions"], entry["scored"], entry["score"], entry["invalid"]) == (16, 0, None, 1)
    written = json.loads(perception_test.BENCHMARK.leaderboards["perception_test_mc_results.json"](predictions))
    assert {video: [a["id"] for a in answers] for video, answers in written.items()} == {
        video: [mc["id"] for mc in entry["mc_question"]] for video, entry in test_file.items()}
    assert written["video_6358"][2] == {"id": 2, "answer_id": 2, "answer": "The object rolls or slides."}
    assert written["video_11136"][3] == {"id": 3, "answer_id": -1, "answer": ""}


def test_perception_test_loads_its_released_layout_by_area_and_reasoning(tmp_path):
    (tmp_path / "mc_question_valid.json").write_text(json.dumps(PERCEPTION_TEST))
    questions = perception_test.load(str(tmp_path / "mc_question_valid.json"), str(tmp_path))
    assert [(q.qid, q.answer, q.qtype, q.categories, len(q.choices)) for q in questions] == [
        ("video_10909_0", 1, "physics", ["physics", "descriptive"], 3),
        ("video_10909_1", 2, "memory", ["memory", "descriptive"], 3),
        ("video_7491_0", 0, "physics", ["physics", "predictive"], 3)]
    assert questions[2].video == str(tmp_path / "video_7491.mp4")
    entry = report(prediction_rows(questions, [1, 0, 0]))["tasks"]["mcq"]  # right, wrong, right: top-1 accuracy
    assert entry["score"] == pytest.approx(2 / 3)
    assert entry["per_category"] == pytest.approx({"descriptive": 0.5, "memory": 0.0, "physics": 1.0, "predictive": 1.0})
    # The challenge's results as VideoLLaMA2's script writes them: {video_id: [{id, answer_id, answer}]}.
    written = json.loads(perception_test.BENCHMARK.leaderboards["perception_test_mc_results.json"](
        prediction_rows(questions, [1, None, 0])))
    assert written == {"video_10909": [{"id": 0, "answer_id": 1, "answer": "static"},
                                       {"id": 1, "answer_id": -1, "answer": ""}],
                       "video_7491": [{"id": 0, "answer_id": 0, "answer": "it falls"}]}
    broken = {"video_1": {"metadata": {}, "mc_question": [{"id": 0, "options": []}]}}
    (tmp_path / "bad.json").write_text(json.dumps(broken))
    with pytest.raises(ManifestError, match=r"bad.json: video video_1: not a Perception Test entry \('question'\)"):
        perception_test.load(str(tmp_path / "bad.json"), str(tmp_path))
    # The test split withholds answer_id, area and reasoning: its questions load, answered but unscored.
    withheld = {video: item | {"mc_question": [{k: v for k, v in mc.items() if k not in ("answer_id", "area", "reasoning")}
                                               for mc in item["mc_question"]]} for video, item in PERCEPTION_TEST.items()}
    (tmp_path / "mc_question_test.json").write_text(json.dumps(withheld))
    test_split = perception_test.load(str(tmp_path / "mc_question_test.json"), str(tmp_path))
    assert [(q.answer, q.qtype, q.categories) for q in test_split] == [(None, "", [])] * 3
    unscored = report(prediction_rows(test_split, [1, 0, 0]))["tasks"]["mcq"]
    assert (unscored["scored"], unscored["unknown"], unscored["score"]) == (0, 3, None)


def _causal_vidqa_folder(root: Path, videos: dict[str, dict]) -> None:
    """Causal-VidQA's QA folder as its dataset.py reads it: {video}/text.json and {video}/answer.json."""
    for video, answers in videos.items():
        (root / video).mkdir(parents=True)
        text = {kind: {"question": f"{kind} question about {video}?",
                       "answer": [f"{kind} answer {i}" for i in range(5)]}
                for kind in ("descriptive", "explanatory", "predictive", "counterfactual")}
        for kind in ("predictive", "counterfactual"):
            text[kind]["reason"] = [f"{kind} reason {i}" for i in range(5)]
        (root / video / "text.json").write_text(json.dumps(text))
        (root / video / "answer.json").write_text(json.dumps(answers))


def test_causal_vidqa_scores_answer_and_reason_as_one_as_its_eval_script(tmp_path):
    answers = {"descriptive": {"answer": 1}, "explanatory": {"answer": 2}, "predictive": {"answer": 3, "reason": 0},
               "counterfactual": {"answer": 4, "reason": 1}}
    _causal_vidqa_folder(tmp_path / "QA", {"abc123_000010_000020": answers, "xyz789_000001_000011": answers})
    with open(tmp_path / "test.pkl", "wb") as f:
        pickle.dump(["abc123_000010_000020", "xyz789_000001_000011"], f)
    questions = causal_vidqa.load(str(tmp_path / "QA"), str(tmp_path), str(tmp_path / "test.pkl"))
    assert [q.qid for q in questions[:6]] == [f"abc123_000010_000020_{k}" for k in range(6)]
    assert [(q.qtype, q.answer, q.unit) for q in questions[2:4]] == [
        ("PA", 3, "abc123_000010_000020_predictive"), ("PR", 0, "abc123_000010_000020_predictive")]
    assert questions[3].choices[0] == "predictive reason 0" and questions[3].question == questions[2].question
    # First video: all right but the predictive reason; second: the counterfactual answer wrong, D invalid.
    truth = [q.answer for q in questions]
    predicted = [*truth[:3], (truth[3] + 1) % 5, *truth[4:6], None, *truth[7:10], (truth[10] + 1) % 5, truth[11]]
    rows = prediction_rows(questions, predicted)
    official = official_causal_vidqa_accuracy(nextqa.nextqa_results(sorted(rows, key=lambda r: r["qid"])))
    entry = report(rows)["tasks"]["mcq"]
    assert entry["score"] * 100 == pytest.approx(official["all"]) and entry["units"] == 8
    assert {t: v * 100 for t, v in entry["per_type"].items()} == pytest.approx(
        {t: official[t] for t in ("D", "E", "PA", "PR", "CA", "CR")})
    assert entry["per_category"]["predictive"] * 100 == pytest.approx(official["P"])
    assert entry["per_category"]["counterfactual"] * 100 == pytest.approx(official["C"])
    (tmp_path / "evil.pkl").write_bytes(pickle.dumps(Path("x")))
    with pytest.raises(ManifestError, match=r"evil.pkl: not a Causal-VidQA split file \(holds pathlib"):
        causal_vidqa.load(str(tmp_path / "QA"), str(tmp_path), str(tmp_path / "evil.pkl"))
    (tmp_path / "QA" / "xyz789_000001_000011" / "answer.json").write_text(json.dumps({"descriptive": {}}))
    with pytest.raises(ManifestError, match=r"xyz789_000001_000011: not a Causal-VidQA question folder \('answer'\)"):
        causal_vidqa.load(str(tmp_path / "QA"), str(tmp_path))


def test_traveler_picks_a_causal_vidqa_answer_and_its_reason_in_one_reply_other_methods_ask_both(
        precomputed, sample_dir, tmp_path):
    # TraveLER's public Causal-VidQA code gives its Evaluator the reasons with the choices and takes both
    # from one reply; a method without that asks the reason question on its own.
    cfg, store, _ = precomputed
    answers = {"descriptive": {"answer": 1}, "explanatory": {"answer": 2}, "predictive": {"answer": 3, "reason": 0},
               "counterfactual": {"answer": 4, "reason": 1}}
    _causal_vidqa_folder(tmp_path / "QA", {"scenes": answers})
    server = ScriptedEndpoint(reply=fitting_reply)
    dataset = ["dataset=causal_vidqa", f"dataset.questions.qa_dir={tmp_path / 'QA'}",
               f"dataset.questions.video_dir={sample_dir}", "llm=openai", f"llm.client.base_url={server.base_url}",
               "llm.client.model=scripted", "llm.client.cache=false"]
    try:
        traveler = config_for(cfg.store.uri, sample_dir, "method=traveler", "method.max_iterations=1",
                              "method.questions=0", *dataset)
        joint = answer(traveler)
        rows = {r["qid"]: r for r in store.predictions([joint.run_key])}
        requests = len(server.requests)
        again = answer(traveler)
        # A unit whose reason row is lost is asked again whole.
        store.table("predictions").delete(f"row_id = '{joint.run_key}/scenes_3'")
        redone = answer(traveler)
    finally:
        server.close()
    assert (joint.questions, joint.answered, joint.invalid, joint.failed) == (6, 6, 0, 0)
    # The store's summary was written by the local LLM, not the scripted one: TraveLER does not read it, so
    # it is neither needed nor part of the run's key.
    assert set(store.answer_runs()[joint.run_key]["keys"]) == {"frames", "frame_captions", "frame_embeddings",
                                                              "segment_captions"}
    for answer_qid, reason_qid, kind in (("scenes_2", "scenes_3", "predictive"), ("scenes_4", "scenes_5", "counterfactual")):
        trace = json.loads(rows[answer_qid]["trace_json"])
        decided = [s for s in trace if s["kind"] in ("evaluate", "final")][-1]
        # The reasons are in the Evaluator's prompt; the reason row is the reason of its reply.
        assert f"Reasons:\n  0: {kind} reason 0" in decided["prompt"][1]["content"]
        assert json.loads(rows[answer_qid]["prediction_json"]) == decided["reply"]["answer"]
        assert json.loads(rows[reason_qid]["prediction_json"]) == decided["reply"]["reason"]
        assert json.loads(rows[reason_qid]["trace_json"]) == [{"step": 0, "kind": "answered_with", "qid": answer_qid}]
        assert rows[reason_qid]["llm_calls"] == 0 and rows[answer_qid]["llm_calls"] > 0
        assert rows[reason_qid]["visited"] == rows[answer_qid]["visited"] != []
    # Four traversals, not six: the reason questions asked no call of their own.
    assert sum(r["llm_calls"] for r in rows.values()) == joint.llm_calls == requests
    assert not any("Reasons:" in s["prompt"][1]["content"] for r in ("scenes_0", "scenes_1")
                   for s in json.loads(rows[r]["trace_json"]) if "prompt" in s)
    assert (again.answered, again.skipped, again.llm_calls) == (0, 6, 0)
    assert (redone.answered, redone.skipped) == (2, 4)
    assert json.loads(rows["scenes_2"]["question_json"])["reasons"][0] == "predictive reason 0"
    # Any other method asks each of the six on its own, the answer questions as they read without reasons.
    questions = causal_vidqa.load(str(tmp_path / "QA"), str(sample_dir))
    separate, reason_of = asked_with_reasons(questions, joint=False)
    assert reason_of == {} and [q.to_dict() for q in separate] == [
        {k: v for k, v in q.to_dict().items() if k != "reasons"} for q in questions]


def test_a_paper_experiment_precomputes_only_what_its_method_reads_with_its_captioner_then_answers(
        ray_session, sample_dir, tmp_path):
    from tests.provider_rules import refusal
    from vidprep.jobs.config import load_config
    from vidprep.pipeline.precompute import precompute

    # One Causal-VidQA video (the sample's scenes.mp4), TraveLER's experiment as the paper ran it, against an
    # endpoint that refuses what each model's provider refuses (one image per LLaVA request on vLLM).
    (tmp_path / "videos").mkdir()
    shutil.copy(sample_dir / "scenes.mp4", tmp_path / "videos")
    _causal_vidqa_folder(tmp_path / "QA", {"scenes": {"descriptive": {"answer": 1}, "explanatory": {"answer": 2},
                                                      "predictive": {"answer": 3, "reason": 0},
                                                      "counterfactual": {"answer": 4, "reason": 1}}})
    server = ScriptedEndpoint(reply=fitting_reply, refuse=refusal)
    cfg = load_config(["+experiment=traveler_causal_vidqa", f"store.uri={tmp_path / 'db'}", "ray.progress_bars=false",
                       f"dataset.questions.qa_dir={tmp_path / 'QA'}", f"dataset.questions.video_dir={tmp_path / 'videos'}",
                       *(f"{client}.{setting}" for client in ("llm.client", "vision.llm")
                         for setting in (f"base_url={server.base_url}", "cache=false")), "method.max_iterations=1"])
    try:
        made = precompute(cfg)
        captioned = len(server.requests)
        answered = answer(cfg)
    finally:
        server.close()
    assert server.refused == []
    # TraveLER with a vision model reads frames and their captions, and nothing else is made.
    assert (made.done, made.failed, set(made.rows)) == (1, 0, {"frames", "frame_captions"})
    assert made.left_out == ["segments", "frame_embeddings", "segment_captions", "transcript", "summary"]
    assert "not made, as the method does not read them (precompute.only_method_reads=true): segments, " in "\n".join(
        made.lines())
    # Captioned by the experiment's LMM, one request per frame, as the public code prompts it.
    assert captioned == made.rows["frame_captions"] > 0
    assert {r["model"] for r in server.requests[:captioned]} == {"llava-hf/llava-v1.6-vicuna-13b-hf"}
    assert "less than 2 sentences" in json.dumps(server.requests[0]["messages"])
    store = StoreSettings.from_config(cfg.store).open()
    keys = store.answer_runs()[answered.run_key]["keys"]
    assert set(keys) == set(made.rows) and set(keys.values()) == {k for _, k in store.done_keys([content_id(
        tmp_path / "videos" / "scenes.mp4")])}
    assert (answered.questions, answered.answered, answered.failed, answered.refused) == (6, 6, 0, 0)
    assert answered.invalid < answered.answered


def test_egoschema_reads_its_real_files_and_exports_what_its_grader_reads(tmp_path):
    # questions.json as EgoSchema's repository held it at commit 617b469 (its first 20 questions of a
    # pre-release draft, options ordered unlike the release: tests/fixtures/README.md) and its
    # subset_answers.json (the 500 published answers).
    questions = egoschema.load(str(FIXTURES / "egoschema_questions_617b469.json"),
                          str(FIXTURES / "egoschema_subset_answers.json"), str(tmp_path))
    assert len(questions) == 20 and all(len(q.choices) == 5 for q in questions)
    assert questions[0].question.startswith("Although the video is predominantly focused on one recurring action")
    assert questions[0].video == str(tmp_path / "001934bb-81bd-4cd8-a574-0472ef3f6678.mp4")
    # None of these 20 is among the 500 with a published answer: each is answered, none is scored.
    assert all(q.answer is None for q in questions)
    rows = prediction_rows(questions, [i % 5 for i in range(19)] + [None])
    entry = report(rows, benchmark=egoschema.BENCHMARK)["tasks"]["mcq"]
    assert (entry["questions"], entry["scored"], entry["score"], entry["invalid"]) == (20, 0, None, 1)
    # validate.py posts {q_uid: option 0-4} (its README); an invalid answer is -1, which matches no option.
    graded = egoschema.egoschema_answers(rows)
    assert list(graded) == [q.qid for q in questions] and graded[questions[-1].qid] == -1
    assert all(v in range(5) for v in list(graded.values())[:19])
    # The Kaggle competition's CSV (its README's Option A) holds the same answers.
    kaggle = list(csv.DictReader(io.StringIO(egoschema.BENCHMARK.leaderboards["egoschema_kaggle.csv"](rows))))
    assert {line["q_uid"]: int(line["answer"]) for line in kaggle} == graded and list(kaggle[0]) == ["q_uid", "answer"]


def test_egoschema_released_rows_score_against_its_published_answers(tmp_path):
    # Real EgoSchema questions in released order as TraveLER's public code lists all 5,031 (a CSV of its own),
    # written here in questions.json's layout: its first 22 rows hold 6 of the 500 with a published answer.
    with open(FIXTURES / "egoschema_all_queries_head.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    released = [{"q_uid": r["q_uid"], "question": r["query"],
                 **{f"option {i}": o for i, o in enumerate(ast.literal_eval(r["possible_answers"]))}} for r in rows]
    (tmp_path / "questions.json").write_text(json.dumps(released))
    answers_path = FIXTURES / "egoschema_subset_answers.json"
    questions = egoschema.load(str(tmp_path / "questions.json"), str(answers_path), str(tmp_path))
    published = json.loads(answers_path.read_text())
    scored = [q for q in questions if q.answer is not None]
    assert len(questions) == 22 and len(scored) == 6 and all(q.answer == published[q.qid] for q in scored)
    # Right on 4 of the 6 with an answer, one of them given an invalid answer: 4/6 over the scored.
    predicted = [published.get(q.qid, 0) for q in questions]
    wrong = [i for i, q in enumerate(questions) if q.answer is not None][-2:]
    predicted[wrong[0]], predicted[wrong[1]] = (predicted[wrong[0]] + 1) % 5, None
    entry = report(prediction_rows(questions, predicted), benchmark=egoschema.BENCHMARK)["tasks"]["mcq"]
    assert (entry["questions"], entry["scored"], entry["invalid"]) == (22, 6, 1)
    assert entry["score"] == pytest.approx(4 / 6)
    # The draft fixture holds the first question's options in another order (tests/fixtures/README.md).
    draft = next(q for q in json.loads((FIXTURES / "egoschema_questions_617b469.json").read_text())
                 if q["q_uid"] == questions[0].qid)
    options = [draft[f"option {i}"] for i in range(5)]
    assert sorted(options) == sorted(questions[0].choices) and options != questions[0].choices
    assert questions[0].choices[2].startswith("C takes a break") and options[4].startswith("C takes a break")


def test_egoschema_and_jsonl_loaders(tmp_path, sample_dir):
    (tmp_path / "questions.json").write_text(json.dumps([{"q_uid": "abc", "question": "What did c do?",
                                                          **{f"option {i}": f"o{i}" for i in range(5)}}]))
    (tmp_path / "answers.json").write_text(json.dumps({"abc": 2}))
    ego = egoschema.load(str(tmp_path / "questions.json"), str(tmp_path / "answers.json"), str(tmp_path))
    assert (ego[0].answer, ego[0].choices[4], ego[0].video) == (2, "o4", str(tmp_path / "abc.mp4"))
    sample = jsonl.load(str(sample_dir / "questions.jsonl"))
    assert len(sample) == 7 and {q.task for q in sample} == {"mcq", "rtl", "open"}


def prediction_rows(questions, predicted) -> list[dict]:
    """Stored predictions of these answers to these questions (None: an invalid answer)."""
    return [{"run_key": "r", "row_id": f"r/{q.qid}", "qid": q.qid, "task": q.task, "qtype": q.qtype,
             "question_json": json.dumps(q.to_dict()), "valid": p is not None, "prediction_json": json.dumps(p),
             "error": "" if p is not None else "InvalidAnswer", "llm_calls": 0, "prompt_tokens": 0,
             "completion_tokens": 0, "seconds": 0.0, "visited": []} for q, p in zip(questions, predicted)]


# LVBench's video_info.meta.jsonl in the shape its compute_accuracy.py and other public loaders read
# (released on Hugging Face under CC BY-NC-SA 4.0; none of its rows could be had here): a line per
# video, each question's four choices inside its text, the answer a letter, several categories.
LVBENCH_META = [
    {"key": "sport_1", "type": "sport", "video_info": {"duration_minutes": 62.5}, "qa": [
        {"uid": 11, "question": "What colour is the ball?\n(A) red\n(B) blue\n(C) green\n(D) white",
         "answer": "D", "question_type": ["entity recognition"], "time_reference": "00:10-00:20"},
        {"uid": 12, "question": "Why does play stop?\n(A) rain\n(B) an injury\n(C) a whistle\n(D) a timeout",
         "answer": "C", "question_type": ["reasoning", "event understanding"], "time_reference": "01:00-01:10"}]},
    {"key": "tv_2", "type": "tv", "video_info": {"duration_minutes": 48.0}, "qa": [
        {"uid": 21, "question": "What is written on the sign?\n(A) OPEN\n(B) EXIT\n(C) STOP\n(D) SALE",
         "answer": "B", "question_type": ["key information retrieval", "entity recognition"],
         "time_reference": "10:00-10:05"}]},
]


# Neptune's neptune_full.json, field by field as its README documents them (google-deepmind/neptune; the
# file is a download from Google Cloud Storage; these rows are made): five choices, the right one's index.
NEPTUNE_FULL = [
    {"key": "q1", "video_id": "https://www.youtube.com/watch?v=abcDEF12345", "question": "What does the cook add last?",
     "answer": "Basil.", **{f"answer_choice_{i}": c for i, c in enumerate(["Salt.", "Basil.", "Oil.", "Cheese.", "Water."])},
     "answer_id": 1, "question type": "Temporal Ordering"},
    {"key": "q2", "video_id": "https://youtu.be/XYZ98765432", "question": "How many laps are run?", "answer": "Three.",
     **{f"answer_choice_{i}": c for i, c in enumerate(["One.", "Two.", "Three.", "Four.", "Five."])},
     "answer_id": 2, "question type": "Counting"},
    {"key": "q3", "video_id": "abcDEF12345", "question": "Why does the cook taste the sauce?", "answer": "To check it.",
     **{f"answer_choice_{i}": c for i, c in enumerate(["To cool it.", "To check it.", "To stir it.", "To share it.",
                                                       "To throw it."])},
     "answer_id": 1, "question type": "Cause and Effect"},
]


def test_neptune_loads_its_documented_layout_and_scores_accuracy_per_type(tmp_path):
    (tmp_path / "neptune_full.json").write_text(json.dumps(NEPTUNE_FULL))
    questions = neptune.load(str(tmp_path / "neptune_full.json"), str(tmp_path))
    assert [(q.qid, q.answer, q.qtype, q.categories, len(q.choices)) for q in questions] == [
        ("q1", 1, "Temporal Ordering", ["Temporal Ordering"], 5), ("q2", 2, "Counting", ["Counting"], 5),
        ("q3", 1, "Cause and Effect", ["Cause and Effect"], 5)]
    assert [q.video for q in questions] == [str(tmp_path / f"{v}.mp4") for v in ("abcDEF12345", "XYZ98765432",
                                                                                 "abcDEF12345")]
    # Its README's metric: accuracy over the five choices; an invalid answer counts as wrong.
    entry = report(prediction_rows(questions, [1, None, 0]), benchmark=neptune.BENCHMARK)["tasks"]["mcq"]
    assert entry["score"] == pytest.approx(1 / 3) and entry["invalid"] == 1
    assert entry["per_type"] == {"Temporal Ordering": 1.0, "Counting": 0.0, "Cause and Effect": 0.0}
    (tmp_path / "bad.json").write_text(json.dumps([NEPTUNE_FULL[0], {**NEPTUNE_FULL[1], "answer_id": 5}]))
    with pytest.raises(ManifestError, match=r"bad.json: item 1: not a Neptune question \(answer_id 5 is not a choice"):
        neptune.load(str(tmp_path / "bad.json"), str(tmp_path))
    missing = {k: v for k, v in NEPTUNE_FULL[0].items() if k != "answer_choice_4"}
    (tmp_path / "bad.json").write_text(json.dumps([missing]))
    with pytest.raises(ManifestError, match=r"bad.json: item 0: not a Neptune question \('answer_choice_4'\)"):
        neptune.load(str(tmp_path / "bad.json"), str(tmp_path))


def test_lvbench_loads_and_scores_as_its_compute_accuracy(tmp_path):
    meta = tmp_path / "video_info.meta.jsonl"
    meta.write_text("".join(json.dumps(line) + "\n" for line in LVBENCH_META))
    questions = lvbench.load(str(meta), str(tmp_path))
    assert [(q.qid, q.answer, q.categories) for q in questions] == [
        ("11", 3, ["entity recognition"]), ("12", 2, ["reasoning", "event understanding"]),
        ("21", 1, ["key information retrieval", "entity recognition"])]
    assert (questions[0].question, questions[0].choices) == ("What colour is the ball?", ["red", "blue", "green", "white"])
    assert questions[2].video == str(tmp_path / "tv_2.mp4")
    rows = prediction_rows(questions, [3, None, 0])  # right, invalid, wrong
    answers = lvbench.lvbench_answers(rows)
    assert answers == {"11": "D", "12": "", "21": "A"}
    official = official_lvbench_accuracy(LVBENCH_META, answers)
    # result.json for its leaderboard: compute_accuracy's figures under test_acc.py's names.
    names = {"key information retrieval": "KIR", "event understanding": "EU", "summarization": "Sum",
             "entity recognition": "ER", "reasoning": "Rea", "temporal grounding": "TG", "acc": "Overall"}
    result = json.loads(lvbench.BENCHMARK.leaderboards["result.json"](rows))
    assert result == pytest.approx({names[k]: v for k, v in official.items()})
    entry = report(rows)["tasks"]["mcq"]
    assert entry["score"] == pytest.approx(official.pop("acc")) and entry["per_category"] == pytest.approx(official)
    broken = dict(LVBENCH_META[1], qa=[dict(LVBENCH_META[1]["qa"][0], question="What is written on the sign?")])
    meta.write_text("".join(json.dumps(line) + "\n" for line in [LVBENCH_META[0], broken]))
    with pytest.raises(ManifestError, match=r"video_info.meta.jsonl:2: not an LVBench video line \(question 21:"):
        lvbench.load(str(meta), str(tmp_path))


# ActivityNet-RTL in the two layouts LITA's code reads (eval_model_rtl.py and
# temporal_reasoning_dataset.py): times in seconds, the span the answer's first two times.
RTL_EVAL = [{"question_id": "q0", "vid": "a1", "question": "When does he jump?", "duration": 200.0,
             "answer": "<20.5> <50> He jumps after running."},
            {"question_id": "q1", "vid": "a1", "question": "When does he land?", "duration": 200.0,
             "answer": "From <60> to <250.>."},
            {"question_id": "q2", "vid": "b2", "question": "When is the ball thrown?", "duration": 30.0,
             "answer": "<.5> to <3>"}]


def test_activitynet_rtl_loads_both_released_layouts_in_seconds(tmp_path):
    (tmp_path / "annot_val.json").write_text(json.dumps(RTL_EVAL))
    rtl = activitynet_rtl.load(str(tmp_path / "annot_val.json"), str(tmp_path))
    assert [(q.qid, q.answer, q.duration) for q in rtl] == [("q0", [20.5, 50.0], 200.0), ("q1", [60.0, 200.0], 200.0),
                                                           ("q2", [0.5, 3.0], 30.0)]
    assert rtl[0].video == str(tmp_path / "v_a1.mp4") and rtl[0].task == "rtl"
    (tmp_path / "train.json").write_text(json.dumps({"v_x": {"duration": 120.0, "QA": [
        {"q": "When does he jump?", "a": "He jumps at <10> <25.5> after running."},
        {"q": "Why?", "a": "No times here."}]}}))
    train = activitynet_rtl.load(str(tmp_path / "train.json"), str(tmp_path))
    assert [(q.answer, q.video) for q in train] == [([10.0, 25.5], str(tmp_path / "v_x.mp4")),
                                                   (None, str(tmp_path / "v_x.mp4"))]
    (tmp_path / "bad.json").write_text(json.dumps([RTL_EVAL[0], {**RTL_EVAL[1], "answer": "whenever"}]))
    with pytest.raises(ManifestError, match=r"bad.json: item 1: not an ActivityNet-RTL question \(no two"):
        activitynet_rtl.load(str(tmp_path / "bad.json"), str(tmp_path))


def test_activitynet_rtl_scores_as_litas_evaluation(tmp_path):
    (tmp_path / "annot_val.json").write_text(json.dumps(RTL_EVAL))
    questions = activitynet_rtl.load(str(tmp_path / "annot_val.json"), str(tmp_path))
    rows = prediction_rows(questions, [[30.0, 50.0], None, [-5.0, 1.0]])  # the second answer gave no span
    # LITA: no span -> [0, duration]; spans clamped into the video; IoU averaged per video, then over videos.
    ious = [20 / 29.5, 140 / 200, 0.5 / 3]
    entry = report(rows)["tasks"]["rtl"]
    assert entry["score"] == pytest.approx(sum(ious) / 3) and entry["invalid"] == 1
    assert entry["mIoU per video"] == pytest.approx(((ious[0] + ious[1]) / 2 + ious[2]) / 2)
    assert (entry["R@0.5"], entry["P@0.5 per video"]) == pytest.approx((2 / 3, (1.0 + 0.0) / 2))


def test_runs_that_answered_different_questions_are_compared_on_the_shared_ones(tmp_path):
    (tmp_path / "meta.jsonl").write_text("".join(json.dumps(line) + "\n" for line in LVBENCH_META))
    questions = lvbench.load(str(tmp_path / "meta.jsonl"), str(tmp_path))
    first = [dict(r, run_key="a") for r in prediction_rows(questions[:2], [3, 0])]  # right, wrong
    second = [dict(r, run_key="b") for r in prediction_rows(questions[1:], [2, 1])]  # right, right
    lines = format_comparison([("llovi", "a"), ("random", "b")], first + second)
    assert lines[0] == ("the runs answered different questions (llovi 2, random 2 answered); compared on the 1 "
                        "every run answered:")
    # Question 12 alone: wrong in the first run, right in the second.
    assert "accuracy 0.000, 0 invalid" in lines[1] and "accuracy 1.000, 0 invalid" in lines[2]
    same = format_comparison([("llovi", "a"), ("random", "b")], first + [dict(r, run_key="b") for r in first])
    assert same[0] == "compared on the same 2 questions:"


def test_scores():
    assert iou([0, 4], [2, 6]) == pytest.approx(1 / 3)
    assert iou([0, 1], [2, 3]) == 0.0
    assert token_f1("EXIT 42", "exit 42") == 1.0 and token_f1("nothing", "EXIT 42") == 0.0


def test_a_questions_cost_counts_the_vision_models_calls_and_the_frames_it_viewed(precomputed, sample_dir, tmp_path):
    cfg, _, _ = precomputed
    # A copy: this run's prediction stays out of the store the other tests report on.
    shutil.copytree(cfg.store.uri, tmp_path / "db")
    server = ScriptedEndpoint()
    try:
        # The method and the vision model are two clients of one scripted endpoint; S is left out, so the
        # summary made with the local LLM is not needed.
        conf = config_for(tmp_path / "db", sample_dir, "method=videoagent2", "method.max_steps=1", "method.summary=false",
                          "vision=vlm", "llm=openai", f"llm.client.base_url={server.base_url}",
                          "llm.client.model=scripted", "llm.client.cache=false", "llm.client.max_retries=0")
        plan = build_plan(conf.stages)
        worker = AnswerWorker(OmegaConf.to_yaml(conf, resolve=True), StoreSettings.from_config(conf.store),
                              plan.keys, "cost-probe", OmegaConf.to_container(conf.model, resolve=True),
                              plan.frames_per_caption)
        server.script = [("reply", json.dumps(r)) for r in (
            {"reasoning": "r", "answer": 2, "confidence": 1},
            {"reasoning": "r", "steps": [{"tool": "visual_question",
                                          "arguments": {"question": "which animal?", "timestamps": [1.0, 5.0]}}]},
            {"answer": "a cat", "confidence": 4},
            {"reasoning": "r", "answer": 0, "confidence": 5})]
        question = next(q for q in jsonl.load(str(sample_dir / "questions.jsonl")) if q.qid == "scenes_first")
        worker.answer({"question_json": json.dumps(question.to_dict()), "video_id": content_id(sample_dir / "scenes.mp4")})
    finally:
        server.close()
    row = worker.store.predictions(["cost-probe"])[0]
    # Three calls of the method and one of the vision model.
    assert row["valid"] and row["llm_calls"] == 4
    # The two frames the vision model saw, and the six its memory's segment captions were made from.
    assert report([row])["costs"]["frames_viewed_per_question"] == 8
    # Money from the price table: 4 calls of 11 prompt and 7 completion tokens (the scripted server's usage).
    assert json.loads(row["usage_json"]) == {"scripted": {"calls": 4, "prompt_tokens": 44, "completion_tokens": 28}}
    priced = report([row], {"scripted": {"input": 1.0, "output": 2.0}})["costs"]
    assert priced["usd_per_question"] == pytest.approx((44 * 1.0 + 28 * 2.0) / 1e6)
    unpriced = report([row], {"gpt-4o": {"input": 2.5, "output": 10.0}})["costs"]
    assert unpriced["usd_per_question"] is None and unpriced["unpriced_models"] == ["scripted"]


def test_an_llm_timeout_is_a_failure_and_a_refusal_is_final_both_counted_apart_from_invalid_answers(precomputed, sample_dir, tmp_path):
    import shutil

    from omegaconf import OmegaConf

    from vidprep.pipeline.answer import AnswerWorker, settled
    from vidprep.pipeline.plan import build_plan
    from vidprep.evaluation.scoring import format_report
    from vidprep.store.keys import content_id
    from vidprep.store.settings import StoreSettings

    cfg, _, _ = precomputed
    shutil.copytree(cfg.store.uri, tmp_path / "db")
    server = ScriptedEndpoint()
    try:
        conf = config_for(tmp_path / "db", sample_dir, "method=videoagent2", "method.max_steps=1",
                          "method.summary=false", "llm=openai", f"llm.client.base_url={server.base_url}",
                          "llm.client.model=scripted", "llm.client.cache=false", "llm.client.max_retries=0",
                          "llm.client.timeout_s=0.5")
        plan = build_plan(conf.stages)
        worker = AnswerWorker(OmegaConf.to_yaml(conf, resolve=True), StoreSettings.from_config(conf.store),
                              plan.keys, "timeout-probe", OmegaConf.to_container(conf.model, resolve=True),
                              plan.frames_per_caption)
        server.script = [("hang", 3)]
        question = next(q for q in jsonl.load(str(sample_dir / "questions.jsonl")) if q.qid == "scenes_first")
        asked = {"question_json": json.dumps(question.to_dict()), "video_id": content_id(sample_dir / "scenes.mp4")}
        result, = worker.answer(asked)
        # A refusal (here: past the context window) is final: stored as refused with the provider's words.
        worker.key = "refusal-probe"
        server.script = [("status", 400, {}, "This model's maximum context length is 4096 tokens.")]
        refusal, = worker.answer(asked)
    finally:
        server.close()
    assert refusal["refused"] and not refusal["failed"]
    refused_row = worker.store.predictions(["refusal-probe"])[0]
    assert refused_row["error"].startswith("LLMRefused") and "maximum context length" in refused_row["error"]
    refused_scores = report([refused_row])["tasks"]["mcq"]
    assert (refused_scores["refused"], refused_scores["failed"], refused_scores["invalid"]) == (1, 0, 0)
    assert not settled(refused_row, refused_row["question_json"], retry_refused=True)
    assert settled(refused_row, refused_row["question_json"], retry_refused=False)
    row = worker.store.predictions(["timeout-probe"])[0]
    assert not settled(row, row["question_json"], retry_refused=False)
    assert row["error"].startswith("LLMError") and row["llm_calls"] == 1
    scores = report([row])
    # No answer came back: left out of the score, not scored wrong.
    assert (scores["tasks"]["mcq"]["invalid"], scores["tasks"]["mcq"]["failed"]) == (0, 1)
    assert scores["tasks"]["mcq"]["score"] is None
    assert "scored 0 of 1; 1 failed (LLM errors); rerun to complete; 0 invalid" in format_report("videoagent2", "k", scores)[1]


METHODS_DOC = Path(__file__).resolve().parents[1] / "docs" / "methods.md"
METHOD_CLASSES = {"caviar": "CAViAR", "direct": "DirectAnswer", "traveler": "TraveLER", "videoagent2": "VideoAgent2"}


def experiments_table() -> dict[str, dict]:
    """docs/methods.md's table of the papers' settings: experiment -> its columns."""
    lines = METHODS_DOC.read_text().split("| `+experiment=` |", 1)[1].splitlines()[2:]
    rows = {}
    for line in itertools.takewhile(lambda l: l.startswith("|"), lines):
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0].strip("`")] = {"llm": cells[2].strip("`"), "vision": cells[3], "captioner": cells[4],
                                     "precomputed": cells[5].split(", "),
                                     "settings": re.findall(r"`([\w.]+)=([^`]+)`", cells[6])}
    return rows


def test_every_paper_experiment_is_what_the_methods_table_says(tmp_path):
    from hydra.utils import instantiate

    from vidprep.agents.vision import stages_read
    from vidprep.jobs.config import config_groups, load_config
    from vidprep.pipeline.precompute import stages_left_out
    from vidprep.stages.prompts import load_prompt

    table = experiments_table()
    assert sorted(config_groups()["experiment"]) == sorted(table)
    for name, row in table.items():
        cfg = load_config([f"+experiment={name}", f"store.uri={tmp_path / 'db'}"])
        agent = instantiate(cfg.method, llm=instantiate(cfg.llm.client))
        vision, describer = instantiate(cfg.vision), instantiate(cfg.stages.frame_captions.describer)
        assert type(agent).__name__ == METHOD_CLASSES[name.split("_")[0]], name
        assert agent.llm.model == row["llm"], name
        assert (vision.llm.model if vision.sees_frames else "stored descriptions") == row["vision"].strip("`"), name
        captioner = describer.llm.model if hasattr(describer, "llm") else "offline"
        assert captioner == row["captioner"].strip("`").split(" (")[0], name
        # Precompute makes what the method reads and what that is made from, under the keys answer reads.
        made, full = build_plan(cfg.stages, stages_left_out(cfg)), build_plan(cfg.stages)
        assert list(made.stages) == row["precomputed"], name
        read = stages_read(agent.stages_read(), vision)
        assert read & set(full.stages) <= set(made.stages), name
        assert {u for stage in made.stages.values() for u in stage.upstream} <= set(made.stages), name
        assert made.keys == {stage: full.keys[stage] for stage in made.stages}, name
        for key, value in row["settings"]:
            assert OmegaConf.select(cfg, key) == yaml.safe_load(value), (name, key)
        # The structured-output mode each model's provider documents (JSON mode only before gpt-4o).
        assert agent.llm.profile.structured_output == (
            "json_object" if row["llm"].startswith(("gpt-4-", "gpt-3.5")) else "json_schema"), name
        assert name.endswith("_" + cfg.dataset.name), name
        assert all(load_prompt(prompt) for prompt in getattr(agent, "prompts", {}).values()), name
    # TraveLER's shorter, simplified prompts where its paper used them (B.3, B.5).
    assert {n: load_config([f"+experiment=traveler_{n}"]).method.prompts.plan
            for n in ("star", "perception_test", "nextqa")} == {
        "star": "traveler/plan_short_v1.txt", "perception_test": "traveler/plan_short_v1.txt",
        "nextqa": "traveler/plan_v2.txt"}
    lvbench_strategies = load_config(["+experiment=caviar_lvbench"]).method.strategies
    assert all("asr_understanding" not in strategy for task in lvbench_strategies.values() for strategy in task)
    # Table 4's "Optimal Fixed Modules" (Sec. 5's subsets): an ablation setting over the agent ablation.
    for dataset, modules in {"lvbench": ["get_segment", "retrieval_qa"],
                             "neptune": ["get_segment", "retrieval_qa", "asr_understanding"]}.items():
        method = load_config([f"+experiment=caviar_{dataset}", "method=caviar_agent",
                              f"+oracle_modules={dataset}"]).method
        assert method.strategies.mcq == method.strategies.open == [[*modules, "think", "finish"]]
        assert not method.critic and method.direct is None


def test_the_bootstrap_interval_does_not_depend_on_the_order_the_rows_were_read_in():
    # evaluate reads rows in the store's order, the report sorted by method and question: one interval.
    rows = [(1.0 if i < 79 else 0.0, f"v{i // 4}") for i in range(355)]
    shuffled = [rows[i] for i in np.random.default_rng(7).permutation(len(rows))]
    assert interval(*map(list, zip(*rows))) == interval(*map(list, zip(*shuffled)))


def test_the_clustered_interval_matches_the_analytic_one_and_the_question_level_one_is_too_narrow():
    # 200 videos of 10 questions; a video's questions share its difficulty (intra-class correlation ~0.3).
    rng = np.random.default_rng(3)
    p_video = np.clip(rng.normal(0.6, 0.25, 200), 0.02, 0.98)
    scores = (rng.random((200, 10)) < p_video[:, None]).astype(float)
    values, videos = list(scores.ravel()), [f"v{i}" for i in range(200) for _ in range(10)]
    questions = [f"q{i}" for i in range(len(values))]
    # Equal clusters: the mean is the mean of video means, whose standard error is their sd over sqrt(200).
    analytic = 1.96 * scores.mean(axis=1).std(ddof=1) / np.sqrt(200)
    low, high = interval(values, videos)
    assert (high - low) / 2 == pytest.approx(analytic, rel=0.1)
    naive_low, naive_high = interval(values, questions)
    assert (naive_high - naive_low) / 2 == pytest.approx(1.96 * np.std(values, ddof=1) / np.sqrt(2000), rel=0.1)
    assert (naive_high - naive_low) < 0.7 * (high - low)


def test_paired_comparison_tests_the_difference_on_shared_questions_with_mcnemar_and_a_paired_interval():
    from scipy.stats import binomtest

    from vidprep.evaluation.scoring import comparison, mcnemar_exact, sign_flip_test

    questions = [Question(qid=f"q{i}", video=f"v{i // 3}.mp4", task="mcq", question="?", choices=["a", "b"],
                          answer=0, qtype="T") for i in range(90)]
    # Run a is right on 60, run b on 45; they differ on 25 questions (20 only a, 5 only b), spread over the videos.
    a_right = [i % 18 < 12 for i in range(90)]
    b_right = [i % 18 < 8 or i % 18 == 12 for i in range(90)]
    a = [dict(r, run_key="a") for r in prediction_rows(questions, [0 if r else 1 for r in a_right])]
    b = [dict(r, run_key="b") for r in prediction_rows(questions, [0 if r else 1 for r in b_right])]
    # A question that failed in run b is left out of both, and so is a refused one.
    b[89] |= {"valid": False, "error": "LLMError: timed out", "prediction_json": "null"}
    b[88] |= {"valid": False, "error": "LLMRefused: 400: too long", "prediction_json": "null"}
    compared = comparison([("m", "a"), ("n", "b")], a + b)
    (pair,) = compared["pairs"]
    assert compared["shared"] == pair["shared"] == 88 and not compared["same"]
    assert pair["difference"] == pytest.approx((60 - 45) / 88)
    assert pair["p"] == pytest.approx(binomtest(5, 25, 0.5).pvalue) == mcnemar_exact(a_right[:88], b_right[:88])
    assert pair["test"] == "McNemar exact" and pair["excludes_zero"] and 0 < pair["interval"][0] < pair["difference"]
    assert compared["reports"]["b"]["tasks"]["mcq"]["failed"] == 0  # the shared questions only
    # Same answers: no difference, and the interval is the point 0.
    same = comparison([("m", "a"), ("n", "b")], a + [dict(r, run_key="b") for r in a])["pairs"][0]
    assert same["difference"] == 0 and same["p"] == 1.0 and not same["excludes_zero"]
    # The sign-flip test of continuous scores, exact below 17 differences: flipping 4 equal ones.
    assert sign_flip_test([0.5] * 4) == pytest.approx(2 / 16)


def test_failed_questions_are_coverage_and_a_split_unit_is_never_rescored_as_right():
    from vidprep.evaluation.scoring import comparison, coverage

    answer_q = Question(qid="v_2", video="v.mp4", task="mcq", question="?", choices=["a", "b"], answer=0,
                        qtype="PA", categories=["predictive"], unit="v_predictive")
    reason_q = Question(qid="v_3", video="v.mp4", task="mcq", question="?", choices=["a", "b"], answer=1,
                        qtype="PR", categories=["predictive"], unit="v_predictive")
    other = Question(qid="w_0", video="w.mp4", task="mcq", question="?", choices=["a", "b"], answer=0, qtype="D")
    # Run a: answer right, reason wrong (the unit is wrong). Run b: answer right, reason failed.
    a = [dict(r, run_key="a") for r in prediction_rows([answer_q, reason_q, other], [0, 0, 0])]
    b = [dict(r, run_key="b") for r in prediction_rows([answer_q, reason_q, other], [0, None, 0])]
    b[1] |= {"error": "LLMError: the endpoint did not answer"}
    entry = report(b)["tasks"]["mcq"]
    assert (entry["score"], entry["failed"], entry["scored"]) == (1.0, 1, 2)
    assert coverage(entry) == "scored 2 of 3; 1 failed (LLM errors); rerun to complete"
    compared = comparison([("m", "a"), ("n", "b")], a + b)
    # Only w_0 is shared: run a's answer half alone would score right.
    assert compared["shared"] == 1
    assert compared["reports"]["a"]["tasks"]["mcq"]["score"] == 1.0 == compared["pairs"][0]["shared"]


def test_every_headline_figure_has_an_interval():
    questions = [Question(qid=f"q{i}", video=f"v{i % 8}.mp4", task="mcq", question="?", choices=["a", "b"], answer=0,
                          qtype=["Interaction", "Sequence"][i % 2], categories=[["Interaction", "Sequence"][i % 2]])
                 for i in range(40)]
    rows = prediction_rows(questions, [i % 3 and 1 for i in range(40)])
    entry = report(rows, benchmark=run_benchmark({"dataset": "star"}))["tasks"]["mcq"]
    intervals = entry["intervals"]
    for figure, found in [("mean of categories", intervals["mean of categories"]),
                          *intervals["per_type"].items(), *intervals["per_category"].items()]:
        value = entry["mean of categories"] if figure == "mean of categories" else entry["per_type"].get(
            figure, entry["per_category"].get(figure))
        assert found[0] <= value <= found[1], figure
    spans = [Question(qid=f"s{i}", video=f"v{i % 5}.mp4", task="rtl", question="when?", answer=[2.0, 6.0],
                      qtype="rtl", duration=20.0) for i in range(20)]
    rtl = report(prediction_rows(spans, [[2.0, 6.0 + i % 4] for i in range(20)]))["tasks"]["rtl"]
    assert rtl["intervals"]["mIoU per video"][0] <= rtl["mIoU per video"] <= rtl["intervals"]["mIoU per video"][1]
    assert rtl["intervals"]["P@0.5 per video"] is not None

