"""The VideoAgent2 caption-to-summary: the LLM reads all segment captions C and, reasoning first
(the paper's CoT prompting), writes the summary S of the whole video."""

import dataclasses
import functools
from typing import Annotated
from collections.abc import Iterator

from vidprep.conf.checks import Range

from vidprep.stages.base import Resources, Stage, model_field
from vidprep.store.artifacts import SUMMARIES
from vidprep.stages.prompts import load_prompt

SCHEMA = {
    "type": "object",
    "properties": {"reasoning": {"type": "string"}, "summary": {"type": "string"}},
    "required": ["reasoning", "summary"],
    "additionalProperties": False,
}


@dataclasses.dataclass
class SummarizeVideo(Stage):
    """Summary S from all segment captions; captions longer than `max_input_chars` (null: half the
    LLM's context, by its profile) are summarised in chunks, then the chunk summaries are combined
    (repeatedly, until they fit). The reasoning is asked for before the summary and not stored."""

    version = 2
    artifact = SUMMARIES
    upstream = ("segment_captions",)
    stateful = True
    # It calls the LLM server, which does the work: no CPU of its own.
    resources = Resources(cpus=0)

    llm: object = model_field()
    prompt: str = "summary_v2.txt"
    combine_prompt: str = "summary_combine_v2.txt"
    max_input_chars: Annotated[int | None, Range(500)] = None

    @functools.cached_property
    def _input_chars(self) -> int:
        return self.max_input_chars or self.llm.context_chars(0.5)

    @functools.cached_property
    def _prompts(self) -> tuple[str, str]:
        return load_prompt(self.prompt), load_prompt(self.combine_prompt)

    def _ask(self, instructions: str, text: str) -> str:
        messages = [{"role": "system", "content": instructions}, {"role": "user", "content": text}]
        return self.llm.complete_json(messages, SCHEMA)["summary"].strip()

    def _chunks(self, lines: list[str]) -> list[str]:
        chunks, current = [], ""
        for line in lines:
            line = line[: self._input_chars]
            if current and len(current) + len(line) + 1 > self._input_chars:
                chunks.append(current)
                current = ""
            current += line + "\n"
        return chunks + [current] if current else chunks

    def run(self, video: dict, captions: Iterator[list]) -> Iterator[list[dict]]:
        lines = [f"[{c.start:.0f}-{c.end:.0f}s] {c.caption}" for batch in captions for c in batch]
        if not lines:
            return "nothing to summarise"
        instructions, combine = self._prompts
        chunks = self._chunks(lines)
        # The chunks of one round are independent: asked at once, up to the client's concurrency.
        parts = list(self.llm.in_flight(lambda chunk: self._ask(instructions, chunk), chunks))
        while len(parts) > 1:
            parts = list(self.llm.in_flight(lambda chunk: self._ask(combine, chunk), self._chunks(
                [f"Part {i + 1}: {p}" for i, p in enumerate(parts)])))
        yield [{"summary_index": 0, "summary": parts[0], "model": self.llm.model_id, "chunks": len(chunks)}]
