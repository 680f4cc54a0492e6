"""`vidprep precompute [overrides]`: precompute every stage of a dataset into the store."""

import hydra
from omegaconf import DictConfig

from jobs.errors import user_errors
from jobs.sample import make_sample
from pipeline.precompute import precompute


@hydra.main(config_path="../conf", config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    if cfg.dataset.make_sample:
        make_sample(cfg.dataset.manifest)
    with user_errors():
        summary = precompute(cfg)
    print("\n".join(summary.lines()))


if __name__ == "__main__":
    main()
