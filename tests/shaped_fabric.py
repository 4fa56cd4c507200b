"""A real network between "nodes" of this host, with real slow nodes and slow links
(../shared/notes/shaped-network.md): each node is a network namespace with one address (10.77.0.N on its eth0),
joined to the others by a bridge in a namespace of its own; a node's torchrun launch runs inside its namespace, with
its own hostname (UTS namespace) and /etc/hosts (mount namespace), as on a machine of its own. Nothing leaves the
host: the namespaces have no route out.

A slow node is a token bucket (tc tbf) on both directions of its port: every byte to or from it crosses at the
given rate. A slow link is an htb class on each end's egress whose u32 filter matches the other end's address: only
the traffic between those two nodes crosses at the rate. Unlike a fault injected into the timed code, the slowdown is
a bandwidth, so it costs every transfer the same absolute time whatever else the machine runs: at 200 Mbit/s a
1 MiB transfer takes 42 ms, against the ~4 ms a rank waits for a core shared with a busy loop (the noise a
proportional fault drowned in, docs/measurements.md).

Needs root, iproute2's `ip` and `tc`, and unshare(1); `unavailable()` says why not where they are missing."""

import functools
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

SUBNET = "10.77.0"
FAST = "10gbit"
"""The rate of an htb class left unshaped: far above what two ranks on this host move."""
RENDEZVOUS_PORT = 29400
"""Free in every fresh namespace: the first node's address holds the c10d rendezvous."""


@dataclass(frozen=True)
class Shaping:
    """Which nodes and links are slow, at which tc rate (e.g. "200mbit")."""

    slow_nodes: dict[str, str] = field(default_factory=dict)
    slow_links: dict[tuple[str, str], str] = field(default_factory=dict)


@dataclass(frozen=True)
class Fabric:
    """The namespaces made for one run: node name → (namespace, address)."""

    nodes: dict[str, tuple[str, str]]
    hosts_file: Path

    def address(self, node: str) -> str:
        return self.nodes[node][1]

    def wrap(self, node: str, command: list[str]) -> list[str]:
        """command run inside node's namespaces, with the node's hostname and the fabric's /etc/hosts. The shell
        line is fixed; the hosts file, the node name and the command reach it as arguments, never as code."""
        namespace = self.nodes[node][0]
        return ["ip", "netns", "exec", namespace, "unshare", "--uts", "--mount", "--", "sh", "-c",
                'mount --bind "$0" /etc/hosts && hostname "$1" && shift && exec "$@"',
                str(self.hosts_file), node, *command]


@functools.cache  # asked by several modules' skip marks at collection: one probe per process
def unavailable() -> str | None:
    """Why namespaced nodes cannot be made here, or None when they can."""
    missing = [tool for tool in ("ip", "tc", "unshare") if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} not found (iproute2, util-linux)"
    probe = f"cbprobe{uuid.uuid4().hex[:8]}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` refused: {made.stderr.strip()} (needs root and network namespaces)"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def _tc(namespace: str, *args: str) -> None:
    subprocess.run(["tc", "-n", namespace, *args], check=True, capture_output=True, text=True)


def _slow_port(namespace: str, device: str, rate: str) -> None:
    # a small burst: a 1 MiB transfer must not fit in the bucket's first burst at line rate
    _tc(namespace, "qdisc", "add", "dev", device, "root", "tbf", "rate", rate, "burst", "32kb", "latency", "1s")


def _slow_to(namespace: str, device: str, rates: dict[str, str]) -> None:
    """Egress of device: to each address of rates at its rate, everything else at FAST."""
    _tc(namespace, "qdisc", "add", "dev", device, "root", "handle", "1:", "htb", "default", "10", "r2q", "1000")
    _tc(namespace, "class", "add", "dev", device, "parent", "1:", "classid", "1:10", "htb", "rate", FAST)
    for index, (address, rate) in enumerate(sorted(rates.items()), start=20):
        _tc(namespace, "class", "add", "dev", device, "parent", "1:", "classid", f"1:{index}", "htb", "rate", rate)
        _tc(namespace, "filter", "add", "dev", device, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
            "match", "ip", "dst", f"{address}/32", "flowid", f"1:{index}")


@contextmanager
def fabric(folder: Path, nodes: list[str], shaping: Shaping = Shaping()) -> Iterator[Fabric]:
    """The namespaces of nodes, joined by a bridge and shaped; all deleted on the way out (deleting a namespace
    deletes its end of every veth pair)."""
    tag = uuid.uuid4().hex[:8]  # two pytest workers may each build one
    switch = f"cbsw{tag}"
    made = [switch]
    members = {node: (f"cb{tag}n{index}", f"{SUBNET}.{index}") for index, node in enumerate(nodes, start=1)}
    hosts_file = folder / "hosts"
    hosts_file.write_text("127.0.0.1 localhost\n" + "".join(f"{address} {node}\n"
                                                             for node, (_, address) in members.items()))
    try:
        _ip("netns", "add", switch)
        _ip("-n", switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", switch, "link", "set", "br0", "up")
        for index, (node, (namespace, address)) in enumerate(members.items(), start=1):
            _ip("netns", "add", namespace)
            made.append(namespace)
            _ip("-n", switch, "link", "add", f"p{index}", "type", "veth", "peer", "name", "eth0", "netns", namespace)
            _ip("-n", switch, "link", "set", f"p{index}", "master", "br0")
            _ip("-n", switch, "link", "set", f"p{index}", "up")
            _ip("-n", namespace, "addr", "add", f"{address}/24", "dev", "eth0")
            _ip("-n", namespace, "link", "set", "eth0", "up")
            _ip("-n", namespace, "link", "set", "lo", "up")
            if node in shaping.slow_nodes:  # both ways: the node's own egress and the bridge port's toward it
                _slow_port(namespace, "eth0", shaping.slow_nodes[node])
                _slow_port(switch, f"p{index}", shaping.slow_nodes[node])
        for node in nodes:
            rates = {members[b if a == node else a][1]: rate
                     for (a, b), rate in shaping.slow_links.items() if node in (a, b)}
            if rates:
                _slow_to(members[node][0], "eth0", rates)
        yield Fabric(members, hosts_file)
    finally:
        for namespace in reversed(made):
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
