"""`commbench hunt --baseline`: the expected figures a hunt compares with instead of the allocation's median, read
once by the launching process (the spec carries the numbers to every node): an earlier hunt's, a JSON file's, or
`--baseline expected`, the machine's topology (commbench expect)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

from commbench.cluster.diagnosis import BANDWIDTH, INTRA, PAIR_METRICS
from commbench.errors import CommbenchError

if TYPE_CHECKING:
    from commbench.expect.facts import MachineFacts

KEYS = tuple(metric.name for metric in (*PAIR_METRICS, INTRA))


EXPECTED = "expected"
"""--baseline expected: the figures commbench expect gives this machine, not a file."""


def expected_baseline(facts: MachineFacts, *, ranks_per_node: int, device: str) -> dict[str, float]:
    """The busbw a pair's lane (a sendrecv from one node to another, over one GPU's NIC) and a node's all-reduce
    should reach on this machine (commbench expect's model). The model has no point-to-point latency, so latency is
    judged against the allocation as always."""
    from commbench.expect.model import expect

    lane = expect(facts, "sendrecv", nodes=2, ranks_per_node=ranks_per_node, device=device)
    intra = expect(facts, "all_reduce", nodes=1, ranks_per_node=ranks_per_node, device=device)
    baseline = {name: item.busbw_gbps for name, item in ((BANDWIDTH.name, lane), (INTRA.name, intra))
                if item.busbw_gbps is not None}
    if not baseline:
        raise CommbenchError(f"--baseline expected: this machine's facts give no expected busbw ({lane.why_none}); "
                             "pass an earlier hunt's folder, or a JSON file of bandwidth/intra_all_reduce")
    return baseline


def read_baseline(path_text: str) -> dict[str, float]:
    """From a hunt's run folder or its hunt.json (its "reference"), or a JSON object with any of KEYS (bandwidth in
    GB/s, as nccl-tests' sendrecv busbw; latency in µs; intra_all_reduce busbw in GB/s)."""
    path = Path(path_text)
    if path.is_dir():
        path = path / "hunt.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CommbenchError(f"--baseline {path_text}: {path} does not exist; give a hunt run folder, its hunt.json "
                             f"or a JSON file with {', '.join(KEYS)}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CommbenchError(f"--baseline {path_text}: {path} is not readable JSON ({error}); give a hunt run "
                             "folder or a JSON file") from None
    figures = data.get("reference", data) if isinstance(data, dict) else None
    if not isinstance(figures, dict):
        raise CommbenchError(f"--baseline {path_text}: expected a JSON object with {', '.join(KEYS)}")
    baseline = {}
    for key in KEYS:
        value = figures.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise CommbenchError(f"--baseline {path_text}: {key} is {value!r}; it must be a number above 0")
        baseline[key] = float(value)
    if not baseline:
        raise CommbenchError(f"--baseline {path_text}: none of {', '.join(KEYS)} is given; a hunt's hunt.json has "
                             "them under \"reference\"")
    return baseline
