"""The decode stage's peak memory on a long video against a short one."""

import json
import subprocess
import sys
from pathlib import Path

from hydra.utils import instantiate

from vidprep.jobs.bench.figures import BenchRun, Figure
from vidprep.jobs.config import load_config
from vidprep.pipeline.executor import run_stage
from vidprep.stages.context import WorkerContext
from vidprep.stages.probe import ProbeVideo
from vidprep.store.store import Store


def decode_peak_kib(path: Path, scratch: Path) -> int:
    """Peak memory (this process + its ffmpeg) of the decode stage writing one video to a store."""
    code = ("import json, resource, sys; from vidprep.jobs.bench.memory import decode_into_store; "
            "decode_into_store(sys.argv[1], sys.argv[2]); "
            "print(json.dumps([resource.getrusage(r).ru_maxrss for r in "
            "(resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]))")
    done = subprocess.run([sys.executable, "-c", code, str(path), str(scratch)], capture_output=True, text=True,
                          check=True)
    return sum(json.loads(done.stdout.strip().splitlines()[-1]))


def run_or_raise(store: Store, stage, key: str, inputs: list, video: dict) -> None:
    (outcome,) = run_stage(WorkerContext(store), stage, key, inputs, [video], "bench", "local")
    if outcome.error is not None:
        raise outcome.error


def decode_into_store(path: str, store_uri: str) -> None:
    stage = instantiate(load_config([]).stages.frames)
    run_or_raise(Store(store_uri), stage, stage.key({}), [], ProbeVideo().run(path))


def figures(run: BenchRun) -> list[Figure]:
    one, ten = run.looped(60), run.looped(600)
    return [Figure("decode peak memory, 10-minute video", "1-minute video (KiB)",
                   decode_peak_kib(one, run.work / "mem-1"), decode_peak_kib(ten, run.work / "mem-10"), "KiB", "<= 1.2")]
