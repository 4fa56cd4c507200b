"""Device meshes for FSDP, one per (device type, shape) for the life of the process group.

init_device_mesh creates a process group per mesh dimension on every call (new_group per sub-group, or an eager
ncclCommSplit when the default group is bound to a device), and nothing destroys them: a sweep that built a 2-D
HSDP mesh per configuration would hold one more set of communicators (NCCL buffers, connections) per configuration.
A mesh only names which ranks talk to which, so configurations of the same shape share one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch.distributed as dist

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

MeshKey = tuple[str, tuple[int, ...], tuple[str, ...] | None]
"""(device type, shape, dimension names): what makes two meshes the same."""


class DeviceMeshes:
    """The meshes of one launch's process group, each made on first use. Made once per launch (training/measure.py's
    prepare) and passed to every configuration's build, so configurations of one shape share one mesh."""

    def __init__(self) -> None:
        self._meshes: dict[MeshKey, DeviceMesh] = {}
        self._world: object = None  # the default process group the meshes belong to

    def get(self, device_type: str, shape: tuple[int, ...], dim_names: tuple[str, ...] | None = None) -> DeviceMesh:
        """The DeviceMesh of this shape, made on first use. A new default process group (the old one destroyed and
        the world initialised again in this process) drops the meshes: their groups belonged to the old one."""
        from torch.distributed.device_mesh import init_device_mesh

        world = dist.distributed_c10d._get_default_group()
        if world is not self._world:
            self._meshes.clear()
            self._world = world
        key = (device_type, tuple(shape), dim_names)
        if key not in self._meshes:
            self._meshes[key] = init_device_mesh(device_type, tuple(shape), mesh_dim_names=dim_names)
        return self._meshes[key]
