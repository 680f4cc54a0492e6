"""The one owner of the LanceDB database: idempotent writes, completion markers and the read API."""

import contextlib
import datetime as dt
import fcntl
import functools
import json
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass

import lancedb
import numpy as np
import pyarrow as pa
from lancedb.index import FTS, Bitmap, BTree, IvfSq
from lancedb.rerankers import RRFReranker
from tenacity import retry, retry_if_exception, stop_after_attempt, wait_random_exponential

from vidprep.conf.checks import ArtifactMissing, ConfigError

from vidprep.store import schema
from vidprep.store.artifacts import FRAME_EMBEDDINGS, FRAMES, Artifact, Frame
from vidprep.store.keys import row_id


def _quote(value: str) -> str:
    """A SQL string literal (paths may hold quotes, spaces, anything)."""
    return "'" + str(value).replace("'", "''") + "'"


def _in(column: str, values: Iterable[str]) -> str:
    return f"{column} IN ({', '.join(_quote(v) for v in values)})"


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


SEARCH_MODES = ("vector", "text", "hybrid")


def check_search_mode(mode: str) -> str:
    if mode not in SEARCH_MODES:
        raise ConfigError(f"search.mode must be one of {', '.join(SEARCH_MODES)}, got {mode!r}")
    return mode


@dataclass(frozen=True)
class SearchHit:
    video_id: str
    timestamp: float
    score: float
    description: str | None


class GroupCommit:
    """Rows from many threads written in as few commits as the store needs. A call returns once its row
    is stored (or raises what storing it raised); the rows that arrive while a commit runs go together in
    the next one, so 32 questions answered at once wait for a few commits, not for 32 in a row (and
    never lose a commit race to each other)."""

    def __init__(self, write: Callable[[list[dict]], None]):
        self.write = write
        self.waiting: list[tuple[dict, Future]] = []
        self.queue, self.writing = threading.Lock(), threading.Lock()

    def __call__(self, row: dict) -> None:
        stored = Future()
        with self.queue:
            self.waiting.append((row, stored))
        with self.writing:
            if not stored.done():
                with self.queue:
                    batch, self.waiting = self.waiting, []
                try:
                    self.write([r for r, _ in batch])
                except BaseException as error:
                    for _, future in batch:
                        future.set_exception(error)
                else:
                    for _, future in batch:
                        future.set_result(None)
        stored.result()


class Store:
    """A LanceDB database at `uri` (a local folder or any LanceDB URI such as `s3://bucket/prefix`).

    Embedding tables of at least `ann_min_rows` rows get an ANN index, searched `ANN_PROBES` partitions
    deep, its best candidates (`ANN_REFINE_FACTOR` times k) re-ranked on the full vectors; smaller
    tables are searched exactly.
    """

    ANN_PROBES = 20
    ANN_REFINE_FACTOR = 10
    # A search over all videos of an indexed table ranks this many videos by their mean vector, then
    # their frames exactly (`_nearest_videos`; 0: the ANN index alone).
    NEAREST_VIDEOS = 32
    # Complete artifacts (one video's rows of one stage key) and video records kept in memory once read.
    READ_CACHE_ENTRIES = 256

    def __init__(self, uri: str, storage_options: dict | None = None, ann_min_rows: int = 100_000):
        self.uri = str(uri)
        self.ann_min_rows = ann_min_rows
        # Workers in other processes write while this handle reads: check for new versions on every read.
        self._db = lancedb.connect(self.uri, storage_options=dict(storage_options or {}),
                                   read_consistency_interval=dt.timedelta(0))
        # Where the per-table write locks of a store on a file system are (`_writing`); none on an object store.
        self._locks = None if "://" in self.uri else os.path.join(self.uri, "_write_locks")
        self._tables: dict[str, lancedb.table.Table] = {}
        # Embedding stage key -> the table of its vector size (a key names one model, so one size).
        self._embedding_tables: dict[str, str] = {}
        # (video vectors table, stage key) -> (its version, video ids, their mean vectors as a matrix).
        self._video_vectors: dict[tuple[str, str], tuple[int, np.ndarray, np.ndarray]] = {}
        # A complete artifact never changes (its rows are keyed by content and config), nor does a video's
        # record: the questions of one video read them once per process, not once per question each.
        self._complete_rows = functools.lru_cache(maxsize=self.READ_CACHE_ENTRIES)(self._read_complete)
        self._video = functools.lru_cache(maxsize=self.READ_CACHE_ENTRIES)(self._read_video)
        self._detail = functools.lru_cache(maxsize=self.READ_CACHE_ENTRIES)(self._read_detail)
        self._frame_rows = functools.lru_cache(maxsize=self.READ_CACHE_ENTRIES)(
            functools.partial(self._frames, with_jpeg=False))
        # Rows written one at a time by many threads (answers, LLM replies) share commits.
        self._prediction_writes = GroupCommit(functools.partial(self.upsert, "predictions"))
        self._cache_writes = GroupCommit(functools.partial(self.upsert, "llm_cache"))

    # -- tables ---------------------------------------------------------------------------------

    def table(self, name: str):
        if name not in self._tables:
            # A table opens by its stored schema; only creating one needs its declaration, so a table
            # declared in a user's module that this process has not imported is still read and compacted.
            try:
                table = self._db.open_table(name)
            except ValueError:  # not there yet (two processes may create it at once: exist_ok)
                table = self._db.create_table(name, schema=schema.schema_for(name), exist_ok=True)
            # A store written by an earlier vidprep lacks the columns added since: they are added, empty.
            declared = schema.declared_schema(name)
            missing = [field for field in declared or [] if field.name not in table.schema.names]
            if missing:
                table.add_columns(missing)
            self._ensure_indexes(name, table)
            self._tables[name] = table
        return self._tables[name]

    @staticmethod
    def _ensure_indexes(name: str, table) -> None:
        """Create the table's declared scalar and full-text indexes it lacks. Rows written after an index
        was built are read by a scan beside it until `compact` folds them in."""
        indexed = {tuple(index.columns) for index in table.list_indices()}
        configs = {column: BTree() if kind == "BTREE" else Bitmap()
                   for column, kind in schema.scalar_indexes(table.schema.names).items()}
        if text := schema.text_index(name):
            # Lower-cased, stemmed English words without stop words: "flowers" finds "flower".
            configs[text] = FTS()
        for column, config in configs.items():
            if (column,) in indexed:
                continue
            try:
                table.create_index(column, config=config, replace=False)
            except Exception:  # noqa: BLE001 - another process may have created it first
                if not any(index.columns == [column] for index in table.list_indices()):
                    raise

    def table_names(self) -> list[str]:
        names, token = [], None
        while True:
            page = self._db.list_tables(page_token=token)
            names += page.tables
            if not (token := page.page_token):
                return sorted(names)

    def _has_table(self, name: str) -> bool:
        # A table once opened stays; only an unknown name costs a listing of the database.
        return name in self._tables or name in self.table_names()

    def upsert(self, name: str, rows: list[dict] | pa.Table) -> None:
        """Write rows idempotently: a row whose `row_id` exists is replaced, never duplicated (within the
        rows too: the last of a `row_id` is kept, since merge_insert would insert each of them)."""
        if not isinstance(rows, pa.Table):
            rows = list({row["row_id"]: row for row in rows}.values())
        if not isinstance(rows, pa.Table) and not rows:
            return
        # The declared schema needs no read; a table declared in a module not imported here has its stored one.
        data = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(
            rows, schema.declared_schema(name) or self.table(name).schema)
        if data.num_rows == 0:
            return
        table = self.table(name)
        with self._writing(name) as locked:
            (
                table.merge_insert("row_id")
                # Two writers that insert the same new row_id at once both commit it when the merge looks
                # it up in the row_id index (lance#9238): Lance's own key check then holds only on a full
                # scan of the row_ids, so the index is used only where a lock keeps writers apart.
                .use_index(locked)
                .when_matched_update_all()
                .when_not_matched_insert_all()
                .execute(data)
            )

    @contextlib.contextmanager
    def _writing(self, name: str) -> Iterator[bool]:
        """Hold the store's write lock of table `name` (writers in other threads, processes and, on a
        shared file system, nodes wait for it); yields whether there is one: an object store, or a file
        system that has no locks (some FUSE mounts of buckets), has none."""
        if self._locks is None:
            yield False
            return
        os.makedirs(self._locks, exist_ok=True)
        # A lock per open file: this process's threads exclude each other too; a killed writer's is freed.
        with open(os.path.join(self._locks, name), "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX)
            except OSError:  # ENOLCK, EOPNOTSUPP: no locks here
                locked = False
            else:
                locked = True
            yield locked

    def append(self, name: str, rows: pa.Table) -> None:
        """Write rows known to be new (bulk loads): appended without the upsert's key lookup."""
        self.table(name).add(rows)

    def scan(self, name: str, where: str | None = None, columns: list[str] | None = None) -> pa.Table:
        if not self._has_table(name):
            return schema.schema_for(name).empty_table()
        query = self.table(name).search()
        if where:
            query = query.where(where)
        if columns:
            query = query.select(columns)
        return query.limit(None).to_arrow()

    def _scan_in(self, name: str, column: str, values: Iterable[str], where: str = "",
                 columns: list[str] | None = None) -> list[dict]:
        """Rows whose `column` is one of `values` (and matching `where`), asked 500 values at a time
        so a long list never makes one huge filter."""
        values, found = list(values), []
        for i in range(0, len(values), 500):
            condition = _in(column, values[i : i + 500]) + (f" AND ({where})" if where else "")
            found += self.scan(name, condition, columns).to_pylist()
        return found

    # -- stage bookkeeping ----------------------------------------------------------------------

    def register_stage_config(self, key: str, stage: str, version: int, config_json: str) -> None:
        self.upsert(
            "stage_configs",
            [{"row_id": key, "stage": stage, "version": version, "config_json": config_json}],
        )

    def mark_done(self, markers: list[dict]) -> None:
        """Completion markers, in one write: each names its video_id, stage, stage_key, rows, detail,
        seconds, node_id and run_id."""
        now = utcnow()
        self.upsert("stage_done", [dict(m, row_id=row_id(m["video_id"], m["stage_key"], "done"), finished_at=now)
                                   for m in markers])

    def done_keys(self, video_ids: Iterable[str]) -> set[tuple[str, str]]:
        """The (video id, stage key) pairs whose artifacts are complete."""
        rows = self.completions(video_ids, columns=["video_id", "stage_key"])
        return {(r["video_id"], r["stage_key"]) for r in rows}

    def completions(self, video_ids: Iterable[str], where: str = "",
                    columns: tuple[str, ...] | list[str] = ("video_id", "stage_key", "detail")) -> list[dict]:
        """The completion markers of these videos (and matching `where`), read through the video index."""
        return self._scan_in("stage_done", "video_id", video_ids, where, list(columns))

    def is_done(self, video_id: str, key: str) -> bool:
        return (video_id, key) in self.done_keys([video_id])

    def record_failure(self, video_id: str, source_path: str, stage: str, key: str, error: str,
                       run_id: str) -> None:
        self.upsert("failures", [{
            "row_id": row_id(video_id or source_path, key, run_id), "video_id": video_id,
            "source_path": source_path, "stage": stage, "stage_key": key, "error": error,
            "run_id": run_id, "failed_at": utcnow(),
        }])

    def failures(self, video_id: str) -> list[dict]:
        """Why stages of a video failed, oldest first (a stage that later completed still has its rows)."""
        rows = self.scan("failures", f"video_id = {_quote(video_id)}").to_pylist()
        return sorted(rows, key=lambda r: r["failed_at"])

    def record_run(self, run_id: str, job: str, started_at: dt.datetime, wall_seconds: float,
                   summary_json: str) -> None:
        self.upsert("runs", [{
            "row_id": run_id, "job": job, "started_at": started_at, "wall_seconds": wall_seconds,
            "summary_json": summary_json,
        }])

    def last_run(self, job: str) -> dict | None:
        runs = self.scan("runs", f"job = {_quote(job)}").to_pylist()
        return max(runs, key=lambda r: r["started_at"]) if runs else None

    def record_sources(self, sources: list[tuple[str, int, int, str, str, str]]) -> None:
        """Files seen, each (path, size, mtime_ns, video_id, probe_key, probe error), in one write."""
        self.upsert("sources", [{
            "row_id": path, "source_path": path, "size": size, "mtime_ns": mtime_ns,
            "video_id": video_id, "probe_key": probe_key, "error": error,
        } for path, size, mtime_ns, video_id, probe_key, error in sources])

    def sources(self, paths: list[str]) -> dict[str, dict]:
        """What the store knows of these paths (their last size, mtime, id or probe error)."""
        return {r["source_path"]: r for r in self._scan_in("sources", "row_id", paths)}

    def record_names(self, names: set[tuple[str, str]]) -> None:
        """Each (video_id, name) a manifest gave, in one write of those not stored yet."""
        rows = {f"{video_id}/{name}": {"row_id": f"{video_id}/{name}", "video_id": video_id, "name": name}
                for video_id, name in names}
        stored = {r["row_id"] for r in self._scan_in("video_names", "row_id", rows, columns=["row_id"])}
        self.upsert("video_names", [row for key, row in sorted(rows.items()) if key not in stored])

    def names(self, video_id: str) -> list[str]:
        """Every name manifests gave a video, sorted."""
        return sorted(r["name"] for r in self.scan("video_names", f"video_id = {_quote(video_id)}", ["name"]).to_pylist())

    def video_ids_named(self, name: str) -> set[str]:
        """Videos any manifest named `name`, or whose file is named `name` (with or without its
        extension), read through the indexes rather than a scan of every video."""
        named = {r["video_id"] for r in self.scan("video_names", f"name = {_quote(name)}", ["video_id"]).to_pylist()}
        named |= {r["video_id"] for r in self.scan("videos", f"name = {_quote(name)}", ["video_id"]).to_pylist()}
        # LIKE's wildcards in a name only widen the match; the exact rule is applied after.
        pattern = f"source_path = {_quote(name)} OR source_path LIKE {_quote('%/' + name)} OR " \
                  f"source_path LIKE {_quote('%/' + name + '.%')} OR source_path LIKE {_quote(name + '.%')}"
        for r in self.scan("sources", pattern, ["source_path", "video_id"]).to_pylist():
            file = os.path.basename(r["source_path"])
            if r["video_id"] and name in (file, os.path.splitext(file)[0]):
                named.add(r["video_id"])
        return named

    def videos_by_id(self, video_ids: list[str]) -> dict[str, dict]:
        return {r["video_id"]: r for r in self._scan_in("videos", "video_id", video_ids)}

    def llm_cached(self, key: str) -> dict | None:
        """The cached reply of this request with the tokens it cost when it was made: {reply,
        prompt_tokens, completion_tokens}."""
        rows = self.scan("llm_cache", f"row_id = {_quote(key)}", ["reply", "prompt_tokens", "completion_tokens"])
        return rows.to_pylist()[0] if rows.num_rows else None

    def llm_remember(self, key: str, model: str, reply: str, prompt_tokens: int,
                     completion_tokens: int) -> None:
        self._cache_writes({
            "row_id": key, "model": model, "reply": reply, "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens, "created_at": utcnow(),
        })

    def readings(self, keys: list[str]) -> dict[str, str]:
        """Stored vision-model outputs (JSON) by their keys; keys not stored are left out."""
        return {r["row_id"]: r["output_json"]
                for r in self._scan_in("frame_readings", "row_id", keys, columns=["row_id", "output_json"])}

    def remember_readings(self, readings: list[tuple[str, str, str]]) -> None:
        """Vision-model outputs, each (key, model, output JSON), in one write."""
        now = utcnow()
        self.upsert("frame_readings", [{"row_id": key, "model": model, "output_json": output, "created_at": now}
                                       for key, model, output in readings])

    # -- predictions ---------------------------------------------------------------------------------

    def record_prediction(self, row: dict) -> None:
        """One question's prediction in an answer run (in one commit with those recorded at the same time
        by other threads); a re-run of the question replaces its row."""
        self._prediction_writes(dict(row, row_id=f"{row['run_key']}/{row['qid']}", created_at=utcnow()))

    def answer_runs(self) -> dict[str, dict]:
        """What each answer run recorded, by run key (its newest `answer`): summary, dataset, stage keys,
        settings."""
        # Oldest first, so the newest record of a run key wins.
        runs = sorted(self.scan("runs", "job = 'answer'", ["started_at", "summary_json"]).to_pylist(),
                      key=lambda r: r["started_at"])
        return {s["run_key"]: s for s in map(json.loads, (r["summary_json"] for r in runs))}

    def predictions(self, run_keys: Iterable[str] = (), columns: list[str] | None = None) -> list[dict]:
        """The predictions of these answer runs (all runs when none are named)."""
        run_keys = list(run_keys)
        return self.scan("predictions", _in("run_key", run_keys) if run_keys else None, columns).to_pylist()

    # -- read API for agents --------------------------------------------------------------------

    def require_done(self, video_id: str, key: str) -> None:
        if not self.is_done(video_id, key):
            raise ArtifactMissing(
                f"video {video_id} has no complete artifacts for stage key {key} in {self.uri}; "
                "run `vidprep precompute` with the matching config"
            )

    def video(self, video_id: str) -> dict:
        return dict(self._video(video_id))

    def _read_video(self, video_id: str) -> dict:
        rows = self.scan("videos", f"video_id = {_quote(video_id)}").to_pylist()
        if not rows:
            raise ArtifactMissing(f"no video {video_id} in {self.uri}")
        return rows[0]

    def videos(self) -> list[dict]:
        return self.scan("videos").to_pylist()

    @staticmethod
    def _of(video_id: str, key: str) -> str:
        return f"video_id = {_quote(video_id)} AND stage_key = {_quote(key)}"

    def read(self, artifact: Artifact, video_id: str, key: str) -> list:
        """A video's complete rows of an artifact, as its row type, in order."""
        return list(self._complete_rows(artifact, video_id, key))

    def _read_complete(self, artifact: Artifact, video_id: str, key: str) -> list:
        self.require_done(video_id, key)
        return self._rows(artifact, video_id, key)

    def _rows(self, artifact: Artifact, video_id: str, key: str) -> list:
        return artifact.rows(self.scan(artifact.table, self._of(video_id, key)).to_pylist())

    def read_batches(self, artifact: Artifact, video_id: str, key: str, batch_size: int,
                     checked: bool = False) -> Iterator[list]:
        """`read` as a stage takes it: a streamed artifact `batch_size` rows at a time (only its order
        column is read up front, so memory stays flat for long videos), any other as one batch.
        `checked`: the caller has seen the artifact's completion marker."""
        if not checked:
            self.require_done(video_id, key)
        if not artifact.streamed:
            yield self._rows(artifact, video_id, key)
            return
        where = self._of(video_id, key)
        order = sorted(self.scan(artifact.table, where, [artifact.order])[artifact.order].to_pylist())
        for i in range(0, len(order), batch_size):
            first, last = order[i], order[min(i + batch_size, len(order)) - 1]
            rows = self.scan(artifact.table, f"{where} AND {artifact.order} >= {first} AND {artifact.order} <= {last}")
            yield artifact.rows(rows.to_pylist())

    def detail(self, video_id: str, key: str) -> str:
        """What a stage said of a video's complete artifact ("no audio track"), or ""."""
        return self._detail(video_id, key)

    def _read_detail(self, video_id: str, key: str) -> str:
        self.require_done(video_id, key)
        done = self.scan("stage_done", f"row_id = {_quote(row_id(video_id, key, 'done'))}", ["detail"])
        return done["detail"][0].as_py() or ""

    def _frames(self, video_id: str, key: str, where: str = "", with_jpeg: bool = True) -> list[Frame]:
        self.require_done(video_id, key)
        columns = ["video_id", "frame_index", "timestamp", "width", "height"]
        rows = self.scan(FRAMES.table, self._of(video_id, key) + where, columns + ["jpeg"] if with_jpeg else columns)
        return FRAMES.rows([dict(r, jpeg=r.get("jpeg", b"")) for r in rows.to_pylist()])

    def frames_in_range(self, video_id: str, key: str, start: float, end: float) -> list[Frame]:
        return self._frames(video_id, key, f" AND timestamp >= {float(start)} AND timestamp <= {float(end)}")

    def frame_index(self, video_id: str, key: str, within: tuple[float, float] | None = None) -> list[Frame]:
        """A video's frames without their JPEGs, in order, those `within` a (start, end) range where one is
        given (the frame nearest its middle where no frame falls inside); ArtifactMissing when it has none."""
        index = list(self._frame_rows(video_id, key))
        if not index:
            raise ArtifactMissing(f"video {video_id} has no frames for stage key {key}")
        if within is None:
            return index
        start, end = within
        return ([f for f in index if start <= f.timestamp <= end]
                or [min(index, key=lambda f: abs(f.timestamp - (start + end) / 2))])

    def _frames_at(self, video_id: str, key: str, picked: Iterable[Frame]) -> list[Frame]:
        """The picked frames with their JPEGs, in time order."""
        wanted = ", ".join(sorted({str(f.frame_index) for f in picked}))
        return sorted(self._frames(video_id, key, f" AND frame_index IN ({wanted})"), key=lambda f: f.timestamp)

    def frames_nearest(self, video_id: str, key: str, t: float, n: int,
                       within: tuple[float, float] | None = None) -> list[Frame]:
        """The n frames nearest to time t (among those `within` a range), in time order (JPEGs read only
        for those)."""
        index = self.frame_index(video_id, key, within)
        return self._frames_at(video_id, key, sorted(index, key=lambda f: abs(f.timestamp - t))[:n])

    def frames_nearest_each(self, video_id: str, key: str, times: list[float],
                            within: tuple[float, float] | None = None) -> list[Frame]:
        """The frame nearest to each time (among those `within` a range), each frame once, in time order
        (the index read once, JPEGs only for those)."""
        if not times:
            return []
        index = self.frame_index(video_id, key, within)
        return self._frames_at(video_id, key, (min(index, key=lambda f: abs(f.timestamp - t)) for t in times))

    def frame_nearest(self, video_id: str, key: str, t: float, within: tuple[float, float] | None = None) -> Frame:
        return self.frames_nearest(video_id, key, t, 1, within)[0]

    def evenly_spaced_frames(self, video_id: str, key: str, n: int,
                             within: tuple[float, float] | None = None) -> list[Frame]:
        """N frames at 0, 1/(n-1), …, 1 of the video's span, or of a range `within` it (the first frame
        when n is 1)."""
        index = self.frame_index(video_id, key, within)
        last = len(index) - 1
        return self._frames_at(video_id, key, (index[round(i * last / (n - 1)) if n > 1 else 0] for i in range(n)))

    def frame_embeddings(self, video_id: str, key: str, frame_indices: list[int]) -> dict[int, tuple]:
        """Each asked frame's (vector, description) from the embedding stage `key`, read from the table
        of the size its vectors have (so reading needs no model to know that size)."""
        self.require_done(video_id, key)
        table = self._embedding_table(video_id, key)
        if not frame_indices or table is None:
            return {}
        wanted = ", ".join(str(int(i)) for i in frame_indices)
        rows = self.scan(table, self._of(video_id, key) + f" AND frame_index IN ({wanted})",
                         ["frame_index", "vector", "description"])
        return {r["frame_index"]: (np.asarray(r["vector"], dtype=np.float32), r["description"] or "")
                for r in rows.to_pylist()}

    def _embedding_table(self, video_id: str, key: str) -> str | None:
        if key not in self._embedding_tables:
            sized = [n for n in self.table_names() if n.startswith(f"{FRAME_EMBEDDINGS.table}_")]
            holding = next((n for n in sized if self.table(n).count_rows(self._of(video_id, key))), None)
            if holding is None:
                return None
            self._embedding_tables[key] = holding
        return self._embedding_tables[key]

    def done_stages(self, video_id: str) -> list[dict]:
        """Every complete (stage, key) of a video, with what each key stands for."""
        done = self.scan("stage_done", f"video_id = {_quote(video_id)}").to_pylist()
        configs = {r["row_id"]: r["config_json"] for r in self.scan("stage_configs").to_pylist()}
        return [dict(r, config_json=configs.get(r["stage_key"], "")) for r in done]

    def search(self, query: np.ndarray, key: str, video_id: str | None = None, k: int = 5,
               text: str = "", mode: str = "vector", within: tuple[float, float] | None = None) -> list[SearchHit]:
        """Top-k frames among complete embeddings of stage `key`, ranked by `mode`: "vector" (cosine
        similarity of the query's embedding `query` to each frame's), "text" (full-text relevance of
        `text` to each frame's stored description, BM25 over stemmed words) or "hybrid" (both lists
        fused by reciprocal rank, LanceDB's RRF). A hit's score is its cosine similarity in every mode.
        `within`: only frames of one video between two times (a question about a clip of it)."""
        check_search_mode(mode)
        where = f"stage_key = {_quote(key)}"
        if video_id:
            self.require_done(video_id, key)
            where += f" AND video_id = {_quote(video_id)}"
            if within:
                where += f" AND timestamp >= {float(within[0])} AND timestamp <= {float(within[1])}"
        name = FRAME_EMBEDDINGS.sized(len(query)).table
        if not self._has_table(name):
            return []
        # A video being written (or cut off by a kill) may have rows but no completion marker yet: fetch
        # more than k and keep the complete videos' rows, rather than filter by a list of every video.
        # Over all videos the stage key is applied after the search: before it, Lance builds a mask of
        # every row (22 ms of a 30 ms search at 10^6 rows); so fetch until k pass or all rows were seen.
        table, limit, query = self.table(name), k, np.asarray(query, dtype=np.float32)
        nearest = None if video_id or mode != "vector" else self._nearest_videos(name, key, query)
        if nearest is not None:
            where += f" AND {_in('video_id', nearest)}"
        while True:
            rows = (self._ranked(table, query, text, mode, exact=nearest is not None)
                    .where(where, prefilter=bool(video_id) or nearest is not None).limit(limit).to_list())
            if nearest is not None:  # only complete videos have a mean vector
                complete = rows
                break
            done = self.done_keys({r["video_id"] for r in rows})
            complete = [r for r in rows if (r["video_id"], key) in done]
            if len(complete) >= k or limit >= table.count_rows():
                break
            limit *= 4
        unit = query / (np.linalg.norm(query) or 1.0)
        return [
            SearchHit(r["video_id"], r["timestamp"], 1.0 - r["_distance"] if mode == "vector" else
                      float(np.dot(r["vector"], unit) / (np.linalg.norm(r["vector"]) or 1.0)), r["description"])
            for r in complete[:k]
        ]

    def _nearest_videos(self, name: str, key: str, query: np.ndarray) -> list[str] | None:
        """The `NEAREST_VIDEOS` videos of stage `key` whose mean frame vectors are nearest `query`; None
        where the table has no video vectors or a complete video has none yet (completed since the
        last compaction): the ANN index then answers alone.

        Why: a query far from every frame, as a text query is from CLIP image vectors (cosine 0.2-0.35
        to its own image), has its nearest frames in partitions whose centroids average many other
        videos, so the IVF probes missed most of them (recall@10 0.40 at 10^6). A video's frames are
        close to each other, so its mean vector keeps the signal that a partition's centroid dilutes."""
        vectors = schema.video_vectors_table(name)
        if not self.NEAREST_VIDEOS or not self._has_table(vectors):
            return None
        table = self.table(vectors)
        cached = self._video_vectors.get((vectors, key))
        if cached is None or cached[0] != table.version:
            rows = self.scan(vectors, f"stage_key = {_quote(key)}", ["video_id", "vector"])
            cached = (table.version, np.asarray(rows["video_id"].to_pylist()), _vectors(rows))
            self._video_vectors[(vectors, key)] = cached
        _, ids, matrix = cached
        if not len(ids) or self.table("stage_done").count_rows(f"stage_key = {_quote(key)}") != len(ids):
            return None
        scores = matrix @ (query / (np.linalg.norm(query) or 1.0))
        count = min(self.NEAREST_VIDEOS, len(ids))
        return ids[np.argpartition(-scores, count - 1)[:count]].tolist()

    def _ranked(self, table, query: np.ndarray, text: str, mode: str, exact: bool = False):
        """The query builder of a search mode, before its filter and limit (`exact`: no ANN index)."""
        columns = ["video_id", "timestamp", "description"]
        if mode == "text":
            return (table.search(text, query_type="fts", fts_columns=FRAME_EMBEDDINGS.text_column)
                    .select([*columns, "vector", "_score"]))
        if mode == "hybrid":
            ranked = table.search(query_type="hybrid", vector_column_name="vector").vector(query).text(text)
            ranked, columns = ranked.rerank(RRFReranker()), [*columns, "vector"]
        else:
            ranked, columns = table.search(query, vector_column_name="vector"), [*columns, "_distance"]
        ranked = ranked.distance_type("cosine")
        if exact:
            return ranked.bypass_vector_index().select(columns)
        return ranked.nprobes(self.ANN_PROBES).refine_factor(self.ANN_REFINE_FACTOR).select(columns)

    def index_embeddings(self) -> list[str]:
        """Build an ANN index on each embedding table that has reached `ann_min_rows` rows and has none;
        returns the tables indexed now.

        IVF with scalar-quantised vectors, trained on a sample: sqrt(rows)/2 partitions, 64 sampled
        vectors per partition, 25 k-means iterations. On 10^6 video-like vectors it built in 20 s on
        2 cores with recall@10 0.95 for queries near a frame (`vidprep bench --only search`); IVF-HNSW
        took 21 minutes there. Trained once: rows written later are folded into it by `compact`."""
        indexed = []
        for name in self.table_names():
            if not name.startswith(f"{FRAME_EMBEDDINGS.table}_"):
                continue
            table = self.table(name)
            rows = table.count_rows()
            if rows < self.ann_min_rows:
                continue
            if not any(index.columns == ["vector"] for index in table.list_indices()):
                table.create_index("vector", config=IvfSq(
                    distance_type="cosine", num_partitions=max(1, round(rows ** 0.5 / 2)), sample_rate=64,
                    max_iterations=25))
                indexed.append(name)
            self._add_video_vectors(name)
        return indexed

    def _add_video_vectors(self, name: str) -> None:
        """The mean vector of every complete video of the embedding table `name` that has none yet."""
        vectors = schema.video_vectors_table(name)
        have = set(self.scan(vectors, columns=["row_id"])["row_id"].to_pylist())
        done = self.scan("stage_done", f"stage = {_quote(FRAME_EMBEDDINGS.stage)}", ["video_id", "stage_key"]).to_pylist()
        missing: dict[str, list[str]] = {}
        for r in done:
            if row_id(r["video_id"], r["stage_key"], "mean") not in have:
                missing.setdefault(r["stage_key"], []).append(r["video_id"])
        for key, videos in missing.items():
            for i in range(0, len(videos), 500):
                rows = self.scan(name, f"{_in('video_id', videos[i:i + 500])} AND stage_key = {_quote(key)}",
                                 ["video_id", "vector"])
                if not rows.num_rows:  # the key's videos are in a table of another vector size
                    break
                ids = np.asarray(rows["video_id"].to_pylist())
                matrix = _vectors(rows)
                order = np.argsort(ids, kind="stable")
                found, starts, counts = np.unique(ids[order], return_index=True, return_counts=True)
                means = np.add.reduceat(matrix[order], starts, axis=0)
                means /= np.linalg.norm(means, axis=1, keepdims=True).clip(1e-12)
                self.upsert(vectors, pa.table({
                    "row_id": [row_id(v, key, "mean") for v in found], "video_id": found.tolist(),
                    "stage_key": [key] * len(found), "frames": counts.astype(np.int32),
                    "vector": pa.FixedSizeListArray.from_arrays(pa.array(means.astype(np.float32).ravel()),
                                                                 matrix.shape[1])},
                    schema=schema.schema_for(vectors)))

    def compact(self, tables: Iterable[str] | None = None) -> None:
        """Merge the small fragments that many small writes leave behind and fold rows written since an
        index was built into it (LanceDB's optimize; the video vectors too), in `tables` or all. A
        write's key lookup scans every fragment outside the index: 600 one-row fragments made an upsert
        0.3 s instead of 0.015 s."""
        names = self.table_names()
        for name in names if tables is None else set(tables) & set(names):
            _optimize(self.table(name))
            # Videos completed since the video vectors were last added get theirs (see `_nearest_videos`).
            if name.startswith(f"{FRAME_EMBEDDINGS.table}_") and schema.video_vectors_table(name) in names:
                self._add_video_vectors(name)


def _vectors(rows: pa.Table) -> np.ndarray:
    """The `vector` column of rows as one matrix, a row per vector."""
    return rows["vector"].combine_chunks().flatten().to_numpy().reshape(rows.num_rows, -1)


def _lost_commit_race(error: BaseException) -> bool:
    return isinstance(error, RuntimeError) and "Retryable commit conflict" in str(error)


# Two jobs compacting one table at once: the later commit loses to the earlier, which merged the same
# fragments. It retries on the new version; if it keeps losing, the others are compacting and it leaves
# the table to them (compaction only tidies: no row depends on it).
@retry(retry=retry_if_exception(_lost_commit_race), stop=stop_after_attempt(5),
       wait=wait_random_exponential(multiplier=0.1, max=2), retry_error_callback=lambda _: None)
def _optimize(table) -> None:
    table.optimize()
