"""`vidprep precompute [overrides]`: precompute every stage of a dataset into the store."""

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from vidprep.jobs.errors import finish, user_errors
from vidprep.jobs.sample import make_sample
from vidprep.jobs.serve_llm import ensure_local_llm
from vidprep.pipeline.precompute import precompute


@hydra.main(config_path="../conf", config_name="config", version_base=None)
def run(cfg: DictConfig) -> None:
    with user_errors():
        if cfg.dataset.make_sample:
            make_sample(cfg.dataset.manifest)
        if "summary" in cfg.stages:
            ensure_local_llm(cfg.llm, Path(cfg.data_dir) / "llm-server.log")
        summary = precompute(cfg)
    finish(summary.lines(), summary.failed)


def main() -> None:
    # `--recursive`, the flag users know, is the override dataset.recursive=true.
    if "--recursive" in sys.argv:
        sys.argv = [a for a in sys.argv if a != "--recursive"] + ["++dataset.recursive=true"]
    run()


if __name__ == "__main__":
    main()
