"""`commbench model memory|comm`: what the ZeRO formulas predict per rank, before there is a cluster.

Light on purpose: without --from, these answer in a blink on a laptop, so torch, pandas, scipy and matplotlib are
imported only by the --from path.
"""

import math
from pathlib import Path

import click

from commbench.cli.json_output import emit_json, json_option
from commbench.cli.shared import NON_NEGATIVE_NUMBER, POSITIVE_NUMBER
from commbench.errors import CommbenchError
from commbench.models import memory
from commbench.models.strategies import STRATEGIES, display_name
from commbench.names import PER_ITERATION
from commbench.units import UNITS, format_count, parse_count, parse_memory


@click.group()
def model() -> None:
    """Analytic models: model-state memory and communication per step."""


def _state_bytes(preset: str, param_bytes: float | None, grad_bytes: float | None,
                 optim_bytes: float | None) -> memory.StateBytes:
    if param_bytes is None and grad_bytes is None and optim_bytes is None:
        return memory.PRESETS[preset]
    if param_bytes is None or grad_bytes is None or optim_bytes is None:
        raise CommbenchError(_CUSTOM_BYTES)
    custom = (param_bytes, grad_bytes, optim_bytes)
    if any(not math.isfinite(value) or value < 0 for value in custom) or not any(custom):
        raise CommbenchError(_CUSTOM_BYTES)
    return memory.StateBytes(*custom)


_CUSTOM_BYTES = ("--param-bytes, --grad-bytes and --optim-bytes go together, each a finite 0 or more and not all 0 "
                 "(bytes per parameter)")


def _check_ranks(ranks: int) -> None:
    if ranks < 1:
        raise CommbenchError(f"--ranks {ranks} must be 1 or more")


@model.command(name="memory")
@click.option("--params", required=True, help="Parameter count: 7B, 125M, 1.5e9 (decimal K/M/B/T).")
@click.option("--ranks", type=int, required=True, help="Data-parallel ranks N.")
@click.option("--preset", type=click.Choice(list(memory.PRESETS)), default="mixed-adam", show_default=True,
              help="Bytes per parameter: mixed-adam P2 G2 O12, fp32-adam P4 G4 O8, bf16-fp32grad-adam P2 G4 O12.")
@click.option("--param-bytes", type=NON_NEGATIVE_NUMBER, default=None,
              help="Custom bytes per parameter for parameters.")
@click.option("--grad-bytes", type=NON_NEGATIVE_NUMBER, default=None, help="Custom bytes per parameter for gradients.")
@click.option("--optim-bytes", type=NON_NEGATIVE_NUMBER, default=None,
              help="Custom bytes per parameter for optimizer state.")
@click.option("--shard-group", type=int, default=None, help="HSDP shard-group size (adds an HSDP row).")
@click.option("--units", type=click.Choice(["GB", "GiB"]), default="GB", show_default=True,
              help="GB = 1e9 bytes, GiB = 2^30 bytes.")
@click.option("--fit", "fit_memory", default=None, help="Memory per rank, e.g. 80GB: add the fewest ranks that fit.")
@json_option
def memory_command(params: str, ranks: int, preset: str, param_bytes: float | None, grad_bytes: float | None,
                   optim_bytes: float | None, shard_group: int | None, units: str, fit_memory: str | None,
                   as_json: bool) -> None:
    """Model-state memory per rank for DDP, ZeRO-1, ZeRO-2, ZeRO-3/FSDP (and HSDP)."""
    psi = parse_count(params, option="--params")
    _check_ranks(ranks)
    state = _state_bytes(preset, param_bytes, grad_bytes, optim_bytes)
    capacity = parse_memory(fit_memory, option="--fit") if fit_memory is not None else None  # --fit '' is refused
    rows = memory.table(params=psi, ranks=ranks, state=state, shard_group=shard_group)
    ddp_total = rows[0].total_bytes
    fits = {row.strategy: memory.min_ranks_to_fit(row.strategy, params=psi, state=state, capacity_bytes=capacity)
            for row in rows} if capacity else {}
    if as_json:
        per_rank = [{"strategy": display_name(row.strategy), "shards": row.shards, "param_bytes": row.param_bytes,
                     "grad_bytes": row.grad_bytes, "optim_bytes": row.optim_bytes, "total_bytes": row.total_bytes,
                     "reduction_vs_ddp": ddp_total / row.total_bytes if row.total_bytes else None,
                     **({"min_ranks_to_fit": fits[row.strategy]} if capacity else {})} for row in rows]
        emit_json({"params": psi, "ranks": ranks, "bytes_per_param": vars(state), "per_rank": per_rank})
        return
    scale = UNITS[units]
    click.echo(f"# model state per rank: {format_count(psi)} parameters, {ranks} ranks; {state.describe()}; "
               f"1 {units} = {scale} B")
    header = f"{'strategy':<12} {f'params ({units})':>14} {f'grads ({units})':>14} {f'optim ({units})':>14} " \
             f"{f'total ({units})':>14} {'vs DDP':>8}"
    if capacity:
        header += f" {f'min ranks to fit {fit_memory}':>24}"
    click.echo(header)
    for row in rows:
        line = (f"{display_name(row.strategy):<12} {row.param_bytes / scale:>14.2f} {row.grad_bytes / scale:>14.2f} "
                f"{row.optim_bytes / scale:>14.2f} {row.total_bytes / scale:>14.2f} "
                f"{ddp_total / row.total_bytes if row.total_bytes else math.nan:>7.2f}x")
        if capacity:
            needed = fits[row.strategy]
            label = "never" if needed is None else (f"shard group {needed}"
                                                    if STRATEGIES[row.strategy].needs_shard_group else str(needed))
            line += f" {label:>24}"
        click.echo(line)
    click.echo("# not included: activations, all-gather buffers, communication workspaces, fragmentation")


@model.command(name="comm")
@click.option("--params", required=True, help="Parameter count: 7B, 125M, 1.5e9.")
@click.option("--ranks", type=int, required=True, help="Data-parallel ranks N.")
@click.option("--dtype-bytes", type=POSITIVE_NUMBER, default=2.0, show_default=True,
              help="Bytes per communicated element (2 for bf16/fp16 gradients and parameters).")
@click.option("--alpha-us", type=NON_NEGATIVE_NUMBER, default=None, help="Latency α of one ring step, µs.")
@click.option("--bw-gbps", type=POSITIVE_NUMBER, default=None, help="Link (bus) bandwidth, GB/s (1e9 B/s).")
@click.option("--from", "from_run", type=click.Path(path_type=Path), default=None,
              help="Fit α and bandwidth from a run's all_reduce results instead.")
@click.option("--allow-poor-fit", is_flag=True,
              help="With --from: use the run's fit even where its R² is below commbench fit's threshold.")
@json_option
def comm_command(params: str, ranks: int, dtype_bytes: float, alpha_us: float | None, bw_gbps: float | None,
                 from_run: Path | None, allow_poor_fit: bool, as_json: bool) -> None:
    """Bytes sent per rank per step with ring collectives for DDP and ZeRO-1/2/3, and (with α–β) the time."""
    psi = parse_count(params, option="--params")
    _check_ranks(ranks)
    if not math.isfinite(dtype_bytes) or dtype_bytes <= 0:
        raise CommbenchError(f"--dtype-bytes {dtype_bytes:g} must be a finite number above 0")
    source, fit_ranks = None, None
    if from_run is not None:
        if alpha_us is not None or bw_gbps is not None:
            raise CommbenchError("--from fits α and bandwidth from a run: drop --alpha-us/--bw-gbps, or drop --from")
        alpha_us, bw_gbps, source, fit_ranks = _alpha_beta_from_run(from_run, allow_poor_fit=allow_poor_fit)
    elif (alpha_us is None) != (bw_gbps is None):
        raise CommbenchError("--alpha-us and --bw-gbps go together (or use --from RUN_DIR)")
    if from_run is None and (bw_gbps is not None and not (math.isfinite(bw_gbps) and bw_gbps > 0)
                             or alpha_us is not None and not (math.isfinite(alpha_us) and alpha_us >= 0)):
        raise CommbenchError("--bw-gbps must be a finite number above 0 and --alpha-us a finite 0 or more")
    from commbench.models import comm_volume  # the traffic model loads with the command that prints it

    rows = comm_volume.traffic(params=psi, ranks=ranks, dtype_bytes=dtype_bytes, alpha_us=alpha_us,
                               busbw_gbps=bw_gbps)
    extrapolated = fit_ranks is not None and fit_ranks != ranks
    if as_json:
        emit_json({"params": psi, "ranks": ranks, "dtype_bytes": dtype_bytes, "alpha_us": alpha_us,
                   "bw_gbps": bw_gbps, "source": source, "fit_world_size": fit_ranks, "extrapolated": extrapolated,
                   "per_step": [{**vars(row), "strategy": display_name(row.strategy)} for row in rows]})
        return
    timing = f"; α {alpha_us:g} µs per ring step, {bw_gbps:g} GB/s" + (f" ({source})" if source else "") \
        if alpha_us is not None else ""
    click.echo(f"# bytes sent per rank per step, ring collectives: {format_count(psi)} parameters x "
               f"{dtype_bytes:g} B, {ranks} ranks{timing}")
    if extrapolated:
        click.echo(f"# note: α and bandwidth were fitted at {fit_ranks} ranks, so the times at {ranks} extrapolate: "
                   "they assume the same α per ring step and the same link bandwidth, which a ring over more (or "
                   "other) links, such as a second node, need not keep")
    click.echo(f"{'strategy':<12} {'sent per rank (GB)':>19} {'vs DDP':>8}" + (f" {'time (ms)':>10}" if timing else ""))
    for row in rows:
        ratio = "n/a" if row.ratio_to_ddp is None else f"{row.ratio_to_ddp:.2f}x"
        line = f"{display_name(row.strategy):<12} {row.bytes_sent_per_rank / 1e9:>19.3f} {ratio:>8}"
        if row.time_s is not None:
            line += f" {row.time_s * 1e3:>10.2f}"
        click.echo(line)


def _alpha_beta_from_run(run_dir: Path, *, allow_poor_fit: bool = False) -> tuple[float, float, str, int]:
    """α per ring step and link bandwidth fitted from the run, what they were fitted from, and at how many ranks."""
    from commbench.benches.collective import KIND as COLLECTIVE_KIND
    from commbench.models.alpha_beta import fit_results, hockney_from_all_reduce  # numpy, scipy
    from commbench.models.fit_files import is_low, low_fit_refusal
    from commbench.runs import load_results_of  # pandas

    results = load_results_of(run_dir, COLLECTIVE_KIND)
    fits = [fit for fit in fit_results(results) if fit.collective == "all_reduce" and fit.impl == "builtin"
            and fit.world_size > 1]
    if not fits:
        raise CommbenchError(f"{run_dir} has no builtin all_reduce measured at 2+ ranks and 2+ sizes to fit α–β "
                             "from; run commbench sweep -c all_reduce first")
    # the most ranks and sizes; per-iteration before batch: it times one call at a time, as a step issues them
    # the environment the run started in over a forced one (--env-axis NCCL_ALGO=...): the model is of NCCL's choice
    fit = max(fits, key=lambda f: (not f.env, f.world_size, f.n_points, f.timing == PER_ITERATION))
    if is_low(fit) and not allow_poor_fit:  # in the words of `commbench fit`, which flags the same fit low
        raise CommbenchError(low_fit_refusal(fit, str(run_dir)))
    alpha, bandwidth = hockney_from_all_reduce(fit)
    if not (alpha >= 0 and bandwidth > 0 and math.isfinite(bandwidth)):
        raise CommbenchError(f"the all_reduce fit of {run_dir} gives α {alpha:.3g} µs and {bandwidth:.3g} GB/s, "
                             "which predict nothing; measure more sizes (e.g. --sizes 1K:64M:x4)")
    note = f"; {fit.note}" if fit.note else ""
    return alpha, bandwidth, (f"fitted from {run_dir} all_reduce {fit.dtype} at {fit.world_size} ranks, "
                              f"R² {fit.r2:.3f}{note}"), fit.world_size
