"""Identify a video by its content and read its metadata with ffprobe."""

import dataclasses
from fractions import Fraction

from vidprep.stages.media import VideoError
from vidprep.stages.media.ffmpeg import ffprobe
from vidprep.stages.media.files import file_info, local_file
from vidprep.store.keys import content_id


def _rate(text: str | None) -> float:
    try:
        return float(Fraction(text)) if text else 0.0
    except (ValueError, ZeroDivisionError):
        return 0.0


def _rotation(stream: dict) -> int:
    for side in stream.get("side_data_list", []):
        if "rotation" in side:
            return int(side["rotation"])
    return int(stream.get("tags", {}).get("rotate", 0))


@dataclasses.dataclass
class ProbeVideo:
    """The `videos` row of a file: content id, size, duration, fps, (displayed) size, codec, colour tags,
    audio."""

    name = "probe"
    version = 2
    timeout_s: float = 60.0

    def run(self, path: str) -> dict:
        found = file_info(path)
        if found is None:
            raise VideoError("no such file")
        size = found[0]
        if size == 0:
            raise VideoError("empty file (0 bytes)")
        local = local_file(path)
        info = ffprobe(local, self.timeout_s)
        streams = info.get("streams", [])
        video = next(
            (s for s in streams
             if s.get("codec_type") == "video" and not s.get("disposition", {}).get("attached_pic")),
            None,
        )
        if video is None:
            raise VideoError("no video stream")
        duration = float(video.get("duration") or info.get("format", {}).get("duration") or 0.0)
        if duration <= 0:
            raise VideoError("unknown or zero duration")
        width, height = int(video.get("width", 0)), int(video.get("height", 0))
        if abs(_rotation(video)) % 180 == 90:
            width, height = height, width
        return {
            "video_id": content_id(local),
            "source_path": path,
            "size": size,
            "duration": duration,
            "fps": _rate(video.get("avg_frame_rate")) or _rate(video.get("r_frame_rate")),
            "width": width,
            "height": height,
            "codec": video.get("codec_name", "unknown"),
            # As ffprobe names them ("bt709", "tv"); absent tags are "unknown".
            "color_space": video.get("color_space", "unknown"),
            "color_range": video.get("color_range", "unknown"),
            "has_audio": any(s.get("codec_type") == "audio" for s in streams),
        }
