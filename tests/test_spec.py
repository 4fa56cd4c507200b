import pytest

from commbench.benches.collective import CollectiveOptions
from commbench.benches.options import parse_options
from commbench.errors import CommbenchError
from commbench.sweep.spec import SweepSpec, placement_notes, plan, validate

pytestmark = pytest.mark.no_process


def make_spec(**overrides) -> SweepSpec:
    fields = dict(collectives=("all_reduce",), sizes=(1024, 4096), dtypes=("float32",), ops=("sum",),
                  placement="out", backend="gloo", device="cpu", nproc=2, warmup=1, iters=6)
    fields.update(overrides)
    return SweepSpec(**fields)


def test_spec_round_trips_through_json():
    spec = make_spec(target_ci_pct=2.0, max_time_s=5.0)
    assert SweepSpec.from_json(spec.to_json()) == spec


def test_plan_order_and_placements():
    spec = make_spec(collectives=("reduce_scatter", "all_gather"), placement="both", ops=("sum", "max"))
    points = plan(spec, 2)
    labels = [(p.collective, p.op, p.layout.size_bytes, p.inplace) for p in points]
    assert labels[:4] == [("reduce_scatter", "sum", 1024, False), ("reduce_scatter", "sum", 1024, True),
                          ("reduce_scatter", "sum", 4096, False), ("reduce_scatter", "sum", 4096, True)]
    assert {p.op for p in points if p.collective == "all_gather"} == {"none"}  # gather does not reduce
    assert [p.index for p in points] == list(range(len(points)))


def test_in_place_only_collectives_fall_back_and_say_so():
    spec = make_spec(collectives=("all_reduce", "all_to_all"), placement="out")
    assert {p.inplace for p in plan(spec, 2) if p.collective == "all_reduce"} == {True}
    assert placement_notes(spec) == [
        "all_reduce: torch.distributed offers it in-place only, so it is measured in-place"]


@pytest.mark.parametrize("overrides, message", [
    (dict(collectives=("all_reduce", "allreduce")), "unknown collective 'allreduce'"),
    (dict(timings=("per-iteration",), iteration_times=True), "--iteration-times shapes batch timing"),
    (dict(timings=("auto",), agg_iters=4), "--agg-iters change what a batch issues"),
    (dict(collectives=("reduce",), root=2), "--root 2 is not a rank of this run"),
    (dict(blocking=4), "--blocking 4: choose 0"),
    (dict(batch_calls=0), "--batch-calls 0 must be 1 or more calls per batch"),
    (dict(target_ci_pct=2.0), "--max-time"),
    (dict(max_time_s=2.0), "--target-ci"),
    (dict(target_ci_pct=2.0, max_time_s=500.0, timeout_s=300.0), "below --timeout"),
    (dict(dtypes=("int32",), ops=("avg",)), "gloo cannot average int32"),
    (dict(collectives=("all_gather",), device="cuda"), "gloo cannot run all_gather on CUDA"),
    (dict(collectives=("reduce_scatter",), sizes=(4,)), "below one float32 element per rank"),
])
def test_invalid_specs_are_refused_before_launch(overrides, message):
    with pytest.raises(CommbenchError, match=message.replace("(", r"\(")):
        validate(make_spec(**overrides))


@pytest.mark.parametrize("values, message", [
    (dict(dtypes=("float8",)), "unknown --dtype 'float8'"),
    (dict(ops=("mulsum",)), "unknown --op 'mulsum'"),
    (dict(iters="0"), "--iters 0 must be 1 or more"),
    (dict(average="median"), "unknown --average 'median'"),
    (dict(agg_iters="0"), "--agg-iters 0 must be 1 or more"),
    (dict(warmup="-1"), "--warmup -1 must be 0 or more"),
    (dict(timeout="0"), "--timeout 0 must be above 0 seconds"),
])
def test_each_value_on_its_own_is_refused_by_its_option_declaration(values, message):
    """A choice or bound of one option is declared once, on CollectiveOptions, and checked while the options are
    read (the command line and suites alike); validate() checks what relates options to each other."""
    with pytest.raises(CommbenchError, match=message):
        parse_options(CollectiveOptions, values)
