import pytest

from commbench.errors import CommbenchError
from commbench.sizes import format_bytes, parse_size, parse_size_spec


def test_units_are_1024_based():
    assert parse_size("1K") == 1024
    assert parse_size("64M") == 64 * 1024**2
    assert parse_size("1G") == 1024**3
    assert parse_size("4KiB") == 4096
    assert parse_size("17") == 17


def test_geometric_range():
    assert parse_size_spec("1K:16K:x2") == (1024, 2048, 4096, 8192, 16384)


def test_geometric_range_stops_at_max():
    assert parse_size_spec("1K:10K:x4") == (1024, 4096)


def test_linear_range():
    assert parse_size_spec("1K:1M:+256K") == (1024, 1024 + 262144, 1024 + 2 * 262144, 1024 + 3 * 262144)


def test_comma_list_is_sorted_and_unique():
    assert parse_size_spec("1M,4K,4K,16") == (16, 4096, 1024**2)


@pytest.mark.parametrize("spec", ["", "abc", "1K:2K", "2K:1K:x2", "1K:2K:x1", "1K:2K:y2", "1K:2K:+0", "0", "1X",
                                  "1K:1G:x1.0001"])
def test_bad_specs_name_the_problem(spec):
    with pytest.raises(CommbenchError) as error:
        parse_size_spec(spec)
    assert "\n" not in str(error.value)


def test_format_bytes():
    assert format_bytes(1024) == "1 KiB"
    assert format_bytes(16 * 1024**2) == "16 MiB"
    assert format_bytes(1000) == "1000 B"
