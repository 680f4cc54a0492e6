"""VideoAgent2: uncertainty-aware chain of thought over precomputed general context.

Phase 1 reads B1 = {segment captions C, summary S}. Phase 2 answers, reasoning first, with a 0-5
self-confidence and stops once it reaches `confidence_threshold`. Phase 3 creates a retrieval plan,
or adjusts it after each step. Phase 4 runs the plan's next tool call and adds its result, with the
tool's own confidence, to memory. After `max_steps` tool calls the answer is forced.

The paper's ablations are switches: `tool_confidence=false` (setting 1), with `adjust_plan=false`
(2: the first plan's calls run in turn, unchanged), with `chain_of_thought=false` (3: no reasoning
before answers and plans), with `max_steps=0` (4: B1 only); `summary=false` leaves S out of B1.
"""

import json
from typing import Annotated

from vidprep.agents.base import (
    Agent,
    Trace,
    answer_schema,
    final_answer,
    question_text,
)
from vidprep.agents.tools import VIDEO_TOOLS, read_by
from vidprep.stages.prompts import load_prompt
from vidprep.conf.checks import ConfigError, Range
from vidprep.agents.vision import VisionQuestion

# The paper's retrieval tools: frame search, captions, speech and visual questions about frames.
PAPER_TOOLS = ["search_frames", "segment_captions", "transcript", "visual_question"]


REASONING = {"reasoning": {"type": "string"}}


def plan_schema(tools: list[str], reasoning: bool) -> dict:
    """A plan of 1 to 3 calls of the given tools, each with that tool's own arguments (after the
    reasoning that led to it, with chain of thought)."""
    calls = [{"type": "object", "properties": {"tool": {"enum": [name]}, "arguments": VIDEO_TOOLS[name].arguments_schema()},
              "required": ["tool", "arguments"], "additionalProperties": False} for name in tools]
    properties = {**(REASONING if reasoning else {}),
                  "steps": {"type": "array", "minItems": 1, "maxItems": 3, "items": {"anyOf": calls}}}
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


class VideoAgent2(Agent):
    """VideoAgent2 (docs/methods.md gives each element against the paper). It stops once the self-rated
    confidence (0-5) reaches `confidence_threshold`, and answers after `max_steps` tool calls (0: from B1
    alone, the paper's ablation setting 4). `tools`: those the plan may call (null: the paper's). The
    paper's ablations: setting 1 = `tool_confidence` false; 2 = also `adjust_plan` false; 3 = also
    `chain_of_thought` false. `summary` false leaves the summary S out of B1."""

    name = "videoagent2"
    # 3: reasoning before answers and plans; the ablation switches.
    version = 3

    def __init__(self, llm, confidence_threshold: Annotated[int, Range(0, 5)] = 4, max_steps: Annotated[int, Range(0)] = 4,
                 tools: list[str] | None = None,
                 tool_confidence: bool = True, adjust_plan: bool = True, chain_of_thought: bool = True,
                 summary: bool = True, answer_prompt: str = "videoagent2/answer_v2.txt",
                 plan_prompt: str = "videoagent2/plan_v2.txt", reasoning_prompt: str = "videoagent2/reasoning_v1.txt",
                 tool_confidence_prompt: str = "videoagent2/tool_confidence_v1.txt",
                 vision_question: VisionQuestion = VisionQuestion()):
        super().__init__(llm, vision_question=vision_question)
        tools = PAPER_TOOLS if tools is None else tools
        unknown = sorted(set(tools) - set(VIDEO_TOOLS))
        if unknown or not tools:
            raise ConfigError(f"method.tools: unknown tools {unknown} (known: {', '.join(sorted(VIDEO_TOOLS))})")
        self.confidence_threshold, self.max_steps, self.tools = confidence_threshold, max_steps, list(tools)
        self.asks_visual_questions = any(t in ("visual_question", "describe_frame") for t in self.tools)
        self.tool_confidence, self.adjust_plan = tool_confidence, adjust_plan
        self.chain_of_thought, self.summary = chain_of_thought, summary
        self.answer_prompt, self.plan_prompt = answer_prompt, plan_prompt
        self.reasoning_prompt, self.tool_confidence_prompt = reasoning_prompt, tool_confidence_prompt

    def stages_read(self) -> frozenset[str] | None:
        return read_by([VIDEO_TOOLS["segment_captions"], *(VIDEO_TOOLS[t] for t in self.tools)]
                       + ([VIDEO_TOOLS["summary"]] if self.summary else []))

    def _instructions(self, prompt: str, **fields) -> str:
        parts = [load_prompt(prompt).format(**fields)]
        if self.tool_confidence:
            parts.append(load_prompt(self.tool_confidence_prompt))
        if self.chain_of_thought:
            parts.append(load_prompt(self.reasoning_prompt))
        return "\n".join(part.strip() for part in parts)

    def _shown(self, result) -> str:
        return result.for_prompt() if self.tool_confidence else result.text

    def solve(self, question, tools, trace: Trace):
        memory = [f"Video length: {tools.duration:.1f} s"]
        if self.summary:
            memory.append(f"Summary: {self._shown(tools.summary())}")
        memory.append(f"Segment captions:\n{self._shown(tools.segment_captions())}")
        trace.record("memory", memory=list(memory))
        schema = answer_schema(question, **(REASONING if self.chain_of_thought else {}))
        plan, pending = None, []
        # The last pass (step == max_steps) always returns: that is the forced answer.
        for step in range(self.max_steps + 1):
            context = "\n\n".join(memory) + "\n\n" + question_text(question)
            reply = trace.ask("answer", self._instructions(self.answer_prompt), context, schema)
            confident = reply["confidence"] >= self.confidence_threshold
            # Without plan adjustment the first plan is all there is: when its calls are done, so is the search.
            exhausted = plan is not None and not self.adjust_plan and not pending
            if confident or step == self.max_steps or exhausted:
                reason = ("confident" if confident else "plan done: answer forced" if exhausted
                          else "step limit: answer forced")
                trace.record("stop", reason=reason, confidence=reply["confidence"])
                return final_answer(question, reply, tools.duration)
            if plan is None or self.adjust_plan:
                previous = f"\n\nPrevious plan: {plan['steps']}" if plan else ""
                instructions = self._instructions(self.plan_prompt,
                                                  tools="\n".join(VIDEO_TOOLS[t].line() for t in self.tools))
                plan = trace.ask("plan" if plan is None else "adjust_plan", instructions,
                                 context + f"\n\nCurrent answer: {reply} (confidence {reply['confidence']}/5)"
                                 + previous, plan_schema(self.tools, self.chain_of_thought))
                pending = list(plan["steps"])
            action = pending.pop(0)
            result = getattr(tools, action["tool"])(**VIDEO_TOOLS[action["tool"]].arguments(action["arguments"]))
            memory.append(f"Step {step + 1}: {action['tool']}({json.dumps(action['arguments'])}) returned:\n"
                          f"{self._shown(result)}")
