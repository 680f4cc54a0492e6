"""Requests per second against an OpenAI-compatible endpoint that answers every request after a fixed
latency, with no limit on requests in flight: captioning with `describer=vlm`, and answering with llovi
and videoagent2, each against the ideal (concurrency / latency) of the same run.

The rate is the endpoint's own: requests answered over the time it had at least one in flight, so
what vidprep does between its requests (Ray's start, model loads, decoding and the CPU stages between
the caption and summary requests) is not in it, and how full it keeps the endpoint while it asks is.
Each concurrency names its own model, so its captions, summary and answers are asked anew."""

import json
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from vidprep.jobs.bench.figures import BenchRun, Figure
from vidprep.jobs.config import load_config
from vidprep.pipeline.answer import answer
from vidprep.pipeline.precompute import precompute

LATENCY_S = 0.5
CONCURRENCY = (8, 32)
# Work per endpoint slot, so that each concurrency's figure has as many rounds of requests as the other's
# and the rounds that cannot fill the endpoint (a video's summary, the last questions' remaining steps)
# weigh alike: seconds of video to caption (2-second segments; 10 minutes at 8) and questions to answer
# (128 at 8).
VIDEO_SECONDS_PER_SLOT = 75
QUESTIONS_PER_SLOT = 16
# The answers' video, and the precompute figure again over this many videos sharing the seconds.
ANSWER_VIDEO_SECONDS = 600
DATASET_VIDEOS = 4
# The precompute figures measure the stages that ask the endpoint. What they read (frames, segments) is
# made before, unmeasured: on 2 cores decoding is several times slower than the endpoint's captioning, so
# it would split the endpoint's work into bursts, each with its own tail. Speech and frame embeddings ask
# nothing of the endpoint and are left out.
WITHOUT_SPEECH_OR_EMBEDDINGS = ["~stages.transcript", "~stages.frame_embeddings"]
WITHOUT_ASKING_STAGES = ["~stages.segment_captions", "~stages.frame_captions", "~stages.summary"]


def fitting_reply(body: dict) -> str:
    """A reply that fits the request's JSON schema and depends on its text (so a reply given to the wrong
    request shows): integers and numbers from the text, within their bounds; strings naming it."""
    seed = sum(json.dumps(body["messages"], sort_keys=True).encode()) % 997

    def instance(schema: dict):
        if "anyOf" in schema:
            return instance(schema["anyOf"][seed % len(schema["anyOf"])])
        if "enum" in schema:
            return schema["enum"][seed % len(schema["enum"])]
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = kind[seed % len(kind)]
        if kind == "null":
            return None
        if kind == "object":
            return {name: instance(part) for name, part in schema.get("properties", {}).items()}
        if kind == "array":
            return [instance(schema["items"])] if schema.get("minItems") else []
        if kind in ("integer", "number"):
            low = schema.get("minimum", 0)
            value = low + seed % (int(schema.get("maximum", low + 5) - low) + 1)
            return value if kind == "integer" else float(value)
        if kind == "boolean":
            return bool(seed % 2)
        return f"reply {seed}"

    response_format = body.get("response_format") or {}
    schema = (response_format.get("json_schema") or {}).get("schema") or response_format.get("schema") or \
        _schema_in_words(body["messages"][-1]["content"])
    return json.dumps(instance(schema)) if schema else f"reply {seed}"


def _schema_in_words(content) -> dict:
    """The schema a JSON-mode or plain-text request asks for at the end of its last message, or {}."""
    text = content if isinstance(content, str) else "\n".join(p["text"] for p in content if p.get("type") == "text")
    marker = "JSON schema:\n"
    return json.loads(text[text.rindex(marker) + len(marker):].splitlines()[0]) if marker in text else {}


class ScriptedEndpoint:
    """An OpenAI-compatible endpoint on loopback, answering every chat completion after `latency_s`, with no
    limit on requests in flight: with the next scripted action, else `reply(body)` where given, else
    `default`. The bench's endpoint (fitting replies) and the tests' scripted one.

    Actions: ("reply", text), ("status", code, {headers}[, message]), ("hang", seconds), ("drop",), and
    ("reply_then_die", text): answer, then shut the server down (connections are refused after).
    Counted: the requests and their Authorization headers, the most in flight at once (`peak`), and the
    requests answered over the time at least one was in flight (`rate`).
    """

    def __init__(self, default: str = '{"reasoning": "scripted", "summary": "a scripted summary"}',
                 latency_s: float = 0.0, reply: Callable[[dict], str] | None = None, port: int = 0,
                 refuse: Callable[[dict], str | None] | None = None):
        self.script: list[tuple] = []
        # A provider's rules: the reason a request is refused with a 400 (kept in `refused`), or None.
        self.refuse, self.refused = refuse, []
        self.default, self.latency_s, self.reply = default, latency_s, reply
        self.requests: list[dict] = []
        self.authorizations: list[str] = []
        self.in_flight, self.closed = 0, False
        self.reset()
        counting = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            # Keep-alive, as the endpoints users run (vLLM, OpenAI) serve: a client reuses its connections.
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):  # the endpoint check's model listing
                self._send(200, {"object": "list", "data": [{"id": "scripted", "object": "model"}]})

            def do_POST(self):
                if owner.closed:
                    # A kept-alive connection to a closed endpoint fails as a new one would be refused.
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with counting:
                    owner.requests.append(body)
                    owner.authorizations.append(self.headers.get("Authorization", ""))
                    if owner.in_flight == 0:
                        owner.busy_since = time.monotonic()
                    owner.in_flight += 1
                    owner.peak = max(owner.peak, owner.in_flight)
                    action = owner.script.pop(0) if owner.script else None
                try:
                    time.sleep(owner.latency_s)
                    reason = owner.refuse(body) if owner.refuse else None
                    if reason:
                        owner.refused.append(reason)
                        action = ("status", 400, {}, reason)
                    self._act(body, action or ("reply", owner.reply(body) if owner.reply else owner.default))
                finally:
                    with counting:
                        owner.served, owner.in_flight = owner.served + 1, owner.in_flight - 1
                        if owner.in_flight == 0:
                            owner.busy += time.monotonic() - owner.busy_since

            def _act(self, body: dict, action: tuple):
                if action[0] == "drop":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if action[0] == "hang":
                    time.sleep(action[1])
                    action = ("reply", owner.default)
                if action[0] == "status":
                    message = action[3] if len(action) > 3 else f"scripted {action[1]}"
                    self._send(action[1], {"error": {"message": message}}, action[2] if len(action) > 2 else {})
                    return
                if action[0] == "reply_then_die":
                    # Dead from before this reply is read: a request sent after it finds no server. Closing
                    # stops the listener only; this connection still carries the reply.
                    owner.closed = True
                    threading.Thread(target=owner.close, daemon=True).start()
                self._send(200, {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                                 "choices": [{"index": 0, "finish_reason": "stop",
                                              "message": {"role": "assistant", "content": action[1]}}],
                                 "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}})

            def _send(self, status: int, payload: dict, headers: dict | None = None):
                data = json.dumps(payload).encode()
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = _Server(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def rate(self) -> float:
        """Requests answered per second of busy time since the counts were last reset."""
        return self.served / self.busy if self.busy else 0.0

    def reset(self) -> None:
        self.served, self.peak, self.busy, self.busy_since = 0, 0, 0.0, 0.0

    def close(self) -> None:
        self.closed = True
        self.server.shutdown()
        self.server.server_close()


class _Server(ThreadingHTTPServer):
    # A restarted endpoint takes its port back at once; a request still sleeping never holds up the exit.
    allow_reuse_address = True
    daemon_threads = True


def _folder(run: BenchRun, name: str, videos: list) -> Path:
    folder = run.work / name
    folder.mkdir(exist_ok=True)
    for video in videos:
        (folder / video.name).unlink(missing_ok=True)
        (folder / video.name).symlink_to(video)
    return folder


def figures(run: BenchRun) -> list[Figure]:
    answer_video = run.looped(ANSWER_VIDEO_SECONDS)
    answer_folder = _folder(run, "endpoint-answer", [answer_video])
    # The sample's questions over and over, each its own (a new qid), on the looped video.
    sample = [json.loads(line) for line in (run.sample / "questions.jsonl").read_text().splitlines()]
    mcq = [q for q in sample if q["task"] == "mcq"]
    endpoint = ScriptedEndpoint(latency_s=LATENCY_S, reply=fitting_reply)
    figures = []
    try:
        for concurrency in CONCURRENCY:
            seconds = VIDEO_SECONDS_PER_SLOT * concurrency
            folder = _folder(run, f"endpoint-videos-{concurrency}", [run.looped(seconds)])
            # The same seconds as DATASET_VIDEOS files (each a second longer than the one before, so each is a
            # video of its own), as a dataset is precomputed: one video's summary overlaps the next one's captions.
            dataset = _folder(run, f"endpoint-dataset-{concurrency}",
                              [run.looped(seconds // DATASET_VIDEOS + i + 1) for i in range(DATASET_VIDEOS)])
            questions = run.work / f"endpoint-questions-{concurrency}.jsonl"
            questions.write_text("".join(
                json.dumps(mcq[i % len(mcq)] | {"qid": f"q{i}", "video": answer_video.name,
                                                 "question": f"{mcq[i % len(mcq)]['question']} ({i})"}) + "\n"
                for i in range(QUESTIONS_PER_SLOT * concurrency)))
            common = [f"store.uri={run.work / 'endpoint-store'}", "dataset=folder", f"dataset.questions.path={questions}",
                      f"+dataset.questions.video_dir={answer_folder}", "ray.progress_bars=false", "llm=openai",
                      f"llm.client.base_url={endpoint.base_url}", "llm.client.cache=false",
                      f"llm.client.concurrency={concurrency}",
                      # A model name per concurrency: every run asks its own requests.
                      f"llm.client.model=bench-{concurrency}", "describer=vlm", "stages.segments.seconds=2",
                      *run.overrides]

            def measured(what: str, job, overrides: list[str]) -> Figure:
                endpoint.reset()
                job(load_config([*common, *overrides]))
                return Figure(f"endpoint requests/s, {what}, concurrency {concurrency}",
                              f"ideal: {concurrency} in flight / {LATENCY_S} s (peak: {endpoint.peak} in flight)",
                              concurrency / LATENCY_S,
                              endpoint.rate(), "req/s", ">= 0.8")

            for videos, manifest in ((1, folder), (DATASET_VIDEOS, dataset)):
                captioning = [f"dataset.manifest={manifest}", *WITHOUT_SPEECH_OR_EMBEDDINGS]
                precompute(load_config([*common, *captioning, *WITHOUT_ASKING_STAGES]))
                figures.append(measured(f"precompute describer=vlm, {videos} x {seconds / videos / 60:g}-minute video",
                                        precompute, captioning))
            # What the answers read, with this concurrency's model, before they are measured.
            precompute(load_config([*common, f"dataset.manifest={answer_folder}"]))
            figures += [measured(f"answer {method}, {QUESTIONS_PER_SLOT * concurrency} questions", answer,
                                 [f"dataset.manifest={answer_folder}", f"method={method}"])
                        for method in ("llovi", "videoagent2")]
    finally:
        endpoint.close()
    return figures
