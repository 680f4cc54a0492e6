"""Embed the stored frames of a video with an image-text backend."""

import dataclasses
from collections.abc import Iterator

from vidprep.stages.base import Stage, runtime
from vidprep.store.schema import embedding_table


@dataclasses.dataclass
class EmbedFrames(Stage):
    name = "frame_embeddings"
    version = 1
    row_field = "frame_index"
    upstream = ("frames",)
    stateful = True

    # A backend from stages.embedders (built from conf/model/).
    embedder: object = runtime(None)

    @property
    def table(self) -> str:
        return embedding_table(self.embedder.dim)

    def params(self) -> dict:
        return {"model": self.embedder.model_id}

    def run(self, video: dict, frames: Iterator[list]) -> Iterator[list[dict]]:
        for batch in frames:
            vectors, descriptions = self.embedder.embed_images([f.jpeg for f in batch])
            yield [
                {"frame_index": f.frame_index, "timestamp": f.timestamp, "vector": v.tolist(),
                 "model": self.embedder.model_id, "description": d}
                for f, v, d in zip(batch, vectors, descriptions)
            ]
