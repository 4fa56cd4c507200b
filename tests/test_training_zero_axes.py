"""Every value `commbench zero --help` lists for zero's own options either runs in a tiny sweep or is refused before
launch. The sweeps that run them are other tests' real launches (each costs a launch of its own; running them again
here would double the CI time): this table names, per value, the test whose launch runs it, and checks that the
value is still in that test's command line, so a new value or a changed test shows here. (The options every
training sweep shares, precision, model, isolation..., are run value by value by the ddp and fsdp axis tests.)"""

import inspect

import pytest

from commbench.benches.options import options_of, parse_options
from commbench.benches.strategy import KIND as ZERO
from commbench.benches.training import TrainingOptions
from commbench.errors import CommbenchError
from commbench.machine import Machine
from tests import test_training_exposed_sweep, test_training_zero_master
from tests.axis_values import offered_values
from tests.refusals import invoke

MASTER = test_training_zero_master.test_mixed_precision_zero_rows_equal_the_papers_formulas_to_the_byte
TWO_RANKS = test_training_exposed_sweep.two_ranks
FOUR_RANKS = test_training_exposed_sweep.four_ranks
DEFAULTS = (TWO_RANKS, 'name = "strategies"\\nkind = "zero"\\nparams')  # a zero bench that sets nothing else
RUN_BY = {
    ("strategy", "ddp"): (MASTER, "ddp,zero1,zero2,zero3"), ("strategy", "zero1"): (MASTER, "ddp,zero1,zero2,zero3"),
    ("strategy", "zero2"): (MASTER, "ddp,zero1,zero2,zero3"), ("strategy", "zero3"): (MASTER, "ddp,zero1,zero2,zero3"),
    ("strategy", "hsdp"): (FOUR_RANKS, 'strategy = ["zero3", "hsdp"]'), ("shard-group", "2"): (FOUR_RANKS,
                                                                                             "shard-group = 2"),
    ("impl", "fsdp1"): (TWO_RANKS, 'impl = "fsdp1"'), ("impl", "fsdp2"): DEFAULTS,
    ("master-weights", "true"): (MASTER, '"--master-weights",'), ("master-weights", "false"): DEFAULTS,
    ("bucket-cap-mb", "0.1"): (MASTER, '"--bucket-cap-mb"'), ("overlap-with-ddp", "false"): DEFAULTS,
}
"""(key, value) → the distributed test or module fixture whose launch runs it, and the text of its command line or
suite that asks for it (a default value: a bench that sets none)."""
REFUSED = {("overlap-with-ddp", "true"): "--overlap-with-ddp true needs --backend nccl"}
"""Values this machine (gloo on CPU) cannot run, and the refusal that names why."""
LISTED = [("strategy", name) for name in ("ddp", "zero1", "zero2", "zero3", "hsdp")] + [
    ("impl", "fsdp2"), ("impl", "fsdp1"), ("shard-group", "2"), ("bucket-cap-mb", "0.1")]
"""Values of zero's options without a fixed list of choices, as their help names them."""


def _zero_values() -> list[tuple[str, str]]:
    return offered_values(ZERO.options, skip=TrainingOptions, listed=LISTED)


@pytest.mark.no_process
def test_every_zero_value_help_lists_is_run_by_a_launch_or_refused():
    helped = " ".join(invoke(["zero", "--help"]).stdout.split())
    values = _zero_values()
    assert set(values) == set(RUN_BY) | set(REFUSED), set(values) ^ (set(RUN_BY) | set(REFUSED))
    for key, _value in values:
        assert f"--{key}" in helped
    for (key, value), (test, asked) in RUN_BY.items():
        assert asked in inspect.getsource(test), (key, value, test.__name__)
        assert value in helped or key in ("shard-group", "bucket-cap-mb", "master-weights", "overlap-with-ddp")


@pytest.mark.parametrize("key, value", sorted(REFUSED))
@pytest.mark.no_process
def test_values_this_machine_cannot_run_are_refused_before_launch(key, value):
    field = next(f.name for f, described in options_of(ZERO.options) if described.key == key)
    options = parse_options(ZERO.options, {"backend": "gloo", "device": "cpu", "strategies": "zero1", field: value})
    with pytest.raises(CommbenchError, match=REFUSED[(key, value)]):
        ZERO.resolve(options, Machine(gpus=0, nccl_available=False))
