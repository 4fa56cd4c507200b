"""`commbench compare BASELINE NEW`: the regression gate (exit 0 none, 1 regression, 2 bad input)."""

import sys
from pathlib import Path

import click

from commbench.cli.shared import split_commas
from commbench.errors import ExitCode


@click.command(name="compare")
@click.argument("baseline", type=click.Path(path_type=Path))
@click.argument("new", type=click.Path(path_type=Path))
@click.option("--fail", "fails", multiple=True, callback=split_commas,
              help="METRIC:PERCENT that counts as a regression: busbw, time (collective runs), step_time, peak_mem "
                   "(training runs); repeatable [default: busbw:5% step_time:3% peak_mem:2%].")
@click.option("--markdown", type=click.Path(path_type=Path), default=None,
              help="Also write the comparison as GitHub Markdown to this file (for CI job summaries).")
def compare_command(baseline, new, fails, markdown) -> None:
    """Join two runs on their configuration keys and flag rows that got worse beyond a threshold and significantly.

    Exit codes: 0 no regression, 1 at least one regression, 2 bad input.
    """
    from commbench.compare import (
        DEFAULT_THRESHOLDS,
        compare,
        format_markdown,
        format_terminal,
        parse_threshold,
        regressions,
    )

    thresholds = dict(parse_threshold(text) for text in fails) if fails else dict(DEFAULT_THRESHOLDS)
    entries = compare(baseline, new, thresholds)
    click.echo(format_terminal(entries))
    if markdown:
        markdown.write_text(format_markdown(entries, baseline=baseline, new=new), encoding="utf-8")
    if regressions(entries):
        sys.exit(ExitCode.REGRESSION)
