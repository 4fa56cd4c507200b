"""Device meshes for FSDP, one per (device type, shape) for the life of the process group.

init_device_mesh creates a process group per mesh dimension on every call (new_group per sub-group, or an eager
ncclCommSplit when the default group is bound to a device), and nothing destroys them: a sweep that built a 2-D
HSDP mesh per configuration would hold one more set of communicators (NCCL buffers, connections) per configuration.
A mesh only names which ranks talk to which, so configurations of the same shape share one.
"""

import torch.distributed as dist

_meshes: dict[tuple, object] = {}
_world = None  # the default process group the cached meshes belong to


def device_mesh(device_type: str, shape: tuple[int, ...], dim_names: tuple[str, ...] | None = None):
    """The DeviceMesh of this shape, made on first use. A new default process group (the old one destroyed and the
    world initialised again in this process) drops the cache: its meshes' groups belonged to the old one."""
    from torch.distributed.device_mesh import init_device_mesh

    global _world
    world = dist.distributed_c10d._get_default_group()
    if world is not _world:
        _meshes.clear()
        _world = world
    key = (device_type, tuple(shape), dim_names)
    if key not in _meshes:
        _meshes[key] = init_device_mesh(device_type, tuple(shape), mesh_dim_names=dim_names)
    return _meshes[key]
