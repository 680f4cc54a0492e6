"""Precompute throughput with 2 Ray CPUs against 1."""

from pathlib import Path

from vidprep.jobs.bench.figures import BenchRun, Figure, _vidprep
from vidprep.store.store import Store


def cpu_figure(sample: Path, work: Path) -> Figure:
    walls = {}
    for cpus in (1, 2):
        store = work / f"cpus-{cpus}"
        _vidprep("precompute", "dataset=folder", f"dataset.manifest={sample}", f"store.uri={store}",
                 f"ray.num_cpus={cpus}", "llm.client.cache=false")
        walls[cpus] = Store(str(store)).last_run("precompute")["wall_seconds"]
    return Figure("precompute throughput with 2 Ray CPUs", "1 Ray CPU (runs/s)", 1 / walls[1], 1 / walls[2],
                  "1/s")


def figures(run: BenchRun) -> list[Figure]:
    return [cpu_figure(run.sample, run.work)]
