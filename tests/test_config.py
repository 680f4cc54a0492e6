"""The shipped YAML holds only what differs from the code: each object it builds names its class as its
schema (`/schema@PACKAGE: module.Class`), and no value repeats that class's default."""

import re

import pytest
from hydra.utils import get_object
from hydra_zen import builds
from omegaconf import OmegaConf

from vidprep.jobs.config import CONF_DIR, config_groups, load_config

OPTIONS = [(group, option) for group, options in config_groups().items() for option in options]


def _schemas(path) -> list[tuple[str, str]]:
    """(node path in the file, class) of each `/schema@...` entry of a YAML file's defaults list."""
    entries = OmegaConf.to_container(OmegaConf.load(path)).get("defaults", [])
    named = [(key.split("@", 1)[1], target) for entry in entries if isinstance(entry, dict)
             for key, target in entry.items() if key.startswith("/schema@")]
    return [("" if where == "_here_" else where, target) for where, target in named]


@pytest.mark.parametrize("group,option", OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_each_option_sets_only_what_differs_from_its_classes_defaults(group, option):
    path = CONF_DIR / group / f"{option}.yaml"
    raw = OmegaConf.load(path)
    assert "_target_" not in path.read_text(), f"{path}: name the class in the defaults list as /schema@..."
    for where, target in _schemas(path):
        defaults = OmegaConf.to_container(OmegaConf.structured(builds(get_object(target), populate_full_signature=True)))
        node = OmegaConf.select(raw, where) if where else raw
        given = OmegaConf.to_container(node, resolve=False) if node is not None else {}
        for key, value in given.items():
            if where == "" and key == "defaults":
                continue
            assert key in defaults, f"{path}: {where}.{key} is not a parameter of {target}"
            if defaults[key] != "???":
                assert value != defaults[key], \
                    f"{path}: {where}.{key}: {value!r} is {target}'s default; leave it out"
    # The option composes, its values typed by its classes' schemas (a profile where an LLM client takes it).
    selected = {"experiment": [f"+experiment={option}"], "profile": [f"profile@llm.client.profile={option}"],
                "oracle_modules": ["method=caviar_agent", f"+oracle_modules={option}"]}
    load_config(selected.get(group, [f"{group}={option}"]))


def test_a_setting_the_yaml_leaves_out_is_overridden_as_any_other_and_typed():
    cfg = load_config(["stages.frames.fps=2", "method.max_steps=1"])
    assert cfg.stages.frames.fps == 2.0 and cfg.stages.frames.max_side == 448 and cfg.method.max_steps == 1
    assert cfg.stages.frames._target_ == "vidprep.stages.decode.DecodeFrames"


def _float_settings() -> list[tuple[str, str]]:
    """(method option, dotted key) of every float setting, once per key."""
    from vidprep.evaluation.tracking import flatten

    found = {}
    for method in config_groups()["method"]:
        composed = OmegaConf.to_container(load_config([f"method={method}"]), resolve=False)
        for key, value in flatten(composed).items():
            if isinstance(value, float):
                found.setdefault(key, method)
    return sorted((method, key) for key, method in found.items())


def test_no_setting_takes_nan_or_an_infinity():
    from vidprep.conf.checks import ConfigError

    settings = _float_settings()
    assert len(settings) >= 15 and "stages.frames.fps" in {key for _, key in settings}
    for method, key in settings:
        with pytest.raises(ConfigError, match=rf"^{re.escape(key)} must be a finite number, got nan$"):
            load_config([f"method={method}", f"{key}=nan"])
    # One check for every value: infinities as NaN.
    for value in ("inf", "-inf"):
        with pytest.raises(ConfigError, match=rf"^llm.client.timeout_s must be a finite number, got {value}$"):
            load_config([f"llm.client.timeout_s={value}"])
