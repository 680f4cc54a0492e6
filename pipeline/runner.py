"""The Ray plumbing shared by precompute, import-captions and answer: starting Ray, and a plan's stages
as Ray Data maps. Stateless stages run as Ray tasks; stages that hold a model run in an actor pool, so
the model loads once per actor. Each map is named after its stage (`Map(frame_embeddings)`)."""

import logging
import os
import warnings

import ray
from ray.util.annotations import RayDeprecationWarning
from omegaconf import DictConfig, OmegaConf

from vidprep.pipeline.executor import describe_error, run_stage
from vidprep.pipeline.plan import Plan, build_stage
from vidprep.conf.checks import ConfigError, check_range
from vidprep.stages.models.llm import PROCESS_USAGE, api_keys
from vidprep.store.settings import StoreSettings
from vidprep.store.store import Store


def init_ray(cfg: DictConfig) -> None:
    if not ray.is_initialized():
        local = {} if cfg.address else {"num_cpus": cfg.num_cpus}
        ray.init(address=cfg.address or None, include_dashboard=False, log_to_driver=cfg.log_to_driver, **local,
                 configure_logging=True, logging_level="WARNING")
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = bool(cfg.progress_bars)


def _node_id() -> str:
    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else "local"


def _run_one(store: Store, stage, name: str, plan_keys: dict, inputs: list, record: dict,
             run_id: str) -> dict:
    record = dict(record, **{f"rows__{name}": -1, f"llm_calls__{name}": 0})
    if record["failed_stage"]:
        return record
    calls_before = PROCESS_USAGE.calls
    try:
        record[f"rows__{name}"] = run_stage(store, stage, plan_keys[name], inputs, record,
                                            run_id, _node_id())
    except Exception as error:  # noqa: BLE001 - recorded, then the run goes on
        record.update(failed_stage=name, error=describe_error(error), **{f"rows__{name}": 0})
        store.record_failure(record["video_id"], record["source_path"], name, plan_keys[name],
                             record["error"], run_id)
    record[f"llm_calls__{name}"] = PROCESS_USAGE.calls - calls_before
    return record


def run_stateless(record: dict, settings: StoreSettings, name: str, config: dict, keys: dict,
                  inputs: list, run_id: str) -> dict:
    return _run_one(settings.open(), build_stage(config), name, keys, inputs, record, run_id)


class ModelStageWorker:
    """One actor of a model stage's pool: builds the stage (and so loads its model) once."""

    def __init__(self, settings: StoreSettings, name: str, config: dict, keys: dict,
                 inputs: list, run_id: str, api_keys: dict):
        os.environ.update(api_keys)
        self.store = settings.open()
        self.stage = build_stage(config)
        self.name, self.keys, self.inputs, self.run_id = name, keys, inputs, run_id

    def __call__(self, record: dict) -> dict:
        return _run_one(self.store, self.stage, self.name, self.keys, self.inputs, record, self.run_id)


def stage_maps(ds, cfg: DictConfig, plan: Plan, settings: StoreSettings, run_id: str):
    """`ds` of video records through every stage of the plan, in order."""
    for name, resources in stage_resources(cfg, plan).items():
        args = dict(settings=settings, name=name, config=plan.configs[name], keys=plan.keys,
                    inputs=plan.inputs(name), run_id=run_id)
        remote = dict(resources)
        pool = remote.pop("concurrency", 1)
        # Ray Data names a map after its function or class: the stage's name shows in progress and logs.
        if plan.stages[name].stateful:
            worker = type(name, (ModelStageWorker,), {"__module__": __name__})
            ds = ds.map(worker, fn_constructor_kwargs=args | {"api_keys": api_keys(plan.configs[name])},
                        compute=ray.data.ActorPoolStrategy(size=pool), **remote)
        else:
            # Resources through a function, which Ray Data never fuses into the next map: fused into a
            # model stage's pool of one actor, every video's decode ran in that actor, one at a time.
            # Ray deprecates the argument for 2.64 without a replacement, hence the pin in pyproject.toml.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RayDeprecationWarning)
                ds = ds.map(_named(run_stateless, name), fn_kwargs=args,
                            ray_remote_args_fn=lambda asked=remote: asked)
    return ds


def _named(function, name: str):
    def stage(record: dict, **kwargs) -> dict:
        return function(record, **kwargs)

    stage.__name__ = stage.__qualname__ = name
    return stage


def fit_resources(resources: dict[str, dict], stateful: set[str], cpus: float) -> dict[str, dict]:
    """Stage resources under which every stage can run at once on `cpus` CPUs.

    Ray Data keeps at least one actor of every model stage's pool alive for the whole run, holding its
    CPUs while idle. When the pools leave no CPU for the largest stateless task, a later stage's actor
    can take the CPU an earlier stage waits for and the run hangs; so the pools' CPU requests are
    scaled down by one factor until they fit beside that task (the actors then share cores).
    """
    pools = sum(r["num_cpus"] * r.get("concurrency", 1) for n, r in resources.items() if n in stateful)
    task = max((r["num_cpus"] for n, r in resources.items() if n not in stateful), default=0)
    if task > cpus:
        raise ConfigError(f"a stage task asks for {task} CPUs but this Ray has {cpus}: lower "
                          "resources.STAGE.num_cpus or raise ray.num_cpus")
    if pools <= cpus - task:
        return resources
    scale = (cpus - task) / pools
    logging.getLogger(__name__).warning(
        "model stages ask for %s CPUs for their actors and this Ray has %s beside a %s-CPU task: "
        "their CPU requests are scaled by %.2f so no stage waits forever", pools, cpus, task, scale)
    return {n: dict(r, num_cpus=r["num_cpus"] * scale) if n in stateful else r for n, r in resources.items()}


def declared_resources(plan: Plan, gpus: float, cluster: bool) -> dict[str, dict]:
    """What each stage declares, its GPU share kept only where its model will run on CUDA: a model set to
    `auto` on a Ray with GPUs, or to `cuda` (on a local Ray without GPUs that is an error, since it would
    wait forever; a cluster may add GPU nodes)."""
    declared = {}
    for name, stage in plan.stages.items():
        device = stage.model_device()
        if device and device.startswith("cuda") and not gpus and not cluster:
            raise ConfigError(f"stages.{name}: its model's device is {device!r} but this Ray has no GPU "
                              "(use device=auto or cpu)")
        on_cuda = (device == "auto" and gpus > 0) or bool(device and device.startswith("cuda"))
        declared[name] = {k: v for k, v in stage.resources.items() if k != "num_gpus" or on_cuda}
    return declared


def stage_resources(cfg: DictConfig, plan: Plan) -> dict[str, dict]:
    """Each stage's Ray resources from `resources`; fitted to a local Ray, whose size is known and fixed
    (a cluster may autoscale to what the stages ask for)."""
    overrides = OmegaConf.to_container(cfg.resources, resolve=True)
    cluster = bool(cfg.ray.address)
    declared = declared_resources(plan, ray.cluster_resources().get("GPU", 0), cluster)
    resources = {name: {**declared[name], **overrides.get(name, {})} for name in plan.stages}
    for name, asked in resources.items():
        for setting, low in (("num_cpus", 0), ("num_gpus", 0), ("concurrency", 1)):
            if setting in asked:
                check_range(f"resources.{name}.{setting}", asked[setting], low)
    if cluster:
        return resources
    stateful = {name for name, stage in plan.stages.items() if stage.stateful}
    return fit_resources(resources, stateful, ray.cluster_resources().get("CPU", 0))
