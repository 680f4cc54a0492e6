"""vidprep show VIDEO: a video's metadata, caption timeline, transcript, summary, the stage keys it
has in the store and why stages failed that have not completed since."""

import argparse
import json

from vidprep.jobs.config import add_overrides, load_config
from vidprep.jobs.search import resolve_video
from vidprep.pipeline.plan import build_plan
from vidprep.store.settings import StoreSettings
from vidprep.store.store import ArtifactMissing


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("video", help="video id, manifest id or name, file name or path")
    add_overrides(parser)


def run(args: argparse.Namespace) -> None:
    cfg = load_config(args.overrides)
    keys = build_plan(cfg.stages).keys
    store = StoreSettings.from_config(cfg.store).open()
    video_id = resolve_video(store, args.video)
    if video_id is None:
        raise ArtifactMissing("give one video, not 'all'")
    video = store.video(video_id)
    print(f"{video['name']}  id={video_id}  {video['source_path']}")
    print(f"  {video['duration']:.2f} s, {video['fps']:.2f} fps, {video['width']}x{video['height']}, "
          f"{video['codec']}, audio: {'yes' if video['has_audio'] else 'no'}, {video['size']} bytes")
    sections = [
        ("segment captions", lambda: [f"  [{c.start:6.1f}-{c.end:6.1f}s] {c.caption}"
                                      for c in store.segment_captions(video_id, keys["segment_captions"])]),
        ("frame captions", lambda: [f"  {c.position:4.2f} t={c.timestamp:6.1f}s {c.caption}"
                                    for c in store.frame_captions(video_id, keys["frame_captions"])]),
        ("transcript", lambda: _transcript(store.transcript(video_id, keys["transcript"]))),
        ("summary", lambda: ["  " + store.summary(video_id, keys["summary"])]),
    ]
    for title, lines in sections:
        print(f"\n{title}:")
        try:
            print("\n".join(lines()))
        except (ArtifactMissing, KeyError):
            print("  (not computed for this config)")
    done_stages = store.done_stages(video_id)
    completed = {d["stage_key"] for d in done_stages}
    failed = [f for f in store.failures(video_id) if f["stage_key"] not in completed]
    if failed:
        print("\nfailed (not complete since):")
        for failure in failed:
            print(f"  {failure['stage']} ({failure['stage_key']}), run {failure['run_id']}: {failure['error']}")
    print("\nstage keys in the store (* = the current config's):")
    current = set(keys.values())
    for done in sorted(done_stages, key=lambda d: (d["stage"], d["stage_key"])):
        params = json.loads(done["config_json"])["params"] if done["config_json"] else {}
        mark = "*" if done["stage_key"] in current else " "
        note = f" ({done['detail']})" if done["detail"] else ""
        print(f" {mark} {done['stage_key']:<32} {done['rows']:>5} rows{note}  {json.dumps(params)}")


def _transcript(transcript) -> list[str]:
    if not transcript.segments:
        return [f"  (empty: {transcript.detail})"]
    return [f"  [{s.start:6.1f}-{s.end:6.1f}s] ({s.language}) {s.text}" for s in transcript.segments]
