"""Identify a video by its content and read its metadata (`media.pyav_probe`, as ffprobe reports it)."""

import dataclasses
from typing import Annotated

from vidprep.conf.checks import Range
from vidprep.stages.media import VideoError
from vidprep.stages.media.files import file_info, local_file
from vidprep.stages.media.pyav_probe import probe
from vidprep.store.keys import content_id


@dataclasses.dataclass
class ProbeVideo:
    """The `videos` row of a file: content id, size, duration, fps, (displayed) size, codec, colour tags,
    audio."""

    name = "probe"
    # 3: the duration is the longest of the video stream's (to its last frame's end) and the audio's.
    version = 3
    timeout_s: Annotated[float, Range(0, above=True, unit="seconds")] = 60.0

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
        # The longest of the streams vidprep reads: the video's (its header's, or where its last frame
        # ends: a VFR stream's header may stop before its last frames, at 5.4 s where the last one shows
        # at 5.7 s) and the audio's, so that every frame and all speech lies in a segment. The
        # container's where no stream states one (its subtitles may run on).
        duration = max(video["duration"] or 0.0, video["end"] or 0.0, info["audio_duration"] or 0.0) \
            or info["format_duration"] or 0.0
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
