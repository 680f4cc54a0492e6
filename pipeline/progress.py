"""One progress display per long command: items done of the total, failures so far, rate and time
left, and what the work under way is doing (`detail`). A live bar in a terminal; in a pipe (a log file,
CI) a line every `every_s` seconds whatever finishes, and one at the end, so a log shows the run
advancing (or stuck on one long item) without a line per item."""

import sys
import threading
import time
from collections.abc import Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
from rich.progress import Progress as Bar


class Progress:
    def __init__(self, what: str, total: int, stream=None, every_s: float = 10.0, bar: bool = True,
                 done: int = 0, detail: Callable[[], str] | None = None):
        # bar=False: lines even in a terminal, for a command whose steps show bars of their own. done: the
        # items a resumed run finds finished (they count as done, not in the rate). detail: what the work
        # under way is doing, asked every `every_s`.
        self.what, self.total, self.every_s, self.detail = what, total, every_s, detail
        self.stream = stream or sys.stderr
        self.done, self.failed, self._resumed = done, 0, done
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._heartbeat, daemon=True)
        self._bar = None
        if bar and self.stream.isatty():
            self._bar = Bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.fields[failed]} failed, {task.fields[rate]} {task.fields[detail]}"),
                            TimeRemainingColumn(), console=Console(file=self.stream))
            self._task = self._bar.add_task(what, total=total, completed=done, failed=0, rate="", detail="")

    def __enter__(self) -> "Progress":
        if self._bar:
            self._bar.start()
        if self.every_s > 0:
            self._beat.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        if self._beat.is_alive():
            self._beat.join()
        if self._bar:
            self._bar.stop()
        else:
            self._say(with_detail=False)

    def _rate(self) -> float:
        return (self.done - self._resumed) / max(time.monotonic() - self.started, 1e-9)

    def line(self) -> str:
        rate = self._rate()
        left = f"{(self.total - self.done) / rate:.0f} s left" if rate else "time left unknown"
        return f"{self.what}: {self.done}/{self.total} done, {self.failed} failed, {rate:.2f}/s, {left}"

    def _detail(self) -> str:
        if self.detail is None:
            return ""
        try:
            return self.detail()
        except Exception as error:  # noqa: BLE001 - a heartbeat that cannot tell says so, never stops the run
            return f"(in progress: unknown, {type(error).__name__})"

    def _say(self, with_detail: bool = True) -> None:
        detail = self._detail() if with_detail else ""
        line = self.line() + (f"; {detail}" if detail else "")
        print(line, file=self.stream, flush=True)

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.every_s):
            if self._bar:
                self._bar.update(self._task, detail=self._detail())
            else:
                self._say()

    def advance(self, done: int, failed: int = 0) -> None:
        self.done += done
        self.failed += failed
        if self._bar:
            self._bar.update(self._task, completed=self.done, failed=self.failed, rate=f"{self._rate():.2f}/s")
