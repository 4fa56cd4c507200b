"""`commbench perf -d all -o all` runs every type and op pair that `-d X -o Y` runs alone, and leaves out only the
pairs the backend cannot run, each named in a note with the reason (gloo averages floating types, not integers)."""

import itertools
import re
from dataclasses import replace

import pytest

from commbench import names
from commbench.benches.collective import KIND
from commbench.benches.options import parse_options
from commbench.errors import CommbenchError
from commbench.machine import Machine
from commbench.perf import flags as perf_flags
from commbench.sweep.spec import SweepSpec
from tests.in_process import commbench_here

CPU_MACHINE = Machine(gpus=0, nccl_available=False, cpus=2)
RUNNABLE_TYPE_NAMES = [name for name in names.NCCL_TESTS_TYPE_NAMES if name not in names.UNREDUCED_DTYPES]


def _planned_pairs(datatype: str, op: str) -> set[tuple[str, str]]:
    """The (nccl-tests type, op) pairs `commbench perf all_reduce -d DATATYPE -o OP` plans on gloo CPU ranks."""
    request = perf_flags.fit_to(perf_flags.parse("all_reduce", {"datatype": datatype, "op": op}),
                                backend="gloo", device="cpu")
    options = replace(parse_options(KIND.options, request.options), left_out=request.left_out)
    bench = KIND.resolve(options, CPU_MACHINE)
    return {(names.nccl_tests_type_name(point.dtype), point.op) for point in bench.points}


def _runs_alone(datatype: str, op: str) -> bool:
    try:
        return bool(_planned_pairs(datatype, op))
    except CommbenchError:
        return False


@pytest.mark.no_process
def test_all_types_and_ops_plan_every_pair_that_runs_alone_and_no_other():
    alone = {(datatype, op) for datatype, op in itertools.product(RUNNABLE_TYPE_NAMES, names.NCCL_TESTS_OP_NAMES)
             if _runs_alone(datatype, op)}
    assert ("float", "avg") in alone and ("int8", "avg") not in alone  # gloo: avg on floating types only
    assert _planned_pairs("all", "all") == alone


@pytest.mark.no_process
def test_the_pairs_left_out_are_named_with_the_backends_reason():
    request = perf_flags.fit_to(perf_flags.parse("all_reduce", {"datatype": "all", "op": "all"}),
                                backend="gloo", device="cpu")
    left = {(names.nccl_tests_type_name(dtype), op) for dtype, op in request.left_out}
    assert left == {(name, "avg") for name in ("int8", "uint8", "int32", "int64")}
    avg_notes = [note for note in request.notes if note.startswith("-o all: avg")]
    assert len(avg_notes) == 1, request.notes
    runs, left_for = re.match(r"-o all: avg runs for (.*); left out for (.*) only: ", avg_notes[0]).groups()
    assert set(runs.split(", ")) == {"half", "float", "double", "bfloat16"}
    assert set(left_for.split(", ")) == {"int8", "uint8", "int32", "int64"}
    assert "gloo cannot average" in avg_notes[0]


@pytest.mark.no_process
def test_all_types_with_avg_leaves_out_the_types_that_cannot_average():
    assert _planned_pairs("all", "avg") == {(name, "avg") for name in ("half", "float", "double", "bfloat16")}
    request = perf_flags.fit_to(perf_flags.parse("all_reduce", {"datatype": "all", "op": "avg"}),
                                backend="gloo", device="cpu")
    assert any(note.startswith("-d all: int8, uint8, int32, int64 left out with -o avg") for note in request.notes)


@pytest.mark.no_process
def test_one_type_and_op_the_backend_lacks_is_still_refused_by_name():
    with pytest.raises(CommbenchError, match="gloo cannot average int8"):
        _planned_pairs("int8", "avg")


@pytest.mark.no_process
def test_on_nccl_every_pair_runs_and_an_nccl_without_avg_leaves_avg_out_for_every_type():
    for version, left_avg in (((2, 27, 0), False), ((2, 9, 0), True)):
        request = perf_flags.fit_to(perf_flags.parse("all_reduce", {"datatype": "all", "op": "all"}),
                                    backend="nccl", device="cuda", nccl_version=version)
        assert request.left_out == ()
        assert ("avg" not in request.options["ops"]) == left_avg
        assert any(note.startswith("-o all: avg left out (NCCL 2.9.0 has no avg") for note in request.notes) == left_avg


@pytest.mark.no_process
def test_the_left_out_pairs_travel_to_the_ranks_with_the_spec():
    spec = SweepSpec(collectives=("all_reduce",), sizes=(1024,), dtypes=("int8", "float32"), ops=("sum", "avg"),
                     placement="in", warmup=0, iters=1, backend="gloo", device="cpu", nproc=2, timeout_s=60.0,
                     left_out=(("int8", "avg"),))
    assert SweepSpec.from_json(spec.to_json()) == spec


@pytest.mark.distributed
def test_perf_prints_avg_for_the_floating_types_and_not_the_integers(tmp_path):
    completed = commbench_here("perf", "all_reduce", "-d", "all", "-o", "all", "-b", "1K", "-e", "1K", "-n", "2", "-w",
                               "0", "--out", str(tmp_path), cwd=tmp_path)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    printed = {tuple(line.split()[2:4]) for line in completed.stdout.splitlines()
               if re.match(r"^\s+1024\s+\d+\s+\S+\s+\S+\s+-1\s", line)}
    assert printed == _planned_pairs("all", "all")
    assert ("float", "avg") in printed and ("int8", "avg") not in printed
    assert re.search(r"^# commbench: -o all: avg runs for .*; left out for int8, uint8, int32, int64 only",
                     completed.stdout, re.MULTILINE)
