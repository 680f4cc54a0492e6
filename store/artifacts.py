"""Every artifact a precompute stage writes, declared once: its table, its row type (whose fields are
the table's columns), the column that orders a video's rows, how stages read it and how it is shown.

The store's reads, the executor's upstream inputs, `vidprep show` and the report all work from these
declarations; a new artifact is one more declaration (here, or in a stage module of your own) and a
stage that names it.

Every artifact row also carries `row_id` (the merge key: video id, stage key and the row's `order`
value), `video_id` (a hash of the file's content) and `stage_key` (a hash of the config that made it).
"""

import dataclasses
import typing
from dataclasses import dataclass
from typing import Annotated

import pyarrow as pa

# LanceDB's merge_insert detects concurrent inserts of the same key only for primary-key columns.
_PRIMARY = {"lance-schema:unenforced-primary-key": "true"}
KEY_COLUMNS = ("row_id", "video_id", "stage_key")
# Every artifact declared, by table; a declaration anywhere (a stage module of your own) adds itself.
ARTIFACTS: dict[str, "Artifact"] = {}
_ARROW = {int: pa.int32(), float: pa.float64(), str: pa.string(), bytes: pa.binary(), bool: pa.bool_()}


def row_id_field() -> pa.Field:
    return pa.field("row_id", pa.string(), nullable=False, metadata=_PRIMARY)


def arrow_fields(row: type, columns: list[str], vector_size: int | None = None) -> list[pa.Field]:
    """The columns of a row dataclass as Arrow fields: a plain type's column (int32, float64, string,
    binary, bool), or the Arrow type of `Annotated[T, arrow type]` ("vector": float32 of `vector_size`)."""
    hints = typing.get_type_hints(row, include_extras=True)
    fields = []
    for name in columns:
        hint = hints[name]
        if typing.get_origin(hint) is Annotated:
            arrow = hint.__metadata__[0]
            if arrow == "vector":
                arrow = pa.list_(pa.float32(), vector_size)
        else:
            arrow = _ARROW[hint]
        fields.append(pa.field(name, arrow))
    return fields


@dataclass(frozen=True)
class Artifact:
    # The stage that writes it: every stage class writing this artifact takes this name, and the
    # artifact's rows are found under that stage's key.
    stage: str
    table: str
    # A frozen dataclass: its fields are the table's columns after the keys; `Annotated[T, arrow type]`
    # where the plain type's column (int32, float64, string, binary, bool) does not fit.
    row: type
    # The column that orders a video's rows and tells them apart.
    order: str
    # Stages read it a batch of rows at a time (frames: too big to hold a video's worth), else whole.
    streamed: bool = False
    # The heading `vidprep show` and the report print its rows under (each row's `line()`); None: not shown.
    title: str | None = None
    # Embedding artifacts get one table per vector size (`frame_embeddings_384`).
    vector_size: int | None = None
    # The text column a full-text index keeps searchable (`Store.search` in text and hybrid modes).
    text_column: str | None = None

    def __post_init__(self):
        if self.vector_size is None:
            ARTIFACTS[self.table] = self

    def sized(self, vector_size: int) -> "Artifact":
        return dataclasses.replace(self, table=f"{self.table}_{vector_size}", vector_size=vector_size)

    def table_of(self, rows: list[dict]) -> str:
        """The table rows go to: an embedding artifact's is named by their vector size."""
        vectors = [name for name, hint in typing.get_type_hints(self.row, include_extras=True).items()
                   if getattr(hint, "__metadata__", None) == ("vector",)]
        return self.sized(len(rows[0][vectors[0]])).table if vectors and self.vector_size is None else self.table

    @property
    def columns(self) -> list[str]:
        return [f.name for f in dataclasses.fields(self.row) if f.name not in KEY_COLUMNS]

    @property
    def schema(self) -> pa.Schema:
        keys = [row_id_field(), pa.field("video_id", pa.string()), pa.field("stage_key", pa.string())]
        return pa.schema(keys + arrow_fields(self.row, self.columns, self.vector_size))

    def rows(self, records: list[dict]) -> list:
        """Rows of the row type from the table's records, in order."""
        names = [f.name for f in dataclasses.fields(self.row)]
        return sorted((self.row(**{n: r[n] for n in names}) for r in records),
                      key=lambda row: getattr(row, self.order))


@dataclass(frozen=True)
class Frame:
    video_id: str
    frame_index: int
    timestamp: float
    jpeg: bytes
    width: int
    height: int


@dataclass(frozen=True)
class Segment:
    video_id: str
    segment_index: int
    start: float
    end: float


@dataclass(frozen=True)
class FrameEmbedding:
    frame_index: int
    timestamp: float
    vector: Annotated[list, "vector"]
    model: str
    # What the backend saw in the frame, where it says (the label embedder's "Looks like: ...").
    description: str


@dataclass(frozen=True)
class SegmentCaption:
    segment_index: int
    start: float
    end: float
    caption: str
    confidence: float
    model: str

    def line(self) -> str:
        return f"[{self.start:6.1f}-{self.end:6.1f}s] {self.caption}"


@dataclass(frozen=True)
class FrameCaption:
    position_index: int
    # Where in the video the caption was asked for, as a fraction of its duration.
    position: float
    timestamp: float
    caption: str
    confidence: float
    model: str

    def line(self) -> str:
        return f"{self.position:4.2f} t={self.timestamp:6.1f}s {self.caption}"


WORD = pa.struct([
    pa.field("start", pa.float64()),
    pa.field("end", pa.float64()),
    pa.field("word", pa.string()),
    pa.field("probability", pa.float64()),
])


@dataclass(frozen=True)
class TranscriptSegment:
    segment_index: int
    start: float
    end: float
    text: str
    language: str
    language_probability: float
    avg_logprob: float
    no_speech_prob: float
    words: Annotated[list, pa.list_(WORD)]

    def line(self) -> str:
        return f"[{self.start:6.1f}-{self.end:6.1f}s] ({self.language}) {self.text}"


@dataclass(frozen=True)
class Summary:
    summary_index: int
    summary: str
    model: str
    # How many chunks the inputs were split into to fit the model's context (1: none).
    chunks: int

    def line(self) -> str:
        return self.summary


FRAMES = Artifact("frames", "frames", Frame, "frame_index", streamed=True)
SEGMENTS = Artifact("segments", "segments", Segment, "segment_index")
FRAME_EMBEDDINGS = Artifact("frame_embeddings", "frame_embeddings", FrameEmbedding, "frame_index",
                            text_column="description")
SEGMENT_CAPTIONS = Artifact("segment_captions", "segment_captions", SegmentCaption, "segment_index",
                            title="segment captions", text_column="caption")
FRAME_CAPTIONS = Artifact("frame_captions", "frame_captions", FrameCaption, "position_index", title="frame captions",
                          text_column="caption")
TRANSCRIPTS = Artifact("transcript", "transcripts", TranscriptSegment, "segment_index", title="transcript",
                       text_column="text")
SUMMARIES = Artifact("summary", "summaries", Summary, "summary_index", title="summary")
