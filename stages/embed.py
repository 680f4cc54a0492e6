"""Embed the stored frames of a video with an image-text backend."""

import dataclasses
from collections.abc import Iterator

from vidprep.stages.base import Resources, Stage, model_field
from vidprep.store.artifacts import FRAME_EMBEDDINGS


@dataclasses.dataclass
class EmbedFrames(Stage):
    version = 1
    # One table per vector size (`frame_embeddings_384`), so backends of any size share a store.
    artifact = FRAME_EMBEDDINGS
    upstream = ("frames",)
    stateful = True
    resources = Resources(gpu_memory_gb=6)

    # A backend from stages.models.embedders (built from conf/model/).
    embedder: object = model_field()

    def model_device(self) -> str:
        return self.embedder.device

    def run(self, video: dict, frames: Iterator[list]) -> Iterator[list[dict]]:
        for batch in frames:
            vectors, descriptions = self.embedder.embed_images([f.jpeg for f in batch])
            yield [
                {"frame_index": f.frame_index, "timestamp": f.timestamp, "vector": v.tolist(),
                 "model": self.embedder.model_id, "description": d}
                for f, v, d in zip(batch, vectors, descriptions)
            ]
