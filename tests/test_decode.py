"""Probe and decode with real ffmpeg on the sample videos and on real odd files."""

import io
import json
import math

import pytest
from PIL import Image

from stages.base import StageError
from stages.decode import DecodeFrames
from stages.probe import ProbeVideo
from tests.conftest import SHARED_VIDEOS, needs_shared_videos


def decode(path, **params):
    video = ProbeVideo().run(str(path))
    return video, [row for batch in DecodeFrames(**params).run(video) for row in batch]


@pytest.mark.parametrize("fps", [1.0, 2.0, 0.5])
def test_frame_count_and_timestamps_follow_fps_and_duration(sample_dir, fps):
    video, frames = decode(sample_dir / "scenes.mp4", fps=fps)
    assert video["duration"] == pytest.approx(16.0, abs=0.05)
    assert len(frames) == math.ceil(video["duration"] * fps)
    assert [f["timestamp"] for f in frames] == pytest.approx([i / fps for i in range(len(frames))])
    assert [f["frame_index"] for f in frames] == list(range(len(frames)))


def test_frames_are_jpegs_within_max_side(sample_dir):
    _, frames = decode(sample_dir / "places.mp4", max_side=200)
    for frame in frames:
        image = Image.open(io.BytesIO(frame["jpeg"]))
        assert image.format == "JPEG"
        assert max(image.size) == 200 and image.size == (frame["width"], frame["height"])
        assert image.size[0] / image.size[1] == pytest.approx(640 / 480, abs=0.02)


def test_very_short_clip_keeps_its_frame(sample_dir):
    truth = json.loads((sample_dir / "scenes.json").read_text())
    video, frames = decode(sample_dir / "short.mp4", fps=1.0)
    assert video["duration"] == pytest.approx(truth["short.mp4"]["duration"], abs=0.05)
    assert len(frames) == 1 and frames[0]["timestamp"] == 0.0


def test_small_video_is_not_upscaled(sample_dir):
    _, frames = decode(sample_dir / "places.mp4", max_side=4000)
    assert (frames[0]["width"], frames[0]["height"]) == (640, 480)


@needs_shared_videos
def test_rotated_mov_comes_out_upright():
    video, frames = decode(SHARED_VIDEOS / "video_90.mov", fps=10.0)
    assert (video["width"], video["height"]) == (320, 568)
    assert frames and all(f["height"] > f["width"] for f in frames)


@needs_shared_videos
def test_multistream_file_uses_first_video_stream():
    video, frames = decode(SHARED_VIDEOS / "nasa_13013.mp4", fps=1.0, max_side=4000)
    assert video["duration"] == pytest.approx(13.0, abs=0.05) and video["has_audio"]
    assert (frames[0]["width"], frames[0]["height"]) == (320, 180)
    assert len(frames) == 13


@needs_shared_videos
def test_hevc_decodes():
    video, frames = decode(SHARED_VIDEOS / "h265_video.mp4", fps=5.0)
    assert video["codec"] == "hevc" and len(frames) == 5


@needs_shared_videos
def test_corrupt_mp4_fails_at_decode_with_ffmpegs_reason():
    video = ProbeVideo().run(str(SHARED_VIDEOS / "corrupted.mp4"))
    with pytest.raises(StageError, match="Invalid NAL unit size"):
        list(DecodeFrames().run(video))


def test_bad_files_fail_at_probe_with_reason(tmp_path, sample_dir):
    empty = tmp_path / "empty.mp4"
    empty.write_bytes(b"")
    text = tmp_path / "notes.mp4"
    text.write_text("just some text, not a video\n" * 50)
    with pytest.raises(StageError, match="empty file"):
        ProbeVideo().run(str(empty))
    with pytest.raises(StageError, match="Invalid data"):
        ProbeVideo().run(str(text))
    with pytest.raises(StageError, match="no such file"):
        ProbeVideo().run(str(tmp_path / "missing.mp4"))


@pytest.mark.parametrize("params", [{"fps": 0}, {"fps": -1}, {"max_side": 0}, {"jpeg_qscale": 1}])
def test_out_of_range_decode_config_is_refused(params):
    with pytest.raises(ValueError, match="stages.frames"):
        DecodeFrames(**params)
