"""PARAM's comms benchmark output (facebookresearch/param, train/comms/pt/comms.py): the COMMS-RES tables.

A table starts at a `COMMS-RES  total-size (B)  nElementsPerRank  Time(us):p50  p75  p95  Min  Max  AlgBW(GB/s)
BusBW(GB/s)  TotalTime(us):p50` header (older: `size (B)  num-elements  Latency(us):p50 …`, without Min and Max), and
each row `COMMS-RES-<collective>-<dtype>[-tag]  <figures>` follows the header's columns (older rows are
`COMMS-RES  <figures>` with the collective on the command line: --collective). The world size, host and device come
from PARAM's `Hello from Rank N: [Rank N] host H, device: D, … world_size: W` lines, the backend from its
`backend: B nw-stack: …` line. PARAM's quantized (COMMS-RES-QUANT) and pt2pt tables are not collective timings of
this kind and are refused.

PARAM times each rank separately and prints percentiles across ranks: p50 is the median rank's mean time per call;
its algbw and busbw follow from that p50 (comms.py reportBenchTimeColl).
"""

import re
from typing import cast

from commbench.errors import CommbenchError
from commbench.imports.figures import check_busbw, number
from commbench.imports.model import ImportedRow, ImportedTest, SourceName
from commbench.names import NO_OP

TOOL: SourceName = "param"
TIMING_METHOD = ("PARAM (--z 0, non-blocking): per rank, the wall time of issuing --n calls plus one wait for them "
                 "all, divided by --n (a mean per call); its p50 is across ranks, and its busbw follows from the p50")
REDUCING = {"all_reduce", "reduce", "reduce_scatter", "reduce_scatter_base", "reduce_scatter_v"}
IN_PLACE = {"all_reduce", "reduce", "broadcast"}
"""PARAM calls torch.distributed on its input tensor: these work in place (as commbench's rows of them say); the
others write an output tensor."""

_HELLO = re.compile(r"\[Rank\s+(\d+)\]\s+host\s+([^,\s]+),\s+device:\s+(\S+?),.*?world_size:\s+(\d+)")
_BACKEND = re.compile(r"\bbackend:\s+(\S+)\s+nw-stack:")
_ROW_NAME = re.compile(r"COMMS-RES-(?P<collective>[a-z_]+?)-(?P<dtype>[a-z]+\d*)(?P<tag>\S*)$")
_COLUMNS = {"size(B)": "size", "total-size(B)": "size", "nElementsPerRank": "count", "num-elements": "count",
            "Time(us):p50": "p50", "Latency(us):p50": "p50", "p75": "p75", "p95": "p95", "Min": "min", "Max": "max",
            "AlgBW(GB/s)": "algbw", "algBW(GB/s)": "algbw", "BusBW(GB/s)": "busbw", "busBW(GB/s)": "busbw",
            "TotalTime(us):p50": "total", "TotalLatency(us):p50": "total"}
_NEEDED = ("size", "count", "p50", "algbw", "busbw")


def factor(collective: str, world: int) -> float:
    """PARAM's busbw factor (pytorch_backend_utils.getBusBW); 1 for every collective it does not list."""
    if collective == "all_reduce":
        return 2 * (world - 1) / world
    spread = {"gather", "all_gather", "reduce_scatter", "reduce_scatter_base", "scatter", "all_gather_base",
              "all_gather_object"}
    return (world - 1) / world if "all_to_all" in collective or collective in spread else 1.0


def parse(text: str, file_name: str, *, collective: str | None, world_size: int | None, partial: bool
          ) -> tuple[str | None, list[ImportedTest], str | None, str | None]:
    """The tests (one per COMMS-RES table) of a PARAM log, with its backend and device."""
    hosts, backend, device, files_world, tests, columns = {}, None, None, None, [], None
    for number_, raw in enumerate(text.splitlines(), start=1):
        line, where = raw.strip(), f"{file_name} line {number_}"
        if (hello := _HELLO.search(line)) is not None:
            hosts[int(hello.group(1))] = {"rank": int(hello.group(1)), "host": hello.group(2),
                                          "device": hello.group(3)}
            device, files_world = hello.group(3), int(hello.group(4))
        elif (found := _BACKEND.search(line)) is not None:
            backend = found.group(1)
        elif line.startswith("COMMS-RES-QUANT") or "pingLatency" in line:
            raise CommbenchError(f"{where}: PARAM's {'quantized' if 'QUANT' in line else 'pt2pt'} table is not a "
                                 "collective timing commbench imports; import the collective tables only")
        elif line.startswith("COMMS-RES") and not line.startswith("COMMS-RES-") and _is_header(line):
            columns = _header(line, where)
            tests.append(ImportedTest(program="", line=number_, header=line))
        elif line.startswith("COMMS-RES"):
            if columns is None:
                raise CommbenchError(f"{where}: a COMMS-RES row before its table header; the log was cut or "
                                     "edited: import the whole log")
            tests[-1].rows.append(_row(line, columns, collective, where))
    tests = [test for test in tests if test.rows]
    if not tests:
        raise CommbenchError(f"{file_name} holds no PARAM COMMS-RES table; pass the output of PARAM's comms.py "
                             "(train/comms/pt/comms.py)")
    world = _world(files_world, world_size, file_name)
    for test in tests:
        test.world_size, test.ranks = world, [hosts[rank] for rank in sorted(hosts)]
        test.program = f"COMMS-RES-{test.rows[0].collective}-{test.rows[0].dtype}"
        check_busbw(test, lambda name: factor(name, world), lambda name: "")
    return None, tests, backend, device


def _is_header(line: str) -> bool:
    return any(name in line.replace(" ", "") for name in ("size(B)", "Time(us):p50", "Latency(us):p50"))


def _header(line: str, where: str) -> list[str]:
    # "total-size (B)" and "size (B)" hold a space; PARAM's column widths do not line up, so split on whitespace
    tokens = line.replace(" (B)", "(B)").split()[1:]
    columns = [_COLUMNS.get(token, token) for token in tokens]
    missing = [name for name in _NEEDED if name not in columns]
    if missing:
        raise CommbenchError(f"{where}: a COMMS-RES header without {', '.join(missing)} columns "
                             f"({' '.join(tokens)}); this importer reads PARAM's collective tables")
    return columns


def _row(line: str, columns: list[str], collective: str | None, where: str) -> ImportedRow:
    first, *fields = line.split()
    if len(fields) < len(columns):
        raise CommbenchError(f"{where}: a COMMS-RES row cut short ({len(fields)} of {len(columns)} figures); the log "
                             "was truncated or edited: import the whole log")
    named = _ROW_NAME.match(first)
    if named is None and collective is None:
        raise CommbenchError(f"{where}: an older COMMS-RES row that does not name its collective; pass --collective")
    if named is not None and collective is not None and named["collective"] != collective:
        raise CommbenchError(f"{where}: --collective {collective} but the row is {named['collective']}; drop "
                             "--collective")
    name = named["collective"] if named else collective
    assert name is not None  # a row that does not name its collective, without --collective, raised above
    values = dict(zip(columns, fields))
    more = {f"time_us_{key}": number(values[key]) for key in ("p75", "p95", "min", "max") if key in values}
    return ImportedRow(
        collective=name, size_bytes=int(values["size"]), count=int(values["count"]),
        dtype=named["dtype"] if named else "float32", op="sum" if name in REDUCING else NO_OP, inplace=name in IN_PLACE,
        time_us=number(values["p50"]), algbw_gbps=number(values["algbw"]), busbw_gbps=number(values["busbw"]),
        printed={"time_us": values["p50"], "busbw_gbps": values["busbw"]}, more_times_us=more,
        note=f"PARAM tag {named['tag'].lstrip('-')}" if named and named["tag"] else "")


def _world(found: int | None, given: int | None, file_name: str) -> int:
    if found is not None and given is not None and found != given:
        raise CommbenchError(f"{file_name}: --world-size {given} but PARAM's log says world_size {found}; drop "
                             "--world-size")
    if found is None and given is None:
        raise CommbenchError(f"{file_name} has no PARAM 'Hello from Rank … world_size: N' line to tell the world "
                             "size; pass --world-size N")
    return found or cast(int, given)  # both None raised above
