"""The vision backend agents ask about frames: stored descriptions offline, or a vision-language model.

Answering never runs a precompute model: offline, a visual question is answered from what the
precompute stages stored about those frames (their "looks like" descriptions and the captions of
the segments around them), LLoVi-style; a vision-language model instead sees the JPEGs themselves.
"""

from vidprep.conf.checks import check_range
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

    def __init__(self, llm: LLMClient, caption_prompt: str = "caption_v1.txt", question_prompt: str = "vqa_v1.txt",
                 answer_tokens: int = 150):
        check_range("vision.answer_tokens", answer_tokens, 1)
        self.llm = llm
        self.caption_prompt, self.question_prompt, self.answer_tokens = caption_prompt, question_prompt, answer_tokens

    @property
    def model_id(self) -> str:
        prompts = ",".join(f"{p}@{prompt_hash(p)}" for p in (self.caption_prompt, self.question_prompt))
        return f"vlm({self.llm.model_id},{prompts},{self.answer_tokens})"

    def _ask(self, text: str, frames) -> tuple[str, float]:
        content = [{"type": "text", "text": text}] + [image_part(f.jpeg) for f in frames]
        reply = self.llm.complete_json([{"role": "user", "content": content}], self.SCHEMA, self.answer_tokens)
        return reply["answer"], reply["confidence"] / 5

    def describe(self, frames, tools) -> tuple[str, float]:
        return self._ask(load_prompt(self.caption_prompt), frames)

    def ask(self, question: str, frames, tools) -> tuple[str, float]:
        stamps = ", ".join(f"{f.timestamp:.1f}s" for f in frames)
        return self._ask(f"{load_prompt(self.question_prompt)}\nThe frames are from one video at {stamps}.\n"
                         f"Question: {question}\nReply as JSON with answer and confidence (0-5).", frames)
