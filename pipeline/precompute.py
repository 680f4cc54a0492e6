"""The precompute plan on Ray Data: manifest -> identify -> one map per stage (pipeline/runner.py) -> store.

Workers write straight to the store; only small per-video records travel back, and become the run's
summary.
"""

import dataclasses
import json
import math
import time
import uuid

import pyarrow as pa
import ray
from hydra.utils import instantiate
from omegaconf import DictConfig

from vidprep.agents.vision import stages_read
from vidprep.pipeline.executor import describe_error
from vidprep.pipeline.manifest import read_manifest
from vidprep.pipeline.plan import Plan, build_plan, made_from
from vidprep.pipeline.progress import Progress
from vidprep.pipeline.runner import init_ray, stage_maps, video_groups
from vidprep.conf.checks import ConfigError
from vidprep.stages.models.llm import check_endpoints
from vidprep.stages.media.files import file_info
from vidprep.store.schema import VIDEOS
from vidprep.store.settings import StoreSettings
from vidprep.store.store import Store, utcnow


IDENTIFY_PER_TASK = 32


def identify(entry: dict, probe_config: dict, probe_key: str) -> dict:
    """Hash and probe one manifest entry; its record carries the video row, or why it failed, and the
    file's size and mtime. The driver writes every record's rows at once (`record_identified`)."""
    from hydra.utils import instantiate

    record = {"entry_path": entry["path"], "video_id": "", "failed_stage": "", "error": "",
              "file_info": file_info(entry["path"])}
    try:
        video = instantiate(probe_config).run(entry["path"])
        record.update(video, name=entry["name"], stage_key=probe_key, row_id=video["video_id"])
    except Exception as error:  # noqa: BLE001 - a bad file must not stop the run
        record.update(failed_stage="probe", error=describe_error(error))
    return record


def record_identified(store: Store, records: list[dict], probe_key: str, run_id: str) -> None:
    """The videos, probe failures and file sources of identified entries, one write per table: a write
    per file cost more than probing the file (0.1 s against 0.05 s for a 3-second clip)."""
    store.upsert("videos", [{name: r[name] for name in VIDEOS.names} for r in records if not r["failed_stage"]])
    for r in records:
        if r["failed_stage"]:
            store.record_failure("", r["entry_path"], "probe", probe_key, r["error"], run_id)
    store.record_sources([(r["entry_path"], *r["file_info"], r["video_id"], probe_key, r["error"])
                          for r in records if r["file_info"]])


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
    # Configured stages not made, as the method does not read them (precompute.only_method_reads).
    left_out: list = dataclasses.field(default_factory=list)
    # Hashing and probing the files the store had not seen (or had seen changed), on Ray.
    identify_seconds: float = 0.0
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
        if self.left_out:
            lines.append("not made, as the method does not read them (precompute.only_method_reads=true): "
                         + ", ".join(self.left_out))
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
    changes (its record says so), since probing the same bytes gives the same answer.
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


def stages_left_out(cfg: DictConfig) -> list[str]:
    """The configured stages precompute does not make: with precompute.only_method_reads, those that neither
    the method (with its vision backend) reads nor the stages it reads are made from."""
    if not cfg.precompute.only_method_reads:
        return []
    read = stages_read(instantiate(cfg.method, llm=instantiate(cfg.llm.client)).stages_read(), instantiate(cfg.vision))
    if read is None:
        return []
    made = made_from(cfg.stages, read)
    return [name for name in cfg.stages if name != "probe" and name not in made]


def precompute(cfg: DictConfig, clock: float | None = None, stop_ray: bool = False,
               left_out: list[str] | None = None) -> Summary:
    """The configured stages but those `left_out` (`stages_left_out(cfg)` unless given), made for the videos
    of the dataset's manifest."""
    started, clock = utcnow(), time.monotonic() if clock is None else clock
    run_id = new_run_id()
    left_out = stages_left_out(cfg) if left_out is None else left_out
    plan = build_plan(cfg.stages, left_out)
    if plan.probe is None:
        raise ConfigError(f"dataset {cfg.dataset.name} has captions-only stages (no probe): fill its store "
                          "with `vidprep import-captions`")
    settings = StoreSettings.from_config(cfg.store)
    store = settings.open()
    manifest = read_manifest(cfg.dataset.manifest, recursive=cfg.dataset.get("recursive", False))
    entries = [dataclasses.asdict(e) for e in manifest.entries]
    register_plan(store, plan)

    records, unknown = _known(store, entries, plan.probe_key)
    identify_seconds = 0.0
    if unknown:
        # New videos have every stage to run: a down endpoint stops the run before Ray starts.
        check_endpoints([plan.configs[name] for name in plan.stages])
        cpus = init_ray(cfg.ray)
        identify_started = time.monotonic()
        # A Ray task costs about as much as probing a short file: a task probes up to IDENTIFY_PER_TASK
        # files, yet every CPU gets two tasks.
        tasks = min(len(unknown), max(round(2 * cpus), math.ceil(len(unknown) / IDENTIFY_PER_TASK)))
        identified = (
            ray.data.from_items(unknown, override_num_blocks=tasks)
            .map(identify, fn_kwargs=dict(probe_config=plan.probe_config, probe_key=plan.probe_key))
            .take_all()
        )
        # Back in manifest order, whatever order the tasks finished in: of two files with the same
        # content, the later one names the video, run after run.
        position = {entry["path"]: i for i, entry in enumerate(unknown)}
        identified.sort(key=lambda r: position[r["entry_path"]])
        record_identified(store, identified, plan.probe_key, run_id)
        records += [{k: v for k, v in r.items() if k != "file_info"} for r in identified]
        identify_seconds = time.monotonic() - identify_started
    ids = {r["entry_path"]: r["video_id"] for r in records if r["video_id"]}
    store.record_names({(ids[e["path"]], e["name"]) for e in entries if e["path"] in ids})
    return run_stages(cfg, plan, settings, records, run_id, started, clock, manifest.skipped, identify_seconds,
                      stop_ray, left_out)


def run_stages(cfg: DictConfig, plan: Plan, settings: StoreSettings, records: list[dict], run_id: str,
               started, clock: float, skipped_files: list[str] = (), identify_seconds: float = 0.0,
               stop_ray: bool = False, left_out: list[str] = ()) -> Summary:
    """Every stage of the plan over the identified videos, then the run's summary (also stored). With
    `stop_ray` (the process's last run), Ray stops before the wall time is read: its shutdown at exit
    takes 1-2 s the user waits for."""
    store = settings.open()
    summary = Summary(run_id=run_id, previous_wall_seconds=_previous_wall(store), skipped_files=list(skipped_files),
                      identify_seconds=identify_seconds, left_out=list(left_out))
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
        cpus = init_ray(cfg.ray)
        every, compacted_at = cfg.store.compact_every_videos, 0
        groups = video_groups(pending, cfg.ray.group_seconds, cpus)
        # One schema for every group, so that a column empty in one group has the type it has in others.
        columns = pa.Table.from_pylist(pending).schema
        blocks = ray.data.from_arrow([pa.Table.from_pylist(group, columns) for group in groups])
        with Progress("videos", len(pending)) as progress:
            for group in stage_maps(blocks, cfg, plan, settings, run_id).iter_batches(batch_size=None,
                                                                                      batch_format="pyarrow"):
                records = group.to_pylist()
                finished += records
                progress.advance(len(records), sum(bool(r["failed_stage"]) for r in records))
                # Each group's writes leave small fragments and rows outside the scalar indexes: folding
                # them in as the run goes keeps a write and a read as fast at the end of a run as at its start.
                if every and len(finished) - compacted_at >= every:
                    store.compact()
                    compacted_at = len(finished)
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
        for r in store.completions(unique, "detail LIKE 'partial:%'") if r["stage_key"] in keys)
    summary.frames = summary.rows.get("frames", 0)
    summary.videos = len(unique) + sum(1 for r in failed if not r["video_id"])
    summary.failed = len(failed)
    summary.failures = [{"path": r.get("source_path") or r["entry_path"], "stage": r["failed_stage"],
                         "error": r["error"]} for r in failed]
    if finished:
        store.index_embeddings()
        if cfg.store.compact_every_videos:
            store.compact()
    if stop_ray:
        ray.shutdown()
    summary.wall_seconds = time.monotonic() - clock
    store.record_run(run_id, "precompute", started, summary.wall_seconds,
                     json.dumps(dataclasses.asdict(summary), default=str))
    return summary


def _previous_wall(store: Store) -> float | None:
    last = store.last_run("precompute")
    return None if last is None else last["wall_seconds"]
