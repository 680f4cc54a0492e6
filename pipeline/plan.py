"""Stages built from config, in dependency order, with the key each one writes under."""

import json
from dataclasses import dataclass

from hydra.utils import instantiate
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

    def only(self, names) -> "Plan":
        """This plan with only the stages `names` and those they are made from; each keeps its key."""
        kept, wanted = set(), [n for n in names if n in self.stages]
        while wanted:
            name = wanted.pop()
            if name not in kept:
                kept.add(name)
                wanted += self.stages[name].upstream
        return Plan(probe=self.probe, probe_config=self.probe_config,
                    **{field: {n: v for n, v in getattr(self, field).items() if n in kept}
                       for field in ("stages", "keys", "configs")})

    def describe(self, name: str) -> str:
        stage = self.stages[name]
        return json.dumps({"params": stage.params(), "upstream": self.upstream_keys(name)},
                          sort_keys=True, default=str)


def build_stage(config: dict) -> Stage:
    return instantiate(config, _convert_="all")


def build_plan(stages_cfg: DictConfig) -> Plan:
    configs = OmegaConf.to_container(stages_cfg, resolve=True)
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
