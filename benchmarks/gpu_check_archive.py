"""The GPU check's archive of a node (gpu_validation.py --archive): one folder MACHINE-DATE-COMMIT/ with the outcomes,
the estimate, the probes, the node's files, the nccl-tests and commbench texts and each step's output, and the same
folder as one .tar.gz to attach to a report."""

import json
import shutil
import time
from dataclasses import asdict
from fnmatch import fnmatch
from pathlib import Path

from gpu_check_context import ROOT, Context, run_dir
from gpu_check_plan import MACHINE_START_S, Estimate
from gpu_check_run import Outcome
from gpu_check_steps import FACT_FILES, LAUNCH_NOISE_RUN
from process_group import run_step


def commit_of(given: str | None) -> str:
    """The commit the check ran on (short hash, '+dirty' with uncommitted changes): --commit where the checkout has
    no .git (a device machine receives the working tree without it)."""
    if given:
        return given
    head = run_step(["git", "rev-parse", "--short", "HEAD"], timeout_s=30, cwd=ROOT)
    if not head.ok:
        return "unknown"
    dirty = run_step(["git", "status", "--porcelain", "--untracked-files=no"], timeout_s=30, cwd=ROOT).stdout.strip()
    return head.stdout.strip() + ("+dirty" if dirty else "")


def gpu_model(torch_name: str) -> str:
    """'NVIDIA H100 80GB HBM3' → 'h100', 'NVIDIA GeForce RTX 5090' → 'geforce-rtx-5090': the words up to the first
    with a digit."""
    words = [word.lower() for word in torch_name.split() if word.upper() != "NVIDIA"]
    upto = next((index for index, word in enumerate(words) if any(char.isdigit() for char in word)), len(words) - 1)
    return "-".join(words[:upto + 1]) or "gpu"


def machine_name(ctx: Context, probes: dict | None) -> str:
    if not ctx.gpu:
        return "cpu-stand-in"
    devices = ((probes or {}).get("cuda") or {}).get("devices") or []
    return f"{gpu_model(devices[0]['torch_name']) if devices else 'gpu'}x{ctx.gpus}"


ARCHIVED_TEXTS = {
    "gpu_validation.json": "every step's outcome (step, world, mode, seconds, result, detail), the plan's estimate, "
                           "benchmarks/gpu_probes.py's probes, benchmarks/vs_nccl_tests.py's pairs and the launch "
                           "noise of the launch-noise step's run set with its key (backend, device type, world size)",
    "nvidia-smi.txt": "`nvidia-smi`, `nvidia-smi topo -m`, `nvidia-smi topo -p2p n`, `nvidia-smi nvlink -s` and "
                      "`nvidia-smi -q`, one after the other (benchmarks/node_facts.py)",
    "nvml.json": "NVML's answers (nvidia-ml-py) per GPU: name, PCI, architecture, memory and bus width, clocks, power "
                 "limit, PCIe generation and width, fabric, C2C, each NVLink link's state, version and remote end",
    "nccl-topo.xml": "NCCL's own topology (NCCL_TOPO_DUMP_FILE) of one communicator over the N GPUs; "
                     "`commbench expect --facts nccl-topo.xml` reads it",
    "nccl-tests-*.txt": "nccl-tests' output per collective, plain and with -C 1 (nccl-tests-cputime-*)",
    "commbench-perf-*.txt": "`commbench perf`'s output with the same flags",
    "steps/": "each step's stdout and stderr (STEP.out, STEP.err)",
}
"""What each file of the archive holds (its README.md)."""


def archive_readme(document: dict, names: list[str]) -> str:
    lines = [f"# {document['machine']}: benchmarks/gpu_validation.py, commit {document['commit']}, {document['date']}",
             "", f"A node of {document['gpus']} GPU(s), the check at world 1 and at world N = {document['gpus']}"
             f"{'' if document['gpu'] else ' (its CPU stand-ins: gloo on CPU tensors, 2 ranks)'}. Files:", ""]
    lines += [f"- `{name}`: {text}" for name, text in ARCHIVED_TEXTS.items()
              if any(fnmatch(found, name) for found in names)]
    return "\n".join(lines) + "\n"


def archive(folder: Path, ctx: Context, outcomes: list[Outcome], commit: str, estimate: Estimate) -> Path:
    """The node's archive in folder/MACHINE-DATE-COMMIT/ (the layout of tests/data/gpu/), and the same folder as
    ctx.out/MACHINE-DATE-COMMIT.tar.gz, the one file to attach to a report."""
    probes = _json_or_none(ctx.out / "probes.json")
    machine, day = machine_name(ctx, probes), time.strftime("%Y-%m-%d", time.gmtime())
    target = folder / f"{machine}-{day}-{commit.replace('+', '-')}"
    target.mkdir(parents=True, exist_ok=True)
    document = {"machine": machine, "date": day, "commit": commit, "gpu": ctx.gpu, "gpus": ctx.gpus,
                "estimate": {"machine_start_s": MACHINE_START_S, "expected_s": estimate.expected_s,
                             "worst_s": estimate.worst_s, "budget_s": estimate.budget_s,
                             "steps": {step.name: step.expected_s(ctx.gpus) for step in estimate.steps}},
                "outcomes": [asdict(outcome) for outcome in outcomes], "probes": probes,
                "vs_nccl_tests": _json_or_none(ctx.out / "vs-nccl-tests.json"),
                "launch_noise": _launch_noise(ctx)}
    (target / "gpu_validation.json").write_text(json.dumps(document, indent=2) + "\n")
    copied = [path for path in (ctx.out / "node-facts" / name for name in FACT_FILES) if path.exists()]
    copied += sorted((ctx.out / "vs-nccl-tests").rglob("*.txt"))
    for path in copied:
        shutil.copy(path, target / path.name)
    if (ctx.out / "steps").is_dir():
        shutil.copytree(ctx.out / "steps", target / "steps", dirs_exist_ok=True)
    names = ["gpu_validation.json", *(path.name for path in copied), *(["steps/"] if (target / "steps").is_dir()
                                                                        else [])]
    (target / "README.md").write_text(archive_readme(document, names))
    shutil.make_archive(str(ctx.out / target.name), "gztar", root_dir=folder, base_dir=target.name)
    return target


def _launch_noise(ctx: Context) -> dict | None:
    """The launch-noise step's figure with its key (what gate/priors.MEASURED takes), None where it did not run."""
    found = _json_or_none(run_dir(ctx, LAUNCH_NOISE_RUN) / "run_set.json")
    if not isinstance(found, dict):
        return None
    backend, device = ("nccl", "cuda") if ctx.gpu else ("gloo", "cpu")
    return {"backend": backend, "device_type": device, "world_size": ctx.gpus if ctx.gpu else 2,
            "launch_noise_pct": found.get("launch_noise_pct"), "df": found.get("df")}


def _json_or_none(path: Path):
    return json.loads(path.read_text()) if path.exists() else None
