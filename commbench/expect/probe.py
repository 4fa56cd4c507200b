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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING, Any

from commbench.expect.cache import cache_folder
from commbench.expect.facts import MachineFacts

if TYPE_CHECKING:
    from multiprocessing.queues import Queue

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
    topology = node_topology(gpus)
    nics = network_adapters(gpus=len(gpus))
    sources = [nics.source]
    if gpus:
        sources.append("NVML, every GPU: name, compute capability, NVLink links present and up and their remote "
                       "ends, PCIe max generation and width; the node's nominal topology is the most any GPU has")
    rates = host_rates(refresh=refresh, kept_only=kept_only) if measure else None
    if rates:
        sources.append(f"measured {rates[2]}: the fastest of {REPEATS} copies of {COPY_BYTES >> 20} MiB, and of "
                       f"{REPEATS * ROUNDS} exchanges of {LOOPBACK_BYTES >> 20} MiB ({ROUNDS} rounds) in a 2-process "
                       "TCP ring on 127.0.0.1")
    elif measure:
        sources.append("the host's copy and loopback rates: none kept here (`commbench env` measures them)")
    copy, loopback = (rates[0], rates[1]) if rates else (None, None)
    return MachineFacts(
        name=socket.gethostname(), gpu=gpus[0].get("name") if gpus else None, gpus_per_node=len(gpus),
        **topology.values, nic_gbits=tuple(nics.rates), cpu_cores=usable_cpus(), memcpy_gbps=copy,
        loopback_gbps=loopback, sources=tuple(sources), findings=(*topology.findings, *nics.findings))


@dataclass(frozen=True)
class Topology:
    values: dict
    """MachineFacts' GPU fields: compute_capability, nvlink_links, nvswitch, nvls, pcie_gen, pcie_width."""
    findings: tuple[str, ...]


def node_topology(gpus: Sequence[Mapping[str, Any]]) -> Topology:
    """The node's nominal topology from NVML's reading of every GPU (nvml.gpu_inventory's GpuFacts, or as an older
    meta.json holds them: any key may be missing, values of each key's own type): the most links any GPU
    has, the newest PCIe link; a GPU below it, or a reading NVML could not give, is a finding. An unknown stays
    None, never 0 links (which would read as PCIe) or "no NVSwitch" (which would drop NVLS)."""
    findings = []
    capabilities = {tuple(gpu["compute_capability"]) for gpu in gpus if gpu.get("compute_capability")}
    capability = max(capabilities) if capabilities else None
    if gpus and not capabilities:
        findings.append("NVML gave no compute capability for any GPU: the NVLink rate is unknown")
    present = [gpu.get("nvlink_links", gpu.get("nvlink_active_links")) for gpu in gpus]
    known = [count for count in present if count is not None]
    links = max(known) if known else (None if gpus else 0)
    for gpu, count in zip(gpus, present):
        active = gpu.get("nvlink_active_links")
        if count is None or active is None:
            findings.append(f"GPU {gpu.get('index', '?')}: NVML could not read its NVLink links")
        elif links and active < links:
            findings.append(f"GPU {gpu.get('index', '?')}: {active} of {links} NVLink links up")
    switches = [gpu.get("nvswitch") for gpu in gpus]
    nvswitch = True if any(switches) else (None if gpus and None in switches and links != 0 else False)
    if nvswitch is None:
        findings.append("NVML could not say whether the NVLinks end at NVSwitches: NVLS left out")
    generations = [gpu["pcie_gen"] for gpu in gpus if gpu.get("pcie_gen")]
    widths = [gpu["pcie_width"] for gpu in gpus if gpu.get("pcie_width")]
    values = {"compute_capability": capability, "nvlink_links": links, "nvswitch": nvswitch,
              "nvls": bool(nvswitch) and capability is not None and capability[0] >= 9,
              "pcie_gen": max(generations) if generations else None, "pcie_width": max(widths) if widths else None}
    return Topology(values, tuple(findings))


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


@dataclass(frozen=True)
class Adapters:
    rates: list[float]
    """Gb/s of each adapter NCCL would use across nodes."""
    source: str
    findings: tuple[str, ...] = ()


def network_adapters(root: Path = Path("/sys/class"), *, gpus: int = 0,
                     environ: Mapping[str, str] | None = None) -> Adapters:
    """The InfiniBand/RoCE/EFA ports NCCL would use across nodes: ACTIVE ports only (a port DOWN or INIT carries
    nothing), those NCCL_IB_HCA names where it is set, and at most one per GPU, the fastest (NCCL gives each GPU its
    nearest NIC; storage NICs and a DPU's ports come beyond). Without any, the fastest physical Ethernet interface
    (NCCL's and gloo's sockets)."""
    environ = os.environ if environ is None else environ
    wanted = hca_filter(environ.get("NCCL_IB_HCA", ""))
    ports, findings = [], []
    for rate_file in sorted((root / "infiniband").glob("*/ports/*/rate")):
        port = rate_file.parent
        device, number = port.parent.parent.name, port.name
        found = _IB_RATE.match(_read(rate_file))
        if not found or float(found.group(1)) <= 0:
            continue
        state = _read(port / "state").strip()
        if state and not state.endswith("ACTIVE"):
            findings.append(f"{device} port {number}: {state.split(':')[-1].strip() or state}, not counted")
            continue
        if wanted is not None and not wanted(device, number):
            continue
        ports.append(float(found.group(1)))
    if ports:
        kept = sorted(ports, reverse=True)[:gpus] if gpus else ports
        if len(kept) < len(ports):
            findings.append(f"{len(ports)} ACTIVE ports for {gpus} GPUs: the {gpus} fastest counted, one per GPU")
        where = f"{root}/infiniband/*/ports/*/rate and state" + (" (NCCL_IB_HCA)" if wanted is not None else "")
        return Adapters(kept, where, tuple(findings))
    speeds = []
    for interface in sorted((root / "net").glob("*")):
        if not (interface / "device").exists():  # lo, bridges, veth: no hardware behind them
            continue
        text = _read(interface / "speed")
        if text.strip().lstrip("-").isdigit() and int(text) > 0:
            speeds.append(int(text) / 1000)
    return Adapters([max(speeds)] if speeds else [],
                    f"{root}/net/*/speed (physical interfaces; no ACTIVE InfiniBand port)", tuple(findings))


def hca_filter(text: str) -> Callable[[str, str], bool] | None:
    """NCCL_IB_HCA as a predicate on (device, port), None when unset. NCCL's form (env.rst): a comma list of
    device[:port] entries matched by prefix; "^" excludes them; "=" matches names exactly."""
    text = text.strip()
    if not text:
        return None
    exclude = text.startswith("^")
    text = text.lstrip("^")
    exact = text.startswith("=")
    entries = [entry.strip().partition(":") for entry in text.lstrip("=").split(",") if entry.strip()]

    def listed(device: str, port: str) -> bool:
        return any((device == name if exact else device.startswith(name)) and (not number or number == port)
                   for name, _, number in entries)

    return (lambda device, port: not listed(device, port)) if exclude else listed


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


def _peer(port: int, size: int, repeats: int, result: Queue[list[float]]) -> None:
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
