"""The metric families of each exportable bench kind, from its stored rows: collective rows as the Inspector's
nccl_bus_bandwidth_gbs and nccl_collective_exec_time_microseconds (its labels, then commbench's row keys), and
commbench_* families for what the Inspector has no metric for (CI bounds, wrong elements, hunt suspects, training
step time and exposed communication). docs/export.md lists every family and where each label comes from.

Units are in the names: the Inspector's microseconds and GB/s where a family stands beside the Inspector's, seconds
(Prometheus' base unit) for commbench's own times. Rows without a number (a refused environment combination, a
figure not measured) give no sample rather than a made-up one."""

import math
from datetime import datetime
from typing import SupportsFloat

import commbench
from commbench.benches import collective, ddp, fsdp, hunt, strategy
from commbench.cluster.hunt_rows import FIRST_PASS, SUSPECT
from commbench.export import inspector
from commbench.export.exposition import Family
from commbench.export.sources import ExportedRun
from commbench.names import NOT_AVAILABLE
from commbench.schema import common as common_columns

COMM_NAME = "commbench"
"""comm_name of commbench's series: the Inspector writes the communicator's name there, so a dashboard tells a lab
measurement from a live job's by it."""
GPU_ALL = "all"
"""gpu of commbench's series: a row is the communicator's figure over all its ranks, not one GPU's."""
ROW_KEYS = ("run_id", "backend", "device", "impl", "dtype", "op", "inplace", "size_bytes", "timing", "env")
"""The results.csv columns added as labels after the Inspector's: with the Inspector's own they keep every row of a
run a series of its own (a float32 and a bfloat16 row share a message_size bucket), and name the run."""
Cell = SupportsFloat | str | None
"""A results.csv cell as pandas hands it out: a number (numpy's or Python's, bool included), text, or None."""
TRAINING_KEYS = ("run_id", "bench", "config", "strategy", "impl", "backend", "device")

CI_LOW = "commbench_collective_exec_time_ci_low_microseconds"
CI_HIGH = "commbench_collective_exec_time_ci_high_microseconds"
WRONG = "commbench_collective_wrong_elements"
STEP_TIME = "commbench_training_step_time_seconds"
STEP_CI_LOW = "commbench_training_step_time_ci_low_seconds"
STEP_CI_HIGH = "commbench_training_step_time_ci_high_seconds"
COMM_TIME = "commbench_training_communication_seconds"
EXPOSED = "commbench_training_exposed_communication_seconds"
WRONG_RANKS = "commbench_training_wrong_ranks"
SUSPECT_NODE = "commbench_hunt_suspect_node"
SUSPECT_LINK = "commbench_hunt_suspect_link"
PAIR_BANDWIDTH = "commbench_hunt_pair_bus_bandwidth_gbs"
PAIR_LATENCY = "commbench_hunt_pair_latency_microseconds"
RUN_END = "commbench_run_end_timestamp_seconds"

HELP = {
    inspector.BUS_BANDWIDTH: "Bus bandwidth in GB/s (1e9 B/s) of a collective at a message size, as NCCL Inspector "
                             "names it; commbench: the row's busbw_gbps, from the median time.",
    inspector.EXEC_TIME: "Time of one collective call in microseconds, as NCCL Inspector names it; commbench: the "
                         "row's time_us_p50, the median of its samples.",
    CI_LOW: "Lower bound of the 95% confidence interval of the median call time, microseconds (time_us_ci_lo).",
    CI_HIGH: "Upper bound of the 95% confidence interval of the median call time, microseconds (time_us_ci_hi).",
    WRONG: "Elements the correctness check found wrong at this point (n_wrong); above 0 the figures are not valid.",
    STEP_TIME: "Median optimizer step time of a training configuration, seconds (step_time_ms_p50).",
    STEP_CI_LOW: "Lower bound of the 95% confidence interval of the median step time, seconds.",
    STEP_CI_HIGH: "Upper bound of the 95% confidence interval of the median step time, seconds.",
    COMM_TIME: "Communication time per step, median over ranks, seconds (comm_ms, from the profiler trace).",
    EXPOSED: "Communication per step that no computation hid, median over ranks, seconds (exposed_comm_ms).",
    WRONG_RANKS: "Ranks whose check failed in a training configuration (replicas disagree or a loss is not finite).",
    SUSPECT_NODE: "1 if commbench hunt named the node a suspect after its second pass, 0 if it measured the node "
                  "and did not.",
    SUSPECT_LINK: "1 if commbench hunt named the link between two nodes a suspect, 0 for a pair it measured and "
                  "did not name.",
    PAIR_BANDWIDTH: "Bus bandwidth in GB/s between two nodes in hunt's first pass (sendrecv's busbw).",
    PAIR_LATENCY: "Latency in microseconds between two nodes in hunt's first pass (small sendrecv exchanges).",
    RUN_END: "When the run ended (an import: when it was imported), seconds since the Unix epoch (meta.json "
             "end_time); a textfile sample carries its scrape time, not this.",
}
KINDS_EXPORTED = {collective.KIND.name: "collective sweeps and imports", ddp.KIND.name: "ddp, fsdp and zero runs",
                  fsdp.KIND.name: "ddp, fsdp and zero runs", strategy.KIND.name: "ddp, fsdp and zero runs",
                  hunt.KIND.name: "hunt runs"}


class Families:
    """The families an export writes, in a fixed order (the Inspector's first), filled run by run."""

    def __init__(self) -> None:
        self.by_name = {name: Family(name, help_text) for name, help_text in HELP.items()}

    def put(self, name: str, labels: dict[str, object], value: Cell) -> None:
        """A sample, unless the value is missing (an empty cell, NaN)."""
        number = _number(value)
        if number is not None:
            self.by_name[name].add(labels, number)

    def add_run(self, run: ExportedRun) -> None:
        self._run_end(run)
        if run.kind.name == collective.KIND.name:
            self._collective(run)
        elif run.kind.name == hunt.KIND.name:
            self._hunt(run)
        else:
            self._training(run)

    def _run_end(self, run: ExportedRun) -> None:
        source = run.meta.get("source")  # an import's: the tool and its files
        tool = source.get("tool") if isinstance(source, dict) else None
        labels = {"run_id": run.run_id, "kind": run.kind.name, "source": tool or "commbench",
                  "status": run.meta.get("status") or inspector.UNKNOWN}
        self.put(RUN_END, labels, _epoch_seconds(run.meta.get("end_time")))

    def _collective(self, run: ExportedRun) -> None:
        hosts, n_nodes = _hosts(run.meta)
        common = {"version": f"commbench-{commbench.__version__}",
                  "slurm_job_id": str(run.meta.get("slurm_job_id") or inspector.UNKNOWN)}
        for row in run.rows.to_dict(orient="records"):
            size = int(row[common_columns.SIZE_BYTES])
            # a refused environment combination has no figures; 0 B (nccl-tests' sizes under one element per rank)
            # is no message: NCCL does not run it and the Inspector does not record it
            if str(row.get("note") or "").startswith(NOT_AVAILABLE) or size == 0:
                continue
            for host in hosts:
                labels = {**common, "node": host, "gpu": GPU_ALL, "comm_name": COMM_NAME, "n_nodes": n_nodes,
                          "nranks": int(row[common_columns.WORLD_SIZE]),
                          "collective": inspector.collective_name(row["collective"]),
                          "message_size": inspector.message_size(size),
                          "algo_proto": inspector.algo_proto(str(row.get("env") or ""), str(row["backend"])),
                          **{key: row.get(key) for key in ROW_KEYS}, "run_id": run.run_id}
                self.put(inspector.BUS_BANDWIDTH, labels, row.get(common_columns.BUSBW_GBPS))
                self.put(inspector.EXEC_TIME, labels, row.get(common_columns.TIME_US_P50))
                self.put(CI_LOW, labels, row.get(common_columns.TIME_US_CI_LO))
                self.put(CI_HIGH, labels, row.get(common_columns.TIME_US_CI_HI))
                self.put(WRONG, labels, row.get(common_columns.N_WRONG))

    def _training(self, run: ExportedRun) -> None:
        _, n_nodes = _hosts(run.meta)
        for row in run.rows.to_dict(orient="records"):
            labels = {**{key: row.get(key) for key in TRAINING_KEYS}, "run_id": run.run_id,
                      "nranks": int(row[common_columns.WORLD_SIZE]), "n_nodes": n_nodes}
            self.put(STEP_TIME, labels, _seconds(row.get("step_time_ms_p50")))
            self.put(STEP_CI_LOW, labels, _seconds(row.get("step_time_ms_ci_lo")))
            self.put(STEP_CI_HIGH, labels, _seconds(row.get("step_time_ms_ci_hi")))
            self.put(COMM_TIME, labels, _seconds(row.get("comm_ms")))
            self.put(EXPOSED, labels, _seconds(row.get("exposed_comm_ms")))
            self.put(WRONG_RANKS, labels, row.get(common_columns.N_WRONG))

    def _hunt(self, run: ExportedRun) -> None:
        """Every node and first-pass pair the hunt measured, 1 where it named a suspect (its finding rows: the verdict
        after the second pass), 0 elsewhere; and the first pass's pair figures."""
        rows = run.rows.to_dict(orient="records")
        nodes: dict[str, int] = {}
        links: dict[tuple[str, str], int] = {}
        for row in rows:
            a, b = _text(row.get("node_a")), _text(row.get("node_b"))
            named = row["phase"] == "finding" and row.get("verdict") == SUSPECT
            for node in (a, b):
                if node:
                    nodes[node] = max(nodes.get(node, 0), int(named and row["test"] == "node" and node == a))
            if a and b and (row["phase"] == FIRST_PASS or (named and row["test"] == "link")):
                link = (min(a, b), max(a, b))
                links[link] = max(links.get(link, 0), int(named and row["test"] == "link"))
            if row["phase"] == FIRST_PASS and a and b:
                labels = {"run_id": run.run_id, "node_a": a, "node_b": b,
                          "size_bytes": row.get(common_columns.SIZE_BYTES)}
                if row["test"] == "bandwidth":
                    self.put(PAIR_BANDWIDTH, labels, row.get(common_columns.BUSBW_GBPS))
                elif row["test"] == "latency":
                    self.put(PAIR_LATENCY, labels, row.get("latency_us"))
        for node, value in nodes.items():
            self.put(SUSPECT_NODE, {"run_id": run.run_id, "node": node}, value)
        for (a, b), value in links.items():
            self.put(SUSPECT_LINK, {"run_id": run.run_id, "node_a": a, "node_b": b}, value)


def _hosts(meta: dict) -> tuple[list[str], str]:
    """The hosts a run's series are written for (node), and n_nodes; "unknown" where meta.json names none (an
    import of a table without rank lines)."""
    hosts = [str(host) for host in meta.get("hosts") or [] if host]
    return (hosts, str(len(hosts))) if hosts else ([inspector.UNKNOWN], inspector.UNKNOWN)


def _number(value: Cell) -> float | None:
    if value is None or isinstance(value, (str, bool)):
        return None
    number = float(value)
    return None if math.isnan(number) else number


def _seconds(milliseconds: Cell) -> float | None:
    number = _number(milliseconds)
    return None if number is None else number / 1000


def _text(value: object) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


def _epoch_seconds(timestamp: object) -> float | None:
    """An ISO 8601 time with its offset (runinfo.utc_now) as Unix seconds; None where absent or unreadable."""
    try:
        return datetime.fromisoformat(str(timestamp)).timestamp() if timestamp else None
    except ValueError:
        return None
