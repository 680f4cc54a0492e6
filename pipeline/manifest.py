"""The input manifest: a folder of videos (local or an object-storage prefix), or a CSV / JSONL / Parquet
file of paths or URIs with optional ids.

Every entry gets a name unique within the manifest: its id, else its file name without extension, else
(where two files share that) its file name with extension, relative to the folder.
"""

import csv
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from vidprep.conf.checks import ManifestError
from vidprep.stages.media import VideoError
from vidprep.stages.media.files import is_uri, object_store
from vidprep.stages.media.pyav_probe import probe

MANIFEST_SUFFIXES = {".csv", ".jsonl", ".json", ".parquet"}
VIDEO_SUFFIXES = {".mp4", ".mov", ".mkv", ".avi", ".webm", ".m4v", ".mpg", ".mpeg", ".ts", ".flv", ".wmv"}
# Files a dataset folder carries beside its videos (annotations, notes): not reported as skipped.
SIDECAR_SUFFIXES = MANIFEST_SUFFIXES | {".txt", ".md", ".srt", ".vtt"}
# Skipped as images without probing (ffmpeg would read a still as a one-frame video).
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".heic"}
# A file of another extension is probed for a video stream, each within this long.
PROBE_TIMEOUT_S = 30.0
COLUMNS = {"path", "id"}

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Entry:
    path: str
    name: str


@dataclass
class Manifest:
    entries: list[Entry]
    # Files of a folder that are not videos, each with the reason ("talk.m4a (no video stream: audio
    # only)"), broken links, and sub-folders not searched ("sub/").
    skipped: list[str] = field(default_factory=list)


def _unique_names(paths: list[str], root: str | None = None) -> dict[str, str]:
    """Path -> its file name without extension (relative to `root`, else the bare name), or with the
    extension where two files would share the name without it."""
    def relative(path: str) -> PurePosixPath:
        return PurePosixPath(path).relative_to(root) if root else PurePosixPath(PurePosixPath(path).name)

    owners: dict[str, set[str]] = {}
    for path in paths:
        owners.setdefault(str(relative(path).with_suffix("")), set()).add(path)
    return {path: str(relative(path).with_suffix("")) if len(owners[str(relative(path).with_suffix(""))]) == 1
            else str(relative(path)) for path in paths}


def _broken_link(path: Path) -> str:
    try:
        path.resolve(strict=True)
    except FileNotFoundError:
        return f"a link to {os.readlink(path)}, which does not exist"
    except (OSError, RuntimeError):
        return "a symbolic link loop"
    return "a link that cannot be followed"


def _not_a_video(path: Path) -> str | None:
    """Why a file of no known video extension is not a video (None: it is one), from its content."""
    if path.suffix.lower() in IMAGE_SUFFIXES:
        return "an image"
    try:
        facts = probe(str(path), PROBE_TIMEOUT_S)
    except VideoError as error:
        return f"not a media file ffmpeg reads: {error}"
    if facts["video"] is None:
        return "no video stream" + (": audio only" if facts["has_audio"] else "")
    return None


def _folder(folder: Path, recursive: bool) -> Manifest:
    """The folder's videos: known video extensions at once, any other file (but sidecars) by its
    content; everything else, broken links included, named as skipped with the reason."""
    found = sorted(p for p in (folder.rglob("*") if recursive else folder.iterdir()) if not p.name.startswith("."))
    videos, skipped = [], []
    for path in found:
        where = str(path.relative_to(folder))
        if path.is_symlink() and not path.exists():
            skipped.append(f"{where} ({_broken_link(path)})")
        elif path.is_dir():
            if not recursive:
                skipped.append(f"{where}/")
        elif path.suffix.lower() in VIDEO_SUFFIXES:
            videos.append(path)
        elif path.suffix.lower() not in SIDECAR_SUFFIXES:
            if (reason := _not_a_video(path)) is None:
                videos.append(path)
            else:
                skipped.append(f"{where} ({reason})")
    # Named by where they sit in the folder; a symbolic link's target may lie anywhere.
    placed = [str(folder.resolve() / p.relative_to(folder)) for p in videos]
    names = _unique_names(placed, str(folder.resolve()))
    return Manifest([Entry(path=str(p.resolve()), name=names[place]) for p, place in zip(videos, placed)], skipped)


def _listed(prefix: str) -> Manifest:
    """The videos directly under an object-storage prefix."""
    from pyarrow.fs import FileSelector, FileType

    store, key = object_store(prefix)
    try:
        infos = store.get_file_info(FileSelector(key.rstrip("/"), recursive=False))
    except OSError as error:
        raise ManifestError(f"{prefix}: cannot list videos: {error}") from error
    scheme = prefix.split("://", 1)[0]
    files = sorted(i.path for i in infos if i.type == FileType.File and PurePosixPath(i.path).suffix.lower() in VIDEO_SUFFIXES)
    skipped = sorted(PurePosixPath(i.path).name for i in infos if i.type == FileType.File
                     and PurePosixPath(i.path).suffix.lower() not in VIDEO_SUFFIXES | SIDECAR_SUFFIXES)
    names = _unique_names(files)
    return Manifest([Entry(path=f"{scheme}://{f}", name=names[f]) for f in files], skipped)


def _csv_rows(source: Path) -> list[tuple[str, dict]]:
    rows = []
    with open(source, newline="") as f:
        reader = csv.DictReader(f, strict=True)
        start = 2
        while True:
            where = f"{source}: row starting on line {start}"
            try:
                row = next(reader)
            except StopIteration:
                return rows
            except csv.Error as error:
                raise ManifestError(f"{where}: {error} (an unterminated quote?)") from None
            if None in row:
                raise ManifestError(f"{where}: more fields than the header's {len(reader.fieldnames)} "
                                    f"({', '.join(reader.fieldnames)})")
            if reader.line_num > start:
                raise ManifestError(f"{where}: a field spans lines {start}-{reader.line_num} (an unterminated quote?)")
            rows.append((where, row))
            start = reader.line_num + 1


def _jsonl_rows(source: Path) -> list[tuple[str, dict]]:
    rows = []
    for number, line in enumerate(source.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise ManifestError(f"{source}: line {number}: not JSON: {error.msg} (column {error.colno})") from None
        if not isinstance(row, dict):
            raise ManifestError(f"{source}: line {number}: expected a JSON object per line")
        rows.append((f"{source}: line {number}", row))
    return rows


def _file_rows(source: Path) -> list[tuple[str, dict]]:
    suffix = source.suffix.lower()
    try:
        if suffix == ".csv":
            return _csv_rows(source)
        if suffix in (".jsonl", ".json"):
            return _jsonl_rows(source)
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            return [(f"{source}: row {i}", row) for i, row in enumerate(pq.read_table(source).to_pylist(), 1)]
    except (UnicodeDecodeError, csv.Error, OSError) as error:
        raise ManifestError(f"{source}: cannot read manifest: {error}") from error
    except ManifestError:
        raise
    except Exception as error:  # pyarrow's errors for a broken Parquet file share no base class
        raise ManifestError(f"{source}: cannot read manifest: {error}") from error
    raise ManifestError(f"{source}: unknown manifest format {suffix!r} (use .csv, .jsonl or .parquet)")


def _listed_file(source: Path) -> Manifest:
    base = source.resolve().parent
    rows = _file_rows(source)
    unknown = sorted({column for _, row in rows for column in row} - COLUMNS)
    if unknown:
        log.warning("%s: columns %s are not used (vidprep reads: path, id)", source, ", ".join(unknown))
    paths, ids = [], {}
    for where, row in rows:
        path = row.get("path")
        if not isinstance(path, str) or not path.strip():
            raise ManifestError(f"{where}: missing 'path' (columns: path, optional id)")
        if not is_uri(path):
            # Normalised, so one file is one path (`vids/../vids/a.mp4` is `vids/a.mp4`); links kept as given.
            path = os.path.normpath(base / path)
        paths.append(path)
        if row.get("id") not in (None, ""):
            video_id = str(row["id"])
            if video_id in ids:
                raise ManifestError(f"{where}: id {video_id!r} is already used by {ids[video_id]}")
            ids[video_id] = where
    names = _unique_names([p for (_, row), p in zip(rows, paths) if row.get("id") in (None, "")])
    entries = [Entry(path=p, name=str(row["id"]) if row.get("id") not in (None, "") else names[p])
               for (_, row), p in zip(rows, paths)]
    owners: dict[str, set[str]] = {}
    for entry in entries:
        owners.setdefault(entry.name, set()).add(entry.path)
    for name, files in sorted(owners.items()):
        if len(files) > 1:
            raise ManifestError(f"{source}: the name {name!r} would stand for {len(files)} files "
                                f"({', '.join(sorted(files)[:3])}): give them distinct ids")
    return Manifest(entries)


def read_manifest(source: str | Path, recursive: bool = False) -> Manifest:
    if is_uri(str(source)) and Path(str(source)).suffix.lower() not in MANIFEST_SUFFIXES:
        return _listed(str(source))
    source = Path(source)
    if source.is_dir():
        return _folder(source, recursive)
    if not source.exists():
        raise ManifestError(f"{source}: manifest not found (give a folder of videos or a .csv/.jsonl/.parquet file)")
    return _listed_file(source)
