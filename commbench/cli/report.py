"""`commbench report RUN_DIR [RUN_DIR ...]`: plots (PNG and SVG), report.html and summary.md."""

from pathlib import Path

import click

from commbench.errors import CommbenchError


@click.command()
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Folder for the report [default: plots/<last run's name>].")
@click.option("-v", "--verbose", is_flag=True, help="Also say why each plot that was not drawn was not.")
def report(run_dirs: tuple[Path, ...], out: Path | None, verbose: bool) -> None:
    """Draw the plots whose data exist in the runs, and write a self-contained report.html and summary.md."""
    from commbench.report.render import render

    out = out or Path("plots") / Path(run_dirs[-1]).name
    if out.exists() and not out.is_dir():
        raise CommbenchError(f"--out {out} is a file; choose a folder for the report")
    try:
        result = render(list(run_dirs), out)
    except OSError as error:  # the inputs were read by then (their problems are CommbenchErrors): the output failed
        raise CommbenchError(f"cannot write the report into {out}: {error.strerror or error}"
                             f"{f' ({error.filename})' if error.filename else ''}; choose a writable --out") from None
    for _, caption, png in result.drawn:
        click.echo(f"drew {caption}: {png} (+ .svg)")
    if verbose:
        for caption, why in result.skipped:
            click.echo(f"skipped {caption}: {why}")
    elif result.skipped:  # most are plots of kinds the runs never had: one line, not one per plot
        click.echo(f"# {len(result.skipped)} plot(s) not drawn: the runs have no data for them (-v says why)")
    click.echo(f"# Report: {out / 'report.html'}  Markdown: {out / 'summary.md'}")
