"""The terminal progress bars: a sweep's (point i of N, collective, size), fed by the rows rank 0 appends, and a run
set's (launch k of N), under which each launch's sweep bar shows."""

from collections.abc import Sequence
from contextvars import ContextVar, Token
from pathlib import Path
from typing import Protocol

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn


class RowCounter:
    """Counts complete data rows in a CSV that another process appends to, reading only the new bytes."""

    def __init__(self, path: Path):
        self._path = path
        self._offset = 0
        self._lines = 0

    def __call__(self) -> int:
        try:
            with open(self._path, "rb") as file:
                file.seek(self._offset)
                chunk = file.read()
        except FileNotFoundError:
            return 0
        self._offset += len(chunk)
        self._lines += chunk.count(b"\n")
        return max(self._lines - 1, 0)  # the first line is the header


def _bars(enabled: bool) -> Progress:
    """Rich bars on stderr, disabled by --quiet so that stdout stays the tables only. Redrawn when a bar's show() is
    called (the launcher's watchdog poll, every 0.5 s), not by rich's own refresh thread at 10 Hz: on a machine
    whose cores all run ranks, every wake-up of this process is time a rank waits for its core, inside some timed
    call."""
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=Console(stderr=True), disable=not enabled, auto_refresh=False)


class LaunchProgress:
    """The bar of a run set's launches (`--launches N`). Rich draws one live display at a time, so while it is open
    each launch's SweepProgress is a second bar of the same display (found through _OPEN_LAUNCHES)."""

    def __init__(self, launches: int, *, enabled: bool):
        self._launches = launches
        self.bars = _bars(enabled)
        self._task: TaskID | None = None
        self._opened: Token[LaunchProgress | None] | None = None

    def __enter__(self) -> "LaunchProgress":
        self.bars.start()
        self._task = self.bars.add_task(self._describe(0), total=self._launches)
        self._opened = _OPEN_LAUNCHES.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._opened is not None:
            _OPEN_LAUNCHES.reset(self._opened)
            self._opened = None
        self.bars.stop()

    def show(self, done: int) -> None:
        assert self._task is not None, "show() inside the with block"
        self.bars.update(self._task, completed=done, description=self._describe(done), refresh=True)

    def _describe(self, done: int) -> str:
        return "launches done" if done >= self._launches else f"launch {done + 1}/{self._launches}"


_OPEN_LAUNCHES: ContextVar[LaunchProgress | None] = ContextVar("open_launches", default=None)
"""The launches' bar while its `with` block runs (LaunchProgress sets and resets it): the display a sweep's bar
joins. A context variable, not a module global: nothing assigns it, each `with` block scopes its value."""


class Labelled(Protocol):
    """A point as the sweep's bar names it."""

    def label(self) -> str: ...


class SweepProgress:
    """A sweep's bar on stderr (beneath the launches' bar inside a run set); disabled by --quiet."""

    def __init__(self, points: Sequence[Labelled], *, enabled: bool):
        """points: what each row is (each has .label()), in run order."""
        self._points = points
        self._outer = _OPEN_LAUNCHES.get()
        self._progress = self._outer.bars if self._outer else _bars(enabled)
        self._task: TaskID | None = None

    def __enter__(self) -> "SweepProgress":
        if not self._outer:
            self._progress.start()
        self._task = self._progress.add_task(self._describe(0), total=len(self._points))
        return self

    def __exit__(self, *exc: object) -> None:
        if self._outer:
            assert self._task is not None
            self._progress.remove_task(self._task)
        else:
            self._progress.stop()

    def show(self, done: int) -> None:
        # a point may write several rows (hunt, p2p, replay): the bar counts points, so it stops at its end
        done = min(done, len(self._points))
        assert self._task is not None, "show() inside the with block"
        self._progress.update(self._task, completed=done, description=self._describe(done), refresh=True)

    def _describe(self, done: int) -> str:
        if done >= len(self._points):
            return "sweep done"
        return f"point {done + 1}/{len(self._points)}: {self._points[done].label()}"
