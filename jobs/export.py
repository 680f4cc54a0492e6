"""vidprep export --run KEY [--out DIR]: an answer run's files for tools outside vidprep: the
benchmark's evaluation or submission file where it has one (NExT-QA's eval_mc.py result file,
EgoSchema's grader answers) and samples.jsonl, one line per question (question, prediction, target,
score, trace id)."""

import argparse
from pathlib import Path

from vidprep.jobs.config import add_overrides, load_config

# The work's modules are imported in `run`: `vidprep COMMAND --help` and completion stay fast.


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", required=True, metavar="KEY",
                        help="the answer run's key (`vidprep evaluate` lists them)")
    parser.add_argument("--out", type=Path, help="folder for the files (default: exports/KEY)")
    add_overrides(parser)


def run(args: argparse.Namespace) -> None:
    from vidprep.evaluation.exports import export_run
    from vidprep.store.settings import StoreSettings

    cfg = load_config(args.overrides)
    store = StoreSettings.from_config(cfg.store).open_existing()
    written, incomplete = export_run(store, args.run, args.out or Path("exports") / args.run)
    for path in written:
        print(f"written: {path}")
    if incomplete:
        print(f"warning: {incomplete}")
