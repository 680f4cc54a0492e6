"""A video's metadata read with PyAV in a long-lived child process that is timed out and killed.

ffprobe cost about 70 ms a file, nearly all of it starting a binary linked against some 200 libraries:
a third of a run over thousands of short clips. One child per worker process opens each file with
libav (through PyAV) in a few milliseconds and answers line by line; a file that hangs or crashes it
costs only that child, and the next file starts a new one. Its answers match ffprobe's fields
(`tests/test_decode.py` compares them on real odd files).
"""

import json
import select
import subprocess
import sys
import threading

from vidprep.stages.media import VideoError

# libavutil's names of AVColorSpace and AVColorRange values, as ffprobe prints them.
COLOR_SPACES = ["gbr", "bt709", "unknown", "reserved", "fcc", "bt470bg", "smpte170m", "smpte240m", "ycgco",
                "bt2020nc", "bt2020c", "smpte2085", "chroma-derived-nc", "chroma-derived-c", "ictcp", "ipt-c2",
                "ycgco-re", "ycgco-ro"]
COLOR_RANGES = ["unknown", "tv", "pc"]

_lock = threading.Lock()
_child: subprocess.Popen | None = None


def probe(path: str, timeout_s: float) -> dict:
    """The file's first (non cover-art) video stream, its container duration and whether it has audio:
    {"video": {duration, end, avg_rate, base_rate, width, height, rotation, codec, color_space, color_range}
    or None, "audio_duration" (its longest audio stream's), "format_duration", "has_audio"}. Durations are
    None where the file states none."""
    global _child
    with _lock:
        if _child is None or _child.poll() is not None:
            _child = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        child = _child
        child.stdin.write(json.dumps(path).encode() + b"\n")
        child.stdin.flush()
        answered, _, _ = select.select([child.stdout], [], [], timeout_s)
        line = child.stdout.readline() if answered else b""
        if not line:
            child.kill()
            status = child.wait()
            _child = None
            if not answered:
                raise VideoError(f"probing timed out after {timeout_s:.0f} s and was killed")
            raise VideoError(f"probing crashed the reader (exit status {status})")
    answer = json.loads(line)
    if "error" in answer:
        raise VideoError(answer["error"])
    return answer


def _seconds(value, time_base) -> float | None:
    return float(value * time_base) if value else None


def _rate(rate) -> float:
    return float(rate) if rate else 0.0


def _facts(path: str) -> dict:
    import av

    with av.open(path) as container:
        streams = container.streams
        video = next((s for s in streams.video if not s.disposition & av.stream.Disposition.attached_pic), None)
        facts = None
        if video is not None:
            context = video.codec_context
            # PyAV exposes the display matrix only on decoded frames. A file whose first frame does not
            # decode is taken as unrotated: its frames stage fails on it anyway.
            rotation = 0
            try:
                rotation = next(container.decode(video)).rotation
            except (av.error.FFmpegError, StopIteration):
                pass
            facts = {"duration": _seconds(video.duration, video.time_base), "avg_rate": _rate(video.average_rate),
                     "base_rate": _rate(video.base_rate), "width": context.width, "height": context.height,
                     "rotation": rotation, "codec": context.codec.canonical_name,
                     "color_space": COLOR_SPACES[context.colorspace] if context.colorspace < len(COLOR_SPACES)
                     else "unknown",
                     "color_range": COLOR_RANGES[context.color_range]}
            facts["end"] = _stream_end(container, video)
        audio = [_seconds(s.duration, s.time_base) for s in streams.audio]
        return {"video": facts, "audio_duration": max(filter(None, audio), default=None),
                "format_duration": container.duration / av.time_base if container.duration else None,
                "has_audio": bool(streams.audio)}


def _stream_end(container, video) -> float | None:
    """Where the stream's last frame ends, from the file's start: read from its last keyframe on, as a
    VFR stream's header may say less than its packets (5.4 s where the last frame shows at 5.7 s)."""
    import av

    try:
        container.seek(2**62, stream=video, backward=True)
        last = max((packet for packet in container.demux(video) if packet.pts is not None), key=lambda p: p.pts,
                   default=None)
    except (av.error.FFmpegError, OverflowError):
        return None
    if last is None:
        return None
    # The last frame shown ends one frame's duration after it starts.
    return float((last.pts + (last.duration or 0)) * video.time_base) - (container.start_time or 0) / av.time_base


def _serve() -> None:
    """Answer one JSON line per path read on stdin, until stdin closes (the parent is gone)."""
    import av

    for line in sys.stdin:
        path = json.loads(line)
        try:
            answer = _facts(path)
        except av.error.FFmpegError as error:
            answer = {"error": f"not a readable video: {error.strerror}"}
        except Exception as error:  # noqa: BLE001 - the parent reports it as this file's failure
            answer = {"error": f"reading its metadata failed: {type(error).__name__}: {error}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    _serve()
