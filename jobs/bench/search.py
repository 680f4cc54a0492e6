"""Text-search latency and recall of the ANN index as the store grows."""

from pathlib import Path

import numpy as np
import pyarrow as pa

from vidprep.jobs.bench.figures import BenchRun, Figure, _timed
from vidprep.jobs.bench.vectors import SCALE_DIM, SCALE_FRAMES, _bulk_done, _embedding_rows
from vidprep.store.artifacts import FRAME_EMBEDDINGS
from vidprep.store.store import Store


def search_figures(sizes: list[int], work: Path, dim: int = SCALE_DIM) -> list[Figure]:
    figures, rng = [], np.random.default_rng(0)
    for size in sizes:
        store = Store(str(work / f"vectors-{size}"), ann_min_rows=size)
        count = -(-size // SCALE_FRAMES)  # videos, enough for at least `size` vectors

        def write():
            for first in range(0, count, 1000):
                videos = [f"v{v}" for v in range(first, min(first + 1000, count))]
                # Bulk appends: these rows are new, so the idempotent upsert's key lookup is not needed.
                store.append(FRAME_EMBEDDINGS.sized(dim).table,
                             pa.concat_tables([_embedding_rows(video, "bench", rng, dim) for video in videos]))
                _bulk_done(store, videos, {"frame_embeddings": "bench"})

        write_seconds, _ = _timed(write)
        firsts = store.scan(FRAME_EMBEDDINGS.sized(dim).table, "frame_index = 0", ["vector"])["vector"]
        sources = [np.asarray(firsts[i].as_py(), np.float32) for i in range(0, len(firsts), max(1, len(firsts) // 20))]

        def queries(spread: float) -> list[np.ndarray]:
            """Each a frame's vector moved by a random unit vector times `spread` (0.5: cosine 0.9 to it)."""
            moved = [v + spread * n / np.linalg.norm(n) for v, n in
                     ((v, rng.standard_normal(dim).astype(np.float32)) for v in sources)]
            return [q / np.linalg.norm(q) for q in moved]

        def results(asked):
            times, hits = [], []
            for query in asked:
                seconds, found = _timed(store.search, query, "bench", None, 10)
                times.append(seconds)
                hits.append({(h.video_id, h.timestamp) for h in found})
            return float(np.median(times)) * 1000, hits

        near, far = queries(0.5), queries(2.0)
        (exact_ms, exact_near), (_, exact_far) = results(near), results(far)
        build, _ = _timed(store.index_embeddings)
        (ann_ms, ann_near), (_, ann_far) = results(near), results(far)
        recall = {name: float(np.mean([len(a & e) / len(e) for a, e in zip(ann, exact)]))
                  for name, ann, exact in (("near", ann_near, exact_near), ("far", ann_far, exact_far))}
        figures += [
            Figure(f"text-search latency, {size:,} video-like vectors, ANN index", "exact search (ms)", exact_ms,
                   ann_ms, "ms"),
            Figure(f"recall@10 of the ANN search, {size:,} vectors, queries near a frame (cosine 0.9)",
                   "exact search", 1.0, recall["near"], "", ">= 0.9"),
            Figure(f"recall@10 of the ANN search, {size:,} vectors, queries far from every frame (cosine 0.45)",
                   "exact search", 1.0, recall["far"], ""),
            Figure(f"ANN index build on {size:,} vectors (budget at 10^6: 300 s on 2 cores)",
                   "writing the vectors (s)", write_seconds, build, "s")]
    return figures


def figures(run: BenchRun) -> list[Figure]:
    return search_figures(run.vectors, run.work)
