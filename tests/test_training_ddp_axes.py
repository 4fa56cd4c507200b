"""DDP's axes: torch's own buckets in every default sweep, caps chosen from the model's gradient bytes so no two rows
are one configuration, every value `commbench ddp --help` lists either runs or is refused before launch, and a static
graph under gradient accumulation."""

import json
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from commbench.benches.ddp import KIND as DDP
from commbench.benches.options import TargetOptions, options_of, parse_options
from commbench.errors import CommbenchError
from commbench.machine import Machine
from commbench.runs import load_run
from commbench.training import ddp_buckets, plan
from commbench.training.spec import COMPILE_FIRST_PIECE_MB
from commbench.training.synthetic import shape_for_params
from tests.axis_values import (
    AxisValue,
    Pack,
    Resolved,
    bench_toml,
    by_bench_name,
    launch_failed,
    offered_values,
    packed,
    resolved_for_packing,
)
from tests.refusals import assert_refused, invoke
from tests.training_runs import launch

CPU_ONLY = Machine(gpus=0, nccl_available=False)
TINY = {"params": "1M", "layers": "2", "seq_len": "16", "micro_batch": "1", "steps": "2", "profile_steps": "0"}
CPU_DEFAULT_SHAPE = shape_for_params(5e6, layers=4, seq_len=64)
GPU_DEFAULT_SHAPE = shape_for_params(350e6, layers=24, seq_len=1024)


def _bench(**values):
    return DDP.resolve(parse_options(DDP.options, {"backend": "gloo", "device": "cpu", **values}), CPU_ONLY)


def _layout(config, shape):
    return ddp_buckets.predicted_buckets(shape, config.bucket_cap_mb, config.first_bucket_mb)


@pytest.mark.parametrize("limits", [[1 << 20], [1 << 20, 25 << 20], [3 << 20, 1 << 20], [100 << 20], [1]])
@pytest.mark.no_process
def test_the_bucket_prediction_is_torchs_own_assignment(limits):
    """ddp_buckets.assign against torch's compute_bucket_assignment_by_size on real tensors of mixed sizes."""
    tensors = [torch.empty(n, dtype=torch.float32) for n in (300_000, 7, 260_000, 1_000, 90_000, 250_000, 3, 600_000)]
    indices, _ = dist._compute_bucket_assignment_by_size(tensors, limits)
    expected = tuple(sum(tensors[i].numel() * 4 for i in bucket) for bucket in indices)
    assert ddp_buckets.assign([t.numel() * 4 for t in tensors], limits) == expected


@pytest.mark.no_process
def test_a_bucket_closes_once_it_holds_exactly_its_limit_as_torchs_does():
    """A bucket that reaches its limit exactly closes there (torch: bucket size >= limit), not one tensor later."""
    tensors = [torch.empty(n, dtype=torch.float32) for n in (131_072, 131_072, 5, 262_144, 7)]  # 512 KiB twice
    indices, _ = dist._compute_bucket_assignment_by_size(tensors, [1 << 20])
    assert [list(bucket) for bucket in indices] == [[0, 1], [2, 3], [4]]
    assert ddp_buckets.assign([t.numel() * 4 for t in tensors], [1 << 20]) == (1 << 20, 20 + (1 << 20), 28)


@pytest.mark.no_process
def test_ddps_default_is_built_by_passing_no_bucket_argument():
    assert (ddp_buckets.TORCH_CAP_MB, ddp_buckets.TORCH_FIRST_MB) == (25.0, 1.0)  # torch 2.13's own
    assert ddp_buckets.ddp_bucket_arguments(None, None) == ddp_buckets.ddp_bucket_arguments(25.0, 1.0) == {}
    assert ddp_buckets.ddp_bucket_arguments(25.0, None) == {"bucket_cap_mb": 25.0}  # loses the small first bucket
    assert ddp_buckets.ddp_bucket_arguments(5.0, 0.5) == {"bucket_cap_mb_list": [0.5, 5.0]}
    assert ddp_buckets.ddp_bucket_arguments(None, 4.0) == {"bucket_cap_mb_list": [4.0, 25.0]}


@pytest.mark.parametrize("shape", [CPU_DEFAULT_SHAPE, GPU_DEFAULT_SHAPE], ids=["cpu-5M", "gpu-350M"])
@pytest.mark.no_process
def test_the_default_sweep_has_ddps_default_and_no_two_rows_alike(shape):
    configs, notes = DDP.configs_for_model(parse_options(DDP.options, {}), (1,), 2, ("fp32",), shape)
    assert (configs[0].bucket_cap_mb, configs[0].first_bucket_mb) == (25.0, 1.0)  # torch's own buckets first
    layouts = [_layout(config, shape) for config in configs]
    assert len(configs) >= 4 and not notes
    assert len({len(layout) for layout in layouts}) == len(layouts), layouts  # distinct bucket counts
    gradient_bytes = sum(layouts[0])
    assert layouts[-1] == (gradient_bytes,)  # the whole-model cap: one bucket, no overlap with backward


@pytest.mark.no_process
def test_caps_that_give_this_model_the_same_buckets_run_once_with_a_note():
    # 25, 50 and 100 MiB all hold the 5M model's ~20 MiB of gradients: one bucket, three names
    configs, notes = DDP.configs_for_model(parse_options(DDP.options, {"bucket_cap_mb": "25,50,100,1"}), (1,), 2,
                                           ("fp32",), CPU_DEFAULT_SHAPE)
    assert [config.bucket_cap_mb for config in configs] == [25.0, 1.0]
    assert len(notes) == 1 and "25 MiB, 50 MiB, 100 MiB give the same buckets" in notes[0]
    assert "one bucket" in notes[0] and "run once as 25 MiB" in notes[0]
    # the notes reach the user, printed with the results
    assert _bench(bucket_cap_mb="25,50,100", **TINY).notes


@pytest.mark.no_process
def test_an_explicit_25_mib_cap_is_not_ddps_default():
    configs, _ = DDP.configs_for_model(parse_options(DDP.options, {"bucket_cap_mb": "default,25"}), (1,), 2,
                                       ("fp32",), CPU_DEFAULT_SHAPE)
    assert [(c.bucket_cap_mb, c.first_bucket_mb) for c in configs] == [(25.0, 1.0), (25.0, None)]
    assert configs[0].label() != configs[1].label()


@pytest.mark.parametrize("value, fragment", [("x", "is not a number of MiB or default"), ("0", "must be above 0"),
                                             ("-3", "must be above 0")])
@pytest.mark.no_process
def test_a_bad_bucket_cap_is_refused_in_one_line(value, fragment):
    assert_refused(invoke(["ddp", "--bucket-cap-mb", value]), fragment=fragment)
    with pytest.raises(CommbenchError, match=fragment):
        plan.parse_bucket_cap(value)


def _axis_values() -> list[tuple[str, str]]:
    """(suite key, value) for every value `commbench ddp --help` offers on a DDP or training axis: each choice of an
    option with choices, true and false of each true/false option, and --bucket-cap-mb's named value. Built from the
    options the command line is generated from, so a new value is in the table without editing it. Where to run
    (--backend/--device) is the machine's, not an axis."""
    return offered_values(DDP.options, skip=TargetOptions) + [("bucket-cap-mb", plan.BUCKET_DEFAULT)]


BASE = {**TINY, "bucket_cap_mb": plan.BUCKET_DEFAULT, "isolation": "reset"}
"""The tiny bench every value's own is built on: DDP's default buckets, one launch unless the value is an isolation."""


def _settings(key: str, value: str) -> dict:
    """The option a value's own bench sets over BASE (by field name): the value itself."""
    return {f.name: value for f, described in options_of(DDP.options) if described.key == key}


def _resolved(key: str, value: str):
    """The tiny bench that runs this one value, or the refusal's message."""
    try:
        return _bench(**{**BASE, **_settings(key, value)})
    except CommbenchError as error:
        return str(error)


def _resolution(settings: dict) -> Resolved | str:
    """The tiny bench of these options over BASE as packing compares it, or its refusal's message."""
    try:
        return resolved_for_packing(_bench(**{**BASE, **settings}))
    except CommbenchError as error:
        return str(error)


@pytest.mark.no_process
def test_the_axis_table_covers_every_value_help_lists():
    helped = invoke(["ddp", "--help"]).stdout
    values = _axis_values()
    for key, _value in values:
        assert f"--{key}" in helped
    assert {("comm-hook", hook) for hook in ("none", "bf16", "fp16", "powersgd")} <= set(values)
    assert ("static-graph", "true") in values and ("mixed-precision", "bf16") in values
    assert ("compile", "true") in values and ("compile", "false") in values


@pytest.mark.no_process
def test_compiled_ddp_is_refused_before_launch_where_torch_cannot_build_it(monkeypatch):
    # TorchDynamo's DDPOptimizer stops on a cap below its 1 MiB first piece (AssertionError, torch 2.13)
    assert COMPILE_FIRST_PIECE_MB == ddp_buckets.TORCH_FIRST_MB == dist._DEFAULT_FIRST_BUCKET_BYTES / 2**20
    assert_refused(invoke(["ddp", "--backend", "gloo", "--device", "cpu", "--compile", "true", "--bucket-cap-mb",
                           "default,0.5"]), fragment="--compile true needs bucket caps of 1 MiB or more")
    assert _bench(compile="true", **{**TINY, "bucket_cap_mb": "default,2", "first_bucket_mb": "0.5"}).spec.configs
    # inductor builds CPU kernels with $CXX (else g++)
    monkeypatch.setenv("CXX", "no-such-compiler++")
    with pytest.raises(CommbenchError, match="needs a C.. compiler .* install g.. or use --compile false"):
        _bench(compile="true", **{**TINY, "bucket_cap_mb": "default"})
    assert _bench(compile="false", **{**TINY, "bucket_cap_mb": "default"}).spec.configs


def _runnable_and_refused(default_sweep, refused_out: Path) -> tuple[list[AxisValue], dict[AxisValue, str]]:
    """The values that run, each the first of its bench (a default value, none, false, fp32, ..., is the same bench
    as the others'; the value whose bench is the default sweep's first row, torch's buckets on the default model,
    runs there), and the refused ones with their messages, each refused cleanly before launch by the CLI too."""
    refused, runnable = {}, []
    seen = {((default_sweep.configs[0],), default_sweep.shape, default_sweep.isolation)}
    for key, value in dict.fromkeys(_axis_values()):
        bench = _resolved(key, value)
        if isinstance(bench, str):
            refused[(key, value)] = bench
            assert_refused(invoke(["ddp", "--backend", "gloo", "--device", "cpu", f"--{key}", value,
                                   "--out", str(refused_out)]), left_empty=[refused_out])
            continue
        identity = (bench.spec.configs, bench.spec.shape, bench.spec.isolation)
        if identity not in seen:  # a default value (none, false, fp32, ...) is the same bench as the others'
            seen.add(identity)
            runnable.append((key, value))
    return runnable, refused


def _suite(benches: dict[str, Pack]) -> str:
    """A bench per pack, those of a process per configuration (isolation auto on CPU) last, so that every other
    bench shares the one launch before them; the default sweep and a static graph under accumulation share it too."""
    tables = [bench_toml(name, "ddp", DDP.options, {**BASE, **pack.settings}) for name, pack in benches.items()]
    shared = sum(not pack.alone for pack in benches.values())
    tables[shared:shared] = [
        bench_toml("static_accum", "ddp", DDP.options, {**BASE, "static_graph": "true"}) + "accum-steps = [2]\n",
        bench_toml("default_sweep", "ddp", DDP.options, {**TINY, "isolation": "reset"})]
    return 'description = "every DDP axis value"\nbackend = "gloo"\ndevice = "cpu"\nnproc = 2\n\n' + "\n".join(tables)


@pytest.mark.distributed
def test_every_ddp_axis_value_runs_or_is_refused_before_launch(tmp_path):
    """One launch (a suite, the CLI in this process; a second for the value that asks for a process per
    configuration) runs the runnable values packed into tiny one-configuration benches; each refused value is a clean
    exit 2 before anything launches. The same launch runs the default sweep (its rows' rebuilt buckets: DDP's own
    default first, then no two alike, every row correct) and a static graph under accumulation.

    A pack stands for each value in it: values of different options whose joined bench resolves to one configuration
    that still holds every field each value's own bench set, with no note that those benches lacked
    (tests/axis_values.packed). So each value runs as its own bench would, beside the others' knobs, and is checked on
    the pack's row: a value that breaks its row (a wrong result, or compiled DDP without its exposed-cost figures)
    fails the pack, naming every value in it and its configuration."""
    default_sweep = _bench(**TINY, isolation="reset").spec
    runnable, refused = _runnable_and_refused(default_sweep, tmp_path / "refused")
    # tf32 is NVIDIA's (refused on --device cpu); PowerSGD's collectives mismatch across gloo ranks (needs nccl)
    assert set(refused) == {("mixed-precision", "tf32"), ("comm-hook", "powersgd")}, refused
    assert ("compile", "true") in runnable
    packs = packed(runnable, settings_of=_settings, resolve=_resolution)
    assert {value for pack in packs for value in pack.values} == set(runnable), packs
    benches = by_bench_name(packs)
    suite = tmp_path / "suite.toml"
    suite.write_text(_suite(benches))
    completed = launch(tmp_path / "out", "run", str(suite), "-q", run_id="axes")
    assert completed.returncode == 0, launch_failed(completed.stderr, benches)
    run_dir = tmp_path / "out" / "axes"
    for name, pack in benches.items():
        rows = load_run(run_dir / name).results.to_dict("records")
        assert len(rows) == 1 and rows[0]["n_wrong"] == 0 and rows[0]["config"] == pack.label, f"{pack}: {rows}"
        if ("compile", "true") in pack.values:  # compiled DDP keeps both exposed-cost figures
            assert rows[0]["compile"] and rows[0]["compute_baseline"] == "unsharded local copy", f"{pack}: {rows[0]}"
            assert rows[0]["exposed_comm_ms_nosync"] == rows[0]["exposed_comm_ms_nosync"], f"{pack}: NaN"
    static = load_run(run_dir / "static_accum").results.to_dict("records")
    assert [(row["static_graph"], row["accum_steps"], row["n_wrong"]) for row in static] == [(True, 2, 0)]
    sweep = load_run(run_dir / "default_sweep").results.to_dict("records")
    assert all(row["n_wrong"] == 0 for row in sweep), sweep
    shape = json.loads((run_dir / "default_sweep" / "spec.json").read_text())["shape"]
    _check_default_sweep(sweep, shape)


def _check_default_sweep(rows: list[dict], shape: dict) -> None:
    """DDP's buckets after its rebuild, read from its own logging on the real run."""
    from commbench.training.spec import ModelShape

    shape = ModelShape(**shape)
    rebuilt = [tuple(int(size) for size in str(row["bucket_sizes_bytes"]).split(";")) for row in rows]
    default = rows[0]
    assert (default["bucket_cap_mb"], default["first_bucket_mb"]) == (25, 1)
    # torch's own: a first bucket that closes at 1 MiB, then buckets of up to 25 MiB
    assert rebuilt[0] == ddp_buckets.assign(ddp_buckets.gradient_bytes_in_ready_order(shape), [1 << 20, 25 << 20])
    assert rebuilt[0][0] >= 1 << 20 and len(rebuilt[0]) >= 2
    for row, buckets in zip(rows, rebuilt):
        first = row["first_bucket_mb"]
        predicted = ddp_buckets.predicted_buckets(shape, row["bucket_cap_mb"], None if first != first else first)
        assert buckets == predicted, row["config"]
    assert len(set(rebuilt)) == len(rows) >= 3, rebuilt  # no two rows the same configuration
