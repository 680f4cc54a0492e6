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
            # As a long run leaves it: the scalar indexes (video ids, stage keys) hold every row.
            store.compact()

        write_seconds, _ = _timed(write)
        firsts = store.scan(FRAME_EMBEDDINGS.sized(dim).table, "frame_index = 0", ["vector"])["vector"]
        sources = [np.asarray(firsts[i].as_py(), np.float32) for i in range(0, len(firsts), max(1, len(firsts) // 20))]

        def near_queries() -> list[np.ndarray]:
            """Each a frame's vector moved by half a random unit vector: cosine 0.9 to it."""
            moved = [v + 0.5 * n / np.linalg.norm(n) for v, n in
                     ((v, rng.standard_normal(dim).astype(np.float32)) for v in sources)]
            return [q / np.linalg.norm(q) for q in moved]

        gap = rng.standard_normal(dim).astype(np.float32)
        gap /= np.linalg.norm(gap)

        def text_like_queries() -> list[np.ndarray]:
            """Shaped like CLIP text queries against image vectors: cosine 0.3 to their frame (CLIP puts
            a caption at 0.2-0.35 from its image), most of the rest one direction shared by every query
            (the gap between CLIP's text and image embeddings), the remainder noise."""
            shaped = []
            for v in sources:
                noise = rng.standard_normal(dim).astype(np.float32)
                noise -= (noise @ v) * v + (noise @ gap) * gap
                shaped.append(0.3 * v + 0.75 * gap + (1 - 0.3**2 - 0.75**2) ** 0.5 * noise / np.linalg.norm(noise))
            return [q / np.linalg.norm(q) for q in shaped]

        def results(asked):
            times, hits = [], []
            for query in asked:
                seconds, found = _timed(store.search, query, "bench", None, 10)
                times.append(seconds)
                hits.append({(h.video_id, h.timestamp) for h in found})
            return float(np.median(times)) * 1000, hits

        near, far = near_queries(), text_like_queries()
        (exact_ms, exact_near), (exact_far_ms, exact_far) = results(near), results(far)
        build, _ = _timed(store.index_embeddings)
        (ann_ms, ann_near), (ann_far_ms, ann_far) = results(near), results(far)
        recall = {name: float(np.mean([len(a & e) / len(e) for a, e in zip(ann, exact)]))
                  for name, ann, exact in (("near", ann_near, exact_near), ("far", ann_far, exact_far))}
        figures += [
            Figure(f"text-search latency, {size:,} video-like vectors, indexed, queries near a frame",
                   "exact search (ms)", exact_ms, ann_ms, "ms"),
            Figure(f"text-search latency, {size:,} video-like vectors, indexed, text-like queries",
                   "exact search (ms)", exact_far_ms, ann_far_ms, "ms"),
            Figure(f"recall@10 of the ANN search, {size:,} vectors, queries near a frame (cosine 0.9)",
                   "exact search", 1.0, recall["near"], "", ">= 0.9"),
            Figure(f"recall@10 of the ANN search, {size:,} vectors, text-like queries (cosine 0.3 to a frame)",
                   "exact search", 1.0, recall["far"], "", ">= 0.9"),
            Figure(f"index build (ANN index and video vectors) on {size:,} vectors (budget at 10^6: 300 s on 2 cores)",
                   "writing and compacting the vectors (s)", write_seconds, build, "s")]
    return figures


def figures(run: BenchRun) -> list[Figure]:
    return search_figures(run.vectors, run.work)
