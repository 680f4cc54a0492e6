"""ffmpeg as subprocesses that can be timed out and killed (never in-process decoders)."""

import dataclasses
import queue
import re
import shutil
import subprocess
import threading
import warnings
from collections.abc import Generator

from vidprep.stages.media import VideoError

# LanceDB warns on every fork; ffmpeg and the metadata reader are exec'd straight after it, touching no state.
warnings.filterwarnings("ignore", message="lancedb fork support is experimental")


def binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise VideoError(f"{name} not found on PATH: install ffmpeg (e.g. `apt-get install ffmpeg`)")
    return path


def _output(cmd: list[str], timeout_s: float, what: str) -> bytes:
    """The stdout of a bounded ffmpeg run; a VideoError with its last stderr lines otherwise."""
    try:
        done = subprocess.run(cmd, capture_output=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise VideoError(f"{what} timed out after {timeout_s:.0f} s") from None
    if done.returncode != 0:
        raise VideoError(f"{what} failed: {_last_lines(done.stderr.decode(errors='replace'))}")
    return done.stdout


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


@dataclasses.dataclass
class DecodeReport:
    """How an ffmpeg decode ended: its exit status and the distinct errors it logged (up to MAX_ERRORS)."""

    returncode: int
    errors: list[str]
    # The time of the frame at which the caller's `until` stopped the decode (not yielded); None: it ran to the end.
    stopped_at: float | None = None

    @property
    def reason(self) -> str:
        # Sorted, not as logged: the demuxer and the decoder's threads log in an order that varies from
        # run to run, and the stored report must not.
        return " | ".join(sorted(self.errors)[:3]) or f"ffmpeg exited with status {self.returncode}"


# `-loglevel level+info` tags every line with its level; showinfo logs one `n: ... pts_time:T` line per frame.
_LEVEL = re.compile(r"\[(error|fatal|panic)\] (.*)")
_PTS_TIME = re.compile(r"\] \[info\] n:\s*\d+\s+pts:\s*-?\d+\s+pts_time:(\S+)")
_ADDRESS = re.compile(r" @ 0x[0-9a-f]+")
MAX_ERRORS = 200


def stream_frames(args: list[str], timeout_s: float,
                  until: float | None = None) -> Generator[tuple[bytes, float], None, DecodeReport]:
    """Run ffmpeg writing an MJPEG stream to stdout, yielding (JPEG, presentation time in s) as frames arrive.
    With `until`, ffmpeg is stopped at the first frame stamped at or after it, which is not yielded.

    The filter graph in `args` must end in `showinfo`, whose per-frame line gives each frame's own
    timestamp. Memory stays at one read buffer plus one frame whatever the video's length. Decoding
    goes on past damaged data; what ffmpeg logged as errors comes back in the DecodeReport, for the
    caller to judge. Killed past its timeout (a VideoError).
    """
    process = subprocess.Popen(
        [binary("ffmpeg"), "-nostdin", "-hide_banner", "-nostats", "-loglevel", "level+info", *args],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    times: queue.Queue[float] = queue.Queue()
    errors: list[str] = []

    def read_log() -> None:
        for raw in process.stderr:
            line = raw.decode(errors="replace").rstrip()
            if found := _PTS_TIME.search(line):
                times.put(float(found.group(1)))
            elif (found := _LEVEL.search(line)) and len(errors) < MAX_ERRORS:
                # "[h264 @ 0x55d0...]" names the component; "[NULL @ ...]" (a parser) names none.
                source = _ADDRESS.sub("", line[: found.start()]).replace("[NULL]", "").strip()
                message = f"{source} {found.group(2)}".strip()
                if message not in errors:
                    errors.append(message)

    log = threading.Thread(target=read_log, daemon=True)
    log.start()
    killer = _Killer(process, timeout_s)
    stopped_at = None
    try:
        buffer = b""
        while stopped_at is None and (chunk := process.stdout.read1(1 << 20)):
            buffer += chunk
            while (end := buffer.find(b"\xff\xd9")) >= 0:
                # In JPEG entropy data 0xFF is always byte-stuffed, so FFD9 is only ever the EOI marker.
                start = buffer.find(b"\xff\xd8")
                try:
                    # showinfo logs a frame before the encoder writes it, so its time is already on its way.
                    time = times.get(timeout=30)
                except queue.Empty:
                    raise VideoError("ffmpeg wrote a frame without its showinfo timestamp") from None
                if until is not None and time >= until:
                    stopped_at = time
                    break
                yield buffer[start : end + 2], time
                buffer = buffer[end + 2 :]
        if stopped_at is None:
            process.wait()
    finally:
        killer.cancel()
        if process.poll() is None:
            process.kill()
            process.wait()
        log.join(timeout=5)
    if killer.fired:
        raise VideoError(f"ffmpeg timed out after {timeout_s:.0f} s and was killed")
    return DecodeReport(0 if stopped_at is not None else process.returncode, errors, stopped_at)


def decode_audio(path: str, start: float, seconds: float, timeout_s: float, rate: int = 16000) -> bytes:
    """The first audio track of `path` from `start` for `seconds`, as mono float32 PCM at `rate` Hz."""
    cmd = [binary("ffmpeg"), "-nostdin", "-v", "error", "-ss", f"{start:.3f}", "-t", f"{seconds:.3f}",
           "-i", path, "-map", "0:a:0", "-ac", "1", "-ar", str(rate), "-f", "f32le", "pipe:"]
    return _output(cmd, timeout_s, "ffmpeg decoding audio")
