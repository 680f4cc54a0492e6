"""The `vidprep` command as a user runs it."""

import subprocess
import sys

import pytest

from pipeline.plan import build_plan


def vidprep(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jobs.cli", *args], capture_output=True, text=True, timeout=300)


def test_search_prints_the_cat_scene_first(precomputed):
    cfg, store, _ = precomputed
    done = vidprep("search", "all", "a cat", "-k", "2", f"store.uri={cfg.store.uri}")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith(("scenes ", "scenes_copy ")) for line in lines)
    assert float(lines[0].split("t=")[1].split("s")[0]) < 4.0


def test_search_names_an_unknown_video(precomputed):
    cfg, _, _ = precomputed
    done = vidprep("search", "no-such-video", "a cat", f"store.uri={cfg.store.uri}")
    assert done.returncode != 0 and "no video 'no-such-video'" in done.stderr


def test_bad_config_value_is_a_clear_error(tmp_path, sample_dir):
    done = vidprep("precompute", f"store.uri={tmp_path / 'db'}", "dataset=folder",
                   f"dataset.manifest={sample_dir}", "stages.frames.fps=0")
    assert done.returncode == 2
    assert "stages.frames.fps must be > 0, got 0" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "db").exists()


def test_unknown_command_prints_usage():
    done = vidprep("precompte")
    assert done.returncode == 2 and "precompute" in done.stdout


def test_keys_are_stable_across_processes(precomputed):
    cfg, _, _ = precomputed
    code = ("from jobs.config import load_config; from pipeline.plan import build_plan; "
            f"print(build_plan(load_config(['store.uri={cfg.store.uri}']).stages).keys['frame_embeddings'])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == build_plan(cfg.stages).keys["frame_embeddings"]


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
    ("precompute", "stages.segments.seconds=-5", "stages.segments.seconds must be > 0, got -5"),
    ("precompute", "stages.frames.fps=-1", "stages.frames.fps must be > 0, got -1"),
    ("answer", "method=nosuchmethod", "Could not find 'method/nosuchmethod'"),
    ("precompute", "stages.frames.fps=fast", "stages.frames.fps"),
])
def test_bad_configs_against_an_existing_store_are_clear_errors_and_change_nothing(
        precomputed, sample_dir, command, override, message):
    from tests.test_resume import _snapshot

    cfg, store, _ = precomputed
    before = _snapshot(store)
    done = vidprep(command, f"store.uri={cfg.store.uri}", "dataset=folder", f"dataset.manifest={sample_dir}", override)
    # Hydra itself reports an unknown config option (exit 1); vidprep reports bad values (exit 2).
    assert done.returncode in (1, 2) and message in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert _snapshot(store) == before
