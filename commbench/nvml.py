"""GPU facts from NVML (package nvidia-ml-py); on a machine without an NVIDIA driver it says so instead of failing."""


def gpu_inventory() -> dict:
    """Driver version and, per GPU, name, memory and active NVLink links; {"available": False, ...} without NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as error:  # NVMLError_LibraryNotFound, ImportError, driver mismatch: all mean "not here"
        return {"available": False, "reason": f"NVML not available ({type(error).__name__})"}
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append({
                "index": index,
                "name": _text(pynvml.nvmlDeviceGetName(handle)),
                "memory_total_bytes": int(memory.total),
                "nvlink_active_links": _active_nvlinks(pynvml, handle),
                "nvswitch": _links_to_switch(pynvml, handle),
                "compute_capability": _capability(pynvml, handle),
                "pcie_gen": _optional(pynvml, "nvmlDeviceGetMaxPcieLinkGeneration", handle),
                "pcie_width": _optional(pynvml, "nvmlDeviceGetMaxPcieLinkWidth", handle),
            })
        return {"available": True, "driver_version": _text(pynvml.nvmlSystemGetDriverVersion()), "gpus": gpus}
    finally:
        pynvml.nvmlShutdown()


def _active_nvlinks(pynvml, handle) -> int:
    active = 0
    for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            active += int(pynvml.nvmlDeviceGetNvLinkState(handle, link) == pynvml.NVML_FEATURE_ENABLED)
        except Exception:  # links past the last one, or a GPU without NVLink, raise NotSupported
            break
    return active


def _links_to_switch(pynvml, handle) -> bool:
    """Whether the GPU's first NVLink ends at an NVSwitch (NVML_NVLINK_DEVICE_TYPE_SWITCH), not at another GPU."""
    switch = getattr(pynvml, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2)
    try:
        return pynvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, 0) == switch
    except Exception:  # no NVLink (NotSupported), or an nvidia-ml-py without the call
        return False


def _optional(pynvml, call: str, handle) -> int | None:
    """An NVML reading a driver or GPU may lack (NotSupported, or the call missing from nvidia-ml-py): None then."""
    try:
        return int(getattr(pynvml, call)(handle))
    except Exception:
        return None


def _capability(pynvml, handle) -> list[int] | None:
    """(major, minor), from NVML: no CUDA context is made (the torch host reads it before it forks launchers)."""
    try:
        return list(pynvml.nvmlDeviceGetCudaComputeCapability(handle))
    except Exception:  # an old driver without the call
        return None


def lowest_capability() -> tuple[int, int] | None:
    """The lowest compute capability among this machine's GPUs (what every rank can run), None when unknown."""
    inventory = gpu_inventory()
    found = [tuple(gpu["compute_capability"]) for gpu in inventory.get("gpus", []) if gpu.get("compute_capability")]
    return min(found) if found else None


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
