"""vidprep evaluate [--run KEY ...] [--resample video|question]: scores of answer runs in the store (all by
default), as each benchmark's own script computes them, with 95% intervals, invalid answers counted
apart, failed and refused questions left out and shown as coverage, and costs; several runs are then
compared on the questions they all answered, pair by pair with a paired interval and test."""

import argparse

from vidprep.conf.checks import ArtifactMissing
from vidprep.jobs.config import add_overrides, config_groups, load_config
from vidprep.stages.models.profiles import model_prices

# The work's modules are imported in `run`: `vidprep COMMAND --help` and completion stay fast.


def method_defaults() -> dict[str, dict]:
    """Each `method=` option's default settings, flattened."""
    from vidprep.evaluation.tracking import flatten, run_settings

    return {option: flatten(run_settings(load_config([f"method={option}"]))) for option in config_groups()["method"]}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", action="append", default=[], metavar="KEY", help="an answer run's key (repeatable)")
    parser.add_argument("--resample", choices=("video", "question"), default="video",
                        help="what the bootstrap intervals resample: whole videos (default; questions of one video "
                             "are not independent) or single questions")
    add_overrides(parser)


def run(args: argparse.Namespace) -> None:
    from vidprep.evaluation.benchmarks import run_benchmark
    from vidprep.evaluation.scoring import format_comparison, format_report, incomplete_note, report
    from vidprep.evaluation.tracking import beyond_defaults
    from vidprep.store.settings import StoreSettings

    cfg = load_config(args.overrides)
    store = StoreSettings.from_config(cfg.store).open_existing()
    rows = store.predictions(args.run, [
        "run_key", "qid", "method", "task", "qtype", "question_json", "prediction_json", "valid", "error", "llm_calls",
        "cache_hits", "prompt_tokens", "completion_tokens", "usage_json", "seconds", "visited"])
    runs = sorted({(r["method"], r["run_key"]) for r in rows})
    if not runs:
        raise ArtifactMissing(f"no answer runs{' ' + ', '.join(args.run) if args.run else ''} in {store.uri}; "
                              "run `vidprep answer` first")
    recorded, defaults = store.answer_runs(), method_defaults()
    benchmarks = {key: run_benchmark(recorded.get(key, {})) for _, key in runs}
    for method, key in runs:
        result = report([r for r in rows if r["run_key"] == key], model_prices(cfg.prices), benchmarks[key],
                        args.resample)
        print("\n".join(format_report(method, key, result)))
        if note := incomplete_note(recorded.get(key, {}), [r for r in rows if r["run_key"] == key]):
            print(f"  {note}")
        if "settings" in recorded.get(key, {}):
            print(f"  settings: {beyond_defaults(recorded[key]['settings'], defaults)}")
    if len(runs) > 1:
        print("\n".join(["", *format_comparison(runs, rows, benchmarks, args.resample)]))
