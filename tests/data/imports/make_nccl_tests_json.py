"""How the nccl-tests JSON fixtures were made: nccl-tests' -J schema (JSON_FILE_VERSION 3, NVIDIA/nccl-tests
src/util.cu at a0b82b2) filled with the figures of a real text log, since no published -J output was found.

    python tests/data/imports/make_nccl_tests_json.py

The plain file carries exactly the text log's figures. The per-iteration file adds what nccl-tests writes with
per-iteration timing (*_per_iter objects); the text log has no per-iteration times, so each row's times_us is its
printed time repeated `iters` times: a schema exercise for the importer (samples.csv gets them verbatim), not a
measurement. This script reads the log on its own (no commbench code), so the importer's tests do not check the
importer against itself."""

import json
import re
from pathlib import Path

HERE = Path(__file__).parent
SOURCE = HERE / "nccl-tests" / "rtx5090_2rank_1host_mpi_prefix_v2_18_all_reduce.txt"
ARGS = ["./build/all_reduce_perf_mpi", "-b", "1048576", "-e", "134217728", "-f", "2", "-g", "1", "-n", "50", "-w",
        "10"]  # the command in the log's source document
ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)" + r"\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)" * 2)
DEVICE = re.compile(r"#\s+Rank\s+(\d+)\s+Group\s+(\d+)\s+Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+\[(.*?)\]\s+(.*)")


def lines():
    return [re.sub(r"^\[\d+,\d+\]<stdout>:", "", line) for line in SOURCE.read_text().splitlines()
            if line.startswith("[1,0]<stdout>:")]


def figures(time, algbw, busbw, wrong):
    return {"time": float(time), "alg_bw": float(algbw), "bus_bw": float(busbw), "nwrong": float(wrong)}


def per_iteration(time, iters):
    value = float(time)
    return {"skipped_iterations": 0, "min_us": value, "max_us": value, "avg_us": value, "p50_us": value,
            "p95_us": value, "p99_us": value, "stdev_us": 0.0, "cv_pct": 0.0, "times_us": [value] * iters}


def document(with_per_iteration: bool) -> dict:
    text = lines()
    header = next(line for line in text if line.startswith("# nThread"))
    settings = {key: int(value) for key, value in re.findall(r"(warmup iters|agg iters|iters|validation|graph): (\d+)",
                                                              header)}
    devices = [{"rank": int(m[1]), "group": int(m[2]), "pid": int(m[3]), "hostname": m[4], "device": int(m[5]),
                "device_hex": m[6], "device_info": m[7]} for m in map(DEVICE.match, text) if m]
    results, busbw = [], []
    for match in filter(None, map(ROW.match, text)):
        size, count, dtype, redop, root, *groups = match.groups()
        result = {"size": int(size), "count": int(count), "type": dtype, "redop": redop, "root": f"{int(root):6d}",
                  "out_of_place": figures(*groups[:4]), "in_place": figures(*groups[4:])}
        if with_per_iteration:
            result["out_of_place_per_iter"] = per_iteration(groups[0], settings["iters"])
            result["in_place_per_iter"] = per_iteration(groups[4], settings["iters"])
        result.update(actual_iterations=settings["iters"], experiment_name="")
        results.append(result)
        busbw += [float(groups[2]), float(groups[6])]
    average = next(float(line.split(":")[1]) for line in text if "Avg bus bandwidth" in line)
    return {"version": 3, "start_time": "2026-03-10 00:00:00", "args": ARGS, "env": [], "nccl_version": 22907,
            "config": {"nthreads": 1, "ngpus": 1, "minimum_bytes": 1048576, "maximum_bytes": 134217728,
                       "step_factor": 2, "warmup_iters": settings["warmup iters"], "iterations": settings["iters"],
                       "aggregated_iterations": settings["agg iters"], "validation": settings["validation"],
                       "graph": settings["graph"], "blocking_collectives": "false",
                       "per_iter_timing": "true" if with_per_iteration else "false", "per_iter_skip": 0,
                       "parallel_init": "false", "devices": devices},
            "results": results, "out_of_bounds": {"count": 0, "okay": "true"},
            "average_bus_bandwidth": {"bandwidth": average, "okay": "unchecked"}, "errors": [],
            "end_time": "2026-03-10 00:00:01"}


if __name__ == "__main__":
    out = HERE / "nccl-tests-json"
    out.mkdir(exist_ok=True)
    (out / "rtx5090_2rank_all_reduce.json").write_text(json.dumps(document(False), indent=1) + "\n")
    (out / "rtx5090_2rank_all_reduce_per_iteration.json").write_text(json.dumps(document(True), indent=1) + "\n")
