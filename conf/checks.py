"""The errors that ask the user to act, each a one-line message (a setting, an input file, an artifact not
in the store, an endpoint that does not answer), and the checks of settings. The bottom of the house:
anything may import it, and importing it imports nothing heavy (the command line's help and errors stay
fast)."""

import importlib.util
import math


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


def check_range(setting: str, value, low, high=None, unit: str = "", above: bool = False) -> None:
    """ConfigError naming the setting and its allowed range unless low <= value (<= high); with
    `above`, low itself is out (low < value)."""
    allowed = (f"in {low}..{high}" if high is not None else f"> {low}" if above else f">= {low}") + \
        (f" {unit}" if unit else "")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{setting} must be a number {allowed}, got {value!r}")
    if value < low or above and value == low or high is not None and value > high:
        raise ConfigError(f"{setting} must be {allowed}, got {value}")
