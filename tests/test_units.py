"""Sizes, memory and counts against values worked out by hand: one suffix table for every byte quantity."""

import subprocess
import sys

import pytest
from click.testing import CliRunner

from commbench.cli import main
from commbench.errors import CommbenchError
from commbench.units import (
    UNITS,
    format_bytes,
    parse_count,
    parse_memory,
    parse_nccl_tests_size,
    parse_size,
    parse_size_spec,
)

GB, GIB = 10**9, 2**30


@pytest.mark.no_process
def test_bare_letters_and_ib_are_1024_based():
    assert parse_size("1K") == 1024
    assert parse_size("64M") == 64 * 1024**2
    assert parse_size("1G") == 1024**3
    assert parse_size("1T") == 1024**4
    assert parse_size("4KiB") == 4096
    assert parse_size("17") == 17
    assert parse_size("17B") == 17


@pytest.mark.no_process
def test_message_sizes_are_1024_based_and_refuse_si():
    # K and KiB agree (nccl-tests' -e 8G is 8 GiB); SI forms are refused in message sizes, not reinterpreted
    assert parse_size("1K") == parse_size("1KiB") == 1024
    assert parse_size("1MiB") == 1024**2 and parse_size("8GiB") == 8 * GIB
    for text in ("1KB", "1MB", "8GB", "1tb"):
        with pytest.raises(CommbenchError, match="message sizes do not take SI units"):
            parse_size(text)
    assert parse_memory("2TB", option="--fit") == 2 * 10**12 and parse_memory("2T", option="--fit") == 2 * 2**40


@pytest.mark.no_process
def test_letters_are_case_insensitive_but_i_still_decides():
    assert parse_size("4k") == parse_size("4kib") == 4096
    assert parse_memory("4kb", option="--fit") == 4000


@pytest.mark.no_process
def test_whole_bytes_from_fractions():
    assert parse_size("1.5K") == 1536
    assert parse_memory("1.1MB", option="--fit") == 1_100_000  # exact, not 1100000.0000000002
    with pytest.raises(CommbenchError, match="not a whole number of bytes"):
        parse_size("0.1K")


@pytest.mark.no_process
@pytest.mark.parametrize("text, size", [
    ("8", 8), ("128M", 128 * 2**20), ("8G", 8 * 2**30), (" 32M ", 32 * 2**20), ("8 K", 8192),
    ("8KB", 8192), ("8KiB", 8192), ("8kb", 8192),  # nccl-tests reads the letter alone: KB is 1024-based there
    ("1.5K", 1536), ("0.1K", 102), (".5K", 512), ("1.", 1), ("1.5", 1),  # a fraction of a byte is cut off
    ("1T", None), ("8B", None), ("-8", None), ("0x10", None), ("8X", None), ("", None)])
def test_nccl_tests_sizes_read_as_nccl_tests_reads_them(text, size):
    """commbench perf's -b/-e/-i: nccl-tests' parsesize (strtod, then K, M or G), through the one byte parser."""
    assert parse_nccl_tests_size(text) == size


@pytest.mark.no_process
def test_geometric_range():
    assert parse_size_spec("1K:16K:x2") == (1024, 2048, 4096, 8192, 16384)
    assert parse_size_spec("1K:16K") == parse_size_spec("1K:16K:x2")  # nccl-tests' -f 2 habit


@pytest.mark.no_process
def test_geometric_range_stops_at_max():
    assert parse_size_spec("1K:10K:x4") == (1024, 4096)


@pytest.mark.no_process
def test_linear_range():
    assert parse_size_spec("1K:1M:+256K") == (1024, 1024 + 262144, 1024 + 2 * 262144, 1024 + 3 * 262144)


@pytest.mark.no_process
def test_comma_list_is_sorted_and_unique():
    assert parse_size_spec("1M,4K,4K,16") == (16, 4096, 1024**2)


@pytest.mark.no_process
def test_sizes_in_si_units():
    assert parse_size_spec("1000000") == (1_000_000,)
    assert parse_size_spec("1000:4000:+1000") == (1000, 2000, 3000, 4000)


@pytest.mark.no_process
@pytest.mark.parametrize("spec", ["", "abc", "1K:2K:4K:x2", "2K:1K:x2", "1K:2K:x1", "1K:2K:y2", "1K:2K:+0", "0", "1X",
                                  "1K:1G:x1.0001", "1iB", "-1K", "1.5"])
def test_bad_specs_name_the_problem(spec):
    with pytest.raises(CommbenchError) as error:
        parse_size_spec(spec)
    assert "\n" not in str(error.value)


@pytest.mark.no_process
@pytest.mark.parametrize("spec, fragment", [("1K:oops:x2", "bad size 'oops'"),
                                            ("64K:1K:x2", "min 65536 B is above max 1024 B")])
def test_size_messages(spec, fragment):
    with pytest.raises(CommbenchError, match=fragment):
        parse_size_spec(spec)


@pytest.mark.no_process
@pytest.mark.parametrize("spec, meant", [
    ("1M..16M", "1M:16M:x2"), ("1M...16M", "1M:16M:x2"), ("1M-16M", "1M:16M:x2"), ("1M to 16M", "1M:16M:x2"),
    ("16M..1M", "1M:16M:x2"), ("1M..16M:x4", "1M:16M:x4"), ("1M..16M:+1M", "1M:16M:+1M"), ("1M:16M:2", "1M:16M:x2"),
    ("1M:16M:*2", "1M:16M:x2")])
def test_a_range_in_another_spelling_is_refused_with_the_spec_that_means_it(spec, meant):
    with pytest.raises(CommbenchError) as error:
        parse_size_spec(spec)
    message = str(error.value)
    assert "\n" not in message and meant in message and "MIN:MAX:xF" in message
    sizes = parse_size_spec(meant)  # the spec offered reads, and spans the range asked for
    assert (sizes[0], sizes[-1]) == (1024**2, 16 * 1024**2)


@pytest.mark.no_process
@pytest.mark.parametrize("spec", ["[1M,16M]", "1M,2M..4M", "sizes", "1M 16M"])
def test_a_spec_that_is_no_size_names_every_form_sizes_takes(spec):
    with pytest.raises(CommbenchError) as error:
        parse_size_spec(spec)
    message = str(error.value)
    assert "\n" not in message
    assert all(form in message for form in ("MIN:MAX:xF", "1M:16M:x2", "MIN:MAX:+STEP", "comma list")), message


@pytest.mark.no_process
def test_sweep_refuses_a_dotted_range_in_one_line_with_the_spec_to_write(tmp_path):
    from tests.refusals import assert_refused, invoke

    line = assert_refused(invoke(["sweep", "-c", "all_reduce", "--sizes", "1M..16M", "--out", str(tmp_path / "r")]),
                          left_empty=[tmp_path])
    assert "--sizes 1M:16M:x2" in line


@pytest.mark.no_process
def test_format_bytes():
    assert format_bytes(1024) == "1 KiB"
    assert format_bytes(16 * 1024**2) == "16 MiB"
    assert format_bytes(1000) == "1000 B"


@pytest.mark.no_process
def test_format_bytes_reads_back():
    for size in (1000, 1024, 3 * 1024**2, 8 * 1024**3):
        assert parse_size(format_bytes(size)) == size


@pytest.mark.no_process
@pytest.mark.parametrize("text, value", [("7B", 7e9), ("1.5e9", 1.5e9), ("671B", 671e9), ("125M", 125e6),
                                         ("2T", 2e12), ("10k", 1e4)])
def test_parameter_counts(text, value):
    assert parse_count(text, option="--params") == value


@pytest.mark.no_process
@pytest.mark.parametrize("text", ["7X", "-7B", "7GiB", "0"])
def test_bad_parameter_counts(text):
    with pytest.raises(CommbenchError, match="--params"):
        parse_count(text, option="--params")


@pytest.mark.no_process
def test_memory_units():
    assert parse_memory("80GB", option="--fit") == 80e9
    assert parse_memory("80GiB", option="--fit") == 80 * GIB
    assert parse_memory("80G", option="--fit") == 80 * GIB  # what the --memory-budget hint suggests
    assert parse_memory("1.5GB", option="--fit") == 1.5e9
    assert parse_memory("512MiB", option="--fit") == 512 * 2**20
    assert parse_memory("1TB", option="--fit") == 1e12


@pytest.mark.no_process
def test_memory_needs_its_unit():
    with pytest.raises(CommbenchError, match=r"bad --fit '80': write a memory size with its unit, e\.g\. 80GB"):
        parse_memory("80", option="--fit")


@pytest.mark.no_process
@pytest.mark.parametrize("text", ["80X", "0GB", "-1GB", "GB", "1e9999GB"])
def test_bad_memory(text):
    with pytest.raises(CommbenchError, match="--memory-budget"):
        parse_memory(text, option="--memory-budget")


@pytest.mark.no_process
def test_units_choice_table():
    assert UNITS["GB"] == GB and UNITS["GiB"] == GIB and UNITS["MB"] == 10**6 and UNITS["TiB"] == 2**40


@pytest.mark.no_process
def test_model_memory_fit_accepts_80g():
    result = CliRunner().invoke(main, ["model", "memory", "--params", "7B", "--ranks", "8", "--fit", "80G"])
    assert result.exit_code == 0, result.output
    assert "min ranks to fit 80G" in result.output


def test_units_module_imports_nothing_heavy():
    heavy = ("torch", "numpy", "pandas", "scipy", "matplotlib")
    code = f"import sys, commbench.units; print([m for m in {heavy!r} if m in sys.modules])"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "[]"
