"""What the launcher records when an environment combination's launch fails before measuring anything (NCCL
refused it: NVLS without NVSwitch, an algorithm it has not for the collective; gloo: an interface that does not
exist): the error in one line, and its points as rows noted "not available"."""

import re
from pathlib import Path

from commbench import store
from commbench.bench_kind import Bench

_ERROR_LINE = re.compile(r"^(?:\[rank\d+\]:\s*)?((?:[\w.]+\.)?\w*(?:Error|Exception)\b:\s*\S.*)$")


def log_size(log_path: Path) -> int:
    """Where the next launch's output starts in the launch log."""
    return log_path.stat().st_size if log_path.exists() else 0


def refusal(run_dir: Path, log_path: Path, start: int) -> str | None:
    """Why the launch failed, in one line: rank 0's error as meta.json recorded it, else the first exception line
    the ranks wrote to the log after `start` (an error while the process group formed, before rank 0 had a run to
    write to)."""
    reason = store.read_meta(run_dir).get("reason")
    if reason:
        return str(reason).removeprefix("rank 0: ")
    if not log_path.exists():
        return None
    with open(log_path, "rb") as log:
        log.seek(start)
        text = log.read().decode("utf-8", errors="replace")
    for line in text.splitlines():
        found = _ERROR_LINE.match(line.strip())
        if found:
            return found.group(1)[:300]
    return None


def write_unavailable(bench: Bench, run_dir: Path, indexes, reason: str) -> None:
    """The rows of the points a refused launch did not measure, each noted "not available: <reason>"."""
    points = {point.index: point for point in bench.points}
    run_id = store.run_id_of(run_dir)
    rows = [bench.kind.unavailable_row(bench.spec, points[index], run_id=run_id, world=bench.spec.nproc,
                                       reason=reason) for index in indexes]
    writer = store.RowWriter(run_dir / store.RESULTS_FILE, bench.kind.result_columns)
    try:
        writer.write(rows)
    finally:
        writer.close()
