"""A training sweep's hang watchdog (TrainSpec.timeout_s) makes room for compilation: a compiled DDP configuration
compiles its model and its compute baseline before its first row, so the launch may go --timeout plus two compile
allowances without a finished configuration (commbench/training/spec.py, timeout_for)."""

import pytest

from commbench.training.spec import COMPILATIONS_PER_CONFIG, COMPILE_ALLOWANCE_S, TrainConfig, timeout_for


def ddp(*, compiled: bool) -> TrainConfig:
    return TrainConfig(strategy="ddp", impl="ddp", compile=compiled)


@pytest.mark.parametrize("base_s", [1.0, 300.0, 1800.0])
@pytest.mark.no_process
def test_eager_sweeps_keep_the_timeout_they_were_given(base_s):
    assert timeout_for(base_s, (ddp(compiled=False),)) == base_s
    assert timeout_for(base_s, ()) == base_s


@pytest.mark.parametrize("base_s", [1.0, 300.0, 1800.0])
@pytest.mark.no_process
def test_a_compiled_configuration_adds_an_allowance_for_each_of_its_two_compilations(base_s):
    configs = (ddp(compiled=False), ddp(compiled=True))
    assert COMPILATIONS_PER_CONFIG == 2  # the model, and the compute baseline's copy of it
    assert timeout_for(base_s, configs) == base_s + 2 * COMPILE_ALLOWANCE_S
    assert timeout_for(base_s, configs) == timeout_for(base_s, (ddp(compiled=True),) * 5)  # per launch, not summed


@pytest.mark.no_process
def test_the_allowance_gives_a_compilation_at_least_the_default_steps_time():
    assert COMPILE_ALLOWANCE_S >= 300.0


@pytest.mark.no_process
def test_the_ddp_bench_resolves_its_launch_timeout_with_the_allowances(monkeypatch):
    """What the launcher's watchdog and the ranks' process group get: TrainSpec.timeout_s from --timeout."""
    import sys

    from commbench.benches.ddp import KIND as DDP
    from commbench.benches.options import parse_options
    from commbench.machine import Machine

    monkeypatch.setenv("CXX", sys.executable)  # resolving only looks for the CPU compiler; nothing is compiled here

    def resolved(compile_values: str) -> float:
        options = parse_options(DDP.options, {"backend": "gloo", "device": "cpu", "params": "1M", "layers": "2",
                                              "seq_len": "16", "bucket_cap_mb": "default", "timeout": "120",
                                              "compile": compile_values})
        return DDP.resolve(options, Machine(gpus=0, nccl_available=False)).spec.timeout_s

    assert resolved("false") == 120.0
    assert resolved("false,true") == 120.0 + 2 * COMPILE_ALLOWANCE_S
