"""TraveLER: Traverse, Locate, Evaluate and Replan over a memory bank of the video, frame by frame.

The memory bank is a dict keyed by frame timestamp (seconds), each value the list of what was
learnt from that frame: its caption, then "Question - q Answer - a" pairs. It starts from the stored
captions of `initial_captions` evenly spaced frames (0, .25, .5, .75, 1 of the video). Each
iteration: the Planner writes a plan (question, choices, memory, and why the last try fell short);
the Retriever picks the next timestamp (question without choices, plan, memory, current position)
and takes `window` frames `window_spacing` s apart around it (the first iteration takes the initial
frames instead, as the public code does); for each frame the Extractor has its caption and writes
up to `questions` questions from caption, plan and memory (no choices), which the vision backend
answers about that frame. The Evaluator says whether memory is enough and the plan was followed
(then it answers) or explains what is missing, which the next plan addresses. The Summarizer makes
every entry more concise, keeping the keys, once the memory's JSON grows past `max_memory_chars`;
at `max_iterations` the answer is forced. Defaults are the public code's NExT-QA config; the
README's TraveLER table gives each element against the paper.
"""

import json
from typing import Annotated

from vidprep.conf.checks import Range
from vidprep.agents.base import Agent, Trace, answer_schema, final_answer
from vidprep.agents.vision import VISION, VisionQuestion
from vidprep.stages.base import evenly_spaced
from vidprep.stages.prompts import load_prompt

# The public code's LMM call: its instruction, free text up to 150 tokens, sampled at temperature 1.
LMM_QUESTION = VisionQuestion("traveler/lmm_v1.txt", max_tokens=150, temperature=1.0, rated=False)

PLAN_SCHEMA = {"type": "object", "properties": {"plan": {"type": "string"}}, "required": ["plan"],
               "additionalProperties": False}
RETRIEVE_SCHEMA = {"type": "object", "properties": {"timestamp": {"type": "number"}},
                   "required": ["timestamp"], "additionalProperties": False}


def _questions_schema(count: int) -> dict:
    return {"type": "object", "properties": {"questions": {
        "type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": count}},
        "required": ["questions"], "additionalProperties": False}


def _summary_schema(memory: dict, budget_chars: int) -> dict:
    """The memory's own keys, each a list of at most as many items, all of them together within the
    budget: the Summarizer keeps the bank's format and its reply fits the budget."""
    item_chars = max(20, budget_chars // sum(len(items) for items in memory.values()))

    def entry(items: list) -> dict:
        return {"type": "array", "items": {"type": "string", "maxLength": item_chars}, "minItems": 1,
                "maxItems": len(items)}

    return {"type": "object", "properties": {key: entry(items) for key, items in memory.items()},
            "required": list(memory), "additionalProperties": False}


def _key(timestamp: float) -> str:
    return f"{timestamp:.1f}"


def _asked(question, with_choices: bool, with_reasons: bool = False) -> str:
    """The question, with its choices only where the paper gives them (Planner, Evaluator, Summarizer),
    and its reasons only where the public Causal-VidQA code does (Evaluator, final answer)."""
    lines = [f"Question: {question.question}"]
    if with_choices and question.choices:
        lines += ["Choices:"] + [f"  {i}: {choice}" for i, choice in enumerate(question.choices)]
    if with_reasons and question.reasons:
        lines += ["Reasons:"] + [f"  {i}: {reason}" for i, reason in enumerate(question.reasons)]
        lines.append("Pick the correct answer and, from the reasons, the correct reason for it.")
    return "\n".join(lines)


class TraveLER(Agent):
    """TraveLER, with the public code's NExT-QA config as defaults (docs/methods.md gives each element
    against the paper). The Retriever takes `window` frames `window_spacing` s apart around its timestamp
    (the code's view_range 2: t-2 .. t+2); the Extractor writes at most `questions` questions per frame;
    `max_iterations` rounds. `temperature` is every call's (the public config's 1; null: llm.client's).
    The Summarizer makes every memory entry more concise once the memory's JSON grows past
    `max_memory_chars` (null: what the LLM's profile allows, below). The memory starts from
    `initial_captions` evenly spaced stored frame captions."""

    name = "traveler"
    version = 3
    # The public Causal-VidQA code picks the answer and its reason in one Evaluator reply.
    answers_reasons = True

    # questions=0: the memory is made of captions only (the public EgoSchema config: no Extractor questions).
    def __init__(self, llm, window: Annotated[int, Range(1)] = 5,
                 window_spacing: Annotated[float, Range(0, above=True, unit="seconds")] = 1.0,
                 questions: Annotated[int, Range(0)] = 3, max_iterations: Annotated[int, Range(1)] = 9,
                 max_memory_chars: Annotated[int | None, Range(100)] = None,
                 initial_captions: Annotated[int, Range(1)] = 5,
                 temperature: Annotated[float | None, Range(0, 2)] = 1.0, prompts: dict | None = None,
                 vision_question: VisionQuestion = LMM_QUESTION):
        super().__init__(llm, temperature, vision_question)
        self.asks_visual_questions = questions > 0
        if max_memory_chars is None:
            # The public code never clips its memory. Here it is condensed only where it must be: past a
            # third of the context, or past what one Summarizer reply can restate.
            max_memory_chars = min(llm.context_chars(0.35),
                                   int(llm.profile.max_output_tokens * llm.profile.chars_per_token))
        self.window, self.window_spacing, self.questions = window, window_spacing, questions
        self.max_iterations, self.max_memory_chars, self.initial_captions = max_iterations, max_memory_chars, initial_captions
        self.prompts = {"plan": "traveler/plan_v2.txt", "retrieve": "traveler/retrieve_v2.txt",
                        "questions": "traveler/questions_v2.txt", "evaluate": "traveler/evaluate_v2.txt",
                        "summarize": "traveler/summarize_v2.txt", "final": "traveler/final_v2.txt",
                        **(prompts or {})}

    @property
    def _item_chars(self) -> int:
        """A memory item's share of the budget, so that one iteration's window fits in it and no prompt
        outgrows a small model's context however long the stored captions are."""
        return self.max_memory_chars // (self.window * (self.questions + 1))

    def _item(self, text: str) -> str:
        return text if len(text) <= self._item_chars else text[:self._item_chars] + " [...]"

    def _ask(self, trace: Trace, kind: str, parts: list[str], schema: dict, max_tokens: int | None = None,
             **format_fields) -> dict:
        instructions = load_prompt(self.prompts[kind]).format(**format_fields)
        return trace.ask(kind, instructions, "\n\n".join(p for p in parts if p), schema, max_tokens=max_tokens)

    def solve(self, question, tools, trace: Trace):
        initial = evenly_spaced(tools.frame_captions(), self.initial_captions)
        memory: dict[str, list[str]] = {}
        for caption in initial:
            memory.setdefault(_key(caption.timestamp), []).append(self._item(caption.caption))
        trace.record("memory", memory=json.loads(json.dumps(memory)))
        length = f"Video length: {tools.duration:.1f} s"
        current, explanation = tools.duration / 2, ""
        for iteration in range(self.max_iterations):
            information = f"Information: {json.dumps(memory, ensure_ascii=False)}"
            why = f"Why the information was not enough last time: {explanation}" if explanation else ""
            plan = self._ask(trace, "plan", [length, information, _asked(question, True), why], PLAN_SCHEMA)["plan"]
            if iteration == 0:
                frames = tools.frames_at([c.timestamp for c in initial])
            else:
                picked = self._ask(trace, "retrieve", [length, information, f"Plan: {plan}",
                                                       f"Currently viewing second: {current:.1f}",
                                                       _asked(question, False)], RETRIEVE_SCHEMA)
                current = min(max(0.0, float(picked["timestamp"])), tools.duration)
                offsets = [(k - (self.window - 1) / 2) * self.window_spacing for k in range(self.window)]
                frames = tools.frames_at([min(max(0.0, current + o), tools.duration) for o in offsets])
            trace.record("frames", iteration=iteration, timestamps=[f.timestamp for f in frames])
            # Every frame's questions are written from the memory before this window, as the public code
            # batches them.
            found = self._extract(question, frames, [length, information, f"Plan: {plan}"], memory, tools, trace)
            for key, items in found.items():
                memory.setdefault(key, []).extend(items)
            memory = dict(sorted(memory.items(), key=lambda item: float(item[0])))
            if len(json.dumps(memory, ensure_ascii=False)) > self.max_memory_chars:
                # The reply restates the whole memory, shorter: room for the budget (about 3 characters a token).
                condensed = self._ask(trace, "summarize", [f"Information: {json.dumps(memory, ensure_ascii=False)}",
                                                           _asked(question, True)],
                                      _summary_schema(memory, self.max_memory_chars),
                                      min(self.max_memory_chars // 3, self.llm.profile.max_output_tokens))
                memory = {key: [self._item(item) for item in condensed[key]] for key in memory}
            trace.record("memory", memory=json.loads(json.dumps(memory)))
            verdict = self._ask(trace, "evaluate", [length, f"Information: {json.dumps(memory, ensure_ascii=False)}",
                                                    f"Plan: {plan}", _asked(question, True, True)],
                                answer_schema(question, explanation={"type": "string"},
                                              enough_information={"type": "boolean"},
                                              plan_followed={"type": "boolean"}))
            if verdict["enough_information"] and verdict["plan_followed"]:
                trace.record("stop", reason="evaluator: enough information", iteration=iteration)
                return final_answer(question, verdict, tools.duration)
            explanation = verdict["explanation"]
            trace.record("replan", explanation=explanation, iteration=iteration)
        final = self._ask(trace, "final", [length, f"Information: {json.dumps(memory, ensure_ascii=False)}",
                                           _asked(question, True, True)],
                          answer_schema(question, explanation={"type": "string"}))
        trace.record("stop", reason="iteration limit: answer forced")
        return final_answer(question, final, tools.duration)

    def stages_read(self) -> frozenset[str]:
        return frozenset({"frames", "frame_captions", VISION})

    def _extract(self, question, frames, context: list[str], memory: dict, tools, trace: Trace) -> dict:
        """Each frame's caption (already in memory for the initial frames) and its questions' answers."""
        def extract(frame, tools, trace: Trace) -> list[str]:
            known = memory.get(_key(frame.timestamp))
            caption = known[0] if known else self._item(tools.describe_frame(frame.timestamp).text)
            if not self.questions:
                return [] if known else [caption]
            asked = self._ask(trace, "questions", context + [
                f"Currently viewing the frame at {frame.timestamp:.1f} s, which has the caption: {caption}",
                _asked(question, False)], _questions_schema(self.questions), count=self.questions)["questions"]
            answers = trace.at_once(tools, lambda text, tools, trace: tools.visual_question(
                text, [frame.timestamp]).text, asked)
            return ([] if known else [caption]) + [self._item(f"Question - {text} Answer - {answer}")
                                                   for text, answer in zip(asked, answers)]

        # The frames, and each frame's questions, are independent: asked at once, traced in order.
        found = {}
        for frame, items in zip(frames, trace.at_once(tools, extract, frames)):
            found.setdefault(_key(frame.timestamp), []).extend(items)
        return found
