"""The LLM layer's control flow against a scripted OpenAI-compatible server on loopback
(the real local server is exercised by the summary stage in test_model_stages.py)."""

import json
import subprocess
import sys
import time

import pytest

from vidprep.pipeline.plan import build_plan
from vidprep.pipeline.precompute import precompute
from vidprep.store.settings import StoreSettings
from vidprep.stages.context import WorkerContext
from vidprep.stages.models.llm import LLMClient, LLMError, LLMRefused, LLMReplyError, image_part
from vidprep.store.artifacts import SUMMARIES
from vidprep.store.keys import content_id
from vidprep.store.store import Store
from vidprep.conf.checks import ModelRefused
from vidprep.stages.models.profiles import ModelProfile
from tests.conftest import SCRIPTED_PROFILE, config_for
from vidprep.jobs.bench.endpoint import ScriptedEndpoint

SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"],
          "additionalProperties": False}
ASK = [{"role": "user", "content": "What is 6 x 7?"}]


@pytest.fixture
def server():
    scripted = ScriptedEndpoint(default='{"answer": 42}')
    yield scripted
    scripted.close()


def client(server, tmp_path=None, **options) -> LLMClient:
    settings = dict(base_url=server.base_url, profile=SCRIPTED_PROFILE, timeout_s=2.0, max_retries=3,
                    backoff_s=0.05, cache=tmp_path is not None)
    llm = LLMClient(**(settings | options))
    if tmp_path:
        # The reply cache is the worker's store.
        llm.setup(WorkerContext(Store(str(tmp_path / "db"))))
    return llm


def test_retries_after_429_with_retry_after_and_500(server):
    server.script = [("status", 429, {"Retry-After": "1"}), ("status", 500), ("status", 503)]
    llm = client(server)
    started = time.monotonic()
    assert llm.complete_json(ASK, SCHEMA) == {"answer": 42}
    assert time.monotonic() - started >= 1.0
    assert len(server.requests) == 4 and llm.usage.retries == 3 and llm.usage.calls == 1


def test_timeout_and_dropped_connection_are_retried(server):
    server.script = [("hang", 3.0), ("drop",)]
    llm = client(server)
    assert llm.complete_json(ASK, SCHEMA) == {"answer": 42}
    assert llm.usage.retries == 2


def test_beyond_the_retry_budget_is_a_clear_error(server):
    server.script = [("status", 500)] * 10
    with pytest.raises(LLMError, match="failed after 3 attempts"):
        client(server, max_retries=2).complete(ASK)


def test_malformed_json_is_repaired_once(server):
    server.script = [("reply", "The answer is 42!")]
    llm = client(server)
    assert llm.complete_json(ASK, SCHEMA) == {"answer": 42}
    repair = server.requests[1]["messages"]
    assert repair[-2] == {"role": "assistant", "content": "The answer is 42!"}
    assert "not JSON" in repair[-1]["content"]


def test_still_malformed_after_repair_carries_the_raw_reply(server):
    server.script = [("reply", '{"answer": "forty-two"}'), ("reply", "{broken")]
    with pytest.raises(LLMReplyError, match="schema") as error:
        client(server).complete_json(ASK, SCHEMA)
    assert error.value.raw == "{broken"


def test_each_profiles_structured_output_mode_asks_for_the_schema_its_own_way(server):
    modes = ("json_schema", "json_object", "json_object_schema", "text")
    for mode in modes:
        profile = ModelProfile("scripted", 4096, 4096, structured_output=mode, max_string_chars=300)
        assert client(server, profile=profile).complete_json(ASK, SCHEMA) == {"answer": 42}
    formats = [r.get("response_format") for r in server.requests]
    assert formats[0]["type"] == "json_schema" and formats[0]["json_schema"]["schema"] == SCHEMA
    # JSON mode takes no schema: it is asked for in words, which also says "JSON" as OpenAI requires.
    assert formats[1] == {"type": "json_object"}
    assert formats[2] == {"type": "json_object", "schema": SCHEMA}
    assert formats[3] is None
    for request, in_words in zip(server.requests, (False, True, False, True)):
        last = request["messages"][-1]["content"]
        assert (json.dumps(SCHEMA) in last and "JSON" in last) == in_words, (request, in_words)


def test_a_plain_text_reply_gives_the_json_object_it_holds(server):
    text = ModelProfile("scripted", 4096, 4096, structured_output="text")
    server.script = [("reply", 'Sure! Here it is:\n```json\n{"answer": 42}\n```')]
    assert client(server, profile=text).complete_json(ASK, SCHEMA) == {"answer": 42}
    # Where the model is asked for a schema by its response_format, the text must be the JSON itself.
    server.script = [("reply", 'Here: {"answer": 42}'), ("reply", 'Here: {"answer": 42}')]
    with pytest.raises(LLMReplyError):
        client(server).complete_json(ASK, SCHEMA)


def test_a_refused_response_format_or_image_stops_with_the_model_and_the_setting_not_a_retry(server):
    message = "Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model."
    server.script = [("status", 400, {}, message)]
    with pytest.raises(ModelRefused, match=r"scripted at .* refused a request's response_format .*"
                                           r"structured_output=json_schema.*profile@llm.client.profile") as error:
        client(server).complete_json(ASK, SCHEMA)
    assert len(server.requests) == 1 and "\n" not in str(error.value)
    # An image the profile says the model does not take is never sent.
    text_only = ModelProfile("scripted", 4096, 4096, max_images=0)
    ask_with_image = [{"role": "user", "content": [{"type": "text", "text": "What is it?"}, image_part(b"jpeg")]}]
    with pytest.raises(ModelRefused, match="scripted takes 0 images per request"):
        client(server, profile=text_only).complete(ask_with_image)
    assert len(server.requests) == 1
    # Any other 4xx but 408, 409 and 429 is this request's refusal, final and not retried; those three
    # are tried again.
    server.script = [("status", 400, {}, "This model's maximum context length is 4096 tokens.")]
    with pytest.raises(LLMRefused, match="refused the request: 400: .*This model's maximum context length"):
        client(server).complete(ASK)
    sent = len(server.requests)
    server.script = [("status", 408, {}), ("status", 409, {})]
    assert client(server).complete(ASK) and len(server.requests) == sent + 3
    # A bad key refuses the setup, not the question: a failure, asked again next run.
    server.script = [("status", 401, {})]
    with pytest.raises(LLMError, match="refused the request: 401") as failed:
        client(server).complete(ASK)
    assert not isinstance(failed.value, LLMRefused)


def test_persistent_cache_hits_across_clients_and_can_be_switched_off(server, tmp_path):
    first = client(server, tmp_path)
    assert first.complete(ASK) == '{"answer": 42}'
    again = client(server, tmp_path)
    assert again.complete(ASK) == '{"answer": 42}'
    # Served from the cache, the call still costs what it cost when it was made.
    assert len(server.requests) == 1 and (again.usage.calls, again.usage.cache_hits) == (1, 1)
    assert (again.usage.prompt_tokens, again.usage.completion_tokens) == (
        first.usage.prompt_tokens, first.usage.completion_tokens) and first.usage.prompt_tokens > 0
    client(server, tmp_path, temperature=0.7).complete(ASK)
    assert len(server.requests) == 2, "a changed parameter must miss the cache"
    client(server, tmp_path, cache=False).complete(ASK)
    assert len(server.requests) == 3
    assert Store(str(tmp_path / "db")).table("llm_cache").count_rows() == 2


def test_token_counts_and_image_parts(server):
    llm = client(server)
    jpeg = b"\xff\xd8fake\xff\xd9"
    llm.complete([{"role": "user", "content": [{"type": "text", "text": "what is this"}, image_part(jpeg)]}])
    assert (llm.usage.prompt_tokens, llm.usage.completion_tokens) == (11, 7)
    url = server.requests[0]["messages"][0]["content"][1]["image_url"]["url"]
    assert url.startswith("data:image/jpeg;base64,")


def test_api_key_is_read_from_the_named_variable(server, monkeypatch):
    monkeypatch.setenv("SCRIPTED_KEY", "sk-test-123")
    client(server, api_key_env="SCRIPTED_KEY").complete(ASK)
    assert client(server, api_key_env="SCRIPTED_KEY")._openai().api_key == "sk-test-123"


def test_llm_server_dying_mid_run_leaves_no_partial_rows_and_a_rerun_completes(tmp_path, sample_dir, ray_session):
    scripted = ScriptedEndpoint()
    port = scripted.port
    manifest = tmp_path / "two.csv"
    manifest.write_text(f"path\n{sample_dir / 'places.mp4'}\n{sample_dir / 'short.mp4'}\n")
    # One request at a time: the second video's summary is asked after the server died, never beside the
    # last reply (two in flight at once, both were answered and nothing failed).
    overrides = ["llm=openai", f"llm.client.base_url={scripted.base_url}", "llm.client.max_retries=1",
                 "llm.client.backoff_s=0.05", "llm.client.concurrency=1", "~stages.frame_embeddings",
                 "~stages.frame_captions"]
    cfg = config_for(tmp_path / "db", manifest, *overrides)
    scripted.script = [("reply_then_die", '{"reasoning": "scripted", "summary": "the only reply before the server died"}')]
    first = precompute(cfg)
    assert (first.done, first.failed) == (1, 1) and first.failures[0]["stage"] == "summary"
    assert "failed after 2 attempts" in first.failures[0]["error"]
    store = StoreSettings.from_config(cfg.store).open()
    assert store.scan("summaries").num_rows == 1
    revived = ScriptedEndpoint(port=port)
    try:
        second = precompute(cfg)
    finally:
        revived.close()
    assert (second.done, second.skipped, second.llm_calls) == (1, 1, 1)
    assert second.rows["segment_captions"] == 0
    key = build_plan(cfg.stages).keys["summary"]
    rows = store.scan("summaries").to_pylist()
    assert len(rows) == 2 and len({r["row_id"] for r in rows}) == 2
    summaries = {store.read(SUMMARIES, content_id(sample_dir / n), key)[0].summary for n in ("places.mp4", "short.mp4")}
    assert summaries == {"the only reply before the server died", "a scripted summary"}


def test_requests_in_flight_count_in_the_callers_usage_scope(server):
    from vidprep.stages.context import counted

    llm = client(server, concurrency=4)
    with counted() as used:
        replies = list(llm.in_flight(lambda n: llm.complete_json([{"role": "user", "content": f"{n} x 7?"}], SCHEMA),
                                     [1, 2, 3]))
    assert replies == [{"answer": 42}] * 3 and used["scripted"].calls == 3 and len(server.requests) == 3


def test_vision_language_backends_send_the_frames_as_image_parts(server):
    from vidprep.agents.traveler import LMM_QUESTION
    from vidprep.agents.vision import VisionLanguageModel, VisionQuestion
    from vidprep.stages.models.describers import VisionLanguageDescriber
    from vidprep.store.artifacts import Frame

    jpeg = b"\xff\xd8frame\xff\xd9"
    server.default = '{"caption": "a cat on a mat", "confidence": 4}'
    caption, confidence = VisionLanguageDescriber(client(server)).describe([jpeg, jpeg])
    assert (caption, confidence) == ("a cat on a mat", 0.8)
    parts = server.requests[-1]["messages"][0]["content"]
    assert [p["type"] for p in parts] == ["text", "image_url", "image_url"]
    server.default = '{"answer": "a tabby cat", "confidence": 5}'
    frames = [Frame("v", 0, 2.0, jpeg, 4, 4)]
    vision = VisionLanguageModel(client(server))
    assert vision.ask("What animal is it?", frames, None, VisionQuestion()) == ("a tabby cat", 1.0)
    asked = server.requests[-1]["messages"][0]["content"]
    assert [p["type"] for p in asked] == ["text", "text", "image_url"]
    assert "What animal is it?" in asked[0]["text"] and asked[1]["text"] == "Frame 1 at 2.0s:"
    # TraveLER's LMM: its instruction, free text of up to 150 tokens sampled at temperature 1; a reply that
    # stops mid-sentence at the cap is the answer as it stands, with no confidence.
    server.default = "A tabby cat sits on the"
    assert vision.ask("What animal is it?", frames, None, LMM_QUESTION) == ("A tabby cat sits on the", None)
    request = server.requests[-1]
    assert request["messages"][0]["content"][0]["text"].startswith("If there are factual errors")
    assert (request["max_tokens"], request["temperature"], request.get("response_format")) == (150, 1.0, None)


def test_summary_reasons_first_over_captions_in_chunks_then_combines(server):
    from vidprep.stages.summarize import SummarizeVideo
    from vidprep.store.artifacts import SegmentCaption

    captions = [SegmentCaption(i, i * 10.0, i * 10.0 + 10, f"caption of segment {i} " + "x" * 150, 0.5, "m")
                for i in range(12)]
    server.default = '{"reasoning": "scripted", "summary": "a scripted summary"}'
    stage = SummarizeVideo(llm=client(server), max_input_chars=1000)
    rows = [r for batch in stage.run({"duration": 120.0}, iter([captions])) for r in batch]
    assert rows[0]["chunks"] == 3 and rows[0]["summary"] == "a scripted summary"
    assert len(server.requests) == 4, "three chunk summaries, then one combining call"
    assert "Part 3:" in server.requests[-1]["messages"][1]["content"]
    # VideoAgent2's CoT prompting: every call asks for the reasoning before the summary.
    for request in server.requests:
        schema = request["response_format"]["json_schema"]["schema"]
        assert list(schema["properties"]) == ["reasoning", "summary"]
        assert 'In "reasoning"' in request["messages"][0]["content"]

    # The three chunks are asked at once, and combined in their order.
    def summary_naming_the_first_segment(body) -> str:
        text = body["messages"][1]["content"]
        first = text.split("caption of segment ")[1].split()[0] if "caption of segment" in text else "combined"
        return json.dumps({"reasoning": "scripted", "summary": f"from segment {first}"})

    endpoint = ScriptedEndpoint(latency_s=0.3, reply=summary_naming_the_first_segment)
    try:
        stage = SummarizeVideo(llm=client(endpoint, concurrency=4), max_input_chars=1000)
        rows = [r for batch in stage.run({"duration": 120.0}, iter([captions])) for r in batch]
    finally:
        endpoint.close()
    assert endpoint.peak == 3 and rows[0]["summary"] == "from segment combined"
    combined = endpoint.requests[-1]["messages"][1]["content"]
    assert combined.index("Part 1: from segment 0") < combined.index("Part 2: from segment 5") < combined.index("Part 3: from segment 10")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


ENSURE = """import sys
from pathlib import Path
from vidprep.jobs.config import load_config
from vidprep.jobs.serve_llm import ensure_local_llm
process = ensure_local_llm(load_config(["llm.server.port=" + sys.argv[1]]).llm, Path(sys.argv[2]))
print("started", process.pid) if process else print("shared")
"""


def test_two_commands_started_at_once_share_one_embedded_llm_server(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    port = str(_free_port())
    commands = [subprocess.Popen([sys.executable, "-c", ENSURE, port, str(tmp_path / f"server{i}.log")],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    outputs = [command.communicate(timeout=300) for command in commands]
    said = sorted(out.split()[0] for out, _ in outputs if out)
    started = [int(out.split()[1]) for out, _ in outputs if out.startswith("started")]
    try:
        assert said == ["shared", "started"], [err[-1000:] for _, err in outputs]
        # One server was started: one log, and no second server that failed to bind the port.
        logs = [log.read_text() for log in tmp_path.glob("server*.log")]
        assert len(logs) == 1 and "address already in use" not in logs[0]
    finally:
        for pid in started:
            os.kill(pid, signal.SIGTERM)


def test_caption_stages_keep_the_endpoints_requests_in_flight_and_store_what_one_at_a_time_stores(
        tmp_path, sample_dir, ray_session):
    import hashlib

    def caption_naming_the_frames(body) -> str:
        images = [p["image_url"]["url"] for p in body["messages"][0]["content"] if p["type"] == "image_url"]
        return json.dumps({"caption": hashlib.sha256("".join(images).encode()).hexdigest()[:16], "confidence": 3})

    # Every caption names the frames it was asked about, so a row stored against the wrong segment shows.
    endpoint = ScriptedEndpoint(latency_s=0.3, reply=caption_naming_the_frames)
    stores, peaks, calls = [], [], []
    try:
        for concurrency in (1, 8):
            endpoint.reset()
            # 2-second segments: the sample's 16-second video has 8 of them to caption.
            cfg = config_for(tmp_path / f"db-{concurrency}", sample_dir, "describer=vlm", "llm=openai",
                             f"llm.client.base_url={endpoint.base_url}", "llm.client.model=scripted",
                             f"llm.client.concurrency={concurrency}", "stages.segments.seconds=2",
                             "~stages.frame_embeddings", "~stages.transcript", "~stages.summary")
            summary = precompute(cfg)
            assert summary.failed == 1, summary.failures  # the sample's corrupt.mp4
            store = Store(str(tmp_path / f"db-{concurrency}"))
            stores.append({name: sorted((r["row_id"], r["caption"], r["confidence"]) for r in store.scan(name).to_pylist())
                           for name in ("segment_captions", "frame_captions")})
            peaks.append(endpoint.peak)
            calls.append(summary.llm_calls)
    finally:
        endpoint.close()
    # One request at a time per caption stage's actor (two stages run at once), then several per actor.
    assert peaks[0] <= 2 and peaks[1] >= 6, peaks
    assert stores[0] == stores[1] and len(stores[0]["segment_captions"]) >= 13
    assert calls[0] == calls[1] > 0


def test_two_processes_on_one_endpoint_share_its_limit():
    endpoint = ScriptedEndpoint(latency_s=0.3, default='{"answer": 1}')
    job = ("import sys; from vidprep.stages.models.llm import LLMClient; "
           "from vidprep.stages.models.profiles import ModelProfile; "
           "llm = LLMClient(base_url=sys.argv[1], profile=ModelProfile('m', 4096, 4096), cache=False, concurrency=4); "
           "list(llm.in_flight(lambda i: llm.complete([{'role': 'user', 'content': str(i)}]), range(8)))")
    try:
        jobs = [subprocess.Popen([sys.executable, "-c", job, endpoint.base_url]) for _ in range(2)]
        assert [j.wait(timeout=60) for j in jobs] == [0, 0]
    finally:
        endpoint.close()
    # Each process alone would keep 4 in flight; together they keep no more than the limit, and use it.
    assert endpoint.served == 16 and endpoint.peak == 4


# Another command's answer run: long completions back to back from two threads, so the server (one
# request at a time) always has one under way and one waiting.
HOLD_BUSY = """
import sys, threading, openai
client = openai.OpenAI(base_url=sys.argv[1], api_key="x", max_retries=0, timeout=600)
def hold():
    while True:
        client.chat.completions.create(model=sys.argv[2], max_tokens=300, temperature=1.0, messages=[
            {"role": "user", "content": "Count from 1 to 500, one number per line."}])
threads = [threading.Thread(target=hold, daemon=True) for _ in range(2)]
[t.start() for t in threads]
[t.join() for t in threads]
"""


def test_a_server_held_busy_by_another_process_is_waited_for_and_a_dead_one_is_not(local_llm, tmp_path):
    import socket

    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    from vidprep.conf.checks import EndpointUnreachable
    from vidprep.jobs.serve_llm import _wait_until_serving, ensure_local_llm

    client = instantiate(local_llm.client, cache=False)
    holder = subprocess.Popen([sys.executable, "-c", HOLD_BUSY, client.base_url, client.model])
    try:
        # The health check is not answered while a completion runs: it times out (a warning, no error).
        deadline = time.monotonic() + 60
        while True:
            started = time.monotonic()
            client.check(timeout_s=0.5)
            if time.monotonic() - started >= 0.5:
                break
            assert time.monotonic() < deadline, "the server never got busy: the test would test nothing"
            time.sleep(0.2)
        # Neither restarted nor waited for until a deadline: it listens, so it is up.
        started = time.monotonic()
        assert ensure_local_llm(local_llm, tmp_path / "llm-server.log") is None
        assert time.monotonic() - started < 5
        # This command's request waits its turn behind the other's, and is answered.
        assert client.complete([{"role": "user", "content": "Say hello."}], max_tokens=5)
    finally:
        holder.kill()
        holder.wait()
    # A server this command started that exits: stopped at once, and the message names no log that does
    # not exist.
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    with pytest.raises(EndpointUnreachable, match=f"the LLM endpoint http://127.0.0.1:{port}/v1 does not answer"):
        LLMClient(f"http://127.0.0.1:{port}/v1", SCRIPTED_PROFILE).check(timeout_s=0.5)
    exited = subprocess.Popen([sys.executable, "-c", "pass"])
    with pytest.raises(EndpointUnreachable, match=rf"did not answer on 127.0.0.1:{port} within 30 s$"):
        _wait_until_serving(OmegaConf.create({"host": "127.0.0.1", "port": port, "startup_timeout_s": 30}), exited,
                            tmp_path / "llm-server.log")
