"""What the launcher records when an environment combination's launch fails before measuring anything.

Only a backend's own message for a setting it does not support (REFUSAL_MESSAGES: NCCL refusing NVLS without
NVSwitch or an algorithm it has not for the collective, gloo finding no interface of the name it was given) makes a
combination "not available": its points become rows noted so, and the next combination runs. Any other failure (a
rank killed, a Python exception, a segfault, a peer that broke the connection) is a crash, and the launcher ends the
sweep as failed."""

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from commbench import store
from commbench.bench_kind import Bench

_RANK_PREFIX = re.compile(r"^\[rank\d+\]:\s*")
"""torchrun's prefix on a rank's lines (--tee, or a rank's traceback); not part of the backend's message."""
_REASON_CHARS = 300
"""A note stays one short line: the backend's message, not its whole traceback."""


@dataclass(frozen=True)
class RefusalMessage:
    """A message a backend writes when it does not support a setting it was given."""

    backend: str
    pattern: str
    """A regular expression searched for in one line of the launch's output."""
    where: str
    """Where the backend writes it, and for which setting."""


REFUSAL_MESSAGES: tuple[RefusalMessage, ...] = (
    # NCCL's own words first: they name the setting, which torch's summary lines below do not. NCCL writes them as a
    # WARN line (NCCL_DEBUG=WARN) and torch repeats the last one after "Last error:" in its exception.
    RefusalMessage("nccl", r"no algorithm/protocol available for function",
                   "NCCL src/enqueue.cc (topoGetAlgoInfo): NCCL_ALGO / NCCL_PROTO leave no algorithm or protocol for "
                   "the collective and datatype (NVLS without NVSwitch, Tree for an all-gather)"),
    RefusalMessage("nccl", r"Unrecognized (?:element|prefix) token",
                   "NCCL src/graph/tuning.cc (parseList): a NCCL_ALGO / NCCL_PROTO value it has no name for"),
    RefusalMessage("nccl", r"Error: network .*not found",
                   "NCCL's net plugin loader (ncclNetInit): NCCL_NET names a network this machine does not have"),
    RefusalMessage("nccl", r"Bootstrap : no socket interface found",
                   "NCCL src/bootstrap.cc (bootstrapNetInit): NCCL_SOCKET_IFNAME matches no interface (some NCCL "
                   "versions return ncclInternalError for it, hence its own entry)"),
    # ncclInvalidUsage is NCCL's return code for a setting or use it does not support (the messages above but the
    # bootstrap's return it): torch's lines for it catch a refusal whose own message the output lacks
    RefusalMessage("nccl", r"ncclInvalidUsage",
                   "torch c10d NCCLUtils (getNcclErrorDetailStr): the line torch adds for ncclInvalidUsage"),
    RefusalMessage("nccl", r"NCCL error in: .*, invalid usage\b",
                   "torch c10d ProcessGroupNCCL (C10D_NCCL_CHECK): its first line, with NCCL's ncclGetErrorString "
                   "for ncclInvalidUsage"),
    RefusalMessage("gloo", r"Unable to find address for",
                   "gloo/transport/tcp/device.cc (CreateDevice): GLOO_SOCKET_IFNAME names an interface without an "
                   "address"),
    RefusalMessage("gloo", r"\(\): unsupported gloo device",
                   "torch c10d GlooDeviceFactory (makeDeviceForInterface, makeDeviceForHostname): "
                   "GLOO_DEVICE_TRANSPORT names a transport this build of gloo has not"),
)
"""Every message that makes a combination "not available", most specific first (the first one found becomes the
rows' note). NCCL's ncclInvalidArgument is not one: NCCL returns it for what the caller passed (a root, a count, a
pointer), which no setting changes. docs/sweep.md lists these."""

_REFUSALS = [re.compile(message.pattern) for message in REFUSAL_MESSAGES]


def log_size(log_path: Path) -> int:
    """Where the next launch's output starts in the launch log."""
    return log_path.stat().st_size if log_path.exists() else 0


def refusal(run_dir: Path, log_path: Path, start: int) -> str | None:
    """The backend's refusal of the combination whose launch wrote the log from `start`, in one line; None when the
    launch failed otherwise (a crash). Rank 0's error as meta.json recorded it is read first, then the ranks' and
    torchrun's output (an error while the process group formed comes before rank 0 has a run to write to)."""
    reason = store.read_meta(run_dir).get("reason")
    lines = [str(reason).removeprefix("rank 0: ")] if reason else []
    return refusal_in([*lines, *_launch_output(log_path, start).splitlines()])


def refusal_in(lines: Iterable[str]) -> str | None:
    """The first line holding a message of REFUSAL_MESSAGES, taken in the list's order (its most specific message
    wins over a summary line that comes earlier); None when no line holds one."""
    cleaned = [_RANK_PREFIX.sub("", line.strip()) for line in lines]
    for found in _REFUSALS:
        for line in cleaned:
            if found.search(line):
                return line[:_REASON_CHARS]
    return None


def _launch_output(log_path: Path, start: int) -> str:
    if not log_path.exists():
        return ""
    with open(log_path, "rb") as log:
        log.seek(start)
        return log.read().decode("utf-8", errors="replace")


def write_unavailable(bench: Bench, run_dir: Path, indexes: Iterable[int], reason: str) -> None:
    """The rows of the points a refused launch did not measure, each noted "not available: <reason>"."""
    points = {point.index: point for point in bench.points}
    run_id = store.run_id_of(run_dir)
    rows = [bench.kind.unavailable_row(bench.spec, points[index], run_id=run_id, world=bench.spec.nproc,
                                       reason=reason) for index in indexes]
    store.write_rows(run_dir / store.RESULTS_FILE, bench.kind.result_columns, rows)
