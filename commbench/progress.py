"""The terminal progress bar of a sweep (point i of N, collective, size), fed by the rows rank 0 appends."""

from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


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


class SweepProgress:
    """A rich progress bar on stderr; disabled by --quiet, so stdout stays the tables only."""

    def __init__(self, points: list, *, enabled: bool):
        """points: what each row is (each has .label()), in run order."""
        self._points = points
        # Redrawn when show() is called (the launcher's watchdog poll, every 0.5 s), not by rich's own refresh
        # thread at 10 Hz: on a machine whose cores all run ranks, every wake-up of this process is time a rank
        # waits for its core, inside some timed call.
        self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                  TimeElapsedColumn(), console=Console(stderr=True), disable=not enabled,
                                  auto_refresh=False)
        self._task = None

    def __enter__(self) -> "SweepProgress":
        self._progress.start()
        self._task = self._progress.add_task(self._describe(0), total=len(self._points))
        return self

    def __exit__(self, *exc) -> None:
        self._progress.stop()

    def show(self, done: int) -> None:
        # a point may write several rows (hunt, p2p, replay): the bar counts points, so it stops at its end
        done = min(done, len(self._points))
        self._progress.update(self._task, completed=done, description=self._describe(done), refresh=True)

    def _describe(self, done: int) -> str:
        if done >= len(self._points):
            return "sweep done"
        return f"point {done + 1}/{len(self._points)}: {self._points[done].label()}"
