"""TEMPORARY shim until the units helper's module lands."""
from commbench.models.quantities import UNITS, parse_count, parse_memory  # noqa: F401
from commbench.sizes import format_bytes, parse_size, parse_size_spec  # noqa: F401
