"""`commbench import nccl-inspector`: a live job's NCCL Inspector logs (inspector_records.py reads them) as rows of
the collective kind, one per rank's log, collective, size, algorithm/protocol and communicator.

A row's time is its median call (the lower middle one for an even count: one call of the log, whose algbw and busbw
are the log's own), chosen over the mean because a live job's calls include some a straggling peer or the host held
up, which a median of the calls does not follow; time_us_mean, time_us_min, time_us_max, time_us_p95, time_us_stdev
and the median's 95 % CI come from every call, and samples.csv keeps the calls. The Inspector logs no dtype, reduction
or buffers: the dtype and op are what --dtype and --op say (else "unknown"), and the placement is the one
torch.distributed calls have (all_reduce, broadcast and reduce in place, the others out of place), which is also the
one a default sweep measures."""

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone

from commbench.errors import CommbenchError
from commbench.imports.figures import AGREES, NOT_RECOMPUTED, busbw_check, number
from commbench.imports.inspector_records import CollectiveRecord, Context, InspectorLog, read
from commbench.imports.model import NCCL_INSPECTOR, ImportedFile, ImportedRow, ImportedTest, SourceName
from commbench.measure.stats import summarize
from commbench.names import CUDA, DTYPE_BYTES, NCCL, NCCL_FUNCTIONS, NO_OP, PER_ITERATION, busbw_factor

TOOL: SourceName = NCCL_INSPECTOR
STARTED_FROM = ("its first record's dump_timestamp_us (when the plugin wrote it, in UTC; the calls it holds ran up to "
                "one dump interval before)")
UNKNOWN = "unknown"
"""The dtype and op of rows whose job nothing states (the Inspector logs neither), and a part of algo_proto the
log does not name (as the Inspector's own Prometheus labels write it)."""
TIMING_METHOD = (
    "nccl-inspector: each call of the live job as NVIDIA's NCCL Inspector plugin timed it on one rank "
    "(coll_exec_time_us, whole microseconds, cut down: kernel_gpu = the longest kernel channel on the GPU clock; "
    "kernel_cpu or collective_cpu = host timestamps, where no GPU time was taken); a row is one rank's calls of one "
    "collective, size, algorithm/protocol and communicator, its time the median call (its algbw and busbw the log's "
    "for that call), samples.csv every call")
COLLECTIVES = {NCCL_FUNCTIONS[name]: name for name in ("all_reduce", "all_gather", "reduce_scatter", "broadcast",
                                                       "reduce")}
"""The Inspector's collectives (names.NCCL_FUNCTIONS, its spelling) that commbench rows hold. Its All2All and
AllGatherV records carry no bandwidth (inspectorComputeOpBw gives them none) and are skipped, as are the p2p
records (Send, Recv: single transfers, not nccl-tests' sendrecv)."""
PER_RANK_PART = {"all_gather", "reduce_scatter"}
"""Collectives whose coll_msg_size_bytes is one rank's part (NCCL's count): the size of the whole buffer, the one
commbench and nccl-tests name these by (and the one the Inspector's algbw divides), is that × the ranks."""
REDUCING = {"all_reduce", "reduce", "reduce_scatter"}
IN_PLACE = {"all_reduce", "broadcast", "reduce"}


@dataclass
class InspectorRow(ImportedRow):
    """An imported row with the Inspector's own columns (write.py adds them to its results.csv)."""

    algo_proto: str = ""
    """The algorithm and protocol NCCL ran the calls with, as the Inspector's algo_proto label writes them
    ("RING_LL"; "unknown_unknown" in a log before v4.2, which does not record them)."""
    communicator: str = ""
    """The communicator's id, and its comm_name where the log has one ("0x7f8c496ae9f661 DP Group 0")."""
    rank: int | None = None
    """The rank, in that communicator, whose log the calls come from."""

    def own_columns(self) -> dict:
        # the Inspector times single calls: the per-call timing mode, whose rows hold a per-call distribution
        return {"algo_proto": self.algo_proto, "communicator": self.communicator, "rank": self.rank,
                "timing": PER_ITERATION}


@dataclass(frozen=True)
class Selection:
    """What the user says about the job: the communicators to import, and the dtype and op its calls used."""

    world_size: int | None = None
    communicators: tuple[str, ...] = ()
    dtype: str | None = None
    op: str | None = None


def read_file(name: str, sha256: str, text: str, *, selection: Selection) -> ImportedFile:
    """Every communicator of one log (choose() then keeps those the user chose: a job's files differ in which
    communicators they hold)."""
    log = read(text, name)
    # one test per communicator and rank of a process (a file is one process's, unless logs were concatenated)
    by_rank: dict[tuple, list[CollectiveRecord]] = {}
    skipped = Counter(log.skipped)
    for record in log.records:
        context = record.context
        if record.collective not in COLLECTIVES:
            skipped[f"{record.collective} coll_perf"] += 1
        else:
            by_rank.setdefault((context.communicator, context.rank, context.host, context.pid), []).append(record)
    if not by_rank:
        raise CommbenchError(_no_collective(name, log))
    tests = [_test(name, records[0].context, records, selection) for records in by_rank.values()]
    # the tool's version is the plugin's git_rev (the NCCL tree it was built from), empty in many builds; the
    # format version is each test's
    git = sorted({records[0].context.git_rev for records in by_rank.values() if records[0].context.git_rev})
    return ImportedFile(name, sha256, TOOL, ", ".join(git) or None, NCCL, CUDA, TIMING_METHOD, tests,
                        _notes(log, skipped))


def choose(files: list[ImportedFile], selection: Selection) -> None:
    """Keep the communicators --world-size and --communicator choose (a file left without any stays listed, with no
    tests), and refuse what leaves nothing, or communicators of several sizes: a run has one world size."""
    present = _communicators(files)
    for imported in files:
        imported.tests = [test for test in imported.tests if _chosen(test, selection)]
    if not any(imported.tests for imported in files):
        raise CommbenchError(f"no communicator of the logs matches --world-size/--communicator; they hold "
                             f"{'; '.join(present[:6])}: choose among them")
    sizes = {test.world_size or 0 for imported in files for test in imported.tests}  # every test has n_ranks
    if len(sizes) > 1:
        raise CommbenchError(f"the logs hold communicators of {', '.join(map(str, sorted(sizes)))} ranks "
                             f"({'; '.join(_communicators(files)[:6])}); a run has one world size: pass "
                             "--world-size N or --communicator ID|NAME")


def _communicators(files: list[ImportedFile]) -> list[str]:
    """Each communicator and its size, for the messages that ask to choose among them."""
    found = {f"{test.closing['communicator']} ({test.world_size} ranks)": None
             for imported in files for test in imported.tests}
    return list(found)


def _chosen(test: ImportedTest, selection: Selection) -> bool:
    if selection.world_size is not None and test.world_size != selection.world_size:
        return False
    names = (test.closing["communicator"], test.closing["comm_name"])
    return not selection.communicators or any(wanted in names for wanted in selection.communicators)


def _communicator_key(context: Context) -> str:
    return f"{context.communicator} {context.name}".strip()


def _no_collective(name: str, log: InspectorLog) -> str:
    if not log.records:
        kinds = ", ".join(f"{count} {kind}" for kind, count in log.skipped.items()) or "no operation"
        return (f"{name} holds no collective record (coll_perf), only {kinds}; pass the log of a job whose "
                "collectives the Inspector timed")
    return (f"{name} holds only {', '.join(sorted({record.collective for record in log.records}))} records, which "
            f"carry no bandwidth; commbench imports {', '.join(COLLECTIVES)}")


def _test(file_name: str, context: Context, records: list[CollectiveRecord], selection: Selection) -> ImportedTest:
    communicator = _communicator_key(context)
    test = ImportedTest(program=f"communicator {communicator}, rank {context.rank} of {context.n_ranks}",
                        line=records[0].line, header=f"{context.host} pid {context.pid}",
                        world_size=context.n_ranks, ranks=[{"rank": context.rank, "host": context.host}])
    groups: dict[tuple[str, int, str], list[CollectiveRecord]] = {}
    for record in records:
        collective = COLLECTIVES[record.collective]
        size = record.message_bytes * (context.n_ranks if collective in PER_RANK_PART else 1)
        groups.setdefault((collective, size, _algo_proto(record)), []).append(record)
    test.rows = [_row(key, calls, context, communicator, selection, file_name) for key, calls in groups.items()]
    channels = sorted({record.channels for record in records if record.channels is not None})
    test.closing = {"communicator": context.communicator, "comm_name": context.name, "format": context.version,
                    "records": len(records), "nnodes": context.nnodes,
                    "coll_sn": _range(record.sequence for record in records),
                    "dump_timestamp_us": _range(record.context.dumped_us for record in records),
                    "verbose_records": sum(record.channels is not None for record in records),
                    **({"kernel_channels": channels} if channels else {})}
    if test.closing["dump_timestamp_us"]:
        first = datetime.fromtimestamp(test.closing["dump_timestamp_us"][0] / 1e6, timezone.utc)
        test.closing.update(started=first.isoformat(timespec="seconds"), started_from=STARTED_FROM)
    return test


def _range(values: Iterable[int | None]) -> list[int]:
    """The first and last of the values the log has (sequence numbers, dump times); [] where it has none."""
    present = sorted(value for value in values if value is not None)
    return [present[0], present[-1]] if present else []


def _algo_proto(record: CollectiveRecord) -> str:
    return f"{record.algorithm or UNKNOWN}_{record.protocol or UNKNOWN}"


def _row(key: tuple[str, int, str], calls: list[CollectiveRecord], context: Context, communicator: str,
         selection: Selection, file_name: str) -> InspectorRow:
    collective, size, algo_proto = key
    times = [number(call.time_us) for call in calls]
    median = sorted(calls, key=lambda call: number(call.time_us))[(len(calls) - 1) // 2]  # the lower middle call
    summary = summarize(times)
    dtype = selection.dtype or UNKNOWN
    sources = Counter(call.timing_source for call in calls)
    timed_by = ", ".join(f"{source} ({count})" if len(sources) > 1 else source for source, count in sources.items())
    channels = sorted({call.channels for call in calls if call.channels is not None})
    traced = f"; event traces on {_span(channels)} kernel channel(s)" if channels else ""
    return InspectorRow(
        # model.ImportedRow types count as int; without a dtype none is known, and None writes an empty cell
        collective=collective, size_bytes=size, count=_count(calls[0], dtype, file_name),  # type: ignore[arg-type]
        dtype=dtype, op=(selection.op or UNKNOWN) if collective in REDUCING else NO_OP, inplace=collective in IN_PLACE,
        time_us=number(median.time_us), algbw_gbps=number(median.algbw_gbps), busbw_gbps=number(median.busbw_gbps),
        printed={"time_us": median.time_us, "busbw_gbps": median.busbw_gbps},
        busbw_check=_check(calls, collective, size, context.n_ranks), n_wrong=None, calls_per_sample=1,
        iters=len(calls), warmup=None,
        more_times_us={"time_us_mean": summary.mean, "time_us_min": summary.min, "time_us_max": summary.max,
                       "time_us_p95": summary.p95, "time_us_stdev": summary.stdev, "time_us_ci_lo": summary.ci_lo,
                       "time_us_ci_hi": summary.ci_hi},
        samples_us=times,
        note=f"{TOOL}: median of {len(calls)} call(s) on rank {context.rank}, timed by {timed_by}{traced}",
        algo_proto=algo_proto, communicator=communicator, rank=context.rank)


def _span(channels: list[int]) -> str:
    return str(channels[0]) if len(channels) == 1 else f"{channels[0]}–{channels[-1]}"


def _count(call: CollectiveRecord, dtype: str, file_name: str) -> int | None:
    """Elements per rank (nccl-tests' count) where the dtype is known; the Inspector logs bytes only."""
    element = DTYPE_BYTES.get(dtype)
    if element is None:
        return None
    if call.message_bytes % element:
        raise CommbenchError(f"{file_name} line {call.line}: a {call.collective} of {call.message_bytes} bytes is "
                             f"not a whole number of {dtype} elements ({element} bytes); pass the --dtype the job "
                             "used")
    return call.message_bytes // element


def _check(calls: list[CollectiveRecord], collective: str, size: int, n_ranks: int) -> str:
    """Whether every call's logged busbw follows from the size and its time with commbench's (nccl-tests') factor:
    "agrees", or the first call that does not (the Inspector's inspectorComputeOpBw uses the same formulas)."""
    factor = busbw_factor(collective, n_ranks)
    checks = [(call, busbw_check(size_bytes=size, time_us=call.time_us, busbw_gbps=call.busbw_gbps, factor=factor))
              for call in calls]
    differing = [(call, check) for call, check in checks if check != AGREES]
    if not differing:
        return AGREES
    call, check = differing[0]
    if check.startswith(NOT_RECOMPUTED):
        return check
    return f"{check} (line {call.line}; {len(differing)} of {len(calls)} call(s) differ)"


def _notes(log: InspectorLog, skipped: Counter) -> list[str]:
    notes = [f"{count} {kind} record(s) skipped: commbench imports the collectives {', '.join(COLLECTIVES)}"
             for kind, count in skipped.items()]
    for (communicator, rank, host, _), dropped in log.dropped.items():
        if dropped:
            notes.append(f"the Inspector dropped {dropped} collective record(s) of communicator {communicator} rank "
                         f"{rank} on {host} (its ring buffer overflowed, dump_stats): the rows hold a sample of the "
                         "calls (raise NCCL_INSPECTOR_DUMP_COLL_RING_SIZE)")
    return notes


NO_DTYPE_WARNING = ("the Inspector logs no dtype or reduction: the rows say unknown, and compare joins them with "
                    "another tool's rows where that side measured one dtype and op, else only where --dtype and --op "
                    "say what the job used")
