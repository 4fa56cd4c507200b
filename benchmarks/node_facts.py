"""The GPU node as its own tools describe it, in the files tests/data/gpu/h200-1/ holds (benchmarks/gpu_validation.py's
node-facts step; its archive keeps the three files under these names, which tests/test_expect.py reads):

    python benchmarks/node_facts.py --out DIR [--gpus N]

- nvidia-smi.txt: `date`, then `nvidia-smi`, `nvidia-smi topo -m`, `nvidia-smi topo -p2p n`, `nvidia-smi nvlink -s`
  and `nvidia-smi -q`, one after the other, each under a `$ command` line;
- nvml.json: NVML's answers (nvidia-ml-py) per GPU: name, UUID, PCI, architecture, compute capability, memory, bus
  width, clocks, power limit, PCIe generation and width, fabric, C2C, each NVLink link's state, version and remote
  end, and the NVLink field values; an answer NVML refuses is kept as "error: ..." (the GPU without NVLink answers
  NOT_SUPPORTED, which is a fact too);
- nccl-topo.xml: NCCL's own topology (NCCL_TOPO_DUMP_FILE) of one communicator over the first N GPUs, made here in
  one process (torch.cuda.nccl's all_reduce over a tensor per GPU is ncclCommInitAll), so it holds every GPU of the
  check's world N; `commbench expect --facts nccl-topo.xml` reads it.

facts.json says, per file, "written" or why it is absent (no nvidia-smi, no NVML, no CUDA GPU); the script exits 0
either way, so that a node without a driver (the CPU stand-in) still says what it lacks.
"""

import argparse
import ctypes
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

NVIDIA_SMI_COMMANDS = (("nvidia-smi",), ("nvidia-smi", "topo", "-m"), ("nvidia-smi", "topo", "-p2p", "n"),
                       ("nvidia-smi", "nvlink", "-s"), ("nvidia-smi", "-q"))
"""The texts of tests/data/gpu/h200-1/nvidia-smi.txt, in its order."""
COMMAND_TIMEOUT_S = 60
"""One nvidia-smi call: `-q` on 8 GPUs takes seconds; a driver that hangs must not take the step's whole timeout."""


def nvidia_smi_text() -> str:
    """Every command's output (stderr included, a refusal being a fact), each under its `$ command` line."""
    parts = [time.strftime("%a %b %d %H:%M:%S %Z %Y")]
    for command in NVIDIA_SMI_COMMANDS:
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
            output = done.stdout + done.stderr
        except subprocess.TimeoutExpired:
            output = f"(no answer within {COMMAND_TIMEOUT_S} s)\n"
        parts.append(f"$ {' '.join(command)}\n{output}")
    return "\n".join(parts)


def answer(call, *args):
    """NVML's answer, or what it said instead ("error: NVMLError_NotSupported: Not Supported")."""
    try:
        return call(*args)
    except Exception as error:  # every NVML refusal is recorded, none stops the others
        return f"error: {type(error).__name__}: {error}"


def struct_dict(value) -> dict | str:
    """A ctypes structure NVML filled, as a dict of its fields (byte arrays as hex, names as text)."""
    if isinstance(value, str):
        return value
    found = {}
    for name, _ in value._fields_:
        field = getattr(value, name)
        if isinstance(field, bytes):
            field = field.decode(errors="replace")
        elif isinstance(field, ctypes.Array):
            field = bytes(field).hex()
        found[name] = field
    return found


def fabric(pynvml, handle) -> dict | str:
    info = pynvml.c_nvmlGpuFabricInfo_t()
    result = answer(pynvml.nvmlDeviceGetGpuFabricInfo, handle, ctypes.byref(info))
    return result if isinstance(result, str) else struct_dict(info)


def nvlink_links(pynvml, handle) -> list[dict]:
    return [{"link": link, "state": answer(pynvml.nvmlDeviceGetNvLinkState, handle, link),
             "version": answer(pynvml.nvmlDeviceGetNvLinkVersion, handle, link),
             "p2p": answer(pynvml.nvmlDeviceGetNvLinkCapability, handle, link, pynvml.NVML_NVLINK_CAP_P2P_SUPPORTED),
             "remote_type": answer(pynvml.nvmlDeviceGetNvLinkRemoteDeviceType, handle, link),
             "remote_pci": struct_dict(answer(pynvml.nvmlDeviceGetNvLinkRemotePciInfo, handle, link))}
            for link in range(pynvml.NVML_NVLINK_MAX_LINKS)]


def field_values(pynvml, handle) -> dict:
    """[nvmlReturn, value] per field: the return says NOT_SUPPORTED (3) where the GPU has no NVLink."""
    fields = {"nvlink_link_count": pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT,
              "nvlink_speed_mbps_common": pynvml.NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON}
    values = answer(pynvml.nvmlDeviceGetFieldValues, handle, list(fields.values()))
    if isinstance(values, str):
        return {name: values for name in fields}
    return {name: [int(value.nvmlReturn), int(value.value.uiVal)] for name, value in zip(fields, values)}


def gpu_facts(pynvml, index: int) -> dict:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    return {"name": answer(pynvml.nvmlDeviceGetName, handle), "uuid": answer(pynvml.nvmlDeviceGetUUID, handle),
            "pci": struct_dict(answer(pynvml.nvmlDeviceGetPciInfo, handle)),
            "arch": answer(pynvml.nvmlDeviceGetArchitecture, handle),
            "cc": answer(pynvml.nvmlDeviceGetCudaComputeCapability, handle),
            "memory": struct_dict(answer(pynvml.nvmlDeviceGetMemoryInfo, handle)),
            "bus_width": answer(pynvml.nvmlDeviceGetMemoryBusWidth, handle),
            "max_clocks": {name: answer(pynvml.nvmlDeviceGetMaxClockInfo, handle, clock) for name, clock in
                           (("sm", pynvml.NVML_CLOCK_SM), ("mem", pynvml.NVML_CLOCK_MEM),
                            ("graphics", pynvml.NVML_CLOCK_GRAPHICS))},
            "power_limit_mw": answer(pynvml.nvmlDeviceGetPowerManagementLimit, handle),
            "pcie": {"max_gen": answer(pynvml.nvmlDeviceGetMaxPcieLinkGeneration, handle),
                     "gpu_max_gen": answer(pynvml.nvmlDeviceGetGpuMaxPcieLinkGeneration, handle),
                     "max_width": answer(pynvml.nvmlDeviceGetMaxPcieLinkWidth, handle),
                     "cur_gen": answer(pynvml.nvmlDeviceGetCurrPcieLinkGeneration, handle),
                     "cur_width": answer(pynvml.nvmlDeviceGetCurrPcieLinkWidth, handle),
                     "max_speed": answer(pynvml.nvmlDeviceGetPcieLinkMaxSpeed, handle),
                     "speed": answer(pynvml.nvmlDeviceGetPcieSpeed, handle)},
            "fabric": fabric(pynvml, handle), "c2c": struct_dict(answer(pynvml.nvmlDeviceGetC2cModeInfoV, handle)),
            "nvlink": nvlink_links(pynvml, handle), "fields": field_values(pynvml, handle)}


def nvml_facts() -> dict:
    """NVML's answers for every GPU; ImportError or an NVMLError where there is no driver."""
    import pynvml

    pynvml.nvmlInit()
    count = pynvml.nvmlDeviceGetCount()
    return {"driver": answer(pynvml.nvmlSystemGetDriverVersion),
            "cuda_driver": answer(pynvml.nvmlSystemGetCudaDriverVersion),
            "nvml": answer(pynvml.nvmlSystemGetNVMLVersion), "count": count,
            "gpus": [gpu_facts(pynvml, index) for index in range(count)]}


def dump_nccl_topology(path: Path, gpus: int) -> None:
    """One NCCL communicator over GPUs 0..gpus-1 in this process, its rank 0 writing the topology it found."""
    os.environ["NCCL_TOPO_DUMP_FILE"] = str(path.absolute())  # read by NCCL when the communicator starts
    import torch
    import torch.cuda.nccl

    if torch.cuda.device_count() < gpus:
        raise RuntimeError(f"{torch.cuda.device_count()} CUDA GPU(s) visible, {gpus} asked for")
    torch.cuda.nccl.all_reduce([torch.ones(1, device=f"cuda:{index}") for index in range(gpus)])
    torch.cuda.synchronize()
    if not path.exists():
        raise RuntimeError(f"NCCL {torch.cuda.nccl.version()} wrote no {path.name}")


def write_facts(out: Path, gpus: int) -> dict[str, str]:
    """The three files in out/, and per file "written" or why not."""
    out.mkdir(parents=True, exist_ok=True)
    said: dict[str, str] = {}
    if shutil.which("nvidia-smi"):
        (out / "nvidia-smi.txt").write_text(nvidia_smi_text())
        said["nvidia-smi.txt"] = "written"
    else:
        said["nvidia-smi.txt"] = "absent: no nvidia-smi on PATH"
    try:
        (out / "nvml.json").write_text(json.dumps(nvml_facts(), indent=1, default=str) + "\n")
        said["nvml.json"] = "written"
    except Exception as error:  # no driver or no nvidia-ml-py: NVML cannot answer at all
        said["nvml.json"] = f"absent: NVML: {type(error).__name__}: {error}"
    if said["nvml.json"] != "written":  # without NVML there is no driver, and no CUDA GPU for NCCL either
        said["nccl-topo.xml"] = "absent: no NVIDIA driver answered (NVML)"
        return said
    try:
        dump_nccl_topology(out / "nccl-topo.xml", gpus)
        said["nccl-topo.xml"] = "written"
    except Exception as error:  # a CPU build of torch, or NCCL refusing: the other two files still stand
        said["nccl-topo.xml"] = f"absent: {type(error).__name__}: {error}"
    return said


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder for the files and facts.json")
    parser.add_argument("--gpus", type=int, default=1, help="GPUs in NCCL's topology (the check's world N)")
    args = parser.parse_args()
    said = write_facts(args.out, args.gpus)
    (args.out / "facts.json").write_text(json.dumps({"gpus": args.gpus, "files": said}, indent=2) + "\n")
    for name, state in said.items():
        print(f"{name}: {state}")


if __name__ == "__main__":
    main()
