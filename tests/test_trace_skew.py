"""Skew pairs the same call on every rank: one point's traces, one kind, size and dtype, the k-th on each rank."""

import gzip
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from commbench.profiling.skew import skew_report
from commbench.profiling.trace_file import load_trace
from commbench.profiling.trace_points import group_by_point, point_keys
from tests.in_process import commbench_here

MIB = 1024 * 1024
SIZES = (MIB, 4 * MIB)
PROFILE_ITERS = 3


# --- hand-built traces ----------------------------------------------------------------------------------------------

def _nccl_trace(path: Path, calls: list[tuple[int, float, str]], *, rank: int | None) -> Path:
    """A minimal Kineto trace: one NCCL all-reduce kernel per call (message bytes, start µs, torch dtype name), the
    message recorded on the kernel as torch copies record_param_comms' arguments there."""
    element_bytes = {"Float": 4, "Half": 2}
    events = []
    for number, (size, start, dtype) in enumerate(calls):
        elements = size // element_bytes[dtype]
        events.append({"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", "pid": 0,
                       "tid": 7, "ts": start, "dur": 40,
                       "args": {"stream": 7, "correlation": 100 + number, "Collective name": "allreduce",
                                "In msg nelems": elements, "Out msg nelems": elements, "dtype": dtype}})
    document = {"traceEvents": events}
    if rank is not None:
        document["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 2}
    path.write_text(json.dumps(document))
    return path


def _by_size(report: dict) -> dict:
    return {(entry["bytes"], entry["dtype"]): (entry["matched"], entry["unmatched"], entry["skew_us_max"])
            for entry in report["skew"]}


@pytest.mark.no_process
def test_calls_in_a_different_order_pair_by_size_not_by_position(tmp_path):
    rank0 = _nccl_trace(tmp_path / "a.json", [(MIB, 100, "Float"), (4 * MIB, 1000, "Float")], rank=0)
    rank1 = _nccl_trace(tmp_path / "b.json", [(4 * MIB, 150, "Float"), (MIB, 1300, "Float")], rank=1)
    report = skew_report([load_trace(rank0), load_trace(rank1)])
    # by position the first calls (1 MiB against 4 MiB) would be 50 µs apart; the same size is 1200 and 850 µs apart
    assert _by_size(report) == {(MIB, "float32"): (1, 0, 1200.0), (4 * MIB, "float32"): (1, 0, 850.0)}
    assert all(entry["size_from"] == "trace" and entry["ranks"] == [0, 1] for entry in report["skew"])
    (point,) = report["skew_points"]
    assert point["name"] is None and "not named rank<R>-<point>" in point["matched_by"]  # says what it matched


@pytest.mark.no_process
def test_a_call_without_its_size_and_dtype_on_the_other_rank_stays_unmatched(tmp_path):
    rank0 = _nccl_trace(tmp_path / "a.json", [(MIB, 100, "Float"), (2 * MIB, 200, "Float"), (MIB, 300, "Half")],
                        rank=0)
    rank1 = _nccl_trace(tmp_path / "b.json", [(MIB, 110, "Float"), (4 * MIB, 210, "Float"), (MIB, 330, "Float")],
                        rank=1)
    report = skew_report([load_trace(rank0), load_trace(rank1)])
    assert _by_size(report) == {(MIB, "float16"): (0, 1, None), (MIB, "float32"): (1, 1, 10.0),
                                (2 * MIB, "float32"): (0, 1, None), (4 * MIB, "float32"): (0, 1, None)}
    assert report["skew_summary"]["matched"] == 1 and report["skew_summary"]["unmatched"] == 4


@pytest.mark.no_process
def test_traces_are_grouped_by_point_and_rank_from_their_names(tmp_path):
    from commbench.profiling.capture import trace_file_name  # the names a profiled sweep writes

    for size in SIZES:
        for rank in (1, 0):
            name = trace_file_name(rank=rank, collective="all_reduce", impl="builtin", dtype="float32", op="sum",
                                   inplace=False, size_bytes=size)
            # no distributedInfo: the rank comes from the file name; rank 1 starts 10 µs after rank 0
            _nccl_trace(tmp_path / name, [(size, 100 + 10 * rank, "Float")], rank=None)
    _nccl_trace(tmp_path / "rank0-ddp-config002.json", [(MIB, 100, "Float")], rank=0)
    traces = [load_trace(path) for path in sorted(tmp_path.iterdir())]
    groups = group_by_point(traces)
    assert [group.label() for group in groups] == ["all_reduce builtin float32 sum out-of-place 1 MiB",
                                                   "all_reduce builtin float32 sum out-of-place 4 MiB",
                                                   "ddp config 2"]
    assert point_keys("all_reduce-ring-bfloat16-max-inplace-4096B") == {
        "collective": "all_reduce", "impl": "ring", "dtype": "bfloat16", "op": "max", "inplace": True,
        "size_bytes": 4096}
    report = skew_report(traces)
    assert [(entry["point"], entry["bytes"], entry["ranks"], entry["matched"], entry["skew_us_max"])
            for entry in report["skew"]] == [(0, MIB, [0, 1], 1, 10.0), (1, 4 * MIB, [0, 1], 1, 10.0)]
    assert report["skew_points"][2]["note"].startswith("one trace only")


@pytest.mark.no_process
def test_two_traces_of_one_rank_are_not_matched(tmp_path):
    (tmp_path / "run1").mkdir()
    first = _nccl_trace(tmp_path / "run1" / "x.json", [(MIB, 100, "Float")], rank=0)
    second = _nccl_trace(tmp_path / "y.json", [(MIB, 900, "Float")], rank=0)
    report = skew_report([load_trace(first), load_trace(second)])
    assert report["skew"] == [] and "both hold rank 0" in report["skew_points"][0]["note"]


# --- a real profiled sweep of two sizes -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def two_size_traces(tmp_path_factory) -> Path:
    """The traces folder of `commbench sweep --profile`: all_reduce at 1 MiB and 4 MiB on 2 gloo ranks."""
    cwd = tmp_path_factory.mktemp("skew")
    completed = commbench_here("sweep", "--backend", "gloo", "--device", "cpu", "--nproc", "2", "--out", "results",
                               "--run-id", "two-sizes", "--quiet", "-c", "all_reduce", "--impl", "builtin", "--sizes",
                               ",".join(str(size) for size in SIZES), "--warmup", "1", "--iters", "6", "--profile",
                               "--profile-iters", str(PROFILE_ITERS), cwd=cwd)
    assert completed.returncode == 0, completed.stderr
    return cwd / "results" / "two-sizes" / "traces"


def _raw_calls(path: Path) -> tuple[int, list[float]]:
    """Read without commbench: the rank torch.profiler wrote, and the starts (µs) of the gloo all-reduce spans,
    rounded up to whole µs as the trace loader (and HTA) round sub-µs times."""
    with gzip.open(path, "rt") as file:
        document = json.load(file)
    starts = sorted(float(np.ceil(event["ts"])) for event in document["traceEvents"]
                    if event.get("name") == "gloo:all_reduce" and event.get("ph") == "X")
    return document["distributedInfo"]["rank"], starts


@pytest.mark.distributed
def test_profiled_sweep_skew_pairs_calls_of_one_size(two_size_traces, commbench_cli):
    # the expected pairing, from the raw files: a trace's size is in its name (gloo's spans record none), its rank in
    # distributedInfo; the k-th all-reduce of one size on each rank is one call
    by_size: dict[int, dict[int, list[float]]] = defaultdict(dict)
    for path in two_size_traces.iterdir():
        size = int(path.name.removesuffix("B.json.gz").rsplit("-", 1)[1])
        rank, starts = _raw_calls(path)
        by_size[size][rank] = starts
    assert sorted(by_size) == list(SIZES) and all(sorted(ranks) == [0, 1] for ranks in by_size.values())

    outcome = commbench_cli("trace", "analyze", "--json", str(two_size_traces))
    assert outcome.returncode == 0, outcome.stderr
    report = json.loads(outcome.stdout)  # the whole of stdout is one JSON document
    entries = report["skew"]
    assert sorted(entry["bytes"] for entry in entries) == list(SIZES)  # one group per point, i.e. per size
    assert len({entry["point"] for entry in entries}) == len(SIZES)
    points = {point["point"]: point for point in report["skew_points"]}
    for entry in entries:
        size = entry["bytes"]
        assert (entry["kind"], entry["dtype"], entry["ranks"]) == ("all_reduce", "float32", [0, 1])
        # every trace the entry matched is a trace of this size, one per rank
        traced = [Path(path).name for path in points[entry["point"]]["traces"]]
        assert traced == [f"rank{rank}-all_reduce-builtin-float32-sum-inplace-{size}B.json.gz" for rank in (0, 1)]
        calls = [len(by_size[size][rank]) for rank in (0, 1)]
        assert calls == [PROFILE_ITERS, PROFILE_ITERS] == entry["calls_per_rank"]
        assert entry["matched"] == PROFILE_ITERS and entry["unmatched"] == 0
        spreads = [abs(start0 - start1) for start0, start1 in zip(by_size[size][0], by_size[size][1])]
        assert entry["skew_us_max"] == pytest.approx(max(spreads))
        assert entry["skew_us_mean"] == pytest.approx(float(np.mean(spreads)))
    assert report["skew_summary"]["matched"] == PROFILE_ITERS * len(SIZES)

    text = commbench_cli("trace", "analyze", str(two_size_traces))
    assert text.returncode == 0, text.stderr
    for point, size in enumerate(("1 MiB", "4 MiB")):
        assert f"skew all_reduce {size} float32 (point {point}, 2 ranks): {PROFILE_ITERS} matched, mean " \
               in text.stdout
    assert "start-time spread of the same call across ranks" in text.stdout
    assert f"point 1: all_reduce builtin float32 sum in-place 4 MiB, ranks 0, 1 ({two_size_traces})" in text.stdout
