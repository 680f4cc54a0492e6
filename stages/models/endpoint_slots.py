"""Requests in flight to one endpoint, bounded across the processes of this machine.

Every actor of a stage or answer pool is a process of its own, and two jobs may ask one endpoint; an
in-process semaphore would let each of them keep `llm.client.concurrency` requests out. A slot is a
lock file named after the endpoint in the system's temp folder, held with an exclusive `flock` while a
request is out; the kernel frees it when its process dies, so a killed worker never keeps a slot.
"""

import fcntl
import hashlib
import os
import random
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path


class EndpointSlots:
    """`count` slots of the endpoint at `base_url` (a job asking for more slots than another uses more
    files, so together they keep at most the larger count in flight)."""

    def __init__(self, base_url: str, count: int):
        endpoint = hashlib.sha256(base_url.encode()).hexdigest()[:16]
        folder = Path(tempfile.gettempdir()) / f"vidprep-endpoint-slots-{os.getuid()}" / endpoint
        folder.mkdir(parents=True, exist_ok=True)
        self._files = [os.open(folder / f"slot-{i}", os.O_CREAT | os.O_RDONLY, 0o600) for i in range(count)]
        # A flock belongs to the process, not the thread: this process's threads share its slots in turn.
        self._free, self._lock, self._open = list(range(count)), threading.Lock(), threading.Semaphore(count)

    @contextmanager
    def slot(self):
        self._open.acquire()
        try:
            index = self._take()
            try:
                yield
            finally:
                fcntl.flock(self._files[index], fcntl.LOCK_UN)
                with self._lock:
                    self._free.append(index)
        finally:
            self._open.release()

    def _take(self) -> int:
        """A slot no other process holds, else (all taken) the wait for one of this process's free ones."""
        with self._lock:
            for index in random.sample(self._free, len(self._free)):
                try:
                    fcntl.flock(self._files[index], fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue
                self._free.remove(index)
                return index
            index = random.choice(self._free)
            self._free.remove(index)
        try:
            fcntl.flock(self._files[index], fcntl.LOCK_EX)
        except BaseException:
            with self._lock:
                self._free.append(index)
            raise
        return index


_SLOTS: dict[tuple[str, int], EndpointSlots] = {}
_SLOTS_LOCK = threading.Lock()


def endpoint_slots(base_url: str, count: int) -> EndpointSlots:
    """The slots of this process for an endpoint (every client of it in the process shares them)."""
    with _SLOTS_LOCK:
        if (base_url, count) not in _SLOTS:
            _SLOTS[(base_url, count)] = EndpointSlots(base_url, count)
        return _SLOTS[(base_url, count)]
