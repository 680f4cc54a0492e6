"""The video tools every method shares, registered once: reads of one video's precomputed artifacts,
each result with a confidence (search similarity, ASR word probability, describer score or the
model's rating) and the timestamps it looked at.

`@tool` registers a method under its name with its docstring and an argument schema made from its
signature; every call of it lands in the question's trace (arguments, result, confidence, visited
timestamps) without the method asking. Methods build their prompts and schemas from `VIDEO_TOOLS`
(VideoAgent2's plan, CAViAR's module headers), so a new tool is one decorated method.
"""

import bisect
import functools
import inspect
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

import numpy as np

from vidprep.store.artifacts import (FRAME_CAPTIONS, SEGMENT_CAPTIONS, SUMMARIES, TRANSCRIPTS, Frame, FrameCaption,
                                     SegmentCaption, TranscriptSegment)
from vidprep.store.keys import CAPTIONS_ONLY
from vidprep.store.store import Store
from vidprep.conf.checks import ArtifactMissing
from vidprep.agents.vision import TEXT_QUERIES, VISION, VisionQuestion
from vidprep.stages.base import evenly_spaced


@dataclass
class ToolResult:
    text: str
    # One scale for every tool: 0 = the result is unreliable, 1 = the tool is sure of it; None where
    # there is no measure (plain reasoning). What each tool's number is: the README's tool table.
    confidence: float | None
    timestamps: list[float] = field(default_factory=list)
    # What a program sees (CAViAR): a value of its own where the tool returns structure, else the text.
    value: object = None

    def for_prompt(self) -> str:
        sure = "" if self.confidence is None else f"\n(tool confidence {self.confidence:.2f})"
        return self.text + sure


_JSON_TYPES = {str: "string", float: "number", int: "integer", bool: "boolean", list: "array", dict: "object"}


@dataclass(frozen=True)
class Tool:
    name: str
    doc: str
    signature: inspect.Signature
    # The precompute stages it reads, VISION where it asks the vision backend (None: any stage).
    reads: frozenset[str] | None = None

    @property
    def parameters(self) -> list[inspect.Parameter]:
        return [p for p in self.signature.parameters.values() if p.name != "self"]

    def arguments_schema(self) -> dict:
        """The JSON schema of the tool's arguments. Every one is required, as strict structured outputs
        (OpenAI's) ask; one with a default may be null, which stands for its default (`arguments`)."""
        properties = {}
        for parameter in self.parameters:
            kind = typing.get_origin(parameter.annotation) or parameter.annotation
            properties[parameter.name] = {"type": _JSON_TYPES[kind]}
            if kind is list:
                properties[parameter.name]["items"] = {"type": _JSON_TYPES[typing.get_args(parameter.annotation)[0]]}
            if parameter.default is not inspect.Parameter.empty:
                properties[parameter.name]["type"] = [_JSON_TYPES[kind], "null"]
        return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}

    @staticmethod
    def arguments(given: dict) -> dict:
        """The arguments of a call written to `arguments_schema`: a null one takes its default."""
        return {name: value for name, value in given.items() if value is not None}

    def header(self) -> str:
        """The tool as a Python function header with its docstring (how CAViAR shows its modules)."""
        def shown(p: inspect.Parameter) -> str:
            kind = getattr(p.annotation, "__name__", None) if not typing.get_args(p.annotation) else str(p.annotation)
            text = f"{p.name}: {kind}"
            return text if p.default is inspect.Parameter.empty else f"{text} = {p.default!r}"

        args = ", ".join(shown(p) for p in self.parameters)
        doc = "\n    ".join(self.doc.splitlines())
        return f'def {self.name}({args}):\n    """{doc}"""'

    def line(self) -> str:
        """The tool in one line for a prompt's tool list."""
        args = ", ".join(p.name for p in self.parameters)
        return f"- {self.name}({args}): {' '.join(self.doc.split())}"


def tool(method=None, *, reads: Iterable[str] | None = None):
    """Mark a method returning a ToolResult as a tool of its class (`tools_of`), `@tool` or
    `@tool(reads=[stages])` (the stages it reads, VISION where it asks the vision backend; not given: any
    stage, so a method that calls it needs every stage); its calls are recorded in `self.trace` (a tool
    another tool calls is part of that call, not a step of its own)."""
    if method is None:
        return functools.partial(tool, reads=reads)
    signature = inspect.signature(method)

    @functools.wraps(method)
    def recorded(self, *args, **kwargs) -> ToolResult:
        trace = self.trace
        if trace is None or trace.in_tool:
            return method(self, *args, **kwargs)
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        trace.in_tool = True
        try:
            result = method(self, *args, **kwargs)
        finally:
            trace.in_tool = False
        trace.tool(method.__name__, {k: v for k, v in bound.arguments.items() if k != "self"}, result)
        return result

    recorded.tool = Tool(method.__name__, inspect.getdoc(method), signature,
                         None if reads is None else frozenset(reads))
    return recorded


def read_by(tools: Iterable[Tool]) -> frozenset[str] | None:
    """The stages the given tools read together (None: some may read any)."""
    reads = [t.reads for t in tools]
    return None if None in reads else frozenset().union(*reads)


def tools_of(cls: type) -> dict[str, Tool]:
    """The tools a class defines or inherits, by name: each class's own registry."""
    return {name: member.tool for klass in reversed(cls.__mro__) for name, member in vars(klass).items()
            if hasattr(member, "tool")}


def _mean(values: list[float], empty: float = 0.0) -> float:
    return sum(values) / len(values) if values else empty


class VideoTools:
    """Tools over one video, or over a clip of it (`clip`: (start, end) seconds, a question about part of
    the video such as STAR's), which they present as the whole video: times from its start, its length
    as the duration, as the papers trim the clip before they sample it. Nothing made from outside the
    clip reaches it: a segment caption only if all its frames lie inside, the words said inside, no
    summary of the whole video. `visited` keeps every time a tool looked at, in the video's own time, in
    order. The agent sets `trace` to the question's trace before it starts. A subclass's own tools join
    `VIDEO_TOOLS` when it is defined."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        VIDEO_TOOLS.update(tools_of(cls))

    def __init__(self, store: Store, keys: dict[str, str], video_id: str, text_embedder, vision,
                 search_mode: str = "vector", clip: tuple[float, float] | None = None,
                 caption_frames: int | None = None):
        self.store, self.keys, self.video_id = store, keys, video_id
        self.text_embedder, self.vision, self.search_mode = text_embedder, vision, search_mode
        self.visited: list[float] = []
        # How many of a segment's frames its caption was made from (None: every one, as imported per-frame
        # captions are): reading a caption views those frames.
        self.caption_frames = caption_frames
        # Set by the method answering: its trace, and how it asks the vision model about frames.
        self.trace = None
        self.vision_question = VisionQuestion()
        video = store.video(video_id)
        whole = video["duration"]
        # Nothing of such a video's audio was read: its empty transcript says nothing of its speech.
        self._captions_only = video["codec"] == CAPTIONS_ONLY
        self.start, self.end = (0.0, whole) if clip is None else (max(0.0, clip[0]), min(clip[1], whole))
        self._within = None if clip is None else (self.start, self.end)

    @property
    def duration(self) -> float:
        return self.end - self.start

    def video_time(self, t: float) -> float:
        """A time the method gave (from the clip's start) in the video's own time, kept inside the clip."""
        t = self.start + max(0.0, t)
        return t if self._within is None else min(t, self.end)

    def _key(self, stage: str) -> str:
        if stage not in self.keys:
            raise ArtifactMissing(f"stage {stage} is not configured (add it to stages and run `vidprep precompute`), "
                                  "or not among the stages the method says it reads (its `stages_read`)")
        return self.keys[stage]

    def _seen(self, frames: list[Frame]) -> list[Frame]:
        """Frames as the method sees them (times from the clip's start), their visits recorded."""
        self.visited.extend(f.timestamp for f in frames)
        return [replace(f, timestamp=f.timestamp - self.start) for f in frames] if self.start else frames

    @functools.cached_property
    def _frame_times(self) -> list[float]:
        """The video's frame times in order, read once per question."""
        return [f.timestamp for f in self.store.frame_index(self.video_id, self._key("frames"))]

    def _made_from(self, caption: SegmentCaption) -> list[float]:
        """The times of the frames a segment caption was made from (in the video's own time)."""
        times = self._frame_times
        inside = times[bisect.bisect_left(times, caption.start):bisect.bisect_left(times, caption.end)]
        return evenly_spaced(inside, self.caption_frames) if self.caption_frames else inside

    def _read_captions(self, captions: list[SegmentCaption]) -> None:
        """The frames the segment captions were made from, as viewed."""
        for caption in captions:
            self.visited.extend(self._made_from(caption))

    def _told_of_clip(self, caption: SegmentCaption) -> bool:
        """Whether a caption tells of the clip only: every frame it was made from lies inside it. One made
        across the clip's edge would show the question what it is not about, the future included."""
        made_from = self._made_from(caption) or [caption.start, caption.end]
        return all(self.start <= t <= self.end for t in made_from)

    def _inside(self, rows: list) -> list:
        """Rows with a `start` and `end` that overlap the clip, their times from its start and cut to it."""
        return [replace(r, start=max(0.0, r.start - self.start), end=min(self.duration, r.end - self.start))
                for r in rows if r.end > self.start and r.start <= self.end]

    def frames_in_range(self, start: float, end: float) -> list[Frame]:
        return self._seen(self.store.frames_in_range(self.video_id, self._key("frames"), self.video_time(start),
                                                     self.video_time(end)))

    def frame_nearest(self, t: float) -> Frame:
        return self._seen([self.store.frame_nearest(self.video_id, self._key("frames"), self.video_time(t),
                                                    self._within)])[0]

    def frames_at(self, times: list[float]) -> list[Frame]:
        """The stored frame nearest to each time, each frame once, in time order."""
        return self._seen(self.store.frames_nearest_each(self.video_id, self._key("frames"),
                                                         [self.video_time(t) for t in times], self._within))

    def evenly_spaced_frames(self, n: int) -> list[Frame]:
        return self._seen(self.store.evenly_spaced_frames(self.video_id, self._key("frames"), n, self._within))

    def frame_captions(self) -> list[FrameCaption]:
        """The captions of frames at evenly spaced positions of the video, stored at precompute time. A
        clip is captioned here, at as many positions of it as the stored captions have of the video."""
        stored = self.store.read(FRAME_CAPTIONS, self.video_id, self._key("frame_captions"))
        if self._within is None:
            self.visited.extend(c.timestamp for c in stored)
            return stored
        fractions = [c.position for c in stored]
        frames = [self.frame_nearest(f * self.duration) for f in fractions]
        described = [self.vision.describe([frame], self) for frame in frames]
        return [FrameCaption(i, fraction, frame.timestamp, text, confidence, self.vision.model_id)
                for i, (fraction, frame, (text, confidence)) in enumerate(zip(fractions, frames, described))]

    def _embedded(self, frames: list[Frame]) -> dict[int, tuple]:
        return self.store.frame_embeddings(self.video_id, self._key("frame_embeddings"),
                                           [f.frame_index for f in frames])

    def frame_descriptions(self, frames: list[Frame]) -> dict[int, str]:
        return {index: description for index, (_, description) in self._embedded(frames).items()}

    def similarities(self, query: str, frames: list[Frame]) -> dict[int, float]:
        """Cosine similarity of the query's text embedding to each frame's stored embedding."""
        query_vector = np.asarray(self.text_embedder.embed_texts([query])[0], dtype=np.float32)
        query_vector /= np.linalg.norm(query_vector) or 1.0
        return {index: float(vector @ query_vector / (np.linalg.norm(vector) or 1.0))
                for index, (vector, _) in self._embedded(frames).items()}

    @tool(reads=("frame_embeddings", TEXT_QUERIES))
    def search_frames(self, query: str, k: int = 5) -> ToolResult:
        """The k stored frames that best match a text query, in time order, with similarity scores."""
        vector = self.text_embedder.embed_texts([query])[0]
        # k comes from a model's plan: keep it to a sensible range rather than fail the question.
        hits = self.store.search(vector, self._key("frame_embeddings"), self.video_id, min(max(1, int(k)), 20),
                                 text=query, mode=self.search_mode, within=self._within)
        hits.sort(key=lambda h: h.timestamp)
        self.visited.extend(h.timestamp for h in hits)
        times = [h.timestamp - self.start for h in hits]
        lines = [f"t={t:.1f}s similarity {h.score:.2f}: {h.description or ''}" for t, h in zip(times, hits)]
        best = max((h.score for h in hits), default=0.0)
        return ToolResult("\n".join(lines) or "no frames", max(0.0, min(1.0, best)), times)

    @tool(reads=("segment_captions", "frames"))
    def segment_captions(self, start: float = 0.0, end: float = -1.0) -> ToolResult:
        """Captions of the segments between two times in seconds (end -1: the video's end)."""
        end = self.duration if end < 0 else end
        stored = self.store.read(SEGMENT_CAPTIONS, self.video_id, self._key("segment_captions"))
        if self._within is not None:
            stored = [c for c in stored if self._told_of_clip(c)]
        read = [(row, c) for row in stored for c in self._inside([row]) if c.end > start and c.start <= end]
        self._read_captions([row for row, _ in read])
        captions = [c for _, c in read]
        lines = [f"[{c.start:.0f}-{c.end:.0f}s] {c.caption}" for c in captions]
        return ToolResult("\n".join(lines) or "no segment in that range",
                          _mean([c.confidence for c in captions]), [c.start for c in captions])

    @tool(reads=("transcript",))
    def transcript(self, start: float = 0.0, end: float = -1.0) -> ToolResult:
        """What is said between two times in seconds (end -1: the video's end)."""
        end = self.duration if end < 0 else end
        if self._captions_only:
            return ToolResult("(no transcript was made: this store holds the video's published captions, not "
                              "its audio)", 0.0)
        stored = self.store.read(TRANSCRIPTS, self.video_id, self._key("transcript"))
        if self._within is not None:
            stored = [s for s in map(self._said_in_clip, stored) if s is not None]
        spoken = [s for s in self._inside(stored) if s.end > start and s.start <= end]
        if not spoken:
            detail = self.store.detail(self.video_id, self._key("transcript"))
            # No audio track is a fact of the file; speech not found may be speech the voice detector missed.
            return ToolResult(f"(no speech: {detail or 'no speech in that range'})",
                              1.0 if detail == "no audio track" else 0.5)
        words = [w["probability"] for s in spoken for w in s.words]
        lines = [f"[{s.start:.1f}-{s.end:.1f}s] {s.text}" for s in spoken]
        return ToolResult("\n".join(lines), _mean(words, 0.5), [s.start for s in spoken])

    def _said_in_clip(self, segment: TranscriptSegment) -> TranscriptSegment | None:
        """A transcript segment cut to the words said inside the clip (None: none are)."""
        if self.start <= segment.start and segment.end <= self.end:
            return segment
        words = [w for w in segment.words if self.start <= w["start"] and w["end"] <= self.end]
        if not words:
            return None
        return replace(segment, start=words[0]["start"], end=words[-1]["end"], words=words,
                       text=" ".join(w["word"] for w in words))

    @tool(reads=("summary", "segment_captions", "frames"))
    def summary(self) -> ToolResult:
        """The summary of the whole video written at precompute time."""
        if self._within is not None:
            # It was written from every caption of the video: it would tell a clip's question what follows it.
            return ToolResult("(no summary: the question is about part of the video, and the stored summary "
                              "tells of all of it)", 0.0)
        text = self.store.read(SUMMARIES, self.video_id, self._key("summary"))[0].summary
        captions = self.store.read(SEGMENT_CAPTIONS, self.video_id, self._key("segment_captions"))
        # The summary was written from every caption: it tells of every captioned frame.
        self._read_captions(captions)
        # The summary is only as sure as the captions it was written from.
        return ToolResult(text, _mean([c.confidence for c in captions], 0.5))

    @tool(reads=("frames", VISION))
    def visual_question(self, question: str, timestamps: list[float]) -> ToolResult:
        """Ask about what is visible in the frames nearest to the given times in seconds (three evenly
        spaced frames of the video when none are given)."""
        frames = [self.frame_nearest(t) for t in timestamps] if timestamps else self.evenly_spaced_frames(3)
        text, confidence = self.vision.ask(question, frames, self, self.vision_question)
        return ToolResult(text, confidence, [f.timestamp for f in frames])

    @tool(reads=("frames", VISION))
    def describe_frame(self, timestamp: float) -> ToolResult:
        """A caption of the stored frame nearest to a time in seconds."""
        frames = [self.frame_nearest(timestamp)]
        text, confidence = self.vision.describe(frames, self)
        return ToolResult(text, confidence, [f.timestamp for f in frames])


# The tools over a video that methods name (`method.tools`); CAViAR's modules add their own (`caviar.all_modules`).
VIDEO_TOOLS = tools_of(VideoTools)
