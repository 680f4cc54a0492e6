"""Where the store is and how to open it: built from the `store` config group, and hashable, so each
process (the driver or a Ray worker) opens one Store per settings and reuses it."""

import dataclasses
import functools

from omegaconf import DictConfig, OmegaConf

from vidprep.conf.checks import check_range
from vidprep.store.store import Store


@dataclasses.dataclass(frozen=True)
class StoreSettings:
    uri: str
    storage_options: tuple = ()
    ann_min_rows: int = 100_000

    @classmethod
    def from_config(cls, cfg: DictConfig) -> "StoreSettings":
        options = OmegaConf.to_container(cfg.storage_options, resolve=True) if cfg.storage_options else {}
        # LanceDB takes string options only; an unset optional one (e.g. no custom endpoint) is left out.
        present = {k: str(v) for k, v in options.items() if v is not None}
        check_range("store.ann_min_rows", cfg.ann_min_rows, 1)
        return cls(str(cfg.uri), tuple(sorted(present.items())), int(cfg.ann_min_rows))

    def open(self) -> Store:
        return _open_store(self)


@functools.lru_cache(maxsize=4)
def _open_store(settings: StoreSettings) -> Store:
    return Store(settings.uri, dict(settings.storage_options), settings.ann_min_rows)
