"""Bounds that depend on the machine or on other options: ranks against cores (and --oversubscribe), the number of
message sizes (counted before any list exists), options that the chosen strategies would ignore, and counts in
messages that count what they name."""

import time
import tracemalloc

import pandas as pd
import pytest

from commbench.benches import KINDS
from commbench.benches.options import parse_options
from commbench.errors import CommbenchError
from commbench.machine import MAX_RANKS_PER_CORE, Machine, resolve_target
from commbench.suite.load import load_suite
from commbench.units import parse_size_spec
from tests.refusals import assert_refused, invoke

pytestmark = pytest.mark.no_process

TWO_CORES = Machine(gpus=0, nccl_available=False, cpus=2)


def test_more_ranks_than_cores_need_oversubscribe_and_the_message_says_the_limit():
    with pytest.raises(CommbenchError, match=r"--nproc 3 exceeds this machine's 2 CPU core\(s\).*--oversubscribe"):
        resolve_target(TWO_CORES, nproc=3)
    assert resolve_target(TWO_CORES, nproc=3, oversubscribe=True).nproc == 3
    assert resolve_target(TWO_CORES, nproc=2).nproc == 2


def test_even_oversubscribed_there_is_a_ceiling_per_core():
    ceiling = MAX_RANKS_PER_CORE * 2
    assert resolve_target(TWO_CORES, nproc=ceiling, oversubscribe=True).nproc == ceiling
    with pytest.raises(CommbenchError, match=f"--nproc 10000 is more ranks than this machine can run: at most "
                                             f"{ceiling} on its 2 CPU core"):
        resolve_target(TWO_CORES, nproc=10000, oversubscribe=True)


def test_the_default_rank_count_runs_on_one_core_and_a_job_decides_its_own_world():
    one_core = Machine(gpus=0, nccl_available=False, cpus=1)
    assert resolve_target(one_core).nproc == 2  # not chosen by the user: never refused
    in_job = Machine(gpus=0, nccl_available=False, cpus=1, rank=0, world_size=64, local_world_size=64)
    assert resolve_target(in_job).nproc == 64


def test_nccl_ranks_are_bounded_by_the_gpus_with_the_limit_in_the_message():
    gpu_node = Machine(gpus=2, nccl_available=True, cpus=64)
    with pytest.raises(CommbenchError, match="exceed its 2 visible GPU.*use --nproc 2 or fewer"):
        resolve_target(gpu_node, nproc=3, oversubscribe=True)


def test_oversubscribe_is_a_suite_key_and_a_run_override(tmp_path):
    suite = tmp_path / "wide.toml"
    suite.write_text('nproc = 3\n[[bench]]\nkind = "sweep"\nsizes = "1K"\n')
    with pytest.raises(CommbenchError, match="exceeds this machine's 2 CPU core"):
        load_suite(suite, TWO_CORES)
    assert load_suite(suite, TWO_CORES, overrides={"oversubscribe": True}).benches[0].bench.spec.nproc == 3
    suite.write_text('nproc = 3\noversubscribe = true\n[[bench]]\nkind = "sweep"\nsizes = "1K"\n')
    assert load_suite(suite, TWO_CORES).benches[0].bench.spec.nproc == 3


def test_ten_thousand_ranks_are_refused_on_the_command_line_with_the_limit(tmp_path):
    out = tmp_path / "results"
    line = assert_refused(invoke(["sweep", "--nproc", "10000", "--oversubscribe", "--out", str(out)]),
                          left_empty=(out,))
    assert "at most" in line and "per core" in line


def test_a_huge_size_range_is_refused_before_a_list_is_built():
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(CommbenchError, match="names 67108864 sizes, more than the 10000"):
            parse_size_spec("1:64M:+1")
        with pytest.raises(CommbenchError, match="more than the 10000"):
            parse_size_spec("1:1T:x1.0000001")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000 and time.perf_counter() - started < 1.0  # a 64 Mi list alone is ~2.5 GB


def test_the_last_size_of_a_geometric_range_is_kept_at_the_limit():
    assert len(parse_size_spec("1:1:x2")) == 1
    assert parse_size_spec("1K:16M:x2")[-1] == 16 * 2**20  # 15 sizes: the count's rounding keeps the end


def _strategy_bench(**values):
    kind = KINDS["strategy"]
    return kind.resolve(parse_options(kind.options, {"backend": "gloo", "device": "cpu", **values}),
                        Machine(gpus=0, nccl_available=False))


def test_shard_group_without_hsdp_is_refused_not_ignored():
    with pytest.raises(CommbenchError, match="--shard-group 3 applies to hsdp only, and this sweep runs ddp"):
        _strategy_bench(shard_group="3", strategies=("ddp", "zero1"))
    with pytest.raises(CommbenchError, match="--bucket-cap-mb 5 applies to ddp, zero1 and zero2 with"):
        _strategy_bench(bucket_cap_mb="5", strategies=("zero2",))
    assert _strategy_bench(nproc="4", shard_group="2", strategies=("hsdp",)).spec.configs[0].shard_group == 2


def test_the_training_verdict_counts_configurations_not_ranks_times_steps():
    """#wrong of a row counts that configuration's failed ranks; the verdict counts configurations: a 2-rank run with
    6 failing configurations once said "12 rank(s) failed the check"."""
    kind = KINDS["ddp"]
    results = pd.DataFrame({"n_wrong": [2, 2, 2, 2, 2, 2, 0]})
    assert kind.n_wrong(results) == 6
    assert kind.wrong_message.format(n=6).startswith("6 configuration(s) failed the check on some rank")


def test_lr_inf_is_refused_when_the_options_are_read(tmp_path):
    for value in ("inf", "nan", "-1e-4", "0"):
        line = assert_refused(invoke(["ddp", "--lr", value, "--out", str(tmp_path / "r")]),
                              left_empty=(tmp_path / "r",))
        assert "--lr" in line and "above 0" in line


def test_selftest_passes_oversubscribe_on_to_every_step():
    from commbench.selftest.plan import plan_selftest

    with pytest.raises(CommbenchError, match="--oversubscribe"):
        plan_selftest(TWO_CORES, backend="auto", device="auto", nproc=3, only=(), timeout_s=60)
    plan = plan_selftest(TWO_CORES, backend="auto", device="auto", nproc=3, only=(), timeout_s=60,
                         oversubscribe=True)
    assert plan.commands and all("--oversubscribe" in command.args for command in plan.commands.values())
    plain = plan_selftest(TWO_CORES, backend="auto", device="auto", nproc=2, only=(), timeout_s=60)
    assert all("--oversubscribe" not in command.args for command in plain.commands.values())


def test_selftest_only_that_names_no_step_is_refused(tmp_path):
    out = tmp_path / "results"
    line = assert_refused(invoke(["selftest", "--only", "", "--out", str(out)]), left_empty=(out,))
    assert "--only '' names no step" in line
