"""Where the store is and how to open it: built from the `store` config group, and hashable, so each
process (the driver or a Ray worker) opens one Store per settings and reuses it."""

import dataclasses
import functools
import os

from omegaconf import DictConfig, OmegaConf

from vidprep.conf.checks import ArtifactMissing
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
        return cls(str(cfg.uri), tuple(sorted(present.items())), int(cfg.ann_min_rows))

    def open(self) -> Store:
        return _open_store(self)

    def open_existing(self) -> Store:
        """The store, for commands that only read it: a local one that is not there is an error, never
        created empty."""
        if "://" not in self.uri and not os.path.isdir(self.uri):
            raise ArtifactMissing(f"no store at {self.uri}: run `vidprep precompute` first, or point store.uri "
                                  "(or VIDPREP_DATA) at the one you computed")
        return self.open()


@functools.lru_cache(maxsize=4)
def _open_store(settings: StoreSettings) -> Store:
    return Store(settings.uri, dict(settings.storage_options), settings.ann_min_rows)
