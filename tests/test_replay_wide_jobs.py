"""`commbench replay` of a job wider than Kineto's rank lists: a real 2-rank gloo DDP step whose model has buffers
(tests/jobs/ddp_buffers_job.py, traced as commbench traces a training step), its traces rewritten as Kineto writes a
64-rank job (distributedInfo world size and pg_config of 64 ranks; each call's "Process Group Ranks" cut to
"[0, 1, ..., 29, ...]" with "Group size" 64), replayed on 2 gloo ranks with --scale-world 2. Every collective of the
step, DDP's int64 buffer broadcast included, must be replayed and checked."""

import gzip
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
import torch

from commbench.profiling.collective_calls import collective_calls
from commbench.profiling.trace_file import load_trace
from tests import kineto_trace as kt
from tests.conftest import commbench_env
from tests.in_process import commbench_here

WIDE = 64
JOB = Path(__file__).parent / "jobs" / "ddp_buffers_job.py"


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """The two ranks' traces of one DDP step with buffers, as recorded."""
    folder = tmp_path_factory.mktemp("ddp-buffers")
    completed = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                                str(JOB), str(folder)], env=commbench_env(), capture_output=True, text=True,
                               timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return folder


def _as_wide_job(source: Path, target: Path, world: int) -> None:
    """A trace rewritten as Kineto writes a rank of a `world`-rank job: only the job's size and the group fields of
    its collective calls change."""
    with gzip.open(source, "rt") as file:
        document = json.load(file)
    rank = document["distributedInfo"]["rank"]
    document["distributedInfo"] = {**kt.distributed_info(rank, world, "gloo"),
                                   "pg_config": [{**document["distributedInfo"]["pg_config"][0], "pg_size": world,
                                                  "ranks": list(range(world))}]}
    for event in document["traceEvents"]:
        if event.get("cat") == "user_annotation" and str(event.get("name", "")).startswith("gloo:"):
            event["args"] = {**event.get("args", {}), **kt.world_group(world)}
    with gzip.open(target / source.name, "wt") as file:
        json.dump(document, file)


def _traced_step(folder: Path) -> Counter:
    calls = collective_calls(load_trace(sorted(folder.glob("rank0-*"))[0]))
    step = min(call.step for call in calls if call.step is not None)
    return Counter((call.kind, call.message.dtype, call.message.bytes) for call in calls if call.step == step)


def _replay(tmp_path, traces, *args):
    out = tmp_path / "results"
    return commbench_here("replay", str(traces), "--backend", *args, "--iters", "6", "--warmup", "1", "--out",
                          str(out), "--run-id", "wide", cwd=tmp_path), out / "wide"


@pytest.mark.distributed
def test_every_call_of_a_64_rank_step_is_replayed_int64_broadcast_included(tmp_path, traced):
    wide = tmp_path / "wide"
    wide.mkdir()
    for trace in sorted(traced.glob("rank*.json.gz")):
        _as_wide_job(trace, wide, WIDE)
    traced_calls = _traced_step(wide)
    assert any(kind == "broadcast" and dtype == "int64" for kind, dtype, _ in traced_calls), traced_calls
    completed, run_dir = _replay(tmp_path, wide, "gloo", "--device", "cpu", "--nproc", "2", "--scale-world", "2")
    assert completed.returncode == 0, completed.stdout + completed.stderr
    rows = pd.read_csv(run_dir / "results.csv")
    calls, sequence = rows[rows["kind"] != "sequence"], rows[rows["kind"] == "sequence"].iloc[0]
    replayed = Counter()
    for _, row in calls.iterrows():  # an all-reduce or broadcast keeps its size at any world size
        replayed[(row["kind"], row["dtype"], int(row["size_bytes"]))] += int(row["calls"])
    assert replayed == traced_calls
    assert "not replayed" not in sequence["note"]
    assert (rows["n_wrong"] == 0).all() and (rows["traced_world_size"] == WIDE).all() and rows["scaled"].all()
    assert (rows["timing_method"] == "host clock").all()  # CPU: gloo's calls return when done


@pytest.mark.distributed
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: the calls are timed by CUDA events there")
def test_on_a_gpu_each_call_is_timed_by_cuda_events(tmp_path, traced):
    """The step replayed with NCCL on one GPU (world 1, the traced 2 ranks scaled): each call group's row says CUDA
    events, the sequence's the host clock."""
    completed, run_dir = _replay(tmp_path, traced, "nccl", "--device", "cuda", "--nproc", "1", "--scale-world", "1")
    assert completed.returncode == 0, completed.stdout + completed.stderr
    rows = pd.read_csv(run_dir / "results.csv")
    calls, sequence = rows[rows["kind"] != "sequence"], rows[rows["kind"] == "sequence"].iloc[0]
    assert calls["timing_method"].str.startswith("CUDA events").all() and sequence["timing_method"] == "host clock"
    assert (rows["n_wrong"] == 0).all() and (calls["time_us_p50"] >= 0).all()
