"""The vision backend agents ask about frames: stored descriptions offline, or a vision-language model.

Each call is about a list of frames: `look` gives them as message parts (what a model is shown; a
text backend keeps to `max_chars`),
`describe` them, `ask` a question about them, say which are `relevant` to a query, and find the time
`ranges` that may show an event (CAViAR's windowed modules pass one window of frames at a time). A
backend with a model (`llm`) answers the direct baseline itself.

Answering never runs a precompute model: offline, the backend answers from what the precompute stages
stored about those frames (their "looks like" descriptions, the captions of the segments around them
and their embeddings), LLoVi-style; a vision-language model instead sees the JPEGs themselves.
"""

import dataclasses
from typing import Annotated

from vidprep.conf.checks import ConfigError, Range
from vidprep.stages.context import Component
from vidprep.stages.models.llm import LLMClient, image_part
from vidprep.stages.prompts import load_prompt, prompt_hash


# In what a method reads: the vision backend's reads (`reads` of StoredDescriptions or VisionLanguageModel).
VISION = "vision"
# In what a method reads: text queries embedded in the frame embeddings' space (the answer actor then loads
# the text model before its first question, not during it).
TEXT_QUERIES = "text queries"


def stages_read(method_reads: frozenset[str] | None, vision) -> frozenset[str] | None:
    """The stages a method with `method_reads` (its `stages_read()`) reads, with `vision`'s in place of VISION."""
    if method_reads is None:
        return None
    return (method_reads - {VISION}) | (vision.reads if VISION in method_reads else frozenset())


@dataclasses.dataclass(frozen=True)
class VisionQuestion:
    """How a method asks a vision model about frames, as its paper or public code does: the instruction,
    the reply's token cap, its sampling temperature (None: the vision client's) and whether the reply is
    rated (JSON with a 0-5 confidence) or free text, used as it is, also where it was cut at the cap."""

    prompt: str = "videoagent2/visual_question_v1.txt"
    max_tokens: Annotated[int, Range(1, unit="tokens")] = 300
    temperature: Annotated[float | None, Range(0, 2)] = None
    rated: bool = True


def _spacing(frames) -> float:
    """The time between neighbouring frames of a window (1 s for a single frame)."""
    gaps = sorted(b.timestamp - a.timestamp for a, b in zip(frames, frames[1:]))
    return gaps[len(gaps) // 2] if gaps else 1.0


class StoredDescriptions(Component):
    """What the store says of the asked frames; the confidence is that of the covering captions.
    Relevance is the stored embeddings' similarity to the query: the frames within `relevance_margin`
    of a window's best are relevant, and runs of them are the ranges that may show an event."""

    model_id = "stored-descriptions"
    # No model looks at the frames: a method that asks visual questions is told so, loudly.
    sees_frames = False
    # The precompute stages it answers from (frames' "looks like" labels and embeddings, segment captions).
    reads = frozenset({"frames", "frame_embeddings", "segment_captions"})
    # Frames one call may be about (None: any number; text is cut to the caller's budget instead).
    max_frames = None

    def __init__(self, relevance_margin: Annotated[float, Range(0, 1)] = 0.05):
        self.relevance_margin = relevance_margin

    def _lines(self, frames, tools, share: int | None = None) -> list[str]:
        descriptions = tools.frame_descriptions(frames)
        return [f"t={f.timestamp:.1f}s: {descriptions.get(f.frame_index, '(no description)')[:share]}" for f in frames]

    def describe(self, frames, tools) -> tuple[str, float]:
        if not frames:
            return "no frames", 0.0
        captions = tools.segment_captions(frames[0].timestamp, frames[-1].timestamp)
        return "\n".join(self._lines(frames, tools) + ["Segment captions:", captions.text]), captions.confidence

    def look(self, frames, tools, max_chars: int | None = None) -> list[dict]:
        share = max_chars // len(frames) if max_chars and frames else None
        lines = self._lines(frames, tools, share)
        return [{"type": "text", "text": "Stored descriptions of the frames:\n" + "\n".join(lines)}]

    def ask(self, question: str, frames, tools, how: VisionQuestion) -> tuple[str, float]:
        text, confidence = self.describe(frames, tools)
        return f"(offline: no visual model answers questions; stored descriptions of the frames)\n{text}", confidence

    def relevant(self, query: str, frames, tools) -> tuple[list, str]:
        scores = tools.similarities(query, frames)
        best = max(scores.values(), default=0.0)
        picked = [f for f in frames if scores.get(f.frame_index, -1.0) >= best - self.relevance_margin]
        return picked, f"stored embeddings: best similarity to the query {best:.2f}, frames within " \
                       f"{self.relevance_margin} of it kept"

    def ranges(self, query: str, frames, tools) -> list[dict]:
        picked = {f.frame_index for f in self.relevant(query, frames, tools)[0]}
        descriptions = tools.frame_descriptions([f for f in frames if f.frame_index in picked])
        runs, run = [], []
        for frame in frames:
            if frame.frame_index in picked:
                run.append(frame)
            elif run:
                runs, run = runs + [run], []
        runs += [run] if run else []
        half = _spacing(frames) / 2
        return [{"start": round(max(0.0, r[0].timestamp - half), 3),
                 "end": round(min(tools.duration, r[-1].timestamp + half), 3),
                 "description": "; ".join(dict.fromkeys(descriptions.get(f.frame_index, "") for f in r))}
                for r in runs]


class VisionLanguageModel(Component):
    """A vision-language model behind the LLM layer; the frames go as image parts, each after its time.
    A question about frames is asked as the asking method says (its `VisionQuestion`); `relevant_prompt`
    and `ranges_prompt` ask which frames of a window are relevant to a query and which ranges may show
    an event (CAViAR's modules)."""

    sees_frames = True
    # It sees the stored JPEGs.
    reads = frozenset({"frames"})

    CONFIDENCE = {"type": "integer", "enum": [0, 1, 2, 3, 4, 5]}
    CAPTION = {"type": "object", "properties": {"caption": {"type": "string"}, "confidence": CONFIDENCE},
               "required": ["caption", "confidence"], "additionalProperties": False}
    ANSWER = {"type": "object", "properties": {"answer": {"type": "string"}, "confidence": CONFIDENCE},
              "required": ["answer", "confidence"], "additionalProperties": False}
    RELEVANT = {"type": "object", "properties": {"frames": {"type": "array", "items": {"type": "integer"}},
                                                 "reason": {"type": "string"}},
                "required": ["frames", "reason"], "additionalProperties": False}
    RANGES = {"type": "object", "properties": {"ranges": {"type": "array", "items": {
        "type": "object", "properties": {"start": {"type": "number"}, "end": {"type": "number"},
                                         "description": {"type": "string"}},
        "required": ["start", "end", "description"], "additionalProperties": False}}},
        "required": ["ranges"], "additionalProperties": False}

    def __init__(self, llm: LLMClient, caption_prompt: str = "caption_v1.txt",
                 relevant_prompt: str = "vision_relevant_v1.txt", ranges_prompt: str = "vision_ranges_v1.txt"):
        if llm.profile.max_images < 1:
            raise ConfigError(f"vision.llm: {llm.model} takes no images (its profile); choose a vision "
                              "model's profile (profile@vision.llm.profile=...) or vision=stored")
        self.llm = llm
        self.prompts = {"caption": caption_prompt, "relevant": relevant_prompt, "ranges": ranges_prompt}

    @property
    def max_frames(self) -> int:
        return self.llm.profile.max_images

    @property
    def model_id(self) -> str:
        prompts = ",".join(f"{p}@{prompt_hash(p)}" for p in self.prompts.values())
        return f"vlm({self.llm.model_id},{prompts})"

    def look(self, frames, tools, max_chars: int | None = None) -> list[dict]:
        parts = []
        for number, frame in enumerate(frames, 1):
            parts += [{"type": "text", "text": f"Frame {number} at {frame.timestamp:.1f}s:"}, image_part(frame.jpeg)]
        return parts

    def _message(self, text: str, frames) -> list[dict]:
        return [{"role": "user", "content": [{"type": "text", "text": text}] + self.look(frames, None)}]

    def _ask(self, text: str, frames, schema: dict, max_tokens: int | None = None,
             temperature: float | None = None) -> dict:
        return self.llm.complete_json(self._message(text, frames), schema, max_tokens, temperature)

    def describe(self, frames, tools) -> tuple[str, float]:
        reply = self._ask(load_prompt(self.prompts["caption"]), frames, self.CAPTION)
        return reply["caption"], reply["confidence"] / 5

    def ask(self, question: str, frames, tools, how: VisionQuestion) -> tuple[str, float | None]:
        text = f"{load_prompt(how.prompt)}\nQuestion: {question}"
        if how.rated:
            reply = self._ask(text, frames, self.ANSWER, how.max_tokens, how.temperature)
            return reply["answer"], reply["confidence"] / 5
        return self.llm.complete(self._message(text, frames), max_tokens=how.max_tokens,
                                 temperature=how.temperature), None

    def relevant(self, query: str, frames, tools) -> tuple[list, str]:
        reply = self._ask(load_prompt(self.prompts["relevant"]).format(query=query), frames, self.RELEVANT)
        numbers = dict.fromkeys(n for n in reply["frames"] if 1 <= n <= len(frames))
        return [frames[n - 1] for n in sorted(numbers)], reply["reason"]

    def ranges(self, query: str, frames, tools) -> list[dict]:
        # A list of every range that may show the event: cut at a cap it would be no JSON at all, so it
        # may be as long as the model writes (within a quarter of its context).
        profile = self.llm.profile
        reply = self._ask(load_prompt(self.prompts["ranges"]).format(query=query), frames, self.RANGES,
                          min(profile.max_output_tokens, profile.context_tokens // 4))
        low, high = frames[0].timestamp, frames[-1].timestamp + _spacing(frames)
        found = []
        for r in reply["ranges"]:
            start, end = max(low, float(r["start"])), min(high, tools.duration, float(r["end"]))
            if start <= end:
                found.append({"start": start, "end": end, "description": r["description"]})
        return found
