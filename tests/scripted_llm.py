"""A scripted OpenAI-compatible server on loopback, for the LLM layer's control flow only."""

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ScriptedLLM:
    """Answers each POST with the next scripted action; once the script runs out, with `default`.

    Actions: ("reply", text), ("status", code, {headers}), ("hang", seconds), ("drop",), and
    ("reply_then_die", text): answer, then shut the server down (connections are refused after).
    `reply(body)`, where given, writes the default reply from the request. Every request is answered
    after `latency_s`, with no limit on requests in flight; `peak` is the most there were at once.
    """

    def __init__(self, default: str = '{"reasoning": "scripted", "summary": "a scripted summary"}', port: int = 0,
                 latency_s: float = 0.0, reply=None):
        self.script: list[tuple] = []
        self.default = default
        self.latency_s, self.reply = latency_s, reply
        self.in_flight = self.peak = 0
        counting = threading.Lock()
        self.requests: list[dict] = []
        self.authorizations: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with counting:
                    owner.requests.append(body)
                    owner.authorizations.append(self.headers.get("Authorization", ""))
                    owner.in_flight += 1
                    owner.peak = max(owner.peak, owner.in_flight)
                    action = owner.script.pop(0) if owner.script else None
                try:
                    time.sleep(owner.latency_s)
                    self.answer(body, action or ("reply", owner.reply(body) if owner.reply else owner.default))
                finally:
                    with counting:
                        owner.in_flight -= 1

            def answer(self, body, action):
                if action[0] == "drop":
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if action[0] == "hang":
                    time.sleep(action[1])
                    action = ("reply", owner.default)
                if action[0] == "status":
                    self.send_response(action[1])
                    for name, value in (action[2] if len(action) > 2 else {}).items():
                        self.send_header(name, value)
                    payload = json.dumps({"error": {"message": f"scripted {action[1]}"}}).encode()
                else:
                    payload = json.dumps({
                        "id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": action[1]}}],
                        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
                    }).encode()
                    self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                if action[0] == "reply_then_die":
                    threading.Thread(target=owner.close, daemon=True).start()

        ThreadingHTTPServer.allow_reuse_address = True
        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

