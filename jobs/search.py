"""vidprep search VIDEO_OR_ALL TEXT [search.mode=vector|text|hybrid]: the frames that best match a text query."""

import argparse
import os
from typing import TYPE_CHECKING

from vidprep.conf.checks import ArtifactMissing
from vidprep.jobs.config import add_overrides, load_config

if TYPE_CHECKING:
    from vidprep.store.store import Store

# The work's modules are imported in `run`: `vidprep COMMAND --help` and completion stay fast.


def resolve_video(store: "Store", video: str) -> str | None:
    """A video id from an id, a manifest id or name, a file name or a file path; None for "all"."""
    from vidprep.store.keys import content_id

    if video == "all":
        return None
    if os.path.isfile(video):
        # A file that failed at probe has no video row: its stored reason says why (a folder's entries
        # are stored at their real path, a manifest's as given).
        paths = [os.path.abspath(video), os.path.realpath(video)]
        failed = [s["error"] for s in store.sources(paths).values() if s["error"]]
        if failed:
            raise ArtifactMissing(f"{video} is not a video in the store {store.uri}: {failed[0]}")
        return content_id(video)
    if store.videos_by_id([video]):
        return video
    found = store.video_ids_named(video)
    if len(found) > 1:
        raise ArtifactMissing(f"{video!r} names {len(found)} videos in the store {store.uri} "
                              f"({', '.join(sorted(found))}): give an id or a file name with its extension")
    if not found:
        raise ArtifactMissing(f"no video {video!r} in the store {store.uri} (give an id, a name, a path or 'all')")
    return found.pop()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("video", help="video id, manifest id or name, file name or path, or 'all'")
    parser.add_argument("text", help="what to look for")
    parser.add_argument("-k", type=int, default=5, help="frames to print (default 5)")
    add_overrides(parser)


def run(args: argparse.Namespace) -> None:
    from vidprep.pipeline.plan import build_plan
    from vidprep.store.artifacts import FRAME_EMBEDDINGS
    from vidprep.store.settings import StoreSettings
    from vidprep.store.store import check_search_mode

    cfg = load_config(args.overrides)
    plan = build_plan(cfg.stages)
    stage = plan.stages[FRAME_EMBEDDINGS.stage]
    store = StoreSettings.from_config(cfg.store).open_existing()
    video_id = resolve_video(store, args.video)
    check_search_mode(cfg.search.mode)
    if video_id:
        # Before the text model loads: a video that is not done fails at once.
        store.require_done(video_id, plan.keys[FRAME_EMBEDDINGS.stage])
    query = stage.embedder.embed_texts([args.text])[0]
    hits = store.search(query, plan.keys[FRAME_EMBEDDINGS.stage], video_id, args.k, text=args.text, mode=cfg.search.mode)
    if not hits:
        raise ArtifactMissing(f"no frame embeddings of key {plan.keys[FRAME_EMBEDDINGS.stage]} in {store.uri}: "
                              "run `vidprep precompute` with the same stage settings first")
    names = {found: row["name"] for found, row in store.videos_by_id(sorted({h.video_id for h in hits})).items()}
    for hit in hits:
        print(f"{names.get(hit.video_id, hit.video_id):<20} t={hit.timestamp:8.2f}s  score={hit.score:.3f}  "
              f"{hit.description or ''}")
