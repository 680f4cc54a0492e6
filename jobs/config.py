"""Loading the Hydra config outside a Hydra job (for query commands such as `vidprep search`)."""

from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"


def load_config(overrides: list[str]) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose(config_name="config", overrides=overrides)
