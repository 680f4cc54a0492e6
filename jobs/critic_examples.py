"""vidprep critic-examples --run KEY --out FILE [--count 4]: CAViAR's critic examples for a dataset,
made of real traces: run CAViAR on a held-out set of the dataset's questions (never the ones you
evaluate on), then give that run's key. Each example is a question, every strategy's trace, a brief
critique and the winning strategies (those the benchmark's scoring counts right); use the file with
`method.critic_examples=FILE` or name it as `critic_examples` in the dataset's config."""

import argparse
from pathlib import Path

from vidprep.conf.checks import ArtifactMissing
from vidprep.jobs.config import add_overrides, load_config

# The work's modules are imported in `run`: `vidprep COMMAND --help` and completion stay fast.


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", required=True, metavar="KEY", help="a CAViAR answer run on held-out questions")
    parser.add_argument("--out", required=True, type=Path, metavar="FILE", help="the examples file to write")
    parser.add_argument("--count", type=int, default=4, help="examples to keep (the paper's 4)")
    add_overrides(parser)


def run(args: argparse.Namespace) -> None:
    from vidprep.evaluation.critic_examples import critic_examples
    from vidprep.store.settings import StoreSettings

    cfg = load_config(args.overrides)
    store = StoreSettings.from_config(cfg.store).open_existing()
    rows = store.predictions([args.run], ["qid", "method", "task", "question_json", "trace_json"])
    if not rows or not rows[0]["method"].startswith("caviar"):
        raise ArtifactMissing(f"run {args.run} is not a CAViAR answer run in {store.uri}; "
                              "`vidprep evaluate` lists the runs")
    examples = critic_examples(rows, args.count)
    if not examples:
        raise ArtifactMissing(f"run {args.run}: no question with a ground truth that some strategy got right; "
                              "answer more held-out questions")
    args.out.write_text("\n\n".join(examples) + "\n")
    print(f"wrote {len(examples)} critic examples from {len(rows)} questions of run {args.run} to {args.out}\n"
          f"use them: vidprep answer method=caviar method.critic_examples={args.out.resolve()}")
