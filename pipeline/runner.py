"""The Ray plumbing shared by precompute, import-captions and answer: starting Ray, a plan's stages as Ray
Data maps, and actor pools. Stateless stages run as Ray tasks; stages that hold a model, and answering,
run in an actor pool, so the model loads once per actor. Each map is named after its stage
(`Map(frame_embeddings)`) or `answer`."""

import atexit
import dataclasses
import json
import logging
import os
import re
import sys
import threading
from pathlib import Path

import pyarrow as pa
import ray
from omegaconf import DictConfig, OmegaConf

from vidprep.pipeline.executor import describe_error, run_stage
from vidprep.pipeline.plan import Plan, build_stage
from vidprep.conf.checks import ConfigError, check_settings_of
from vidprep.stages.base import Resources
from vidprep.stages.context import WorkerContext
from vidprep.stages.models.llm import api_keys
from vidprep.store.settings import StoreSettings


def _ray_logs_to(path: Path) -> None:
    """Ray's and Ray Data's log records into `path` instead of the terminal. Ray prints through
    subclasses of StreamHandler (its file handlers stay); Ray Data sets its loggers up again from
    RAY_DATA_LOGGING_CONFIG (or its own config, which prints) whenever a dataset starts, in the
    driver and in its workers, which inherit the variable."""
    path.parent.mkdir(parents=True, exist_ok=True)
    layout = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    ray_data_config = path.with_name(path.name + ".ray-data.json")
    ray_data_config.write_text(json.dumps({
        "version": 1, "disable_existing_loggers": False, "formatters": {"plain": {"format": layout}},
        "handlers": {"file": {"class": "logging.FileHandler", "filename": str(path.resolve()), "level": "INFO",
                              "formatter": "plain"}},
        "loggers": {"ray.data": {"level": "INFO", "handlers": ["file"], "propagate": False}}}))
    os.environ["RAY_DATA_LOGGING_CONFIG"] = str(ray_data_config.resolve())
    handler = logging.FileHandler(path)
    handler.setLevel(logging.INFO)
    handler.setFormatter(logging.Formatter(layout))
    for name in ("ray", "ray.data"):
        logger = logging.getLogger(name)
        for shown in [h for h in logger.handlers
                      if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)]:
            logger.removeHandler(shown)
        logger.addHandler(handler)
        logger.propagate = False


# Ray's C++ core worker writes its log lines to the process's stderr itself, past Python's logging:
# "[2026-12-05 22:19:56,367 E 12082 12082] core_worker.cc:2465: Actor with class name: ...".
NATIVE_LOG_LINE = re.compile(rb"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ [A-Z] \d+ \d+\] [\w./-]+:\d+: ")


def _native_logs_to(path: Path) -> None:
    """The process's stderr (fd 2) becomes a pipe read by a thread: Ray's C++ log lines go to `path`,
    every other line to the terminal. Python's own stderr writes to the terminal directly, so the
    progress display still knows whether it has one."""
    terminal = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)
    sys.stderr = open(terminal, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False)

    def sort_lines() -> None:
        with open(read_end, "rb") as pipe, path.open("ab") as log:
            for line in pipe:
                if NATIVE_LOG_LINE.match(line):
                    log.write(line)
                    log.flush()
                else:
                    os.write(terminal, line)

    sorter = threading.Thread(target=sort_lines, name="ray-native-logs", daemon=True)
    sorter.start()

    def restore() -> None:
        # The pipe's last writer closes, so the thread passes on what is left and ends.
        os.dup2(terminal, 2)
        sorter.join(timeout=5)

    # Registered before ray.init, so it runs after Ray's own shutdown at exit.
    atexit.register(restore)


def init_ray(cfg: DictConfig) -> float:
    """Start or join Ray as `cfg` says; the CPUs of the cluster. Unless `cfg.verbose`, Ray's own logs
    (Python's and its C++ core's) go to `cfg.log_file` and the command's progress display is all the
    terminal shows."""
    if not ray.is_initialized():
        if not cfg.verbose:
            _ray_logs_to(Path(cfg.log_file))
            _native_logs_to(Path(cfg.log_file))
        local = {} if cfg.address else {"num_cpus": cfg.num_cpus}
        # "local", not None: with None Ray joins the cluster last started on this machine (`ray start`,
        # a test's three-node cluster), where this job's environment (PYTHONPATH, keys) is not.
        ray.init(address=cfg.address or "local", include_dashboard=False, log_to_driver=cfg.log_to_driver, **local,
                 configure_logging=True, logging_level="WARNING")
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = bool(cfg.progress_bars)
    return ray.cluster_resources().get("CPU", 1)


def _node_id() -> str:
    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else "local"


def _run_group(context: WorkerContext, stage, name: str, plan_keys: dict, inputs: list, group: pa.Table,
               run_id: str) -> pa.Table:
    """A group of video records through one stage: each record gains the stage's rows and LLM calls, or
    the stage as its failed one (a video failed earlier passes through)."""
    records = group.to_pylist()
    pending = [r for r in records if not r["failed_stage"]]
    outcomes = dict(zip((r["video_id"] for r in pending),
                        run_stage(context, stage, plan_keys[name], inputs, pending, run_id, _node_id())))
    for record in records:
        outcome = outcomes.get(record["video_id"]) if not record["failed_stage"] else None
        record.update({f"rows__{name}": outcome.rows if outcome else -1,
                       f"llm_calls__{name}": outcome.llm_calls if outcome else 0})
        if outcome and outcome.error is not None:
            record.update(failed_stage=name, error=describe_error(outcome.error))
            context.store.record_failure(record["video_id"], record["source_path"], name, plan_keys[name],
                                         record["error"], run_id)
    return pa.Table.from_pylist(records)


def run_stateless(group: pa.Table, settings: StoreSettings, name: str, config: dict, keys: dict,
                  inputs: list, run_id: str) -> pa.Table:
    stage, context = build_stage(config), WorkerContext(settings.open())
    stage.setup(context)
    try:
        return _run_group(context, stage, name, keys, inputs, group, run_id)
    finally:
        stage.teardown()


class ModelStageWorker:
    """One actor of a model stage's pool: builds and sets up the stage (and so loads its model) once."""

    def __init__(self, settings: StoreSettings, name: str, config: dict, keys: dict,
                 inputs: list, run_id: str, api_keys: dict):
        os.environ.update(api_keys)
        self.context = WorkerContext(settings.open())
        self.stage = build_stage(config)
        self.stage.setup(self.context)
        self.name, self.keys, self.inputs, self.run_id = name, keys, inputs, run_id

    def __call__(self, group: pa.Table) -> pa.Table:
        return _run_group(self.context, self.stage, self.name, self.keys, self.inputs, group, self.run_id)

    def __del__(self):
        if hasattr(self, "stage"):
            self.stage.teardown()


def video_groups(records: list[dict], group_seconds: float, cpus: float) -> list[list[dict]]:
    """Records in manifest order, packed into groups of consecutive videos whose durations add up to at
    most `group_seconds` (a longer video is a group of its own). The groups are kept small enough that
    every CPU gets two, so a small run still spreads over the machine."""
    limit = min(group_seconds, sum(r["duration"] for r in records) / max(1.0, 2 * cpus))
    groups, seconds = [], 0.0
    for record in records:
        if not groups or seconds + record["duration"] > limit:
            groups.append([])
            seconds = 0.0
        groups[-1].append(record)
        seconds += record["duration"]
    return groups


def ray_args(resources: Resources, gpu_memory_gb: float) -> dict:
    """A stage's resources as Ray's remote arguments."""
    args = {"num_cpus": resources.cpus}
    if gpus := resources.gpu_share(gpu_memory_gb):
        args["num_gpus"] = gpus
    if resources.custom:
        args["resources"] = dict(resources.custom)
    return args


def pool_map(ds, worker: type, name: str, worker_args: dict, resources: Resources, gpu_memory_gb: float,
             calls_per_actor: int = 1, **map_args):
    """`ds` through an actor pool of `worker`, each actor built once with `worker_args` and running up to
    `calls_per_actor` batches at once (in threads: work that waits on an endpoint); the map is named
    `name` (Ray Data names a map after its class: the name shows in progress and logs)."""
    named = type(name, (worker,), {"__module__": worker.__module__})
    remote = ray_args(resources, gpu_memory_gb)
    # Ray Data fuses a task map into the next actor map whose remote args are equal; fused into a pool of
    # one actor, every video's decode ran in that actor, one at a time. An empty label selector (any
    # node, as without one) keeps the args apart.
    remote.setdefault("label_selector", {})
    # Twice as many batches wait at an actor as it runs, so a thread that finishes one starts the next
    # at once instead of after a round trip to the driver (the endpoint sat idle between waves).
    threaded = dict(max_tasks_in_flight_per_actor=2 * calls_per_actor, max_concurrent_calls_per_actor=calls_per_actor,
                    enable_true_multi_threading=True) if calls_per_actor > 1 else {}
    pool = ray.data.ActorPoolStrategy(size=resources.pool_size, **threaded)
    return ds.map_batches(named, fn_constructor_kwargs=worker_args, batch_format="pyarrow", compute=pool,
                          **map_args, **remote)


def stage_maps(ds, cfg: DictConfig, plan: Plan, settings: StoreSettings, run_id: str):
    """`ds` of video records, one block per group (`video_groups`), through every stage of the plan, in
    order; each group is one batch of each stage. Stateless stages run as tasks, model stages in pools."""
    for name, resources in stage_resources(cfg, plan).items():
        args = dict(settings=settings, name=name, config=plan.configs[name], keys=plan.keys,
                    inputs=plan.inputs(name), run_id=run_id)
        if plan.stages[name].stateful:
            # A stage whose endpoint takes several requests at once runs several groups at once, so that other
            # groups fill the slots a group leaves empty at its start and end (a summary's last rounds ask 1-5
            # requests): one group per 8 slots, at least 2 (docs/benchmark.md measures 1, 2 and 4 groups).
            slots = plan.stages[name].requests_at_once()
            calls = max(2, slots // 8) if slots > 1 else 1
            ds = pool_map(ds, ModelStageWorker, name, args | {"api_keys": api_keys(plan.configs[name])}, resources,
                          cfg.ray.gpu_memory_gb, calls_per_actor=calls, batch_size=None)
        else:
            ds = ds.map_batches(_named(run_stateless, name), fn_kwargs=args, batch_size=None, batch_format="pyarrow",
                                **ray_args(resources, cfg.ray.gpu_memory_gb))
    return ds


def _named(function, name: str):
    def stage(group: pa.Table, **kwargs) -> pa.Table:
        return function(group, **kwargs)

    stage.__name__ = stage.__qualname__ = name
    return stage


def fit_resources(resources: dict[str, Resources], stateful: set[str], cpus: float) -> dict[str, Resources]:
    """Stage resources under which every stage can run at once on `cpus` CPUs.

    Ray Data keeps at least one actor of every model stage's pool alive for the whole run, holding its
    CPUs while idle. When the pools leave no CPU for the largest stateless task, a later stage's actor
    can take the CPU an earlier stage waits for and the run hangs; so the pools' CPU requests are
    scaled down by one factor until they fit beside that task (the actors then share cores).
    """
    pools = sum(r.cpus * r.pool_size for n, r in resources.items() if n in stateful)
    task = max((r.cpus for n, r in resources.items() if n not in stateful), default=0)
    if task > cpus:
        raise ConfigError(f"a stage task asks for {task} CPUs but this Ray has {cpus}: lower "
                          "resources.STAGE.cpus or raise ray.num_cpus")
    if pools <= cpus - task:
        return resources
    scale = (cpus - task) / pools
    logging.getLogger(__name__).warning(
        "model stages ask for %s CPUs for their actors and this Ray has %s beside a %s-CPU task: "
        "their CPU requests are scaled by %.2f so no stage waits forever", pools, cpus, task, scale)
    return {n: dataclasses.replace(r, cpus=r.cpus * scale) if n in stateful else r for n, r in resources.items()}


def declared_resources(plan: Plan, gpus: float, cluster: bool) -> dict[str, Resources]:
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
        declared[name] = stage.resources if on_cuda else dataclasses.replace(stage.resources, gpus=0, gpu_memory_gb=0)
    return declared


def stage_resources(cfg: DictConfig, plan: Plan) -> dict[str, Resources]:
    """Each stage's resources, `resources.STAGE` over what it declares; fitted to a local Ray, whose size
    is known and fixed (a cluster may autoscale to what the stages ask for)."""
    overrides = OmegaConf.to_container(cfg.resources, resolve=True)
    unknown = sorted(set(overrides) - set(plan.stages))
    if unknown:
        raise ConfigError(f"resources.{unknown[0]}: no such stage in this plan ({', '.join(plan.stages)})")
    cluster = bool(cfg.ray.address)
    declared = declared_resources(plan, ray.cluster_resources().get("GPU", 0), cluster)
    if not cluster:
        # A pool's actor holds its CPUs for the whole run, idle or not, and Ray Data then runs fewer
        # stateless tasks: on 2 cores one clip was decoded at a time beside an embedder idle 2/3 of the
        # time. On a local Ray the model threads share the cores with the tasks anyway, so there the
        # actors ask for no CPU unless `resources.STAGE.cpus` says otherwise.
        declared = {n: dataclasses.replace(r, cpus=0) if plan.stages[n].stateful else r for n, r in declared.items()}
    resources = {}
    for name in plan.stages:
        given = overrides.get(name, {})
        check_settings_of(Resources, given, f"resources.{name}")
        resources[name] = dataclasses.replace(declared[name], **given)
    if cluster:
        return resources
    stateful = {name for name, stage in plan.stages.items() if stage.stateful}
    return fit_resources(resources, stateful, ray.cluster_resources().get("CPU", 0))
