"""The Hydra config: composed for commands, its groups listed for help and shell completion, and
overrides taken from the command line."""

import argparse
import dataclasses
import os
from pathlib import Path

from hydra.utils import get_object
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError, MissingMandatoryValue

from vidprep.conf import schemas
from vidprep.conf.checks import ConfigError, check_finite, check_settings_of

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"


def shared_data(name: str) -> str:
    """The team's shared data folder NAME as an absolute path: under $VIDPREP_SHARED_DATA, else
    `shared/data/NAME` above vidprep's own files, then above the working folder. One command reads the
    same data from any folder; where it is nowhere, the first place looked, so the error names a path."""
    candidates = [Path(os.environ["VIDPREP_SHARED_DATA"]) / name] if "VIDPREP_SHARED_DATA" in os.environ else []
    candidates += [parent / "shared" / "data" / name
                   for start in (Path(__file__).resolve(), Path.cwd().resolve()) for parent in start.parents]
    return str(next((c for c in candidates if c.is_dir()), candidates[0]).resolve())


OmegaConf.register_new_resolver("shared_data", shared_data, replace=True)
schemas.register()


def load_config(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose(config_name="config", overrides=overrides)
    check_settings(cfg)
    return cfg


def check_settings(cfg) -> None:
    """The checks every composed config passes, whichever command composed it: no NaN or infinity
    anywhere, and each node that builds an object (`_target_`) or is a section's dataclass (`/settings@`)
    held to its class's parameters and declared ranges. Errors are ConfigErrors naming the setting."""
    # Unresolved: a setting is checked as given (an interpolation where it points).
    check_finite(OmegaConf.to_container(cfg, resolve=False))
    for where, node, target in settings_nodes(cfg, ""):
        check_settings_of(target, _given(node), where)


def _given(node: DictConfig) -> dict:
    """A node's settings, resolved; one that does not resolve yet (`???`, or pointing at what is not
    there) is left out: it is an error where it is used, if it is."""
    values = {}
    for key in node:
        try:
            values[key] = node[key]
        except (MissingMandatoryValue, InterpolationResolutionError):
            pass
    return values


def settings_nodes(node, where: str):
    """(path, node, the class or function it is checked against) for every such node under `node`; a
    node that only points at another (`${model}`) is checked where it is."""
    if isinstance(node, DictConfig):
        if "_target_" in node:
            try:
                target = get_object(node._target_)
            except (ImportError, AttributeError, ValueError) as error:
                raise ConfigError(f"{where}._target_: cannot import {node._target_} ({error})") from None
            yield where, node, target
        elif dataclasses.is_dataclass(OmegaConf.get_type(node)):
            yield where, node, OmegaConf.get_type(node)
        children = ((key, node._get_node(key)) for key in node.keys())
    elif isinstance(node, ListConfig):
        children = ((index, node._get_node(index)) for index in range(len(node)))
    else:
        return
    for key, child in children:
        if not child._is_interpolation():
            yield from settings_nodes(child, f"{where}.{key}" if where else str(key))


# Groups chosen for a node of another group's option: a model profile for each LLM client.
SELECTED_AS = {"profile": "profile@llm.client.profile"}


def config_groups() -> dict[str, list[str]]:
    """Each config group (`method`, `dataset`, ...) and its options, as `group=option` takes them."""
    return {folder.name: sorted(p.stem for p in folder.glob("*.yaml"))
            for folder in sorted(CONF_DIR.iterdir()) if folder.is_dir() and folder.name != "hydra"}


def quoted_for_hydra(argument: str) -> str:
    """`key=value` with the value in double quotes where Hydra's override grammar would refuse it bare
    (spaces, non-ASCII letters: a folder named "My Videos" or "Видео"); anything else unchanged."""
    key, sep, value = argument.partition("=")
    if not sep or key.startswith("-") or not value or value[0] in "'\"[{" or '"' in value or "${" in value:
        return argument
    if value.isascii() and not any(ch.isspace() for ch in value):
        return argument
    return f'{key}="{value}"'


def complete_override(prefix: str, **_) -> list[str]:
    """Shell completion of an override: a config group's options after `group=`, else the groups."""
    groups = config_groups()
    key, sep, value = prefix.partition("=")
    if sep:
        return [f"{key}={option}" for option in groups.get(key.lstrip("+~").split("@")[0], [])
                if option.startswith(value)]
    return [f"{SELECTED_AS.get(group, group)}=" for group in groups if group.startswith(prefix)]


def add_overrides(parser: argparse.ArgumentParser, multirun: bool = False) -> None:
    """The `KEY=VALUE ...` overrides every command takes (and `--multirun` for Hydra jobs)."""
    if multirun:
        parser.add_argument("-m", "--multirun", action="store_true",
                            help="a Hydra sweep: one job per combination of comma-separated values")
    groups = "; ".join(f"{SELECTED_AS.get(group, group)}: {', '.join(options)}" for group, options in config_groups().items())
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", type=quoted_for_hydra,
                        help=f"Hydra overrides, e.g. method=caviar stages.frames.fps=2 (config groups: {groups})"
                        ).completer = complete_override


def hydra_job_argv(command: str, args: argparse.Namespace, extra: tuple[str, ...] = ()) -> list[str]:
    """The command line a Hydra job parses (Hydra composes its config once, for the job)."""
    return [f"vidprep {command}", *(["--multirun"] if args.multirun else []), *args.overrides, *extra]
