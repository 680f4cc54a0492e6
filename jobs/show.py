"""vidprep show VIDEO: a video's metadata, caption timeline, transcript, summary, the stage keys it
has in the store and why stages failed that have not completed since."""

import argparse
import json

from vidprep.conf.checks import ArtifactMissing
from vidprep.jobs.config import add_overrides, load_config
from vidprep.jobs.search import resolve_video

# The work's modules are imported in `run`: `vidprep COMMAND --help` and completion stay fast.


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("video", help="video id, manifest id or name, file name or path")
    add_overrides(parser)


def run(args: argparse.Namespace) -> None:
    from vidprep.pipeline.plan import build_plan
    from vidprep.store.settings import StoreSettings

    cfg = load_config(args.overrides)
    plan = build_plan(cfg.stages)
    keys = plan.keys
    store = StoreSettings.from_config(cfg.store).open_existing()
    video_id = resolve_video(store, args.video)
    if video_id is None:
        raise ArtifactMissing("give one video, not 'all'")
    video = store.video(video_id)
    print(f"{video['name']}  id={video_id}  {video['source_path']}")
    others = [name for name in store.names(video_id) if name != video["name"]]
    if others:
        print(f"  also named: {', '.join(others)}")
    print(f"  {video['duration']:.2f} s, {video['fps']:.2f} fps, {video['width']}x{video['height']}, "
          f"{video['codec']}, audio: {'yes' if video['has_audio'] else 'no'}, {video['size']} bytes")
    for name, stage in plan.stages.items():
        if stage.artifact.title:
            print(f"\n{stage.artifact.title}:")
            print("\n".join(_lines(store, stage.artifact, video_id, plan.keys[name])))
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


def _lines(store, artifact, video_id: str, key: str) -> list[str]:
    try:
        rows = store.read(artifact, video_id, key)
    except ArtifactMissing:
        return ["  (not computed for this config)"]
    return [f"  {row.line()}" for row in rows] or [f"  (empty: {store.detail(video_id, key) or 'no rows'})"]
