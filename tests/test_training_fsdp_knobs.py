"""FSDP's knobs beyond resharding and prefetch (reduce dtype, CPU offload, activation checkpointing, blocks per unit,
the sync under accumulation, a shard group): every value `commbench fsdp --help` lists either runs in a tiny sweep,
with the messages its trace shows equal to the prediction, or is refused before launch; values that run as another
configuration are merged with a note."""

import dataclasses

import pytest

from commbench.benches.fsdp import KIND as FSDP
from commbench.benches.options import TargetOptions, options_of, parse_options
from commbench.errors import CommbenchError
from commbench.machine import Machine
from commbench.models import comm_volume
from commbench.runs import load_run
from commbench.training.fsdp2_units import fsdp2_units
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
TINY = {"params": "1M", "layers": "4", "seq_len": "16", "micro_batch": "1", "steps": "2", "profile_steps": "1",
        "isolation": "reset"}
ONE_CONFIG = {"reshards": "true", "forward_prefetch": "0", "backward_prefetch": "default", "wraps": "block"}
"""Single values of the default sweep's axes, so that each bench below is one configuration."""
NEEDS = {("accum-sync", None): {"accum_steps": "2"}, ("accum-sync", "replicas-last"): {"shard_groups": "1"},
         ("impl", "fsdp1"): {"impls": "fsdp1"}}
"""What a value needs to be meaningful: --accum-sync a step of several micro-batches, replicas-last HSDP."""
FSDP1_ONLY = {("backward-prefetch", "pre"), ("backward-prefetch", "post"), ("backward-prefetch", "none"),
              ("limit-all-gathers", "true"), ("limit-all-gathers", "false")}
LISTED = [("impl", "fsdp2"), ("impl", "fsdp1"), ("reshard-after-forward", "true"),
          ("reshard-after-forward", "false"), ("forward-prefetch", "0"), ("forward-prefetch", "1"),
          ("forward-prefetch", "2"), ("backward-prefetch", "default"), ("backward-prefetch", "1"),
          ("backward-prefetch", "2"), *sorted(FSDP1_ONLY), ("wrap", "block"), ("wrap", "model"),
          ("blocks-per-unit", "1"), ("blocks-per-unit", "2"), ("shard-group", "1"), ("shard-group", "2")]
"""Values of the options without a fixed list of choices, as their help names them."""
KNOB_DEFAULTS = {"reduce_dtype": "fp32", "cpu_offload": False, "activation_checkpointing": "none",
                 "blocks_per_unit": 1, "accum_sync": "last"}


def _bench(**values):
    return FSDP.resolve(parse_options(FSDP.options, {"backend": "gloo", "device": "cpu", **values}), CPU_ONLY)


def _axis_values() -> list[tuple[str, str]]:
    """Every value the help lists: LISTED, each choice of an option with choices and true/false of each true/false
    option (built from the options the command line is generated from, so a new value joins the table itself)."""
    return offered_values(FSDP.options, skip=TargetOptions, listed=LISTED)


def _field(key: str) -> str:
    return next(f.name for f, described in options_of(FSDP.options) if described.key == key)


def _settings(key: str, value: str) -> dict:
    """The options a value's own bench sets over TINY and ONE_CONFIG: the value and what it needs."""
    settings = {**NEEDS.get((key, None), {}), **NEEDS.get((key, value), {})}
    if (key, value) in FSDP1_ONLY:
        settings["impls"] = "fsdp1"
    settings[_field(key)] = value
    return settings


def _normalized(config):
    """A configuration with its knobs' explicit defaults written as not given: the same run."""
    return dataclasses.replace(config, **{name: None for name, default in KNOB_DEFAULTS.items()
                                          if getattr(config, name) == default})


def _resolved(key: str, value: str):
    try:
        return _bench(**{**TINY, **ONE_CONFIG, **_settings(key, value)})
    except CommbenchError as error:
        return str(error)


def _resolution(settings: dict) -> Resolved | str:
    """The tiny bench of these options over TINY and ONE_CONFIG as packing compares it, or its refusal's message."""
    try:
        return resolved_for_packing(_bench(**{**TINY, **ONE_CONFIG, **settings}))
    except CommbenchError as error:
        return str(error)


@pytest.mark.no_process
def test_the_axis_table_covers_every_value_help_lists():
    helped = " ".join(invoke(["fsdp", "--help"]).stdout.split())
    for key, _value in _axis_values():
        assert f"--{key}" in helped
    for key in ("reduce-dtype", "cpu-offload", "activation-checkpointing", "blocks-per-unit", "accum-sync",
                "shard-group"):
        assert f"--{key}" in helped
    assert {("accum-sync", sync) for sync in ("last", "every", "last-gathered", "replicas-last")} <= set(_axis_values())


@pytest.mark.no_process
def test_units_of_several_blocks_keep_torchtitans_layout():
    units = fsdp2_units(blocks=5, has_embedding=True, reshard_after_forward=True, forward_prefetch=1,
                        backward_prefetch=1, blocks_per_unit=2)
    assert [unit.name for unit in units] == ["embedding", "blocks0-1", "blocks2-3", "block4", "root"]
    assert [unit.reshard_after_forward for unit in units] == [True, True, True, False, None]  # the last unit kept
    assert units[1].forward_prefetch == ("blocks2-3",) and units[2].backward_prefetch == ("blocks0-1",)


@pytest.mark.no_process
def test_what_accumulation_syncs_send_differs_as_each_promises():
    """Per optimizer step of 4 micro-batches on 2 ranks, zero3 over FSDP2 (root and last block kept gathered)."""
    units = [[(64, 8)], [(8, 8)], [(8, 8)], [(8, 8)], [(8,)]]
    traffic = {sync: comm_volume.training_traffic(strategy="zero3", impl="fsdp2", units=units, world=2,
                                                  accum_steps=4, accum_sync=sync).msg_elements
               for sync in (None, "last", "every", "last-gathered")}
    everything = 64 * 8 + 3 * 64 + 8
    assert traffic[None] == traffic["last"]
    assert traffic["every"] - traffic["last"] == 3 * everything  # three more reduce-scatters of every unit
    # each later micro-batch skips forward's gather of every unit (backward still gathers what forward resharded)
    assert traffic["last"] - traffic["last-gathered"] == 3 * everything
    hsdp = {sync: comm_volume.training_traffic(strategy="hsdp", impl="fsdp2", units=units, world=4, shard_group=2,
                                               accum_steps=4, accum_sync=sync).msg_elements
            for sync in ("last", "every", "replicas-last")}
    assert hsdp["every"] > hsdp["replicas-last"] > hsdp["last"]


TOY_BASE = {"impl": "a", "prefetch": "1", "dtype": "fp32", "wrap": "block", "blocks": "1", "isolation": "reset"}
"""A made-up kind's options and their base values, to pack by hand (_toy_resolution says how it runs them)."""


def _toy_settings(key: str, value: str) -> dict:
    """bf16 needs impl a and prefetch 2 impl b, as NEEDS and FSDP1_ONLY set what a value needs."""
    needs = {("dtype", "bf16"): {"impl": "a"}, ("prefetch", "2"): {"impl": "b"}}.get((key, value), {})
    return {**needs, key: value}


def _toy_resolution(settings: dict) -> Resolved | str:
    """Refuses wrap model under impl b and bf16 units of 2 blocks; runs bf16 under wrap model as two configurations
    (bf16 and fp32), every unit of wrap model as one block without a note, and notes impl b's units of 2 blocks;
    isolation process launches alone."""
    run = {**TOY_BASE, **settings}
    if (run["impl"], run["wrap"]) == ("b", "model") or (run["dtype"], run["blocks"]) == ("bf16", "2"):
        return "refused"
    dtypes = ("bf16", "fp32") if (run["dtype"], run["wrap"]) == ("bf16", "model") else (run["dtype"],)
    run["blocks"] = "1" if run["wrap"] == "model" else run["blocks"]
    notes = {"impl b gathers 2 blocks in one message"} if (run["impl"], run["blocks"]) == ("b", "2") else set()
    configs = tuple({**run, "dtype": dtype} for dtype in dtypes)
    return Resolved(configs, tuple(" ".join(f"{name}={held}" for name, held in config.items()) for config in configs),
                    frozenset(notes), run["isolation"] == "process")


@pytest.mark.no_process
def test_packing_keeps_each_value_and_never_joins_what_would_change_it():
    values = [("dtype", "bf16"), ("prefetch", "2"), ("impl", "b"), ("wrap", "model"), ("blocks", "2"),
              ("isolation", "process")]
    packs = packed(values, settings_of=_toy_settings, resolve=_toy_resolution)
    assert [pack.values for pack in packs] == [
        # prefetch 2 would run bf16 under impl b: bf16's own bench set impl a (the base's, so no field shows it)
        (("dtype", "bf16"),),
        (("prefetch", "2"), ("impl", "b")),
        # two configurations beside bf16, refused beside impl b
        (("wrap", "model"),),
        # refused beside bf16, a note beside impl b, run as 1 block beside wrap model
        (("blocks", "2"),),
        # a process per configuration joins only its like, and launches last
        (("isolation", "process"),)]
    assert [pack.alone for pack in packs] == [False, False, False, False, True]
    assert sorted(value for pack in packs for value in pack.values) == sorted(values)  # each value exactly once
    for pack in packs:
        assert all(f"--{key} {value}" in str(pack) for key, value in pack.values) and pack.label in str(pack)
    assert packs[1].settings == {"impl": "b", "prefetch": "2"}
    assert packs[1].label == _toy_resolution(packs[1].settings).labels[0]


@pytest.mark.parametrize("values, fragment", [
    ({"accum_syncs": "every"}, "--accum-sync applies with --accum-steps 2 or more"),
    ({"accum_syncs": "last-gathered", "accum_steps": "2", "impls": "fsdp1,fsdp2"}, "is FSDP2's"),
    ({"blocks_per_unit": "9"}, "runs as 4"),
    ({"shard_groups": "2"}, "is every rank"),
    ({"blocks_per_unit": "2", "wraps": "model"}, "applies to --wrap block"),
])
@pytest.mark.no_process
def test_values_that_run_as_another_configuration_are_merged_with_a_note(values, fragment):
    bench = _bench(**{**TINY, **ONE_CONFIG, **values})
    assert any(fragment in note for note in bench.notes), bench.notes
    labels = [config.label() for config in bench.spec.configs]
    assert len(labels) == len(set(labels)) >= 1


@pytest.mark.parametrize("args, fragment", [
    (["--cpu-offload", "true"], "--cpu-offload true moves FSDP's shards"),
    (["--shard-group", "3"], "--shard-group 3 must divide the 2 ranks"),
    (["--reduce-dtype", "fp16"], "fp16"),
    (["--accum-sync", "replicas-last", "--accum-steps", "2"], "replicas-last"),
])
@pytest.mark.no_process
def test_what_cannot_run_is_refused_before_launch(tmp_path, args, fragment):
    result = invoke(["fsdp", "--backend", "gloo", "--device", "cpu", *args, "--out", str(tmp_path)])
    assert_refused(result, left_empty=[tmp_path])
    assert fragment in result.stderr


def _runnable_and_refused() -> tuple[list[AxisValue], dict[AxisValue, str]]:
    """The values that run, each the first of its bench (a default value, none, false, fp32, ..., is the same bench
    as the others'), and the refused ones with their messages."""
    refused, runnable, seen = {}, [], set()
    for key, value in _axis_values():
        bench = _resolved(key, value)
        if isinstance(bench, str):
            refused[(key, value)] = bench
            continue
        assert len(bench.spec.configs) == 1, (key, value, [c.label() for c in bench.spec.configs])
        identity = (tuple(_normalized(config) for config in bench.spec.configs), bench.spec.shape,
                    bench.spec.isolation)
        if identity not in seen:  # a default value (none, false, fp32, ...) is the same bench as the others'
            seen.add(identity)
            runnable.append((key, value))
    return runnable, refused


def _what_went_wrong(row: dict, pack: Pack) -> list[str]:
    """The checks the pack's one row fails, each with the pack (its values and label) and the messages counted."""
    checks = {"config": row["config"] == pack.label, "n_wrong": row["n_wrong"] == 0,
              "state": row["model_state_exact_ranks"] == 2,
              "messages": row["comm_msg_elems"] == row["comm_msg_elems_predicted"],
              "baseline": row["exposed_comm_ms_baseline"] == row["exposed_comm_ms_baseline"]}  # not NaN
    return [f"{pack}: {check} fails (row {row['config']}: {row['comm_msg_elems']} message elements, "
            f"{row['comm_msg_elems_predicted']} predicted)" for check, held in checks.items() if not held]


@pytest.mark.distributed
def test_every_fsdp_axis_value_runs_or_is_refused_before_launch(tmp_path):
    """One launch (a suite, the CLI in this process; a second for the value that asks for a process per
    configuration) runs the runnable values packed into tiny one-configuration benches, with one profiled step: each
    row is correct, holds the predicted model state on both ranks, has its exposed cost against the compute-only
    baseline, and its trace's messages equal the prediction for its knobs.

    A pack stands for each value in it: values of different options (and what each needs) whose joined bench
    resolves to one configuration that still holds every field each value's own bench set, with no note that those
    benches lacked (tests/axis_values.packed). So each value runs as its own bench would, beside the others' knobs,
    and is checked on the pack's row: a value whose messages differ from the prediction moves the pack's count off
    its prediction (short of another value's error cancelling it to the element), and the pack fails, naming every
    value in it and its configuration."""
    runnable, refused = _runnable_and_refused()
    # tf32 is NVIDIA's and CPU offload moves GPU memory (both refused on --device cpu)
    assert set(refused) == {("mixed-precision", "tf32"), ("cpu-offload", "true")}, refused
    assert_refused(invoke(["fsdp", "--backend", "gloo", "--device", "cpu", "--cpu-offload", "true",
                           "--out", str(tmp_path / "refused")]), left_empty=[tmp_path / "refused"])
    packs = packed(runnable, settings_of=_settings, resolve=_resolution)
    assert {value for pack in packs for value in pack.values} == set(runnable), packs
    # the packs of a process per configuration (isolation auto on CPU) come last and launch alone, so that every
    # other pack shares the one launch before them
    benches = by_bench_name(packs)
    suite = tmp_path / "suite.toml"
    suite.write_text('description = "every FSDP axis value"\nbackend = "gloo"\ndevice = "cpu"\nnproc = 2\n\n'
                     + "\n".join(bench_toml(name, "fsdp", FSDP.options, {**TINY, **ONE_CONFIG, **pack.settings})
                                 for name, pack in benches.items()))
    completed = launch(tmp_path / "out", "run", str(suite), "-q", run_id="axes")
    assert completed.returncode == 0, launch_failed(completed.stderr, benches)
    wrong = []
    for name, pack in benches.items():
        rows = load_run(tmp_path / "out" / "axes" / name).results.to_dict("records")
        assert len(rows) == 1, f"{pack}: {rows}"
        wrong += _what_went_wrong(rows[0], pack)
    assert not wrong, "\n".join(wrong)
