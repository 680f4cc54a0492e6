"""The pyarrow schema of every table in the store: the artifacts (declared in `artifacts.py`) and the
store's own bookkeeping, each derived from its row dataclass as the artifacts' are."""

import dataclasses
import datetime as dt
from dataclasses import dataclass
from typing import Annotated

import pyarrow as pa

from vidprep.store.artifacts import ARTIFACTS, arrow_fields, row_id_field as _row_id


# The types of the store's own columns that are not the plain ones (int32, float64, string, bool).
INT64 = Annotated[int, pa.int64()]
UTC_TIME = Annotated[dt.datetime, pa.timestamp("us", tz="UTC")]


def table_schema(row: type) -> pa.Schema:
    """A bookkeeping table's schema: its merge key, then the row dataclass's fields."""
    return pa.schema([_row_id(), *arrow_fields(row, [f.name for f in dataclasses.fields(row)])])


@dataclass(frozen=True)
class VideoRecord:
    """One row per video (its row_id is its video id): what the probe found."""

    video_id: str
    stage_key: str
    # The dataset's own name for the video (a manifest id, else the file name without extension).
    name: str
    source_path: str
    size: INT64
    duration: float
    fps: float
    width: int
    height: int
    codec: str
    has_audio: bool
    # The YCbCr matrix and range the file is tagged with, as ffprobe names them ("bt709", "tv", "unknown").
    color_space: str
    color_range: str


@dataclass(frozen=True)
class Source:
    """Every file path seen, with the content id it had at that size and mtime, so an unchanged file is
    never hashed or probed twice; `error` is set where probing this exact file failed."""

    source_path: str
    size: INT64
    mtime_ns: INT64
    video_id: str
    probe_key: str
    error: str


@dataclass(frozen=True)
class VideoName:
    """Every name a manifest gave a video (row_id: video_id/name): a file listed by two datasets, or
    renamed, is found by each of its names."""

    video_id: str
    name: str


@dataclass(frozen=True)
class StageDone:
    """One row per (video, stage key) whose artifacts are completely written; readers trust nothing else."""

    video_id: str
    stage: str
    stage_key: str
    rows: INT64
    # What the stage said of an artifact with no rows, e.g. "no audio track".
    detail: str
    seconds: float
    node_id: str
    run_id: str
    finished_at: UTC_TIME


@dataclass(frozen=True)
class StageConfig:
    """What each stage key stands for, so a key found in the store can be read back as a config."""

    stage: str
    version: int
    config_json: str


@dataclass(frozen=True)
class Failure:
    video_id: str
    source_path: str
    stage: str
    stage_key: str
    error: str
    run_id: str
    failed_at: UTC_TIME


@dataclass(frozen=True)
class Run:
    job: str
    started_at: UTC_TIME
    wall_seconds: float
    summary_json: str


@dataclass(frozen=True)
class CachedReply:
    """The LLM response cache: row_id is the hash of endpoint, model, messages and parameters."""

    model: str
    reply: str
    prompt_tokens: INT64
    completion_tokens: INT64
    created_at: UTC_TIME


@dataclass(frozen=True)
class FrameReading:
    """A vision model's output on one frame, keyed by the model and the frame's JPEG bytes: the stages
    that need the same model on the same frame (labels, text read off it) run it once."""

    model: str
    output_json: str
    created_at: UTC_TIME


@dataclass(frozen=True)
class PredictionRecord:
    """One row per (answer run, question): the prediction, whether it was valid, and the whole trace."""

    run_key: str
    qid: str
    video_id: str
    method: str
    task: str
    qtype: str
    question_json: str
    prediction_json: str
    valid: bool
    error: str
    trace_json: str
    visited: Annotated[list, pa.list_(pa.float64())]
    llm_calls: INT64
    cache_hits: INT64
    prompt_tokens: INT64
    completion_tokens: INT64
    # Per model: {"MODEL": {"calls", "prompt_tokens", "completion_tokens"}} (the method's and the vision model's).
    usage_json: str
    seconds: float
    created_at: UTC_TIME


@dataclass(frozen=True)
class VideoVector:
    """One row per (video, embedding stage key) of a table large enough for an ANN index: the normalised
    mean of the video's frame vectors. A search over all videos ranks videos by it first, then their
    frames exactly (`Store.search`); tables `video_vectors_<size>`, beside `frame_embeddings_<size>`."""

    video_id: str
    stage_key: str
    frames: int
    vector: Annotated[list, "vector"]


VIDEO_VECTORS = "video_vectors"


def video_vectors_table(embedding_table: str) -> str:
    return f"{VIDEO_VECTORS}_{embedding_table.rpartition('_')[2]}"


VIDEOS, SOURCES, VIDEO_NAMES, STAGE_DONE, STAGE_CONFIGS, FAILURES, RUNS, LLM_CACHE, FRAME_READINGS, PREDICTIONS = map(
    table_schema, (VideoRecord, Source, VideoName, StageDone, StageConfig, Failure, Run, CachedReply, FrameReading,
                   PredictionRecord))

BOOKKEEPING: dict[str, pa.Schema] = {
    "videos": VIDEOS,
    "sources": SOURCES,
    "video_names": VIDEO_NAMES,
    "stage_done": STAGE_DONE,
    "stage_configs": STAGE_CONFIGS,
    "failures": FAILURES,
    "runs": RUNS,
    "llm_cache": LLM_CACHE,
    "frame_readings": FRAME_READINGS,
    "predictions": PREDICTIONS,
}


# Scalar indexes, on each table that has the column: the merge key and the columns reads filter on.
# BTREE where values are nearly unique (a video's dataset name too, which `vidprep search` and `show`
# look videos up by); BITMAP for the few stage keys and answer runs.
INDEXED_COLUMNS = {"row_id": "BTREE", "video_id": "BTREE", "name": "BTREE", "stage_key": "BITMAP",
                   "run_key": "BITMAP"}


def scalar_indexes(columns: list[str]) -> dict[str, str]:
    """Column -> index type of the scalar indexes a table with these columns keeps."""
    return {column: kind for column, kind in INDEXED_COLUMNS.items() if column in columns}


def text_index(table: str) -> str | None:
    """The column of a table that keeps a full-text index (captions, transcripts, frame descriptions)."""
    artifact = _artifact_of(table)
    return artifact.text_column if artifact else None


def _artifact_of(table: str):
    for artifact in ARTIFACTS.values():
        if table == artifact.table:
            return artifact
        prefix, _, size = table.rpartition("_")
        if prefix == artifact.table and size.isdigit():
            return artifact.sized(int(size))
    return None


def declared_schema(table: str) -> pa.Schema | None:
    """Schema of a table as this process declares it (None: declared in a module not imported here);
    embedding tables are named by their vector size (`frame_embeddings_384`)."""
    if table in BOOKKEEPING:
        return BOOKKEEPING[table]
    prefix, _, size = table.rpartition("_")
    if prefix == VIDEO_VECTORS and size.isdigit():
        return pa.schema([_row_id(), *arrow_fields(VideoVector, [f.name for f in dataclasses.fields(VideoVector)],
                                                   int(size))])
    artifact = _artifact_of(table)
    return artifact.schema if artifact else None


def schema_for(table: str) -> pa.Schema:
    """The declared schema of a table, which creating it needs."""
    declared = declared_schema(table)
    if declared is None:
        raise KeyError(f"no table {table!r} is declared: import the module that declares its artifact")
    return declared
