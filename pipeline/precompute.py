"""The precompute plan on Ray Data: manifest -> identify -> one map per stage -> store.

Stateless stages run as Ray tasks; stages that hold a model run in an actor pool so the model loads
once per worker. Workers write straight to the store; only small per-video records travel back.
"""

import dataclasses
import functools
import json
import logging
import os
import time
import uuid

import ray
from omegaconf import DictConfig, OmegaConf

from vidprep.pipeline.executor import describe_error, run_stage
from vidprep.pipeline.manifest import read_manifest
from vidprep.pipeline.plan import Plan, build_plan, build_stage
from vidprep.stages.base import ConfigError, check_range
from vidprep.stages.llm import PROCESS_USAGE, api_keys, check_endpoints
from vidprep.stages.media import file_info
from vidprep.store.store import Store, utcnow


@dataclasses.dataclass(frozen=True)
class StoreSettings:
    uri: str
    storage_options: tuple = ()
    ann_min_rows: int = 100_000

    @classmethod
    def from_config(cls, cfg: DictConfig) -> "StoreSettings":
        options = OmegaConf.to_container(cfg.storage_options, resolve=True) if cfg.storage_options else {}
        # LanceDB takes string options only; an unset optional one (e.g. no custom endpoint) is left out.
        present = {k: str(v) for k, v in options.items() if v is not None}
        check_range("store.ann_min_rows", cfg.ann_min_rows, 1)
        return cls(str(cfg.uri), tuple(sorted(present.items())), int(cfg.ann_min_rows))

    def open(self) -> Store:
        return _open_store(self)


@functools.lru_cache(maxsize=4)
def _open_store(settings: StoreSettings) -> Store:
    return Store(settings.uri, dict(settings.storage_options), settings.ann_min_rows)


def _node_id() -> str:
    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else "local"


def identify(entry: dict, settings: StoreSettings, probe_config: dict, probe_key: str,
             run_id: str) -> dict:
    """Hash and probe one manifest entry; its record carries the video row, or why it failed."""
    from hydra.utils import instantiate

    store = settings.open()
    record = {"entry_path": entry["path"], "video_id": "", "failed_stage": "", "error": ""}
    fingerprint = file_info(entry["path"])
    try:
        video = instantiate(probe_config).run(entry["path"])
        video.update(name=entry["name"], stage_key=probe_key, row_id=video["video_id"])
        store.upsert("videos", [video])
        record.update(video)
    except Exception as error:  # noqa: BLE001 - a bad file must not stop the run
        record.update(failed_stage="probe", error=describe_error(error))
        store.record_failure("", entry["path"], "probe", probe_key, record["error"], run_id)
    if fingerprint:
        store.record_source(entry["path"], *fingerprint, record["video_id"], probe_key, record["error"])
    return record


def _run_one(store: Store, stage, name: str, plan_keys: dict, upstream_keys: dict, record: dict,
             run_id: str) -> dict:
    record = dict(record, **{f"rows__{name}": -1, f"llm_calls__{name}": 0})
    if record["failed_stage"]:
        return record
    calls_before = PROCESS_USAGE.calls
    try:
        record[f"rows__{name}"] = run_stage(store, stage, plan_keys[name], upstream_keys, record,
                                            run_id, _node_id())
    except Exception as error:  # noqa: BLE001 - recorded, then the run goes on
        record.update(failed_stage=name, error=describe_error(error), **{f"rows__{name}": 0})
        store.record_failure(record["video_id"], record["source_path"], name, plan_keys[name],
                             record["error"], run_id)
    record[f"llm_calls__{name}"] = PROCESS_USAGE.calls - calls_before
    return record


def run_stateless(record: dict, settings: StoreSettings, name: str, config: dict, keys: dict,
                  upstream_keys: dict, run_id: str) -> dict:
    return _run_one(settings.open(), build_stage(config), name, keys, upstream_keys, record, run_id)


class ModelStageWorker:
    """One actor of a model stage's pool: builds the stage (and so loads its model) once."""

    def __init__(self, settings: StoreSettings, name: str, config: dict, keys: dict,
                 upstream_keys: dict, run_id: str, api_keys: dict):
        os.environ.update(api_keys)
        self.store = settings.open()
        self.stage = build_stage(config)
        self.name, self.keys, self.upstream_keys, self.run_id = name, keys, upstream_keys, run_id

    def __call__(self, record: dict) -> dict:
        return _run_one(self.store, self.stage, self.name, self.keys, self.upstream_keys, record,
                        self.run_id)


def _stage_map(ds, plan: Plan, name: str, settings: StoreSettings, run_id: str, resources: dict):
    args = dict(settings=settings, name=name, config=plan.configs[name], keys=plan.keys,
                upstream_keys=plan.upstream_keys(name), run_id=run_id)
    remote = dict(resources)
    if plan.stages[name].stateful:
        pool = ray.data.ActorPoolStrategy(size=remote.pop("concurrency", 1))
        return ds.map(ModelStageWorker, fn_constructor_kwargs=args | {"api_keys": api_keys(plan.configs[name])},
                      compute=pool, **remote)
    remote.pop("concurrency", None)
    return ds.map(run_stateless, fn_kwargs=args, **remote)


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


def stage_resources(cfg: DictConfig, plan: Plan) -> dict[str, dict]:
    """Each stage's Ray resources from `resources`; fitted to a local Ray, whose size is known and fixed
    (a cluster may autoscale to what the stages ask for)."""
    resources = {name: {"num_cpus": 1, **OmegaConf.to_container(cfg.resources.get(name, cfg.resources.default),
                                                                 resolve=True)}
                 for name in plan.stages}
    for name, asked in resources.items():
        for setting, low in (("num_cpus", 0), ("num_gpus", 0), ("concurrency", 1)):
            if setting in asked:
                check_range(f"resources.{name}.{setting}", asked[setting], low)
    if cfg.ray.address:
        return resources
    stateful = {name for name, stage in plan.stages.items() if stage.stateful}
    return fit_resources(resources, stateful, ray.cluster_resources().get("CPU", 0))


def init_ray(cfg: DictConfig) -> None:
    if not ray.is_initialized():
        local = {} if cfg.address else {"num_cpus": cfg.num_cpus}
        ray.init(address=cfg.address or None, include_dashboard=False, log_to_driver=cfg.log_to_driver, **local,
                 configure_logging=True, logging_level="WARNING")
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = bool(cfg.progress_bars)


@dataclasses.dataclass
class Summary:
    run_id: str
    videos: int = 0
    done: int = 0
    skipped: int = 0
    failed: int = 0
    duplicates: int = 0
    frames: int = 0
    # Stage runs on a video that were not skipped as complete (each loads or calls a model if it has one).
    stage_runs: int = 0
    llm_calls: int = 0
    rows: dict = dataclasses.field(default_factory=dict)
    failures: list = dataclasses.field(default_factory=list)
    # Files of the manifest's folder that are not videos, and sub-folders not searched.
    skipped_files: list = dataclasses.field(default_factory=list)
    # Videos whose frames ffmpeg could decode only in part: (path, what is missing and why).
    partial: list = dataclasses.field(default_factory=list)
    wall_seconds: float = 0.0
    previous_wall_seconds: float | None = None

    def lines(self) -> list[str]:
        lines = [
            f"videos: {self.videos} ({self.done} done, {self.skipped} skipped as complete, "
            f"{self.failed} failed, {self.duplicates} duplicate files)",
            f"frames written: {self.frames}; rows written per stage: {self.rows}",
            f"stage runs (model work): {self.stage_runs}; LLM calls: {self.llm_calls}",
        ]
        if self.skipped_files:
            shown = ", ".join(self.skipped_files[:10]) + (" ..." if len(self.skipped_files) > 10 else "")
            lines.append(f"not videos, skipped: {len(self.skipped_files)} ({shown}); sub-folders are searched "
                         "with dataset.recursive=true")
        lines += [f"PARTIAL {path}: {detail}" for path, detail in self.partial]
        lines += [f"FAILED {f['path']} at {f['stage']}: {f['error']}" for f in self.failures]
        wall = f"wall time: {self.wall_seconds:.1f} s"
        if self.previous_wall_seconds is not None:
            wall += (f" (previous run: {self.previous_wall_seconds:.1f} s, "
                     f"ratio {self.wall_seconds / max(self.previous_wall_seconds, 1e-9):.2f})")
        return lines + [wall]


def _known(store: Store, entries: list[dict], probe_key: str) -> tuple[list[dict], list[dict]]:
    """Split entries into records of files the store already probed unchanged, and the rest.

    An unchanged file is never hashed or probed again; one whose probe failed stays failed until it
    changes (its record says so), since ffprobe on the same bytes gives the same answer.
    """
    sources = store.sources([e["path"] for e in entries])
    videos = store.videos_by_id(sorted({s["video_id"] for s in sources.values() if s["video_id"]}))
    known, unknown = [], []
    for entry in entries:
        source = sources.get(entry["path"])
        fresh = (source is not None and source["probe_key"] == probe_key
                 and (source["size"], source["mtime_ns"]) == file_info(entry["path"]))
        base = {"entry_path": entry["path"], "video_id": "", "failed_stage": "", "error": ""}
        if fresh and source["error"]:
            known.append(dict(base, failed_stage="probe", error=source["error"] + " (file unchanged since)"))
        elif fresh and source["video_id"] in videos:
            known.append(dict(base, **videos[source["video_id"]]))
        else:
            unknown.append(entry)
    return known, unknown


def new_run_id() -> str:
    return utcnow().strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]


def register_plan(store: Store, plan: Plan) -> None:
    for name in plan.stages:
        store.register_stage_config(plan.keys[name], name, plan.stages[name].version, plan.describe(name))


def precompute(cfg: DictConfig) -> Summary:
    started, clock = utcnow(), time.monotonic()
    run_id = new_run_id()
    plan = build_plan(cfg.stages)
    if plan.probe is None:
        raise ConfigError(f"dataset {cfg.dataset.name} has captions-only stages (no probe): fill its store "
                          "with `vidprep import-captions`")
    settings = StoreSettings.from_config(cfg.store)
    store = settings.open()
    manifest = read_manifest(cfg.dataset.manifest, recursive=cfg.dataset.get("recursive", False))
    entries = [dataclasses.asdict(e) for e in manifest.entries]
    register_plan(store, plan)

    records, unknown = _known(store, entries, plan.probe_key)
    if unknown:
        init_ray(cfg.ray)
        records += (
            ray.data.from_items(unknown)
            .map(identify, fn_kwargs=dict(settings=settings, probe_config=plan.probe_config,
                                          probe_key=plan.probe_key, run_id=run_id))
            .take_all()
        )
    return run_stages(cfg, plan, settings, records, run_id, started, clock, manifest.skipped)


def run_stages(cfg: DictConfig, plan: Plan, settings: StoreSettings, records: list[dict], run_id: str,
               started, clock: float, skipped_files: list[str] = ()) -> Summary:
    """Every stage of the plan over the identified videos, then the run's summary (also stored)."""
    store = settings.open()
    summary = Summary(run_id=run_id, previous_wall_seconds=_previous_wall(store), skipped_files=list(skipped_files))
    unique, failed = {}, []
    for record in records:
        if record["failed_stage"]:
            failed.append(record)
        elif record["video_id"] in unique:
            summary.duplicates += 1
        else:
            unique[record["video_id"]] = record
    done = store.done_keys(unique)
    pending = [r for r in unique.values() if any((r["video_id"], k) not in done for k in plan.keys.values())]
    summary.skipped = len(unique) - len(pending)

    finished = []
    if pending:
        check_endpoints([plan.configs[name] for name in plan.stages])
        init_ray(cfg.ray)
        ds = ray.data.from_items(pending)
        for name, resources in stage_resources(cfg, plan).items():
            ds = _stage_map(ds, plan, name, settings, run_id, resources)
        finished = ds.take_all()
    for record in finished:
        for name in plan.stages:
            rows = record[f"rows__{name}"]
            summary.rows[name] = summary.rows.get(name, 0) + max(rows, 0)
            summary.stage_runs += rows >= 0
            summary.llm_calls += record[f"llm_calls__{name}"]
        if record["failed_stage"]:
            failed.append(record)
        else:
            summary.done += 1
    keys = set(plan.keys.values())
    summary.partial = sorted(
        (unique[r["video_id"]].get("source_path") or unique[r["video_id"]]["entry_path"], r["detail"])
        for r in store.scan("stage_done", "detail LIKE 'partial:%'", ["video_id", "stage_key", "detail"]).to_pylist()
        if r["video_id"] in unique and r["stage_key"] in keys)
    summary.frames = summary.rows.get("frames", 0)
    summary.videos = len(unique) + sum(1 for r in failed if not r["video_id"])
    summary.failed = len(failed)
    summary.failures = [{"path": r.get("source_path") or r["entry_path"], "stage": r["failed_stage"],
                         "error": r["error"]} for r in failed]
    if finished:
        store.index_embeddings()
        if cfg.store.compact_after_run:
            store.compact()
    summary.wall_seconds = time.monotonic() - clock
    store.record_run(run_id, "precompute", started, summary.wall_seconds,
                     json.dumps(dataclasses.asdict(summary), default=str))
    return summary


def _previous_wall(store: Store) -> float | None:
    last = store.last_run("precompute")
    return None if last is None else last["wall_seconds"]
