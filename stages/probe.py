"""Identify a video by its content and read its metadata (`media.pyav_probe`, as ffprobe reports it)."""

import dataclasses

from vidprep.stages.media import VideoError
from vidprep.stages.media.files import file_info, local_file
from vidprep.stages.media.pyav_probe import probe
from vidprep.store.keys import content_id


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
        info = probe(local, self.timeout_s)
        video = info["video"]
        if video is None:
            raise VideoError("no video stream")
        duration = video["duration"] or info["format_duration"] or 0.0
        if duration <= 0:
            raise VideoError("unknown or zero duration")
        width, height = video["width"], video["height"]
        if abs(video["rotation"]) % 180 == 90:
            width, height = height, width
        return {
            "video_id": content_id(local),
            "source_path": path,
            "size": size,
            "duration": duration,
            "fps": video["avg_rate"] or video["base_rate"],
            "width": width,
            "height": height,
            "codec": video["codec"],
            # As ffprobe names them ("bt709", "tv"); absent tags are "unknown".
            "color_space": video["color_space"],
            "color_range": video["color_range"],
            "has_audio": info["has_audio"],
        }
