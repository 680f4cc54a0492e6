"""The one prompt loader. Every prompt is a text file under `stages/prompts/` (a method's in a folder
of its own: `traveler/plan_v1.txt`), versioned in its name; a stage or answer run that uses prompts
puts `prompt_hash` of them in its key, so an edited prompt is a new key, never a stale cache hit."""

import functools
import hashlib
from pathlib import Path

from vidprep.conf.checks import ConfigError

PROMPTS = Path(__file__).parent


@functools.cache
def load_prompt(name: str) -> str:
    # Read once per process: a method builds its instructions from these on every step of every question.
    path = PROMPTS / name
    if not path.is_file():
        raise ConfigError(f"no prompt {name!r} in {PROMPTS}")
    return path.read_text()


def prompt_hash(*names: str) -> str:
    """A hash of the named prompts' names and texts."""
    digest = hashlib.sha256()
    for name in names:
        digest.update(f"{name}\0{load_prompt(name)}\0".encode())
    return digest.hexdigest()[:12]


def is_prompt(value) -> bool:
    return isinstance(value, str) and value.endswith(".txt") and (PROMPTS / value).is_file()
