"""`commbench fit RUN_DIR`: α–β fits of a run's collectives, written to fit.csv and fit_residuals.csv."""

import csv
from dataclasses import asdict
from pathlib import Path

import click

from commbench.cli.json_output import emit_json, json_option
from commbench.errors import CommbenchError
from commbench.store import SCHEMA_VERSION

FIT_FILE, RESIDUALS_FILE = "fit.csv", "fit_residuals.csv"
KEY = ["collective", "impl", "backend", "world_size", "dtype", "op", "inplace", "timing"]
FIT_COLUMNS = ["schema_version", *KEY, "n_points", "alpha_us", "algbw_gbps", "busbw_gbps", "r2", "note"]
RESIDUAL_COLUMNS = ["schema_version", *KEY, "size_bytes", "time_us_measured", "time_us_fit", "residual_pct"]


LOW_R2 = 0.9
"""Below this R² the α–β line does not describe the points. R² is weighted by relative error, so it compares the
misses in percent with the spread of the times in percent. On an exact α–β curve over 8-15 sizes from 1 KiB to
16 MiB with random errors per point (tests/test_cli_output.py draws them), 10 % errors keep R² above 0.94 and 20 %
bring it to about 0.9: below 0.9 the points miss the line by some 20 % RMS or more, which is not jitter that a fit
averages out but times that barely grow with size (latency-bound sizes, where noise is most of the spread) or a
curve that bends (a protocol switch). A threshold of 0.99 would flag fits that still predict within 10 %."""


@click.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@json_option
def fit(run_dir: Path, as_json: bool) -> None:
    """Fit t = α + S/bandwidth per (collective, impl, backend, world size), weighted by relative error; a fit whose
    R² is below 0.9 is flagged `low`: the line does not describe its points."""
    from commbench.models.alpha_beta import fit_results
    from commbench.runs import load_collective_results

    fits = fit_results(load_collective_results(run_dir))
    try:
        _write_fits(run_dir, fits)
    except OSError as error:  # e.g. a baseline checked out read-only, or a folder where fit.csv goes
        raise CommbenchError(f"cannot write the fits into {run_dir}: {error.strerror} ({error.filename}); fit a "
                             "writable copy of the run") from None
    written = [run_dir / FIT_FILE, run_dir / RESIDUALS_FILE]
    if as_json:
        emit_json({"run_dir": run_dir, "model": "t = alpha + S/algbw, weighted by relative error; GB/s = 1e9 B/s",
                   "low_r2_below": LOW_R2,
                   "fits": [{**asdict(result), "low_r2": _low(result)} for result in fits], "written": written})
        return
    click.echo(f"# α–β fits of {run_dir} (t = α + S/algbw; weighted by relative error; GB/s = 1e9 B/s)")
    click.echo(f"{'collective':<15} {'impl':<8} {'backend':<7} {'ranks':>5} {'dtype':>9} {'op':>5} {'placement':>9} "
               f"{'timing':>13} {'points':>6} {'α (us)':>10} "
               f"{'algbw (GB/s)':>13} {'busbw (GB/s)':>13} {'R²':>7} {'':3}  worst residual")
    for result in fits:
        worst = max(result.residuals, key=lambda r: abs(r["residual_pct"]))
        placement = "in" if result.inplace else "out"
        flag = "low" if _low(result) else ""
        click.echo(f"{result.collective:<15} {result.impl:<8} {result.backend:<7} {result.world_size:>5} "
                   f"{result.dtype:>9} {result.op:>5} {placement:>9} {result.timing:>13} {result.n_points:>6} "
                   f"{result.alpha_us:>10.1f} "
                   f"{result.algbw_gbps:>13.3f} "
                   f"{result.busbw_gbps:>13.3f} {result.r2:>7.4f} {flag:3}  {worst['residual_pct']:+.1f} % at "
                   f"{worst['size_bytes']} B")
        if result.note:
            click.echo(f"  note: {result.note}")
    if any(_low(result) for result in fits):
        click.echo(f"# low: R² below {LOW_R2:g}, the α–β line does not describe these points (latency-bound noise "
                   "at small sizes, or a protocol switch: see the residuals); do not read α or bandwidth from it")
    click.echo(f"# written: {written[0]}, {written[1]}")


def _low(result) -> bool:
    return not result.r2 >= LOW_R2  # a NaN R² describes nothing either


def _write_fits(run_dir: Path, fits: list) -> None:
    with open(run_dir / FIT_FILE, "w", newline="") as fit_file, \
            open(run_dir / RESIDUALS_FILE, "w", newline="") as residual_file:
        fit_writer, residual_writer = csv.writer(fit_file), csv.writer(residual_file)
        fit_writer.writerow(FIT_COLUMNS)
        residual_writer.writerow(RESIDUAL_COLUMNS)
        for result in fits:
            key = [getattr(result, column) for column in KEY]
            fit_writer.writerow([SCHEMA_VERSION, *key, result.n_points, result.alpha_us, result.algbw_gbps,
                                 result.busbw_gbps, result.r2, result.note])
            for residual in result.residuals:
                residual_writer.writerow([SCHEMA_VERSION, *key, *residual.values()])
