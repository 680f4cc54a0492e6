"""VideoAgent2: uncertainty-aware chain of thought over precomputed general context.

Phase 1 reads B1 = {segment captions C, summary S}. Phase 2 answers with a 0-5 self-confidence and
stops once it reaches `confidence_threshold`. Phase 3 creates a retrieval plan, or adjusts it after
each step. Phase 4 runs the plan's first tool call and adds its result, with the tool's own
confidence, to memory. After `max_steps` tool calls the answer is forced.
"""

import json

from vidprep.stages.agents.base import (
    Agent,
    Trace,
    answer_schema,
    final_answer,
    question_text,
)
from vidprep.stages.agents.tools import TOOLS
from vidprep.stages.prompts import load_prompt
from vidprep.conf.checks import ConfigError, check_range

# The paper's retrieval tools: frame search, captions, speech and visual questions about frames.
PAPER_TOOLS = ["search_frames", "segment_captions", "transcript", "visual_question"]


def plan_schema(tools: list[str]) -> dict:
    """A plan of 1 to 3 calls of the given tools, each with that tool's own arguments."""
    calls = [{"type": "object", "properties": {"tool": {"enum": [name]}, "arguments": TOOLS[name].arguments_schema()},
              "required": ["tool", "arguments"], "additionalProperties": False} for name in tools]
    return {"type": "object", "properties": {"steps": {"type": "array", "minItems": 1, "maxItems": 3,
                                                       "items": {"anyOf": calls}}},
            "required": ["steps"], "additionalProperties": False}


class VideoAgent2(Agent):
    name = "videoagent2"
    # 2: the plan's calls carry each registered tool's own arguments.
    version = 2

    def __init__(self, llm, confidence_threshold: int = 4, max_steps: int = 4,
                 tools: list[str] | None = None,
                 answer_prompt: str = "videoagent2/answer_v1.txt", plan_prompt: str = "videoagent2/plan_v2.txt"):
        super().__init__(llm)
        check_range("method.confidence_threshold", confidence_threshold, 0, 5)
        check_range("method.max_steps", max_steps, 0)
        tools = PAPER_TOOLS if tools is None else tools
        unknown = sorted(set(tools) - set(TOOLS))
        if unknown or not tools:
            raise ConfigError(f"method.tools: unknown tools {unknown} (known: {', '.join(sorted(TOOLS))})")
        self.confidence_threshold, self.max_steps, self.tools = confidence_threshold, max_steps, list(tools)
        self.answer_prompt, self.plan_prompt = answer_prompt, plan_prompt

    def solve(self, question, tools, trace: Trace):
        summary, captions = tools.summary(), tools.segment_captions()
        memory = [f"Video length: {tools.duration:.1f} s", f"Summary: {summary.for_prompt()}",
                  f"Segment captions:\n{captions.for_prompt()}"]
        trace.record("memory", memory=list(memory))
        schema, plan = answer_schema(question), None
        # The last pass (step == max_steps) always returns: that is the forced answer.
        for step in range(self.max_steps + 1):
            context = "\n\n".join(memory) + "\n\n" + question_text(question)
            reply = trace.ask("answer", load_prompt(self.answer_prompt), context, schema)
            confident = reply["confidence"] >= self.confidence_threshold
            if confident or step == self.max_steps:
                trace.record("stop", reason="confident" if confident else "step limit: answer forced",
                             confidence=reply["confidence"])
                return final_answer(question, reply, tools.duration)
            previous = f"\n\nPrevious plan: {plan['steps']}" if plan else ""
            instructions = load_prompt(self.plan_prompt).format(tools="\n".join(TOOLS[t].line() for t in self.tools))
            plan = trace.ask("plan" if plan is None else "adjust_plan", instructions,
                             context + f"\n\nCurrent answer: {reply} (confidence {reply['confidence']}/5)"
                             + previous, plan_schema(self.tools))
            action = plan["steps"][0]
            result = getattr(tools, action["tool"])(**action["arguments"])
            memory.append(f"Step {step + 1}: {action['tool']}({json.dumps(action['arguments'])}) returned:\n"
                          f"{result.for_prompt()}")
