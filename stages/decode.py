"""Decode and downsample a video to JPEG frames at a target fps and maximum side."""

import dataclasses
import io
import math
from collections.abc import Iterator

from PIL import Image

from vidprep.conf.checks import check_range

from vidprep.stages.base import Stage, runtime
from vidprep.stages.media import VideoError
from vidprep.store.artifacts import FRAMES
from vidprep.stages.media.ffmpeg import DecodeReport, stream_frames
from vidprep.stages.media.files import local_file

MIN_FPS, MAX_FPS = 0.001, 240

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
    """

    version = 2
    artifact = FRAMES

    fps: float = 1.0
    max_side: int = 448
    # ffmpeg's MJPEG quantiser: 2 (best) to 31 (worst).
    jpeg_qscale: int = 4
    # ffmpeg is killed after timeout_s + timeout_per_second * duration.
    timeout_s: float = runtime(60.0)
    timeout_per_second: float = runtime(2.0)

    def __post_init__(self):
        # Below one frame per ~17 minutes a video is no longer sampled; above 240 there is nothing to sample.
        check_range("stages.frames.fps", self.fps, MIN_FPS, MAX_FPS, "frames per second")
        check_range("stages.frames.max_side", self.max_side, 16, 8192, "pixels")
        check_range("stages.frames.jpeg_qscale", self.jpeg_qscale, 2, 31)

    def ffmpeg_args(self, path: str, video: dict) -> list[str]:
        side, interval = self.max_side, f"floor(t*{self.fps}+1e-6)"
        # The first frame of each output interval keeps its own timestamp; ffmpeg's fps filter would
        # stamp the frame it picks (by rounding) with the interval's time instead.
        select = f"select='isnan(prev_selected_t)+gte({interval},floor(prev_selected_t*{self.fps}+1e-6)+1)'"
        scale = (f"scale=w='min({side},iw)':h='min({side},ih)':force_original_aspect_ratio=decrease:"
                 + colour_options(video))
        # 0:V:0 is the first video stream that is not an attached picture (cover art), as the probe chose.
        return ["-i", path, "-map", "0:V:0", "-vf", f"{select},{scale},showinfo=checksum=0",
                "-fps_mode", "passthrough", "-f", "image2pipe", "-c:v", "mjpeg", "-pix_fmt", "yuvj420p",
                "-q:v", str(self.jpeg_qscale), "pipe:"]

    def run(self, video: dict) -> Iterator[list[dict]]:
        timeout = self.timeout_s + self.timeout_per_second * video["duration"]
        frames = stream_frames(self.ffmpeg_args(local_file(video["source_path"]), video), timeout)
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
