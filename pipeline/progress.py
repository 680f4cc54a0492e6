"""One progress display per long command: items done of the total, failures so far, rate and time
left. A live bar in a terminal; in a pipe (a log file, CI) a line every `every_s` seconds and one at
the end, so a log shows the run advancing without a line per item."""

import sys
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
from rich.progress import Progress as Bar


class Progress:
    def __init__(self, what: str, total: int, stream=None, every_s: float = 10.0, bar: bool = True):
        # bar=False: lines even in a terminal, for a command whose steps show bars of their own.
        self.what, self.total, self.every_s = what, total, every_s
        self.stream = stream or sys.stderr
        self.done = self.failed = 0
        self.started = self._said = time.monotonic()
        self._bar = None
        if bar and self.stream.isatty():
            self._bar = Bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.fields[failed]} failed, {task.fields[rate]}"), TimeRemainingColumn(),
                            console=Console(file=self.stream))
            self._task = self._bar.add_task(what, total=total, failed=0, rate="")

    def __enter__(self) -> "Progress":
        if self._bar:
            self._bar.start()
        return self

    def __exit__(self, *_) -> None:
        if self._bar:
            self._bar.stop()
        else:
            self._say()

    def _rate(self) -> float:
        return self.done / max(time.monotonic() - self.started, 1e-9)

    def line(self) -> str:
        rate = self._rate()
        left = f"{(self.total - self.done) / rate:.0f} s left" if rate else "time left unknown"
        return f"{self.what}: {self.done}/{self.total} done, {self.failed} failed, {rate:.2f}/s, {left}"

    def _say(self) -> None:
        print(self.line(), file=self.stream, flush=True)
        self._said = time.monotonic()

    def advance(self, done: int, failed: int = 0) -> None:
        self.done += done
        self.failed += failed
        if self._bar:
            self._bar.update(self._task, completed=self.done, failed=self.failed, rate=f"{self._rate():.2f}/s")
        elif time.monotonic() - self._said >= self.every_s and self.done < self.total:
            self._say()
