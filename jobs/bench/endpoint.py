"""Requests per second against an OpenAI-compatible endpoint that answers every request after a fixed
latency, with no limit on requests in flight: captioning with `describer=vlm`, and answering with llovi
and videoagent2, each against the ideal (concurrency / latency) of the same run.

The rate is the endpoint's own: requests answered over the time it had at least one in flight, so
what vidprep does between its requests (Ray's start, model loads, decoding and the CPU stages between
the caption and summary requests) is not in it, and how full it keeps the endpoint while it asks is. The
frames, embeddings and transcript are computed by the first run and found by the others; each
concurrency names its own model, so its captions, summary and answers are asked anew."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from vidprep.jobs.bench.figures import BenchRun, Figure
from vidprep.jobs.config import load_config
from vidprep.pipeline.answer import answer
from vidprep.pipeline.precompute import precompute

LATENCY_S = 0.5
CONCURRENCY = (8, 32)
# Seconds of video to caption (2-second segments) and questions to answer: enough requests that the
# endpoint's busy time is many latencies long at the highest concurrency.
VIDEO_SECONDS = 600
QUESTIONS = 128


def fitting_reply(body: dict) -> str:
    """A reply that fits the request's JSON schema and depends on its text (so a reply given to the wrong
    request shows): integers and numbers from the text, within their bounds; strings naming it."""
    seed = sum(json.dumps(body["messages"], sort_keys=True).encode()) % 997

    def instance(schema: dict):
        if "enum" in schema:
            return schema["enum"][seed % len(schema["enum"])]
        kind = schema.get("type")
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
    schema = (response_format.get("json_schema") or {}).get("schema") or response_format.get("schema") or {}
    return json.dumps(instance(schema)) if schema else f"reply {seed}"


class LatencyEndpoint:
    """Answers every chat completion after `latency_s` with a fitting reply; counts what it served."""

    def __init__(self, latency_s: float):
        self.latency_s = latency_s
        self.reset()
        lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):  # the endpoint check's model listing
                self._send({"object": "list", "data": [{"id": "bench", "object": "model"}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    if owner.in_flight == 0:
                        owner.busy_since = time.monotonic()
                    owner.in_flight += 1
                time.sleep(owner.latency_s)
                self._send({"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                            "choices": [{"index": 0, "finish_reason": "stop",
                                         "message": {"role": "assistant", "content": fitting_reply(body)}}],
                            "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}})
                with lock:
                    owner.served, owner.in_flight = owner.served + 1, owner.in_flight - 1
                    if owner.in_flight == 0:
                        owner.busy += time.monotonic() - owner.busy_since

            def _send(self, payload: dict):
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        ThreadingHTTPServer.daemon_threads = True
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def rate(self) -> float:
        """Requests answered per second of busy time since the counts were last reset."""
        return self.served / self.busy if self.busy else 0.0

    def reset(self) -> None:
        self.served, self.in_flight, self.busy, self.busy_since = 0, 0, 0.0, 0.0

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def figures(run: BenchRun) -> list[Figure]:
    video = run.looped(VIDEO_SECONDS)
    folder = run.work / "endpoint-videos"
    folder.mkdir(exist_ok=True)
    (folder / video.name).unlink(missing_ok=True)
    (folder / video.name).symlink_to(video)
    # The sample's questions over and over, each its own (a new qid), on the looped video.
    sample = [json.loads(line) for line in (run.sample / "questions.jsonl").read_text().splitlines()]
    mcq = [q for q in sample if q["task"] == "mcq"]
    questions = folder / "questions.jsonl"
    questions.write_text("".join(json.dumps(mcq[i % len(mcq)] | {"qid": f"q{i}", "video": video.name,
                                                                  "question": f"{mcq[i % len(mcq)]['question']} ({i})"}) + "\n"
                                 for i in range(QUESTIONS)))
    endpoint = LatencyEndpoint(LATENCY_S)
    figures = []
    try:
        for concurrency in CONCURRENCY:
            common = [f"store.uri={run.work / 'endpoint-store'}", "dataset=folder", f"dataset.manifest={folder}",
                      f"dataset.questions.path={questions}", f"+dataset.questions.video_dir={folder}",
                      "ray.progress_bars=false", "llm=openai", f"llm.client.base_url={endpoint.base_url}",
                      "llm.client.cache=false", f"llm.client.concurrency={concurrency}",
                      # A model name per concurrency: every run asks its own requests.
                      f"llm.client.model=bench-{concurrency}", "describer=vlm", "stages.segments.seconds=2",
                      *run.overrides]
            ideal = concurrency / LATENCY_S
            endpoint.reset()
            precompute(load_config(common))
            figures.append(Figure(f"endpoint requests/s, precompute describer=vlm, concurrency {concurrency}",
                                  f"ideal: {concurrency} in flight / {LATENCY_S} s", ideal, endpoint.rate(), "req/s",
                                  ">= 0.8"))
            for method in ("llovi", "videoagent2"):
                endpoint.reset()
                answer(load_config([*common, f"method={method}"]))
                figures.append(Figure(f"endpoint requests/s, answer {method}, concurrency {concurrency}",
                                      f"ideal: {concurrency} in flight / {LATENCY_S} s", ideal, endpoint.rate(),
                                      "req/s", ">= 0.8"))
    finally:
        endpoint.close()
    return figures
