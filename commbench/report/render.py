"""Render runs into a report folder: each plot as PNG and SVG, report.html (one file that still reads when moved or
mailed: plots and SVG downloads embedded; only trace links, marked so, need the run folders) and summary.md (GitHub
Markdown for CI job summaries and PR comments)."""

import base64
import html
import io
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure

from commbench import store
from commbench.bench_kind import BenchKind, Plot
from commbench.benches import KINDS
from commbench.errors import CommbenchError
from commbench.names import COMMBENCH_SOURCE
from commbench.report.drawings import DRAW
from commbench.report.figure_layout import Drawn
from commbench.report.html_tables import PAGE_PX, fitted_tables
from commbench.runs import LoadedRun, bench_dirs, load_run

META_FIELDS = ["run_id", "status", "command_line", "start_time", "end_time", "hosts", "backend", "backend_version",
               "world_size", "device_type", "device_names", "torch_version", "cuda_version", "driver_version",
               "git_commit", "isolation", "imported_from", "start_time_source", "imported_at"]
SVG_EMBED_LIMIT = 1 << 20
"""An SVG up to this size rides in report.html as a download (base64 adds a third); a larger one (a sweep with
thousands of points) would make the page slow to open and mail, so the page names its file instead."""


@dataclass
class Report:
    out: Path
    drawn: list[tuple[str, str, Path]] = field(default_factory=list)  # (stem, caption, png path)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (caption, why)


def load_runs(run_dirs: list[Path]) -> list[LoadedRun]:
    """The runs, with a suite run (`commbench run`) standing for its benches that measured something."""
    runs = []
    for run_dir in run_dirs:
        benches = bench_dirs(run_dir)
        if list(benches.values()) == [Path(run_dir)]:
            runs.append(load_run(run_dir))
            continue
        loaded = [load_run(bench_dir, f"{Path(run_dir).name}/{name}", allow_empty=True)
                  for name, bench_dir in benches.items() if _ran(bench_dir)]
        measured = [run for run in loaded if not run.results.empty]
        if not measured:
            raise CommbenchError(f"{run_dir} is a suite run whose benches have no result rows; nothing to report")
        runs += measured
    return runs


def _ran(bench_dir: Path) -> bool:
    """Whether a bench of a suite got to write rows; its meta.json is read either way, so that a damaged bench is
    named rather than passed over (a bench that never ran has a meta.json and no results.csv)."""
    store.read_meta(bench_dir)
    return (bench_dir / store.RESULTS_FILE).exists()


def _plots() -> list[tuple[Plot, list[BenchKind]]]:
    """Every plot of the registered kinds once, in registry order, with the kinds that list it."""
    plots: dict[str, tuple[Plot, list[BenchKind]]] = {}
    for kind in KINDS.values():
        for plot in kind.plots:
            plots.setdefault(plot.stem, (plot, []))[1].append(kind)
    return list(plots.values())


def _draw(plot: Plot, kinds: list[BenchKind], runs: list[LoadedRun]) -> Drawn:
    """(figure, None) or (None, why skipped)."""
    mine = [run for run in runs if run.kind in kinds]
    if not mine:
        return None, f"no {' or '.join(kind.title for kind in kinds)} among the runs"
    return DRAW[plot.stem](mine)


def render(run_dirs: list[Path], out: Path) -> Report:
    runs = load_runs(run_dirs)
    out.mkdir(parents=True, exist_ok=True)
    report = Report(out)
    for plot, kinds in _plots():
        match _draw(plot, kinds, runs):
            case None, why:
                report.skipped.append((plot.caption, why))
            case figure, None:
                report.drawn.append(_save(figure, plot, out))
    (out / "report.html").write_text(_html(runs, report), encoding="utf-8")
    (out / "summary.md").write_text(_markdown(runs, report), encoding="utf-8")
    return report


def _save(figure: Figure, plot: Plot, out: Path) -> tuple[str, str, Path]:
    """Writes the figure as PNG and SVG; returns (its stem, its caption, the PNG)."""
    for suffix in ("png", "svg"):  # tight: the legends sit outside the axes and must not be cut off
        figure.savefig(out / f"{plot.stem}.{suffix}", dpi=110, bbox_inches="tight")
    # a drawing that knows better than the kind's fixed caption what it drew (no α–β fit passed) names it
    caption = str(figure.get_label() or plot.caption)
    plt.close(figure)
    return plot.stem, caption, out / f"{plot.stem}.png"


def _meta_table(runs: list[LoadedRun]) -> pd.DataFrame:
    """One column per run, one row per metadata field (runs side by side read better than a wide table)."""
    return pd.DataFrame({run.name: [_text(run.meta.get(name)) for name in META_FIELDS] for run in runs},
                        index=META_FIELDS)


def _text(value: object) -> str:
    if isinstance(value, list):
        return ", ".join(map(str, value))
    return "" if value is None else str(value)


def _traces(run: LoadedRun) -> list[Path]:
    folder = Path(run.path).resolve() / "traces"
    return sorted(folder.glob("*.json*")) if folder.is_dir() else []


def _svg_download(svg: Path) -> str:
    """The plot's SVG as an embedded download, or, when over SVG_EMBED_LIMIT, its file named as text."""
    size = svg.stat().st_size
    if size <= SVG_EMBED_LIMIT:
        encoded = base64.b64encode(svg.read_bytes()).decode("ascii")
        return (f"<a download='{html.escape(svg.name)}' href='data:image/svg+xml;base64,{encoded}'>"
                f"SVG ({size / 1024:.0f} KiB, embedded)</a>")
    return (f"SVG not embedded ({size / 2**20:.1f} MiB, over {SVG_EMBED_LIMIT >> 20} MiB): "
            f"<code>{html.escape(str(svg.resolve()))}</code>, beside the original report.html")


# Loaded with the page: counts images that decoded to a non-zero size, records script errors, and measures whether
# the page fits its window (scrollWidth/clientWidth; how many tables reach past the window or scroll inside), so a
# headless browser (and a person) can tell that the page is whole and needs no sideways scrolling.
_SELF_CHECK = """
<script>
window.reportErrors = [];
window.addEventListener("error", function (event) { window.reportErrors.push(String(event.message)); }, true);
var consoleError = console.error;
console.error = function () { window.reportErrors.push(Array.prototype.join.call(arguments, " "));
                              consoleError.apply(console, arguments); };
window.addEventListener("load", function () {
  var images = Array.prototype.slice.call(document.images);
  var ok = images.filter(function (image) { return image.naturalWidth > 0 && image.naturalHeight > 0; }).length;
  document.body.setAttribute("data-images", ok + "/" + images.length);
  document.body.setAttribute("data-errors", String(window.reportErrors.length));
  var page = document.documentElement;
  document.body.setAttribute("data-page-width", page.scrollWidth + "/" + page.clientWidth);
  var tables = Array.prototype.slice.call(document.querySelectorAll("table"));
  document.body.setAttribute("data-wide-tables", String(tables.filter(function (table) {
    return table.getBoundingClientRect().right > page.clientWidth || table.scrollWidth > table.clientWidth + 1;
  }).length) + "/" + tables.length);
});
</script>
"""
# Table cells keep short text on one line ("◀ best", "489.5–1024.7") and wrap the long ones html_tables marks (it also
# splits a table too wide for PAGE_PX), so the page never scrolls sideways; a continued part sits close under the
# part before it.
_STYLE = f"""
<style>
body {{ font-family: sans-serif; margin: 2em; max-width: {PAGE_PX}px; }}
table {{ border-collapse: collapse; font-size: 0.85em; margin-bottom: 1.5em; max-width: 100%; }}
table.split {{ margin-bottom: 0.4em; }}
th, td {{ border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: right; white-space: nowrap; }}
th.wraps, td.wraps {{ white-space: normal; }}
th {{ background: #f0f0f0; }}
img {{ max-width: 100%; border: 1px solid #eee; }}
.needs-run-folder {{ color: #a04000; }}
</style>
"""


def _html(runs: list[LoadedRun], report: Report) -> str:
    parts = ["<!DOCTYPE html>", "<html><head><meta charset='utf-8'><title>commbench report</title>", _STYLE,
             _SELF_CHECK, "</head><body>", "<h1>commbench report</h1>",
             "<p>This page stands alone: every plot and SVG download is embedded, so it reads the same when moved or "
             "mailed. Only the trace links below need their run folder on this machine; each says which.</p>",
             "<h2>Runs</h2>",
             fitted_tables(_meta_table(runs), classes="runs", index=True)]
    for run in runs:
        parts.append(f"<h2>Key numbers: {html.escape(run.name)} ({run.kind.name})</h2>")
        parts.append(_key_numbers_html(run))
    parts.append("<h2>Plots</h2>")
    for stem, caption, png in report.drawn:
        encoded = base64.b64encode(png.read_bytes()).decode("ascii")
        parts.append(f"<h3>{html.escape(caption)}</h3><img alt='{html.escape(caption)}' "
                     f"src='data:image/png;base64,{encoded}'><p>{_svg_download(png.with_name(f'{stem}.svg'))}</p>")
    if report.skipped:
        parts.append("<h2>Skipped plots</h2><ul>")
        parts += [f"<li>{html.escape(caption)}: {html.escape(why)}</li>" for caption, why in report.skipped]
        parts.append("</ul>")
    for run in runs:
        traces = _traces(run)
        if traces:
            # too large to embed (megabytes each on a GPU run): linked by absolute path, which survives moving the
            # page on this machine, and marked, so a reader of a mailed copy knows what is missing
            folder = html.escape(str(Path(run.path).resolve()))
            parts.append(f"<h2>Traces: {html.escape(run.name)}</h2><p>Open in Perfetto (ui.perfetto.dev) or "
                         f"chrome://tracing. Not embedded (traces are large): these links need the run folder "
                         f"<code>{folder}</code>.</p><ul>")
            parts += [f"<li data-needs-run-folder='{folder}'><a href='{html.escape(trace.as_uri())}'>"
                      f"{html.escape(trace.name)}</a> <span class='needs-run-folder'>needs the run folder "
                      f"{folder}</span></li>" for trace in traces]
            parts.append("</ul>")
    parts.append("</body></html>")
    return "\n".join(parts)


IMPORTED_NOTE = "an imported row has no samples, so no CI and no count of noisy points"


def _key_numbers_html(run: LoadedRun) -> str:
    """The key numbers as a table (or its parts) whose missing cells are a dash, with a footnote that gives the
    reason that applies: imported rows' missing samples only where an imported row has a dash."""
    table = run.kind.key_numbers(run.results)
    return fitted_tables(table, classes="key-numbers") + _dash_note(table, _imported(run, table))


def _imported(run: LoadedRun, table: pd.DataFrame) -> pd.Series:
    """Which key-number rows come from an imported file: by their source where the table names it (a collective
    run may mix imported and measured rows), else by the run's metadata."""
    if "source" in table.columns:
        return table["source"].fillna(COMMBENCH_SOURCE).astype(str) != COMMBENCH_SOURCE
    return pd.Series(bool(run.meta.get("imported_from")), index=table.index)


def _dash_reasons(table: pd.DataFrame, imported: pd.Series) -> list[str]:
    """Why cells of the table are '-', one reason per kind of row that has one: imported rows have no samples; a
    measured row lacks what its run did not measure (MFU on CPU, a trace's figures without --profile-steps), named
    by column."""
    missing = table.isna()
    reasons = []
    if missing[imported.to_numpy()].to_numpy().any():
        reasons.append(IMPORTED_NOTE)
    measured = missing[~imported.to_numpy()]
    columns = [str(column) for column in table.columns if measured[column].any()]
    if columns:
        reasons.append("not measured in this run: " + ", ".join(f'"{column}"' for column in columns))
    return reasons


def _dash_note(table: pd.DataFrame, imported: pd.Series) -> str:
    reasons = _dash_reasons(table, imported)
    return f"<p class='footnote'>{html.escape('-: no figure: ' + '; '.join(reasons))}</p>" if reasons else ""


def _markdown(runs: list[LoadedRun], report: Report) -> str:
    lines = ["## commbench report", ""]
    for run in runs:
        meta = run.meta
        lines += [f"### {run.name} ({run.kind.name}, {_text(meta.get('backend'))}, "
                  f"{_text(meta.get('world_size'))} ranks, "
                  f"{_text(meta.get('device_type'))}, status {_text(meta.get('status'))})", "",
                  _markdown_table(run.kind.key_numbers(run.results)), ""]
    lines.append("Plots: " + (", ".join(f"`{png.name}`" for _, _, png in report.drawn) or "none"))
    for caption, why in report.skipped:
        lines.append(f"- skipped {caption}: {why}")
    return "\n".join(lines) + "\n"


def _markdown_table(frame: pd.DataFrame) -> str:
    buffer = io.StringIO()
    buffer.write("| " + " | ".join(map(str, frame.columns)) + " |\n")
    buffer.write("|" + "---|" * len(frame.columns) + "\n")
    for _, row in frame.iterrows():
        buffer.write("| " + " | ".join("-" if pd.isna(value) else str(value) for value in row) + " |\n")
    return buffer.getvalue().rstrip("\n")
