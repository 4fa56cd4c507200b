"""`commbench fit RUN_DIR`: α–β fits of a run's collectives, written to fit.csv and fit_residuals.csv."""

from dataclasses import asdict
from pathlib import Path

import click

from commbench.cli.json_output import emit_json, json_option
from commbench.errors import CommbenchError


@click.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@json_option
def fit(run_dir: Path, as_json: bool) -> None:
    """Fit t = α + S/bandwidth per (collective, impl, backend, world size, env), weighted by relative error; a fit
    whose R² is below 0.9 is flagged `low`: the line does not describe its points. Rows measured under different
    environment combinations (--env-axis, or imports labelled with --env) are fitted apart; `commbench tune` puts
    their crossovers side by side."""
    from commbench.benches.collective import KIND as COLLECTIVE_KIND
    from commbench.expect.rows import expected_lines
    from commbench.models.alpha_beta import fit_results
    from commbench.models.fit_files import LOW_FIT_ADVICE, LOW_R2, is_low, write_fits
    from commbench.runs import load_results_of
    from commbench.units import format_bytes

    results = load_results_of(run_dir, COLLECTIVE_KIND)
    fits = fit_results(results)
    try:
        written = write_fits(run_dir, fits)
    except OSError as error:  # e.g. a baseline checked out read-only, or a folder where fit.csv goes
        raise CommbenchError(f"cannot write the fits into {run_dir}: {error.strerror} ({error.filename}); fit a "
                             "writable copy of the run") from None
    if as_json:
        emit_json({"run_dir": run_dir, "model": "t = alpha + S/algbw, weighted by relative error; GB/s = 1e9 B/s",
                   "low_r2_below": LOW_R2,
                   "fits": [{**asdict(result), "low_r2": is_low(result)} for result in fits], "written": written,
                   "expected": expected_lines(results)})
        return
    click.echo(f"# α–β fits of {run_dir} (t = α + S/algbw; weighted by relative error; GB/s = 1e9 B/s)")
    with_env = any(result.env for result in fits)  # the column only where the run varied its environment
    click.echo(f"{'collective':<15} {'impl':<8} {'backend':<7} {'ranks':>5} {'dtype':>9} {'op':>5} {'placement':>9} "
               f"{'timing':>13} {'points':>6} {'α (us)':>10} "
               f"{'algbw (GB/s)':>13} {'busbw (GB/s)':>13} {'R²':>7} {'':3}  "
               + (f"{'worst residual':<28} env" if with_env else "worst residual"))
    for result in fits:
        worst = max(result.residuals, key=lambda r: abs(r["residual_pct"]))
        placement = "in" if result.inplace else "out"
        flag = "low" if is_low(result) else ""
        residual = f"{worst['residual_pct']:+.1f} % at {format_bytes(int(worst['size_bytes']))}"
        click.echo(f"{result.collective:<15} {result.impl:<8} {result.backend:<7} {result.world_size:>5} "
                   f"{result.dtype:>9} {result.op:>5} {placement:>9} {result.timing:>13} {result.n_points:>6} "
                   f"{result.alpha_us:>10.1f} "
                   f"{result.algbw_gbps:>13.3f} "
                   f"{result.busbw_gbps:>13.3f} {result.r2:>7.4f} {flag:3}  "
                   + (f"{residual:<28} {result.env or '(default)'}" if with_env else residual))
        if result.note:
            click.echo(f"  note: {result.note}")
    if any(is_low(result) for result in fits):
        click.echo(f"# low: R² below {LOW_R2:g}, {LOW_FIT_ADVICE}")
    for line in expected_lines(results):  # what the fitted busbw can be held against (commbench expect)
        click.echo(line)
    click.echo(f"# written: {written[0]}, {written[1]}")
