"""`commbench compare BASELINE NEW`: the regression gate (exit 0 passed, 1 failed: a regression, or rows or runs
the new side misses; 2 bad input, never 1)."""

import sys
from pathlib import Path

import click

from commbench.cli.json_output import emit_json, json_option
from commbench.cli.shared import NON_NEGATIVE_NUMBER, POSITIVE_NUMBER, split_commas
from commbench.errors import CommbenchError, ExitCode
from commbench.gate.priors import CPU_PRIOR, GPU_PRIOR


@click.command(name="compare")
@click.argument("baseline", type=click.Path(path_type=Path))
@click.argument("new", type=click.Path(path_type=Path))
@click.option("--fail", "fails", multiple=True, callback=split_commas,
              help="METRIC:PERCENT that counts as a regression: busbw, time (collective runs), step_time, peak_mem "
                   "(training runs); repeatable [default: busbw:5% step_time:3% peak_mem:2%].")
@click.option("--markdown", type=click.Path(path_type=Path), default=None,
              help="Also write the comparison as GitHub Markdown to this file (for CI job summaries).")
@click.option("--launch-noise", type=NON_NEGATIVE_NUMBER, default=None, metavar="PCT",
              help="The launch-to-launch spread (%) to assume where a side is a single launch: a change within the "
                   "floor it sets is ~, never a regression [default: a run set side's run_set.json (or its "
                   "launches' spread), else the launch noise stored for the machine that recorded the new side "
                   "(`commbench env` shows it), else the prior for its device: "
                   f"{CPU_PRIOR.noise_pct:g} on CPUs, {GPU_PRIOR.noise_pct:g} on GPUs].")
@click.option("--fail-below-expected", "below_expected_pct", type=POSITIVE_NUMBER, default=None, metavar="PCT",
              help="Also fail where a new row's busbw is below PCT % of its expected busbw (the busbw the machine's "
                   "topology allows: commbench expect), at sizes where bandwidth dominates; e.g. 70.")
@click.option("--allow-missing", is_flag=True,
              help="Pass the gate although the new side lacks baseline rows or benches, or a run of it did not "
                   "complete (they are still listed); a regression still fails it.")
@click.option("-v", "--verbose", is_flag=True,
              help="List every row that did not join (missing, new, not comparable) instead of a line per reason.")
@json_option
def compare_command(baseline: Path, new: Path, fails: tuple[str, ...], markdown: Path | None,
                    launch_noise: float | None, below_expected_pct: float | None, allow_missing: bool, verbose: bool,
                    as_json: bool) -> None:
    """Join two runs on their configuration keys and flag rows that got worse beyond a threshold and significantly.

    Where both sides are run sets (--launches N, 2 or more), a row is tested across launches (Welch t on the log
    per-launch values); where a side is one launch, a change within the launch-noise floor is ~ (column detectable:
    the smallest change the comparison could flag). Notes under the table say when a side is a single launch and
    which floor was used, and how many rows have a 95 % CI wider than ±10 % (column wide CI); they do not change
    the verdicts. With --json the same comparison is one
    JSON document on stdout (the notes also on stderr), with the same exit code.

    --fail-below-expected PCT also holds each new row against the busbw its machine's topology allows (commbench
    expect), at sizes where bandwidth dominates.

    Rows that did not join are summed up, a line per reason (-v lists them). Two runs that share no configuration
    (every row at another world size, backend or device) are refused: there is nothing to compare.

    Exit codes: 0 the gate passed; 1 it failed: a regression, a row below --fail-below-expected, or (without
    --allow-missing) the new side misses rows or benches the baseline has or a run of it did not complete (failed,
    or still running); 2 bad input (an unreadable run, or a baseline that is not complete).
    """
    from commbench.gate.compare import compare
    from commbench.gate.compare_output import (
        format_markdown,
        format_terminal,
        json_document,
        output_width,
        trust_notes,
    )
    from commbench.gate.gate_verdict import gate_fails
    from commbench.gate.launch_values import launch_floor
    from commbench.gate.thresholds import DEFAULT_THRESHOLDS, parse_threshold

    thresholds = dict(parse_threshold(text) for text in fails) if fails else dict(DEFAULT_THRESHOLDS)
    entries = compare(baseline, new, thresholds, launch_noise_pct=launch_noise, below_expected_pct=below_expected_pct)
    floor = launch_floor(baseline, new, launch_noise)  # what compare used: for the notes and the document
    notes = trust_notes(baseline, new, entries, floor)
    if markdown:  # written before stdout: a file that cannot be written is bad input, and --json then prints nothing
        text = format_markdown(entries, baseline=baseline, new=new, allow_missing=allow_missing, notes=notes)
        try:
            markdown.write_text(text, encoding="utf-8")
        except OSError as error:
            raise CommbenchError(f"cannot write --markdown {markdown}: {error.strerror}; choose a writable file"
                                 ) from None
    if as_json:
        emit_json(json_document(entries, notes, baseline=baseline, new=new, thresholds=thresholds,
                                allow_missing=allow_missing, floor=floor))
        for note in notes:  # for a human reading the log; the document holds them too
            click.echo(f"commbench: note: {note}", err=True)
    else:
        click.echo(format_terminal(entries, allow_missing=allow_missing, notes=notes, verbose=verbose,
                                   width=output_width()))
    if gate_fails(entries, allow_missing=allow_missing):
        sys.exit(ExitCode.REGRESSION)
