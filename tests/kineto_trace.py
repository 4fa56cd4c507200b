"""Small traces in Kineto's JSON format (torch.profiler's Chrome trace), written event by event for tests of the trace
readers: what torch writes for a CPU op, a CUDA runtime call, a kernel on a stream and a gloo span. They are input
data, each event as Kineto writes it, for traces this machine cannot record (it has no GPU)."""

import json
from pathlib import Path

MAIN, GLOO_THREAD, STREAM = 1, 2, 20


def cpu_op(name: str, ts: int, dur: int, tid: int = MAIN, **args) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 100, "tid": tid, "ts": ts, "dur": dur, "args": args}


def annotation(name: str, ts: int, dur: int, tid: int = MAIN, **args) -> dict:
    """A user_annotation: ProfilerStep#N, or gloo's gloo:<collective> span on its own thread."""
    return {"ph": "X", "cat": "user_annotation", "name": name, "pid": 100, "tid": tid, "ts": ts, "dur": dur,
            "args": args}


def launch(name: str, ts: int, correlation: int, tid: int = MAIN) -> dict:
    """cudaLaunchKernel / cudaMemcpyAsync on a CPU thread; its correlation id names the device event it queued."""
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 100, "tid": tid, "ts": ts, "dur": 4,
            "args": {"correlation": correlation}}


def device(name: str, ts: int, dur: int, correlation: int, cat: str = "kernel", stream: int = STREAM,
           **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": stream, "correlation": correlation, **args}}


def cut_ranks(world: int) -> str:
    """"Process Group Ranks" as Kineto writes it: at most 30 ranks, then "..." (kTruncatLength)."""
    shown = ", ".join(str(rank) for rank in range(min(world, 30)))
    return f"[{shown}, ...]" if world > 30 else f"[{shown}]"


def world_group(world: int) -> dict:
    """The process-group arguments torch writes on record_param_comms (and copies onto NCCL kernels) for the default
    group of a world-rank job."""
    return {"Process Group Name": "0", "Process Group Description": "default_pg", "Process Group Ranks":
            cut_ranks(world), "Group size": world}


def distributed_info(rank: int, world: int, backend: str) -> dict:
    return {"backend": backend, "rank": rank, "world_size": world, "pg_count": 1,
            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": f"cuda:{backend}",
                           "pg_size": world, "ranks": list(range(world))}]}


def write(path: Path, events: list[dict], *, rank: int, world: int, backend: str) -> Path:
    path.write_text(json.dumps({"schemaVersion": 1, "distributedInfo": distributed_info(rank, world, backend),
                                "traceEvents": events}))
    return path
