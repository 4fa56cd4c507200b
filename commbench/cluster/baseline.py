"""`commbench hunt --baseline`: the expected figures a hunt compares with instead of the allocation's median, read
once by the launching process (the spec carries the numbers to every node)."""

import json
import math
from pathlib import Path

from commbench.cluster.diagnosis import INTRA, PAIR_METRICS
from commbench.errors import CommbenchError

KEYS = tuple(metric.name for metric in (*PAIR_METRICS, INTRA))


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
