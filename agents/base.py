"""What every method shares: the question and its text, the answer's JSON schema per task, the trace
of every step (prompt, reply, tool call, result, confidence, tokens, time) and the prediction."""

import copy
from typing import Annotated
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field

from vidprep.conf.checks import Range
from vidprep.stages.context import Component, Usage, counted
from vidprep.stages.models.llm import LLMClient, LLMError
from vidprep.agents.vision import VisionQuestion

# The stages whose artifacts are captions (the summary is written from them).
CAPTION_STAGES = frozenset({"segment_captions", "frame_captions", "summary"})

# "mcq" (answer: choice index), "open" (answer: text) and "rtl", reasoning temporal localisation
# (answer: [start, end] in seconds).
TASKS = ("mcq", "open", "rtl")


@dataclass(frozen=True)
class Question:
    qid: str
    video: str
    task: str
    question: str
    choices: list[str] = field(default_factory=list)
    answer: object = None
    # The benchmark's finest question type, and the categories its results are also reported by
    # (NExT-QA's family; LVBench counts a question in each of its several).
    qtype: str = ""
    categories: list[str] = field(default_factory=list)
    # The video's length as the benchmark states it, where its scoring uses it (ActivityNet-RTL).
    duration: float | None = None
    # Questions that share a unit score as one, right only when all are (Causal-VidQA's answer and
    # reason); empty: the question is its own unit.
    unit: str = ""
    # The part of the video asked about, [start, end] seconds (STAR's); None: the whole video.
    clip: list[float] | None = None
    # The choices of the reason asked with this answer (Causal-VidQA's predictive and counterfactual
    # questions): a method that picks both in one reply answers the unit's reason question with this one.
    reasons: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        # Without a clip or reasons the question reads as it did before they existed, so its stored answers
        # still count.
        return {k: v for k, v in asdict(self).items() if k not in ("clip", "reasons") or v}

CONFIDENCE = {"type": "integer", "enum": [0, 1, 2, 3, 4, 5]}


class InvalidAnswer(ValueError):
    """The model's final answer does not fit the task (counted apart, never replaced by a guess)."""


@dataclass
class Prediction:
    answer: object
    valid: bool
    error: str = ""
    trace: list[dict] = field(default_factory=list)
    # The reason picked with the answer, for a question with reasons.
    reason: int | None = None


def answer_properties(question: Question) -> dict:
    if question.task == "mcq":
        choice = {"answer": {"type": "integer", "enum": list(range(len(question.choices)))}}
        return choice | ({"reason": {"type": "integer", "enum": list(range(len(question.reasons)))}}
                         if question.reasons else {})
    if question.task == "rtl":
        return {"start": {"type": "number"}, "end": {"type": "number"}}
    return {"answer": {"type": "string"}}


def answer_schema(question: Question, **extra: dict) -> dict:
    properties = {**extra, **answer_properties(question), "confidence": CONFIDENCE}
    return {"type": "object", "properties": properties, "required": list(properties),
            "additionalProperties": False}


def final_answer(question: Question, reply: dict, duration: float):
    """The answer in the task's form (with reasons: the choice and the reason); InvalidAnswer when it does
    not fit."""
    if question.task == "rtl":
        start, end = float(reply["start"]), float(reply["end"])
        # A span that starts after the video ends would be stored inverted once its end is clamped.
        if not 0 <= start <= end or start > duration:
            raise InvalidAnswer(f"span [{start}, {end}] is not a range inside the video (0-{duration:.1f} s)")
        return [start, min(end, duration)]
    if question.task == "mcq":
        answer = reply["answer"]
        if not isinstance(answer, int) or not 0 <= answer < len(question.choices):
            raise InvalidAnswer(f"choice {answer!r} is not one of 0..{len(question.choices) - 1}")
        if question.reasons:
            reason = reply["reason"]
            if not isinstance(reason, int) or not 0 <= reason < len(question.reasons):
                raise InvalidAnswer(f"reason {reason!r} is not one of 0..{len(question.reasons) - 1}")
            return answer, reason
        return answer
    answer = str(reply["answer"]).strip()
    if not answer:
        raise InvalidAnswer("empty answer")
    return answer


def question_text(question: Question) -> str:
    lines = [f"Question: {question.question}"]
    if question.task == "mcq":
        lines += [f"  {i}: {choice}" for i, choice in enumerate(question.choices)]
        lines.append("Answer with the number of the correct choice.")
    elif question.task == "rtl":
        lines.append("Answer with the start and end time, in seconds, of the moment asked about.")
    else:
        lines.append("Answer in a few words.")
    return "\n".join(lines)


def _without_images(messages: list[dict]) -> list[dict]:
    """Messages as the trace keeps them: an image part is named, not stored (the frames are in the store)."""
    def part(p):
        return {"type": "image_url", "image_url": "(a JPEG frame)"} if p.get("type") == "image_url" else p

    return [m if isinstance(m["content"], str) else {**m, "content": [part(p) for p in m["content"]]}
            for m in messages]


class Trace:
    """The steps of one question, each with its tokens and seconds; LLM calls go through `ask`."""

    def __init__(self, llm: LLMClient, temperature: float | None = None):
        self.llm, self.temperature = llm, temperature
        self.steps: list[dict] = []
        # Set while a tool runs: the tools it calls in turn are part of its step.
        self.in_tool = False

    def record(self, kind: str, **fields) -> dict:
        step = {"step": len(self.steps), "kind": kind, **fields}
        self.steps.append(step)
        return step

    def ask(self, kind: str, system: str, user: str | list, schema: dict, llm: LLMClient | None = None,
            max_tokens: int | None = None, **fields) -> dict:
        """One LLM call (the method's LLM, or `llm`, e.g. the vision model); `user` is text or message parts;
        `max_tokens` where a reply needs more or less room than the client's default."""
        llm = llm or self.llm
        started = time.monotonic()
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        try:
            with counted() as by_model:
                reply = llm.complete_json(messages, schema, max_tokens, temperature=self.temperature)
        finally:
            used = sum(by_model.values(), Usage())
            self.record(kind, prompt=_without_images(messages), llm_calls=used.calls, cache_hits=used.cache_hits,
                        prompt_tokens=used.prompt_tokens, completion_tokens=used.completion_tokens,
                        seconds=round(time.monotonic() - started, 3), **fields)
        self.steps[-1]["reply"] = reply
        return reply

    def at_once(self, tools, work: Callable, items: Iterable) -> list:
        """`work(item, tools, trace)` for each item, at once: independent parts of a question (CAViAR's
        strategies, TraveLER's frames), whose requests the LLM client holds to its concurrency. Each part
        gets a trace and a view of the tools of its own; their steps and visited times join this trace
        and `tools` in the items' order, as one after another leaves them, up to a part that raised,
        whose error is then raised here."""
        def part(item) -> tuple:
            own_trace, own_tools = Trace(self.llm, self.temperature), copy.copy(tools)
            own_tools.trace, own_tools.visited = own_trace, []
            try:
                return work(item, own_tools, own_trace), own_trace, own_tools, None
            except Exception as error:  # noqa: BLE001 - raised below, in its place among the parts
                return None, own_trace, own_tools, error

        results = []
        for result, own_trace, own_tools, error in self.llm.in_flight(part, items):
            self.steps += [{**step, "step": len(self.steps) + i} for i, step in enumerate(own_trace.steps)]
            tools.visited += own_tools.visited
            if error is not None:
                raise error
            results.append(result)
        return results

    def tool(self, name: str, arguments: dict, result) -> None:
        """A tool's call (recorded by the tool itself, see `tools.tool`)."""
        confidence = None if result.confidence is None else round(result.confidence, 3)
        self.record("tool", tool=name, arguments=arguments, result=result.text, confidence=confidence,
                    visited=result.timestamps)


class Agent(Component):
    """A method: `answer(question, tools)` reads artifacts through the tools and asks the LLM."""

    name = "agent"
    # Raised when a change to the method's code changes its answers: it is part of the answer run key.
    version = 1
    # Whether the method asks the vision backend about frames (its paper's results depend on a vision model).
    asks_visual_questions = False
    # Whether it picks an answer and its reason in one reply (TraveLER's public Causal-VidQA code); if
    # not, the reason question is asked on its own.
    answers_reasons = False

    def __init__(self, llm: LLMClient, temperature: Annotated[float | None, Range(0, 2)] = None,
                 vision_question: VisionQuestion | None = None):
        # A method's own sampling temperature where its paper or public code sets one (None: the LLM config's),
        # and its own way of asking a vision model about frames.
        self.llm, self.temperature = llm, temperature
        self.vision_question = vision_question or VisionQuestion()

    def answer(self, question: Question, tools) -> Prediction:
        trace = tools.trace = Trace(self.llm, self.temperature)
        tools.vision_question = self.vision_question
        try:
            answer = self.solve(question, tools, trace)
        except (InvalidAnswer, LLMError) as error:
            return Prediction(None, False, f"{type(error).__name__}: {error}", trace.steps)
        if question.task == "rtl":
            # The method answers in the time it was shown (a clip's, from its start); scores use the video's.
            answer = [tools.video_time(t) for t in answer]
        if question.reasons:
            answer, reason = answer
            return Prediction(answer, True, "", trace.steps, reason)
        return Prediction(answer, True, "", trace.steps)

    def solve(self, question: Question, tools, trace: Trace):
        raise NotImplementedError

    def stages_read(self) -> frozenset[str] | None:
        """The precompute stages whose artifacts it reads through the tools, with VISION where it asks
        the vision backend, whose own reads then join, and TEXT_QUERIES where it searches frames by text
        (None: any stage). Only these must be complete to answer, and only their keys are part of the
        run's key; the tools refuse to read any other."""
        return None

    @property
    def reads_captions(self) -> bool:
        """Whether it reads stored captions (their describer is then part of how it runs)."""
        read = self.stages_read()
        return read is None or bool(read & CAPTION_STAGES)

    def unlike_its_paper(self) -> list[str]:
        """What in this method's settings makes a run unlike its paper's (said with the run's output,
        recorded with it and marked in the report)."""
        return []
