"""Captions of segments (VideoAgent2 phase 1) and of evenly spaced frames (TraveLER's memory)."""

import collections
import dataclasses
from collections.abc import Iterator
from typing import Annotated

from vidprep.conf.checks import Range

from vidprep.stages.base import Resources, Stage, evenly_spaced, model_field
from vidprep.store.artifacts import FRAME_CAPTIONS, SEGMENT_CAPTIONS


@dataclasses.dataclass
class CaptionSegments(Stage):
    """One caption per segment, from up to `frames_per_segment` of its frames, evenly chosen."""

    version = 1
    artifact = SEGMENT_CAPTIONS
    upstream = ("frames", "segments")
    stateful = True
    resources = Resources(gpu_memory_gb=6)

    describer: object = model_field()
    frames_per_segment: Annotated[int, Range(1)] = 3

    def model_device(self) -> str | None:
        return self.describer.device

    @property
    def frames_per_caption(self) -> int:
        """No more of a segment's frames than its describer's model takes in one request."""
        return min(self.frames_per_segment, self.describer.max_frames or self.frames_per_segment)

    def run(self, video: dict, frames: Iterator[list], segments: Iterator[list]) -> Iterator[list[dict]]:
        closed, empty = collections.deque(), []
        per_segment = self.frames_per_caption

        def closed_frames() -> Iterator[list[bytes]]:
            # Segments in order, each with the frames inside it; frames arrive in time order, and each one
            # closes the segments that end before it, so a segment is described once its frames are read.
            pending = [s for batch in segments for s in batch]
            inside = []
            for batch in frames:
                for frame in batch:
                    while len(pending) > 1 and frame.timestamp >= pending[0].end:
                        segment = pending.pop(0)
                        if inside:
                            closed.append(segment)
                            yield [f.jpeg for f in evenly_spaced(inside, per_segment)]
                        else:
                            empty.append(segment)
                        inside = []
                    inside.append(frame)
            if inside:
                closed.append(pending.pop(0))
                yield [f.jpeg for f in evenly_spaced(inside, per_segment)]
            empty.extend(pending)

        for text, confidence in self.describer.describe_each(closed_frames()):
            segment = closed.popleft()
            yield [{"segment_index": segment.segment_index, "start": segment.start, "end": segment.end,
                    "caption": text, "confidence": confidence, "model": self.describer.model_id}]
        if empty:
            return f"{len(empty)} segments had no frames (fps too low for the segment length)"


@dataclasses.dataclass
class CaptionFrames(Stage):
    """Captions of the frames nearest to `positions` evenly spaced points (0, ..., 1 of the duration)."""

    version = 1
    artifact = FRAME_CAPTIONS
    upstream = ("frames",)
    stateful = True
    resources = Resources(gpu_memory_gb=6)

    describer: object = model_field()
    positions: Annotated[int, Range(1)] = 5

    def model_device(self) -> str | None:
        return self.describer.device

    def run(self, video: dict, frames: Iterator[list]) -> Iterator[list[dict]]:
        fractions = [i / (self.positions - 1) if self.positions > 1 else 0.0 for i in range(self.positions)]
        targets = [f * video["duration"] for f in fractions]
        nearest: list = [None] * self.positions
        for batch in frames:
            for frame in batch:
                for i, t in enumerate(targets):
                    if nearest[i] is None or abs(frame.timestamp - t) < abs(nearest[i].timestamp - t):
                        nearest[i] = frame
        if nearest[0] is None:
            return "no frames"
        described = self.describer.describe_each([frame.jpeg] for frame in nearest)
        yield [{"position_index": i, "position": fraction, "timestamp": frame.timestamp,
                "caption": text, "confidence": confidence, "model": self.describer.model_id}
               for i, (fraction, frame, (text, confidence)) in enumerate(zip(fractions, nearest, described))]
