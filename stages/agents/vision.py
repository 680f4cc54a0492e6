"""The vision backend agents ask about frames: stored descriptions offline, or a vision-language model.

Answering never runs a precompute model: offline, a visual question is answered from what the
precompute stages stored about those frames (their "looks like" descriptions and the captions of
the segments around them), LLoVi-style; a vision-language model instead sees the JPEGs themselves.
"""

import functools

from vidprep.stages.prompts import load_prompt, prompt_hash
from vidprep.stages.models.llm import LLMClient, image_part


class StoredDescriptions:
    """What the store says of the asked frames; the confidence is that of the covering captions."""

    model_id = "stored-descriptions"

    def describe(self, frames, tools) -> tuple[str, float]:
        if not frames:
            return "no frames", 0.0
        descriptions = tools.frame_descriptions(frames)
        lines = [f"t={f.timestamp:.1f}s: {descriptions.get(f.frame_index, '(no description)')}" for f in frames]
        captions = tools.segment_captions(frames[0].timestamp, frames[-1].timestamp)
        return "\n".join(lines + ["Segment captions:", captions.text]), captions.confidence

    def ask(self, question: str, frames, tools) -> tuple[str, float]:
        text, confidence = self.describe(frames, tools)
        return f"(offline: no visual model answers questions; stored descriptions of the frames)\n{text}", confidence


class VisionLanguageModel:
    """A vision-language model behind the LLM layer; the frames go as image parts."""

    SCHEMA = {
        "type": "object",
        "properties": {"answer": {"type": "string"},
                       "confidence": {"type": "integer", "enum": [0, 1, 2, 3, 4, 5]}},
        "required": ["answer", "confidence"],
        "additionalProperties": False,
    }

    def __init__(self, llm: LLMClient, caption_prompt: str = "caption_v1.txt"):
        self.llm = llm
        self.caption_prompt = caption_prompt

    @property
    def model_id(self) -> str:
        return f"vlm({self.llm.model_id},{self.caption_prompt}@{prompt_hash(self.caption_prompt)})"

    @functools.cached_property
    def _caption_instructions(self) -> str:
        return load_prompt(self.caption_prompt)

    def _ask(self, text: str, frames) -> tuple[str, float]:
        content = [{"type": "text", "text": text}] + [image_part(f.jpeg) for f in frames]
        reply = self.llm.complete_json([{"role": "user", "content": content}], self.SCHEMA)
        return reply["answer"], reply["confidence"] / 5

    def describe(self, frames, tools) -> tuple[str, float]:
        return self._ask(self._caption_instructions, frames)

    def ask(self, question: str, frames, tools) -> tuple[str, float]:
        stamps = ", ".join(f"{f.timestamp:.1f}s" for f in frames)
        return self._ask(f"These frames are from one video at {stamps}. {question} "
                         "Reply as JSON with answer and confidence (0-5).", frames)
