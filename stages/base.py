"""What every precompute stage is: a named, versioned transformation with an output-defining config.

Stages know nothing of Ray, Hydra or the store. `run` takes one video (and, for stages with
upstream artifacts, an iterator of their batches) and yields batches of rows for the stage's table;
the pipeline adds the key columns and writes them.
"""

import dataclasses
import inspect
import types
import typing
from collections.abc import Iterator
from typing import ClassVar

from vidprep.store.keys import stage_key


class ConfigError(ValueError):
    """A stage parameter is out of range; the message names the setting and the value."""


class StageError(RuntimeError):
    """A stage could not process a video; the message says why, in the user's terms."""


_KINDS = {bool: "true or false", int: "a whole number", float: "a number", str: "a string"}


def _fits(value, annotation) -> bool:
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, annotation)


def check_types(config, where: str = "") -> None:
    """Check every value of an (unresolved) config against the type its `_target_` declares for it, so
    `fps=abc` is a ConfigError naming `stages.frames.fps`, not a TypeError deep inside a constructor."""
    from hydra.utils import get_object

    if isinstance(config, list):
        for i, item in enumerate(config):
            check_types(item, f"{where}[{i}]")
        return
    if not isinstance(config, dict):
        return
    for key, value in config.items():
        check_types(value, f"{where}.{key}" if where else key)
    if "_target_" not in config:
        return
    try:
        parameters = inspect.signature(get_object(config["_target_"]), eval_str=True).parameters
    except (ImportError, AttributeError, ValueError, TypeError, NameError):
        return  # Hydra names an unknown target itself.
    for key, value in config.items():
        # An interpolation is checked where its value is set.
        if key not in parameters or isinstance(value, dict) or isinstance(value, str) and "${" in value:
            continue
        annotation = parameters[key].annotation
        allowed = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else (annotation,)
        simple = [a for a in allowed if a in _KINDS]
        if len(simple) != len([a for a in allowed if a is not type(None)]):
            continue  # a type this check does not judge (objects, lists, dicts)
        if value is None and type(None) in allowed or any(_fits(value, a) for a in simple):
            continue
        kinds = " or ".join(_KINDS[a] for a in simple) + (" or null" if type(None) in allowed else "")
        raise ConfigError(f"{where}.{key} must be {kinds}, got {value!r}")


def check_range(setting: str, value, low, high=None) -> None:
    """ConfigError naming the setting and its allowed range unless low <= value (<= high)."""
    allowed = f"in {low}..{high}" if high is not None else f">= {low}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{setting} must be a number {allowed}, got {value!r}")
    if value < low or high is not None and value > high:
        raise ConfigError(f"{setting} must be {allowed}, got {value}")


def evenly_spaced(items: list, n: int) -> list:
    """n items spread evenly from first to last (the middle one for n=1); all of them when there are fewer."""
    if len(items) <= n:
        return items
    return [items[round(i * (len(items) - 1) / (n - 1))] for i in range(n)] if n > 1 else [items[len(items) // 2]]


def runtime(default):
    """A parameter that changes how a stage runs but not what it writes (so not part of its key)."""
    return dataclasses.field(default=default, metadata={"runtime": True})


@dataclasses.dataclass
class Stage:
    name: ClassVar[str]
    version: ClassVar[int]
    table: ClassVar[str]
    # Field of each output row that tells rows of one video apart (part of the row id).
    row_field: ClassVar[str]
    # Stages whose artifacts `run` reads, in the order of its arguments after `video`.
    upstream: ClassVar[tuple[str, ...]] = ()
    # True for stages that hold a model: built once per worker and reused across videos.
    stateful: ClassVar[bool] = False

    # Rows per batch read from upstream and written to the store.
    batch_size: int = dataclasses.field(default=32, metadata={"runtime": True}, kw_only=True)

    def params(self) -> dict:
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if not f.metadata.get("runtime")
        }

    def key(self, upstream_keys: dict[str, str]) -> str:
        return stage_key(self.name, self.version, self.params(), upstream_keys)

    def run(self, video: dict, *inputs: Iterator[list]) -> Iterator[list[dict]]:
        raise NotImplementedError
