"""vidprep precompute: precompute the configured stages of a dataset into the store (with
precompute=method_reads, only those the method reads).

Runs as a Hydra job: `--multirun` sweeps comma-separated overrides (stages.frames.fps=0.5,1,2).
"""

import argparse
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from vidprep.jobs.config import add_overrides, check_settings, hydra_job_argv
from vidprep.jobs.errors import finish, job_started, single_run, user_errors


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--recursive", action="store_true",
                        help="take the videos in sub-folders of a folder manifest too (dataset.recursive=true)")
    add_overrides(parser, multirun=True)


def run(args: argparse.Namespace) -> None:
    sys.argv = hydra_job_argv("precompute", args, ("++dataset.recursive=true",) if args.recursive else ())
    job()


@hydra.main(config_path="../conf", config_name="config", version_base=None)
def job(cfg: DictConfig) -> None:
    from vidprep.jobs.sample import make_sample
    from vidprep.jobs.serve_llm import ensure_local_llm
    from vidprep.pipeline.precompute import precompute, stages_left_out

    clock = job_started()
    with user_errors():
        check_settings(cfg)
        manifest = cfg.dataset.manifest  # unset, it is named before the LLM server or Ray start
        if cfg.dataset.make_sample:
            make_sample(manifest)
        left_out = stages_left_out(cfg)
        if "summary" in cfg.stages and "summary" not in left_out:
            ensure_local_llm(cfg.llm, Path(cfg.data_dir) / "llm-server.log")
        summary = precompute(cfg, clock, stop_ray=single_run(), left_out=left_out)
    finish(summary.lines(), summary.failed)
