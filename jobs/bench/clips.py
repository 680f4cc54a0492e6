"""Many short videos end to end, against a plain script."""

import json
import subprocess
from pathlib import Path

import numpy as np

from vidprep.jobs.bench.figures import BenchRun, Figure, _timed
from vidprep.jobs.config import load_config
from vidprep.pipeline.precompute import precompute
from vidprep.store.settings import StoreSettings


CLIP_PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "camera", "china", "flower")
# The cheap stages: what a many-video figure measures is the pipeline's cost per video, not the models'.
CHEAP_STAGES = ("~stages.segment_captions", "~stages.frame_captions", "~stages.transcript", "~stages.summary")


def make_clips(folder: Path, count: int, seconds: int = 3) -> Path:
    """`count` clips of the sample's real photos, each its own content (a white square at a place of
    its own), made by ffmpeg; kept between runs."""
    from vidprep.jobs.sample import _frame

    folder.mkdir(parents=True, exist_ok=True)
    for name in CLIP_PHOTOS:
        if not (folder / f"{name}.png").exists():
            _frame(name, None).save(folder / f"{name}.png")
    for i in range(count):
        clip = folder / "clips" / f"clip_{i:04d}.mp4"
        if not clip.exists():
            clip.parent.mkdir(exist_ok=True)
            subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-y", "-loop", "1", "-i",
                            str(folder / f"{CLIP_PHOTOS[i % len(CLIP_PHOTOS)]}.png"), "-t", str(seconds),
                            "-vf", f"drawbox=x={i % 600}:y={10 + i // 600 * 40}:w=24:h=24:color=white:t=fill,"
                            "format=yuv420p", "-r", "25", "-c:v", "libx264",
                            "-preset", "ultrafast", str(clip)], check=True)
    return folder / "clips"


def naive_clips(clips: list[Path], fps: float, max_side: int) -> int:
    """What a plain script does per clip: ffmpeg to JPEGs in a pipe, the same embedder (loaded here, as
    a script would), the vectors saved with numpy. Returns frames embedded."""
    from vidprep.stages.models.embedders import LabelTextEmbedder

    embedder, frames = LabelTextEmbedder(), 0
    for clip in clips:
        jpegs = subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-i", str(clip), "-vf",
                                f"fps={fps},scale='min({max_side},iw)':-2", "-f", "image2pipe", "-c:v", "mjpeg",
                                "-q:v", "4", "-"], capture_output=True, check=True).stdout
        # JPEGs in a stream: each starts with FFD8 and ends with FFD9.
        images = [b"\xff\xd8" + part for part in jpegs.split(b"\xff\xd8")[1:]]
        vectors, _ = embedder.embed_images(images)
        np.save(clip.with_suffix(".npy"), vectors)
        frames += len(images)
    return frames


def seconds_per_video(times: list[float], count: int, last: bool) -> float:
    """Seconds per completion over the first (or last) `count` completions after the first (before the
    last) completion time; completions at one time (a group's, written in one commit) count together."""
    times = sorted(times)
    if last:
        times = [times[-1] - t for t in reversed(times)]
    start = times[0]
    after = [t for t in times if t > start]
    end = after[min(count, len(after)) - 1]
    return (end - start) / sum(1 for t in after if t <= end)


def clips_figures(work: Path, clips_folder: Path, count: int, overrides: list[str]) -> list[Figure]:
    folder = make_clips(clips_folder, count)
    clips = sorted(folder.glob("*.mp4"))[:count]
    manifest = work / "clips.jsonl"
    manifest.write_text("".join(json.dumps({"path": str(c)}) + "\n" for c in clips))
    cfg = load_config([f"store.uri={work / 'clips-store'}", "dataset=folder", f"dataset.manifest={manifest}",
                       "ray.progress_bars=false", *CHEAP_STAGES, *overrides])
    summary = precompute(cfg)
    if summary.done != count:
        raise RuntimeError(f"the clips run finished {summary.done} of {count} videos: {summary.failures[:3]}")
    store = StoreSettings.from_config(cfg.store).open()
    started = store.last_run("precompute")["started_at"]
    seconds = [(r["finished_at"] - started).total_seconds() for r in store.scan(
        "stage_done", "stage = 'frame_embeddings'", ["finished_at"]).to_pylist()]
    naive_seconds, _ = _timed(naive_clips, clips, cfg.stages.frames.fps, cfg.stages.frames.max_side)
    return [
        Figure(f"{count} clips of 3 s: seconds per video, last 100 vs first 100", "first 100 (s/video)",
               seconds_per_video(seconds, 100, last=False), seconds_per_video(seconds, 100, last=True), "s",
               "<= 1.2"),
        Figure(f"{count} clips of 3 s end to end (frames, segments, frame embeddings) vs a plain script",
               "plain script (videos/s)", count / naive_seconds, count / summary.wall_seconds, "1/s", ">= 1"),
        Figure(f"{count} clips: hashing and probing every file (the plain script does neither)", "whole run (s)",
               summary.wall_seconds, summary.identify_seconds, "s"),
        Figure(f"{count} clips: fixed costs (Ray start, actors, model loads) until the first group of "
               "videos is done, identification apart", "whole run (s)", summary.wall_seconds,
               min(seconds) - summary.identify_seconds, "s"),
    ]


def figures(run: BenchRun) -> list[Figure]:
    return clips_figures(run.work, run.out / "many-clips", run.clips, run.overrides)
