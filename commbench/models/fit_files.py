"""The α–β fits of a run as files beside its results: fit.csv (one line per fit) and fit_residuals.csv (each
point's miss), and the R² below which a fit is flagged low. `commbench fit` prints what this writes."""

import csv
from pathlib import Path

from commbench.models.alpha_beta import GROUP_KEYS, AlphaBetaFit
from commbench.store import SCHEMA_VERSION

FIT_FILE, RESIDUALS_FILE = "fit.csv", "fit_residuals.csv"
FIT_COLUMNS = ["schema_version", *GROUP_KEYS, "n_points", "alpha_us", "algbw_gbps", "busbw_gbps", "r2", "note"]
RESIDUAL_COLUMNS = ["schema_version", *GROUP_KEYS, "size_bytes", "time_us_measured", "time_us_fit", "residual_pct"]

LOW_R2 = 0.9
"""Below this R² the α–β line does not describe the points. R² is weighted by relative error, so it compares the
misses in percent with the spread of the times in percent. On an exact α–β curve over 8-15 sizes from 1 KiB to
16 MiB with random errors per point (tests/test_cli_output.py draws them), 10 % errors keep R² above 0.94 and 20 %
bring it to about 0.9: below 0.9 the points miss the line by some 20 % RMS or more, which is not jitter that a fit
averages out but times that barely grow with size (latency-bound sizes, where noise is most of the spread) or a
curve that bends (a protocol switch). A threshold of 0.99 would flag fits that still predict within 10 %."""


LOW_FIT_ADVICE = ("the α–β line does not describe these points (latency-bound noise at small sizes, or a protocol "
                  "switch: see the residuals); do not read α or bandwidth from it")
"""What `commbench fit` says of a low fit, and what every command that would use one says in refusing it."""


def low_fit_refusal(result: AlphaBetaFit, where: str) -> str:
    """The one line a command that needs α and bandwidth gives when the fit it would use is low."""
    return (f"the {result.collective} fit of {where} has R² {result.r2:.3f}, below {LOW_R2:g}: {LOW_FIT_ADVICE}; "
            "measure more sizes or iterations (e.g. --sizes 1K:64M:x4 --iters 50), or pass --allow-poor-fit")


def is_low(result: AlphaBetaFit) -> bool:
    return not result.r2 >= LOW_R2  # a NaN R² describes nothing either


def write_fits(run_dir: Path, fits: list[AlphaBetaFit]) -> list[Path]:
    """Both files, written whole; the paths written. OSError where the folder is not writable."""
    with open(run_dir / FIT_FILE, "w", newline="") as fit_file, \
            open(run_dir / RESIDUALS_FILE, "w", newline="") as residual_file:
        fit_writer, residual_writer = csv.writer(fit_file), csv.writer(residual_file)
        fit_writer.writerow(FIT_COLUMNS)
        residual_writer.writerow(RESIDUAL_COLUMNS)
        for result in fits:
            key = [getattr(result, column) for column in GROUP_KEYS]
            fit_writer.writerow([SCHEMA_VERSION, *key, result.n_points, result.alpha_us, result.algbw_gbps,
                                 result.busbw_gbps, result.r2, result.note])
            for residual in result.residuals:
                residual_writer.writerow([SCHEMA_VERSION, *key, *residual.values()])
    return [run_dir / FIT_FILE, run_dir / RESIDUALS_FILE]
