"""Decode against the same ffmpeg command line."""

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


def figures(run: BenchRun) -> list[Figure]:
    return [decode_figure(run.cfg, [*run.real, run.looped(60)])]
