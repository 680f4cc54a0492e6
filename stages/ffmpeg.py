"""ffmpeg and ffprobe as subprocesses that can be timed out and killed (never in-process decoders)."""

import collections
import json
import shutil
import subprocess
import threading
import warnings
from collections.abc import Iterator

from stages.base import StageError

# LanceDB warns on every fork; ffmpeg and ffprobe are exec'd straight after it, touching no state.
warnings.filterwarnings("ignore", message="lancedb fork support is experimental")


def binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise StageError(f"{name} not found on PATH: install ffmpeg (e.g. `apt-get install ffmpeg`)")
    return path


def _output(cmd: list[str], timeout_s: float, what: str) -> bytes:
    """The stdout of a bounded ffmpeg/ffprobe run; a StageError with its last stderr lines otherwise."""
    try:
        done = subprocess.run(cmd, capture_output=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise StageError(f"{what} timed out after {timeout_s:.0f} s") from None
    if done.returncode != 0:
        raise StageError(f"{what} failed: {_last_lines(done.stderr.decode(errors='replace'))}")
    return done.stdout


def ffprobe(path: str, timeout_s: float) -> dict:
    cmd = [binary("ffprobe"), "-v", "error", "-show_format", "-show_streams", "-of", "json", path]
    return json.loads(_output(cmd, timeout_s, "ffprobe"))


def _last_lines(text: str, n: int = 3) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-n:]) or "no message"


class _Killer:
    """Kills a process at a deadline; remembers whether it had to."""

    def __init__(self, process: subprocess.Popen, timeout_s: float):
        self.fired = False
        self._process = process
        self._timer = threading.Timer(timeout_s, self._kill)
        self._timer.daemon = True
        self._timer.start()

    def _kill(self) -> None:
        self.fired = True
        self._process.kill()

    def cancel(self) -> None:
        self._timer.cancel()


def stream_jpegs(args: list[str], timeout_s: float) -> Iterator[bytes]:
    """Run ffmpeg writing an MJPEG stream to stdout and yield one JPEG at a time as it arrives.

    Memory stays at one read buffer plus one frame whatever the video's length. ffmpeg's errors
    (it runs with -xerror) become a StageError carrying its last lines of stderr.
    """
    process = subprocess.Popen(
        [binary("ffmpeg"), "-nostdin", "-v", "error", "-xerror", *args],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    stderr_tail: collections.deque[bytes] = collections.deque(maxlen=20)
    drain = threading.Thread(target=lambda: stderr_tail.extend(process.stderr), daemon=True)
    drain.start()
    killer = _Killer(process, timeout_s)
    try:
        buffer = b""
        while chunk := process.stdout.read(1 << 20):
            buffer += chunk
            while (end := buffer.find(b"\xff\xd9")) >= 0:
                # In JPEG entropy data 0xFF is always byte-stuffed, so FFD9 is only ever the EOI marker.
                start = buffer.find(b"\xff\xd8")
                yield buffer[start : end + 2]
                buffer = buffer[end + 2 :]
        process.wait()
    finally:
        killer.cancel()
        if process.poll() is None:
            process.kill()
            process.wait()
        drain.join(timeout=5)
    if killer.fired:
        raise StageError(f"ffmpeg timed out after {timeout_s:.0f} s and was killed")
    if process.returncode != 0:
        message = _last_lines(b"".join(stderr_tail).decode(errors="replace"))
        raise StageError(f"ffmpeg failed to decode: {message}")


def decode_audio(path: str, start: float, seconds: float, timeout_s: float, rate: int = 16000) -> bytes:
    """The first audio track of `path` from `start` for `seconds`, as mono float32 PCM at `rate` Hz."""
    cmd = [binary("ffmpeg"), "-nostdin", "-v", "error", "-ss", f"{start:.3f}", "-t", f"{seconds:.3f}",
           "-i", path, "-map", "0:a:0", "-ac", "1", "-ar", str(rate), "-f", "f32le", "pipe:"]
    return _output(cmd, timeout_s, "ffmpeg decoding audio")
