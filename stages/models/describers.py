"""Frame describers: a short text description of frames, the offline stand-in for a
vision-language model (shipped models) or a real one behind the LLM layer (frames as image parts).

`describe(jpegs)` returns one (text, confidence in 0..1) for the frames together; `describe_each(groups)`
describes each group of frames as it comes, as many at once as the model's endpoint takes, in order.
`max_frames`: the most frames one description may be made from (None: any number).
"""

import functools
from collections.abc import Iterable, Iterator
from typing import Annotated

from vidprep.conf.checks import ConfigError, Range
from vidprep.stages.models.devices import check_device
from vidprep.stages.models.llm import LLMClient, image_part
from vidprep.stages.prompts import load_prompt, prompt_hash
from vidprep.stages.context import Component
from vidprep.stages.models.vision import ImageNetClassifier, TextReader

class ShippedDescriber(Component):
    """"Looks like" ImageNet labels of each frame plus the text read off it; confidence is the mean
    top-1 label probability. Consecutive frames that look alike (the same label names) are described
    once, so text is read only off frames whose labels differ from the frame before."""

    # Any number of frames per caption.
    max_frames = None
    # Labels and text, not a sentence about the scene as the papers' vision-language captioners write.
    writes_captions = False

    def __init__(self, classifier: str = "shipped", top_k: Annotated[int, Range(1)] = 3, read_text: bool = True,
                 min_text_confidence: Annotated[float, Range(0, 1)] = 0.8, device: str = "auto"):
        self.device = check_device("describer.device", device)
        self.classifier = ImageNetClassifier(classifier, device)
        self.top_k = top_k
        self.reader = TextReader(min_text_confidence, device) if read_text else None

    @property
    def model_id(self) -> str:
        ocr = f"+{self.reader.model_id}@{self.reader.min_confidence}" if self.reader else ""
        return f"labels({self.classifier.model_id},top{self.top_k}){ocr}"

    def describe(self, jpegs: list[bytes]) -> tuple[str, float]:
        tops = self.classifier.top(jpegs, self.top_k)
        described, previous = [], None
        for jpeg, top in zip(jpegs, tops):
            names = [self.classifier.short_label(i) for i, _ in top]
            if names != previous:
                described.append((jpeg, names, top))
            previous = names
        texts = self.reader.read([jpeg for jpeg, _, _ in described]) if self.reader else [[]] * len(described)
        parts = []
        for (_, names, top), lines in zip(described, texts):
            text = "Looks like: " + ", ".join(f"{name} ({p:.0%})" for name, (_, p) in zip(names, top))
            if lines:
                text += ". Text in frame: " + " / ".join(f'"{line.text}"' for line in lines)
            parts.append(text + ".")
        return " Then: ".join(parts), sum(top[0][1] for top in tops) / len(tops)

    def describe_each(self, groups: Iterable[list[bytes]]) -> Iterator[tuple[str, float]]:
        return map(self.describe, groups)


class VisionLanguageDescriber(Component):
    """A vision-language model behind the LLM layer: the frames as image parts, a JSON reply with a
    caption and a 0-5 confidence."""

    # The model runs behind the endpoint, not in the stage's worker.
    device = None
    writes_captions = True

    SCHEMA = {
        "type": "object",
        "properties": {"caption": {"type": "string"},
                       "confidence": {"type": "integer", "minimum": 0, "maximum": 5}},
        "required": ["caption", "confidence"],
        "additionalProperties": False,
    }

    def __init__(self, llm: LLMClient, prompt: str = "caption_v1.txt"):
        if llm.profile.max_images < 1:
            raise ConfigError(f"describer.llm: {llm.model} takes no images (its profile); choose a vision "
                              "model's profile (profile@llm.client.profile=...) or describer=shipped")
        self.llm = llm
        self.prompt = prompt

    @property
    def max_frames(self) -> int:
        """Frames one caption may be made from: as many as the model takes in one request."""
        return self.llm.profile.max_images

    @functools.cached_property
    def instructions(self) -> str:
        return load_prompt(self.prompt)

    @property
    def model_id(self) -> str:
        return f"vlm({self.llm.model_id},{self.prompt}@{prompt_hash(self.prompt)})"

    def describe(self, jpegs: list[bytes]) -> tuple[str, float]:
        content = [{"type": "text", "text": self.instructions}] + [image_part(j) for j in jpegs]
        reply = self.llm.complete_json([{"role": "user", "content": content}], self.SCHEMA)
        return reply["caption"], reply["confidence"] / 5

    def describe_each(self, groups: Iterable[list[bytes]]) -> Iterator[tuple[str, float]]:
        return self.llm.in_flight(self.describe, groups)
