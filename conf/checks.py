"""Checking config values: the one error every layer raises for a bad setting, naming the setting and
what it may be, and the checks of types and ranges. The bottom of the house: anything may import it."""

import importlib.util
import inspect
import types
import typing


class ConfigError(ValueError):
    """A config value is of the wrong type or out of range; the message names the setting and what it may be."""


class ManifestError(ValueError):
    """An input file (a manifest, a benchmark's annotations) is unusable; the message names the file, the
    row and the problem."""


def require(extra: str, *modules: str, needed_by: str) -> None:
    """Optional dependencies, checked where the config asks for them (before any worker starts): a
    missing one is an error naming the extra that installs it."""
    missing = [module for module in modules if importlib.util.find_spec(module) is None]
    if missing:
        raise ConfigError(f"{needed_by} needs {', '.join(missing)}, which is not installed: "
                          f"pip install 'vidprep[{extra}]'")


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


def check_range(setting: str, value, low, high=None, unit: str = "", above: bool = False) -> None:
    """ConfigError naming the setting and its allowed range unless low <= value (<= high); with
    `above`, low itself is out (low < value)."""
    allowed = (f"in {low}..{high}" if high is not None else f"> {low}" if above else f">= {low}") + \
        (f" {unit}" if unit else "")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{setting} must be a number {allowed}, got {value!r}")
    if value < low or above and value == low or high is not None and value > high:
        raise ConfigError(f"{setting} must be {allowed}, got {value}")
