"""The launch noise `commbench compare` assumes for a single launch where none was measured for the machine
(gate/machine_noise.py keeps what run sets measured there): measured priors keyed by backend, device type and world
size, and for what no measurement covers one stated prior per device type, each with where it comes from. Light on
purpose: `commbench compare --help` states the priors without loading pandas."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Prior:
    """The launch noise assumed where none was measured for the machine, and where it comes from."""

    noise_pct: float
    source: str


CPU_PRIOR = Prior(80.0, "the prior for CPU ranks: measured on a 2-core VM beside a busy loop, 2026-12-02 "
                        "(docs/measurements.md, \"Launch noise of the default sweep\")")
GPU_PRIOR = Prior(5.0, "the prior for GPU ranks at world sizes no GPU run set measured: a stated default of a few per "
                       "cent, not yet measured on a GPU (docs/gate.md, \"How rows are judged\"); a run set with "
                       "--launches 3 on the machine measures it")
MEASURED: dict[tuple[str, str, int], Prior] = {
    ("gloo", "cpu", 2): CPU_PRIOR,
}
"""Priors measured by a run set of --launches 3 or more (its launch_noise_pct, docs/measurements.md), keyed by
(backend, device type, world size): the default CPU sweep's. A GPU check's run set (benchmarks/gpu_validation.py)
adds its machine's figure here under its key; world sizes it did not run keep the device type's prior."""
PRIORS = {"cpu": CPU_PRIOR, "cuda": GPU_PRIOR}
"""By the rows' device type, for keys MEASURED lacks. A device without its own prior takes the CPU one, the widest:
assuming too little noise fails unchanged code, assuming too much only widens the `detectable` column, which says
so."""


def prior(device_type: str | None, backend: str | None = None, world: int | None = None) -> Prior:
    """The measured prior of (backend, device type, world size), else the device type's."""
    measured = MEASURED.get((str(backend), str(device_type), world)) if world is not None else None
    return measured or PRIORS.get(str(device_type), CPU_PRIOR)
