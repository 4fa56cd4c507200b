"""Several "nodes" on this host: one torchrun launch per node (--nnodes N, one rank each, c10d rendezvous), each
with its own COMMBENCH_NODE_NAME, running a commbench command in place as a multi-node job would."""

import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import commbench_env


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
                 timeout: float = 240, preexec: dict | None = None) -> NodesRun:
    """preexec: node → a function its torchrun launch runs before exec (e.g. tests/cpu_quota.py's enter)."""
    port = _free_port()
    launches, logs = [], []
    for node in nodes:
        command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(len(nodes)), "--nproc-per-node",
                   "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", run_id,
                   "--max-restarts", "0", "-m", "commbench", *args, "--backend", "gloo", "--device", "cpu",
                   "--out", str(tmp_path / "results"), "--run-id", run_id]
        logs.append(tempfile.TemporaryFile(mode="w+"))  # a file, not a pipe: an unread full pipe blocks its writer
        launches.append(subprocess.Popen(command, cwd=tmp_path, env=commbench_env(COMMBENCH_NODE_NAME=node,
                                                                                  **(env or {})),
                                         stdout=logs[-1], stderr=subprocess.STDOUT, text=True,
                                         preexec_fn=(preexec or {}).get(node)))
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
