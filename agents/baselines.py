"""Baselines under the same interface: the papers' direct inference (the vision model answers from
evenly spaced frames, with or without the transcript), LLoVi-style (all captions and the transcript,
one answer) and a random choice (a floor; it never replaces an invalid answer of another method)."""

import random
from typing import Annotated

from vidprep.agents.base import (
    Agent,
    Trace,
    answer_schema,
    final_answer,
    question_text,
)
from vidprep.agents.tools import VIDEO_TOOLS
from vidprep.agents.vision import VISION
from vidprep.conf.checks import Range
from vidprep.stages.prompts import load_prompt


class DirectAnswer(Agent):
    """`frames` evenly spaced frames (and the transcript when `transcript`) in one prompt, answered by
    the vision backend's model (`vision=vlm`), or offline by the LLM from the frames' stored descriptions.
    120 frames: what the paper's base model takes in its 32k-token context. Offline, the descriptions
    share `max_description_chars` (null: half the LLM's context, by its profile; a vision model sees the
    JPEGs and ignores it)."""

    asks_visual_questions = True

    def __init__(self, llm, frames: Annotated[int, Range(1)] = 120, transcript: bool = False,
                 max_description_chars: Annotated[int | None, Range(100)] = None, prompt: str = "baselines/direct_v1.txt"):
        super().__init__(llm)
        if max_description_chars is None:
            max_description_chars = llm.context_chars(0.5)
        self.frames, self.transcript, self.prompt = frames, transcript, prompt
        self.max_description_chars = max_description_chars
        self.name = "direct_transcript" if transcript else "direct"

    def stages_read(self) -> frozenset[str]:
        return frozenset({"frames", VISION}) | (VIDEO_TOOLS["transcript"].reads if self.transcript else frozenset())

    def solve(self, question, tools, trace: Trace):
        frames = tools.evenly_spaced_frames(self.frames)
        speech = f"Transcript:\n{tools.transcript().text}\n\n" if self.transcript else ""
        content = ([{"type": "text", "text": f"Video length: {tools.duration:.1f} s"}] + tools.vision.look(frames, tools, self.max_description_chars)
                   + [{"type": "text", "text": speech + question_text(question)}])
        reply = trace.ask("answer", load_prompt(self.prompt), content, answer_schema(question),
                          llm=getattr(tools.vision, "llm", None))
        return final_answer(question, reply, tools.duration)


class LLoVi(Agent):
    name = "llovi"

    def __init__(self, llm, prompt: str = "baselines/llovi_v1.txt"):
        super().__init__(llm)
        self.prompt = prompt

    def stages_read(self) -> frozenset[str]:
        return VIDEO_TOOLS["segment_captions"].reads | VIDEO_TOOLS["transcript"].reads

    def solve(self, question, tools, trace: Trace):
        captions, speech = tools.segment_captions(), tools.transcript()
        context = (f"Video length: {tools.duration:.1f} s\nCaptions:\n{captions.text}\n"
                   f"Transcript:\n{speech.text}\n\n{question_text(question)}")
        reply = trace.ask("answer", load_prompt(self.prompt), context, answer_schema(question))
        return final_answer(question, reply, tools.duration)


class RandomChoice(Agent):
    name = "random"

    def __init__(self, llm=None, seed: Annotated[int, Range(0)] = 0):
        super().__init__(llm)
        self.seed = seed

    def stages_read(self) -> frozenset[str]:
        return frozenset()

    def solve(self, question, tools, trace: Trace):
        rng = random.Random(f"{self.seed}/{question.qid}")
        if question.task == "mcq":
            answer = rng.randrange(len(question.choices))
        elif question.task == "rtl":
            a, b = sorted(rng.uniform(0, tools.duration) for _ in range(2))
            answer = [a, b]
        else:
            answer = "unknown"
        trace.record("random", answer=answer, seed=self.seed)
        return answer
