"""Launch noise as a fact of the machine: what run sets measured here, per (host, backend, device, world size), kept in
the machine-facts cache beside the host's copy and loopback rates (expect/probe.py).

A comparison with a single launch on a side cannot see launch-to-launch variation, so it takes that variation as
given (the launch-noise floor, launch_tests.Floor). How large it is depends on the machine: tens of per cent on a
shared 2-core VM, a few per cent on a dedicated GPU node. So every run set of three or more launches (`--launches
N`) adds its measured launch noise to this cache under the host that launched it and the backend, device and world
size its rows ran on; `commbench env` shows the figures, and `commbench compare` takes the one of the machine that
recorded the new side at the same world size (else the prior: gate/priors.py). The world size is part of the key: a
launch of 8 ranks waits on more peers, and spreads differently, than a launch of 1. The figure kept is the spread
pooled over the last KEPT run sets (weighted by their degrees of freedom): one run set of three launches measures a
spread with only a few degrees of freedom.
"""

import fcntl
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

from commbench import store
from commbench.expect.cache import cache_folder
from commbench.gate import run_set, sides

MIN_LAUNCHES = 3
"""A run set measures a machine fact from this many launches: two give one degree of freedom per row, and a
spread that one slow launch can double."""
KEPT = 10
"""The run sets pooled per key: the latest ones, so a machine that changed (a new driver, a quieter neighbour)
shows it after a few run sets."""


@dataclass(frozen=True)
class Key:
    """Whose launch noise: the host that launched the runs, and the backend, device and world size their rows ran
    on."""

    host: str
    backend: str
    device: str
    world: int | None = None
    """The launch's ranks; None where its meta.json does not say."""

    @property
    def label(self) -> str:
        return f"{self.backend} on {self.device}" + (f", {self.world} ranks" if self.world is not None else "")


@dataclass(frozen=True)
class StoredNoise:
    """A machine's launch noise pooled over its latest run sets."""

    key: Key
    noise_pct: float
    run_sets: int
    df: int
    latest: str
    """The date of the latest run set that added to it."""
    path: Path

    @property
    def source(self) -> str:
        plural = "s" if self.run_sets != 1 else ""
        return (f"the launch noise stored for {self.key.host} ({self.key.label}): pooled over its last "
                f"{self.run_sets} run set{plural} of --launches {MIN_LAUNCHES} or more, the latest on {self.latest} "
                f"({self.path})")


def side_key(path: Path) -> Key | None:
    """Who recorded the run (or the first launch of the run set, or the first bench of a suite) at path: the host
    that launched it (an import's first rank's host), its backend, device type and world size, from meta.json; None
    where meta.json does not say."""
    for folders in sides.bench_run_sets(path).values():
        meta = store.read_meta(folders[0])
        hosts = meta.get("hosts") if isinstance(meta.get("hosts"), list) else []
        host = meta.get("launcher_host") or (hosts[0] if hosts else None)
        backend, device = meta.get("backend"), meta.get("device_type")
        world = meta.get("world_size")
        if host and backend and device:
            return Key(str(host), str(backend), str(device), int(world) if isinstance(world, int) else None)
    return None


def _path(host: str) -> Path:
    return cache_folder() / f"launch-noise-{host}.json"


def _read(path: Path) -> dict:
    """The stored document ({"BACKEND/DEVICE/WORLD": [measurement, ...]}), or {} where none (or an unreadable one, which
    the next run set replaces: the cache holds measurements, and a damaged one is measured again)."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return document if isinstance(document, dict) else {}


def _slot(key: Key) -> str:
    return f"{key.backend}/{key.device}" + (f"/{key.world}" if key.world is not None else "")


def _key_of(host: str, slot: str) -> Key:
    backend, _, rest = slot.partition("/")
    device, _, world = rest.partition("/")
    return Key(host, backend, device, int(world) if world.isdigit() else None)


def record(key: Key, log_sd: float, df: int, *, run_set_dir: Path) -> None:
    """Add one run set's pooled log spread (with its degrees of freedom) to the machine's figures."""
    path = _path(key.host)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two run sets ending at once both land
        document = _read(path)
        measured = {"log_sd": log_sd, "df": df, "launch_noise_pct": run_set.spread_pct(log_sd),
                    "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "run_set": str(run_set_dir)}
        document[_slot(key)] = [*_measurements(document, key), measured][-KEPT:]
        partial = path.with_suffix(".partial")
        partial.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        partial.replace(path)


def _measurements(document: dict, key: Key) -> list[dict]:
    """The key's measurements that read as such (a hand-edited entry without a finite spread is left out)."""
    found = document.get(_slot(key))
    if not isinstance(found, list):
        return []
    return [entry for entry in found if isinstance(entry, dict)
            and isinstance(entry.get("log_sd"), (int, float)) and math.isfinite(entry["log_sd"])
            and isinstance(entry.get("df"), int) and entry["df"] > 0]


def stored(key: Key) -> StoredNoise | None:
    """The machine's launch noise for the key, pooled over its kept run sets; None where no run set measured it."""
    path = _path(key.host)
    measurements = _measurements(_read(path), key)
    if not measurements:
        return None
    df = sum(entry["df"] for entry in measurements)
    log_sd = math.sqrt(sum(entry["log_sd"] ** 2 * entry["df"] for entry in measurements) / df)
    return StoredNoise(key, run_set.spread_pct(log_sd), len(measurements), df, str(measurements[-1].get("date")),
                       path)


def stored_here(host: str) -> list[StoredNoise]:
    """Every launch noise stored for the host (for `commbench env`)."""
    found = []
    for slot in _read(_path(host)):
        noise = stored(_key_of(host, slot))
        if noise is not None:
            found.append(noise)
    return found
