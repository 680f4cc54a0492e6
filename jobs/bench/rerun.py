"""A second precompute of the sample, which finds everything done."""

from vidprep.jobs.bench.figures import BenchRun, Figure


def figures(run: BenchRun) -> list[Figure]:
    first, second, _, _ = run.precomputed()
    return [Figure("full precompute of the sample, second run", "first run (s)", first.wall_seconds,
                   second.wall_seconds, "s", "<= 0.02")]
