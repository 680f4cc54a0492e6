"""The video tools every method shares: reads of one video's precomputed artifacts, each result
with a confidence (search similarity, ASR word probability, describer score or the model's rating).
"""

from dataclasses import dataclass, field

from vidprep.store.artifacts import FRAME_CAPTIONS, SEGMENT_CAPTIONS, SUMMARIES, TRANSCRIPTS, Frame
from vidprep.store.store import ArtifactMissing, Store


@dataclass
class ToolResult:
    text: str
    confidence: float
    timestamps: list[float] = field(default_factory=list)

    def for_prompt(self) -> str:
        return f"{self.text}\n(tool confidence {self.confidence:.2f})"


def _mean(values: list[float], empty: float = 0.0) -> float:
    return sum(values) / len(values) if values else empty


class VideoTools:
    """Tools over one video; `visited` keeps every timestamp a tool looked at, in order."""

    def __init__(self, store: Store, keys: dict[str, str], video_id: str, text_embedder, vision):
        self.store, self.keys, self.video_id = store, keys, video_id
        self.text_embedder, self.vision = text_embedder, vision
        self.visited: list[float] = []
        self._video = store.video(video_id)

    @property
    def duration(self) -> float:
        return self._video["duration"]

    def _key(self, stage: str) -> str:
        if stage not in self.keys:
            raise ArtifactMissing(f"stage {stage} is not configured; add it to stages and run `vidprep precompute`")
        return self.keys[stage]

    def _visit(self, timestamps: list[float]) -> list[float]:
        self.visited.extend(timestamps)
        return timestamps

    def frames_in_range(self, start: float, end: float) -> list[Frame]:
        frames = self.store.frames_in_range(self.video_id, self._key("frames"), start, end)
        self._visit([f.timestamp for f in frames])
        return frames

    def frame_nearest(self, t: float) -> Frame:
        frame = self.store.frame_nearest(self.video_id, self._key("frames"), t)
        self._visit([frame.timestamp])
        return frame

    def window(self, t: float, size: int) -> list[Frame]:
        """The `size` stored frames nearest to t, in time order."""
        picked = self.store.frames_nearest(self.video_id, self._key("frames"), t, size)
        self._visit([f.timestamp for f in picked])
        return picked

    def evenly_spaced_frames(self, n: int) -> list[Frame]:
        frames = self.store.evenly_spaced_frames(self.video_id, self._key("frames"), n)
        self._visit([f.timestamp for f in frames])
        return frames

    def search(self, query: str, k: int = 5) -> ToolResult:
        vector = self.text_embedder.embed_texts([query])[0]
        hits = self.store.search(vector, self._key("frame_embeddings"), self.video_id, k)
        hits.sort(key=lambda h: h.timestamp)
        lines = [f"t={h.timestamp:.1f}s similarity {h.score:.2f}: {h.description or ''}" for h in hits]
        best = max((h.score for h in hits), default=0.0)
        return ToolResult("\n".join(lines) or "no frames", max(0.0, min(1.0, best)),
                          self._visit([h.timestamp for h in hits]))

    def segment_captions(self, start: float = 0.0, end: float | None = None) -> ToolResult:
        end = self.duration if end is None else end
        captions = [c for c in self.store.read(SEGMENT_CAPTIONS, self.video_id, self._key("segment_captions"))
                    if c.end > start and c.start <= end]
        lines = [f"[{c.start:.0f}-{c.end:.0f}s] {c.caption}" for c in captions]
        return ToolResult("\n".join(lines) or "no segment in that range",
                          _mean([c.confidence for c in captions]), [c.start for c in captions])

    def frame_captions(self):
        return self.store.read(FRAME_CAPTIONS, self.video_id, self._key("frame_captions"))

    def transcript(self, start: float = 0.0, end: float | None = None) -> ToolResult:
        end = self.duration if end is None else end
        segments = self.store.read(TRANSCRIPTS, self.video_id, self._key("transcript"))
        spoken = [s for s in segments if s.end > start and s.start <= end]
        if not spoken:
            reason = self.store.detail(self.video_id, self._key("transcript")) or "no speech in that range"
            return ToolResult(f"(no speech: {reason})", 1.0)
        words = [w["probability"] for s in spoken for w in s.words]
        lines = [f"[{s.start:.1f}-{s.end:.1f}s] {s.text}" for s in spoken]
        return ToolResult("\n".join(lines), _mean(words, 0.5), [s.start for s in spoken])

    def summary(self) -> ToolResult:
        text = self.store.read(SUMMARIES, self.video_id, self._key("summary"))[0].summary
        captions = self.store.read(SEGMENT_CAPTIONS, self.video_id, self._key("segment_captions"))
        # The summary is only as sure as the captions it was written from.
        return ToolResult(text, _mean([c.confidence for c in captions], 0.5))

    def visual_question(self, question: str, timestamps: list[float]) -> ToolResult:
        frames = [self.frame_nearest(t) for t in timestamps] if timestamps else self.evenly_spaced_frames(3)
        text, confidence = self.vision.ask(question, frames, self)
        return ToolResult(text, confidence, [f.timestamp for f in frames])

    def frame_descriptions(self, frames: list[Frame]) -> dict[int, str]:
        return self.store.frame_descriptions(self.video_id, self._key("frame_embeddings"), self.text_embedder.dim,
                                             [f.frame_index for f in frames])

    def describe_frames(self, frames: list[Frame]) -> ToolResult:
        text, confidence = self.vision.describe(frames, self)
        return ToolResult(text, confidence, [f.timestamp for f in frames])
