"""Decode and downsample a video to JPEG frames at a target fps and maximum side."""

import dataclasses
import io
import math
import os
from typing import Annotated
from collections.abc import Generator, Iterator
from concurrent.futures import ThreadPoolExecutor

from PIL import Image

from vidprep.conf.checks import Range

from vidprep.stages.base import Stage, runtime
from vidprep.stages.media import VideoError
from vidprep.store.artifacts import FRAMES
from vidprep.stages.media.ffmpeg import DecodeReport, stream_frames
from vidprep.stages.media.files import local_file

MIN_FPS, MAX_FPS = 0.001, 240
# Shorter ranges would spend much of their decode on the frames between the keyframe sought and the range.
MIN_RANGE_S = 30.0

# ffprobe's names of YCbCr matrices -> swscale's.
_MATRICES = {"bt709": "bt709", "bt470bg": "bt470", "smpte170m": "smpte170m", "bt2020nc": "bt2020",
             "bt2020c": "bt2020", "fcc": "fcc", "smpte240m": "smpte240m"}


def colour_options(video: dict) -> str:
    """The scale filter's colour conversion from the file's tags to JPEG's full-range BT.601.

    Untagged files get what players assume: BT.709 from HD sizes up, BT.601 below; limited range.
    """
    matrix = _MATRICES.get(video.get("color_space") or "")
    if matrix is None:
        matrix = "bt709" if video["width"] >= 1280 or video["height"] > 576 else "smpte170m"
    in_range = "pc" if video.get("color_range") == "pc" else "tv"
    return f"in_color_matrix={matrix}:in_range={in_range}:out_color_matrix=bt601:out_range=pc"


def missing_ranges(times: list[float], duration: float, fps: float, source_interval: float) -> list[tuple[float, float]]:
    """The spans of [0, duration) whose output interval got no frame, or got its first frame more than
    1.5 source frames after the interval began (the frames before it were lost); merged, in order."""
    first: dict[int, float] = {}
    for t in times:
        first.setdefault(math.floor(t * fps + 1e-6), t)
    ranges: list[list[float]] = []
    for i in range(max(1, math.ceil(duration * fps - 1e-6))):
        start = i / fps
        t = first.get(i)
        gap_end = min((i + 1) / fps, duration) if t is None else t
        if t is not None and t <= start + 1.5 * source_interval:
            continue
        if ranges and abs(ranges[-1][1] - start) < 1e-6:
            ranges[-1][1] = gap_end
        else:
            ranges.append([start, gap_end])
    return [(round(a, 3), round(b, 3)) for a, b in ranges]


@dataclasses.dataclass
class DecodeFrames(Stage):
    """The first frame of each 1/fps interval of the first video stream, stamped with its own presentation
    time; rotation applied, colours converted by the file's tags, longest side <= max_side.

    A file ffmpeg decodes only in part keeps the frames it has; the stage's detail says which time
    ranges are missing and what ffmpeg reported. A file with no decodable frame fails.

    With `ranges` > 1, that many ffmpeg processes decode consecutive time ranges of the video at once,
    each from the keyframe before its range, and the frames are the same (see `_decode_ranges`). Then
    the stage holds the later ranges' frames in memory until the earlier ones are written.
    """

    version = 2
    artifact = FRAMES

    # Below one frame per ~17 minutes a video is no longer sampled; above 240 there is nothing to sample.
    fps: Annotated[float, Range(MIN_FPS, MAX_FPS, unit="frames per second")] = 1.0
    max_side: Annotated[int, Range(16, 8192, unit="pixels")] = 448
    # ffmpeg's MJPEG quantiser: 2 (best) to 31 (worst).
    jpeg_qscale: Annotated[int, Range(2, 31)] = 4
    # ffmpeg is killed after timeout_s + timeout_per_second * duration.
    timeout_s: Annotated[float, Range(0, above=True, unit="seconds")] = runtime(60.0)
    timeout_per_second: Annotated[float, Range(0, unit="seconds")] = runtime(2.0)
    # For a few long videos on many cores; with many videos Ray already keeps every core decoding.
    ranges: Annotated[int, Range(1, 64, unit="ffmpeg processes")] = runtime(1)

    def ffmpeg_args(self, path: str, video: dict, first_interval: int = 0, threads: int | None = None) -> list[str]:
        """The command line storing the first frame of each output interval from `first_interval` on."""
        side, interval = self.max_side, f"floor(t*{self.fps}+1e-6)"
        # The first frame of each output interval keeps its own timestamp; ffmpeg's fps filter would
        # stamp the frame it picks (by rounding) with the interval's time instead.
        first_of_interval = f"isnan(prev_selected_t)+gte({interval},floor(prev_selected_t*{self.fps}+1e-6)+1)"
        select = f"select='if(gte({interval},{first_interval}),{first_of_interval},0)'"
        scale = (f"scale=w='min({side},iw)':h='min({side},ih)':force_original_aspect_ratio=decrease:"
                 + colour_options(video))
        seek = []
        if first_interval:
            # From the keyframe before the range; timestamps kept as a decode from the start gives them.
            seek = ["-ss", f"{first_interval / self.fps:.6f}", "-noaccurate_seek", "-copyts", "-start_at_zero"]
        decoder = ["-threads", str(threads)] if threads else []
        # 0:V:0 is the first video stream that is not an attached picture (cover art), as the probe chose.
        return [*seek, *decoder, "-i", path, "-map", "0:V:0", "-vf", f"{select},{scale},showinfo=checksum=0",
                "-fps_mode", "passthrough", "-f", "image2pipe", "-c:v", "mjpeg", "-pix_fmt", "yuvj420p",
                "-q:v", str(self.jpeg_qscale), "pipe:"]

    def range_starts(self, duration: float) -> list[int]:
        """The first output interval of each range: `ranges` of them, fewer for a short video."""
        intervals = max(1, math.ceil(duration * self.fps - 1e-6))
        count = max(1, min(self.ranges, int(duration // MIN_RANGE_S), intervals))
        return sorted({round(i * intervals / count) for i in range(count)})

    def _decode(self, path: str, video: dict, timeout: float) -> Generator[tuple[bytes, float], None, DecodeReport]:
        starts = self.range_starts(video["duration"])
        if len(starts) > 1 and (ranged := self._decode_ranges(path, video, starts, timeout)):
            frames, report = ranged
            yield from frames
            return report
        return (yield from stream_frames(self.ffmpeg_args(path, video), timeout))

    def _decode_ranges(self, path: str, video: dict, starts: list[int],
                       timeout: float) -> tuple[list[tuple[bytes, float]], DecodeReport] | None:
        """The frames of every range, each decoded by its own ffmpeg at once. Each range but the last goes
        on to the first frame of the next one, and that frame must be the first its neighbour stored (a
        demuxer that seeks past its target fails this). None where a join does not match or any range
        logged an error: a decode from the start then settles which frames and which report are right."""
        threads = max(1, len(os.sched_getaffinity(0)) // len(starts))

        def decode(first: int, next_first: int | None) -> tuple[list, DecodeReport]:
            until = None if next_first is None else (next_first - 1e-6) / self.fps
            stream, frames = stream_frames(self.ffmpeg_args(path, video, first, threads), timeout, until), []
            while True:
                try:
                    frames.append(next(stream))
                except StopIteration as end:
                    return frames, end.value

        with ThreadPoolExecutor(len(starts)) as pool:
            parts = list(pool.map(decode, starts, [*starts[1:], None]))
        for (_, report), (next_frames, _) in zip(parts, parts[1:]):
            if report.stopped_at != (next_frames[0][1] if next_frames else None):
                return None
        if any(report.returncode or report.errors for _, report in parts):
            return None
        return [frame for frames, _ in parts for frame in frames], DecodeReport(0, [])

    def run(self, video: dict) -> Iterator[list[dict]]:
        timeout = self.timeout_s + self.timeout_per_second * video["duration"]
        frames = self._decode(local_file(video["source_path"]), video, timeout)
        batch, times = [], []
        while True:
            try:
                jpeg, time = next(frames)
            except StopIteration as end:
                report: DecodeReport = end.value
                break
            width, height = Image.open(io.BytesIO(jpeg)).size
            batch.append({"frame_index": len(times), "timestamp": round(time, 6), "jpeg": jpeg,
                          "width": width, "height": height})
            times.append(time)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch:
            yield batch
        if not times:
            raise VideoError(f"no frame could be decoded: {report.reason}")
        if report.returncode == 0 and not report.errors:
            return ""
        source_interval = 1 / video["fps"] if video.get("fps") else 0.0
        missing = missing_ranges(times, video["duration"], self.fps, source_interval)
        where = ", ".join(f"{a:.2f}-{b:.2f} s" for a, b in missing)
        gaps = f"no frames for {where}" if missing else "every interval has a frame, some may show damage"
        return f"partial: {gaps}; ffmpeg: {report.reason}"
