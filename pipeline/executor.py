"""Run one stage on one video against the store: skip if complete, write rows idempotently, then
mark complete. Knows nothing of Ray, so the same code runs in a test, a script or a Ray worker.
"""

import time
import traceback

from stages.base import Stage, StageError
from store.keys import row_id
from store.store import Store

# How a stage's upstream artifacts are read back, by upstream stage name.
READERS = {"frames": Store.iter_frames}


def run_stage(store: Store, stage: Stage, key: str, upstream_keys: dict[str, str], video: dict,
              run_id: str, node_id: str) -> int:
    """Rows written for this video, or -1 when its artifacts were already complete."""
    video_id = video["video_id"]
    if store.is_done(video_id, key):
        return -1
    started = time.monotonic()
    inputs = [
        READERS[name](store, video_id, upstream_keys[name], stage.batch_size) for name in stage.upstream
    ]
    rows = 0
    for batch in stage.run(video, *inputs):
        for row in batch:
            row.update(row_id=row_id(video_id, key, row[stage.row_field]), video_id=video_id, stage_key=key)
        store.upsert(stage.table, batch)
        rows += len(batch)
    store.mark_done(video_id, stage.name, key, rows, time.monotonic() - started, node_id, run_id)
    return rows


def describe_error(error: BaseException) -> str:
    """The user-facing reason: a StageError's own message, anything else with its type and origin."""
    if isinstance(error, StageError):
        return str(error)
    origin = traceback.extract_tb(error.__traceback__)[-1] if error.__traceback__ else None
    where = f" (at {origin.filename}:{origin.lineno})" if origin else ""
    return f"{type(error).__name__}: {error}{where}"
