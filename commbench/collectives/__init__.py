"""Collective registry: every collective commbench can run. Adding one: a module in this package that defines
COLLECTIVE (a Collective, collectives/base.py), and its line below. The ring, the check data and the torch calls are
helpers the ranks import when they run a point: the registry does not load them (planning a sweep happens in the
launcher, which never imports torch)."""

from commbench.collectives import all_gather, all_reduce, all_to_all, broadcast, reduce, reduce_scatter, sendrecv
from commbench.collectives.base import Collective, CollectiveModule
from commbench.errors import CommbenchError
from commbench.names import IMPLEMENTATIONS

_MODULES: tuple[CollectiveModule, ...] = (
    all_gather,
    all_reduce,
    all_to_all,
    broadcast,
    reduce,
    reduce_scatter,
    sendrecv,
)
"""One line per collective; mypy checks each module against CollectiveModule (it defines a Collective)."""
COLLECTIVES: dict[str, Collective] = {module.COLLECTIVE.name: module.COLLECTIVE for module in _MODULES}


def get_collective(name: str) -> Collective:
    try:
        return COLLECTIVES[name]
    except KeyError:
        raise CommbenchError(f"unknown collective {name!r}; choose from {', '.join(sorted(COLLECTIVES))}") from None


__all__ = ["COLLECTIVES", "IMPLEMENTATIONS", "Collective", "get_collective"]
