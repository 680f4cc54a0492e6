"""The errors that ask the user to act, each a one-line message (a setting, an input file, an artifact not
in the store, an endpoint that does not answer), and the checks of settings. The bottom of the house:
anything may import it, and importing it imports nothing heavy (the command line's help and errors stay
fast)."""

import dataclasses
import importlib.util
import inspect
import math
import typing


class ConfigError(ValueError):
    """A config value is of the wrong type or out of range; the message names the setting and what it may be."""


class ManifestError(ValueError):
    """An input file (a manifest, a benchmark's annotations) is unusable; the message names the file, the
    row and the problem."""


class ArtifactMissing(LookupError):
    """The asked-for artifact is not completely in the store (never computed, or still being written)."""


class EndpointUnreachable(RuntimeError):
    """An LLM endpoint did not answer a first request: checked once before a run's work starts."""


class ModelRefused(RuntimeError):
    """A model refused a request's form (its response_format, its images), or a request did not fit what
    its profile says it takes: every request would go the same way, so the run stops."""


def require(extra: str, *modules: str, needed_by: str) -> None:
    """Optional dependencies, checked where the config asks for them (before any worker starts): a
    missing one is an error naming the extra that installs it."""
    missing = [module for module in modules if importlib.util.find_spec(module) is None]
    if missing:
        raise ConfigError(f"{needed_by} needs {', '.join(missing)}, which is not installed: "
                          f"pip install 'vidprep[{extra}]'")


def check_finite(config, where: str = "") -> None:
    """ConfigError naming the first setting that holds NaN or an infinity: no setting takes one (a NaN
    passes every comparison, so a range check alone lets it through)."""
    items = config.items() if isinstance(config, dict) else enumerate(config) if isinstance(config, list) else ()
    for key, value in items:
        name = f"{where}.{key}" if where else str(key)
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{name} must be a finite number, got {value}")
        check_finite(value, name)


@dataclasses.dataclass(frozen=True)
class Range:
    """The values a numeric setting may take, declared with its type where the setting is a parameter or a
    field: `fps: Annotated[float, Range(0.01, 60, unit="frames per second")]`. With `above`, `low` itself
    is out. `check_settings_of` holds every setting to its declared range."""
    low: float
    high: float | None = None
    above: bool = False
    unit: str = ""


def declared_ranges(target) -> dict[str, Range]:
    """The `Range` each parameter of a class or function declares with its type, by parameter name."""
    hints = typing.get_type_hints(target.__init__ if inspect.isclass(target) else target, include_extras=True)
    return {name: declared for name, hint in hints.items()
            for declared in getattr(hint, "__metadata__", ()) if isinstance(declared, Range)}


def check_settings_of(target, settings: dict, where: str) -> None:
    """The one rule for every config node that builds an object or is a section's dataclass: each key is
    a parameter of `target` (unless it takes any keyword), and a numeric one lies in the `Range` its type
    declares. ConfigError naming the first setting that does not."""
    parameters, ranges = inspect.signature(target).parameters, declared_ranges(target)
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    for name, value in settings.items():
        setting = f"{where}.{name}" if where else name
        if name.startswith("_"):  # Hydra's own keys: _target_, _partial_, _args_
            continue
        if name not in parameters:
            if takes_any:
                continue
            known = ", ".join(p for p in parameters if parameters[p].kind is not inspect.Parameter.VAR_POSITIONAL)
            raise ConfigError(f"{setting}: {getattr(target, '__qualname__', target)} has no setting {name!r} "
                              f"(its settings: {known})")
        declared = ranges.get(name)
        if declared is not None and value is not None:
            check_range(setting, value, declared.low, declared.high, declared.unit, declared.above)


def check_range(setting: str, value, low, high=None, unit: str = "", above: bool = False) -> None:
    """ConfigError naming the setting and its allowed range unless low <= value (<= high); with
    `above`, low itself is out (low < value)."""
    allowed = (f"in {low}..{high}" if high is not None else f"> {low}" if above else f">= {low}") + \
        (f" {unit}" if unit else "")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{setting} must be a number {allowed}, got {value!r}")
    if value < low or above and value == low or high is not None and value > high:
        raise ConfigError(f"{setting} must be {allowed}, got {value}")
