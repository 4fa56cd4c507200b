"""The launch noise `commbench compare` assumes for a single launch where none was measured for the machine
(gate/machine_noise.py keeps what run sets measured): one prior per device type, with where it comes from. Light on
purpose: `commbench compare --help` states the priors without loading pandas."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Prior:
    """The launch noise assumed where none was measured for the machine, per device type, and where it comes from."""

    noise_pct: float
    source: str


CPU_PRIOR = Prior(80.0, "the prior for CPU ranks: measured on a 2-core VM beside a busy loop, 2026-12-02 "
                        "(docs/measurements.md, \"Launch noise of the default sweep\")")
GPU_PRIOR = Prior(5.0, "the prior for GPU ranks: a stated default of a few per cent, not yet measured on a GPU "
                       "(docs/gate.md, \"How rows are judged\"); a run set with --launches 3 on the machine "
                       "measures it")
PRIORS = {"cpu": CPU_PRIOR, "cuda": GPU_PRIOR}
"""By the rows' device type. A device without its own prior takes the CPU one, the widest: assuming too little noise
fails unchanged code, assuming too much only widens the `detectable` column, which says so."""


def prior(device_type: str | None) -> Prior:
    return PRIORS.get(str(device_type), CPU_PRIOR)
