"""LLM calls of a sweep over one shared store against each method on its own."""

from pathlib import Path

from vidprep.jobs.bench.figures import BenchRun, Figure, _vidprep


def sweep_calls(sample: Path, work: Path) -> list[Figure]:
    """LLM calls of a three-method sweep over one shared store (with its response cache) vs each method
    computing its own summaries without a cache; then the same sweep run again."""
    methods = ["videoagent2", "traveler", "llovi"]
    limits = {"videoagent2": ["method.max_steps=2"], "traveler": ["method.max_iterations=2"], "llovi": []}
    shared = work / "sweep-shared"
    calls_shared = _precompute_calls(sample, shared, [])
    calls_alone = 0
    for method in methods:
        calls_shared += _answer_calls(sample, shared, [f"method={method}", *limits[method]])
        alone = work / f"sweep-alone-{method}"
        off = ["llm.client.cache=false"]
        calls_alone += _precompute_calls(sample, alone, off) + _answer_calls(
            sample, alone, [f"method={method}", *limits[method], *off])
    rerun = sum(_answer_calls(sample, shared, [f"method={m}", *limits[m]]) for m in methods)
    return [Figure("LLM calls of a 3-method sweep", "no shared store, no cache (calls)", calls_alone,
                   calls_shared, "calls"),
            Figure("LLM calls of the same sweep run again", "no shared store, no cache (calls)", calls_alone,
                   rerun, "calls")]


def _precompute_calls(sample: Path, store: Path, extra: list[str]) -> int:
    out = _vidprep("precompute", "dataset=folder", f"dataset.manifest={sample}", f"store.uri={store}", *extra)
    return int(out.split("LLM calls: ")[1].split()[0])


def _answer_calls(sample: Path, store: Path, extra: list[str]) -> int:
    out = _vidprep("answer", "dataset=sample", f"dataset.manifest={sample}", f"store.uri={store}", *extra)
    return int(out.split("LLM calls: ")[1].split(";")[0])


def figures(run: BenchRun) -> list[Figure]:
    return sweep_calls(run.sample, run.work)
