"""Collective registry: every collective commbench can run. Adding one: a module in this package that defines
COLLECTIVE (a Collective, collectives/base.py), and its line below. The ring, the check data and the torch calls are
helpers the ranks import when they run a point: the registry does not load them (planning a sweep happens in the
launcher, which never imports torch)."""

from commbench.collectives import all_gather, all_reduce, all_to_all, broadcast, reduce, reduce_scatter, sendrecv
from commbench.collectives.base import Collective
from commbench.errors import CommbenchError
from commbench.names import IMPLEMENTATIONS

COLLECTIVES: dict[str, Collective] = {collective.name: collective for collective in (
    all_gather.COLLECTIVE,
    all_reduce.COLLECTIVE,
    all_to_all.COLLECTIVE,
    broadcast.COLLECTIVE,
    reduce.COLLECTIVE,
    reduce_scatter.COLLECTIVE,
    sendrecv.COLLECTIVE,
)}


def get_collective(name: str) -> Collective:
    try:
        return COLLECTIVES[name]
    except KeyError:
        raise CommbenchError(f"unknown collective {name!r}; choose from {', '.join(sorted(COLLECTIVES))}") from None


__all__ = ["COLLECTIVES", "IMPLEMENTATIONS", "Collective", "get_collective"]
