"""Run one stage on one video against the store: skip if complete, write rows idempotently, then
mark complete. Knows nothing of Ray, so the same code runs in a test, a script or a Ray worker.
"""

import time
import traceback

from vidprep.stages.base import Stage
from vidprep.stages.media import VideoError
from vidprep.store.artifacts import Artifact
from vidprep.store.keys import row_id
from vidprep.store.store import Store


def run_stage(store: Store, stage: Stage, key: str, inputs: list[tuple[Artifact, str]], video: dict,
              run_id: str, node_id: str) -> int:
    """Rows written for this video, or -1 when its artifacts were already complete. `inputs`: the
    artifact and stage key of each upstream stage, in the order of `stage.upstream`."""
    video_id = video["video_id"]
    if store.is_done(video_id, key):
        return -1
    started = time.monotonic()
    batches_in = [store.read_batches(artifact, video_id, upstream_key, stage.batch_size)
                  for artifact, upstream_key in inputs]
    rows, batches = 0, stage.run(video, *batches_in)
    while True:
        try:
            batch = next(batches)
        except StopIteration as end:
            # A stage's `return "..."` says why it wrote what it wrote (e.g. "no audio track").
            detail = end.value or ""
            break
        for row in batch:
            row.update(row_id=row_id(video_id, key, row[stage.artifact.order]), video_id=video_id, stage_key=key)
        store.upsert(stage.artifact.table_of(batch), batch)
        rows += len(batch)
    store.mark_done(video_id, stage.name, key, rows, time.monotonic() - started, node_id, run_id, detail)
    return rows


def describe_error(error: BaseException) -> str:
    """The user-facing reason: a VideoError's own message, anything else with its type and origin."""
    if isinstance(error, VideoError):
        return str(error)
    origin = traceback.extract_tb(error.__traceback__)[-1] if error.__traceback__ else None
    where = f" (at {origin.filename}:{origin.lineno})" if origin else ""
    return f"{type(error).__name__}: {error}{where}"
