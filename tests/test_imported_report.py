"""An imported run is told as what it is: its plots say the source's statistic (nccl-tests' mean per call, no
interval), draw no CI bars and no α–β line whose R² fails `commbench fit`'s threshold, and the report's HTML has no
"CI of the median" and no <NA> (checked in the page as headless Chromium renders it)."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import pytest

from commbench.report import collective_plots
from commbench.report.render import load_runs
from tests.in_process import commbench_here
from tests.refusals import invoke
from tests.report_runs import CHROMIUM_FLAGS, needs_chromium

LOG = Path(__file__).parent / "data" / "imports" / "nccl-tests" / "h100_2node_16rank_all_reduce.txt"


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("imported")
    result = invoke(["import", "nccl-tests", str(LOG), "--out", str(out), "--run-id", "h100", "-q"])
    assert result.exit_code == 0, result.output
    return out / "h100"


@pytest.mark.no_process
def test_the_plots_say_the_sources_statistic_and_draw_no_interval(imported):
    (run,) = load_runs([imported])
    for draw in (collective_plots.busbw_vs_size, collective_plots.latency_with_fit):
        figure, why = draw([run])
        assert figure is not None, why
        for axis in figure.axes:
            title = axis.get_title()
            assert "CI of the median" not in title and "nccl-tests: mean per call of" in title, title
            assert "p50" not in axis.get_ylabel()
            for container in axis.containers:  # an errorbar without yerr has no bar lines
                assert not container.has_yerr, title
        if draw is collective_plots.latency_with_fit:  # a fit commbench fit flags low is not drawn, and says so
            legend = [text.get_text() for axis in figure.axes for text in axis.get_legend().get_texts()]
            assert any("its fit" in text or "no fit drawn: R²" in text for text in legend), legend


@needs_chromium
def test_the_report_page_has_no_ci_of_the_median_and_no_na(imported, tmp_path):
    import subprocess

    made = invoke(["report", str(imported), "--out", str(tmp_path / "report")])
    assert made.exit_code == 0, made.output
    page = tmp_path / "report" / "report.html"
    dom = subprocess.run(["chromium", *CHROMIUM_FLAGS, "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert "key-numbers" in dom.stdout and "nccl-tests" in dom.stdout
    assert "CI of the median" not in dom.stdout and "&lt;NA&gt;" not in dom.stdout and "<NA>" not in dom.stdout


@pytest.mark.distributed
def test_compare_of_the_h100_import_against_a_cpu_sweep_is_refused_in_one_line(imported, tmp_path):


    sweep = commbench_here("sweep", "-c", "all_reduce", "--sizes", "1M", "--iters", "6", "--backend", "gloo",
                           "--device", "cpu", "--out", str(tmp_path), "--run-id", "cpu", "-q")
    assert sweep.returncode == 0, sweep.stderr
    for args in ((str(imported), str(tmp_path / "cpu")), (str(tmp_path / "cpu"), str(imported))):
        refused = invoke(["compare", *args])
        assert refused.exit_code == 2 and refused.stderr.count("\n") == 1, refused.output
        assert "nothing to compare" in refused.stderr and ("world size 16 vs 2" in refused.stderr or
                                                           "world size 2 vs 16" in refused.stderr), refused.stderr
        assert len(refused.stderr.rstrip("\n")) <= 200
