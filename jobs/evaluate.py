"""vidprep evaluate [--run KEY ...]: scores of answer runs in the store (all by default), as each
benchmark's own script computes them, with 95% intervals, invalid answers and LLM failures counted
apart, and costs; several runs are then compared on the questions they all answered."""

import argparse

from vidprep.jobs.config import add_overrides, load_config
from vidprep.store.settings import StoreSettings
from vidprep.pipeline.scoring import format_comparison, format_report, report
from vidprep.store.store import ArtifactMissing


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", action="append", default=[], metavar="KEY", help="an answer run's key (repeatable)")
    add_overrides(parser)


def run(args: argparse.Namespace) -> None:
    cfg = load_config(args.overrides)
    store = StoreSettings.from_config(cfg.store).open()
    rows = store.predictions(args.run, [
        "run_key", "method", "task", "qtype", "question_json", "prediction_json", "valid", "error", "llm_calls",
        "cache_hits", "prompt_tokens", "completion_tokens", "usage_json", "seconds", "visited"])
    runs = sorted({(r["method"], r["run_key"]) for r in rows})
    if not runs:
        raise ArtifactMissing(f"no answer runs{' ' + ', '.join(args.run) if args.run else ''} in {store.uri}; "
                              "run `vidprep answer` first")
    for method, key in runs:
        print("\n".join(format_report(method, key, report([r for r in rows if r["run_key"] == key], cfg.prices))))
    if len(runs) > 1:
        print("\n".join(["", *format_comparison(runs, rows)]))
