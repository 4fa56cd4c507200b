"""GPU facts from NVML (package nvidia-ml-py); on a machine without an NVIDIA driver it says so instead of failing.

pynvml has no type information: its module is passed around as a ModuleType (whose attributes mypy reads as Any) and
its device handles as opaque objects."""

from collections.abc import Callable
from types import ModuleType
from typing import NotRequired, TypedDict, TypeVar

T = TypeVar("T")


class GpuFacts(TypedDict):
    """One GPU as NVML reads it (meta.json's nvml.gpus, `commbench env`)."""

    index: int
    name: str
    memory_total_bytes: int
    nvlink_links: int | None
    nvlink_active_links: int | None
    nvswitch: bool | None
    compute_capability: list[int] | None
    pcie_gen: int | None
    pcie_width: int | None


class GpuInventory(TypedDict):
    """This machine's GPUs from NVML, or why NVML could not say (available False, and the reason)."""

    available: bool
    reason: NotRequired[str]
    driver_version: NotRequired[str]
    gpus: NotRequired[list[GpuFacts]]


def gpu_inventory() -> GpuInventory:
    """Driver version and, per GPU, name, memory and active NVLink links; {"available": False, ...} without NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as error:  # NVMLError_LibraryNotFound, ImportError, driver mismatch: all mean "not here"
        return {"available": False, "reason": f"NVML not available ({type(error).__name__})"}
    try:
        gpus: list[GpuFacts] = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            links, active_links = nvlinks(pynvml, handle)
            gpus.append({
                "index": index,
                "name": _text(pynvml.nvmlDeviceGetName(handle)),
                "memory_total_bytes": int(memory.total),
                "nvlink_links": links,
                "nvlink_active_links": active_links,
                "nvswitch": _links_to_switch(pynvml, handle),
                "compute_capability": _capability(pynvml, handle),
                "pcie_gen": _optional(pynvml, "nvmlDeviceGetMaxPcieLinkGeneration", handle),
                "pcie_width": _optional(pynvml, "nvmlDeviceGetMaxPcieLinkWidth", handle),
            })
        return {"available": True, "driver_version": _text(pynvml.nvmlSystemGetDriverVersion()), "gpus": gpus}
    finally:
        pynvml.nvmlShutdown()


def nvlinks(pynvml: ModuleType, handle: object) -> tuple[int | None, int | None]:
    """(links the GPU has, links up). A GPU without NVLink answers NotSupported on link 0: (0, 0). Any other error
    leaves both unknown (None): a driver fault must not read as "no NVLink, so PCIe"."""
    present = active = 0
    for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            state = pynvml.nvmlDeviceGetNvLinkState(handle, link)
        except Exception as error:
            if _not_supported(pynvml, error) or _invalid_argument(pynvml, error):
                break  # past the last link, or none at all
            return None, None
        present += 1
        active += int(state == pynvml.NVML_FEATURE_ENABLED)
    return present, active


def _links_to_switch(pynvml: ModuleType, handle: object) -> bool | None:
    """Whether the GPU's NVLinks end at NVSwitches (NVML_NVLINK_DEVICE_TYPE_SWITCH), not at another GPU: the first
    link that answers decides. False without NVLink; None when NVML cannot say."""
    switch = getattr(pynvml, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2)
    for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            return bool(pynvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link) == switch)
        except Exception as error:
            if link == 0 and _not_supported(pynvml, error):
                return False
            if not hasattr(pynvml, "nvmlDeviceGetNvLinkRemoteDeviceType"):
                return None  # an nvidia-ml-py without the call
            continue  # a link that is down does not answer: ask the next
    return None


def _not_supported(pynvml: ModuleType, error: Exception) -> bool:
    return isinstance(error, getattr(pynvml, "NVMLError_NotSupported", ()))


def _invalid_argument(pynvml: ModuleType, error: Exception) -> bool:
    return isinstance(error, getattr(pynvml, "NVMLError_InvalidArgument", ()))


def supported(function: Callable[..., T], *args: object) -> T | None:
    """function(*args), or None where this GPU or driver does not support the reading (NVML raises)."""
    try:
        return function(*args)
    except Exception:
        return None


def _optional(pynvml: ModuleType, call: str, handle: object) -> int | None:
    """An NVML reading a driver or GPU may lack (NotSupported, or the call missing from nvidia-ml-py): None then."""
    return supported(lambda: int(getattr(pynvml, call)(handle)))


def _capability(pynvml: ModuleType, handle: object) -> list[int] | None:
    """(major, minor), from NVML: no CUDA context is made (the torch host reads it before it forks launchers); None
    from an old driver without the call."""
    return supported(lambda: list(pynvml.nvmlDeviceGetCudaComputeCapability(handle)))


def lowest_capability() -> tuple[int, int] | None:
    """The lowest compute capability among this machine's GPUs (what every rank can run), None when unknown."""
    inventory = gpu_inventory()
    found = [(capability[0], capability[1]) for gpu in inventory.get("gpus", [])
             if (capability := gpu.get("compute_capability"))]
    return min(found) if found else None


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
