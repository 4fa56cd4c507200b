"""Environment axes (--env-axis NAME=V1,V2, --nccl-algo, --nccl-proto) and the tuner options: each combination is its
own launch and its rows are keyed by env; compare joins rows of the same env; a combination the backend refuses
(its launch wrote one of environments.REFUSAL_MESSAGES) becomes rows noted "not available: <its message>", not a
failed sweep, while any other failure (a crash) fails the sweep naming the combination; an NCCL_* axis on gloo is
warned about.

Real sweeps on gloo/CPU with 2 ranks: OMP_NUM_THREADS=1,2 is a variable torchrun's ranks read; GLOO_SOCKET_IFNAME
naming an interface that does not exist is one gloo refuses when it forms the process group; COMMBENCH_FAULT kills
a rank (commbench/faults.py). The classifier's tests read real message lines: from this machine's runs (torch 2.13's
gloo), from public logs, and built from NCCL's source where no log was at hand; each says where it comes from."""

import json
import re
import subprocess
import sys

import pytest

from commbench import store
from commbench.benches.collective import KIND as COLLECTIVE
from commbench.errors import CommbenchError
from commbench.execution import environments
from commbench.names import NOT_AVAILABLE
from commbench.sweep import env_axes
from tests.conftest import commbench_env
from tests.in_process import commbench_here
from tests.refusals import assert_refused, invoke

SWEEP = ("sweep", "-c", "all_reduce", "--sizes", "64K,256K", "--iters", "6", "--warmup", "1", "--backend", "gloo",
         "--device", "cpu")
MISSING_INTERFACE = "commbench-no-such-if0"


def _sweep(tmp_path, run_id: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    return commbench_here(*SWEEP, *args, "--out", str(tmp_path), "--run-id", run_id, env=env)


@pytest.mark.no_process
def test_axes_parse_into_their_cross_product_with_sorted_labels():
    axes = env_axes.with_shortcuts(env_axes.parse_axes(("OMP_NUM_THREADS=1", "2", "NCCL_DEBUG=WARN")),
                                   nccl_algo=("ring", "tree"), nccl_proto=())
    assert axes == (("OMP_NUM_THREADS", ("1", "2")), ("NCCL_DEBUG", ("WARN",)), ("NCCL_ALGO", ("ring", "tree")))
    combinations = env_axes.combinations(axes)
    assert len(combinations) == 4 and combinations[0] == {"OMP_NUM_THREADS": "1", "NCCL_DEBUG": "WARN",
                                                          "NCCL_ALGO": "ring"}
    label = env_axes.label_of(combinations[-1])
    assert label == "NCCL_ALGO=tree NCCL_DEBUG=WARN OMP_NUM_THREADS=2"
    assert env_axes.parse_label(label) == combinations[-1] and env_axes.parse_label("") == {}
    assert env_axes.combinations(()) == [{}] and env_axes.nccl_names(axes) == ["NCCL_DEBUG", "NCCL_ALGO"]


@pytest.mark.no_process
@pytest.mark.parametrize("items, fragment", [
    (("2",), "names no variable"), (("1BAD=x",), "not an environment variable name"),
    (("A=1", "A=2"), "given twice"), (("A=1", "1"), "A=1 is given twice"), (("A=",), "empty value"),
    (("A=x y",), "without spaces")])
def test_bad_axes_are_refused_naming_the_fix(items, fragment):
    with pytest.raises(CommbenchError, match=fragment):
        env_axes.parse_axes(items)


@pytest.mark.no_process
def test_a_shortcut_beside_its_own_axis_is_refused():
    with pytest.raises(CommbenchError, match="--nccl-algo and --env-axis NCCL_ALGO"):
        env_axes.with_shortcuts((("NCCL_ALGO", ("ring",)),), nccl_algo=("tree",), nccl_proto=())


@pytest.mark.no_process
def test_bad_env_and_tuner_options_are_refused_in_one_line(tmp_path):
    out = tmp_path / "out"
    for args, fragment in ((["--env-axis", "=1,2"], "--env-axis"),
                           (["--env-axis", "A=1", "--env-axis", "A=2"], "given twice"),
                           (["--nccl-proto", "ll", "--env-axis", "NCCL_PROTO=simple"], "--nccl-proto"),
                           (["--tuner-config", str(tmp_path / "absent.conf")], "--tuner-config"),
                           (["--tuner-plugin", str(tmp_path / "lib.so")], "without --tuner-config")):
        assert_refused(invoke([*SWEEP, *args, "--out", str(out)]), fragment=fragment, left_empty=[out])


@pytest.mark.distributed
def test_inside_a_job_environment_axes_are_refused(tmp_path):
    job = commbench_env(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="29556")
    completed = subprocess.run([sys.executable, "-m", "commbench", *SWEEP, "--env-axis", "OMP_NUM_THREADS=1,2",
                                "--out", str(tmp_path / "out")], env=job, capture_output=True, text=True, timeout=120)
    assert completed.returncode == 2 and completed.stderr.count("\n") == 1, completed.stderr
    assert "inside torchrun or srun" in completed.stderr and not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def threads_runs(tmp_path_factory):
    """Two sweeps over OMP_NUM_THREADS=1,2 (a baseline and a new side for compare)."""
    out = tmp_path_factory.mktemp("env-axes")
    printed = {}
    for run_id in ("a", "b"):
        completed = _sweep(out, run_id, "--env-axis", "OMP_NUM_THREADS=1,2")
        assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
        printed[run_id] = completed
    return out, printed


@pytest.mark.distributed
def test_each_combination_is_its_own_launch_with_rows_keyed_by_env(threads_runs):
    out, printed = threads_runs
    results = store.read_results(out / "a", COLLECTIVE)
    assert sorted(results["env"].unique()) == ["OMP_NUM_THREADS=1", "OMP_NUM_THREADS=2"]
    for _, rows in results.groupby("env"):
        assert sorted(rows["size_bytes"]) == [64 * 1024, 256 * 1024] and (rows["n_wrong"] == 0).all()
    meta = store.read_meta(out / "a")
    assert meta["status"] == store.STATUS_COMPLETE
    assert meta["env_combinations"] == ["OMP_NUM_THREADS=1", "OMP_NUM_THREADS=2"]
    samples = store.read_samples(out / "a", COLLECTIVE)
    assert set(samples["env"]) == set(results["env"])
    text = printed["a"].stdout
    assert "# env: OMP_NUM_THREADS=1" in text and "# env: OMP_NUM_THREADS=2" in text


@pytest.mark.distributed
def test_compare_joins_rows_of_the_same_env(threads_runs, commbench_cli):
    out, _ = threads_runs
    outcome = commbench_cli("compare", str(out / "a"), str(out / "b"), "--json", "--fail", "busbw:1000")
    document = json.loads(outcome.stdout)
    rows = {entry["row"] for entry in document["entries"] if entry["metric"] == "busbw"}
    for threads in ("1", "2"):  # each env's rows matched with the same env's on the other side
        assert any(f"[OMP_NUM_THREADS={threads}]" in row for row in rows), rows
    assert not any("only in" in str(note) for note in document.get("notes", [])), document.get("notes")


@pytest.mark.distributed
def test_a_refused_combination_becomes_noted_rows_not_a_failed_sweep(tmp_path):
    completed = _sweep(tmp_path, "refused", "--env-axis", f"GLOO_SOCKET_IFNAME={MISSING_INTERFACE},lo")
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    results = store.read_results(tmp_path / "refused", COLLECTIVE)
    refused = results[results["env"] == f"GLOO_SOCKET_IFNAME={MISSING_INTERFACE}"]
    measured = results[results["env"] == "GLOO_SOCKET_IFNAME=lo"]
    assert len(refused) == len(measured) == 2
    assert refused["note"].str.startswith(NOT_AVAILABLE).all() and refused["busbw_gbps"].isna().all()
    assert (measured["n_wrong"] == 0).all() and (measured["busbw_gbps"] > 0).all()
    meta = store.read_meta(tmp_path / "refused")
    assert meta["status"] == store.STATUS_COMPLETE and meta["unavailable"][0]["env"] == {
        "GLOO_SOCKET_IFNAME": MISSING_INTERFACE}
    reason = meta["unavailable"][0]["reason"]
    assert MISSING_INTERFACE in reason or "interface" in reason.lower() or "device" in reason.lower(), reason
    assert f"{NOT_AVAILABLE}{reason}" in refused["note"].iloc[0]
    assert f"# env: GLOO_SOCKET_IFNAME={MISSING_INTERFACE}: 2 point(s) {NOT_AVAILABLE}" in completed.stdout


@pytest.mark.distributed
def test_a_crash_under_an_env_axis_fails_the_sweep_naming_the_combination(tmp_path):
    # rank 1 kills itself before point 2, the first point of the second combination: its launch stores no row, as a
    # refused one would, but it wrote no refusal message
    completed = _sweep(tmp_path, "crash", "--env-axis", "OMP_NUM_THREADS=1,2", COMMBENCH_FAULT="kill:1:2")
    assert completed.returncode == 3, completed.stdout[-3000:] + completed.stderr[-3000:]
    meta = store.read_meta(tmp_path / "crash")
    assert meta["status"] == store.STATUS_FAILED and "unavailable" not in meta, meta
    assert meta["reason"].startswith("combination OMP_NUM_THREADS=2 failed: rank 1 exited with code -9 (SIGKILL)"), \
        meta["reason"]
    assert "sweep failed: combination OMP_NUM_THREADS=2 failed" in completed.stderr, completed.stderr
    results = store.read_results(tmp_path / "crash", COLLECTIVE)  # the first combination's rows are kept
    assert list(results["env"]) == ["OMP_NUM_THREADS=1"] * 2 and (results["busbw_gbps"] > 0).all()
    assert not results["note"].astype(str).str.startswith(NOT_AVAILABLE).any()
    # tune reads no failed combination as a refusal: it refuses the run
    assert_refused(invoke(["tune", str(tmp_path / "crash")]),
                   fragment="did not complete (status failed: combination OMP_NUM_THREADS=2 failed")


REFUSED_LINES = [  # (a line a launch wrote, the part of it that makes it a refusal)
    # this machine, torch 2.13's gloo, GLOO_SOCKET_IFNAME=commbench-no-such-if0 (gloo/transport/tcp/device.cc)
    ("[rank1]: RuntimeError: [enforce fail at /__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/device.cc:84] "
     "ifa != nullptr. Unable to find address for: commbench-no-such-if0", "Unable to find address for"),
    # this machine, torch 2.13, GLOO_DEVICE_TRANSPORT=bogus (torch's GlooDeviceFactory)
    ("RuntimeError: makeDeviceForHostname(): unsupported gloo device", "unsupported gloo device"),
    # a public report of NCCL 2.28.9 under NCCL_ALGO=CollNetChain (NCCL's enqueue.cc WARN)
    ("NCCL WARN Error : no algorithm/protocol available for function AllReduce with datatype ncclFloat32. NCCL_ALGO "
     "was set to CollNetChain.", "no algorithm/protocol available"),
    # a public DeepSpeed log under NCCL_SOCKET_IFNAME=eth0 on a machine without it (NCCL's bootstrap.cc WARN)
    ("rcvlab-A6000x4-0:223645:223645 [0] bootstrap.cc:45 NCCL WARN Bootstrap : no socket interface found",
     "no socket interface found"),
    # NCCL's parseList WARN format, with the value of a public report's NCCL_ALGO=allgather:nvls,reducescatter:nvls
    ('NCCL WARN Unrecognized element token "reducescatter" when parsing "allgather:nvls,reducescatter:nvls"',
     "Unrecognized element token"),
    ('NCCL WARN Unrecognized prefix token "bad_prefix" when parsing "bad_prefix:LL"', "Unrecognized prefix token"),
    # a public Slurm script's note of NCCL_NET naming a plugin the machine lacked (NCCL's net.cc WARN)
    ("Error: network AWS Libfabric not found.", "network AWS Libfabric not found"),
    # NVIDIA/nccl issue 1241's title: torch's first line for ncclInvalidUsage, as meta.json's reason holds it
    ("DistBackendError: NCCL error in: /opt/pytorch/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1287, "
     "invalid usage, NCCL version 2.17.1", "invalid usage"),
    # torch's detail line for ncclInvalidUsage (c10d NCCLUtils), alone as an older NCCL without "Last error" leaves it
    ("ncclInvalidUsage: This usually reflects invalid usage of NCCL library.", "ncclInvalidUsage"),
]

CRASH_LINES = [
    # this machine: what rank 0 and torchrun wrote when COMMBENCH_FAULT killed rank 1 (gloo's pair.cc)
    "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
    "[127.0.0.1]:5332. This is typically caused by a remote worker crashing. Check the logs of the remote worker "
    "before reporting an error.",
    "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
    "[127.0.0.1]:9448: Connection reset by peer. This is typically caused by a remote worker hanging or bugs in the "
    "application.",
    "SignalException: Process 8797 got signal: 15",
    "  exitcode  : -9 (pid: 8798)  (SIGKILL)",
    "  traceback : Signal 9 (SIGKILL) received by PID 8798",
    "  traceback : Signal 11 (SIGSEGV) received by PID 8798",
    "ZeroDivisionError: float division by zero",
    # a public report of torch with NCCL 2.11.4: a peer that went away
    "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1191, unhandled system error, "
    "NCCL version 2.11.4",
    "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.",
    "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
    # a public report (NCCL 2.14.3): ncclInvalidArgument is what the caller passed, not a setting
    "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:219, invalid "
    "argument, NCCL version 2.14.3",
    "ncclInvalidArgument: Invalid value for an argument.",
    "Invalid config blocking attribute value -2147483648",
]


@pytest.mark.no_process
@pytest.mark.parametrize("line, message", REFUSED_LINES)
def test_a_backends_refusal_message_makes_the_combination_not_available(line, message):
    found = environments.refusal_in(["W1205 15:21:40.374000 8778 torch/multiprocessing/spawn.py:165] Terminating "
                                     "process 8797 via signal SIGTERM", line])
    assert found is not None and message in found and not found.startswith("[rank"), found


@pytest.mark.no_process
@pytest.mark.parametrize("line", CRASH_LINES)
def test_any_other_failure_is_a_crash(line):
    assert environments.refusal_in([line]) is None


@pytest.mark.no_process
def test_every_listed_refusal_message_has_a_real_line_and_a_crash_log_has_none():
    for message in environments.REFUSAL_MESSAGES:
        assert any(re.search(message.pattern, line) for line, _ in REFUSED_LINES), message
        assert message.backend in ("nccl", "gloo") and message.where, message
    assert environments.refusal_in(CRASH_LINES) is None


@pytest.mark.no_process
def test_the_most_specific_message_names_the_refusal():
    # a public report's lines, as torch printed them for NCCL_NET=gIB on a machine without that network: NCCL's own
    # words win over torch's detail line before them
    lines = ["torch.distributed.DistBackendError: NCCL error ...",
             "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.", "Last error:",
             "Error: network gIB not found."]
    assert environments.refusal_in(lines) == "Error: network gIB not found."
    assert environments.refusal_in(lines[:2]) == lines[1]  # without "Last error": torch's detail line


@pytest.mark.distributed
def test_an_nccl_axis_and_a_tuner_on_gloo_are_warned_about_and_recorded(tmp_path):
    config = tmp_path / "nccl_tuner.conf"
    config.write_text("allreduce,0,65536,ring,simple,-1,-1,-1\n")
    completed = _sweep(tmp_path, "nccl", "--nccl-algo", "ring,tree", "--tuner-config", str(config))
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    assert "NCCL_ALGO, NCCL_TUNER_CONFIG_FILE on a gloo run: only NCCL reads them" in completed.stderr, \
        completed.stderr
    meta = store.read_meta(tmp_path / "nccl")
    assert meta["tuner"]["config"] == str(config.resolve()) and len(meta["tuner"]["config_sha256"]) == 64
    assert meta["env"].get("NCCL_TUNER_CONFIG_FILE") == str(config.resolve())  # what the ranks were given
    results = store.read_results(tmp_path / "nccl", COLLECTIVE)
    assert sorted(results["env"].unique()) == ["NCCL_ALGO=ring", "NCCL_ALGO=tree"]
    # tune finds nothing to write: gloo ignores NCCL_ALGO, so the two settings measure the same thing
    tuned = commbench_here("tune", str(tmp_path / "nccl"), "--out", str(tmp_path / "tuned.conf"), "--json")
    assert tuned.returncode == 0, tuned.stderr
    document = json.loads(tuned.stdout)
    assert document["lines"] == [] and len(document["no_line"]) == 2, document["no_line"]
    for decision in document["groups"][0]["decisions"]:  # a tie, or a margin gloo's noise made, which NCCL did not
        assert decision["outcome"] == "tie" or "gloo" in decision["why_no_line"], decision
    assert not [line for line in (tmp_path / "tuned.conf").read_text().splitlines() if not line.startswith("#")]


@pytest.mark.no_process
def test_a_suite_takes_the_axes_as_keys(tmp_path):
    from commbench.machine import Machine
    from commbench.suite.load import load_suite

    suite = tmp_path / "axes.toml"
    suite.write_text('backend = "gloo"\ndevice = "cpu"\nnproc = 2\n\n[[bench]]\nname = "algos"\nkind = "sweep"\n'
                     'collective = "all_reduce"\nsizes = "1M"\nnccl-algo = ["ring", "tree"]\n'
                     'env-axis = ["OMP_NUM_THREADS=1,2"]\n')
    with pytest.warns(Warning, match="NCCL_ALGO on a gloo run"):
        loaded = load_suite(suite, Machine.here())
    (bench,) = [item.bench for item in loaded.benches]
    assert [variables for variables, _ in bench.environments] == [
        {"OMP_NUM_THREADS": "1", "NCCL_ALGO": "ring"}, {"OMP_NUM_THREADS": "1", "NCCL_ALGO": "tree"},
        {"OMP_NUM_THREADS": "2", "NCCL_ALGO": "ring"}, {"OMP_NUM_THREADS": "2", "NCCL_ALGO": "tree"}]
    assert sorted(index for _, indexes in bench.environments for index in indexes) == list(range(len(bench.points)))
