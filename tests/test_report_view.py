"""What a reader of the report sees: message sizes labelled 1 KiB … 1 GiB, legends clear of the data, error bars
from the 95 % CI of the median, and a report.html that still shows everything when it is copied away alone (checked
in headless Chromium, with a screenshot kept)."""

import base64
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.container import ErrorbarContainer

from commbench.report import collective_plots, render, training_plots
from commbench.report.figure_layout import MAX_SIZE_TICKS, size_axis, size_ticks
from commbench.units import parse_size
from tests.report_runs import ARTIFACTS, CHROMIUM_FLAGS, needs_chromium, shared_report_suite


@pytest.fixture(scope="module")
def suite_run(tmp_path_factory) -> Path:
    return shared_report_suite(tmp_path_factory)


@pytest.fixture(scope="module")
def loaded(suite_run):
    """{"collective": [its LoadedRun], "ddp": [...]}."""
    return {run.name.split("/")[-1]: [run] for run in render.load_runs([suite_run])}


# ---- message-size axes ---------------------------------------------------------------------------------------

def _labels(sizes) -> list[str]:
    """The size labels an axis 7 inches wide (narrower than any in the report) shows; they must not overlap."""
    figure, axis = plt.subplots(figsize=(7, 3))
    axis.plot(sizes, np.ones(len(sizes)), "o")
    size_axis(axis, sizes)
    figure.canvas.draw()
    low, high = axis.get_xlim()
    shown = [tick for tick, where in zip(axis.get_xticklabels(), axis.get_xticks()) if low <= where <= high]
    boxes = [tick.get_window_extent() for tick in shown]
    assert all(left.x1 < right.x0 for left, right in zip(boxes, boxes[1:])), "tick labels overlap"
    plt.close(figure)
    return [tick.get_text() for tick in shown]


@pytest.mark.no_process
def test_a_1_kib_to_1_gib_axis_reads_in_binary_units():
    assert _labels([2**10, 2**20, 2**30]) == ["1 KiB", "4 KiB", "16 KiB", "64 KiB", "256 KiB", "1 MiB", "4 MiB",
                                                "16 MiB", "64 MiB", "256 MiB", "1 GiB"]
    assert _labels([2**10, 2**16]) == ["1 KiB", "2 KiB", "4 KiB", "8 KiB", "16 KiB", "32 KiB", "64 KiB"]


@pytest.mark.no_process
@pytest.mark.parametrize("low, high", [(1, 2**24), (1000, 10**9), (8, 8), (4096, 4096), (3000, 5000), (1, 2**50)])
def test_size_ticks_cover_the_data_with_few_round_powers_of_two(low, high):
    ticks = size_ticks(low, high)
    assert 1 <= len(ticks) <= MAX_SIZE_TICKS
    assert ticks[0] <= low and ticks[-1] >= high  # the data lie between the outer ticks
    assert all(tick & (tick - 1) == 0 for tick in ticks) and ticks == sorted(set(ticks))
    labels = _labels([low, high])
    assert labels and all(parse_size(label) in ticks for label in labels)  # each label reads back as its tick


# ---- legends and error bars on the real runs' figures ------------------------------------------------------------

def _figures(loaded) -> dict:
    """Every report figure the module's runs can draw; strategy_steps_and_memory is drawn from the DDP rows, which
    carry the columns it plots (a strategy sweep would need one more launch)."""
    draw = {"busbw_vs_size": (collective_plots.busbw_vs_size, "collective"),
            "latency_fit": (collective_plots.latency_with_fit, "collective"),
            "ring_vs_builtin": (collective_plots.ring_vs_builtin, "collective"),
            "ddp_buckets": (training_plots.ddp_buckets, "ddp"),
            "strategy_steps_memory": (training_plots.strategy_steps_and_memory, "ddp"),
            "model_state": (training_plots.model_state_vs_prediction, "ddp")}
    figures = {}
    for name, (function, kind) in draw.items():
        figure, why = function(loaded[kind])
        assert figure is not None, f"{name}: {why}"
        figures[name] = figure
    return figures


def _overlaps(box, other) -> bool:
    return box.x0 < other.x1 and other.x0 < box.x1 and box.y0 < other.y1 and other.y0 < box.y1


def _data_points(axis, renderer) -> np.ndarray:
    """Display coordinates of every plotted point: line vertices (fits sampled at 50 sizes), error-bar ends and caps,
    and the corners of every bar, each through its own transform."""
    points = [line.get_transform().transform(line.get_xydata()) for line in axis.get_lines()]
    points += [collection.get_transform().transform(np.concatenate(collection.get_segments()))
               for collection in axis.collections if hasattr(collection, "get_segments") and collection.get_segments()]
    points += [patch.get_window_extent(renderer).get_points() for patch in axis.patches]
    display = np.concatenate([np.asarray(chunk, float).reshape(-1, 2) for chunk in points])
    return display[np.isfinite(display).all(axis=1)]


def test_every_legend_lies_outside_every_axes_and_covers_no_point(loaded):
    legends = 0
    for name, figure in _figures(loaded).items():
        figure.canvas.draw()
        renderer = figure.canvas.get_renderer()
        for axis in figure.axes:
            legend = axis.get_legend()
            if legend is None:
                continue
            legends += 1
            box = legend.get_window_extent(renderer)
            assert not any(_overlaps(box, other.get_window_extent(renderer)) for other in figure.axes), name
            points = np.concatenate([_data_points(other, renderer) for other in figure.axes])
            inside = (points[:, 0] >= box.x0) & (points[:, 0] <= box.x1) & (points[:, 1] >= box.y0) & (
                points[:, 1] <= box.y1)
            assert not inside.any(), f"{name}: the legend covers {points[inside][:3]}"
        plt.close(figure)
    assert legends >= 5  # busbw, latency, ratio, DDP steps, model state, strategy steps: one each


def _error_bars(axis) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(y of each point, bar bottom, bar top) of every error-bar set in the axes (data coordinates)."""
    found = []
    for container in axis.containers:
        if not isinstance(container, ErrorbarContainer):
            continue
        line, _, (vertical, *_) = container
        segments = vertical.get_segments()
        bottoms = np.array([segment[:, 1].min() for segment in segments])
        tops = np.array([segment[:, 1].max() for segment in segments])
        found.append((np.asarray(line.get_ydata(), float) if line is not None else None, bottoms, tops))
    return found


def test_ratio_bars_divide_the_medians_cis_crosswise(loaded):
    figure, _ = collective_plots.ring_vs_builtin(loaded["collective"])
    rows = loaded["collective"][0].results.sort_values("size_bytes")
    builtin, ring = (rows[rows["impl"] == impl].reset_index(drop=True) for impl in ("builtin", "ring"))
    [(ratio, bottoms, tops)] = _error_bars(figure.axes[0])
    np.testing.assert_allclose(ratio, builtin["time_us_p50"] / ring["time_us_p50"])
    np.testing.assert_allclose(ratio, ring["busbw_gbps"] / builtin["busbw_gbps"], rtol=1e-6)
    np.testing.assert_allclose(bottoms, builtin["time_us_ci_lo"] / ring["time_us_ci_hi"])
    np.testing.assert_allclose(tops, builtin["time_us_ci_hi"] / ring["time_us_ci_lo"])
    assert "CI" in figure.axes[0].get_ylabel() and figure.axes[0].get_yscale() == "log"  # 1/2 as far from 1 as 2
    plt.close(figure)


def test_medians_with_a_ci_show_it_and_say_so(loaded):
    figures = _figures(loaded)
    step = loaded["ddp"][0].results.sort_values(["bucket_cap_mb", "config_index"])
    [(_, bottoms, tops)] = _error_bars(figures["ddp_buckets"].axes[0])
    np.testing.assert_allclose(bottoms, step["step_time_ms_ci_lo"])
    np.testing.assert_allclose(tops, step["step_time_ms_ci_hi"])
    for name in ("busbw_vs_size", "latency_fit", "ring_vs_builtin", "ddp_buckets", "strategy_steps_memory"):
        axis = figures[name].axes[0]
        bars = _error_bars(axis)
        assert bars, name
        for points, bottoms, tops in bars:
            assert (tops > bottoms).any(), name  # 6 samples per point have an interval: some bar has a length
            if points is not None and len(points) == len(bottoms):
                assert (bottoms <= points * (1 + 1e-9)).all() and (points <= tops * (1 + 1e-9)).all(), name
        words = axis.get_title() + axis.get_ylabel()
        assert "95 %" in words and "CI" in words, name  # the figure says what its bars are
    for figure in figures.values():
        plt.close(figure)


# ---- report.html moved away from its folder --------------------------------------------------------------------

class _Links(HTMLParser):
    """Every URL the page refers to, with the run folder an enclosing element says it needs (None if none)."""

    def __init__(self):
        super().__init__()
        self.urls: list[tuple[str, str, str | None, dict]] = []  # (tag, url, needs-run-folder, attributes)
        self.marked_text: dict[str, str] = {}
        self._stack: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        needs = attributes.get("data-needs-run-folder") or (self._stack[-1][1] if self._stack else None)
        if tag not in ("br", "img", "meta", "link", "input", "hr", "source"):
            self._stack.append((tag, needs))
        for name in ("href", "src", "srcset", "data", "poster", "action"):
            if attributes.get(name) is not None:
                self.urls.append((tag, attributes[name], needs, attributes))

    def handle_endtag(self, tag):
        while self._stack:
            if self._stack.pop()[0] == tag:
                break

    def handle_data(self, data):
        if self._stack and self._stack[-1][1]:
            folder = self._stack[-1][1]
            self.marked_text[folder] = self.marked_text.get(folder, "") + data


def _chromium(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["chromium", *CHROMIUM_FLAGS, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.distributed
@needs_chromium
def test_report_html_copied_away_alone_shows_everything(suite_run, tmp_path, commbench_cli):
    made = commbench_cli("report", str(suite_run), "--out", str(tmp_path / "report"))
    assert made.returncode == 0, made.stderr
    moved = tmp_path / "elsewhere" / "report.html"
    moved.parent.mkdir()
    shutil.copy(tmp_path / "report" / "report.html", moved)  # the page alone: no PNG, SVG or run folder beside it
    page = moved.read_text()
    images = page.count("<img")
    assert images == 6  # busbw, latency, ratio, DDP buckets, model state, strategy steps and memory

    dom = _chromium("--virtual-time-budget=5000", "--dump-dom", moved.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert f'data-images="{images}/{images}"' in dom.stdout, dom.stdout[:500]  # every <img> decoded, non-zero size
    assert 'data-errors="0"' in dom.stdout and "Uncaught" not in dom.stderr

    links = _Links()
    links.feed(dom.stdout)
    svgs = [attributes for tag, url, _, attributes in links.urls if url.startswith("data:image/svg+xml")]
    assert len(svgs) == images and all(attributes.get("download", "").endswith(".svg") for attributes in svgs)
    assert all(b"<svg" in base64.b64decode(attributes["href"].split(",", 1)[1])[:2000] for attributes in svgs)
    traces = []
    for tag, url, needs, _ in links.urls:
        if url.startswith("data:"):
            continue
        # anything else is a file the page cannot carry: it must be one the page says needs the run folder
        assert needs is not None, f"<{tag}> refers to {url!r} without saying what it needs"
        assert f"needs the run folder {needs}" in links.marked_text[needs]
        parsed = urlparse(url)
        assert parsed.scheme == "file", url  # absolute: it still resolves from wherever the page was moved to
        target = Path(unquote(parsed.path))
        assert target.is_file() and target.is_relative_to(needs) and Path(needs).is_absolute()
        traces.append(target)
    written = [path for bench in ("ddp", "zero") for path in (suite_run / bench / "traces").resolve().glob("*.json*")]
    assert sorted(traces) == sorted(written) and traces

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    screenshot = ARTIFACTS / "report-moved.png"
    screenshot.unlink(missing_ok=True)
    shot = _chromium(f"--screenshot={screenshot}", "--window-size=1400,3000", moved.as_uri())
    assert shot.returncode == 0 and screenshot.stat().st_size > 10_000, shot.stderr[-2000:]


@pytest.mark.distributed
def test_an_svg_over_the_limit_is_named_not_embedded(suite_run, tmp_path, monkeypatch):
    monkeypatch.setattr(render, "SVG_EMBED_LIMIT", 1000)
    render.render([suite_run / "collective"], tmp_path / "report")
    page = (tmp_path / "report" / "report.html").read_text()
    assert "data:image/svg+xml" not in page and page.count("data:image/png;base64,") == 3
    assert page.count("SVG not embedded") == 3 and str((tmp_path / "report" / "latency_fit.svg").resolve()) in page
    assert "href='busbw_vs_size.svg'" not in page


def _row(size: int, timing: str, inplace: bool, p50: float) -> dict:
    from commbench.benches.collective import RESULT_COLUMNS

    row = dict.fromkeys(RESULT_COLUMNS)
    row.update(bench="collective", collective="all_gather", impl="builtin", backend="gloo", device="cpu", world_size=2,
               dtype="float32", op="none", inplace=inplace, timing=timing, size_bytes=size, time_us_p50=p50,
               time_us_ci_lo=p50 * 0.9, time_us_ci_hi=p50 * 1.1, busbw_gbps=size / p50 / 1e3)
    return row


@pytest.mark.no_process
def test_lines_never_mix_timing_modes_or_placements():
    """A run measured in both timing modes and placements: one line (and one fit) per combination, each labelled
    with what tells it apart; one line through all four would zigzag between different measurements of a size."""
    from types import SimpleNamespace

    import pandas as pd

    rows = [_row(size, timing, inplace, p50=(100 + size / 1e3) * (2 if timing == "batch" else 1))
            for size in (4096, 65536, 1048576) for timing in ("per-iteration", "batch") for inplace in (False, True)]
    runs = [SimpleNamespace(name="both", results=pd.DataFrame(rows))]
    for draw in (collective_plots.busbw_vs_size, collective_plots.latency_with_fit):
        figure, _ = draw(runs)
        labels = [text.get_text() for text in figure.axes[0].get_legend().get_texts()]
        series = [label for label in labels if not label.strip().startswith("its fit")]
        assert sorted(series) == sorted(f"builtin gloo float32 {placement} {timing}"
                                        for placement in ("out-of-place", "in-place")
                                        for timing in ("per-iteration", "batch")), labels
        plt.close(figure)
    fits = [label for label in labels if label.strip().startswith("its fit")]
    assert len(fits) == 4  # one per line, fitted on that line alone
