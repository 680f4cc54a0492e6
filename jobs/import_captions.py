"""`vidprep import-captions [--format F PATH] [overrides]`: load published captions as a store's
frame captions and derive segment captions, caption embeddings and summaries from them.

Without PATH the dataset says where its captions are (dataset=nextqa_dev); with PATH the videos
are known by name only (dataset=captions) unless a dataset is given too.
"""

import argparse
from pathlib import Path

from vidprep.jobs.config import load_config
from vidprep.jobs.errors import finish, user_errors
from vidprep.jobs.serve_llm import ensure_local_llm
from vidprep.pipeline.imported import import_captions
from vidprep.stages.imported import FORMATS


def main() -> None:
    parser = argparse.ArgumentParser(prog="vidprep import-captions", description=__doc__,
                                     epilog="Further arguments are Hydra overrides, e.g. dataset=nextqa_dev")
    parser.add_argument("path", nargs="?", help="caption folder or file")
    parser.add_argument("--format", choices=FORMATS, help="videoagent ({video}_cap.json), llovi ({uid: [...]}), "
                                                          "jsonl ({video, t, caption} lines)")
    args, overrides = parser.parse_known_args()
    if args.path and "=" in args.path:
        overrides.insert(0, args.path)
        args.path = None
    if args.path:
        if not any(o.startswith("dataset=") for o in overrides):
            overrides.insert(0, "dataset=captions")
        overrides.append(f"dataset.captions.path={Path(args.path).resolve()}")
    if args.format:
        overrides.append(f"dataset.captions.format={args.format}")
    with user_errors():
        cfg = load_config(overrides)
        if "summary" in cfg.stages:
            ensure_local_llm(cfg.llm, Path(cfg.data_dir) / "llm-server.log")
        summary = import_captions(cfg)
    finish(summary.lines(), summary.failed)


if __name__ == "__main__":
    main()
