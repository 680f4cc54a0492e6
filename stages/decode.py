"""Decode and downsample a video to JPEG frames at a target fps and maximum side."""

import dataclasses
import io
from collections.abc import Iterator

import ffmpeg
from PIL import Image

from stages.base import ConfigError, Stage, runtime
from stages.ffmpeg import stream_jpegs
from stages.media import local_file


@dataclasses.dataclass
class DecodeFrames(Stage):
    """Frames at t = i / fps from the first video stream, rotation applied, longest side <= max_side."""

    name = "frames"
    version = 1
    table = "frames"
    row_field = "frame_index"

    fps: float = 1.0
    max_side: int = 448
    # ffmpeg's MJPEG quantiser: 2 (best) to 31 (worst).
    jpeg_qscale: int = 4
    # ffmpeg is killed after timeout_s + timeout_per_second * duration.
    timeout_s: float = runtime(60.0)
    timeout_per_second: float = runtime(2.0)

    def __post_init__(self):
        if self.fps <= 0:
            raise ConfigError(f"stages.frames.fps must be > 0, got {self.fps}")
        if self.max_side < 16:
            raise ConfigError(f"stages.frames.max_side must be >= 16, got {self.max_side}")
        if not 2 <= self.jpeg_qscale <= 31:
            raise ConfigError(f"stages.frames.jpeg_qscale must be in 2..31, got {self.jpeg_qscale}")

    def ffmpeg_args(self, path: str) -> list[str]:
        side = self.max_side
        frames = (
            ffmpeg.input(path)["v:0"]
            # eof_action=pass keeps the one frame of clips shorter than a frame interval.
            .filter("fps", fps=self.fps, eof_action="pass")
            .filter("scale", w=f"min({side},iw)", h=f"min({side},ih)",
                    force_original_aspect_ratio="decrease")
        )
        output = frames.output("pipe:", format="image2pipe", vcodec="mjpeg", pix_fmt="yuvj420p",
                               **{"q:v": self.jpeg_qscale})
        return output.get_args()

    def run(self, video: dict) -> Iterator[list[dict]]:
        timeout = self.timeout_s + self.timeout_per_second * video["duration"]
        batch = []
        for index, jpeg in enumerate(stream_jpegs(self.ffmpeg_args(local_file(video["source_path"])), timeout)):
            width, height = Image.open(io.BytesIO(jpeg)).size
            batch.append({
                "frame_index": index, "timestamp": round(index / self.fps, 6),
                "jpeg": jpeg, "width": width, "height": height,
            })
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch:
            yield batch
