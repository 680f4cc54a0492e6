"""What long runs on real clusters go through: two jobs on one store, readers during a write, an
LLM endpoint that fails for a stretch, and API keys that must never be written anywhere."""

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vidprep.pipeline.answer import answer
from vidprep.pipeline.plan import build_plan
from vidprep.store.settings import StoreSettings
from vidprep.store.artifacts import SEGMENT_CAPTIONS, SUMMARIES, TRANSCRIPTS
from vidprep.store.keys import content_id
from vidprep.store.store import Store
from vidprep.conf.checks import ArtifactMissing
from vidprep.jobs.bench.endpoint import ScriptedEndpoint, fitting_reply
from tests.conftest import config_for
from tests.test_resume import _snapshot

SECRET = "sk-vidprep-test-DO-NOT-LEAK-4242"
# The summaries in the store were written by the local LLM; LLoVi answers from captions alone, so the
# scripted endpoint's runs leave the summary stage out instead of keying new summaries by it.
WITHOUT_SUMMARY = ["~stages.summary"]


# The two jobs leave out the frame stages no reader below looks at (nothing downstream reads them).
FRAME_STAGES = ("frame_embeddings", "frame_captions")


def _precompute_process(uri, sample_dir) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "vidprep.jobs.cli", "precompute", f"store.uri={uri}", "dataset=folder",
                             f"dataset.manifest={sample_dir}", "ray.progress_bars=false",
                             # Compaction after every video, while the other job writes.
                             "store.compact_every_videos=1", *(f"~stages.{name}" for name in FRAME_STAGES)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _without_frame_stages(snapshot: dict) -> dict:
    kept = {name: rows for name, rows in snapshot.items() if name not in ("frame_embeddings_384", "frame_captions")}
    kept["stage_done"] = {k: row for k, row in kept["stage_done"].items() if dict(row)["stage"] not in FRAME_STAGES}
    return kept


def test_two_jobs_on_one_store_write_one_copy_and_readers_see_only_complete_artifacts(
        tmp_path, sample_dir, precomputed):
    cfg, reference, _ = precomputed
    uri = str(tmp_path / "db")
    keys = build_plan(cfg.stages).keys
    videos = [content_id(sample_dir / n) for n in ("scenes.mp4", "places.mp4", "short.mp4")]
    jobs = [_precompute_process(uri, sample_dir), _precompute_process(uri, sample_dir)]
    seen: dict[tuple, object] = {}
    misses = 0
    while any(job.poll() is None for job in jobs):
        if not os.path.exists(uri):
            time.sleep(0.2)
            continue
        store = Store(uri)
        for video in videos:
            for name, artifact in (("segment_captions", SEGMENT_CAPTIONS), ("summary", SUMMARIES),
                                   ("transcript", TRANSCRIPTS)):
                try:
                    seen[(video, name)] = store.read(artifact, video, keys[name])
                except ArtifactMissing:
                    misses += 1
        time.sleep(0.5)
    outputs = [job.communicate() for job in jobs]
    # Exit 3: the sample's corrupt.mp4 fails; everything else completes.
    assert all(job.returncode == 3 for job in jobs), [err[-2000:] for _, err in outputs]
    final = StoreSettings.from_config(config_for(uri, sample_dir).store).open()
    got, want = _snapshot(final), _without_frame_stages(_snapshot(reference))
    assert not got["frame_embeddings_384"] and not got["frame_captions"]
    got = _without_frame_stages(got)
    # Summaries included: the local LLM server's reply does not depend on the other job's requests.
    assert got == want
    # What a reader got while the jobs ran was the finished artifact, never a part of it.
    assert seen and misses
    for (video, name), value in seen.items():
        artifact = {"segment_captions": SEGMENT_CAPTIONS, "summary": SUMMARIES, "transcript": TRANSCRIPTS}[name]
        assert value == final.read(artifact, video, keys[name]), (video, name)


@pytest.fixture()
def mcq_questions(tmp_path, sample_dir):
    lines = [line for line in (sample_dir / "questions.jsonl").read_text().splitlines()
             if json.loads(line)["task"] == "mcq"]
    path = tmp_path / "mcq.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path, len(lines)


def _scripted_answer_config(precomputed, sample_dir, questions, scripted, model, *extra):
    cfg, _, _ = precomputed
    return config_for(cfg.store.uri, sample_dir, "method=llovi", f"dataset.questions.path={questions}", f"+dataset.questions.video_dir={sample_dir}",
                      "llm=openai", f"llm.client.base_url={scripted.base_url}", f"llm.client.model={model}",
                      "llm.client.cache=false", "llm.client.backoff_s=0.05", "llm.client.timeout_s=1",
                      "llm.client.api_key_env=VIDPREP_TEST_KEY", *WITHOUT_SUMMARY, *extra)


def test_llm_faults_slow_a_run_down_and_past_the_budget_fail_only_that_question(
        precomputed, sample_dir, mcq_questions, monkeypatch):
    monkeypatch.setenv("VIDPREP_TEST_KEY", SECRET)
    questions, count = mcq_questions
    scripted = ScriptedEndpoint(default='{"answer": 1, "confidence": 3}')
    try:
        # A stretch of every fault, each within the retry budget of its call.
        scripted.script = [("status", 429, {"Retry-After": "0.3"}), ("status", 500), ("hang", 3), ("drop",)]
        cfg = _scripted_answer_config(precomputed, sample_dir, questions, scripted, "scripted", "llm.client.max_retries=4")
        started = time.monotonic()
        first = answer(cfg)
        assert (first.answered, first.invalid) == (count, 0)
        assert len(scripted.requests) == count + 4 and time.monotonic() - started > 1.3
        assert all(a == f"Bearer {SECRET}" for a in scripted.authorizations)

        # Past the budget (2 attempts): the first question fails with the reason, the rest are answered
        # (one question at a time, so both faults meet the same one).
        scripted.script = [("status", 503), ("status", 503)]
        cfg = _scripted_answer_config(precomputed, sample_dir, questions, scripted, "scripted-2", "llm.client.max_retries=1",
                                      "llm.client.concurrency=1")
        second = answer(cfg)
        store = StoreSettings.from_config(cfg.store).open()
        rows = store.scan("predictions", f"run_key = '{second.run_key}'").to_pylist()
        failed = [r for r in rows if not r["valid"]]
        assert second.answered == count and len(failed) == 1
        assert failed[0]["error"].startswith("LLMError") and "503" in failed[0]["error"]

        # A re-run asks only the failed question again.
        before = len(scripted.requests)
        third = answer(cfg)
        assert (third.answered, third.skipped, third.invalid) == (1, count - 1, 0)
        assert len(scripted.requests) == before + 1
    finally:
        scripted.close()


def test_api_keys_never_reach_logs_traces_reports_or_the_store(tmp_path, precomputed, sample_dir, mcq_questions):
    questions, _ = mcq_questions
    scripted = ScriptedEndpoint(default='{"answer": 0, "confidence": 4}')
    scripted.script = [("status", 401), ("status", 429, {"Retry-After": "0"})]
    cfg, _, _ = precomputed
    store_copy = tmp_path / "store"
    subprocess.run(["cp", "-r", cfg.store.uri, str(store_copy)], check=True)
    overrides = [f"store.uri={store_copy}", "dataset=folder", f"dataset.manifest={sample_dir}", "method=llovi",
                 f"dataset.questions.path={questions}",
                 f"+dataset.questions.video_dir={sample_dir}", "llm=openai", f"llm.client.base_url={scripted.base_url}",
                 "llm.client.model=scripted", "llm.client.backoff_s=0.05", "llm.client.max_retries=0",
                 "llm.client.api_key_env=VIDPREP_TEST_KEY", *WITHOUT_SUMMARY, "ray.progress_bars=false",
                 f"hydra.run.dir={tmp_path / 'outputs'}"]
    env = dict(os.environ, VIDPREP_TEST_KEY=SECRET)
    runs = [subprocess.run([sys.executable, "-m", "vidprep.jobs.cli", command, *overrides], env=env, capture_output=True,
                           text=True, timeout=600, check=False) for command in ("answer", "answer", "evaluate")]
    scripted.close()
    # The first run's two failed questions make it exit 3 (failures); the second asks them again.
    assert [r.returncode for r in runs] == [3, 0, 0], [r.stderr[-2000:] for r in runs]
    # The key was sent and the failures it met were reported; nowhere is the key written.
    assert f"Bearer {SECRET}" in scripted.authorizations
    assert ", 2 failed" in runs[0].stdout and ", 0 failed" in runs[1].stdout
    # Each failed question is named with its reason at the end of the run.
    named = [line for line in runs[0].stdout.splitlines() if ": failed: LLMError: " in line]
    assert len(named) == 2 and any("401" in line for line in named), runs[0].stdout
    for run in runs:
        assert SECRET not in run.stdout + run.stderr
    ray_logs = Path("/tmp/ray/session_latest/logs")
    for folder in (store_copy, tmp_path / "outputs", ray_logs):
        for path in folder.rglob("*"):
            if path.is_file():
                assert SECRET.encode() not in path.read_bytes(), path


def test_questions_are_answered_at_the_endpoints_concurrency_as_one_at_a_time_answers_them(
        precomputed, sample_dir, monkeypatch):
    monkeypatch.setenv("VIDPREP_TEST_KEY", SECRET)
    questions = sample_dir / "questions.jsonl"
    endpoint = ScriptedEndpoint(latency_s=0.5, reply=fitting_reply)
    runs = {}
    try:
        for concurrency in (1, 8):
            endpoint.reset()
            cfg = _scripted_answer_config(precomputed, sample_dir, questions, endpoint, f"scripted-c{concurrency}",
                                          f"llm.client.concurrency={concurrency}")
            summary = answer(cfg)
            store = StoreSettings.from_config(cfg.store).open()
            rows = store.scan("predictions", f"run_key = '{summary.run_key}'").to_pylist()
            runs[concurrency] = (endpoint.peak, {r["qid"]: (
                r["prediction_json"], r["valid"], r["error"], r["llm_calls"], r["prompt_tokens"],
                [s["kind"] for s in json.loads(r["trace_json"])]) for r in rows})
    finally:
        endpoint.close()
    (one_peak, one), (many_peak, many) = runs[1], runs[8]
    # The sample's 7 questions, one LLM call each, all in flight at once; each question's row is what it
    # is one at a time: its answer, and only its own calls counted.
    assert len(one) == 7 and one_peak == 1 and many_peak == 7, (one_peak, many_peak)
    assert many == one and all(calls == 1 for _, _, _, calls, _, _ in one.values())
    # Each run compacted what it wrote (one at a time, 7 commits): a write's key lookup scans every
    # fragment outside the index, so one fragment per question slowed each write as a run went on.
    assert store.table("predictions").stats()["fragment_stats"]["num_fragments"] <= 2


def test_a_piped_answer_run_says_every_10_s_what_its_question_is_doing_and_once_killed_is_marked_incomplete(
        precomputed, sample_dir, mcq_questions):
    """A first question whose one call takes 30 s: in a pipe, a progress line comes every 10 s meanwhile,
    naming it (once a line came only when a question finished: TraveLER was silent for 28 minutes). The
    run is killed during the second: evaluate marks it incomplete with the command that completes it."""
    import threading

    questions, _ = mcq_questions
    asked = [json.loads(line)["qid"] for line in questions.read_text().splitlines()[:3]]
    cfg, _, _ = precomputed
    store = StoreSettings.from_config(cfg.store).open()
    endpoint = ScriptedEndpoint(reply=fitting_reply, latency_s=30)
    overrides = [f"store.uri={cfg.store.uri}", "dataset=folder", f"dataset.manifest={sample_dir}", "method=llovi",
                 f"dataset.questions.path={questions}", f"+dataset.questions.video_dir={sample_dir}", "answer.limit=3",
                 "llm=openai", f"llm.client.base_url={endpoint.base_url}", "llm.client.model=scripted-slow",
                 "llm.client.concurrency=1", "llm.client.timeout_s=60", "llm.client.api_key_env=VIDPREP_TEST_KEY",
                 *WITHOUT_SUMMARY, "ray.progress_bars=false"]
    env = dict(os.environ, VIDPREP_TEST_KEY=SECRET)
    cli = [sys.executable, "-m", "vidprep.jobs.cli"]
    try:
        run = subprocess.Popen([*cli, "answer", *overrides], text=True, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
        heard: list[tuple[float, str]] = []
        reader = threading.Thread(target=lambda: heard.extend((time.monotonic(), line.rstrip("\n"))
                                                              for line in run.stderr))
        reader.start()
        deadline, key = time.monotonic() + 240, None
        # Killed once its first answer is stored (its start was recorded before it).
        while not (key and store.predictions([key])) and time.monotonic() < deadline and run.poll() is None:
            key = next((k for k, r in store.answer_runs().items()
                        if r["settings"]["llm"]["client"]["model"] == "scripted-slow"), None)
            time.sleep(0.2)
        run.kill()
        run.wait()
        reader.join()
        beats = [(at, line) for at, line in heard if line.startswith("questions: 0/3 done")]
        assert all(9 <= later - earlier <= 12 for (earlier, _), (later, _) in zip(beats, beats[1:])), beats
        # The first may come before the worker (its models loading) has reported its question, which may be
        # any of the three (Ray Data hands them out in no set order).
        named = [re.search(r"1 under way, the oldest \((\w+)\) for ", line) for _, line in beats]
        naming = [line for (_, line), found in zip(beats, named) if found and found[1] in asked]
        assert len(naming) >= 2 and len({found[1] for found in named if found}) == 1 and all(
            ", at step " in line and line.endswith("LLM calls so far: 0") for line in naming), beats

        evaluated = subprocess.run([*cli, "evaluate", "--run", key, f"store.uri={cfg.store.uri}"], env=env,
                                   capture_output=True, text=True, timeout=120)
        note = re.search(r"incomplete: 1 of the 3 questions asked have an answer \(0 failed or refused, 2 not asked "
                         r"yet\); complete it with `(vidprep answer [^`]+)`", evaluated.stdout)
        assert evaluated.returncode == 0 and note, evaluated.stdout + evaluated.stderr[-2000:]
        # The command given completes it; its progress counts the question stored before it.
        endpoint.latency_s = 0.2
        completed = subprocess.run([*cli, *shlex.split(note.group(1))[1:]], env=env, capture_output=True, text=True,
                                   timeout=300)
        assert completed.returncode == 0, completed.stderr[-2000:]
        assert "questions: 3/3 done, 0 failed" in completed.stderr and "1 already answered" in completed.stdout
    finally:
        endpoint.close()
    evaluated = subprocess.run([*cli, "evaluate", "--run", key, f"store.uri={cfg.store.uri}"], env=env,
                               capture_output=True, text=True, timeout=120)
    assert evaluated.returncode == 0 and "incomplete" not in evaluated.stdout, evaluated.stdout
