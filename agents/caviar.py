"""CAViAR: a reasoning agent that writes one short program per step against video modules, several
strategies from different module subsets per task, and a critic that names the winning strategies.

Programs run in the sandbox (agents/sandbox.py); the modules run here, over the store.
An exception or timeout in a step is that step's result, and the agent goes on. Where a module
already yields the task's answer type (`direct`), it is also applied to the query on its own, as one
more strategy. The critic sees every strategy's full trace with in-context examples made of real
traces (`vidprep critic-examples`), names a list of winners, and the prediction is the first of them
whose answer fits the task. The README's CAViAR table gives each element against the paper.
"""

import json
from typing import Annotated

from vidprep.conf.checks import ConfigError, Range
from vidprep.agents.base import (
    TASKS,
    Agent,
    InvalidAnswer,
    Trace,
    answer_schema,
    final_answer,
    question_text,
)
from vidprep.agents.sandbox import Sandbox
from vidprep.agents.tools import VIDEO_TOOLS, ToolResult, read_by, tool, tools_of
from vidprep.agents.vision import VISION, VisionQuestion
from vidprep.stages.models.llm import LLMReplyError
from vidprep.stages.prompts import load_prompt

# `finish` ends the program; every other module is a registered tool (agents/tools.py or below).
FINISH = '''def finish(answer) -> None:
    """End with the final answer (see the form required below)."""'''
# retrieval_qa's question to the model about the frames it found: its own instruction, free text with its
# reasoning (the paper asks modules that answer to write out their reasoning for the critic; the size is ours).
RETRIEVAL_QA_QUESTION = VisionQuestion("caviar/retrieval_qa_v1.txt", max_tokens=512, rated=False)
# The shipped, dataset-agnostic critic examples (a dataset's own are built by `vidprep critic-examples`).
GENERIC_CRITIC_EXAMPLES = "caviar/critic_examples_v2.txt"
PROGRAM_SCHEMA = {"type": "object", "properties": {"thought": {"type": "string"}, "code": {"type": "string"}},
                  "required": ["thought", "code"], "additionalProperties": False}
TEXT_SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"],
               "additionalProperties": False}
ANSWER_FORMS = {"mcq": "the number of the correct choice (an int)", "open": "a short string",
                "rtl": "a list [start_seconds, end_seconds]"}
PROMPTS = {"agent": "caviar/agent_v2.txt", "think": "caviar/think_v1.txt", "asr": "caviar/asr_v1.txt",
           "asr_consolidate": "caviar/asr_consolidate_v1.txt", "direct": "caviar/direct_v1.txt",
           "direct_answer": "caviar/direct_answer_v1.txt",
           "forced_finish": "caviar/forced_finish_v1.txt", "critic": "caviar/critic_v2.txt",
           "self_evaluation": "caviar/self_evaluation_v1.txt"}


class VideoModules:
    """The modules of one question over the tools, JSON in and out; any registered tool is a module.
    `window_frames` frames go to the vision backend at once (what fits its context) and a transcript is
    read `transcript_chunk_chars` at a time (what fits the LLM's)."""

    def __init__(self, tools, trace: Trace, prompts: dict, window_frames: int, transcript_chunk_chars: int):
        self.tools, self.trace, self.prompts = tools, trace, prompts
        self.window_frames, self.transcript_chunk_chars = window_frames, transcript_chunk_chars

    def _ask(self, kind: str, text: str, **format_fields) -> str:
        instructions = load_prompt(self.prompts[kind]).format(**format_fields)
        return self.trace.ask(kind, instructions, text, TEXT_SCHEMA)["answer"]

    def _span(self, segment) -> tuple[float, float]:
        if segment is None:
            return 0.0, self.tools.duration
        if not (isinstance(segment, dict) and all(isinstance(segment.get(k), (int, float)) for k in ("start", "end"))):
            raise ValueError(f"segment must be a value returned by get_segment, got {segment!r}")
        return float(segment["start"]), float(segment["end"])

    def _windows(self, segment) -> list[list]:
        frames = self.tools.frames_in_range(*self._span(segment))
        return [frames[i:i + self.window_frames] for i in range(0, len(frames), self.window_frames)]

    @tool(reads=())
    def get_segment(self, start: float, end: float) -> ToolResult:
        """The part of the video between `start` and `end` seconds, as a segment value {"start", "end"}
        that retrieval_qa, find_when and asr_understanding take as their `segment`."""
        start, end = max(0.0, float(start)), min(self.tools.duration, float(end))
        if start > end:
            raise ValueError(f"get_segment({start}, {end}): start is after end (the video is "
                             f"{self.tools.duration:.1f} s long)")
        value = {"start": start, "end": end}
        return ToolResult(json.dumps(value), None, [], value)

    @tool(reads=("frames", VISION))
    def retrieval_qa(self, query: str, segment: dict = None) -> ToolResult:
        """Answer `query` from the frames most relevant to it, in `segment` (from get_segment) or the
        whole video: each window of frames is searched for relevant frames, then the query is answered
        from those. Returns {"answer", "frames": [seconds of the frames used], "reason"}."""
        picked, reasons = [], []
        for window in self._windows(segment):
            frames, reason = self.tools.vision.relevant(str(query), window, self.tools)
            picked += frames
            reasons.append(reason)
        if not picked:
            value = {"answer": "no frame is relevant to the query", "frames": [], "reason": " | ".join(reasons)}
            return ToolResult(json.dumps(value), 0.0, [], value)
        # The answer is asked about as many of the relevant frames as fit the model at once, evenly spread.
        step = max(1, len(picked) // self.window_frames)
        used = picked[::step][:self.window_frames]
        answer, confidence = self.tools.vision.ask(str(query), used, self.tools, self.tools.vision_question)
        value = {"answer": answer, "frames": [f.timestamp for f in used], "reason": " | ".join(reasons)}
        return ToolResult(json.dumps(value, ensure_ascii=False), confidence, value["frames"], value)

    @tool(reads=("frames", VISION))
    def find_when(self, query: str, segment: dict = None) -> ToolResult:
        """Time ranges that may show the event or action in `query`, in `segment` (from get_segment) or
        the whole video, each {"start", "end", "description"}; every window of frames is searched and
        every possible range kept (recall over precision), so check them."""
        ranges = [r for window in self._windows(segment) for r in self.tools.vision.ranges(str(query), window, self.tools)]
        return ToolResult(json.dumps(ranges, ensure_ascii=False), None, [r["start"] for r in ranges], ranges)

    @tool(reads=("transcript",))
    def asr_understanding(self, query: str, segment: dict = None) -> ToolResult:
        """Answer `query` from the transcript of the speech in `segment` (from get_segment) or the whole
        video; a long transcript is read in parts and what each part says is consolidated."""
        speech = self.tools.transcript(*self._span(segment))
        if not speech.timestamps:
            return ToolResult(speech.text, speech.confidence)
        size, chunks = self.transcript_chunk_chars, [""]
        for line in speech.text.splitlines():
            # A line longer than a part is cut into parts of its own rather than lost.
            for piece in [line[i:i + size] for i in range(0, len(line), size)]:
                if chunks[-1] and len(chunks[-1]) + len(piece) + 1 > size:
                    chunks.append("")
                chunks[-1] += piece + "\n"
        found = [self._ask("asr", f"Transcript part {i} of {len(chunks)}:\n{chunk}\nQuery: {query}")
                 for i, chunk in enumerate(chunks, 1)]
        if len(found) > 1:
            parts = "\n".join(f"Part {i}: {text}" for i, text in enumerate(found, 1))
            found = [self._ask("asr_consolidate", f"{parts}\n\nQuery: {query}")]
        return ToolResult(found[0], speech.confidence, speech.timestamps)

    @tool(reads=())
    def think(self, question: str, context: str = "") -> ToolResult:
        """Reason about `question` given `context` (text from earlier steps); returns the conclusion."""
        return ToolResult(self._ask("think", f"Context:\n{context}\n\nQuestion: {question}"), None)

    def functions(self, names: list[str]) -> dict:
        """The sandbox's modules: each returns its tool result's value to the program."""
        def module(name: str):
            method = getattr(self if hasattr(self, name) else self.tools, name)
            return lambda *args, **kwargs: _program_value(method(*args, **kwargs))

        return {name: module(name) for name in names if name != "finish"} | {"finish": None}


def all_modules() -> dict:
    """CAViAR's modules: the video tools and its own."""
    return VIDEO_TOOLS | tools_of(VideoModules)


def _program_value(result: ToolResult):
    return result.text if result.value is None else result.value


def shown_trace(strategy: dict) -> str:
    """One strategy's full trace as the critic reads it (and as `vidprep critic-examples` writes it)."""
    lines = [f"Strategy {strategy['strategy']} (modules: {', '.join(strategy['modules'])}):"]
    for number, step in enumerate(strategy["steps"], 1):
        lines += [f"Step {number} thought: {step['thought']}", f"program:\n{step['code']}", f"result:\n{step['result']}"]
    lines.append(f"Final answer: {json.dumps(strategy['answer'])}")
    return "\n".join(lines)


class CAViAR(Agent):
    """CAViAR (docs/methods.md gives each element against the paper). `strategies`: per task, the module
    subsets of the reasoning strategies (one trace each; the critic picks among them). `direct`: per task,
    the module that already yields its answer type, applied to the query as strategy 1. `max_steps` per
    strategy; at that step without finish, `forced_finish` asks for the answer from the trace. Without
    `critic`, the first strategy whose answer fits the task is the prediction. `window_frames`: frames the
    vision backend sees at once (the paper: Gemini 1.5 Flash's 32k tokens, about 120 frames; no more than
    its model takes in one request). `transcript_chunk_chars` per asr_understanding call (null: half the
    LLM's context, by its profile). `step_time_limit_s` and `memory_mb` bound each
    generated program's sandbox. `name` tells the ablations' runs apart."""

    name = "caviar"
    asks_visual_questions = True
    # 3: per-task strategies with the direct one, windowed modules, segment values, critic winners list.
    version = 3

    def __init__(self, llm, strategies: dict | None = None, direct: dict | None = None,
                 max_steps: Annotated[int, Range(1)] = 6, forced_finish: bool = True, critic: bool = True,
                 window_frames: Annotated[int, Range(1)] = 120,
                 transcript_chunk_chars: Annotated[int | None, Range(10)] = None,
                 step_time_limit_s: Annotated[float, Range(0.1, unit="seconds")] = 10.0,
                 memory_mb: Annotated[int, Range(32, unit="MB")] = 256,
                 prompts: dict | None = None, critic_examples: str = GENERIC_CRITIC_EXAMPLES,
                 temperature: Annotated[float | None, Range(0, 2)] = None, name: str = "caviar",
                 vision_question: VisionQuestion = RETRIEVAL_QA_QUESTION, self_evaluation: bool = False):
        super().__init__(llm, temperature, vision_question)
        # The ablations' configs name themselves, so their runs are told apart in evaluate and the report.
        self.name = name
        self.strategies = {task: [list(s) for s in (strategies or {}).get(task) or []] for task in TASKS}
        self.direct = {task: (direct or {}).get(task) for task in TASKS}
        for task in TASKS:
            unknown = {m for s in self.strategies[task] for m in s} - set(all_modules()) - {"finish"}
            # With self-evaluation, the self-evaluation module decides when the answer is final, not finish.
            if unknown or any(("finish" in s) == self_evaluation for s in self.strategies[task]):
                raise ConfigError(f"method.strategies.{task}: unknown modules {sorted(unknown)}, or a strategy "
                                  f"{'with' if self_evaluation else 'without'} finish")
            if self.direct[task] not in (None, "retrieval_qa", "find_when", "asr_understanding"):
                raise ConfigError(f"method.direct.{task}: {self.direct[task]!r} is not a module that answers a query")
            if not (self.strategies[task] or self.direct[task]):
                raise ConfigError(f"method.strategies.{task} is empty and method.direct.{task} is null: "
                                  f"no strategy answers {task} questions")
        if transcript_chunk_chars is None:
            transcript_chunk_chars = llm.context_chars(0.5)
        self.max_steps, self.forced_finish, self.critic = max_steps, forced_finish, critic
        self.window_frames, self.transcript_chunk_chars = window_frames, transcript_chunk_chars
        self.step_time_limit_s, self.memory_mb = step_time_limit_s, memory_mb
        self.prompts = {**PROMPTS, **(prompts or {})}
        self.critic_examples = critic_examples
        self.self_evaluation = self_evaluation

    def stages_read(self) -> frozenset[str] | None:
        used = {m for task in TASKS for s in self.strategies[task] for m in s} | set(filter(None, self.direct.values()))
        return read_by(all_modules()[m] for m in used - {"finish"})

    def unlike_its_paper(self) -> list[str]:
        if self.critic and self.critic_examples == GENERIC_CRITIC_EXAMPLES:
            return ["the critic's in-context examples are the generic hand-written ones, not 4 built from this "
                    "dataset's traces as in the paper (`vidprep critic-examples`, then dataset.critic_examples)"]
        return []

    def _modules(self, tools, trace: Trace) -> VideoModules:
        window = min(self.window_frames, tools.vision.max_frames or self.window_frames)
        return VideoModules(tools, trace, self.prompts, window, self.transcript_chunk_chars)

    def _reason(self, question, tools, modules: list[str], trace: Trace, index: int) -> dict:
        system = load_prompt(self.prompts["agent"]).format(
            modules="\n\n".join(FINISH if m == "finish" else all_modules()[m].header() for m in modules),
            answer_form=ANSWER_FORMS[question.task], max_steps=self.max_steps)
        history, answer = [], None
        sandbox = Sandbox(self._modules(tools, trace).functions(modules), self.step_time_limit_s, self.memory_mb)
        user = question_text(question)
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
                if self.self_evaluation:
                    answer = self._self_evaluated(question, trace, user + f"\n\nStep {step + 1} program:\n"
                                                  f"{program['code']}\nResult:\n{result.for_prompt()}", index)
                    if answer is not None:
                        break
        finally:
            sandbox.close()
        if answer is None and self.forced_finish:
            forced = trace.ask("forced_finish", load_prompt(self.prompts["forced_finish"]), user,
                               answer_schema(question), strategy=index)
            answer = forced.get("answer", [forced.get("start"), forced.get("end")])
        return {"strategy": index, "modules": modules, "steps": history, "answer": answer}

    def _self_evaluated(self, question, trace: Trace, steps: str, index: int):
        """Table 5's self-evaluation module (after Wang et al.): the answer the steps support, final only
        when the model rates its confidence 3 of 3 (None: gather more)."""
        schema = answer_schema(question)
        schema["properties"]["confidence"] = {"type": "integer", "enum": [1, 2, 3]}
        judged = trace.ask("self_evaluation", load_prompt(self.prompts["self_evaluation"]), steps, schema,
                           strategy=index)
        if judged["confidence"] < 3:
            return None
        return judged.get("answer", [judged.get("start"), judged.get("end")])

    def _direct(self, question, tools, module: str, trace: Trace, index: int) -> dict:
        """The module applied to the query itself, told to write out its reasoning; its result is put in
        the task's answer form."""
        query = f"{question_text(question)}\n{load_prompt(self.prompts['direct'])}"
        result = getattr(self._modules(tools, trace), module)(query)
        reply = trace.ask("direct_answer", load_prompt(self.prompts["direct_answer"]),
                          f"{question_text(question)}\n\nResult of {module}:\n{result.for_prompt()}",
                          answer_schema(question), strategy=index)
        step = {"thought": f"apply {module} to the query directly", "code": f"{module}(query)",
                "result": result.for_prompt()}
        return {"strategy": index, "modules": [module], "steps": [step],
                "answer": reply.get("answer", [reply.get("start"), reply.get("end")])}

    def _checked(self, question, answer, duration: float):
        try:
            if question.task == "rtl":
                start, end = answer
                return final_answer(question, {"start": start, "end": end}, duration)
            return final_answer(question, {"answer": answer}, duration)
        except (TypeError, ValueError, KeyError) as error:
            raise InvalidAnswer(f"finish({answer!r}) does not fit the task: {error}") from None

    def solve(self, question, tools, trace: Trace):
        planned = ([(self._direct, self.direct[question.task])] if self.direct[question.task] else []) + [
            (self._reason, modules) for modules in self.strategies[question.task]]

        def run(numbered: tuple, tools, trace: Trace) -> dict | None:
            index, (strategy, modules) = numbered
            try:
                return strategy(question, tools, modules, trace, index)
            except LLMReplyError as error:
                # One strategy's malformed reply drops that strategy before the critic; the others go on.
                trace.record("dropped", strategy=index, modules=modules, reason=str(error))
                return None

        # The strategies are independent: they run at once, their traces in strategy order.
        runs = [r for r in trace.at_once(tools, run, enumerate(planned, 1)) if r is not None]
        if not runs:
            raise InvalidAnswer("every strategy's reply was malformed")
        for run in runs:
            trace.record("strategy", strategy=run["strategy"], modules=run["modules"], shown=shown_trace(run),
                         answer=run["answer"])
        order = [r["strategy"] for r in runs]
        by_number = {r["strategy"]: r for r in runs}
        if self.critic and len(runs) > 1:
            schema = {"type": "object", "properties": {
                "critique": {"type": "string"},
                "winners": {"type": "array", "items": {"type": "integer", "enum": order}, "minItems": 1}},
                "required": ["critique", "winners"], "additionalProperties": False}
            system = load_prompt(self.prompts["critic"]).format(examples=load_prompt(self.critic_examples))
            shown = "\n\n".join(shown_trace(r) for r in runs)
            verdict = trace.ask("critic", system, f"{question_text(question)}\n\n{shown}", schema)
            winners = list(dict.fromkeys(verdict["winners"]))
            # The critic's list first; should all its answers be invalid, the other strategies in turn.
            order = winners + [n for n in order if n not in winners]
            trace.record("verdict", winners=winners, critique=verdict["critique"])
        errors = []
        for number in order:
            try:
                answer = self._checked(question, by_number[number]["answer"], tools.duration)
            except InvalidAnswer as error:
                errors.append(f"strategy {number}: {error}")
                trace.record("fallback", strategy=number, reason=str(error))
                continue
            trace.record("chosen", strategy=number, answer=answer)
            return answer
        raise InvalidAnswer("no strategy gave an answer that fits the task: " + "; ".join(errors))
