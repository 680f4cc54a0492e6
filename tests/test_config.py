"""The shipped YAML holds only what differs from the code: each object it builds names its class as its
schema (`/schema@PACKAGE: module.Class`), and no value repeats that class's default."""

import math
import re

import pytest
from hydra.utils import get_object
from omegaconf import DictConfig, OmegaConf

from vidprep.conf.checks import ConfigError, check_settings_of, declared_ranges
from vidprep.conf.schemas import GROUPS
from vidprep.jobs.config import CONF_DIR, config_groups, load_config, settings_nodes

OPTIONS = [(group, option) for group, options in config_groups().items() for option in options]


def _schemas(path) -> list[tuple[str, str, str]]:
    """(node path in the file, group, class) of each `/schema@...` or `/settings@...` entry of a YAML
    file's defaults list."""
    entries = OmegaConf.to_container(OmegaConf.load(path)).get("defaults", [])
    named = [(*reversed(key[1:].split("@", 1)), target) for entry in entries if isinstance(entry, dict)
             for key, target in entry.items() if key.split("@")[0][1:] in GROUPS]
    return [("" if where == "_here_" else where, group, target) for where, group, target in named]


@pytest.mark.parametrize("group,option", OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_each_option_sets_only_what_differs_from_its_classes_defaults(group, option):
    path = CONF_DIR / group / f"{option}.yaml"
    raw = OmegaConf.load(path)
    assert "_target_" not in path.read_text(), f"{path}: name the class in the defaults list as /schema@..."
    for where, kind, target in _schemas(path):
        defaults = OmegaConf.to_container(OmegaConf.structured(GROUPS[kind](get_object(target))))
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


# One composition per option of each group: every class a shipped config builds, every section.
COMPOSITIONS = [[]] + [{"experiment": [f"+experiment={option}"], "profile": [f"profile@llm.client.profile={option}"],
                        "oracle_modules": ["method=caviar_agent", f"+oracle_modules={option}"]}.get(group, [f"{group}={option}"])
                       for group, option in OPTIONS]


def _numeric_settings() -> dict[str, tuple[object, object]]:
    """Each numeric setting of the shipped configs (dotted key): the class or function it is checked
    against, and the Range that declares (None: none declared)."""
    found = {}
    for overrides in COMPOSITIONS:
        cfg = load_config(overrides)
        for where, node, target in settings_nodes(cfg, ""):
            ranges = declared_ranges(target)
            for key in node:
                value = None if OmegaConf.is_missing(node, key) or isinstance(node._get_node(key), DictConfig) \
                    else node._get_node(key)._value()
                if isinstance(value, (int, float)) and not isinstance(value, bool) or key in ranges:
                    found.setdefault(f"{where}.{key}", (target, ranges.get(key)))
    return found


def test_every_numeric_setting_declares_its_range_and_is_held_to_it():
    """NaN, the infinities, -1 and 0 for every numeric setting of every shipped config: each is refused
    with one line naming the setting unless its declared range takes it."""
    settings = _numeric_settings()
    assert len(settings) >= 60 and {"stages.frames.fps", "answer.workers", "ray.group_seconds", "llm.server.port",
                                    "store.ann_min_rows", "llm.client.profile.context_tokens"} <= set(settings)
    undeclared = sorted(key for key, (_, declared) in settings.items() if declared is None)
    assert not undeclared, f"numeric settings without a declared Range: {undeclared}"
    for key, (target, declared) in settings.items():
        where, _, name = key.rpartition(".")
        for value in (math.nan, math.inf, -math.inf, -1, 0):
            takes = math.isfinite(value) and (value > declared.low or value == declared.low and not declared.above) \
                and (declared.high is None or value <= declared.high)
            # The rule check_settings applies to each node (the command-line tests go through the whole config).
            try:
                check_settings_of(target, {name: value}, where)
            except ConfigError as refused:
                assert not takes, (key, value, refused)
                assert str(refused).startswith(key) and "\n" not in str(refused), (key, value, refused)
            else:
                assert takes, f"{key}={value} was taken"


def test_a_key_no_class_takes_is_refused_by_the_same_rule():
    for key, owner in (("stages.frames.nosuchkey", "DecodeFrames"), ("answer.nosuchkey", "AnswerSection"),
                       ("method.nosuchkey", "VideoAgent2"), ("llm.client.profile.nosuchkey", "ModelProfile")):
        with pytest.raises(ConfigError, match=rf"^{re.escape(key)}: {owner} has no setting 'nosuchkey'"):
            load_config([f"+{key}=1"])


def test_no_setting_takes_nan_or_an_infinity():
    # Untyped places too (a price of one's own): a NaN passes every comparison, so it is refused anywhere.
    with pytest.raises(ConfigError, match=r"^prices.m.input must be a finite number, got nan$"):
        load_config(["+prices.m={input:nan,output:1}"])
    for value in ("inf", "-inf"):
        with pytest.raises(ConfigError, match=rf"^llm.client.timeout_s must be a finite number, got {value}$"):
            load_config([f"llm.client.timeout_s={value}"])


def test_every_precompute_and_answer_line_in_the_docs_composes_and_builds_its_method():
    # A README line once gave NExT-QA's file as `dataset.questions.csv`, a key its loader does not take.
    import shlex

    from hydra.utils import instantiate

    from vidprep.jobs.config import quoted_for_hydra
    from vidprep.pipeline.plan import build_plan

    docs = [CONF_DIR.parent / "README.md", *sorted((CONF_DIR.parent / "docs").glob("*.md"))]
    lines = [(path.name, line) for path in docs for block in re.findall(r"```bash\n(.*?)```", path.read_text(), re.S)
             for line in block.replace("\\\n", " ").splitlines()]
    commands = [(name, re.match(r"^(?:[A-Z_]+=\S+\s+)*vidprep\s+(?:precompute|answer)\b(.*?)(?:\s+#.*)?$", line))
                for name, line in lines]
    commands = [(name, shlex.split(found[1])) for name, found in commands if found]
    assert len(commands) > 20
    for name, arguments in commands:
        sweep = "-m" in arguments or "--multirun" in arguments
        # A sweep's first value stands for the others, which differ in that setting alone.
        overrides = [quoted_for_hydra(a.split(",")[0] if sweep and "[" not in a else a)
                     for a in arguments if not a.startswith("-")]
        cfg = load_config(overrides)
        build_plan(cfg.stages)
        if "dataset.questions" in " ".join(overrides):
            questions = cfg.dataset.questions
            assert not [key for key in questions if OmegaConf.is_missing(questions, key)], (name, arguments)
        instantiate(cfg.method, llm=instantiate(cfg.llm.client))


def test_only_the_methods_stages_with_one_they_need_left_out_is_the_plans_own_error():
    from vidprep.pipeline.plan import build_plan
    from vidprep.pipeline.precompute import stages_left_out

    cfg = load_config(["precompute=method_reads", "method=llovi", "~stages.segments"])
    with pytest.raises(ConfigError, match=r"^stages.segment_captions needs stages \['segments'\] configured before it$"):
        build_plan(cfg.stages, stages_left_out(cfg))
