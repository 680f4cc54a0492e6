"""Captions, transcripts and summaries from the real shipped models and the real local LLM server."""

import json
import os
import re

import pytest

from vidprep.pipeline.plan import build_plan
from vidprep.pipeline.precompute import precompute
from vidprep.store.artifacts import FRAME_CAPTIONS, SEGMENT_CAPTIONS, SUMMARIES, TRANSCRIPTS
from vidprep.store.keys import content_id


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


def word_error_rate(reference: list[str], hypothesis: list[str]) -> float:
    """Levenshtein distance over words, divided by the reference length."""
    previous = list(range(len(hypothesis) + 1))
    for i, ref in enumerate(reference, 1):
        current = [i]
        for j, hyp in enumerate(hypothesis, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ref != hyp)))
        previous = current
    return previous[-1] / len(reference)


@pytest.fixture(scope="module")
def artifacts(precomputed, sample_dir):
    cfg, store, summary = precomputed
    truth = json.loads((sample_dir / "scenes.json").read_text())
    ids = {name: content_id(sample_dir / name) for name in ("scenes.mp4", "places.mp4", "short.mp4")}
    return store, build_plan(cfg.stages).keys, ids, truth, summary


def test_transcript_of_the_speech_track(artifacts):
    store, keys, ids, truth, _ = artifacts
    speech = truth["scenes.mp4"]["speech"]
    segments = store.read(TRANSCRIPTS, ids["scenes.mp4"], keys["transcript"])
    text = " ".join(s.text for s in segments)
    wer = word_error_rate(_words(speech["text"]), _words(text))
    # Measured here: 0.0 (espeak-ng en-us at 130 words/min, Whisper base int8).
    assert wer <= 0.2, (wer, text)
    assert segments[0].language == "en"
    words = [w for s in segments for w in s.words]
    assert len(words) >= 12
    assert all(speech["start"] - 0.5 <= w["start"] <= w["end"] <= speech["end"] + 0.5 for w in words)
    assert all(0.0 <= w["probability"] <= 1.0 for w in words)


def test_batched_whisper_keeps_segments_of_a_few_seconds_and_hears_what_the_sequential_one_hears(tmp_path):
    import subprocess

    from vidprep.stages.probe import ProbeVideo
    from vidprep.stages.transcribe import TranscribeSpeech

    said = " ".join(f"Sentence number {n}. The quick brown fox jumps over the lazy dog." for n in
                    ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven"))
    subprocess.run(["espeak-ng", "-w", str(tmp_path / "speech.wav"), said], check=True)
    subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", "color=c=blue:s=64x48:r=2",
                    "-i", str(tmp_path / "speech.wav"), "-shortest", "-c:v", "libx264", "-c:a", "aac",
                    str(tmp_path / "speech.mp4")], check=True)
    video = ProbeVideo().run(str(tmp_path / "speech.mp4"))
    assert video["duration"] > 45  # more than one 30-second piece of the batched pipeline
    batched, sequential = ([row for rows in TranscribeSpeech(whisper_batch_size=size).run(video) for row in rows]
                           for size in (8, 0))
    assert len(batched) >= 6
    for row in batched:
        assert row["end"] - row["start"] < 15
        assert row["start"] - 0.5 <= row["words"][0]["start"] <= row["words"][-1]["end"] <= row["end"] + 0.5
    heard = [_words(" ".join(row["text"] for row in rows)) for rows in (batched, sequential)]
    assert word_error_rate(heard[1], heard[0]) <= 0.1 and word_error_rate(_words(said), heard[0]) <= 0.2


def test_video_without_audio_gets_an_empty_transcript_not_a_failure(artifacts):
    store, keys, ids, _, summary = artifacts
    segments = store.read(TRANSCRIPTS, ids["places.mp4"], keys["transcript"])
    assert segments == [] and store.detail(ids["places.mp4"], keys["transcript"]) == "no audio track"
    assert not any(f["path"].endswith("places.mp4") for f in summary.failures)


def test_frame_captions_at_the_configured_positions(artifacts):
    store, keys, ids, _, _ = artifacts
    captions = store.read(FRAME_CAPTIONS, ids["scenes.mp4"], keys["frame_captions"])
    assert [c.position for c in captions] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert [c.timestamp for c in captions] == [0.0, 4.0, 8.0, 12.0, 15.0]
    assert "cat" in captions[0].caption
    assert "EXIT" in captions[2].caption and "espresso" in captions[2].caption
    short = store.read(FRAME_CAPTIONS, ids["short.mp4"], keys["frame_captions"])
    assert len(short) == 5 and {c.timestamp for c in short} == {0.0}


def test_segment_captions_follow_the_scenes(artifacts):
    store, keys, ids, _, _ = artifacts
    captions = store.read(SEGMENT_CAPTIONS, ids["scenes.mp4"], keys["segment_captions"])
    assert [(c.start, c.end) for c in captions] == [(0.0, 10.0), (10.0, 16.0)]
    assert captions[0].caption.index("cat") < captions[0].caption.index("Then:")
    places = store.read(SEGMENT_CAPTIONS, ids["places.mp4"], keys["segment_captions"])
    # RapidOCR drops the spaces between words of this font.
    assert "BreakingNews:SummerPalace" in places[0].caption.replace(" ", "")


def test_summary_written_through_the_local_llm_server(artifacts):
    store, keys, ids, _, summary = artifacts
    for name in ("scenes.mp4", "places.mp4", "short.mp4"):
        assert store.read(SUMMARIES, ids[name], keys["summary"])[0].summary.strip()
    rows = store.scan("summaries").to_pylist()
    port = os.environ["VIDPREP_LLM_PORT"]
    assert len(rows) == 3 and {r["model"] for r in rows} == {f"smollm2@http://127.0.0.1:{port}/v1"}
    assert summary.llm_calls >= 3


def test_local_llm_replies_do_not_depend_on_the_requests_before(local_llm):
    """A resumed run repeats the prompt a kill cut off and sends the rest in another order. A prompt asked
    three times in a row, after one that shares its start, gets one reply (with llama-cpp-python's reuse
    of the previous request's KV cache, the bicycle story's second and third replies differed from its
    first)."""
    from hydra.utils import instantiate

    client = instantiate(local_llm.client, cache=False, max_tokens=300)

    def story(topic: str) -> str:
        return client.complete([{"role": "system", "content": "You write long, detailed stories."},
                                {"role": "user", "content": f"Write a long story about {topic}."}])

    story("a cat and a dog in a kitchen")
    replies = [story("a man repairing a bicycle") for _ in range(3)]
    assert replies == replies[:1] * 3


def test_second_run_makes_no_model_and_no_llm_call(precomputed):
    cfg, _, _ = precomputed
    again = precompute(cfg)
    assert (again.stage_runs, again.llm_calls) == (0, 0)
    assert "stage runs (model work): 0; LLM calls: 0" in "\n".join(again.lines())


def test_transcript_backend_is_chosen_by_what_is_installed_and_named_in_the_key():
    from vidprep.conf.checks import ConfigError
    from vidprep.stages.transcribe import TranscribeSpeech

    auto = TranscribeSpeech()
    assert auto.backend == "faster_whisper" and auto.params()["backend"] == "faster_whisper"
    assert auto.key({}) == TranscribeSpeech(backend="faster_whisper").key({})
    with pytest.raises(ConfigError, match=r"needs whisperx, which is not installed: pip install 'vidprep\[whisperx\]'"):
        TranscribeSpeech(backend="whisperx")
    with pytest.raises(ConfigError, match="stages.transcript.backend"):
        TranscribeSpeech(backend="vosk")


def test_each_vision_model_runs_once_per_frame_through_the_store(tmp_path):
    import io

    from vidprep.jobs.sample import _frame
    from vidprep.stages.models.describers import ShippedDescriber
    from vidprep.stages.models.embedders import LabelTextEmbedder
    from vidprep.stages.context import WorkerContext
    from vidprep.store.store import Store

    def jpeg(name: str, text: str | None) -> bytes:
        buffer = io.BytesIO()
        _frame(name, text).save(buffer, "JPEG")
        return buffer.getvalue()

    def counted(model, method: str) -> list:
        runs, run = [], getattr(model, method)
        setattr(model, method, lambda image, *args: runs.append(image) or run(image, *args))
        return runs

    rocket, cat = jpeg("rocket", "LAUNCH"), jpeg("chelsea", "CAT")
    uri = str(tmp_path / "db")
    # Two workers, each with its own context on one store: the describer's reads the embedder's labels.
    embedder, embedder_worker = LabelTextEmbedder(), WorkerContext(Store(uri))
    embedder.setup(embedder_worker)
    labelled = counted(embedder.classifier, "_top")
    embedder.embed_images([rocket, cat])
    embedder_worker.flush()
    describer, describer_worker = ShippedDescriber(), WorkerContext(Store(uri))
    describer.setup(describer_worker)
    classified, read = counted(describer.classifier, "_top"), counted(describer.reader, "_lines")
    # A run of alike frames is described once: the second rocket's text is not read.
    text, confidence = describer.describe([rocket, rocket, cat])
    assert labelled == [rocket, cat] and classified == [] and read == [rocket, cat]
    assert text.count("Looks like") == 2 and '"LAUNCH"' in text and '"CAT"' in text
    assert describer.describe([cat]) == ShippedDescriber().describe([cat]) and read == [rocket, cat]
    describer_worker.flush()
    stored = Store(uri).scan("frame_readings", columns=["model"])["model"].to_pylist()
    assert sorted(stored) == ["mobilenetv2-7/top20"] * 2 + ["rapidocr-1.4"] * 2
    assert confidence == pytest.approx(sum(ShippedDescriber().describe([i])[1] for i in (rocket, rocket, cat)) / 3)


def test_the_sample_precompute_stored_each_frames_labels_for_the_caption_stages(artifacts):
    import hashlib

    store, keys, _, _, _ = artifacts
    jpegs = store.scan("frames", f"stage_key = '{keys['frames']}'", ["jpeg"])["jpeg"].to_pylist()
    readings = store.scan("frame_readings", columns=["row_id", "model"]).to_pylist()
    stored = {model: {r["row_id"] for r in readings if r["model"] == model} for model in {r["model"] for r in readings}}

    def keyed(model: str) -> set[str]:
        return {hashlib.sha256(model.encode() + b"\0" + jpeg).hexdigest() for jpeg in jpegs}

    assert keyed("mobilenetv2-7/top20") <= stored["mobilenetv2-7/top20"]
    # Text is read off caption frames only, not off every frame.
    assert stored["rapidocr-1.4"] and stored["rapidocr-1.4"] <= keyed("rapidocr-1.4")
    assert len(stored["rapidocr-1.4"]) < len(jpegs)
