"""A Slurm job's ranks inside a container image, through NVIDIA's pyxis plugin (`srun --container-image`), as
GPU clusters built on enroot run them (container/Dockerfile builds such an image on NGC's PyTorch base).

Only the step that runs torchrun is containerised: the batch script itself stays on the node, where `scontrol`
finds the nodes' addresses (an image need not hold Slurm's client). The run folder is mounted at its own path, so
the suite's copy, the results and meta.json are where `commbench slurm status` and the report look for them."""

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from commbench.errors import CommbenchError

_IMAGE = re.compile(r"[A-Za-z0-9._/:@#+-]+")
"""pyxis' image forms: [USER@][REGISTRY#]IMAGE[:TAG], or a path to a squashfs file. No spaces, quotes or commas."""
_MOUNT = re.compile(r"[A-Za-z0-9._/@+=-]+:[A-Za-z0-9._/@+=-]+(:[a-z+]+)?")
"""pyxis' SRC:DST[:FLAGS]; commas separate mounts, so none inside one."""
_PYXIS_OPTION = "--container-image"


@dataclass(frozen=True)
class Container:
    image: str
    mounts: tuple[str, ...] = ()
    """The user's own SRC:DST[:FLAGS] mounts; the run folder is always added."""

    def srun_options(self, run_dir: Path) -> list[str]:
        """The pyxis options of the srun line, each one word (the template quotes them)."""
        check_mountable(run_dir)
        mounts = [f"{run_dir}:{run_dir}", *self.mounts]
        return [f"{_PYXIS_OPTION}={self.image}", f"--container-mounts={','.join(mounts)}"]


def from_options(image: str | None, mounts: tuple[str, ...]) -> Container | None:
    """--container-image and --container-mounts, checked: None without an image (mounts then refused)."""
    if image is None:
        if mounts:
            raise CommbenchError("--container-mounts needs --container-image: without an image the job runs on the "
                                 "nodes themselves, which see their file systems already")
        return None
    if not _IMAGE.fullmatch(image):
        raise CommbenchError(f"--container-image {image!r} is not an image pyxis reads; use "
                             "[USER@][REGISTRY#]IMAGE[:TAG] (e.g. nvcr.io#nvidia/pytorch:26.07-py3) or a .sqsh path, "
                             "without spaces, quotes or commas")
    for mount in mounts:
        if not _MOUNT.fullmatch(mount):
            raise CommbenchError(f"--container-mounts {mount!r} is not one SRC:DST[:FLAGS] mount (e.g. "
                                 "/data:/data:ro); give one mount per option, without spaces, quotes or commas")
    return Container(image, tuple(mounts))


def check_mountable(folder: Path) -> None:
    """The run folder is mounted at its own path: a path pyxis' SRC:DST list can hold (no commas, colons, spaces)."""
    if not re.fullmatch(r"[A-Za-z0-9._/@+=-]+", str(folder)):
        raise CommbenchError(f"--out {str(folder)!r} cannot be mounted into --container-image (pyxis separates mounts "
                             "with commas and their parts with colons); choose a folder whose path has none of "
                             "',: ' or quotes")


def require_pyxis() -> None:
    """Refuse before anything is created where this cluster's srun has no --container-image: sbatch would accept
    the job and its step would fail on the nodes with srun's `unrecognized option`."""
    srun = shutil.which("srun")
    if srun is None:
        raise CommbenchError("--container-image needs srun on this machine (Slurm's client) to check for pyxis; "
                             "submit from a login node of the cluster")
    listed = subprocess.run([srun, "--help"], capture_output=True, text=True, timeout=60)
    if _PYXIS_OPTION not in listed.stdout + listed.stderr:
        raise CommbenchError("--container-image needs NVIDIA's pyxis plugin, and this cluster's srun --help lists no "
                             "--container-image; ask the admins for pyxis, or run without a container: install "
                             "commbench on the nodes and give its Python with --python")
