"""Structured configs built from the classes themselves: a YAML option that builds an object names its
class in its defaults list,

    defaults:
      - /schema@frames: vidprep.stages.decode.DecodeFrames

and composing puts that class's signature under it (hydra-zen's `builds`): its `_target_`, every
parameter with the code's default and type. So YAML holds only what differs from the code, an override
of a parameter the YAML leaves out (`stages.frames.fps=2`) works, and a value of the wrong type is refused
while composing. Any importable class or function works, one's own included; it is imported only when a
config names it.

A section of the config that builds no object (`answer`, `ray`, `store`, the local LLM server) takes its
dataclass the same way, without a `_target_`:

    defaults:
      - /settings@answer: vidprep.conf.sections.AnswerSection

Either way, `vidprep.jobs.config.check_settings` holds each node to its class's parameters and the
ranges their types declare.

`register()` adds the source to Hydra before a config is composed (`vidprep.jobs.config` calls it).
Hydra would also find plugins in its `hydra_plugins` namespace, but only in a real folder: an editable
install has none.
"""

from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.object_type import ObjectType
from hydra.core.plugins import Plugins
from hydra.plugins.config_source import ConfigLoadError, ConfigResult, ConfigSource
from hydra.plugins.search_path_plugin import SearchPathPlugin
from hydra.utils import get_object
from omegaconf import OmegaConf

def _node_building(target):
    from hydra_zen import builds

    return builds(target, populate_full_signature=True)


# Each group's config of the class it names: a node that builds it, or the dataclass itself.
GROUPS = {"schema": _node_building, "settings": lambda target: target}


def _target(config_path: str):
    """The class or function `schema/<dotted.path>` or `settings/<dotted.path>` names, or None."""
    group, _, name = config_path.partition("/")
    if group not in GROUPS or not name:
        return None
    try:
        return get_object(name.removesuffix(".yaml"))
    except (ImportError, AttributeError, ValueError):
        return None


class SchemaConfigSource(ConfigSource):
    @staticmethod
    def scheme() -> str:
        return "vidprep-schema"

    def load_config(self, config_path: str) -> ConfigResult:
        target = _target(config_path)
        if target is None:
            raise ConfigLoadError(f"{config_path.removesuffix('.yaml')}: no such class or function")
        return ConfigResult(provider=self.provider, path=f"{self.scheme()}://{config_path}",
                            header={"package": None},
                            config=OmegaConf.structured(GROUPS[config_path.partition("/")[0]](target)))

    def available(self) -> bool:
        return True

    def is_group(self, config_path: str) -> bool:
        return config_path == "" or config_path in GROUPS

    def is_config(self, config_path: str) -> bool:
        return _target(config_path) is not None

    def list(self, config_path: str, results_filter: ObjectType | None) -> list[str]:
        # Every importable class is a config of the group; none is listed (help and completion skip it).
        return list(GROUPS) if config_path == "" and results_filter in (None, ObjectType.GROUP) else []


class SchemaSearchPath(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        search_path.append(provider="vidprep-schema", path="vidprep-schema://")


def register() -> None:
    for plugin in (SchemaConfigSource, SchemaSearchPath):
        Plugins.instance().register(plugin)
