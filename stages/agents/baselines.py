"""Baselines under the same interface: LLoVi-style (all captions and the transcript, one answer)
and a random choice (a floor; it never replaces an invalid answer of another method)."""

import random

from vidprep.stages.agents.base import (
    Agent,
    Trace,
    answer_schema,
    final_answer,
    question_text,
)
from vidprep.stages.prompts import load_prompt


class LLoVi(Agent):
    name = "llovi"

    def __init__(self, llm, prompt: str = "baselines/llovi_v1.txt"):
        super().__init__(llm)
        self.prompt = prompt

    def solve(self, question, tools, trace: Trace):
        captions, speech = tools.segment_captions(), tools.transcript()
        context = (f"Video length: {tools.duration:.1f} s\nCaptions:\n{captions.text}\n"
                   f"Transcript:\n{speech.text}\n\n{question_text(question)}")
        reply = trace.ask("answer", load_prompt(self.prompt), context, answer_schema(question))
        return final_answer(question, reply, tools.duration)


class RandomChoice(Agent):
    name = "random"

    def __init__(self, llm=None, seed: int = 0):
        super().__init__(llm)
        self.seed = seed

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
