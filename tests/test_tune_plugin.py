"""The config `commbench tune` writes is read by NVIDIA's example tuner plugin itself: plugin.c from
../shared/vendor/nccl-tuner-example (never copied into this repository) is built with gcc into a temporary folder,
loaded with ctypes, initialised as NCCL initialises it (NCCL_TUNER_CONFIG_FILE set, nRanks, nNodes) and asked, as
NCCL asks it, for every (collective, size) the runs measured: getCollInfo with the cost table NCCL passes, a
contiguous float[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS] (7 × 3) cast to float**, every entry 1.0 here. The plugin
marks the entry it prefers with cost 0.0: that must be exactly the algorithm/protocol the export intended, and no
entry may change where the export left the size to NCCL (a tie, or NCCL's own choice fastest)."""

import ctypes
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.refusals import invoke
from tests.test_tune import KIB, MAX_BYTES, MIB, import_real_logs, sizes_from, synthetic_run

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
VENDOR = SHARED / "vendor" / "nccl-tuner-example"
# nccl/tuner.h: ncclFunc_t, NCCL_ALGO_*, NCCL_PROTO_*
FUNCTIONS = {"broadcast": 0, "reduce": 1, "all_gather": 2, "reduce_scatter": 3, "all_reduce": 4}
ALGORITHMS = {"tree": 0, "ring": 1, "collnet_direct": 2, "collnet_chain": 3, "nvls": 4, "nvls_tree": 5, "pat": 6}
PROTOCOLS = {"ll": 0, "ll128": 1, "simple": 2}
NUM_ALGORITHMS, NUM_PROTOCOLS = 7, 3

_INIT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint64, ctypes.c_size_t,
                         ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_GET_COLL_INFO = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_int,
                                  ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                  ctypes.POINTER(ctypes.c_int))
_FINALIZE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)


class _TunerV5(ctypes.Structure):
    """ncclTuner_v5_t: name, init, getCollInfo, finalize."""

    _fields_ = [("name", ctypes.c_char_p), ("init", _INIT), ("getCollInfo", _GET_COLL_INFO), ("finalize", _FINALIZE)]


@pytest.fixture(scope="module")
def plugin_library(tmp_path_factory) -> Path:
    """libnccl-tuner-example.so built from the vendored plugin.c, as its Makefile builds it."""
    if not (VENDOR / "plugin.c").is_file():
        pytest.skip(f"NVIDIA's example tuner plugin is not at {VENDOR} (no ../shared beside the repository): the "
                    "exported config cannot be read by the plugin here")
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not installed: NVIDIA's example tuner plugin cannot be built here")
    library = tmp_path_factory.mktemp("plugin") / "libnccl-tuner-example.so"
    built = subprocess.run([gcc, "-shared", "-fPIC", f"-I{VENDOR / 'nccl'}", str(VENDOR / "plugin.c"), "-o",
                            str(library)], capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr
    return library


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory) -> list[Path]:
    """The real RTX 5090 logs of tests/data/imports/nccl-tests-algo, imported with their --env."""
    return import_real_logs(tmp_path_factory.mktemp("real") / "results")


class ExamplePlugin:
    """The plugin, initialised for one communicator as NCCL initialises it."""

    def __init__(self, library: Path, config: Path, monkeypatch, *, n_ranks: int, n_nodes: int):
        monkeypatch.setenv("NCCL_TUNER_CONFIG_FILE", str(config))  # read by the plugin's getenv in init
        self._tuner = _TunerV5.in_dll(ctypes.CDLL(str(library)), "ncclTunerPlugin_v5")
        assert self._tuner.name == b"Example"
        self._context = ctypes.c_void_p()
        # no logger, NVL domain info or tuning constants: the plugin checks each for NULL
        assert self._tuner.init(ctypes.byref(self._context), 0, n_ranks, n_nodes, None, None, None) == 0

    def preferred(self, collective: str, size: int) -> tuple[set[tuple[str, str]], int]:
        """The (algorithm, protocol) entries the plugin set to cost 0 for this call, and the channel count it wrote;
        every other entry must still be 1.0."""
        table = ((ctypes.c_float * NUM_PROTOCOLS) * NUM_ALGORITHMS)()
        for algorithm in range(NUM_ALGORITHMS):
            for protocol in range(NUM_PROTOCOLS):
                table[algorithm][protocol] = 1.0
        channels = ctypes.c_int(-99)
        code = self._tuner.getCollInfo(self._context, FUNCTIONS[collective], size, 1,
                                       ctypes.cast(table, ctypes.c_void_p), NUM_ALGORITHMS, NUM_PROTOCOLS, 0,
                                       ctypes.byref(channels))
        assert code == 0
        names = {index: name for name, index in ALGORITHMS.items()}, {index: name for name, index in PROTOCOLS.items()}
        zeros = {(names[0][a], names[1][p]) for a in range(NUM_ALGORITHMS) for p in range(NUM_PROTOCOLS)
                 if table[a][p] == 0.0}
        assert all(table[a][p] in (0.0, 1.0) for a in range(NUM_ALGORITHMS) for p in range(NUM_PROTOCOLS))
        return zeros, channels.value

    def close(self) -> None:
        assert self._tuner.finalize(self._context) == 0


def intended(document: dict, collective: str, size: int, n_ranks: int, n_nodes: int) -> set[tuple[str, str]]:
    """What the export meant the plugin to choose for this call: the one line that covers it, or nothing."""
    plugin = {"all_reduce": "allreduce", "all_gather": "allgather", "reduce_scatter": "reducescatter"}.get(
        collective, collective)
    covering = [line for line in document["lines"] if line["collective"] == plugin
                and line["min_bytes"] <= size <= line["max_bytes"] and line["nNodes"] in (-1, n_nodes)
                and line["nRanks"] in (-1, n_ranks)]
    assert len(covering) <= 1, covering  # no two lines overlap
    return {(line["algorithm"], line["protocol"]) for line in covering}


def export(tmp_path: Path, *runs, options=()) -> tuple[Path, dict]:
    config = tmp_path / "nccl_tuner.conf"
    result = invoke(["tune", *map(str, runs), "--out", str(config), "--json", *options])
    assert result.exit_code == 0, result.output + result.stderr
    return config, json.loads(result.stdout)


def test_the_plugin_reads_the_export_of_the_real_logs_as_intended(plugin_library, real_runs, tmp_path,
                                                                   monkeypatch):
    config, document = export(tmp_path, *real_runs)
    plugin = ExamplePlugin(plugin_library, config, monkeypatch, n_ranks=2, n_nodes=1)  # the logs: 2 ranks, host lab
    calls = {(group["collective"], entry["size_bytes"]) for group in document["groups"]
             for entry in group["decisions"]}
    chosen = {}
    for collective, size in sorted(calls):
        zeros, channels = plugin.preferred(collective, size)
        assert zeros == intended(document, collective, size, 2, 1), (collective, size)
        assert channels == 1  # plugin.c writes 1 before matching, and a -1 line leaves it (docs/tune.md)
        chosen[(collective, size)] = zeros
    plugin.close()
    assert len(calls) == 25 + 18  # every size of all_reduce and of broadcast
    assert {key for key, zeros in chosen.items() if zeros} == {("broadcast", 16 * KIB), ("broadcast", 2 * MIB)}
    assert chosen[("broadcast", 16 * KIB)] == {("ring", "simple")}


def test_the_plugin_reads_every_collective_algorithm_and_protocol_name_and_the_range_ends(plugin_library, tmp_path,
                                                                                           monkeypatch):
    """Rows made up here (not measurements), one winner per collective with the names NCCL users spell, a tie at
    8 KiB between two winning ranges: the plugin must land on each intended entry, at each range's first and last
    byte, and on nothing in the tie's range."""
    winners = {"all_reduce": "NCCL_ALGO=NVLSTree NCCL_PROTO=LL128", "all_gather": "NCCL_ALGO=PAT NCCL_PROTO=LL",
               "reduce_scatter": "NCCL_ALGO=CollnetDirect NCCL_PROTO=Simple", "broadcast": "NCCL_PROTO=LL128",
               "reduce": "NCCL_ALGO=ring NCCL_PROTO=LL"}
    points = []
    for collective, winner in winners.items():
        for size in sizes_from(KIB, 64 * KIB):
            # broadcast and reduce measured with NCCL_PROTO only (ring is written for them), the others with both
            loser = "NCCL_PROTO=Simple" if collective in ("broadcast", "reduce") else "NCCL_ALGO=Tree NCCL_PROTO=Simple"
            # below 8 KiB the named winner, above it the other setting: two lines per collective, with a tie at
            # 8 KiB between them, except for all_gather, whose two lines meet (the other setting wins from 8 KiB)
            tie = size == 8 * KIB and collective != "all_gather"
            first, second = (10.0, 10.1) if tie else (10.0, 20.0) if size < 8 * KIB else (20.0, 10.0)
            points += [{"collective": collective, "env": winner, "size": size, "time": first},
                       {"collective": collective, "env": loser, "size": size, "time": second}]
    config, document = export(tmp_path, synthetic_run(tmp_path, "names", points))
    assert len(document["lines"]) == 2 * len(winners)
    plugin = ExamplePlugin(plugin_library, config, monkeypatch, n_ranks=2, n_nodes=1)
    probes = {(line_collective, size) for line in document["lines"]
              for line_collective in [next(c for c in winners if c.replace("_", "") == line["collective"])]
              for size in (line["min_bytes"], line["max_bytes"], line["max_bytes"] + 1, max(line["min_bytes"] - 1, 0),
                           *line["measured_sizes"]) if size <= MAX_BYTES}
    probes |= {(collective, 8 * KIB) for collective in winners}
    assert len(probes) > 50
    for collective, size in sorted(probes):
        assert plugin.preferred(collective, size)[0] == intended(document, collective, size, 2, 1), (collective, size)
    assert plugin.preferred("all_reduce", KIB)[0] == {("nvls_tree", "ll128")}
    assert plugin.preferred("reduce_scatter", KIB)[0] == {("collnet_direct", "simple")}
    assert plugin.preferred("broadcast", KIB)[0] == {("ring", "ll128")}
    assert plugin.preferred("all_gather", 64 * KIB)[0] == {("tree", "simple")}
    assert plugin.preferred("all_reduce", MAX_BYTES)[0] == {("tree", "simple")}  # the last line ends at 2^64 - 1
    assert plugin.preferred("reduce", 8 * KIB)[0] == set()  # the tie: NCCL decides
    gathers = [line for line in document["lines"] if line["collective"] == "allgather"]
    assert gathers[0]["max_bytes"] + 1 == gathers[1]["min_bytes"]  # adjacent lines meet and do not overlap
    assert plugin.preferred("all_gather", gathers[0]["max_bytes"])[0] == {("pat", "ll")}
    assert plugin.preferred("all_gather", gathers[1]["min_bytes"])[0] == {("tree", "simple")}
    plugin.close()


def test_the_plugin_applies_lines_only_at_their_topology_unless_any_topology(plugin_library, tmp_path, monkeypatch):
    run = synthetic_run(tmp_path, "topology", [  # made up: 8 ranks on one node
        {"env": "NCCL_ALGO=tree NCCL_PROTO=simple", "size": KIB, "time": 10.0},
        {"env": "NCCL_ALGO=ring NCCL_PROTO=simple", "size": KIB, "time": 20.0}], world=8, hosts=["node0"])
    config, _ = export(tmp_path, run)
    at_eight = ExamplePlugin(plugin_library, config, monkeypatch, n_ranks=8, n_nodes=1)
    assert at_eight.preferred("all_reduce", KIB)[0] == {("tree", "simple")}
    at_eight.close()
    elsewhere = ExamplePlugin(plugin_library, config, monkeypatch, n_ranks=16, n_nodes=2)
    assert elsewhere.preferred("all_reduce", KIB)[0] == set()
    elsewhere.close()
    (tmp_path / "any").mkdir()
    config_any, _ = export(tmp_path / "any", run, options=("--any-topology",))
    anywhere = ExamplePlugin(plugin_library, config_any, monkeypatch, n_ranks=16, n_nodes=2)
    assert anywhere.preferred("all_reduce", KIB)[0] == {("tree", "simple")}
    anywhere.close()
