"""The `vidprep` command as a user runs it."""

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vidprep.jobs.cli import COMMANDS
from vidprep.pipeline.plan import build_plan


# The console script `pip install` made, as a user runs it.
VIDPREP = str(Path(sys.executable).with_name("vidprep"))


def vidprep(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([VIDPREP, *args], capture_output=True, text=True, timeout=300, env=os.environ | env)


def test_search_prints_the_cat_scene_first(precomputed):
    cfg, store, _ = precomputed
    done = vidprep("search", "all", "a cat", "-k", "2", f"store.uri={cfg.store.uri}")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith(("scenes ", "scenes_copy ")) for line in lines)
    assert float(lines[0].split("t=")[1].split("s")[0]) < 4.0


@pytest.mark.parametrize("mode", ["text", "hybrid"])
def test_search_mode_setting_reaches_the_store(precomputed, mode, capsys):
    from vidprep.jobs import search

    # The command's own `run`, in this process (whose text model is loaded already).
    cfg, _, _ = precomputed
    search.run(argparse.Namespace(video="scenes.mp4", text="a cup of coffee", k=1,
                                  overrides=[f"store.uri={cfg.store.uri}", f"search.mode={mode}"]))
    printed = capsys.readouterr().out
    assert 8.0 <= float(printed.split("t=")[1].split("s")[0]) < 12.0 and "espresso" in printed


def test_search_names_an_unknown_video(precomputed):
    cfg, _, _ = precomputed
    done = vidprep("search", "no-such-video", "a cat", f"store.uri={cfg.store.uri}")
    assert done.returncode != 0 and "no video 'no-such-video'" in done.stderr


def test_bad_config_value_is_a_clear_error(tmp_path, sample_dir):
    done = vidprep("precompute", f"store.uri={tmp_path / 'db'}", "dataset=folder",
                   f"dataset.manifest={sample_dir}", "stages.frames.fps=0")
    assert done.returncode == 2
    assert "stages.frames.fps must be in 0.001..240 frames per second, got 0" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "db").exists()


def test_every_commands_help_and_completion_import_none_of_the_work():
    # What `vidprep COMMAND --help` and tab completion build: no store, model or endpoint library.
    code = ("import sys; from vidprep.jobs.cli import COMMANDS, parser; [parser(c) for c in COMMANDS]; "
            "print(sorted(m for m in ('lancedb', 'pyarrow', 'torch', 'openai', 'transformers') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr[-2000:]


def test_unknown_command_prints_usage():
    done = vidprep("precompte")
    assert done.returncode == 2 and "invalid choice: 'precompte'" in done.stderr and "precompute" in done.stderr


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_has_help_with_its_own_options(command):
    done = vidprep(command, "--help")
    assert done.returncode == 0 and done.stdout.startswith(f"usage: vidprep {command} "), done.stderr
    words = " ".join(done.stdout.split())
    if command != "sample":
        assert "KEY=VALUE" in words and "method: caviar, caviar_agent, caviar_self_evaluation, caviar_single_program, direct, direct_transcript, llovi, random, traveler, videoagent2" in words
    assert not list(Path.cwd().glob("--help")), "a command took --help for a folder name"


@pytest.mark.parametrize("line,expected", [
    ("vidprep answer method=", {"method=caviar", "method=caviar_agent", "method=caviar_self_evaluation",
                                "method=caviar_single_program", "method=direct",
                                "method=direct_transcript", "method=llovi", "method=random", "method=traveler",
                                "method=videoagent2"}),
    ("vidprep answer method=tr", {"method=traveler"}),
    ("vidprep precompute data", {"dataset="}),
    ("vidprep answer prof", {"profile@llm.client.profile="}),
    ("vidprep answer profile@vision.llm.profile=qw", {"profile@vision.llm.profile=qwen2.5-vl-7b-vllm"}),
    ("vidprep sea", {"search"}),
])
def test_shell_completion_lists_commands_and_config_options(tmp_path, line, expected):
    # argcomplete's protocol, as bash's completion function drives it (`eval "$(register-python-argcomplete vidprep)"`).
    out = tmp_path / "completions"
    done = vidprep(_ARGCOMPLETE="1", _ARGCOMPLETE_IFS="\n", COMP_LINE=line, COMP_POINT=str(len(line)),
                   _ARGCOMPLETE_STDOUT_FILENAME=str(out))
    assert done.returncode == 0, done.stderr
    assert {word.strip() for word in out.read_text().splitlines()} == expected


def test_keys_are_stable_across_processes(precomputed):
    cfg, _, _ = precomputed
    code = ("from vidprep.jobs.config import load_config; from vidprep.pipeline.plan import build_plan; "
            f"print(build_plan(load_config(['store.uri={cfg.store.uri}']).stages).keys['frame_embeddings'])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == build_plan(cfg.stages).keys["frame_embeddings"]


# The keys the default config and describer=vlm had before the lifecycle and derived key parameters
# (commit 4e33e54): a refactor that changes a key makes every store compute everything again. Changed on
# purpose since: the summary's (its chunk budget now comes from the LLM's profile), then the segments'
# and what reads them (segments v2: a video's duration is the longest of its streams', so a VFR file's
# last frames lie in a segment).
KEYS_OF_4E33E54 = {
    (): {"frames": "frames-dc1e41992fc2", "segments": "segments-cce832b73a41",
         "frame_embeddings": "frame_embeddings-6660753c9dcd", "segment_captions": "segment_captions-2f938c2fbf85",
         "frame_captions": "frame_captions-c7c79f3b38d9", "transcript": "transcript-228cf199eef8",
         "summary": "summary-fc5dbea20d7d"},
    ("describer=vlm", "llm=openai"): {"segment_captions": "segment_captions-9497b08423f8",
                                      "frame_captions": "frame_captions-98e4876848eb", "summary": "summary-63bd927d8091"},
}


def test_stage_keys_are_those_stores_were_written_with(monkeypatch):
    from vidprep.jobs.config import load_config

    # The endpoints at their defaults: an LLM's URL is part of the summary's model.
    monkeypatch.setenv("VIDPREP_LLM_PORT", "8765")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    for overrides, keys in KEYS_OF_4E33E54.items():
        built = build_plan(load_config(["store.uri=/nowhere", *overrides]).stages).keys
        assert {name: built[name] for name in keys} == keys, overrides


def test_show_prints_a_videos_artifacts(precomputed, sample_dir):
    cfg, _, _ = precomputed
    done = vidprep("show", str(sample_dir / "places.mp4"), f"store.uri={cfg.store.uri}")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "10.00 s" in out and "audio: no" in out
    assert "[   0.0-  10.0s] Looks like:" in out
    assert "(empty: no audio track)" in out
    keys = build_plan(cfg.stages).keys
    for stage in ("frames", "segments", "frame_embeddings", "segment_captions", "frame_captions", "transcript",
                  "summary"):
        assert f"* {keys[stage]}" in out


@pytest.mark.parametrize("command,override,message", [
    ("precompute", "stages.segments.seconds=-5", "stages.segments.seconds must be > 0 seconds, got -5.0"),
    ("precompute", "stages.frames.fps=-1", "stages.frames.fps must be in 0.001..240 frames per second, got -1"),
    ("precompute", "stages.frames.fps=1e-9", "stages.frames.fps must be in 0.001..240 frames per second, got 1e-09"),
    # A NaN passes every comparison: it once stored one frame per video and marked each complete.
    ("precompute", "stages.frames.fps=nan", "stages.frames.fps must be a finite number, got nan"),
    # Once every video failed on it ("cannot convert float NaN to integer", "ffmpeg timed out after nan s").
    ("precompute", "stages.segments.seconds=nan", "stages.segments.seconds must be a finite number, got nan"),
    ("precompute", "stages.frames.timeout_s=-5", "stages.frames.timeout_s must be > 0 seconds, got -5.0"),
    # A key no class takes: once a 5-line TypeError from Hydra, exit 1.
    ("precompute", "+stages.frames.nosuchkey=1", "stages.frames.nosuchkey: DecodeFrames has no setting 'nosuchkey'"),
    ("answer", "llm.client.timeout_s=inf", "llm.client.timeout_s must be a finite number, got inf"),
    ("answer", "method=nosuchmethod", "Could not find 'method/nosuchmethod'"),
    ("precompute", "stages.frames.fps=fast",
     "stages.frames.fps: Value 'fast' of type 'str' could not be converted to Float"),
    ("precompute", "llm.client.timeout_s=soon",
     "llm.client.timeout_s: Value 'soon' of type 'str' could not be converted to Float"),
])
def test_bad_configs_against_an_existing_store_are_clear_errors_and_change_nothing(
        precomputed, sample_dir, command, override, message):
    from tests.test_resume import _snapshot

    cfg, store, _ = precomputed
    before = _snapshot(store)
    done = vidprep(command, f"store.uri={cfg.store.uri}", "dataset=folder", f"dataset.manifest={sample_dir}", override)
    # An unknown config option (Hydra's composition) and a bad value (vidprep's checks) alike: one line, exit 2.
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and message in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert _snapshot(store) == before


def test_damaged_and_odd_files_end_with_a_summary_a_failure_exit_and_one_line_errors(tmp_path, local_llm):
    from tests.conftest import SHARED_VIDEOS
    from tests.test_decode import ffmpeg

    # A folder name Hydra's grammar refuses bare: vidprep quotes it.
    folder = tmp_path / "vidéos à voir"
    (folder / "more").mkdir(parents=True)
    whole = tmp_path / "whole.mp4"
    ffmpeg("-f", "lavfi", "-i", "testsrc2=s=320x240:r=25:d=4", "-c:v", "libx264", "-pix_fmt", "yuv420p",
           "-movflags", "+faststart", whole)
    data = bytearray(whole.read_bytes())
    mdat = data.index(b"mdat") + 4
    data[mdat:] = bytes(len(data) - mdat)
    (folder / "zeroed.mp4").write_bytes(bytes(data))
    (folder / "damaged.mp4").write_bytes((SHARED_VIDEOS / "corrupted.mp4").read_bytes())
    ffmpeg("-f", "lavfi", "-i", "sine=d=1", "-c:a", "aac", folder / "tone.m4a")
    store = f"store.uri={tmp_path / 'db'}"
    # One model stage (its actor is what Ray's C++ core prints about) is enough for what the command says.
    stages = [f"~stages.{name}" for name in ("frame_embeddings", "segment_captions", "transcript", "summary")]
    started = time.monotonic()
    done = vidprep("precompute", store, "dataset=folder", f"dataset.manifest={folder}", f"data_dir={tmp_path / 'data'}",
                   *stages)
    elapsed = time.monotonic() - started
    assert done.returncode == 3, done.stderr[-3000:]
    # The summary's wall time is what the user waited for: imports, model loads, Ray's start and its shutdown.
    wall = float(done.stdout.split("wall time: ")[1].split(" s")[0])
    assert elapsed - 0.5 < wall <= elapsed + 0.05  # printed to 0.1 s
    # In a pipe: the command's own progress lines, Ray's logs in the data folder's log file, not here.
    assert "videos: 2/2 done, 1 failed" in done.stderr
    assert "streaming_executor" not in done.stderr and "Token authentication" not in done.stderr, done.stderr
    assert "streaming_executor" in (tmp_path / "data" / "logs" / "ray.log").read_text()
    # Ray's C++ core prints its own lines (an actor's constructor arguments, Ray issue 57733): the log has them.
    assert "core_worker.cc" not in done.stderr and "core_worker.cc" in (tmp_path / "data" / "logs" / "ray.log").read_text()
    assert "videos: 2 (1 done, 0 skipped as complete, 1 failed" in done.stdout
    assert "not videos, skipped: 2 (more/, tone.m4a (no video stream: audio only))" in done.stdout
    assert f"PARTIAL {folder / 'damaged.mp4'}: partial: " in done.stdout and "Invalid NAL unit size" in done.stdout
    assert f"FAILED {folder / 'zeroed.mp4'} at frames: no frame could be decoded" in done.stdout

    shown = vidprep("show", "zeroed", store, *stages)
    assert shown.returncode == 0 and "failed (not complete since):" in shown.stdout
    assert "frames (frames-" in shown.stdout and "no frame could be decoded" in shown.stdout
    assert "(partial: " in vidprep("show", "damaged", store, *stages).stdout
    for command in (["search", "zeroed", "a cat"], ["show", "nothing-here"], ["-v", "show", "nothing-here"]):
        missing = vidprep(*command, store)
        lines = missing.stderr.strip().splitlines()
        assert missing.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), missing.stderr


def test_an_unreachable_llm_endpoint_stops_the_run_at_once_naming_it(tmp_path, sample_dir):
    started = time.monotonic()
    done = vidprep("precompute", f"store.uri={tmp_path / 'db'}", "dataset=folder", f"dataset.manifest={sample_dir}",
                   "llm=openai", "llm.client.base_url=http://127.0.0.1:9/v1", "ray.progress_bars=false",
                   f"data_dir={tmp_path / 'data'}")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "error: the LLM endpoint http://127.0.0.1:9/v1 does not answer" in done.stderr
    # Before Ray started (which would have opened its log).
    assert not (tmp_path / "data" / "logs" / "ray.log").exists() and time.monotonic() - started < 60


def test_a_missing_mandatory_setting_is_named(tmp_path):
    done = vidprep("precompute", f"store.uri={tmp_path / 'db'}", "dataset=folder")
    assert done.returncode == 2 and "error: dataset.manifest is not set" in done.stderr
    assert "Traceback" not in done.stderr


def test_progress_in_a_pipe_is_a_line_every_few_seconds_whatever_finishes_and_one_at_the_end():
    import io

    from vidprep.pipeline.progress import Progress

    out = io.StringIO()
    # A resumed run: 2 of 6 were done before; nothing finishes for a while, then two do.
    with Progress("questions", 6, stream=out, every_s=0.2, done=2, detail=lambda: "oldest: q7, step 3") as progress:
        time.sleep(0.5)
        progress.advance(1, 1)
        progress.advance(1)
    lines = out.getvalue().splitlines()
    assert len(lines) >= 3, lines
    assert lines[0] == "questions: 2/6 done, 0 failed, 0.00/s, time left unknown; oldest: q7, step 3"
    assert lines[1] == lines[0]
    assert lines[-1].startswith("questions: 4/6 done, 1 failed, ") and lines[-1].endswith(" s left")


@pytest.mark.parametrize("command", [["evaluate"], ["export", "--run", "x"], ["show", "a"]])
def test_a_command_that_only_reads_the_store_never_creates_one(tmp_path, command):
    done = vidprep(*command, f"store.uri={tmp_path / 'nothing-here'}")
    assert done.returncode == 2 and done.stderr.strip() == (
        f"error: no store at {tmp_path / 'nothing-here'}: run `vidprep precompute` first, or point store.uri (or "
        "VIDPREP_DATA) at the one you computed"), done.stderr[-2000:]
    assert not (tmp_path / "nothing-here").exists()
