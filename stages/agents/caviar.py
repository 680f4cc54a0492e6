"""CAViAR: a reasoning agent that writes one short program per step against video modules, several
strategies from different module subsets, and a critic that picks the winning trace.

Programs run in the sandbox (stages/agents/sandbox.py); the modules run here, over the store.
An exception or timeout in a step is that step's result, and the agent goes on.
"""

import json

from vidprep.stages.agents.base import (
    Agent,
    InvalidAnswer,
    Trace,
    answer_schema,
    final_answer,
    question_text,
)
from vidprep.stages.prompts import load_prompt
from vidprep.stages.agents.sandbox import Sandbox
from vidprep.stages.agents.tools import TOOLS, ToolResult, tool
from vidprep.conf.checks import ConfigError, check_range
from vidprep.stages.models.llm import LLMClient

# `finish` ends the program; every other module is a registered tool (stages/agents/tools.py or below).
FINISH = '''def finish(answer) -> None:
    """End with the final answer (see the form required below)."""'''
STRATEGIES = [
    ["retrieval_qa", "think", "finish"],
    ["get_segment", "retrieval_qa", "asr_understanding", "think", "finish"],
    ["find_when", "get_segment", "retrieval_qa", "asr_understanding", "think", "finish"],
]
PROGRAM_SCHEMA = {"type": "object", "properties": {"thought": {"type": "string"}, "code": {"type": "string"}},
                  "required": ["thought", "code"], "additionalProperties": False}
TEXT_SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"],
               "additionalProperties": False}
ANSWER_FORMS = {"mcq": "the number of the correct choice (an int)", "open": "a short string",
                "rtl": "a list [start_seconds, end_seconds]"}


class VideoModules:
    """The modules of one question over the tools, JSON in and out; any registered tool is a module."""

    def __init__(self, tools, llm: LLMClient, trace: Trace):
        self.tools, self.llm, self.trace = tools, llm, trace

    def _ask(self, kind: str, instructions: str, text: str) -> str:
        return self.trace.ask(kind, instructions, text, TEXT_SCHEMA)["answer"]

    @tool
    def retrieval_qa(self, query: str) -> ToolResult:
        """Find the frames most relevant to `query` and answer it from them. Returns the answer with
        the times of the frames used and a confidence."""
        hits = self.tools.search_frames(str(query), k=3)
        result = self.tools.visual_question(str(query), hits.timestamps)
        return ToolResult(f"frames at {', '.join(f'{t:.1f}s' for t in result.timestamps)}: {result.text} "
                          f"(confidence {result.confidence:.2f})", result.confidence, result.timestamps)

    @tool
    def get_segment(self, start: float, end: float) -> ToolResult:
        """The part of the video between `start` and `end` seconds: {"start", "end", "captions",
        "transcript"}, captions and speech as text with times."""
        captions = self.tools.segment_captions(float(start), float(end))
        speech = self.tools.transcript(float(start), float(end))
        value = {"start": float(start), "end": float(end), "captions": captions.text, "transcript": speech.text}
        return ToolResult(json.dumps(value), captions.confidence, captions.timestamps + speech.timestamps, value)

    @tool
    def find_when(self, query: str) -> ToolResult:
        """Time ranges that may show the event or action in `query`, each {"start", "end",
        "description", "confidence"}; favours recall, so check them."""
        hits = self.tools.search_frames(str(query), k=5)
        value = [{"start": max(0.0, t - 1.0), "end": min(self.tools.duration, t + 1.0), "description": line,
                  "confidence": hits.confidence} for t, line in zip(hits.timestamps, hits.text.splitlines())]
        return ToolResult(json.dumps(value), hits.confidence, hits.timestamps, value)

    @tool
    def asr_understanding(self, query: str) -> ToolResult:
        """Answer `query` from the transcript of the video's speech ("no speech" when it has none)."""
        transcript = self.tools.transcript()
        answer = self._ask("asr_understanding", "Answer the query from the transcript of a video's speech.",
                           f"Transcript:\n{transcript.text}\n\nQuery: {query}")
        return ToolResult(answer, transcript.confidence, transcript.timestamps)

    @tool
    def think(self, question: str, context: str = "") -> ToolResult:
        """Reason about `question` given `context` (text from earlier steps); returns the conclusion."""
        return ToolResult(self._ask("think", "Reason step by step about the question from the context; give the "
                                    "conclusion.", f"Context:\n{context}\n\nQuestion: {question}"), None)

    def functions(self, names: list[str]) -> dict:
        """The sandbox's modules: each returns its tool result's value to the program."""
        def module(name: str):
            method = getattr(self if hasattr(self, name) else self.tools, name)
            return lambda *args, **kwargs: _program_value(method(*args, **kwargs))

        return {name: module(name) for name in names if name != "finish"} | {"finish": None}


def _program_value(result: ToolResult):
    return result.text if result.value is None else result.value


class CAViAR(Agent):
    name = "caviar"
    # 2: module headers generated from the tool registry.
    version = 2

    def __init__(self, llm, strategies: list[list[str]] | None = None, max_steps: int = 6,
                 step_time_limit_s: float = 10.0, memory_mb: int = 256, agent_prompt: str = "caviar/agent_v1.txt",
                 critic_prompt: str = "caviar/critic_v1.txt", critic_examples: str = "caviar/critic_examples_v1.txt"):
        super().__init__(llm)
        self.strategies = strategies or STRATEGIES
        unknown = {m for s in self.strategies for m in s} - set(TOOLS) - {"finish"}
        if unknown or any("finish" not in s for s in self.strategies):
            raise ConfigError(f"method.strategies: unknown modules {sorted(unknown)} or a strategy without finish")
        check_range("method.max_steps", max_steps, 1)
        check_range("method.step_time_limit_s", step_time_limit_s, 0.1)
        check_range("method.memory_mb", memory_mb, 32)
        self.max_steps, self.step_time_limit_s, self.memory_mb = max_steps, step_time_limit_s, memory_mb
        self.agent_prompt, self.critic_prompt, self.critic_examples = agent_prompt, critic_prompt, critic_examples

    def _reason(self, question, tools, modules: list[str], trace: Trace, index: int) -> dict:
        system = load_prompt(self.agent_prompt).format(
            modules="\n\n".join(FINISH if m == "finish" else TOOLS[m].header() for m in modules),
            answer_form=ANSWER_FORMS[question.task])
        history, answer = [], None
        sandbox = Sandbox(VideoModules(tools, self.llm, trace).functions(modules), self.step_time_limit_s,
                          self.memory_mb)
        try:
            for step in range(self.max_steps):
                user = question_text(question) + "".join(
                    f"\n\nStep {i + 1} program:\n{h['code']}\nResult:\n{h['result']}" for i, h in enumerate(history))
                program = trace.ask("program", system, user, PROGRAM_SCHEMA, strategy=index, step_in_strategy=step)
                result = sandbox.run(program["code"])
                history.append({"thought": program["thought"], "code": program["code"], "result": result.for_prompt()})
                trace.record("program_result", strategy=index, code=program["code"], result=result.for_prompt(),
                             finished=result.finished, isolation=sandbox.isolation)
                if result.finished:
                    answer = result.answer
                    break
        finally:
            sandbox.close()
        if answer is None:
            forced = trace.ask("forced_finish", "Give the final answer from the trace so far.",
                               user, answer_schema(question), strategy=index)
            answer = forced.get("answer", [forced.get("start"), forced.get("end")])
        return {"strategy": index, "modules": modules, "steps": history, "answer": answer}

    def _checked(self, question, answer, duration: float):
        try:
            if question.task == "rtl":
                start, end = answer
                return final_answer(question, {"start": start, "end": end}, duration)
            return final_answer(question, {"answer": answer}, duration)
        except (TypeError, ValueError, KeyError) as error:
            raise InvalidAnswer(f"finish({answer!r}) does not fit the task: {error}") from None

    def solve(self, question, tools, trace: Trace):
        traces = [self._reason(question, tools, modules, trace, i + 1) for i, modules in enumerate(self.strategies)]
        shown = "\n\n".join(f"Strategy {t['strategy']} (modules: {', '.join(t['modules'])}):\n"
                            + "\n".join(f"program: {s['code']}\nresult: {s['result']}" for s in t["steps"])
                            + f"\nfinal answer: {json.dumps(t['answer'])}" for t in traces)
        schema = {"type": "object", "properties": {
            "critique": {"type": "string"}, "winner": {"type": "integer", "enum": list(range(1, len(traces) + 1))}},
            "required": ["critique", "winner"], "additionalProperties": False}
        system = load_prompt(self.critic_prompt).format(examples=load_prompt(self.critic_examples))
        verdict = trace.ask("critic", system, f"{question_text(question)}\n\n{shown}", schema)
        winner = traces[verdict["winner"] - 1]
        trace.record("verdict", winner=verdict["winner"], critique=verdict["critique"], answer=winner["answer"])
        return self._checked(question, winner["answer"], tools.duration)
