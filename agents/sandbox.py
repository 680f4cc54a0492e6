"""Runs LLM-written programs in a locked-down child process (agents/sandbox_child.py).

The child has no network, no file system, no subprocesses, bounded memory, CPU and output; it
reaches the agent's modules only through this class, which runs each call here and sends back the
JSON result. A step that runs past `time_limit_s` (not counting the time its module calls take
here) kills the child; the next step starts a fresh one.
"""

import json
import os
import select
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

CHILD = Path(__file__).with_name("sandbox_child.py")


@dataclass
class StepResult:
    output: str
    value: str | None
    error: str
    finished: bool
    answer: object

    def for_prompt(self) -> str:
        parts = []
        if self.output.strip():
            parts.append(f"printed:\n{self.output.strip()}")
        if self.value is not None:
            parts.append(f"value: {self.value}")
        if self.error:
            parts.append(f"error: {self.error}")
        return "\n".join(parts) or "(no output)"


class Sandbox:
    def __init__(self, modules: dict, time_limit_s: float = 10.0, memory_mb: int = 256,
                 output_limit: int = 20000, cpu_s: int = 60):
        self.modules, self.time_limit_s = modules, time_limit_s
        self.memory_mb, self.output_limit, self.cpu_s = memory_mb, output_limit, cpu_s
        self.isolation: list[str] = []
        self._process: subprocess.Popen | None = None
        self._root = tempfile.TemporaryDirectory(prefix="vidprep-sandbox-")
        self._buffer = b""

    def _start(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-I", "-S", str(CHILD)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, env={}, cwd=self._root.name,
        )
        self._buffer = b""
        os.chmod(self._root.name, 0o555)
        self._send({"root": self._root.name, "memory_mb": self.memory_mb, "cpu_s": self.cpu_s,
                    "output_limit": self.output_limit, "modules": sorted(self.modules)})
        ready = self._read(deadline=time.monotonic() + 30)
        if ready is None or ready.get("type") != "ready":
            raise RuntimeError("the sandbox process did not start")
        self.isolation = ready["isolation"]

    def _send(self, message: dict) -> None:
        self._process.stdin.write((json.dumps(message) + "\n").encode())
        self._process.stdin.flush()

    def _read(self, deadline: float) -> dict | None:
        """The child's next message, or None when it died or the deadline passed."""
        stdout = self._process.stdout.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([stdout], [], [], remaining)[0]:
                return None
            chunk = os.read(stdout, 1 << 16)
            if not chunk:
                return None
            self._buffer += chunk
            if len(self._buffer) > 4 * self.output_limit + (1 << 20):
                return None
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def _kill(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None

    def run(self, code: str) -> StepResult:
        if self._process is None:
            self._start()
        self._send({"type": "run", "code": code})
        budget = self.time_limit_s
        while True:
            started = time.monotonic()
            message = self._read(deadline=started + budget)
            budget -= time.monotonic() - started
            if message is None:
                died = self._process.poll() is not None
                self._kill()
                reason = ("the sandbox process died (memory, CPU or process limit)" if died
                          else f"TimeoutError: the step ran past its {self.time_limit_s:.0f} s limit")
                return StepResult("", None, reason + "; variables were reset", False, None)
            if message["type"] == "done":
                return StepResult(message["output"], message["value"], message["error"],
                                  message["finished"], message["answer"])
            self._send(self._module_call(message))

    def _module_call(self, message: dict) -> dict:
        function = self.modules.get(message["name"])
        try:
            value = function(*message["args"], **message["kwargs"])
            json.dumps(value)
        except Exception as error:  # noqa: BLE001 - the program sees the module's error as its own
            return {"type": "error", "message": f"{message['name']}: {type(error).__name__}: {error}"}
        return {"type": "result", "value": value}

    def close(self) -> None:
        self._kill()
        os.chmod(self._root.name, 0o755)
        self._root.cleanup()
