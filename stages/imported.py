"""Stages of a captions-only store: published captions stand in for the frames a video would give.

`ImportedCaptions` reads captions in a peer project's format and writes them as the video's frame
captions; the rest derive what the decode-based stages would have written: a timeline of frames
without pixels (so every frame tool works), caption text embeddings (so text-to-frame search runs
over captions) and segment captions (n-second groups). The summary and transcript stages are the
usual ones (a captions-only video has no audio track).
"""

import dataclasses
import functools
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

from vidprep.conf.checks import ConfigError, Range

from vidprep.stages.base import Stage, evenly_spaced, runtime
from vidprep.store.artifacts import FRAME_CAPTIONS, FRAMES, SEGMENT_CAPTIONS
from vidprep.stages.embed import EmbedFrames

FORMATS = ("videoagent", "llovi", "jsonl")


def _load_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ConfigError(f"{path}: cannot read captions: {error}") from error


def _videoagent(path: Path, seconds_per_caption: float) -> dict[str, list[tuple[float, str]]]:
    """VideoAgent: `{video}_cap.json` files mapping the second ("0", "1", ...) to a caption."""
    files = sorted(path.glob("*_cap.json")) if path.is_dir() else [path]
    captions = {}
    for file in files:
        try:
            captions[file.name.removesuffix("_cap.json")] = sorted(
                (float(t), str(text)) for t, text in _load_json(file).items())
        except (AttributeError, ValueError) as error:
            raise ConfigError(f"{file}: not a VideoAgent caption file (second -> caption): {error}") from error
    return captions


def _llovi(path: Path, seconds_per_caption: float) -> dict[str, list[tuple[float, str]]]:
    """LLoVi: one JSON object `{uid: [caption, ...]}`, one caption per `seconds_per_caption`."""
    data = _load_json(path)
    if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
        raise ConfigError(f"{path}: not a LLoVi caption file ({{uid: [captions]}})")
    return {uid: [(i * seconds_per_caption, str(text)) for i, text in enumerate(texts)]
            for uid, texts in data.items()}


def _jsonl(path: Path, seconds_per_caption: float) -> dict[str, list[tuple[float, str]]]:
    """One `{"video", "t", "caption"}` object per line."""
    captions: dict[str, list] = {}
    try:
        lines = path.read_text().splitlines()
    except OSError as error:
        raise ConfigError(f"{path}: cannot read captions: {error}") from error
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            captions.setdefault(str(item["video"]), []).append((float(item["t"]), str(item["caption"])))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as error:
            raise ConfigError(f"{path}:{number}: not a caption line ({{video, t, caption}}): {error}") from error
    return {video: sorted(items) for video, items in captions.items()}


READERS = {"videoagent": _videoagent, "llovi": _llovi, "jsonl": _jsonl}


@dataclasses.dataclass
class ImportedCaptions(Stage):
    """Published captions as a video's frame captions; the key holds their format, source and content."""

    version = 1
    artifact = FRAME_CAPTIONS
    # Parses the caption source once per worker.
    stateful = True

    format: str = "videoagent"
    path: str = runtime("")
    # Spacing of list-form captions (LLoVi) and of the last caption's span, in seconds.
    seconds_per_caption: Annotated[float, Range(0, above=True, unit="seconds")] = 1.0
    # The confidence tools report for a published caption (its source gives none).
    confidence: Annotated[float, Range(0, 1)] = 1.0

    def __post_init__(self):
        if self.format not in FORMATS:
            raise ConfigError(f"captions format must be one of {', '.join(FORMATS)}, got {self.format!r}")
        if not self.path or not Path(self.path).exists():
            raise ConfigError(f"captions path {self.path!r} does not exist")

    @functools.cached_property
    def _files(self) -> list[Path]:
        path = Path(self.path)
        return sorted(path.glob("*_cap.json")) if path.is_dir() else [path]

    @functools.cached_property
    def captions(self) -> dict[str, list[tuple[float, str]]]:
        """Video name -> (time in seconds, caption), in time order."""
        return READERS[self.format](Path(self.path), self.seconds_per_caption)

    @property
    def model_id(self) -> str:
        return f"imported:{self.format}:{Path(self.path).name}"

    def params(self) -> dict:
        digest = hashlib.sha256()
        for file in self._files:
            digest.update(file.name.encode() + b"\0" + file.read_bytes())
        # The captions are keyed by their files' content (`path` is where they are, not what).
        return super().params() | {"source": Path(self.path).name, "sha256": digest.hexdigest()[:16]}

    def duration(self, name: str) -> float:
        """A captions-only video lasts until its last caption's span ends."""
        return self.captions[name][-1][0] + self.seconds_per_caption

    def run(self, video: dict) -> Iterator[list[dict]]:
        items = self.captions.get(video["name"])
        if not items:
            return f"no captions for {video['name']} in {self.path}"
        yield [{"position_index": i, "position": t / video["duration"], "timestamp": t, "caption": text,
                "confidence": self.confidence, "model": self.model_id} for i, (t, text) in enumerate(items)]


@dataclasses.dataclass
class CaptionTimeline(Stage):
    """One frame without pixels (empty JPEG) per caption, so frame tools work on a captions-only video."""

    version = 1
    artifact = FRAMES
    upstream = ("frame_captions",)

    def run(self, video: dict, captions: Iterator[list]) -> Iterator[list[dict]]:
        for batch in captions:
            yield [{"frame_index": c.position_index, "timestamp": c.timestamp, "jpeg": b"", "width": 0, "height": 0}
                   for c in batch]


@dataclasses.dataclass
class EmbedCaptions(EmbedFrames):
    """Text embeddings of the frame captions, each stored with its caption as the frame's description."""

    upstream = ("frame_captions",)

    def run(self, video: dict, captions: Iterator[list]) -> Iterator[list[dict]]:
        for batch in captions:
            vectors = self.embedder.embed_texts([c.caption for c in batch])
            yield [{"frame_index": c.position_index, "timestamp": c.timestamp, "vector": v.tolist(),
                    "model": self.embedder.model_id, "description": c.caption} for c, v in zip(batch, vectors)]


@dataclasses.dataclass
class GroupCaptions(Stage):
    """A segment's caption from up to `captions_per_segment` of its frame captions, evenly chosen."""

    version = 1
    artifact = SEGMENT_CAPTIONS
    upstream = ("frame_captions", "segments")

    captions_per_segment: Annotated[int, Range(1)] = 1

    def run(self, video: dict, captions: Iterator[list], segments: Iterator[list]) -> Iterator[list[dict]]:
        frame_captions = [c for batch in captions for c in batch]
        rows = []
        for segment in (s for batch in segments for s in batch):
            inside = [c for c in frame_captions if segment.start <= c.timestamp < segment.end]
            if not inside:
                continue
            picked = evenly_spaced(inside, self.captions_per_segment)
            rows.append({"segment_index": segment.segment_index, "start": segment.start, "end": segment.end,
                         "caption": " ".join(c.caption for c in picked),
                         "confidence": sum(c.confidence for c in picked) / len(picked), "model": picked[0].model})
        yield rows
