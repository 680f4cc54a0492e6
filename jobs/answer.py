"""vidprep answer: answer a dataset's questions with a method, from the store.

Runs as a Hydra job: `--multirun` sweeps comma-separated overrides (method=videoagent2,caviar).
"""

import argparse
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from vidprep.jobs.config import add_overrides, check_settings, hydra_job_argv
from vidprep.jobs.errors import finish, job_started, single_run, user_errors


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_overrides(parser, multirun=True)


def run(args: argparse.Namespace) -> None:
    sys.argv = hydra_job_argv("answer", args)
    job()


@hydra.main(config_path="../conf", config_name="config", version_base=None)
def job(cfg: DictConfig) -> None:
    from vidprep.evaluation.tracking import track_answer_run
    from vidprep.jobs.serve_llm import ensure_local_llm
    from vidprep.pipeline.answer import answer
    from vidprep.store.settings import StoreSettings

    clock = job_started()
    with user_errors():
        check_settings(cfg)
        ensure_local_llm(cfg.llm, Path(cfg.data_dir) / "llm-server.log")
        summary = answer(cfg, clock, stop_ray=single_run())
        track_answer_run(cfg, summary.run_key, StoreSettings.from_config(cfg.store).open())
    finish(summary.lines(), summary.failed + summary.refused)
