"""Collective registry: every module in this package that defines COLLECTIVE is a collective commbench can run."""

import importlib
import pkgutil

from commbench.collectives.base import Collective
from commbench.errors import CommbenchError
from commbench.names import IMPLEMENTATIONS

_HELPERS = frozenset({"base", "check_data", "ring", "torch_api"})
"""Modules of this package that are not collectives: torch-bound helpers the ranks import when they run a point
(the registry must not load them: planning a sweep happens in the launcher, which never imports torch)."""


def _discover() -> dict[str, Collective]:
    found = {}
    for module_info in pkgutil.iter_modules(__path__):
        if module_info.name in _HELPERS:
            continue
        module = importlib.import_module(f"{__name__}.{module_info.name}")
        collective = getattr(module, "COLLECTIVE", None)
        if isinstance(collective, Collective):
            found[collective.name] = collective
    return found


COLLECTIVES: dict[str, Collective] = _discover()


def get_collective(name: str) -> Collective:
    try:
        return COLLECTIVES[name]
    except KeyError:
        raise CommbenchError(f"unknown collective {name!r}; choose from {', '.join(sorted(COLLECTIVES))}") from None


__all__ = ["COLLECTIVES", "IMPLEMENTATIONS", "Collective", "get_collective"]
