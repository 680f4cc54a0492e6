"""Stages built from config, in dependency order, with the key each one writes under."""

import json
from dataclasses import dataclass

from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf

from vidprep.conf.checks import ConfigError

from vidprep.stages.base import Stage
from vidprep.stages.probe import ProbeVideo
from vidprep.store.artifacts import Artifact


@dataclass
class Plan:
    # None for a captions-only plan (no video files to probe; `vidprep import-captions` fills it).
    probe: ProbeVideo | None
    probe_config: dict | None
    stages: dict[str, Stage]
    keys: dict[str, str]
    # The config each stage was built from, for building it again inside a worker.
    configs: dict[str, dict]

    @property
    def probe_key(self) -> str:
        return f"{self.probe.name}-v{self.probe.version}"

    @property
    def frames_per_caption(self) -> int | None:
        """How many of a segment's frames its caption was made from (None: every one, as imported
        per-frame captions are)."""
        return getattr(self.stages.get("segment_captions"), "frames_per_caption", None)

    def upstream_keys(self, name: str) -> dict[str, str]:
        return {u: self.keys[u] for u in self.stages[name].upstream}

    def inputs(self, name: str) -> list[tuple[Artifact, str]]:
        """What a stage reads: each upstream stage's artifact and key, in the order `run` takes them."""
        return [(self.stages[u].artifact, self.keys[u]) for u in self.stages[name].upstream]

    def describe(self, name: str) -> str:
        stage = self.stages[name]
        return json.dumps({"params": stage.params(), "upstream": self.upstream_keys(name)},
                          sort_keys=True, default=str)


def made_from(stages_cfg: DictConfig, names) -> list[str]:
    """The configured stages among `names` and the stages they are made from, in config order (read off
    the stage classes' `upstream`, so nothing is built)."""
    kept, wanted = set(), [name for name in names if name in stages_cfg]
    while wanted:
        name = wanted.pop()
        if name not in kept:
            kept.add(name)
            # An upstream stage left out of the config is named by `build_plan`, as without this choice.
            wanted += [u for u in get_class(stages_cfg[name]._target_).upstream if u in stages_cfg]
    return [name for name in stages_cfg if name in kept]


def build_stage(config: dict) -> Stage:
    return instantiate(config, _convert_="all")


def build_plan(stages_cfg: DictConfig, left_out=()) -> Plan:
    """The plan of the configured stages but those `left_out` (none that a kept stage is made from)."""
    configs = {name: config for name, config in OmegaConf.to_container(stages_cfg, resolve=True).items()
               if name not in left_out}
    probe_config = configs.pop("probe", None)
    probe = instantiate(probe_config) if probe_config else None
    stages, keys = {}, {}
    for name, config in configs.items():
        stage = build_stage(config)
        if stage.name != name:
            raise ConfigError(f"stages.{name} builds stage {stage.name!r}; name it stages.{stage.name}")
        missing = [u for u in stage.upstream if u not in stages]
        if missing:
            raise ConfigError(f"stages.{name} needs stages {missing} configured before it")
        stages[name] = stage
        keys[name] = stage.key({u: keys[u] for u in stage.upstream})
    return Plan(probe=probe, probe_config=probe_config, stages=stages, keys=keys, configs=configs)
