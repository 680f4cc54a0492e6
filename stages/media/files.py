"""Where a video's bytes are: a local path, or an object-storage URI (s3://bucket/key, gs://, ...).

The metadata reader and ffmpeg need a seekable local file (an MP4's index may sit at its end), so a node copies a
URI once into its own cache and every stage on that node reads the copy.
"""

import functools
import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from urllib.parse import urlparse

import pyarrow.fs as pafs

from vidprep.stages.media import VideoError

# Bytes of copies a node keeps; older copies are removed first once a new copy passes this.
CACHE_LIMIT_BYTES = int(float(os.environ.get("VIDPREP_MEDIA_CACHE_GB", "20")) * 2**30)


def is_uri(path: str) -> bool:
    return "://" in path


@functools.lru_cache(maxsize=8)
def _s3(region: str, endpoint: str | None) -> pafs.S3FileSystem:
    if not endpoint:
        return pafs.S3FileSystem(region=region)
    parsed = urlparse(endpoint)
    return pafs.S3FileSystem(region=region, endpoint_override=parsed.netloc, scheme=parsed.scheme or "https")


def object_store(uri: str) -> tuple[pafs.FileSystem, str]:
    """The file system of a URI and the path in it."""
    if uri.startswith("s3://"):
        # The same environment the store's s3 config reads; credentials come from the AWS chain.
        region = os.environ.get("AWS_REGION", "us-east-1")
        return _s3(region, os.environ.get("AWS_ENDPOINT_URL")), uri.removeprefix("s3://")
    return pafs.FileSystem.from_uri(uri)


def file_info(path: str) -> tuple[int, int] | None:
    """(size, modification time in ns) of a local file or an object; None where there is none."""
    if not is_uri(path):
        try:
            stat = os.stat(path)
        except OSError:
            return None
        return (stat.st_size, stat.st_mtime_ns) if os.path.isfile(path) else None
    store, key = object_store(path)
    info = store.get_file_info(key)
    if info.type != pafs.FileType.File:
        return None
    return info.size, info.mtime_ns or 0


def _cache_dir() -> Path:
    return Path(os.environ.get("VIDPREP_MEDIA_CACHE") or Path(tempfile.gettempdir()) / "vidprep-media")


def _evict(cache: Path, keep: Path) -> None:
    copies = sorted((p for p in cache.iterdir() if p.suffix != ".part"), key=lambda p: p.stat().st_mtime)
    total = sum(p.stat().st_size for p in copies)
    for copy in copies:
        if total <= CACHE_LIMIT_BYTES:
            break
        if copy != keep:
            total -= copy.stat().st_size
            copy.unlink(missing_ok=True)


def local_file(path: str) -> str:
    """A local file holding the bytes of `path`: the path itself, or this node's copy of a URI."""
    if not is_uri(path):
        return path
    info = file_info(path)
    if info is None:
        raise VideoError("no such object")
    cache = _cache_dir()
    # Named by the URI and the object's size and time, so a changed object is fetched again.
    copy = cache / (hashlib.sha256(f"{path}\0{info}".encode()).hexdigest()[:32] + Path(urlparse(path).path).suffix)
    if copy.exists():
        copy.touch()
        return str(copy)
    cache.mkdir(parents=True, exist_ok=True)
    partial = copy.with_name(f"{copy.name}.{os.getpid()}.part")
    store, key = object_store(path)
    with store.open_input_stream(key) as source, open(partial, "wb") as target:
        shutil.copyfileobj(source, target, 1 << 20)
    os.replace(partial, copy)
    _evict(cache, keep=copy)
    return str(copy)
