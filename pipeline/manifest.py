"""The input manifest: a folder of videos (local or an object-storage prefix), or a CSV / JSONL / Parquet
file of paths or URIs with optional ids."""

import csv
import json
from dataclasses import dataclass
from pathlib import Path

from stages.media import is_uri, object_store

MANIFEST_SUFFIXES = {".csv", ".jsonl", ".json", ".parquet"}
VIDEO_SUFFIXES = {".mp4", ".mov", ".mkv", ".avi", ".webm", ".m4v", ".mpg", ".mpeg", ".ts", ".flv", ".wmv"}


class ManifestError(ValueError):
    """The manifest itself is unusable; the message names the file and the problem."""


@dataclass(frozen=True)
class Entry:
    path: str
    name: str


def _entry(row: dict, base: Path, where: str) -> Entry:
    path = row.get("path")
    if not isinstance(path, str) or not path.strip():
        raise ManifestError(f"{where}: missing 'path' (columns: path, optional id)")
    if not is_uri(path) and not Path(path).is_absolute():
        path = str(base / path)
    name = row.get("id") or Path(path).stem
    return Entry(path=path, name=str(name))


def _listed(prefix: str) -> list[Entry]:
    """The videos directly under an object-storage prefix, by name."""
    from pyarrow.fs import FileSelector, FileType

    store, key = object_store(prefix)
    try:
        infos = store.get_file_info(FileSelector(key.rstrip("/"), recursive=False))
    except OSError as error:
        raise ManifestError(f"{prefix}: cannot list videos: {error}") from error
    scheme = prefix.split("://", 1)[0]
    found = sorted(i.path for i in infos if i.type == FileType.File and Path(i.path).suffix.lower() in VIDEO_SUFFIXES)
    return [Entry(path=f"{scheme}://{path}", name=Path(path).stem) for path in found]


def read_manifest(source: str | Path) -> list[Entry]:
    if is_uri(str(source)) and Path(str(source)).suffix.lower() not in MANIFEST_SUFFIXES:
        return _listed(str(source))
    source = Path(source)
    if source.is_dir():
        files = sorted(p for p in source.iterdir() if p.suffix.lower() in VIDEO_SUFFIXES)
        return [Entry(path=str(p.resolve()), name=p.stem) for p in files]
    if not source.exists():
        raise ManifestError(f"{source}: manifest not found (give a folder of videos or a .csv/.jsonl/.parquet file)")
    base = source.resolve().parent
    suffix = source.suffix.lower()
    try:
        if suffix == ".csv":
            with open(source, newline="") as f:
                rows = list(csv.DictReader(f))
        elif suffix in (".jsonl", ".json"):
            rows = []
            for number, line in enumerate(source.read_text().splitlines(), 1):
                if line.strip():
                    row = json.loads(line)
                    if not isinstance(row, dict):
                        raise ManifestError(f"{source}:{number}: expected a JSON object per line")
                    rows.append(row)
        elif suffix == ".parquet":
            import pyarrow.parquet as pq

            rows = pq.read_table(source).to_pylist()
        else:
            raise ManifestError(f"{source}: unknown manifest format {suffix!r} (use .csv, .jsonl or .parquet)")
    except (json.JSONDecodeError, UnicodeDecodeError, csv.Error, OSError) as error:
        raise ManifestError(f"{source}: cannot read manifest: {error}") from error
    except ManifestError:
        raise
    except Exception as error:  # pyarrow's errors for a broken Parquet file share no base class
        raise ManifestError(f"{source}: cannot read manifest: {error}") from error
    return [_entry(row, base, f"{source}: row {i}") for i, row in enumerate(rows, 1)]
