"""`commbench sweep all_reduce all_gather` takes the collectives as arguments, as `commbench perf all_reduce` takes
one: the same sweep as `-c all_reduce,all_gather`; both ways at once must name the same collectives."""

import json

import pytest

from commbench.benches.collective import KIND
from commbench.benches.options import arguments_and_flag, parse_options
from commbench.cli import main
from commbench.machine import Machine
from tests.in_process import commbench_here
from tests.refusals import assert_refused, invoke

CPU_MACHINE = Machine(gpus=0, nccl_available=False, cpus=2)
SMALL = ["--sizes", "1K:4K:x2", "--backend", "gloo", "--nproc", "2"]


def _plan(args: list[str]):
    """The spec and points `commbench sweep ARGS` resolves to on a 2-core CPU machine, nothing launched."""
    command = main.commands["sweep"]
    with command.make_context("sweep", args) as ctx:
        raw = {name: value for name, value in ctx.params.items()
               if name not in ("out", "run_id", "quiet", "as_json", "verbose", "launches")}
    bench = KIND.resolve(parse_options(KIND.options, arguments_and_flag(KIND.options, raw)), CPU_MACHINE)
    return bench.spec, [point.label() for point in bench.points]


@pytest.mark.no_process
@pytest.mark.parametrize("arguments, flags", [
    (["all_reduce"], ["-c", "all_reduce"]),
    (["all_reduce", "all_gather"], ["-c", "all_reduce,all_gather"]),
    (["all_reduce", "all_gather"], ["--collective", "all_reduce", "--collective", "all_gather"]),
    (["all_gather", "all_reduce", "-c", "all_reduce,all_gather"], ["-c", "all_gather,all_reduce"]),
], ids=["one", "two", "repeated-flag", "both-ways-agreeing"])
def test_collectives_as_arguments_plan_the_sweep_the_flag_plans(arguments, flags):
    assert _plan([*arguments, *SMALL]) == _plan([*flags, *SMALL])
    assert _plan([*SMALL, *arguments]) == _plan([*flags, *SMALL])  # after the options too


@pytest.mark.no_process
@pytest.mark.parametrize("args", [["all_reduce", "-c", "all_gather"], ["all_reduce", "all_gather", "-c", "all_reduce"]],
                         ids=["other", "fewer"])
def test_arguments_and_a_flag_that_disagree_are_refused_in_one_line(tmp_path, args):
    line = assert_refused(invoke(["sweep", *args, "--out", str(tmp_path / "results")]), left_empty=[tmp_path])
    assert "given as arguments and --collective" in line and "give them one way" in line


@pytest.mark.no_process
def test_an_unknown_collective_as_an_argument_is_refused_as_the_flags_is(tmp_path):
    assert_refused(invoke(["sweep", "allreduce", "--out", str(tmp_path / "results")]),
                   fragment="unknown collective 'allreduce'", left_empty=[tmp_path])


@pytest.mark.no_process
def test_the_help_shows_the_arguments():
    result = invoke(["sweep", "--help"])
    assert result.exit_code == 0
    assert "Usage: commbench sweep [OPTIONS] [COLLECTIVE]..." in result.output
    assert "commbench sweep all_reduce all_gather" in result.output


@pytest.mark.distributed
def test_a_sweep_with_one_collective_argument_runs_that_collective_not_the_default_suite(tmp_path):
    completed = commbench_here("sweep", "all_gather", "--sizes", "1K", "--iters", "2", "--warmup", "0", "--out",
                               str(tmp_path), "--json", cwd=tmp_path)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    document = json.loads(completed.stdout)
    assert {row["collective"] for row in document["results"]} == {"all_gather"}
