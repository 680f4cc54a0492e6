"""Store costs against its size, each against the same cost on an empty store."""

from pathlib import Path

import numpy as np
import pyarrow as pa

from vidprep.jobs.bench.figures import BenchRun, Figure, _timed
from vidprep.jobs.bench.vectors import SCALE_DIM, SCALE_FRAMES, _bulk_done, _embedding_rows
from vidprep.store.artifacts import FRAME_EMBEDDINGS, FRAMES, SEGMENT_CAPTIONS
from vidprep.store.store import Store


# The stages whose rows a video has, and their keys.
STAGE_KEYS = {FRAMES.stage: "frames", FRAME_EMBEDDINGS.stage: "embed", SEGMENT_CAPTIONS.stage: "captions"}


def _scale_video(video_id: str, jpeg: bytes, rng) -> dict[str, pa.Table]:
    """One video's rows as the frames, embeddings, segment captions and completion stages write them."""
    n = SCALE_FRAMES
    index = np.arange(n)
    segments = np.arange(n // 10)
    return {
        FRAMES.table: pa.table({
            "row_id": [f"{video_id}/frames/{i}" for i in index], "video_id": [video_id] * n, "stage_key": ["frames"] * n,
            "frame_index": index.astype(np.int32), "timestamp": index.astype(np.float64),
            "jpeg": [jpeg] * n, "width": pa.array([64] * n, pa.int32()), "height": pa.array([36] * n, pa.int32())},
            schema=FRAMES.schema),
        FRAME_EMBEDDINGS.sized(SCALE_DIM).table: _embedding_rows(video_id, "embed", rng),
        SEGMENT_CAPTIONS.table: pa.table({
            "row_id": [f"{video_id}/captions/{i}" for i in segments], "video_id": [video_id] * len(segments),
            "stage_key": ["captions"] * len(segments), "segment_index": segments.astype(np.int32),
            "start": segments * 10.0, "end": segments * 10.0 + 10, "caption": ["a caption"] * len(segments),
            "confidence": [0.5] * len(segments), "model": ["bench"] * len(segments)},
            schema=SEGMENT_CAPTIONS.schema),
    }


def _scale_store(folder: Path, rows: int, jpeg: bytes, ann_min_rows: int) -> Store:
    """A store holding `rows` frames and `rows` embeddings (videos of 60), compacted as a long run leaves
    it; written in bulk, since these rows are new (the per-video path is what the figures time)."""
    store = Store(str(folder), ann_min_rows=ann_min_rows)
    rng = np.random.default_rng(0)
    per_batch, count = 1000, -(-rows // SCALE_FRAMES)
    for first in range(0, count, per_batch):
        videos = [_scale_video(f"v{v}", jpeg, rng) for v in range(first, min(first + per_batch, count))]
        for name in videos[0]:
            store.append(name, pa.concat_tables([video[name] for video in videos]))
        _bulk_done(store, [f"v{v}" for v in range(first, min(first + per_batch, count))], STAGE_KEYS)
    store.index_embeddings()
    store.compact()
    return store


def _scale_operations(store: Store, jpeg: bytes) -> dict[str, object]:
    """The timed operations on one store; call i writes, reads and checks video `new-i`."""
    rng = np.random.default_rng(1)
    query = rng.standard_normal(SCALE_DIM, dtype=np.float32)

    def write(i):
        video_id = f"new-{i}"
        for name, table in _scale_video(video_id, jpeg, rng).items():
            store.upsert(name, table)
        store.mark_done([{"video_id": video_id, "stage": stage, "stage_key": key, "rows": SCALE_FRAMES,
                          "detail": "", "seconds": 0.0, "node_id": "bench", "run_id": "bench"}
                         for stage, key in STAGE_KEYS.items()])

    def read(i):
        store.frames_in_range(f"new-{i}", "frames", 10.0, 20.0)
        store.read(SEGMENT_CAPTIONS, f"new-{i}", "captions")
        store.frame_embeddings(f"new-{i}", "embed", list(range(0, SCALE_FRAMES, 6)))

    return {
        "one video's write (60 frames, 60 embeddings, 6 captions, 3 completion markers)": write,
        "one video's typed reads (frames in a 10 s range, captions, 10 frames' descriptions)": read,
        "completion check of one video": lambda i: store.done_keys([f"new-{i}"]),
        "search over all videos (top 10)": lambda i: store.search(query, "embed", None, 10),
    }


def scale_figures(sizes: list[int], work: Path, ann_min_rows: int, repeats: int = 9) -> list[Figure]:
    """Each store cost at each size against the same cost on an empty store. The stores take turns
    within each repeat, so a load on the machine weighs on the empty store's figure as on the others'."""
    import cv2

    jpeg = cv2.imencode(".jpg", np.full((36, 64, 3), 128, np.uint8))[1].tobytes()
    built = {}
    for size in [0, *sizes]:
        built[size], store = _timed(_scale_store, work / f"scale-{size}", size, jpeg, ann_min_rows)
        built[size] = (built[size], _scale_operations(store, jpeg))
    times = {size: {name: [] for name in operations} for size, (_, operations) in built.items()}
    for i in range(repeats):
        for size, (_, operations) in built.items():
            for name, operation in operations.items():
                times[size][name].append(_timed(operation, i)[0] * 1000)
    empty = {name: float(np.median(values)) for name, values in times[0].items()}
    return [Figure(f"{name}, {size:,} frames + {size:,} embeddings (store built in {built[size][0]:.0f} s)",
                   "empty store (ms)", empty[name], float(np.median(values)), "ms",
                   "<= 3" if size >= 10**7 else "<= 2")
            for size in sizes for name, values in times[size].items()]


def figures(run: BenchRun) -> list[Figure]:
    return scale_figures(run.rows, run.work, run.cfg.store.ann_min_rows)
