"""Decode against the same ffmpeg command line, and in time ranges against the plain `ffmpeg -vf fps=1`."""

import dataclasses
import os
import subprocess
from pathlib import Path

from vidprep.jobs.bench.figures import BenchRun, Figure, _timed
from vidprep.pipeline.plan import build_plan
from vidprep.stages.probe import ProbeVideo


def decode_figure(cfg, files: list[Path], repeats: int = 3) -> Figure:
    stage = build_plan(cfg.stages).stages["frames"]
    videos = [ProbeVideo().run(str(f)) for f in files]
    def raw(video):
        # The stage's own ffmpeg command line, run bare (its showinfo lines go unread).
        subprocess.run(["ffmpeg", "-v", "error", *stage.ffmpeg_args(video["source_path"], video)],
                       stdout=subprocess.DEVNULL, check=True)

    def ours(video):
        return sum(len(batch) for batch in stage.run(video))

    best_raw, best_ours = float("inf"), float("inf")
    for _ in range(repeats):
        best_raw = min(best_raw, sum(_timed(raw, v)[0] for v in videos))
        best_ours = min(best_ours, sum(_timed(ours, v)[0] for v in videos))
    # Speed relative to ffmpeg: its time over ours (1.0: as fast as the bare command).
    return Figure("decode stage speed vs the same ffmpeg command line", "ffmpeg CLI (1/s)", 1 / best_raw,
                  1 / best_ours, "1/s", ">= 0.8")


def full_hd(run: BenchRun, minutes: int = 10) -> Path:
    """Big Buck Bunny at 1920x1080 H.264 (x264 veryfast, B-frames, a keyframe every 250 frames): two minutes
    encoded, looped to `minutes` by stream copy; kept between runs."""
    out = run.work / f"bbb_1080p_{minutes}min.mp4"
    if not out.exists():
        part = run.work / "bbb_1080p_2min.mp4"
        subprocess.run(["ffmpeg", "-v", "error", "-y", "-stream_loop", "-1", "-i", str(run.bbb), "-t", "120",
                        "-vf", "scale=1920:1080", "-c:v", "libx264", "-preset", "veryfast", "-crf", "23",
                        "-g", "250", "-an", str(part)], check=True)
        subprocess.run(["ffmpeg", "-v", "error", "-y", "-stream_loop", "-1", "-i", str(part),
                        "-t", str(60 * minutes), "-c", "copy", str(out)], check=True)
    return out


def ranges_figure(cfg, path: Path, repeats: int = 2) -> Figure:
    """The frames stage with one range per core against plain `ffmpeg -vf fps=1` (ffmpeg's own threads)."""
    stage = dataclasses.replace(build_plan(cfg.stages).stages["frames"], ranges=len(os.sched_getaffinity(0)))
    video = ProbeVideo().run(str(path))

    def plain():
        subprocess.run(["ffmpeg", "-v", "error", "-i", str(path), "-map", "0:V:0", "-vf", "fps=1", "-f", "null", "-"],
                       check=True)

    def ours():
        return sum(len(batch) for batch in stage.run(video))

    best_plain = min(_timed(plain)[0] for _ in range(repeats))
    best_ours = min(_timed(ours)[0] for _ in range(repeats))
    return Figure(f"frames stage in {stage.ranges} time ranges vs plain `ffmpeg -vf fps=1`, 10-minute 1080p H.264",
                  "plain ffmpeg (1/s)", 1 / best_plain, 1 / best_ours, "1/s", ">= 1.5")


def figures(run: BenchRun) -> list[Figure]:
    return [decode_figure(run.cfg, [*run.real, run.looped(60)]), ranges_figure(run.cfg, full_hd(run))]
