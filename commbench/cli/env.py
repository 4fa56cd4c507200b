"""`commbench env`: what a sweep on this machine would use."""

import json

import click


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def env(as_json: bool) -> None:
    """Show torch, backends, devices, GPUs (NVML), the default a bare `commbench sweep` would take, and the facts
    `commbench expect` reads (`--json > facts.json` records them for `--facts`; it measures the host's copy and
    loopback bandwidth, about 2 s, and keeps them for sweeps), and the launch noise run sets measured here (what
    `commbench compare` assumes for a single launch recorded on this machine)."""
    from commbench.expect.probe import facts_here
    from commbench.expect.table import facts_line
    from commbench.gate import machine_noise, priors
    from commbench.runinfo import environment_report

    report = environment_report()
    facts = facts_here(refresh=True)
    report["facts"] = facts.to_json()
    noises = machine_noise.stored_here(facts.name)
    report["launch_noise"] = [{"backend": noise.key.backend, "device": noise.key.device, "world": noise.key.world,
                               "pct": noise.noise_pct,
                               "run_sets": noise.run_sets, "df": noise.df, "latest": noise.latest,
                               "path": str(noise.path)} for noise in noises]
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    click.echo(f"commbench {report['commbench_version']}  python {report['python_version']} ({report['python']})")
    click.echo(f"torch {report['torch_version']}  cuda {report['cuda_version'] or 'none (CPU build)'}")
    backends = ", ".join(f"{name} ({version})" for name, version in report["backends"].items() if version)
    missing = ", ".join(name for name, version in report["backends"].items() if not version)
    click.echo(f"backends available: {backends}" + (f"; not available: {missing}" if missing else ""))
    click.echo(f"cpu: {report['cpu']} ({report['cpu_count']} cores)")
    nvml = report["nvml"]
    if report["cuda_gpus"]:
        click.echo(f"cuda GPUs visible to torch: {report['cuda_gpus']}")
    if nvml["available"]:
        click.echo(f"NVIDIA driver {nvml['driver_version']}")
        for gpu in nvml["gpus"]:
            links = gpu_links(gpu)
            click.echo(f"  GPU {gpu['index']}: {gpu['name']}, {gpu['memory_total_bytes'] / 1024**3:.1f} GiB, {links}")
    else:
        click.echo(f"GPUs: none ({nvml['reason']}); this is a CPU-only machine")
    default = report["default"]
    click.echo(f"default sweep: --backend {default['backend']} --device {default['device']} --nproc {default['nproc']}")
    for name, value in report["env"].items():
        click.echo(f"  {name}={value}")
    click.echo(f"expected-bandwidth facts: {facts_line(facts)} (commbench expect)")
    for noise in noises:
        click.echo(f"launch noise, {noise.key.label}: {noise.noise_pct:.1f} % over {noise.run_sets} run "
                   f"set{'s' if noise.run_sets != 1 else ''}, latest {noise.latest} (commbench compare's floor for a "
                   "single launch recorded here)")
    if not noises:
        click.echo("launch noise: none measured here (a run set with --launches 3 measures it; until then compare "
                   f"assumes {priors.CPU_PRIOR.noise_pct:g} % on CPUs, {priors.GPU_PRIOR.noise_pct:g} "
                   "% on GPUs)")


def gpu_links(gpu: dict) -> str:
    """A GPU's NVLink as NVML gave it: links up of links present, none, or unknown (an NVML error is not 0)."""
    active, present = gpu.get("nvlink_active_links"), gpu.get("nvlink_links", gpu.get("nvlink_active_links"))
    if active is None:
        return "NVLink unknown (NVML could not read it)"
    if not present:
        return "no NVLink"
    return f"{active} NVLink links active" + (f" of {present}" if present != active else "")
