"""Content ids for videos and config keys for stages."""

import hashlib
import json
from pathlib import Path

# The codec (and probe key) of a video known only by its published captions (`vidprep import-captions`):
# no file of it was read, so nothing is known of its audio.
CAPTIONS_ONLY = "captions-only"
_CHUNK = 1 << 20


def content_id(path: str | Path) -> str:
    """A video's id: a hash of its bytes, so the same file under two names is one video."""
    digest = hashlib.blake2b(digest_size=10)
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def stage_key(stage: str, version: int, params: dict, upstream: dict[str, str]) -> str:
    """Key of a stage config: its name, version, every output-changing parameter and upstream keys."""
    blob = json.dumps(
        {"stage": stage, "version": version, "params": params, "upstream": upstream},
        sort_keys=True,
        default=str,
    )
    return f"{stage}-{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


def row_id(video_id: str, key: str, local: int | str) -> str:
    return f"{video_id}/{key}/{local}"
