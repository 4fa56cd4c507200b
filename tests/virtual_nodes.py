"""Several "nodes" on this host: one torchrun launch per node (--nnodes N, one rank each, c10d rendezvous), each
with its own COMMBENCH_NODE_NAME, running a commbench command in place as a multi-node job would."""

import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import commbench_env
from tests.shaped_fabric import RENDEZVOUS_PORT, Fabric, Shaping, fabric


@dataclass
class NodesRun:
    codes: list[int]
    """Each node's torchrun exit code, by node."""
    outputs: list[str]
    run_dir: Path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_on_nodes(tmp_path: Path, nodes: list[str], *args: str, run_id: str = "run", env: dict | None = None,
                 timeout: float = 240, preexec: dict | None = None, shaping: Shaping | None = None) -> NodesRun:
    """preexec: node → a function its torchrun launch runs before exec (e.g. tests/cpu_quota.py's enter). shaping:
    each node in a network namespace of its own, its slow nodes and links real (tests/shaped_fabric.py); without
    it every node meets the others on this host's loopback."""
    if shaping is None:
        return _launch(tmp_path, nodes, args, run_id, env or {}, timeout, preexec or {}, None)
    with fabric(tmp_path, nodes, shaping) as shaped:
        return _launch(tmp_path, nodes, args, run_id, {**(env or {}), "GLOO_SOCKET_IFNAME": "eth0"}, timeout,
                       preexec or {}, shaped)


def _launch(tmp_path: Path, nodes: list[str], args: tuple[str, ...], run_id: str, env: dict, timeout: float,
            preexec: dict, shaped: Fabric | None) -> NodesRun:
    endpoint = f"127.0.0.1:{_free_port()}" if shaped is None else f"{shaped.address(nodes[0])}:{RENDEZVOUS_PORT}"
    launches, logs = [], []
    for node in nodes:
        local = [] if shaped is None else ["--local-addr", shaped.address(node)]
        command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(len(nodes)), "--nproc-per-node",
                   "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", run_id, *local,
                   "--max-restarts", "0", "-m", "commbench", *args, "--backend", "gloo", "--device", "cpu",
                   "--out", str(tmp_path / "results"), "--run-id", run_id]
        logs.append(tempfile.TemporaryFile(mode="w+"))  # a file, not a pipe: an unread full pipe blocks its writer
        launches.append(subprocess.Popen(command if shaped is None else shaped.wrap(node, command), cwd=tmp_path,
                                         env=commbench_env(COMMBENCH_NODE_NAME=node, **env),
                                         stdout=logs[-1], stderr=subprocess.STDOUT, text=True,
                                         preexec_fn=preexec.get(node)))
    try:
        codes = [launch.wait(timeout=timeout) for launch in launches]
    finally:
        for launch in launches:
            if launch.poll() is None:
                launch.kill()
                launch.wait()
    outputs = []
    for log in logs:
        log.seek(0)
        outputs.append(log.read())
        log.close()
    return NodesRun(codes, outputs, tmp_path / "results" / run_id)
