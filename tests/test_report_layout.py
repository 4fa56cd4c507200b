"""What a reader of the report sees at 1400 px (issue 49): pages that never scroll sideways, whatever a table's
column count; configuration labels that stand side by side; an α–β fit named only where one is drawn; out-of-place
points visible beside in-place ones; and the note on imported rows only where one is. Real runs throughout: an FSDP
sweep with the longest labels, the shared suite's collective sweep, and published nccl-tests logs (one whose α–β
fits fail commbench fit's R² rule, one whose fits pass)."""

import html
import re
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.container import ErrorbarContainer

from commbench.models.fit_files import LOW_R2
from commbench.report import collective_plots, render, training_plots
from commbench.report.figure_layout import bar_axis, bar_figure_width, numbered
from commbench.report.html_tables import fitted_tables
from commbench.training.table import short_labels
from tests.refusals import invoke
from tests.report_runs import ARTIFACTS, CHROMIUM_FLAGS, needs_chromium, shared_fsdp_sweep, shared_report_suite

WINDOW = "--window-size=1400,1000"
LOGS = Path(__file__).parent / "data" / "imports" / "nccl-tests"
NO_FIT_LOG = LOGS / "h100_2node_16rank_all_reduce.txt"  # R² 0.74 for both placements: no fit is drawn
FIT_LOG = LOGS / "mi300x_2node_16rank_rccl_tests_all_reduce.txt"  # R² 0.907 and 0.908: both fits are drawn


@pytest.fixture(scope="module")
def fsdp_run(tmp_path_factory) -> Path:
    return shared_fsdp_sweep(tmp_path_factory)


@pytest.fixture(scope="module")
def suite_run(tmp_path_factory) -> Path:
    return shared_report_suite(tmp_path_factory)


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("imported")
    for name, log in (("no-fit", NO_FIT_LOG), ("fit", FIT_LOG)):
        result = invoke(["import", "nccl-tests", str(log), "--out", str(out), "--run-id", name, "-q"])
        assert result.exit_code == 0, result.output
    return {"no-fit": out / "no-fit", "fit": out / "fit"}


def _page_in_chromium(page: Path, screenshot: Path | None = None) -> dict[str, str]:
    """The page's own measurements on load in a 1400 px window (body attributes: images, errors, page width,
    tables wider than the window), and a screenshot at that width if asked."""
    dom = subprocess.run(["chromium", *CHROMIUM_FLAGS, WINDOW, "--virtual-time-budget=5000", "--dump-dom",
                          page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    body = re.search(r"<body([^>]*)>", dom.stdout)
    assert body, dom.stdout[:500]
    found = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', body.group(1)))
    if screenshot is not None:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        screenshot.unlink(missing_ok=True)
        shot = subprocess.run(["chromium", *CHROMIUM_FLAGS, f"--screenshot={screenshot}", "--window-size=1400,2400",
                               page.as_uri()], capture_output=True, text=True, timeout=120)
        assert shot.returncode == 0 and screenshot.stat().st_size > 10_000, shot.stderr[-2000:]
    return found


def _fits_the_window(found: dict[str, str]) -> None:
    scroll, client = map(int, found["page-width"].split("/"))
    assert 1300 < client <= 1400, found  # the window is 1400 px wide (less a vertical scrollbar)
    assert scroll <= client, f"the page scrolls sideways: scrollWidth {scroll} px > clientWidth {client} px"
    wide, tables = map(int, found["wide-tables"].split("/"))
    assert tables >= 2 and wide == 0, found  # the runs' metadata and each run's key numbers, none past the window
    assert found["errors"] == "0", found


# ---- tables that fit 1400 px ------------------------------------------------------------------------------------

@pytest.mark.distributed
@needs_chromium
@pytest.mark.parametrize("which", ["training", "collective"])
def test_the_training_and_collective_reports_never_scroll_sideways_at_1400_px(which, fsdp_run, suite_run, tmp_path):
    run = fsdp_run if which == "training" else suite_run / "collective"
    render.render([run], tmp_path / "report")
    found = _page_in_chromium(tmp_path / "report" / "report.html", ARTIFACTS / f"report-{which}-1400px.png")
    _fits_the_window(found)
    images = int(found["images"].split("/")[1])
    assert images >= 2 and found["images"] == f"{images}/{images}", found


class _Tables(HTMLParser):
    """Each <table>'s header texts, in order."""

    def __init__(self):
        super().__init__()
        self.headers: list[list[str]] = []
        self._head = False
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.headers.append([])
        self._head = self._head or tag == "thead"
        if tag == "th" and self._head:
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "thead":
            self._head = False
        if tag == "th" and self._cell is not None:
            self.headers[-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


@needs_chromium
def test_a_table_of_any_column_count_is_split_to_fit_1400_px(fsdp_run, suite_run, tmp_path):
    """Far more columns than any key numbers, through the tables' one function: a training run's key numbers with
    every column of its results beside them (over 100), and a collective run's results (about 50). Each is split into
    parts that repeat the columns naming a row, and no part reaches past the window."""
    import pandas as pd

    from commbench.runs import load_run

    training, collective = load_run(fsdp_run), load_run(suite_run / "collective")
    frames = [pd.concat([training.kind.key_numbers(training.results), training.results], axis=1),
              collective.results.drop(columns=["schema_version", "run_id"])]  # led by bench, collective, impl …
    tables = [fitted_tables(frame, classes="key-numbers") for frame in frames]
    for frame, table in zip(frames, tables):
        parsed = _Tables()
        parsed.feed(table)
        assert len(parsed.headers) >= 3, len(parsed.headers)  # many parts: the split is what this test exercises
        repeated = [header for header in parsed.headers[0] if all(header in part for part in parsed.headers)]
        assert repeated and all(part[:len(repeated)] == repeated for part in parsed.headers)  # each names its rows
        assert repeated[0] == str(frame.columns[0])
        shown = [header for part in parsed.headers for header in part[len(repeated):]]
        assert repeated + shown == [str(column) for column in frame.columns]  # every column once, in order
    page = tmp_path / "wide.html"
    page.write_text("\n".join(["<!DOCTYPE html><html><head><meta charset='utf-8'>", render._STYLE, render._SELF_CHECK,
                               "</head><body>", *tables, "</body></html>"]), encoding="utf-8")
    _fits_the_window(_page_in_chromium(page))


@pytest.mark.no_process
def test_short_cells_keep_together_and_long_words_may_break():
    """'◀ best' never breaks over two lines; a 40-character commit hash may break, so that it cannot widen its
    column past what the split assumed."""
    import pandas as pd

    table = fitted_tables(pd.DataFrame({"configuration": ["zero3/fsdp2 reshard=true fwd_prefetch=0"],
                                        "git_commit": ["1f0619699dbb89046bac910c0623820ad17d5b35"],
                                        "best": ["◀ best"]}), classes="key-numbers")
    assert "<td>◀ best</td>" in table and "<wbr>" in table  # the page's style keeps a cell whole unless it wraps
    assert "<td class='wraps'>zero3/fsdp2 reshard=true fwd_prefetch=0</td>" in table  # a long label wraps at spaces
    assert "white-space: nowrap" in render._STYLE and ".wraps" in render._STYLE


# ---- strategy plot labels ------------------------------------------------------------------------------------------

def _label_boxes_apart(figure) -> int:
    """Check every axes' x tick labels: horizontal, inside the figure, none overlapping another; return how many."""
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    whole = figure.bbox
    count = 0
    for axis in figure.axes:
        texts = [text for text in axis.get_xticklabels() if text.get_text()]
        boxes = [text.get_window_extent(renderer) for text in texts]
        assert all(text.get_rotation() == 0 for text in texts)
        assert all(box.x0 >= whole.x0 and box.x1 <= whole.x1 for box in boxes)
        ordered = sorted(boxes, key=lambda box: box.x0)
        assert all(left.x1 < right.x0 for left, right in zip(ordered, ordered[1:])), "x labels overlap"
        count += len(boxes)
    return count


@pytest.mark.distributed
def test_strategy_plot_labels_are_horizontal_wrapped_and_apart(fsdp_run):
    (run,) = render.load_runs([fsdp_run])
    labels = short_labels(run.results)
    assert all(len(label.split()) >= 3 for label in labels)  # the longest labels a sweep has: three settings vary
    for draw in (training_plots.strategy_steps_and_memory, training_plots.model_state_vs_prediction):
        figure, why = draw([run])
        assert figure is not None, why
        assert _label_boxes_apart(figure) == len(labels)  # written once, under the lowest panel of each sweep
        shown = [text.get_text() for axis in figure.axes for text in axis.get_xticklabels() if text.get_text()]
        assert [text.replace("\n", " ") for text in shown] == labels  # wrapped at spaces, nothing cut
        longest_word = max(len(word) for label in labels for word in label.split())
        assert all(len(line) <= longest_word for text in shown for line in text.split("\n"))
        assert max(text.count("\n") for text in shown) >= 1  # wrapped, not one long line
        plt.close(figure)


def test_too_many_bars_for_their_labels_are_numbered_and_the_legend_names_them(fsdp_run):
    """Forty-eight bars with the FSDP sweep's labels cannot stand side by side at any readable width: numbers that
    fit, each named in the legend."""
    import pandas as pd

    labels = short_labels(pd.read_csv(fsdp_run / "results.csv")) * 8
    assert numbered(labels) and not numbered(labels[:6])
    figure, axis = plt.subplots(figsize=(bar_figure_width(labels), 3))
    axis.bar(np.arange(len(labels)), np.arange(len(labels)) + 1.0)  # bar heights are not the point: the labels are
    key = bar_axis(axis, labels)
    axis.legend(handles=key)
    assert _label_boxes_apart(figure) == len(labels)
    assert [text.get_text() for text in axis.get_xticklabels()] == [str(number) for number in range(1, 49)]
    assert [handle.get_label() for handle in key] == [f"{number}: {label}" for number, label
                                                      in enumerate(labels, start=1)]
    plt.close(figure)


# ---- the latency plot names the α–β fit only where one is drawn ------------------------------------------------------

def _fit_lines(axis) -> list:
    return [line for line in axis.get_lines()
            if line.get_label().strip().startswith("its fit") and len(line.get_xdata())]


@pytest.mark.no_process
@pytest.mark.parametrize("log", ["no-fit", "fit"])
def test_the_latency_title_names_the_fit_only_where_one_is_drawn(log, imported, tmp_path):
    (run,) = render.load_runs([imported[log]])
    figure, _ = collective_plots.latency_with_fit([run])
    for axis in figure.axes:
        title = axis.get_title()
        if _fit_lines(axis):
            assert "and the α–β fit t = α + S / algbw" in title, title
        else:
            assert "and the α–β fit" not in title and f"no α–β fit drawn (R² below {LOW_R2:g})" in title, title
    drawn = any(_fit_lines(axis) for axis in figure.axes)
    assert drawn == (log == "fit")  # each log is what its name says: the test covers both cases
    plt.close(figure)
    render.render([imported[log]], tmp_path / "report")
    page = (tmp_path / "report" / "report.html").read_text(encoding="utf-8")
    captions = re.findall(r"<h3>([^<]*)</h3>", page)
    expected = collective_plots.FIT_CAPTION if drawn else collective_plots.NO_FIT_CAPTION
    assert expected in captions and sum("α–β" in caption for caption in captions) == 1, captions


# ---- out-of-place and in-place drawn apart -------------------------------------------------------------------------

def _placement_lines(axis) -> dict:
    """{"out-of-place": its data line, "in-place": …} of an axes' error-bar sets."""
    found = {}
    for container in axis.containers:
        if isinstance(container, ErrorbarContainer):
            label = container.get_label()
            found["in-place" if label.endswith("in-place") else "out-of-place"] = container.lines[0]
    return found


@pytest.mark.no_process
def test_out_of_place_points_show_beside_in_place_ones(imported):
    """The H100 log measured both placements alike, point on point: in-place is drawn on top with larger hollow
    squares and a dashed line, so the filled out-of-place circles still show inside them."""
    (run,) = render.load_runs([imported["no-fit"]])
    for draw in (collective_plots.busbw_vs_size, collective_plots.latency_with_fit):
        figure, _ = draw([run])
        lines = _placement_lines(figure.axes[0])
        assert set(lines) == {"out-of-place", "in-place"}, lines
        out, inside = lines["out-of-place"], lines["in-place"]
        # the same sizes, most figures within 5 %: drawn alike, one line would hide the other
        np.testing.assert_allclose(np.asarray(out.get_xdata(), float), np.asarray(inside.get_xdata(), float))
        outside_y, inside_y = np.asarray(out.get_ydata(), float), np.asarray(inside.get_ydata(), float)
        both = (outside_y > 0) & (inside_y > 0)  # busbw prints 0.00 at the smallest sizes
        apart = np.abs(outside_y[both] / inside_y[both] - 1)
        assert both.sum() >= 10 and np.median(apart) < 0.05, apart
        assert out.get_marker() != inside.get_marker()
        assert inside.get_markerfacecolor() == "none" and out.get_markerfacecolor() != "none"
        assert inside.get_markersize() > out.get_markersize() and inside.get_zorder() > out.get_zorder()
        if draw is collective_plots.busbw_vs_size:
            assert out.get_linestyle() != inside.get_linestyle()
        plt.close(figure)


# ---- the note on imported rows only where one is ------------------------------------------------------------------

def _footnote(page: str) -> str:
    found = re.findall(r"<p class='footnote'>([^<]*)</p>", page)
    return " ".join(found)


@pytest.mark.distributed
def test_the_imported_rows_note_appears_only_with_an_imported_row(fsdp_run, imported, tmp_path):
    render.render([fsdp_run], tmp_path / "measured")
    measured = _footnote((tmp_path / "measured" / "report.html").read_text(encoding="utf-8"))
    assert render.IMPORTED_NOTE not in measured
    # its dashes are what a CPU run without --profile-steps lacks, named by column
    (run,) = render.load_runs([fsdp_run])
    table = run.kind.key_numbers(run.results)
    missing = [str(column) for column in table.columns if table[column].isna().any()]
    assert missing and measured == html.escape("-: no figure: not measured in this run: "
                                               + ", ".join(f'"{column}"' for column in missing))

    render.render([imported["no-fit"]], tmp_path / "imported")
    assert render.IMPORTED_NOTE in _footnote((tmp_path / "imported" / "report.html").read_text(encoding="utf-8"))


def test_the_step_bars_stack_the_exposed_figure_the_tables_show(fsdp_run):
    """The stacked part of each step bar is the tables' exposed communication (step − compute-only step, never below
    0), labelled as such: the plot and the table beside it say one figure."""
    (run,) = render.load_runs([fsdp_run])
    results = run.results
    assert results["exposed_comm_ms_baseline"].notna().all()
    figure, why = training_plots.strategy_steps_and_memory([run])
    assert figure is not None, why
    stacked = [container for axis in figure.axes for container in axis.containers
               if container.get_label() == "exposed communication\n(step − compute-only step)"]
    assert len(stacked) == 1
    heights = [patch.get_height() for patch in stacked[0]]
    frame = results.sort_values("config_index") if "config_index" in results else results
    expected = np.minimum(np.clip(frame["exposed_comm_ms_baseline"].to_numpy(float), 0, None),
                          frame["step_time_ms_p50"].to_numpy(float))
    assert sorted(heights) == pytest.approx(sorted(expected))
    plt.close(figure)
