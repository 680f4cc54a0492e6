"""vidprep import-captions [--format F] [PATH]: load published captions as a store's frame captions and
derive segment captions, caption embeddings and summaries from them.

Without PATH the dataset says where its captions are (dataset=nextqa_dev); with PATH the videos
are known by name only (dataset=captions) unless a dataset is given too.
"""

import argparse
from pathlib import Path

from vidprep.jobs.config import add_overrides, load_config, quoted_for_hydra
from vidprep.jobs.errors import finish, job_started
from vidprep.jobs.serve_llm import ensure_local_llm

# The work's modules are imported in `run`: `vidprep COMMAND --help` and completion stay fast.


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", nargs="?", help="caption folder or file (default: the dataset's, e.g. dataset=nextqa_dev)")
    parser.add_argument("--format", help="videoagent ({video}_cap.json), llovi ({uid: [...]}), "
                                         "jsonl ({video, t, caption} lines)")
    add_overrides(parser)


def run(args: argparse.Namespace) -> None:
    from vidprep.pipeline.imported import import_captions

    overrides = list(args.overrides)
    if args.path and "=" in args.path:  # no path given: the first override took its place
        overrides.insert(0, args.path)
        args.path = None
    if args.path:
        if not any(o.startswith("dataset=") for o in overrides):
            overrides.insert(0, "dataset=captions")
        overrides.append(quoted_for_hydra(f"dataset.captions.path={Path(args.path).resolve()}"))
    if args.format:
        overrides.append(f"dataset.captions.format={args.format}")
    cfg = load_config(overrides)
    if "summary" in cfg.stages:
        ensure_local_llm(cfg.llm, Path(cfg.data_dir) / "llm-server.log")
    summary = import_captions(cfg, job_started(), stop_ray=True)
    finish(summary.lines(), summary.failed)
