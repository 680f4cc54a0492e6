"""`vidprep answer` and `vidprep evaluate` end to end with the real local LLM, on the sample questions."""

import json
import subprocess
import sys

import pytest

from vidprep.pipeline.answer import answer
from vidprep.pipeline.questions import activitynet_rtl, egoschema, jsonl, nextqa
from vidprep.pipeline.scoring import iou, report, token_f1
from vidprep.store.store import ArtifactMissing
from tests.conftest import SHARED_VIDEOS, config_for

# Small iteration limits keep the tiny model's runs short; the control flow at the paper's
# defaults is pinned in test_agents.py.
METHODS = {
    "videoagent2": ["method.max_steps=1"],
    "traveler": ["method.max_iterations=1", "method.questions=1", "method.window=3"],
    "caviar": ["method.max_steps=1"],
    "caviar_agent": ["method.max_steps=1"],
    "caviar_single_program": [],
    "direct": [],
    "direct_transcript": [],
    "llovi": [],
    "random": [],
}


def sample_config(precomputed, sample_dir, method: str, *extra: str):
    cfg, _, _ = precomputed
    return config_for(cfg.store.uri, sample_dir, f"method={method}", *METHODS[method], *extra)


@pytest.fixture(scope="module")
def answered(precomputed, sample_dir):
    summaries = {m: answer(sample_config(precomputed, sample_dir, m)) for m in METHODS}
    return precomputed[1], summaries


@pytest.mark.parametrize("method", list(METHODS))
def test_every_method_gives_a_valid_answer_and_a_trace_for_every_question(answered, method):
    store, summaries = answered
    summary = summaries[method]
    rows = store.scan("predictions", f"run_key = '{summary.run_key}'").to_pylist()
    assert (summary.questions, summary.answered, len(rows)) == (7, 7, 7)
    # vision=stored: a method that asks visual questions is told, loudly, that no vision model answers them.
    assert bool(summary.warnings) == (method not in ("llovi", "random"))
    assert all(line.startswith("warning: ") for line in summary.lines()[:len(summary.warnings)])
    if method == "caviar_single_program":
        # The method's own failure: a program that never calls finish has no answer (counted invalid).
        assert all(r["valid"] or r["error"].startswith("InvalidAnswer: no strategy gave an answer") for r in rows)
    else:
        assert summary.invalid == 0 and all(r["valid"] for r in rows)
    for row in rows:
        trace = json.loads(row["trace_json"])
        assert trace, row["qid"]
        if method not in ("random",):
            assert row["llm_calls"] + row["cache_hits"] > 0 and any("prompt" in s for s in trace)
    if method == "traveler":
        assert all(r["visited"] for r in rows)
    scores = report(rows)
    assert set(scores["tasks"]) == {"mcq", "open", "rtl"}
    assert scores["tasks"]["rtl"]["R@0.5"] is not None


def test_rerun_answers_nothing_again(answered, precomputed, sample_dir):
    again = answer(sample_config(precomputed, sample_dir, "videoagent2"))
    assert (again.answered, again.skipped, again.llm_calls) == (0, 7, 0)


def test_evaluate_prints_scores_per_method(answered, precomputed):
    cfg, _, _ = precomputed
    done = subprocess.run([sys.executable, "-m", "vidprep.jobs.cli", "evaluate", f"store.uri={cfg.store.uri}"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    for method in METHODS:
        assert method in done.stdout
    assert "accuracy" in done.stdout and "mIoU" in done.stdout and "invalid" in done.stdout
    assert "LLM calls" in done.stdout
    key = done.stdout.split("(", 1)[1].split(")", 1)[0]
    one = subprocess.run([sys.executable, "-m", "vidprep.jobs.cli", "evaluate", "--run", key,
                          f"store.uri={cfg.store.uri}"], capture_output=True, text=True, timeout=120)
    assert one.returncode == 0 and one.stdout.count("(answer-") == 1 and f"({key})" in one.stdout, one.stderr


def test_multirun_sweep_reuses_the_same_store(answered, precomputed, sample_dir):
    cfg, _, _ = precomputed
    args = [sys.executable, "-m", "vidprep.jobs.cli", "answer", "--multirun", "method=videoagent2,caviar",
            f"store.uri={cfg.store.uri}", "dataset=folder", f"dataset.manifest={sample_dir}",
            "method.max_steps=1", "ray.progress_bars=false", f"hydra.sweep.dir={cfg.store.uri}-sweep"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=600)
    for method in ("videoagent2", "caviar"):
        assert f"({method}): 7 questions, 0 answered now, 7 already answered" in done.stdout, done.stderr[-2000:]


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


def test_critic_examples_command_writes_the_run_traces_or_says_why_not(answered, precomputed, tmp_path):
    cfg, _, _ = precomputed
    store, summaries = answered
    out = tmp_path / "examples.txt"
    done = subprocess.run([sys.executable, "-m", "vidprep.jobs.cli", "critic-examples", "--run",
                           summaries["caviar"].run_key, "--out", str(out), f"store.uri={cfg.store.uri}"],
                          capture_output=True, text=True, timeout=120)
    if done.returncode == 0:
        text = out.read_text()
        assert text.startswith("Example 1\nQuestion: ") and "Winners: [" in text and "Strategy 3 (modules: " in text
    else:
        # SmolLM2 may get no held-out question right; the run's traces were still read.
        assert "no question with a ground truth that some strategy got right" in done.stderr and not out.exists()
    wrong = subprocess.run([sys.executable, "-m", "vidprep.jobs.cli", "critic-examples", "--run",
                            summaries["llovi"].run_key, "--out", str(out), f"store.uri={cfg.store.uri}"],
                           capture_output=True, text=True, timeout=120)
    assert wrong.returncode != 0 and "is not a CAViAR answer run" in wrong.stderr


def test_answering_loads_no_precompute_model(answered, precomputed, sample_dir):
    cfg, _, _ = precomputed
    code = f"""
import json, sys
from vidprep.jobs.config import load_config
from omegaconf import OmegaConf
from vidprep.pipeline.answer import AnswerWorker, run_key
from vidprep.pipeline.plan import build_plan
from vidprep.store.settings import StoreSettings
from vidprep.pipeline.questions import jsonl
from vidprep.store.keys import content_id
cfg = load_config(["store.uri={cfg.store.uri}", "dataset=folder", "dataset.manifest={sample_dir}", "method=caviar",
                   "method.max_steps=1", "stages.frames.fps=1", "llm.client.cache=false"])
keys = build_plan(cfg.stages).keys
worker = AnswerWorker(OmegaConf.to_yaml(cfg, resolve=True), StoreSettings.from_config(cfg.store), keys, "probe")
question = jsonl("{sample_dir}/questions.jsonl")[0]
worker({{"question_json": json.dumps(question.to_dict()), "video_id": content_id(question.video)}})
watched = ["faster_whisper", "ctranslate2", "rapidocr_onnxruntime", "onnxruntime", "cv2", "av"]
print(json.dumps(sorted(m for m in watched if m in sys.modules)))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_a_missing_artifact_names_the_precompute_command(precomputed, sample_dir):
    cfg = sample_config(precomputed, sample_dir, "llovi", "stages.segments.seconds=5")
    with pytest.raises(ArtifactMissing, match="Run `vidprep precompute`"):
        answer(cfg)


@pytest.mark.skipif(not (SHARED_VIDEOS.parent / "nextqa-dev" / "val.csv").exists(), reason="no NExT-QA subset here")
def test_nextqa_loader_reads_the_real_csv(tmp_path):
    questions = nextqa(str(SHARED_VIDEOS.parent / "nextqa-dev" / "val.csv"), str(tmp_path))
    assert len(questions) == 355 and len({q.qid for q in questions}) == 355
    first = questions[0]
    assert first.task == "mcq" and len(first.choices) == 5 and first.answer == 3 and first.qtype == "causal"
    assert first.video == str(tmp_path / "8132842161.mp4")


def test_egoschema_and_rtl_and_jsonl_loaders(tmp_path, sample_dir):
    (tmp_path / "questions.json").write_text(json.dumps([{"q_uid": "abc", "question": "What did c do?",
                                                          **{f"option {i}": f"o{i}" for i in range(5)}}]))
    (tmp_path / "answers.json").write_text(json.dumps({"abc": 2}))
    ego = egoschema(str(tmp_path / "questions.json"), str(tmp_path / "answers.json"), str(tmp_path))
    assert (ego[0].answer, ego[0].choices[4], ego[0].video) == (2, "o4", str(tmp_path / "abc.mp4"))
    (tmp_path / "rtl.json").write_text(json.dumps({"v_x": {"duration": 200.0, "QA": [
        {"q": "When does he jump?", "a": "He jumps at <10> <25> after running."}]}}))
    rtl = activitynet_rtl(str(tmp_path / "rtl.json"), str(tmp_path))
    assert rtl[0].task == "rtl" and rtl[0].answer == [20.0, 50.0]
    sample = jsonl(str(sample_dir / "questions.jsonl"))
    assert len(sample) == 7 and {q.task for q in sample} == {"mcq", "rtl", "open"}


def test_scores():
    assert iou([0, 4], [2, 6]) == pytest.approx(1 / 3)
    assert iou([0, 1], [2, 3]) == 0.0
    assert token_f1("EXIT 42", "exit 42") == 1.0 and token_f1("nothing", "EXIT 42") == 0.0


def test_a_questions_cost_counts_the_vision_models_calls_and_the_frames_it_viewed(precomputed, sample_dir, tmp_path):
    import shutil

    from omegaconf import OmegaConf

    from tests.scripted_llm import ScriptedLLM
    from vidprep.pipeline.answer import AnswerWorker
    from vidprep.pipeline.plan import build_plan
    from vidprep.store.keys import content_id
    from vidprep.store.settings import StoreSettings

    cfg, _, _ = precomputed
    # A copy: this run's prediction stays out of the store the other tests report on.
    shutil.copytree(cfg.store.uri, tmp_path / "db")
    server = ScriptedLLM()
    try:
        # The method and the vision model are two clients of one scripted endpoint; S is left out, so the
        # summary made with the local LLM is not needed.
        conf = config_for(tmp_path / "db", sample_dir, "method=videoagent2", "method.max_steps=1", "method.summary=false",
                          "vision=vlm", "llm=openai", f"llm.client.base_url={server.base_url}",
                          "llm.client.model=scripted", "llm.client.cache=false", "llm.client.max_retries=0")
        worker = AnswerWorker(OmegaConf.to_yaml(conf, resolve=True), StoreSettings.from_config(conf.store),
                              build_plan(conf.stages).keys, "cost-probe")
        server.script = [("reply", json.dumps(r)) for r in (
            {"reasoning": "r", "answer": 2, "confidence": 1},
            {"reasoning": "r", "steps": [{"tool": "visual_question",
                                          "arguments": {"question": "which animal?", "timestamps": [1.0, 5.0]}}]},
            {"answer": "a cat", "confidence": 4},
            {"reasoning": "r", "answer": 0, "confidence": 5})]
        question = next(q for q in jsonl(str(sample_dir / "questions.jsonl")) if q.qid == "scenes_first")
        worker({"question_json": json.dumps(question.to_dict()), "video_id": content_id(sample_dir / "scenes.mp4")})
    finally:
        server.close()
    row = worker.store.predictions(["cost-probe"])[0]
    # Three calls of the method and one of the vision model, which saw two frames.
    assert row["valid"] and row["llm_calls"] == 4
    assert report([row])["costs"]["frames_viewed_per_question"] == 2
    # Money from the price table: 4 calls of 11 prompt and 7 completion tokens (the scripted server's usage).
    assert json.loads(row["usage_json"]) == {"scripted": {"calls": 4, "prompt_tokens": 44, "completion_tokens": 28}}
    priced = report([row], {"scripted": {"input": 1.0, "output": 2.0}})["costs"]
    assert priced["usd_per_question"] == pytest.approx((44 * 1.0 + 28 * 2.0) / 1e6)
    unpriced = report([row], {"gpt-4o": {"input": 2.5, "output": 10.0}})["costs"]
    assert unpriced["usd_per_question"] is None and unpriced["unpriced_models"] == ["scripted"]
