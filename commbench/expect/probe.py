"""This machine's facts (expect/facts.py): GPUs and links from NVML, NICs from /sys, and the host's copy and loopback
bandwidth, measured here once per call (about a second)."""

from __future__ import annotations

import fcntl
import json
import os
import re
import socket
import threading
import time
from multiprocessing import get_context
from pathlib import Path

from commbench.expect.cache import cache_folder
from commbench.expect.facts import MachineFacts

COPY_BYTES = 64 * 1024**2
LOOPBACK_BYTES = 64 * 1024**2
REPEATS = 5
"""Each host measurement is the fastest of this many: a ceiling is what the host can do, and a busy neighbour only
ever slows a copy down."""
ROUNDS = 3
ROUND_GAP_S = 0.2
"""The loopback exchanges come in ROUNDS rounds of REPEATS, ROUND_GAP_S apart, the fastest of all kept: on a shared
VM one round's five back-to-back exchanges read 1.6-2.6 GB/s from one minute to the next (a neighbour's burst spans a
round), while the fastest of rounds spread over a second read 2.5-2.6 (2 cores, 2026-12-05)."""
_IB_RATE = re.compile(r"^\s*([\d.]+)\s*Gb/sec")


def facts_here(*, measure: bool = True, refresh: bool = False, kept_only: bool = False) -> MachineFacts:
    """measure: read the host's copy and loopback rates (measured once per machine and kept in the cache; refresh
    measures them again, as `commbench env` does; kept_only takes them from the cache or leaves them out)."""
    from commbench import nvml
    from commbench.machine import usable_cpus

    gpus = nvml.gpu_inventory().get("gpus", [])
    nics, nic_source = network_adapters()
    sources = [nic_source]
    first = gpus[0] if gpus else {}
    if gpus:
        sources.append("NVML: GPU name, compute capability, NVLink links up and their remote ends, PCIe max "
                       "generation and width (GPU 0)")
    rates = host_rates(refresh=refresh, kept_only=kept_only) if measure else None
    if rates:
        sources.append(f"measured {rates[2]}: the fastest of {REPEATS} copies of {COPY_BYTES >> 20} MiB, and of "
                       f"{REPEATS * ROUNDS} exchanges of {LOOPBACK_BYTES >> 20} MiB ({ROUNDS} rounds) in a 2-process "
                       "TCP ring on 127.0.0.1")
    elif measure:
        sources.append("the host's copy and loopback rates: none kept here (`commbench env` measures them)")
    copy, loopback = (rates[0], rates[1]) if rates else (None, None)
    return MachineFacts(
        name=socket.gethostname(), gpu=first.get("name"),
        compute_capability=tuple(first["compute_capability"]) if first.get("compute_capability") else None,
        gpus_per_node=len(gpus), nvlink_links=int(first.get("nvlink_active_links") or 0),
        nvswitch=bool(first.get("nvswitch")),
        nvls=bool(first.get("nvswitch")) and bool(first.get("compute_capability")) and
        first["compute_capability"][0] >= 9,
        pcie_gen=first.get("pcie_gen"), pcie_width=first.get("pcie_width"), nic_gbits=tuple(nics),
        cpu_cores=usable_cpus(), memcpy_gbps=copy, loopback_gbps=loopback, sources=tuple(sources))


def host_rates(*, refresh: bool = False, kept_only: bool = False) -> tuple[float, float, str] | None:
    """(copy GB/s, loopback GB/s, when) of this host: from the cache when it holds this host's, else measured now and
    kept (a lock makes concurrent sweeps measure once). refresh measures again and keeps the faster of the two;
    kept_only never measures (None where nothing is kept)."""
    from commbench.machine import usable_cpus

    folder = cache_folder()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"host-rates-{socket.gethostname()}.json"
    cores = usable_cpus()
    with open(folder / (path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        kept = _kept(path, cores)
        if kept and not refresh:
            return kept["memcpy_gbps"], kept["loopback_gbps"], f"on {kept['date']} ({path})"
        if kept_only:
            return None
        copy, loopback = memcpy_gbps(), loopback_gbps()
        if kept:  # a ceiling keeps the fastest seen: a busy neighbour during one measurement only slows it down
            copy, loopback = max(copy, kept["memcpy_gbps"]), max(loopback, kept["loopback_gbps"])
        date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        partial = path.with_suffix(".partial")
        partial.write_text(json.dumps({"memcpy_gbps": copy, "loopback_gbps": loopback, "cores": cores,
                                       "date": date}), encoding="utf-8")
        partial.replace(path)
    return copy, loopback, f"on {date}"


def _kept(path: Path, cores: int) -> dict | None:
    """The rates kept for this host at this core count, or None (none kept, unreadable, or other cores)."""
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
        if kept.get("cores") == cores:
            return {"memcpy_gbps": float(kept["memcpy_gbps"]), "loopback_gbps": float(kept["loopback_gbps"]),
                    "date": str(kept["date"])}
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def network_adapters(root: Path = Path("/sys/class")) -> tuple[list[float], str]:
    """Each InfiniBand/RoCE/EFA port's rate in Gb/s (what NCCL uses across nodes); without any, the fastest physical
    Ethernet interface (NCCL's and gloo's sockets), and where the rates were read."""
    rates = []
    for rate_file in sorted((root / "infiniband").glob("*/ports/*/rate")):
        found = _IB_RATE.match(_read(rate_file))
        if found and float(found.group(1)) > 0:
            rates.append(float(found.group(1)))
    if rates:
        return rates, f"{root}/infiniband/*/ports/*/rate"
    speeds = []
    for interface in sorted((root / "net").glob("*")):
        if not (interface / "device").exists():  # lo, bridges, veth: no hardware behind them
            continue
        text = _read(interface / "speed")
        if text.strip().lstrip("-").isdigit() and int(text) > 0:
            speeds.append(int(text) / 1000)
    return ([max(speeds)] if speeds else []), f"{root}/net/*/speed (physical interfaces; no InfiniBand ports)"


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:  # a link down answers EINVAL on speed
        return ""


def memcpy_gbps(size: int = COPY_BYTES) -> float:
    """GB/s of one large host copy (bytes copied per second), the fastest of REPEATS."""
    import numpy as np

    source = np.ones(size, dtype=np.uint8)
    target = np.empty_like(source)
    np.copyto(target, source)  # first touch: page faults are not the copy's rate
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        np.copyto(target, source)
        times.append(time.perf_counter() - start)
    return size / min(times) / 1e9


def loopback_gbps(size: int = LOOPBACK_BYTES) -> float:
    """GB/s per stream of two processes that each send `size` bytes to the other over TCP on 127.0.0.1 at once (a
    2-rank ring, as gloo's ranks exchange on one host), the fastest of ROUNDS rounds of REPEATS."""
    context = get_context("spawn")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    result = context.Queue()
    peer = context.Process(target=_peer, args=(port, size, REPEATS * ROUNDS, result), daemon=True)
    peer.start()
    try:
        listener.settimeout(60)
        connection, _ = listener.accept()
        with connection:
            times = [_exchange(connection, size, gap_s=ROUND_GAP_S if index % REPEATS == 0 and index else 0.0)
                     for index in range(REPEATS * ROUNDS)]
        peer_times = result.get(timeout=60)
    finally:
        listener.close()
        peer.join(timeout=10)
    # an exchange is done when both sides are; the peer's first exchange of a round includes the gap: drop those
    pairs = [max(pair) for index, pair in enumerate(zip(times, peer_times)) if index % REPEATS or index == 0]
    return size / min(pairs) / 1e9


def _peer(port: int, size: int, repeats: int, result) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=60) as connection:
        result.put([_exchange(connection, size) for _ in range(repeats)])


def _exchange(connection: socket.socket, size: int, gap_s: float = 0.0) -> float:
    """Send size bytes and receive size bytes at once; the seconds until both are done (after a pause of gap_s:
    the peer, which does not pause, waits inside its own exchange, which only makes its time longer)."""
    time.sleep(gap_s)
    payload = memoryview(bytearray(os.urandom(1024)) * (size // 1024))
    inbox = bytearray(size)
    start = time.perf_counter()
    sender = threading.Thread(target=connection.sendall, args=(payload,))
    sender.start()
    view, got = memoryview(inbox), 0
    while got < size:
        received = connection.recv_into(view[got:], size - got)
        if not received:
            raise ConnectionError("the loopback peer closed before sending everything")
        got += received
    sender.join()
    return time.perf_counter() - start
