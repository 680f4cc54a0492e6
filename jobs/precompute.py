"""`vidprep precompute [overrides]`: precompute every stage of a dataset into the store."""

from pathlib import Path

import hydra
from omegaconf import DictConfig

from jobs.errors import user_errors
from jobs.sample import make_sample
from jobs.serve_llm import ensure_local_llm
from pipeline.precompute import precompute


@hydra.main(config_path="../conf", config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    if cfg.dataset.make_sample:
        make_sample(cfg.dataset.manifest)
    if "summary" in cfg.stages:
        ensure_local_llm(cfg.llm, Path(cfg.data_dir) / "llm-server.log")
    with user_errors():
        summary = precompute(cfg)
    print("\n".join(summary.lines()))


if __name__ == "__main__":
    main()
