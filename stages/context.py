"""The lifecycle of everything a worker runs: stages, methods, vision backends, models and LLM clients
are components, built from config, then `setup(context)` once in the worker that runs them and
`teardown()` when it is done. The context is the worker's: its store handle and its cache of model
outputs; no component opens a store of its own. LLM calls count in the usage scopes (`counted`) open
where they are made.
"""

import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from vidprep.store.store import Store


@dataclasses.dataclass
class Usage:
    calls: int = 0
    cache_hits: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(*(getattr(self, f.name) + getattr(other, f.name) for f in dataclasses.fields(self)))

    def add(self, **used: int) -> None:
        for name, value in used.items():
            setattr(self, name, getattr(self, name) + value)


# The usage scopes open in this thread (`counted`): a question answered beside others counts only its own calls.
_SCOPES: ContextVar[tuple[dict, ...]] = ContextVar("usage_scopes", default=())


@contextmanager
def counted() -> Iterator[dict[str, Usage]]:
    """What the LLM calls made within the block, in this thread, used: per model."""
    used: dict[str, Usage] = {}
    token = _SCOPES.set(_SCOPES.get() + (used,))
    try:
        yield used
    finally:
        _SCOPES.reset(token)


def count_in_scopes(model: str, **used: int) -> None:
    for scope in _SCOPES.get():
        scope.setdefault(model, Usage()).add(**used)


class StoredReadings:
    """A vision model's outputs per frame in the store (table `frame_readings`), keyed by the model and
    the frame's JPEG bytes: the embedder's labels serve the describer on the same frame, and a later
    run or another config reads them instead of running the model. No store: nothing is kept.

    New outputs wait in memory until `write` (the executor's, before a group of videos is marked
    complete, so the next stage finds them) or until `PENDING` of them wait: a commit per call cost
    more than the model on a 3-frame clip."""

    PENDING = 1024

    def __init__(self, store: Store | None = None):
        self.store = store
        self._pending: dict[str, tuple[str, str]] = {}

    def outputs(self, model: str, jpegs: list[bytes], compute: Callable[[bytes], object]) -> list:
        """The model's output on each JPEG (JSON values), computed only for those not stored."""
        keys = [hashlib.sha256(model.encode() + b"\0" + jpeg).hexdigest() for jpeg in jpegs]
        known = {k: self._pending[k][1] for k in set(keys) if k in self._pending}
        if self.store:
            known |= self.store.readings(sorted(set(keys) - set(known)))
        found = {k: json.loads(v) for k, v in known.items()}
        for key, jpeg in zip(keys, jpegs):
            if key not in found:
                # Through JSON, so a computed output is the same value as a stored one.
                text = json.dumps(compute(jpeg))
                found[key] = json.loads(text)
                if self.store:
                    self._pending[key] = (model, text)
        if len(self._pending) >= self.PENDING:
            self.write()
        return [found[key] for key in keys]

    def write(self) -> None:
        if self._pending:
            self.store.remember_readings([(key, model, text) for key, (model, text) in self._pending.items()])
        self._pending = {}


@dataclasses.dataclass
class WorkerContext:
    """What one worker (a Ray task or actor, or the driver in a test) hands the components it runs."""

    # None: nothing is cached or kept (a component used on its own).
    store: Store | None = None
    readings: StoredReadings = dataclasses.field(init=False)

    def __post_init__(self):
        self.readings = StoredReadings(self.store)

    def flush(self) -> None:
        """Write what the components computed for later stages (labels, text read off frames)."""
        self.readings.write()


class Component:
    """Something built from config that a worker sets up before use. The default hands the context
    down to the components this one holds; a component that takes something from the context
    overrides `setup` and calls it too."""

    def setup(self, context: WorkerContext) -> None:
        for part in _parts(self):
            part.setup(context)

    def teardown(self) -> None:
        for part in _parts(self):
            part.teardown()

    def requests_at_once(self) -> int:
        """How many requests the endpoints it calls take from it at once (1: it calls none)."""
        return max((part.requests_at_once() for part in _parts(self)), default=1)

    def key_params(self) -> dict:
        """What of this component changes a stage's output, for the key of a stage that runs it."""
        return {"model": self.model_id}


def _parts(component: Component) -> Iterator[Component]:
    for value in vars(component).values():
        values = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else [value]
        yield from (v for v in values if isinstance(v, Component))
