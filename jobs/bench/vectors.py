"""Frame embeddings shaped like real ones, written in bulk as the scale and search groups need them."""

import numpy as np
import pyarrow as pa

from vidprep.store.artifacts import FRAME_EMBEDDINGS
from vidprep.store.keys import row_id
from vidprep.store.schema import STAGE_DONE
from vidprep.store.store import Store


SCALE_FRAMES = 60  # one video: a minute at 1 fps
SCALE_DIM = 384


def video_like_vectors(rng, frames: int, dim: int) -> np.ndarray:
    """One video's unit vectors, shaped like frame embeddings: its frames close together (cosine about
    0.9), another video's far. Uniformly random vectors have no neighbourhoods for an index to find."""
    vectors = rng.standard_normal(dim, dtype=np.float32) + 0.3 * rng.standard_normal((frames, dim), dtype=np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _embedding_rows(video_id: str, key: str, rng, dim: int = SCALE_DIM) -> pa.Table:
    """One video's frame embeddings (video-like vectors) as the embedding stage writes them."""
    index = np.arange(SCALE_FRAMES)
    artifact = FRAME_EMBEDDINGS.sized(dim)
    return pa.table({
        "row_id": [f"{video_id}/{key}/{i}" for i in index], "video_id": [video_id] * SCALE_FRAMES,
        "stage_key": [key] * SCALE_FRAMES, "frame_index": index.astype(np.int32), "timestamp": index.astype(np.float64),
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(video_like_vectors(rng, SCALE_FRAMES, dim).ravel()), dim),
        "model": ["random"] * SCALE_FRAMES, "description": [f"Looks like: frame {i}" for i in index]},
        schema=artifact.schema)


def _bulk_done(store: Store, video_ids: list[str], keys: dict[str, str]) -> None:
    """Completion markers of new videos' stages (stage -> key), appended at once."""
    store.append("stage_done", pa.Table.from_pylist([
        {"row_id": row_id(video_id, key, "done"), "video_id": video_id, "stage": stage, "stage_key": key,
         "rows": 1, "detail": "", "seconds": 0.0, "node_id": "bench", "run_id": "bench", "finished_at": None}
        for video_id in video_ids for stage, key in keys.items()], schema=STAGE_DONE))
