"""The pyarrow schema of every table in the store: the artifacts (declared in `artifacts.py`) and the
store's own bookkeeping."""

import pyarrow as pa

from vidprep.store.artifacts import ARTIFACTS, row_id_field as _row_id


# One row per video (its row_id is its video id): what the probe found.
VIDEOS = pa.schema([
    _row_id(),
    pa.field("video_id", pa.string()),
    pa.field("stage_key", pa.string()),
    # The dataset's own name for the video (a manifest id, else the file name without extension).
    pa.field("name", pa.string()),
    pa.field("source_path", pa.string()),
    pa.field("size", pa.int64()),
    pa.field("duration", pa.float64()),
    pa.field("fps", pa.float64()),
    pa.field("width", pa.int32()),
    pa.field("height", pa.int32()),
    pa.field("codec", pa.string()),
    pa.field("has_audio", pa.bool_()),
    # The YCbCr matrix and range the file is tagged with, as ffprobe names them ("bt709", "tv", "unknown").
    pa.field("color_space", pa.string()),
    pa.field("color_range", pa.string()),
])

# Every file path seen, with the content id it had at that size and mtime, so an unchanged file is
# never hashed or probed twice; `error` is set where probing this exact file failed.
SOURCES = pa.schema(
    [
        _row_id(),
        pa.field("source_path", pa.string()),
        pa.field("size", pa.int64()),
        pa.field("mtime_ns", pa.int64()),
        pa.field("video_id", pa.string()),
        pa.field("probe_key", pa.string()),
        pa.field("error", pa.string()),
    ]
)

# One row per (video, stage key) whose artifacts are completely written; readers trust nothing else.
STAGE_DONE = pa.schema(
    [
        _row_id(),
        pa.field("video_id", pa.string()),
        pa.field("stage", pa.string()),
        pa.field("stage_key", pa.string()),
        pa.field("rows", pa.int64()),
        # What the stage said of an artifact with no rows, e.g. "no audio track".
        pa.field("detail", pa.string()),
        pa.field("seconds", pa.float64()),
        pa.field("node_id", pa.string()),
        pa.field("run_id", pa.string()),
        pa.field("finished_at", pa.timestamp("us", tz="UTC")),
    ]
)

# What each stage key stands for, so a key found in the store can be read back as a config.
STAGE_CONFIGS = pa.schema(
    [
        _row_id(),
        pa.field("stage", pa.string()),
        pa.field("version", pa.int32()),
        pa.field("config_json", pa.string()),
    ]
)

FAILURES = pa.schema(
    [
        _row_id(),
        pa.field("video_id", pa.string()),
        pa.field("source_path", pa.string()),
        pa.field("stage", pa.string()),
        pa.field("stage_key", pa.string()),
        pa.field("error", pa.string()),
        pa.field("run_id", pa.string()),
        pa.field("failed_at", pa.timestamp("us", tz="UTC")),
    ]
)

RUNS = pa.schema(
    [
        _row_id(),
        pa.field("job", pa.string()),
        pa.field("started_at", pa.timestamp("us", tz="UTC")),
        pa.field("wall_seconds", pa.float64()),
        pa.field("summary_json", pa.string()),
    ]
)

# The LLM response cache: row_id is the hash of endpoint, model, messages and parameters.
LLM_CACHE = pa.schema(
    [
        _row_id(),
        pa.field("model", pa.string()),
        pa.field("reply", pa.string()),
        pa.field("prompt_tokens", pa.int64()),
        pa.field("completion_tokens", pa.int64()),
        pa.field("created_at", pa.timestamp("us", tz="UTC")),
    ]
)

# A vision model's output on one frame, keyed by the model and the frame's JPEG bytes: the stages that
# need the same model on the same frame (labels, text read off it) run it once.
FRAME_READINGS = pa.schema(
    [
        _row_id(),
        pa.field("model", pa.string()),
        pa.field("output_json", pa.string()),
        pa.field("created_at", pa.timestamp("us", tz="UTC")),
    ]
)

# One row per (answer run, question): the prediction, whether it was valid, and the whole trace.
PREDICTIONS = pa.schema(
    [
        _row_id(),
        pa.field("run_key", pa.string()),
        pa.field("qid", pa.string()),
        pa.field("video_id", pa.string()),
        pa.field("method", pa.string()),
        pa.field("task", pa.string()),
        pa.field("qtype", pa.string()),
        pa.field("question_json", pa.string()),
        pa.field("prediction_json", pa.string()),
        pa.field("valid", pa.bool_()),
        pa.field("error", pa.string()),
        pa.field("trace_json", pa.string()),
        pa.field("visited", pa.list_(pa.float64())),
        pa.field("llm_calls", pa.int64()),
        pa.field("cache_hits", pa.int64()),
        pa.field("prompt_tokens", pa.int64()),
        pa.field("completion_tokens", pa.int64()),
        # Per model: {"MODEL": {"calls", "prompt_tokens", "completion_tokens"}} (the method's and the vision model's).
        pa.field("usage_json", pa.string()),
        pa.field("seconds", pa.float64()),
        pa.field("created_at", pa.timestamp("us", tz="UTC")),
    ]
)

BOOKKEEPING: dict[str, pa.Schema] = {
    "videos": VIDEOS,
    "sources": SOURCES,
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
    artifact = _artifact_of(table)
    return artifact.schema if artifact else None


def schema_for(table: str) -> pa.Schema:
    """The declared schema of a table, which creating it needs."""
    declared = declared_schema(table)
    if declared is None:
        raise KeyError(f"no table {table!r} is declared: import the module that declares its artifact")
    return declared
