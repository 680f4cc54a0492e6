"""Run one stage on a group of videos against the store: skip those complete, write rows idempotently,
then mark each complete. Knows nothing of Ray, so the same code runs in a test, a script or a Ray worker.

The rows of many videos go to the store in one commit per table and their completion markers in one
more, after them: a commit costs more than a short video's work. A marker never precedes its rows, so
a kill leaves at worst rows without a marker, which the next run writes again.
"""

import dataclasses
import time
import traceback

from vidprep.stages.base import Stage
from vidprep.stages.context import WorkerContext, counted
from vidprep.stages.media import VideoError
from vidprep.store.artifacts import Artifact
from vidprep.store.keys import row_id
from vidprep.store.store import Store
from vidprep.conf.checks import ArtifactMissing

# Rows held before they are written even though their videos are not finished (long videos, big JPEGs).
FLUSH_ROWS = 256


@dataclasses.dataclass
class Outcome:
    # Rows written (0 when it failed), or -1 when the video's artifacts were already complete.
    rows: int = -1
    error: BaseException | None = None
    llm_calls: int = 0


class _Writes:
    """Rows waiting to be written, per table, and the completion markers of videos whose rows are all here
    or already written."""

    def __init__(self, context: WorkerContext):
        self.context, self.store = context, context.store
        self.rows: dict[str, list[dict]] = {}
        self.markers: list[dict] = []

    def add(self, table: str, rows: list[dict]) -> None:
        self.rows.setdefault(table, []).extend(rows)
        if sum(map(len, self.rows.values())) >= FLUSH_ROWS:
            self.write_rows()

    def drop(self, video_id: str) -> None:
        self.rows = {table: [r for r in rows if r["video_id"] != video_id] for table, rows in self.rows.items()}

    def write_rows(self) -> None:
        for table, rows in self.rows.items():
            self.store.upsert(table, rows)
        self.rows = {}

    def write(self) -> None:
        self.write_rows()
        # What the stage's models computed for later stages (labels, text read off frames) is stored
        # before the videos are marked complete, when the next stage may start on them.
        self.context.flush()
        self.store.mark_done(self.markers)
        self.markers = []


def run_stage(context: WorkerContext, stage: Stage, key: str, inputs: list[tuple[Artifact, str]],
              videos: list[dict], run_id: str, node_id: str) -> list[Outcome]:
    """Each video's outcome, in order, with `stage` set up with `context`. `inputs`: the artifact and
    stage key of each upstream stage, in the order of `stage.upstream`. One video's failure (a stage
    error, a row the store refuses) is its own."""
    store = context.store
    done = store.done_keys([v["video_id"] for v in videos])
    writes, outcomes = _Writes(context), []
    for video in videos:
        outcome = Outcome()
        outcomes.append(outcome)
        if (video["video_id"], key) in done:
            continue
        # Its own calls only: an actor may run other groups' videos at once.
        with counted() as used:
            try:
                outcome.rows = _run_video(store, stage, key, inputs, video, done, writes, node_id, run_id)
            except Exception as error:  # noqa: BLE001 - the video's failure; the other videos go on
                writes.drop(video["video_id"])
                outcome.rows, outcome.error = 0, error
        outcome.llm_calls = sum(u.calls for u in used.values())
    try:
        writes.write()
    except Exception:  # noqa: BLE001 - one video's rows are refused: write each video apart to find it
        _write_apart(context, stage, key, inputs, videos, outcomes, node_id, run_id)
    return outcomes


def _run_video(store: Store, stage: Stage, key: str, inputs: list[tuple[Artifact, str]], video: dict,
               done: set, writes: _Writes, node_id: str, run_id: str) -> int:
    video_id, started = video["video_id"], time.monotonic()
    for _, upstream_key in inputs:
        if (video_id, upstream_key) not in done:
            raise ArtifactMissing(f"video {video_id} has no complete artifacts for stage key {upstream_key}")
    batches_in = [store.read_batches(artifact, video_id, upstream_key, stage.batch_size, checked=True)
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
        writes.add(stage.artifact.table_of(batch), batch)
        rows += len(batch)
    writes.markers.append({"video_id": video_id, "stage": stage.name, "stage_key": key, "rows": rows,
                           "detail": detail, "seconds": time.monotonic() - started, "node_id": node_id,
                           "run_id": run_id})
    return rows


def _write_apart(context: WorkerContext, stage: Stage, key: str, inputs, videos: list[dict],
                 outcomes: list[Outcome], node_id: str, run_id: str) -> None:
    """Run again, one video per write, each video whose rows were not yet marked complete."""
    store = context.store
    done = store.done_keys([v["video_id"] for v in videos])
    for video, outcome in zip(videos, outcomes):
        if outcome.error is not None or outcome.rows < 0 or (video["video_id"], key) in done:
            continue
        writes = _Writes(context)
        try:
            _run_video(store, stage, key, inputs, video, done, writes, node_id, run_id)
            writes.write()
        except Exception as error:  # noqa: BLE001 - this video's rows are the refused ones
            outcome.rows, outcome.error = 0, error


def describe_error(error: BaseException) -> str:
    """The user-facing reason: a VideoError's own message, anything else with its type and origin."""
    if isinstance(error, VideoError):
        return str(error)
    origin = traceback.extract_tb(error.__traceback__)[-1] if error.__traceback__ else None
    where = f" (at {origin.filename}:{origin.lineno})" if origin else ""
    return f"{type(error).__name__}: {error}{where}"
