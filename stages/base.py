"""What every precompute stage is: a named, versioned transformation with an output-defining config.

Stages know nothing of Ray, Hydra or the store. `run` takes one video (and, for stages with
upstream artifacts, an iterator of their batches) and yields batches of rows of the stage's artifact
(declared in `vidprep.store.artifacts`); the pipeline adds the key columns and writes them.
"""

import dataclasses
from collections.abc import Iterator
from typing import Annotated, ClassVar

from vidprep.conf.checks import Range
from vidprep.stages.context import Component
from vidprep.stages.prompts import is_prompt, prompt_hash
from vidprep.store.artifacts import Artifact
from vidprep.store.keys import stage_key


def evenly_spaced(items: list, n: int) -> list:
    """n items spread evenly from first to last (the middle one for n=1); all of them when there are fewer."""
    if len(items) <= n:
        return items
    return [items[round(i * (len(items) - 1) / (n - 1))] for i in range(n)] if n > 1 else [items[len(items) // 2]]


def runtime(default):
    """A parameter that changes how a stage runs but not what it writes (so not part of its key)."""
    return dataclasses.field(default=default, metadata={"runtime": True})


def model_field(default=None):
    """A model or LLM client the stage runs (a Component): what its `key_params` name is part of the key."""
    return dataclasses.field(default=default, metadata={"model": True})


@dataclasses.dataclass(frozen=True)
class Resources:
    """What each task of a stage, or each actor of a model stage's pool, asks Ray for.
    `resources.STAGE.FIELD` in the config overrides any of it."""

    cpus: Annotated[float, Range(0)] = 1.0
    # A GPU share asked for outright; 0: derived from gpu_memory_gb. Either is asked for only where the
    # stage's model runs on CUDA (see `Stage.model_device`) and the cluster has GPUs.
    gpus: Annotated[float, Range(0)] = 0.0
    # The GPU memory the stage's model needs: its share of a GPU of `ray.gpu_memory_gb`.
    gpu_memory_gb: Annotated[float, Range(0, unit="GB")] = 0.0
    # Actors in a model stage's pool (each holds one copy of the model).
    pool_size: Annotated[int, Range(1)] = 1
    # Ray custom resources, e.g. {gpu_node: 0.25} to place the stage on nodes tagged so.
    custom: dict = dataclasses.field(default_factory=dict)

    def gpu_share(self, gpu_memory_gb: float) -> float:
        return self.gpus or min(1.0, self.gpu_memory_gb / gpu_memory_gb)


@dataclasses.dataclass
class Stage(Component):
    # The name of the stage in config and in the store: its artifact's `stage`.
    name: ClassVar[str]
    version: ClassVar[int]
    # What it writes.
    artifact: ClassVar[Artifact]
    # Stages whose artifacts `run` reads, in the order of its arguments after `video`.
    upstream: ClassVar[tuple[str, ...]] = ()
    # True for stages that hold a model: built and set up once per actor of a pool, reused across videos.
    stateful: ClassVar[bool] = False
    resources: ClassVar[Resources] = Resources()

    # Rows per batch read from upstream and written to the store.
    batch_size: Annotated[int, Range(1)] = dataclasses.field(default=32, metadata={"runtime": True}, kw_only=True)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.name = cls.artifact.stage

    def params(self) -> dict:
        """The key's parameters, derived from the fields: each setting but the runtime ones, what each model
        field's component names, and a hash of the prompt files the settings name."""
        # A float setting given as an int on the command line (`fps=1`) is the same setting as 1.0.
        def value(field):
            given = getattr(self, field.name)
            is_float = field.type in (float, "float")
            return float(given) if is_float and isinstance(given, int) and not isinstance(given, bool) else given

        params = {}
        for field in dataclasses.fields(self):
            if field.metadata.get("model"):
                params |= getattr(self, field.name).key_params()
            elif not field.metadata.get("runtime"):
                params[field.name] = value(field)
        if prompts := [v for v in params.values() if is_prompt(v)]:
            params["prompt_sha"] = prompt_hash(*prompts)
        return params

    def model_device(self) -> str | None:
        """The `device` setting of the model this stage runs in its worker (None: it runs none)."""
        return None

    def key(self, upstream_keys: dict[str, str]) -> str:
        return stage_key(self.name, self.version, self.params(), upstream_keys)

    def run(self, video: dict, *inputs: Iterator[list]) -> Iterator[list[dict]]:
        raise NotImplementedError
