"""The machine-facts cache: what was measured about this machine and is kept between commands (the host's copy and
loopback rates, expect/probe.py; launch noise per backend, device and world size, gate/machine_noise.py)."""

import os
from pathlib import Path

CACHE_DIR_ENV = "COMMBENCH_CACHE_DIR"
"""Where the machine's measured facts are kept [default: ~/.cache/commbench]."""


def cache_folder() -> Path:
    return Path(os.environ.get(CACHE_DIR_ENV) or Path.home() / ".cache" / "commbench")
