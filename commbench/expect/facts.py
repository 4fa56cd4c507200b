"""What the expected-bandwidth model reads about a machine: its GPUs and their links, its NICs, and its CPU's copy and
loopback bandwidth. One value (MachineFacts), written to and read from a facts file (`commbench env --json` writes
one; `commbench expect --facts FILE` reads it), so a log from elsewhere is judged against that machine's facts."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from commbench.errors import CommbenchError

FACTS_VERSION = 1


@dataclass(frozen=True)
class MachineFacts:
    """One node of a machine. Rates are one direction's, as NCCL counts them."""

    name: str
    """What the facts describe: a preset's name, or this machine's host name."""
    gpu: str | None = None
    """The GPU model (NVML's name); None on a machine without GPUs."""
    compute_capability: tuple[int, int] | None = None
    gpus_per_node: int = 0
    nvlink_links: int | None = 0
    """NVLink links per GPU in the node's nominal topology (0: the GPUs talk over PCIe; None: NVML could not say).
    A GPU with fewer links up is a finding, never a lower expectation."""
    nvswitch: bool | None = False
    """The GPUs' NVLinks go to NVSwitches (every pair at the full link count), not to each other; None: unknown."""
    nvls: bool = False
    """NVLink SHARP (multicast in the switches; NCCL's NVLS algorithms): NVSwitch with Hopper or newer."""
    pcie_gen: int | None = None
    pcie_width: int | None = None
    """The GPU's PCIe link: generation and lanes."""
    nic_gbits: tuple[float, ...] = ()
    """Each network adapter NCCL would use across nodes (InfiniBand, RoCE, EFA), its rate in Gb/s."""
    cpu_cores: int | None = None
    memcpy_gbps: float | None = None
    """A large host memory copy, measured here: GB/s (bytes read, once)."""
    loopback_gbps: float | None = None
    """TCP over loopback between processes in a ring (what gloo's ranks on one host use), per stream: GB/s."""
    sources: tuple[str, ...] = field(default=())
    """Where each fact comes from (NVML, /sys, a measurement, a vendor page)."""
    findings: tuple[str, ...] = field(default=())
    """Where the node falls below its nominal topology (a GPU with NVLink links down, a port not ACTIVE), or what
    could not be read: said beside the expectation, which stays the nominal one."""

    def to_json(self) -> dict:
        return {"facts_version": FACTS_VERSION, **asdict(self)}

    @classmethod
    def from_json(cls, data: dict, *, where: str = "facts") -> MachineFacts:
        if not isinstance(data, dict) or "name" not in data:
            raise CommbenchError(f"{where} is not a commbench facts file (no 'name'); write one with "
                                 "`commbench env --json > facts.json`")
        known = {f.name for f in fields(cls)}
        values = {key: value for key, value in data.items() if key in known}
        for key in ("compute_capability",):
            if values.get(key) is not None:
                values[key] = tuple(int(part) for part in values[key])
        for key in ("nic_gbits", "sources", "findings"):
            values[key] = tuple(values.get(key) or ())
        try:
            return cls(**values)
        except TypeError as error:
            raise CommbenchError(f"{where}: {error}; write the file with `commbench env --json`") from None
