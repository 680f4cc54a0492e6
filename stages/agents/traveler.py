"""TraveLER: Traverse, Locate, Evaluate and Replan over a memory bank of the video.

The memory bank is a dict keyed by timestamp, initialised with `initial_captions` of the stored
frame captions, evenly spaced (0, .25, .5, .75, 1 of the video by default). Each iteration: the Planner writes a
plan; the Retriever picks the next timestamp and takes a window of frames around it; the Extractor
captions them and writes `questions` questions that the vision backend answers, all appended to
memory; the Evaluator says whether memory is enough and the plan was followed (then it answers) or
explains what is missing, which the next plan addresses. A Summarizer condenses memory once it
grows past `max_memory_chars`; at `max_iterations` the answer is forced. Each memory item is clipped
to its share of `max_memory_chars`, so no prompt outgrows a small model's context however long the
stored captions are.
"""

import json

from vidprep.stages.agents.base import (
    Agent,
    Trace,
    answer_schema,
    final_answer,
    question_text,
)
from vidprep.stages.prompts import load_prompt
from vidprep.conf.checks import check_range
from vidprep.stages.base import evenly_spaced

PLAN_SCHEMA = {"type": "object", "properties": {"plan": {"type": "string"}}, "required": ["plan"],
               "additionalProperties": False}
RETRIEVE_SCHEMA = {"type": "object", "properties": {"timestamp": {"type": "number"}},
                   "required": ["timestamp"], "additionalProperties": False}
SUMMARY_SCHEMA = {"type": "object", "properties": {"memory": {"type": "string"}}, "required": ["memory"],
                  "additionalProperties": False}


def _questions_schema(count: int) -> dict:
    return {"type": "object", "properties": {"questions": {
        "type": "array", "items": {"type": "string"}, "minItems": count, "maxItems": count}},
        "required": ["questions"], "additionalProperties": False}


class TraveLER(Agent):
    name = "traveler"
    version = 2

    def __init__(self, llm, window: int = 5, questions: int = 3, max_iterations: int = 5,
                 max_memory_chars: int = 4000, initial_captions: int = 5, prompts: dict | None = None):
        super().__init__(llm)
        for setting, value in (("window", window), ("questions", questions), ("max_iterations", max_iterations),
                               ("initial_captions", initial_captions)):
            check_range(f"method.{setting}", value, 1)
        check_range("method.max_memory_chars", max_memory_chars, 100)
        self.initial_captions = initial_captions
        self.window, self.questions, self.max_iterations = window, questions, max_iterations
        self.max_memory_chars = max_memory_chars
        self.prompts = {"plan": "traveler/plan_v1.txt", "retrieve": "traveler/retrieve_v1.txt",
                        "questions": "traveler/questions_v1.txt", "evaluate": "traveler/evaluate_v1.txt",
                        "summarize": "traveler/summarize_v1.txt", "final": "traveler/final_v1.txt",
                        **(prompts or {})}

    def _item(self, text: str) -> str:
        """A memory item within its share of the budget: an iteration adds a caption and one answer per question."""
        limit = self.max_memory_chars // (self.questions + 1)
        return text if len(text) <= limit else text[:limit] + " [...]"

    def _context(self, question, memory: dict, duration: float) -> str:
        return (f"Video length: {duration:.1f} s\nMemory: {json.dumps(memory, ensure_ascii=False)}\n\n"
                + question_text(question))

    def solve(self, question, tools, trace: Trace):
        memory = {f"{c.timestamp:.1f}": [self._item(c.caption)]
                  for c in evenly_spaced(tools.frame_captions(), self.initial_captions)}
        trace.record("memory", memory=dict(memory))
        explanation = ""
        evaluate_schema = answer_schema(question, enough_information={"type": "boolean"},
                                        plan_followed={"type": "boolean"}, explanation={"type": "string"})
        for iteration in range(self.max_iterations):
            context = self._context(question, memory, tools.duration)
            missing = f"\n\nWhy the memory was not enough last time: {explanation}" if explanation else ""
            plan = trace.ask("plan", load_prompt(self.prompts["plan"]), context + missing, PLAN_SCHEMA)["plan"]
            pick = trace.ask("retrieve", load_prompt(self.prompts["retrieve"]), f"{context}\n\nPlan: {plan}",
                             RETRIEVE_SCHEMA)
            t = min(max(0.0, float(pick["timestamp"])), tools.duration)
            caption = tools.describe_window(t, self.window)
            entry = [self._item(caption.text)]
            asked = trace.ask("questions", load_prompt(self.prompts["questions"]).format(count=self.questions),
                              f"{question_text(question)}\n\nPlan: {plan}\n\nCaption: {entry[0]}",
                              _questions_schema(self.questions))["questions"]
            for text in asked:
                result = tools.visual_question(text, caption.timestamps)
                entry.append(self._item(f"Q: {text} A: {result.text} (confidence {result.confidence:.2f})"))
            memory.setdefault(f"{t:.1f}", []).extend(entry)
            if len(json.dumps(memory)) > self.max_memory_chars:
                condensed = trace.ask("summarize", load_prompt(self.prompts["summarize"]),
                                      self._context(question, memory, tools.duration), SUMMARY_SCHEMA)
                memory = {"summary of earlier memory": [condensed["memory"]], f"{t:.1f}": entry}
            verdict = trace.ask("evaluate", load_prompt(self.prompts["evaluate"]),
                                f"{self._context(question, memory, tools.duration)}\n\nPlan: {plan}", evaluate_schema)
            if verdict["enough_information"] and verdict["plan_followed"]:
                trace.record("stop", reason="evaluator: enough information", iteration=iteration)
                return final_answer(question, verdict, tools.duration)
            explanation = verdict["explanation"]
            trace.record("replan", explanation=explanation, iteration=iteration)
        final = trace.ask("final", load_prompt(self.prompts["final"]),
                          self._context(question, memory, tools.duration), answer_schema(question))
        trace.record("stop", reason="iteration limit: answer forced")
        return final_answer(question, final, tools.duration)
