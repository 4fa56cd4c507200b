"""`commbench replay`: a real 2-rank gloo DDP step and a FSDP one, traced by commbench ddp / fsdp (torch.profiler
under traces/), replayed on 2 gloo ranks. The replayed calls must equal the traced ones in kind, count and bytes;
times are this machine's (benchmarks/replay_ratio.py prints replayed / traced), so only exact properties are
asserted."""

import json
from collections import Counter

import pandas as pd
import pytest

from commbench.profiling.collective_calls import collective_calls
from commbench.profiling.trace_file import load_trace
from tests.in_process import commbench_here
from tests.refusals import assert_refused, invoke

pytestmark = pytest.mark.distributed
TRAINING = {"ddp": 'bucket-cap-mb = "1"',
            "fsdp": 'reshard-after-forward = ["true"]\nforward-prefetch = ["0"]\nbackward-prefetch = ["default"]'}
SUITE = """backend = "gloo"
device = "cpu"
nproc = 2
""" + "".join(f"""
[[bench]]
name = "{bench}"
kind = "{bench}"
steps = 2
warmup-steps = 2
profile-steps = 1
layers = 2
{options}
""" for bench, options in TRAINING.items())


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """The traces of one DDP and one FSDP configuration, one per rank (step 1 is the profiled step), recorded by
    commbench ddp and fsdp as one suite (one launch for both)."""
    folder = tmp_path_factory.mktemp("traced")
    (folder / "train.toml").write_text(SUITE)
    completed = commbench_here("run", "train.toml", "--out", str(folder), "--run-id", "train", "-q", cwd=folder)
    assert completed.returncode == 0, completed.stderr
    return {bench: folder / "train" / bench / "traces" for bench in TRAINING}


def _replay(tmp_path, *args, run_id="replay"):
    completed = commbench_here("replay", *map(str, args), "--backend", "gloo", "--device", "cpu", "--iters", "6",
                               "--warmup", "1", "--out", str(tmp_path / "results"), "--run-id", run_id, cwd=tmp_path)
    return completed, tmp_path / "results" / run_id


def _traced(folder, step) -> Counter:
    calls = collective_calls(load_trace(sorted(folder.glob("rank0-*"))[0]))
    return Counter((call.kind, call.message.bytes) for call in calls if call.step == step)


@pytest.mark.parametrize("bench", list(TRAINING))
def test_a_replayed_step_has_the_traced_calls_and_they_are_checked(tmp_path, traces, bench):
    options = ["--with-compute-gaps"] if bench == "ddp" else []
    completed, run_dir = _replay(tmp_path, traces[bench], *options)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    rows = pd.read_csv(run_dir / "results.csv")
    calls, sequence = rows[rows["kind"] != "sequence"], rows[rows["kind"] == "sequence"].iloc[0]
    replayed = Counter()
    for _, row in calls.iterrows():
        replayed[(row["kind"], int(row["size_bytes"]))] += int(row["calls"])
    step = int(calls["step"].iloc[0])
    assert replayed == _traced(traces[bench], step)  # kind, count and bytes, call for call
    assert set(calls["kind"]) == ({"all_reduce"} if bench == "ddp" else {"all_gather", "reduce_scatter"})
    assert (rows["n_wrong"] == 0).all() and sequence["calls"] == calls["calls"].sum()
    assert (rows["timing_method"] == "host clock").all()  # CPU: gloo's calls return when done
    samples = pd.read_csv(run_dir / "samples.csv")
    for _, row in calls.iterrows():  # every call of the group in every iteration is a sample
        mine = samples[(samples["kind"] == row["kind"]) & (samples["size_bytes"] == row["size_bytes"])]
        assert len(mine) == row["calls"] * 6
    if bench == "ddp":  # the gaps are slept inside the timed sequence, so it cannot be shorter than they are
        # (a trace recorded on a loaded machine can have none: gloo's bucket spans then overlap back to back)
        assert sequence["gaps_us"] >= 0 and sequence["time_us_min"] >= sequence["gaps_us"]
        assert "with the traced gaps" in sequence["note"]
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["kind"] == "replay" and meta["status"] == "complete"
    report = invoke(["report", str(run_dir), "--out", str(tmp_path / "report")])
    assert report.exit_code == 0, report.output
    assert (tmp_path / "report" / "replay_traced_vs_replayed.png").stat().st_size > 0


def test_another_world_size_needs_scale_world_and_the_rows_say_scaled(tmp_path, traces):
    refused = invoke(["replay", str(traces["ddp"]), "--backend", "gloo", "--device", "cpu", "--nproc", "1",
                      "--out", str(tmp_path / "refused")])
    assert_refused(refused, fragment="--scale-world 1")
    completed, run_dir = _replay(tmp_path, traces["ddp"], "--nproc", "1", "--scale-world", "1")
    assert completed.returncode == 0, completed.stdout + completed.stderr
    rows = pd.read_csv(run_dir / "results.csv")
    assert rows["scaled"].all() and (rows["traced_world_size"] == 2).all() and (rows["world_size"] == 1).all()
    assert rows["note"].str.contains("traced at 2 ranks").all()


def test_traces_of_different_steps_or_jobs_are_refused(tmp_path, traces):
    mixed = invoke(["replay", str(next(traces["ddp"].glob("rank0-*"))), str(next(traces["fsdp"].glob("rank1-*"))),
                    "--backend", "gloo", "--device", "cpu", "--out", str(tmp_path / "mixed")])
    assert_refused(mixed, fragment="disagree at call 1")
    step = invoke(["replay", str(traces["ddp"]), "--step", "99", "--backend", "gloo", "--device", "cpu",
                   "--out", str(tmp_path / "step")])
    assert_refused(step, fragment="--step 99")
    two_configs = invoke(["replay", str(traces["ddp"]), str(traces["fsdp"]), "--backend", "gloo", "--device", "cpu",
                          "--out", str(tmp_path / "two")])  # a sweep's folder holds a trace per rank and config
    assert_refused(two_configs, fragment="both hold rank 0")
