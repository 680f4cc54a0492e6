"""The input manifest: a folder of videos, or a CSV / JSONL / Parquet file of paths with optional ids."""

import csv
import json
from dataclasses import dataclass
from pathlib import Path

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
    full = Path(path) if "://" in path or Path(path).is_absolute() else base / path
    name = row.get("id") or Path(path).stem
    return Entry(path=str(full), name=str(name))


def read_manifest(source: str | Path) -> list[Entry]:
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
