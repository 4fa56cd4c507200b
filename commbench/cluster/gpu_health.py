"""NVML health facts of a rank's GPU (`commbench hunt` on GPUs), and their comparison across the allocation.

Read per GPU: SM clock against its maximum, the clock-throttle reasons, ECC errors (uncorrected, volatile), retired
pages pending and row remapping (pre-Ampere and Ampere+ memory repair), the PCIe link (generation and width, current
and maximum), NVLink links up. A fact NVML does not support on a GPU is absent, never 0.

What names a node (each finding names its GPU and the peers' value): uncorrected ECC errors, a retired page or a row
remap pending or failed, a hardware or thermal slowdown throttling the clock, fewer NVLink links up or a narrower
PCIe link than most GPUs of the same model. A lower PCIe generation alone is not one: links drop to a lower
generation when idle to save power.
"""

from collections import Counter
from typing import Any

from commbench.nvml import nvlinks, supported

GpuFacts = dict[str, Any]
"""One GPU's facts by name: what NVML returned (pynvml is untyped: ints for counts, clocks, widths and reason bits,
strings for the name and uuid), or {"error": why none were read}."""
FactsByNode = dict[str, list[GpuFacts]]
"""Node → the facts of each of its GPUs."""
Finding = dict[str, object]
"""{"test": "nvml", "gpu", "uuid", "fact", "value", "peers"}: a fact that names a node."""

HW_SLOWDOWN_REASONS = {0x8: "hardware slowdown", 0x20: "software thermal slowdown", 0x40: "hardware thermal slowdown",
                       0x80: "hardware power brake"}
"""NVML clocks-event (throttle) reason bits that mean a sick GPU, not an idle or power-capped one."""


def read_facts(index: int, uuid: str | None = None) -> GpuFacts:
    """This GPU's facts; {"error": ...} when NVML cannot be used here."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as error:  # no driver, no library: say so in the run rather than fail the hunt
        return {"error": f"NVML not available ({type(error).__name__})"}
    try:
        handle = (pynvml.nvmlDeviceGetHandleByUUID(uuid) if uuid else pynvml.nvmlDeviceGetHandleByIndex(index))
        facts: GpuFacts = {"index": index, "uuid": uuid, "name": supported(pynvml.nvmlDeviceGetName, handle)}
        facts["sm_clock_mhz"] = supported(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_SM)
        facts["sm_clock_max_mhz"] = supported(pynvml.nvmlDeviceGetMaxClockInfo, handle, pynvml.NVML_CLOCK_SM)
        reasons = supported(getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
                        or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons, handle)
        facts["throttle_reasons"] = reasons
        facts["ecc_uncorrected"] = supported(pynvml.nvmlDeviceGetTotalEccErrors, handle,
                                         pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC)
        facts["retired_pages_pending"] = supported(pynvml.nvmlDeviceGetRetiredPagesPendingStatus, handle)
        remapped = supported(pynvml.nvmlDeviceGetRemappedRows, handle)
        if remapped is not None:
            facts["rows_remapped_uncorrectable"], facts["row_remap_pending"], facts["row_remap_failed"] = (
                int(remapped[1]), int(remapped[2]), int(remapped[3]))
        for key, function in (("pcie_gen", "nvmlDeviceGetCurrPcieLinkGeneration"),
                              ("pcie_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration"),
                              ("pcie_width", "nvmlDeviceGetCurrPcieLinkWidth"),
                              ("pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth")):
            facts[key] = supported(getattr(pynvml, function), handle)
        facts["nvlink_up"] = nvlinks(pynvml, handle)[1]
        return {key: (value.decode() if isinstance(value, bytes) else value) for key, value in facts.items()
                if value is not None}
    except Exception as error:
        return {"error": f"NVML failed ({type(error).__name__}: {error})"}
    finally:
        pynvml.nvmlShutdown()


def findings(facts_by_node: FactsByNode) -> dict[str, list[Finding]]:
    """Node → its findings, each {"test": "nvml", "gpu", "fact", "value", "peers"}."""
    gpus = [(node, facts) for node, found in facts_by_node.items() for facts in found if "error" not in facts]
    by_model: dict[str, list[GpuFacts]] = {}
    for _, facts in gpus:
        by_model.setdefault(facts.get("name", "?"), []).append(facts)
    result: dict[str, list[Finding]] = {}

    def flag(node: str, facts: GpuFacts, fact: str, value: object, peers: object) -> None:
        result.setdefault(node, []).append({"test": "nvml", "gpu": facts.get("index"), "uuid": facts.get("uuid"),
                                            "fact": fact, "value": value, "peers": peers})

    for node, facts in gpus:
        for fact in ("ecc_uncorrected", "retired_pages_pending", "row_remap_pending", "row_remap_failed"):
            if facts.get(fact):
                flag(node, facts, fact, facts[fact], 0)
        reasons = facts.get("throttle_reasons") or 0
        slowing = [text for bit, text in HW_SLOWDOWN_REASONS.items() if reasons & bit]
        if slowing:
            flag(node, facts, "throttle_reasons", f"{', '.join(slowing)} (SM {facts.get('sm_clock_mhz')} of "
                                                  f"{facts.get('sm_clock_max_mhz')} MHz)", "none")
        peers = by_model[facts.get("name", "?")]
        for fact in ("nvlink_up", "pcie_width"):
            usual = _usual(peers, fact)
            if usual is not None and facts.get(fact) is not None and facts[fact] < usual:
                flag(node, facts, fact, facts[fact], usual)
    return result


def _usual(peers: list[GpuFacts], fact: str) -> Any:
    """The most common value among GPUs of one model (None with fewer than 3 to compare)."""
    values = [facts[fact] for facts in peers if facts.get(fact) is not None]
    if len(values) < 3:
        return None
    value, count = Counter(values).most_common(1)[0]
    return value if count * 2 > len(values) else None
