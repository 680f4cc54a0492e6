"""VideoAgent2: uncertainty-aware chain of thought over precomputed general context.

Phase 1 reads B1 = {segment captions C, summary S}. Phase 2 answers with a 0-5 self-confidence and
stops once it reaches `confidence_threshold`. Phase 3 creates a retrieval plan, or adjusts it after
each step. Phase 4 runs the plan's first tool call and adds its result, with the tool's own
confidence, to memory. After `max_steps` tool calls the answer is forced.
"""

from vidprep.stages.agents.base import (
    Agent,
    Trace,
    answer_schema,
    final_answer,
    question_text,
)
from vidprep.stages.prompt import load_prompt
from vidprep.conf.checks import check_range

TOOLS = ["search_frames", "segment_captions", "transcript", "visual_question"]
PLAN_SCHEMA = {
    "type": "object",
    "properties": {"steps": {"type": "array", "minItems": 1, "maxItems": 3, "items": {
        "type": "object",
        "properties": {"tool": {"type": "string", "enum": TOOLS}, "query": {"type": "string"},
                       "start": {"type": "number"}, "end": {"type": "number"}},
        "required": ["tool", "query", "start", "end"], "additionalProperties": False}}},
    "required": ["steps"], "additionalProperties": False,
}


class VideoAgent2(Agent):
    name = "videoagent2"

    def __init__(self, llm, confidence_threshold: int = 4, max_steps: int = 4,
                 answer_prompt: str = "videoagent2/answer_v1.txt", plan_prompt: str = "videoagent2/plan_v1.txt"):
        super().__init__(llm)
        check_range("method.confidence_threshold", confidence_threshold, 0, 5)
        check_range("method.max_steps", max_steps, 0)
        self.confidence_threshold, self.max_steps = confidence_threshold, max_steps
        self.answer_prompt, self.plan_prompt = answer_prompt, plan_prompt

    def _call_tool(self, tools, step: dict):
        start, end = max(0.0, step["start"]), step["end"] if step["end"] > step["start"] else tools.duration
        if step["tool"] == "search_frames":
            return tools.search(step["query"])
        if step["tool"] == "segment_captions":
            return tools.segment_captions(start, end)
        if step["tool"] == "transcript":
            return tools.transcript(start, end)
        frames = tools.frames_in_range(start, end)
        picks = [f.timestamp for f in frames[:: max(1, len(frames) // 3)][:3]]
        return tools.visual_question(step["query"], picks)

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
            plan = trace.ask("plan" if plan is None else "adjust_plan", load_prompt(self.plan_prompt),
                             context + f"\n\nCurrent answer: {reply} (confidence {reply['confidence']}/5)"
                             + previous, PLAN_SCHEMA)
            action = plan["steps"][0]
            result = self._call_tool(tools, action)
            trace.tool(action["tool"], action, result)
            memory.append(f"Step {step + 1}: {action['tool']}({action['query']!r}, {action['start']}, "
                          f"{action['end']}) returned:\n{result.for_prompt()}")
