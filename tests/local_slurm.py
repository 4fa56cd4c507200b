"""A real, throwaway Slurm cluster on this one machine (root, Debian/Ubuntu), for tests that run sbatch/srun.

Recipe and pitfalls: /work/shared/notes/slurm-local.md. All state lives in a private temp directory; the system's
/etc/slurm/slurm.conf is never touched (clients and jobs find ours through SLURM_CONF, daemons through -f).
"""

import fcntl
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

PACKAGES = ["slurmctld", "slurmd", "slurm-client", "munge"]
BINARIES = ["slurmctld", "slurmd", "sbatch", "scontrol", "munged", "munge", "unmunge"]
MUNGE_DIR = Path("/run/munge")
MUNGE_USERS = Path(tempfile.gettempdir()) / "commbench-munge-users.lock"
"""Held shared by every cluster alive on this host (two pytest workers may each run one): munged is one per host,
so it is started under this lock held alone, and stopped only by the cluster that started it when no other holds
it (else left running for the others)."""


def _which(name: str) -> str | None:
    # CI shells may lack /usr/sbin in PATH, where the daemons live.
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin:/sbin:/bin")


def unavailable_reason() -> str | None:
    """None when a local cluster can be installed/started here; else why not. Cheap: installs nothing."""
    if os.name != "posix" or os.geteuid() != 0:
        return "a local Slurm cluster needs root (daemons, munge user, apt-get)"
    if any(_which(b) is None for b in BINARIES) and _which("apt-get") is None:
        return "Slurm/munge are not installed and there is no apt-get to install them"
    return None


def ensure_installed() -> None:
    """apt-get install the Slurm and munge packages when a binary is missing; on failure apt-get update and retry."""
    if all(_which(b) for b in BINARIES):
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", *PACKAGES]
    # Without --no-install-recommends apt pulls ~40 packages (hdf5, rocm-smi...) that Slurm does not need.
    out = subprocess.run(install, env=env, capture_output=True, text=True)
    if out.returncode != 0:  # most often stale or missing package lists
        subprocess.run(["apt-get", "update"], env=env, capture_output=True, text=True)
        out = subprocess.run(install, env=env, capture_output=True, text=True)
    if out.returncode != 0 or not all(_which(b) for b in BINARIES):
        raise RuntimeError(f"installing {' '.join(PACKAGES)} failed:\n{(out.stdout + out.stderr)[-3000:]}")


def _free_ports(count: int) -> list[int]:
    # Kernel-chosen free ports, so parallel test sessions or a leftover cluster never collide.
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _munge_works() -> bool:
    cred = subprocess.run([_which("munge"), "-n"], capture_output=True)
    return cred.returncode == 0 and subprocess.run([_which("unmunge")], input=cred.stdout,
                                                   capture_output=True).returncode == 0


def _stop(proc: subprocess.Popen, timeout: float = 10) -> None:
    # We are the parent, so wait() also reaps: no zombie 'State: Z' left behind for our own PIDs.
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)


class LocalSlurm:
    """`with LocalSlurm(nodes=2) as c: subprocess.run(["sbatch", ...], env=c.env)` — one partition, nodes n1..nN."""

    def __init__(self, nodes: int = 2, workdir: Path | None = None):
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="local-slurm-"))
        self.node_names = [f"n{i}" for i in range(1, nodes + 1)]
        self.partition = "debug"
        self.conf_path = self.workdir / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf_path)}
        self._procs: list[subprocess.Popen] = []  # started by us, in start order; only these are ever stopped
        self._ctld: subprocess.Popen | None = None
        self._munge_users = None
        self._munged: subprocess.Popen | None = None

    def _run(self, *cmd: str, check: bool = False) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=30, check=check)

    def _spawn(self, name: str, cmd: list[str], **kwargs) -> subprocess.Popen:
        # Foreground daemons (-D/-F) under Popen: exact PIDs, no pid-file races; stderr goes to a file here.
        with open(self.workdir / f"{name}.out", "w") as out:
            proc = subprocess.Popen(cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True, **kwargs)
        self._procs.append(proc)
        return proc

    def _write_conf(self) -> None:
        # Real topology from slurmd -C; each node claims the whole host (oversubscribing one host is fine), but
        # RealMemory must stay below what slurmd measures or the node goes INVAL and jobs pend forever.
        fields = dict(kv.split("=", 1) for kv in self._run(_which("slurmd"), "-C", check=True).stdout.split()
                      if "=" in kv)
        fields.pop("NodeName", None)
        fields.pop("UpTime", None)
        fields["RealMemory"] = str(int(int(fields.get("RealMemory", "1000")) * 0.9))
        hw = " ".join(f"{k}={v}" for k, v in fields.items())
        host = socket.gethostname().split(".")[0]
        ctld_port, *node_ports = _free_ports(1 + len(self.node_names))
        w = self.workdir
        lines = [
            "ClusterName=commbench", f"SlurmctldHost={host}(127.0.0.1)", f"SlurmctldPort={ctld_port}",
            "SlurmUser=root", "AuthType=auth/munge", "CredType=cred/munge",
            # proctrack/cgroup leaves nodes idle but fails every step without a cgroup freezer mount.
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
            "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
            "MpiDefault=none", "MailProg=/bin/true", "ReturnToService=2",
            "MinJobAge=600",  # finished jobs stay visible to `scontrol show job` (there is no sacct here)
            "SlurmctldTimeout=10", "SlurmdTimeout=30", "InactiveLimit=0", "KillWait=5",
            "SchedulerParameters=batch_sched_delay=0",
            f"StateSaveLocation={w}/ctld-state", f"SlurmctldPidFile={w}/slurmctld.pid",
            f"SlurmctldLogFile={w}/slurmctld.log", f"PlugStackConfig={w}/plugstack.conf",
            # %n: one spool/pid/log per virtual node, so several slurmd share one host.
            f"SlurmdSpoolDir={w}/%n/spool", f"SlurmdPidFile={w}/%n/slurmd.pid", f"SlurmdLogFile={w}/%n/slurmd.log",
            *(f"NodeName={n} NodeHostname={host} NodeAddr=127.0.0.1 Port={p} {hw} State=UNKNOWN"
              for n, p in zip(self.node_names, node_ports)),
            f"PartitionName={self.partition} Nodes={','.join(self.node_names)} Default=YES MaxTime=INFINITE State=UP",
        ]
        (w / "plugstack.conf").write_text("")  # keep the system's /etc/slurm/plugstack.conf out of our jobs
        (w / "ctld-state").mkdir()
        for n in self.node_names:
            (w / n / "spool").mkdir(parents=True)
        self.conf_path.write_text("\n".join(lines) + "\n")

    def _start_munge(self) -> None:
        self._munge_users = open(MUNGE_USERS, "a")
        fcntl.flock(self._munge_users, fcntl.LOCK_EX)  # alone while munged is checked and started
        try:
            if not _munge_works():  # else someone else's munged: reuse it, never stop it
                self._munged = self._spawn_munged()
        finally:
            fcntl.flock(self._munge_users, fcntl.LOCK_SH)  # a user of munged until this cluster stops

    def _spawn_munged(self) -> subprocess.Popen:
        munge = pwd.getpwnam("munge")
        MUNGE_DIR.mkdir(mode=0o755, exist_ok=True)  # no systemd tmpfiles here to create it
        os.chown(MUNGE_DIR, munge.pw_uid, munge.pw_gid)
        os.chmod(MUNGE_DIR, 0o755)
        # munged refuses to run as root ("Logfile is insecure"); --force clears a stale socket of a dead munged.
        munged = self._spawn("munged", [_which("munged"), "-F", "--force"], user=munge.pw_uid, group=munge.pw_gid,
                             extra_groups=[])
        self._procs.remove(munged)  # stopped last, and only when no other cluster uses it (_stop_munge)
        self._wait(lambda: munged.poll() is None and _munge_works(), "munged to answer")
        return munged

    def _stop_munge(self) -> None:
        if self._munge_users is None:
            return
        try:
            if self._munged is not None:
                try:
                    fcntl.flock(self._munge_users, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    _stop(self._munged)
                except BlockingIOError:  # another cluster still uses it
                    pass
        finally:
            self._munge_users.close()
            self._munge_users, self._munged = None, None

    def _wait(self, ready, what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            dead = [p.args[0] for p in self._procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what} (exited: {dead})\n{self.logs()}")
            time.sleep(0.3)

    def _nodes_idle(self) -> bool:
        states = dict(line.split() for line in self._run("sinfo", "-h", "-N", "-o", "%N %T").stdout.splitlines())
        return all(states.get(n) == "idle" for n in self.node_names)

    @property
    def daemons(self) -> list[subprocess.Popen]:
        """The Slurm daemons this cluster started, in start order (not munged, which is the host's: _start_munge)."""
        return list(self._procs)

    def logs(self, lines: int = 30) -> str:
        """The last lines of every daemon log and captured output under the workdir (for failure messages)."""
        parts = []
        for path in sorted(self.workdir.rglob("*.log")) + sorted(self.workdir.glob("*.out")):
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {path}\n" + "\n".join(tail))
        return "\n".join(parts)

    def __enter__(self) -> "LocalSlurm":
        ensure_installed()
        try:
            self._write_conf()
            self._start_munge()
            # -i: ignore any saved state (ours is fresh anyway); -D: stay in the foreground under our Popen.
            self._ctld = self._spawn("slurmctld", [_which("slurmctld"), "-D", "-i", "-f", str(self.conf_path)])
            self._wait(lambda: " is UP" in self._run("scontrol", "ping").stdout, "slurmctld (scontrol ping)")
            for n in self.node_names:
                self._spawn(f"slurmd-{n}", [_which("slurmd"), "-D", "-N", n, "-f", str(self.conf_path)])
            self._wait(self._nodes_idle, f"nodes {self.node_names} to be idle")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:  # cancel what is left and let slurmd clean up its steps before the daemons go away
            if self._ctld is not None and self._ctld.poll() is None:
                self._run("scancel", f"--partition={self.partition}")
                deadline = time.monotonic() + 15
                while self._run("squeue", "-h", "-o", "%i").stdout.strip() and time.monotonic() < deadline:
                    time.sleep(0.3)  # squeue lists only jobs that have not finished yet
        finally:  # even when a client command hung: slurmds, then slurmctld, then munged (only if we started it)
            for proc in reversed(self._procs):
                _stop(proc)
            self._procs.clear()
            self._stop_munge()


def started(tmp_path_factory, *, nodes: int) -> "LocalSlurm":
    """A cluster of `nodes` nodes for a module's tests (use as a context manager), or the test skipped with the
    reason one cannot start here."""
    import pytest

    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    return LocalSlurm(nodes=nodes, workdir=tmp_path_factory.mktemp(f"slurm{nodes}"))
