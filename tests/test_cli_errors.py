"""Bad input: one line naming the problem and the fix, exit code 2, no traceback, nothing launched."""

import pytest
import torch
from click.testing import CliRunner

from commbench.cli import main

pytestmark = pytest.mark.no_process

NEEDS_NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")


@pytest.mark.parametrize("args, fragment", [
    (["sweep", "-c", "allreduce"], "unknown collective 'allreduce'"),
    (["sweep", "--sizes", "1K:oops:x2"], "bad size 'oops'"),
    (["sweep", "--sizes", "64K:1K:x2"], "min 65536 B is above max"),
    (["sweep", "--nproc", "0"], "--nproc 0 is not a rank count"),
    pytest.param(["sweep", "--backend", "nccl"], "NCCL runs on CUDA tensors only", marks=NEEDS_NO_GPU),
    pytest.param(["sweep", "--device", "cuda"], "no CUDA GPU is visible", marks=NEEDS_NO_GPU),
    (["sweep", "--backend", "gloo", "--dtype", "int32", "--op", "avg"], "gloo cannot average int32"),
    (["sweep", "--device", "cpu", "--backend", "nccl"], "NCCL runs on CUDA tensors only"),
    (["sweep", "--iters", "0"], "--iters 0 must be 1 or more"),
    (["sweep", "--timing", "per-iteration", "--agg-iters", "2"], "--agg-iters shapes batch timing"),
    (["sweep", "--cuda-graph", "2"], "--cuda-graph 2 replays CUDA work captured from NCCL, and this run is on CPU"),
    (["sweep", "-c", "broadcast", "--root", "2"], "--root 2 is not a rank of this run"),
    (["sweep", "--average", "median"], "unknown --average 'median'; choose from rank0, mean, min, max"),
    (["sweep", "--blocking", "4"], "--blocking 4: choose 0"),
    (["sweep", "--dtype", "float8_e4m3"], "gloo has no float8_e4m3"),
    (["sweep", "-c", "reduce_scatter", "--sizes", "4"], "below one float32 element per rank"),
    (["sweep", "--max-time", "5"], "--max-time applies to the adaptive mode"),
    (["sweep", "--timing", "auto,batch"], "--timing auto picks one mode per point, so it does not combine with batch"),
    (["sweep", "--timing", "sometimes"], "unknown --timing 'sometimes'; choose from per-iteration, batch, auto"),
    (["sweep", "--iters", "many"], "--iters 'many' is not a whole number"),
    (["sweep", "--placement", "sideways"], "unknown --placement 'sideways'; choose from out, in, both"),
    (["sweep", "--dtype", "float8"], "unknown --dtype 'float8'"),
    (["sweep", "--no-such-flag"], "No such option"),
    (["frobnicate"], "No such command 'frobnicate'"),
    (["sweep", "--run-id", "r" * 300], "--run-id is 300 characters long; use at most 200"),
    (["sweep", "--run-id", "run\n"], "is not a folder name"),
    (["sweep", "--run-id", ""], "is not a folder name"),
])
def test_bad_input_exits_2_with_one_line(args, fragment, tmp_path, monkeypatch):
    for name in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    result = CliRunner().invoke(main, [*args, "--out", str(tmp_path)] if args[0] == "sweep" else args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert fragment in lines[0]
    assert lines[0].startswith("commbench: error:")
    assert "Traceback" not in result.output
    assert not any(tmp_path.iterdir())  # refused before anything was created or launched


def test_nproc_conflicting_with_the_surrounding_job(monkeypatch, tmp_path):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    result = CliRunner().invoke(main, ["sweep", "--nproc", "3", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "conflicts with WORLD_SIZE=2" in result.output


def test_the_cli_leaves_the_signal_handlers_as_it_found_them():
    """Called as a library (here, in process), the CLI must not leave its handlers behind: a process forked later
    (a multiprocessing pool) would inherit a SIGTERM handler that raises instead of ending it, and hang its pool."""
    import signal

    from tests.refusals import invoke

    watched = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    before = {signum: signal.getsignal(signum) for signum in watched}
    for args in (["sweep", "-c", "allreduce"], ["model", "memory", "--params", "7B", "--ranks", "8"]):
        invoke(args)
    assert {signum: signal.getsignal(signum) for signum in watched} == before
