"""The peers' way: OpenCV seeking, one model call at a time, no cache; and each stage's compute per video
second."""

import dataclasses
import json

import numpy as np

from vidprep.jobs.bench.figures import BenchRun, Figure, _timed
from vidprep.jobs.config import load_config
from vidprep.pipeline.plan import build_plan
from vidprep.pipeline.precompute import precompute
from vidprep.store.artifacts import TRANSCRIPTS, SegmentCaption
from vidprep.store.settings import StoreSettings
from vidprep.store.store import Store


def naive_precompute(cfg, videos: list[dict]) -> int:
    """What the seed repositories do per video, with the same models, loaded inside the timing as a
    script would; Whisper runs its plain sequential pipeline and the vision models keep nothing in a
    store. Returns frames decoded."""
    import cv2

    # Built and never set up with a worker's context: no store keeps the models' outputs or replies.
    plan = build_plan(cfg.stages)
    frames_stage, embedder = plan.stages["frames"], plan.stages["frame_embeddings"].embedder
    describer, summary = plan.stages["segment_captions"].describer, plan.stages["summary"]
    transcript_stage = dataclasses.replace(plan.stages["transcript"], whisper_batch_size=0)
    seconds = plan.stages["segments"].seconds
    decoded = 0
    for video in videos:
        capture = cv2.VideoCapture(video["source_path"])
        jpegs = []
        for i in range(int(video["duration"] * frames_stage.fps) + 1):
            capture.set(cv2.CAP_PROP_POS_MSEC, i / frames_stage.fps * 1000)
            ok, image = capture.read()
            if not ok:
                break
            scale = min(1.0, frames_stage.max_side / max(image.shape[:2]))
            image = cv2.resize(image, None, fx=scale, fy=scale)
            jpegs.append(cv2.imencode(".jpg", image)[1].tobytes())
        capture.release()
        decoded += len(jpegs)
        for jpeg in jpegs:
            embedder.embed_images([jpeg])
        captions = []
        for s in range(max(1, int(np.ceil(video["duration"] / seconds)))):
            inside = jpegs[int(s * seconds * frames_stage.fps): int((s + 1) * seconds * frames_stage.fps)]
            if inside:
                text, confidence = describer.describe([inside[0], inside[len(inside) // 2], inside[-1]])
                captions.append(SegmentCaption(s, s * seconds, (s + 1) * seconds, text, confidence, ""))
        for position in range(5):
            describer.describe([jpegs[round(position * (len(jpegs) - 1) / 4)]])
        spoken = list(transcript_stage.run(video))
        TRANSCRIPTS.rows([row for batch in spoken for row in batch])
        list(summary.run(video, iter([captions])))
    return decoded


def naive_figure(cfg, videos: list[dict], vidprep_seconds: float) -> Figure:
    naive_seconds, _ = _timed(naive_precompute, cfg, videos)
    inputs = f"{len(videos)} videos, {sum(v['duration'] for v in videos) / 60:.1f} min"
    return Figure(f"speed vs a naive sequential script (OpenCV seeking, one call at a time, no cache), {inputs}",
                  "naive script (1/s)", 1 / naive_seconds, 1 / vidprep_seconds, "1/s")


def stage_work_figures(store: Store) -> list[Figure]:
    """Each stage's compute seconds per second of video, from what its workers recorded: how to size
    a stage's actor pool on a cluster (a ratio of 0.5 means one actor keeps up with 2 s of video per s)."""
    duration = sum(v["duration"] for v in store.videos())
    seconds: dict[str, float] = {}
    for done in store.scan("stage_done", columns=["stage", "seconds"]).to_pylist():
        seconds[done["stage"]] = seconds.get(done["stage"], 0.0) + done["seconds"]
    return [Figure(f"stage {stage}: compute seconds per video second", "video duration (s)", duration, total, "s")
            for stage, total in sorted(seconds.items())]


def figures(run: BenchRun) -> list[Figure]:
    first, _, store, _ = run.precomputed()
    sample = naive_figure(run.run_cfg, store.videos(), first.wall_seconds)
    longer = run.work / "longer.jsonl"
    longer.write_text("".join(json.dumps({"path": str(p)}) + "\n"
                              for p in [run.looped(120), run.looped(240), *run.real[:1]]))
    longer_cfg = load_config([f"store.uri={run.work / 'longer-store'}", "dataset=folder",
                              f"dataset.manifest={longer}", "ray.progress_bars=false", "llm.client.cache=false",
                              *run.overrides])
    longer_seconds = precompute(longer_cfg).wall_seconds
    longer_store = StoreSettings.from_config(longer_cfg.store).open()
    return [sample, naive_figure(run.run_cfg, longer_store.videos(), longer_seconds), *stage_work_figures(longer_store)]
