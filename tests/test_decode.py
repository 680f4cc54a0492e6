"""Probe and decode with real ffmpeg on the sample videos and on real odd files."""

import io
import json
import math
import os
import subprocess

import numpy as np

import pytest
from PIL import Image

from vidprep.stages.media import VideoError, pyav_probe
from vidprep.stages import decode as decode_module
from vidprep.stages.decode import DecodeFrames
from vidprep.stages.probe import ProbeVideo
from vidprep.stages.segments import CutSegments
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
    # The container's: its audio runs longest.
    assert video["duration"] == pytest.approx(13.056, abs=0.01) and video["has_audio"]
    assert (frames[0]["width"], frames[0]["height"]) == (320, 180)
    assert len(frames) == 13


@needs_shared_videos
def test_hevc_decodes():
    video, frames = decode(SHARED_VIDEOS / "h265_video.mp4", fps=5.0)
    assert video["codec"] == "hevc" and len(frames) == 5


def run_stage(stage, video) -> tuple[list[dict], str]:
    """Every row a stage yields for a video, and what it said when done (its detail)."""
    rows, batches = [], stage.run(video)
    while True:
        try:
            rows += next(batches)
        except StopIteration as end:
            return rows, end.value or ""


@needs_shared_videos
def test_damaged_mp4_keeps_the_frames_ffmpeg_decodes_and_says_why_it_is_partial():
    # decord's corrupted.mp4: plain ffmpeg decodes a frame in each second and reports broken NAL units.
    video = ProbeVideo().run(str(SHARED_VIDEOS / "corrupted.mp4"))
    frames, detail = run_stage(DecodeFrames(), video)
    assert [round(f["timestamp"]) for f in frames] == [0, 1, 2, 3, 4]
    assert detail.startswith("partial: ") and "Invalid NAL unit size" in detail


def test_truncated_file_keeps_its_decodable_start_and_names_the_missing_range(tmp_path):
    whole = tmp_path / "whole.mp4"
    ffmpeg("-f", "lavfi", "-i", "testsrc2=s=320x240:r=25:d=10", "-c:v", "libx264", "-pix_fmt", "yuv420p",
           "-movflags", "+faststart", whole)
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size * 4 // 10])
    video = ProbeVideo().run(str(cut))
    frames, detail = run_stage(DecodeFrames(), video)
    assert 2 <= len(frames) < 8 and video["duration"] == pytest.approx(10.0)
    last = frames[-1]["timestamp"]
    # What ffmpeg reports first depends on where the cut falls (a broken NAL unit, a "partial file").
    assert detail.startswith(f"partial: no frames for {last + 1:.2f}-10.00 s; ffmpeg: ")


def test_a_file_with_nothing_decodable_fails_with_ffmpegs_reason(tmp_path):
    whole = tmp_path / "whole.mp4"
    ffmpeg("-f", "lavfi", "-i", "testsrc2=s=320x240:r=25:d=4", "-c:v", "libx264", "-pix_fmt", "yuv420p",
           "-movflags", "+faststart", whole)
    data = bytearray(whole.read_bytes())
    mdat = data.index(b"mdat") + 4
    data[mdat:] = bytes(len(data) - mdat)  # the index survives, every frame's bytes are zeros
    broken = tmp_path / "zeroed.mp4"
    broken.write_bytes(bytes(data))
    with pytest.raises(VideoError, match="no frame could be decoded"):
        run_stage(DecodeFrames(), ProbeVideo().run(str(broken)))


def ffmpeg(*args) -> None:
    subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-y", *map(str, args)], check=True)


BITS = 12


def clock_filter(offset_s: float) -> str:
    """A burnt-in clock: BITS vertical bands, band k white when bit k of the frame's time in
    centiseconds (its own presentation time plus `offset_s`) is set."""
    code = f"round((T+{offset_s})*100)"
    return (f"geq=lum='255*mod(floor({code}/pow(2,floor({BITS}*X/W))),2)':cb=128:cr=128")


def read_clock(jpeg: bytes) -> float:
    gray = np.asarray(Image.open(io.BytesIO(jpeg)).convert("L"), dtype=float)
    width = gray.shape[1]
    bits = [gray[:, int((k + 0.5) * width / BITS)].mean() > 128 for k in range(BITS)]
    return sum(bit << k for k, bit in enumerate(bits)) / 100


@pytest.mark.parametrize("fps", [1.0, 2.5])
def test_each_frame_is_stamped_with_the_time_its_pixels_show_on_a_burnt_in_clock(tmp_path, fps):
    # NTSC's 29.97 fps: source frames never fall on whole seconds.
    path = tmp_path / "clock.mp4"
    ffmpeg("-f", "lavfi", "-i", "color=c=black:s=480x64:r=30000/1001:d=6", "-vf", clock_filter(0),
           "-c:v", "libx264", "-qp", "0", "-pix_fmt", "yuv420p", path)
    video = ProbeVideo().run(str(path))
    frames, _ = run_stage(DecodeFrames(fps=fps), video)
    assert len(frames) == math.ceil(6 * fps)
    for frame in frames:
        assert read_clock(frame["jpeg"]) == pytest.approx(frame["timestamp"], abs=0.006)
    # Each stored frame is the first of its 1/fps interval: within one source frame of the interval's start.
    assert [f["timestamp"] - i / fps for i, f in enumerate(frames)] == pytest.approx([0.0] * len(frames), abs=1001 / 30000)


def test_variable_frame_rate_concatenation_keeps_each_frames_own_time(tmp_path):
    # 3 s at 25 fps, then 3 s at 4 fps, then 2 s at 30 fps: each part's clock continues the last.
    parts = []
    for i, (rate, seconds, offset) in enumerate([(25, 3, 0), (4, 3, 3), (30, 2, 6)]):
        part = tmp_path / f"part{i}.mp4"
        ffmpeg("-f", "lavfi", "-i", f"color=c=black:s=480x64:r={rate}:d={seconds}", "-vf", clock_filter(offset),
               "-c:v", "libx264", "-qp", "0", "-pix_fmt", "yuv420p", "-video_track_timescale", "3000", part)
        parts.append(part)
    listing = tmp_path / "parts.txt"
    listing.write_text("".join(f"file '{p}'\n" for p in parts))
    path = tmp_path / "vfr.mp4"
    ffmpeg("-f", "concat", "-safe", "0", "-i", listing, "-c", "copy", path)
    video = ProbeVideo().run(str(path))
    frames, detail = run_stage(DecodeFrames(fps=2.0), video)
    assert detail == "" and len(frames) == 16
    for frame in frames:
        assert read_clock(frame["jpeg"]) == pytest.approx(frame["timestamp"], abs=0.006)


def test_every_frame_of_a_stream_running_past_its_header_lies_in_a_segment(tmp_path):
    # Frames 10-19 slowed down 3x: the stream's header says 5.4 s, its last frame is at 5.7 s and the
    # container says 5.8 s.
    path = tmp_path / "slowed.mp4"
    ffmpeg("-f", "lavfi", "-i", "testsrc=s=160x120:r=10:d=2", "-vf", "setpts='if(lt(N,10),PTS,PTS*3)'",
           "-fps_mode", "vfr", "-c:v", "libx264", path)
    header = json.loads(subprocess.run(["ffprobe", "-v", "error", "-show_entries", "format=duration:stream=duration",
                                        "-of", "json", str(path)], capture_output=True, check=True).stdout)
    assert float(header["streams"][0]["duration"]) < float(header["format"]["duration"])
    video = ProbeVideo().run(str(path))
    assert video["duration"] == pytest.approx(float(header["format"]["duration"]))
    frames, _ = run_stage(DecodeFrames(fps=2.0), video)
    segments = [s for batch in CutSegments(seconds=2.0).run(video) for s in batch]
    assert max(f["timestamp"] for f in frames) == pytest.approx(5.7)
    for frame in frames:
        assert any(s["start"] <= frame["timestamp"] < s["end"] for s in segments), frame["timestamp"]


@pytest.mark.parametrize("space,expected_error", [("bt709", 4.0), ("smpte170m", 4.0)])
def test_colours_follow_the_files_colour_tags(tmp_path, space, expected_error):
    rgb = np.array([200, 50, 40])
    path = tmp_path / f"{space}.mp4"
    matrix = {"bt709": "bt709", "smpte170m": "smpte170m"}[space]
    ffmpeg("-f", "lavfi", "-i", "color=c=0xC83228:s=64x64:r=10:d=1",
           "-vf", f"scale=out_color_matrix={matrix}:out_range=tv,format=yuv420p",
           "-colorspace", space, "-color_range", "tv", "-c:v", "libx264", "-qp", "0", path)
    video = ProbeVideo().run(str(path))
    assert video["color_space"] == space
    frames, _ = run_stage(DecodeFrames(), video)
    pixels = np.asarray(Image.open(io.BytesIO(frames[0]["jpeg"])).convert("RGB"), dtype=float)
    assert np.abs(pixels[16:48, 16:48] - rgb).mean() < expected_error


def test_bad_files_fail_at_probe_with_reason(tmp_path, sample_dir):
    empty = tmp_path / "empty.mp4"
    empty.write_bytes(b"")
    text = tmp_path / "notes.mp4"
    text.write_text("just some text, not a video\n" * 50)
    with pytest.raises(VideoError, match="empty file"):
        ProbeVideo().run(str(empty))
    with pytest.raises(VideoError, match="Invalid data"):
        ProbeVideo().run(str(text))
    with pytest.raises(VideoError, match="no such file"):
        ProbeVideo().run(str(tmp_path / "missing.mp4"))


def ffprobe_row(path) -> dict | str:
    """What ffprobe itself says of a file, in the `videos` row's terms: the reference for the probe."""
    info = json.loads(subprocess.run(["ffprobe", "-v", "error", "-show_format", "-show_streams", "-of", "json",
                                      str(path)], capture_output=True, text=True, check=True).stdout)
    streams = info["streams"]
    video = next((s for s in streams if s["codec_type"] == "video" and not s["disposition"]["attached_pic"]), None)
    if video is None:
        return "no video stream"
    rotation = next((int(side["rotation"]) for side in video.get("side_data_list", []) if "rotation" in side), 0)
    width, height = (video["height"], video["width"]) if rotation % 180 else (video["width"], video["height"])
    def rate(text: str) -> float:
        numerator, _, denominator = text.partition("/")
        return float(numerator) / float(denominator) if float(denominator) else 0.0

    fps = rate(video["avg_frame_rate"]) or rate(video["r_frame_rate"])
    # The longest of the video stream (to where its last frame ends) and the audio, as the probe takes
    # it; the container's where no stream states one.
    frames = json.loads(subprocess.run(["ffprobe", "-v", "error", "-select_streams", f"{video['index']}",
                                        "-show_entries", "packet=pts_time,duration_time", "-of", "json", str(path)],
                                       capture_output=True, text=True, check=True).stdout)["packets"]
    last = max((p for p in frames if "pts_time" in p), key=lambda p: float(p["pts_time"]))
    ends = [float(last["pts_time"]) + float(last.get("duration_time", 0)) - float(info["format"].get("start_time", 0))]
    ends += [float(s["duration"]) for s in streams if s["codec_type"] in ("video", "audio") and "duration" in s]
    return {"duration": max(ends) or float(info["format"]["duration"]), "fps": fps, "width": width,
            "height": height, "codec": video["codec_name"], "color_space": video.get("color_space", "unknown"),
            "color_range": video.get("color_range", "unknown"),
            "has_audio": any(s["codec_type"] == "audio" for s in streams)}


def test_probe_reads_what_ffprobe_reports_on_odd_files(tmp_path):
    made = {
        "ntsc.mkv": ["-f", "lavfi", "-i", "testsrc=s=320x240:r=30000/1001:d=2", "-c:v", "libx264"],
        "vp9-sound.webm": ["-f", "lavfi", "-i", "testsrc=s=160x120:r=25:d=2", "-f", "lavfi", "-i", "sine=d=2",
                           "-c:v", "libvpx-vp9", "-c:a", "libopus"],
        "full-range.mp4": ["-f", "lavfi", "-i", "testsrc=s=160x120:r=25:d=2", "-c:v", "libx264", "-pix_fmt",
                           "yuvj420p", "-colorspace", "bt709", "-color_range", "pc"],
        "mpeg2.ts": ["-f", "lavfi", "-i", "testsrc=s=160x120:r=25:d=2", "-f", "lavfi", "-i", "sine=d=2",
                     "-c:v", "mpeg2video", "-c:a", "mp2"],
        "variable-rate.mp4": ["-f", "lavfi", "-i", "testsrc=s=160x120:r=10:d=2", "-vf",
                              "setpts='if(lt(N,10),PTS,PTS*3)'", "-fps_mode", "vfr", "-c:v", "libx264"],
        "sound-only.m4a": ["-f", "lavfi", "-i", "sine=d=1"],
        "animation.gif": ["-f", "lavfi", "-i", "testsrc=s=100x50:r=5:d=2"],
    }
    for name, args in made.items():
        ffmpeg(*args, tmp_path / name)
    ffmpeg("-f", "lavfi", "-i", "testsrc=s=64x64:d=1", "-frames:v", "1", tmp_path / "cover.png")
    ffmpeg("-i", tmp_path / "ntsc.mkv", "-i", tmp_path / "cover.png", "-map", "0", "-map", "1", "-c:v:0", "copy",
           "-c:v:1", "png", "-disposition:v:1", "attached_pic", tmp_path / "cover-art.mp4")
    ffmpeg("-i", tmp_path / "ntsc.mkv", "-c", "copy", "-metadata:s:v", "rotate=270", tmp_path / "rotated.mp4")
    paths = [tmp_path / name for name in [*made, "cover-art.mp4", "rotated.mp4"]]
    paths += sorted(SHARED_VIDEOS.glob("*.m*"))
    for path in paths:
        expected = ffprobe_row(path)
        try:
            video = ProbeVideo().run(str(path))
            probed = {key: video[key] for key in expected} if isinstance(expected, dict) else video
        except VideoError as error:
            probed = str(error)
        if isinstance(expected, dict):
            # Within a frame: ffprobe and PyAV's own FFmpeg place a file's start (and so its frames) a few
            # milliseconds apart where its audio starts before its video.
            assert probed.pop("duration") == pytest.approx(expected.pop("duration"), abs=1 / expected["fps"]), path.name
        assert probed == expected, path.name


def test_a_probe_that_hangs_is_killed_and_the_next_file_is_read(tmp_path, sample_dir):
    fifo = tmp_path / "never-written.mp4"
    os.mkfifo(fifo)  # opening it waits for a writer that never comes
    with pytest.raises(VideoError, match="timed out after 1 s and was killed"):
        pyav_probe.probe(str(fifo), timeout_s=1)
    assert pyav_probe.probe(str(sample_dir / "scenes.mp4"), timeout_s=30)["video"]["codec"] == "h264"


@pytest.mark.parametrize("encoding", [
    ["-c:v", "libsvtav1", "-preset", "12", "-pix_fmt", "yuv420p"],  # AV1
    ["-c:v", "libx264", "-pix_fmt", "yuv420p10le"],  # 10-bit H.264
    ["-c:v", "libx265", "-pix_fmt", "yuv420p10le", "-x265-params", "log-level=error"],  # 10-bit HEVC
    ["-c:v", "libx264", "-pix_fmt", "yuvj420p", "-colorspace", "bt709", "-color_range", "pc"],  # full range
], ids=["av1", "h264-10bit", "hevc-10bit", "bt709-full-range"])
def test_other_encodings_keep_frame_times(tmp_path, encoding):
    path = tmp_path / "clip.mkv"
    ffmpeg("-f", "lavfi", "-i", "color=c=black:s=480x64:r=24:d=3", "-vf", clock_filter(0), *encoding, path)
    frames, detail = run_stage(DecodeFrames(fps=1.0), ProbeVideo().run(str(path)))
    assert detail == "" and len(frames) == 3
    for frame in frames:
        assert read_clock(frame["jpeg"]) == pytest.approx(frame["timestamp"], abs=0.006)


@pytest.mark.parametrize("rotation", [90, 180, 270])
def test_rotated_files_come_out_as_players_show_them(tmp_path, rotation):
    # A white square in the top-left corner of a wide frame; the display matrix turns it.
    upright = tmp_path / "upright.mp4"
    ffmpeg("-f", "lavfi", "-i", "color=c=black:s=96x48:r=10:d=1", "-vf", "drawbox=x=0:y=0:w=16:h=16:c=white:t=fill",
           "-c:v", "libx264", upright)
    path = tmp_path / f"rotated{rotation}.mp4"
    # ffmpeg writes the legacy `rotate` tag as a display matrix when it copies the stream.
    ffmpeg("-i", upright, "-c", "copy", "-metadata:s:v", f"rotate={rotation}", path)
    video = ProbeVideo().run(str(path))
    frames, _ = run_stage(DecodeFrames(), video)
    image = np.asarray(Image.open(io.BytesIO(frames[0]["jpeg"])).convert("L"), dtype=float)
    height, width = image.shape
    assert (width, height) == ((48, 96) if rotation % 180 else (96, 48)) == (video["width"], video["height"])
    corners = {"top-left": image[:8, :8], "top-right": image[:8, -8:], "bottom-left": image[-8:, :8],
               "bottom-right": image[-8:, -8:]}
    bright = max(corners, key=lambda name: corners[name].mean())
    # The display matrix turns the picture counter-clockwise by the angle ffprobe reports (players do so).
    probed = json.loads(subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
                                        "stream_side_data=rotation", "-of", "json", str(path)],
                                       capture_output=True, text=True, check=True).stdout)
    counter_clockwise = int(probed["streams"][0]["side_data_list"][0]["rotation"]) % 360
    assert bright == {90: "bottom-left", 180: "bottom-right", 270: "top-right"}[counter_clockwise]


def clock_video(path, encoding: list[str], seconds: int = 12, rate: str = "30000/1001") -> None:
    ffmpeg("-f", "lavfi", "-i", f"color=c=black:s=480x64:r={rate}:d={seconds}", "-vf", clock_filter(0), *encoding, path)


def made_in_ranges(tmp_path, name: str) -> str:
    """Files whose keyframes do not fall at the range joins (3 ranges of 12 s at 2.5 fps start at 4 s and 8 s)."""
    x264 = ["-c:v", "libx264", "-bf", "3", "-g", "50", "-qp", "0", "-pix_fmt", "yuv420p"]
    path = tmp_path / name
    if name == "b-frames.mp4":
        clock_video(path, x264)
    elif name == "open-gop-hevc.mp4":
        clock_video(path, ["-c:v", "libx265", "-x265-params", "log-level=error:keyint=40:open-gop=1", "-pix_fmt", "yuv420p"])
    elif name == "vp9.webm":
        clock_video(path, ["-c:v", "libvpx-vp9", "-deadline", "realtime", "-g", "45"], rate="25")
    elif name == "edit-list.mp4":
        # Cut by stream copy after a keyframe: the mp4 keeps the frames before the cut and an edit list hides them.
        whole = tmp_path / "whole.mp4"
        clock_video(whole, x264, seconds=14)
        ffmpeg("-ss", "1.3", "-i", whole, "-c", "copy", path)
    elif name == "vfr.mp4":
        parts = []
        for i, (rate, seconds, offset) in enumerate([(25, 5, 0), (4, 4, 5), (30, 3, 9)]):
            part = tmp_path / f"part{i}.mp4"
            ffmpeg("-f", "lavfi", "-i", f"color=c=black:s=480x64:r={rate}:d={seconds}", "-vf", clock_filter(offset),
                   *x264, "-video_track_timescale", "3000", part)
            parts.append(part)
        listing = tmp_path / "parts.txt"
        listing.write_text("".join(f"file '{p}'\n" for p in parts))
        ffmpeg("-f", "concat", "-safe", "0", "-i", listing, "-c", "copy", path)
    elif name == "mpegts.ts":
        clock_video(path, x264)
    return str(path)


@pytest.mark.parametrize("name", ["b-frames.mp4", "open-gop-hevc.mp4", "vp9.webm", "edit-list.mp4", "vfr.mp4", "mpegts.ts"])
def test_time_ranges_decoded_at_once_store_exactly_the_frames_of_one_decode(tmp_path, monkeypatch, name):
    monkeypatch.setattr(decode_module, "MIN_RANGE_S", 1.0)
    ranged = []
    decode_ranges = DecodeFrames._decode_ranges
    monkeypatch.setattr(DecodeFrames, "_decode_ranges", lambda *args: ranged.append(decode_ranges(*args)) or ranged[-1])
    video = ProbeVideo().run(made_in_ranges(tmp_path, name))
    once, once_detail = run_stage(DecodeFrames(fps=2.5), video)
    in_ranges, detail = run_stage(DecodeFrames(fps=2.5, ranges=3), video)
    assert len(DecodeFrames(fps=2.5, ranges=3).range_starts(video["duration"])) == 3
    assert once_detail == detail == ""
    assert [(f["timestamp"], f["jpeg"]) for f in in_ranges] == [(f["timestamp"], f["jpeg"]) for f in once]
    # The edit list starts the video about 1.3 s into the clock (the cut's exact time is not a whole frame).
    offset, within = (1.3, 0.011) if name == "edit-list.mp4" else (0.0, 0.006)
    for frame in in_ranges:
        assert read_clock(frame["jpeg"]) == pytest.approx(frame["timestamp"] + offset, abs=within)
    # MPEG-TS is sought by byte position, and the joins do not match: the stage decodes it from the start.
    assert (ranged[0] is None) == (name == "mpegts.ts")


def test_a_damaged_file_in_ranges_gets_the_report_of_one_decode(tmp_path, monkeypatch):
    monkeypatch.setattr(decode_module, "MIN_RANGE_S", 1.0)
    path = tmp_path / "truncated.mp4"
    clock_video(path, ["-c:v", "libx264", "-g", "50", "-pix_fmt", "yuv420p", "-movflags", "+faststart"])
    path.write_bytes(path.read_bytes()[: path.stat().st_size * 2 // 3])
    video = ProbeVideo().run(str(path))
    assert run_stage(DecodeFrames(fps=2.5, ranges=3), video) == run_stage(DecodeFrames(fps=2.5), video)
