"""--mixed-precision of the training sweeps: bf16 by default on GPUs, fp32 on CPU, bf16 applied once per
implementation, TF32 set per configuration."""

import math

import pytest
import torch

from commbench.benches import get_kind
from commbench.benches.options import parse_options
from commbench.machine import Machine
from commbench.training import precision
from commbench.training.batches import BatchPool
from commbench.training.spec import ModelShape, default_precision
from commbench.training.step import step_function
from commbench.training.synthetic import build_model
from commbench.training.table import precision_text

SHAPE = ModelShape(kind="mlp", layers=2, hidden=64, heads=4, seq_len=8)


@pytest.mark.no_process
def test_the_default_precision_is_bf16_on_gpus_and_fp32_on_cpu():
    assert default_precision("cuda") == "bf16"
    assert default_precision("cpu") == "fp32"


def _resolved(bench: str, gpus: int, **values):
    kind = get_kind(bench)
    backend = "nccl" if gpus else "gloo"
    options = parse_options(kind.options, {"backend": backend, "device": "cuda" if gpus else "cpu", "steps": 10,
                                           **values})
    return kind.resolve(options, Machine.for_job(nodes=1, ranks_per_node=2, gpus_per_node=gpus)).spec


@pytest.mark.parametrize("bench", ["ddp", "fsdp", "strategy"])
@pytest.mark.no_process
def test_every_training_sweep_resolves_the_device_default_or_the_choice(bench):
    assert {config.mixed_precision for config in _resolved(bench, gpus=2).configs} == {"bf16"}
    assert {config.mixed_precision for config in _resolved(bench, gpus=0).configs} == {"fp32"}
    chosen = _resolved(bench, gpus=2, precisions="fp32,tf32")
    assert {config.mixed_precision for config in chosen.configs} == {"fp32", "tf32"}
    assert len(chosen.configs) == 2 * len(_resolved(bench, gpus=2).configs)  # an axis like the others


@pytest.mark.no_process
def test_bf16_is_applied_once_per_implementation():
    # DDP and ZeRO-1: autocast, fp32 parameters, so ZeRO-1's broadcast of parameters stays 4 bytes an element
    for impl in ("ddp", "zero1"):
        assert precision.autocast_dtype("bf16", impl) == torch.bfloat16 and not precision.fsdp_bf16("bf16", impl)
        assert precision.gathered_bytes("bf16", impl) == 4
    # FSDP: its own policy casts the parameters (2-byte all-gathers); no autocast on top
    for impl in ("fsdp1", "fsdp2"):
        assert precision.autocast_dtype("bf16", impl) is None and precision.fsdp_bf16("bf16", impl)
        assert precision.gathered_bytes("bf16", impl) == 2
    for name in ("fp32", "tf32", None):
        for impl in ("ddp", "zero1", "fsdp1", "fsdp2"):
            assert precision.autocast_dtype(name, impl) is None and not precision.fsdp_bf16(name, impl)


def _output_dtypes(name: str) -> tuple[list[torch.dtype], set[torch.dtype], float]:
    device = torch.device("cpu")
    model = build_model(SHAPE, seed=0, device=device)
    pool = BatchPool(SHAPE, micro_batch=2, seed=0, rank=0, device=device)
    step = step_function(model, torch.optim.AdamW(model.parameters()), pool, accum_steps=2, precision=name,
                         impl="ddp", device=device)
    dtypes = []
    model.head.register_forward_hook(lambda module, args, out: dtypes.append(out.dtype))
    loss = step()
    return dtypes, {parameter.dtype for parameter in model.parameters()}, loss


@pytest.mark.no_process
def test_a_bf16_ddp_step_computes_in_bf16_on_fp32_parameters():
    dtypes, parameters, loss = _output_dtypes("bf16")
    assert dtypes == [torch.bfloat16, torch.bfloat16] and parameters == {torch.float32} and math.isfinite(loss)
    dtypes, parameters, _ = _output_dtypes("fp32")
    assert dtypes == [torch.float32, torch.float32] and parameters == {torch.float32}


@pytest.mark.no_process
def test_tf32_is_set_for_its_configuration_and_off_for_the_next():
    try:
        precision.apply_matmul_precision("tf32")
        assert torch.get_float32_matmul_precision() == "high"
        for name in ("fp32", "bf16", None):
            precision.apply_matmul_precision("tf32")
            precision.apply_matmul_precision(name)
            assert torch.get_float32_matmul_precision() == "highest"
    finally:
        torch.set_float32_matmul_precision("highest")


@pytest.mark.no_process
def test_the_table_says_the_precision_the_labels_leave_out():
    import pandas as pd

    assert precision_text(pd.DataFrame({"mixed_precision": ["bf16", "bf16"]})).startswith(", precision bf16 (bf16: ")
    assert precision_text(pd.DataFrame({"mixed_precision": [None, None]})) == ""  # rows that do not record it


@pytest.mark.parametrize("args, message", [
    (["ddp", "--mixed-precision", "tf32"], "--mixed-precision tf32 sets how NVIDIA GPUs multiply fp32 matrices; "
                                           "on --device cpu use fp32 or bf16"),
    (["zero", "--mixed-precision", "fp16"], "unknown --mixed-precision 'fp16'; choose from fp32, tf32, bf16"),
])
@pytest.mark.no_process
def test_a_precision_that_cannot_run_is_one_line_and_exit_2(tmp_path, args, message, commbench_cli):
    completed = commbench_cli(*args, "--backend", "gloo", "--device", "cpu", "--out", str(tmp_path))
    assert completed.returncode == 2, completed.stderr
    assert completed.stderr.count("\n") == 1 and "Traceback" not in completed.stderr
    assert message in completed.stderr
    assert not list(tmp_path.iterdir())
