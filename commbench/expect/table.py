"""What `commbench expect` prints: the facts, one line per collective and scope, the terms behind each figure, the
published figures beside them, and where the model differs from NCCL's."""

from __future__ import annotations

from commbench.expect.facts import MachineFacts
from commbench.expect.model import MODEL_DIFFERENCES, Expectation
from commbench.expect.presets import Published

HEADER = ("collective", "scope", "algorithm", "expected busbw (GB/s)", "bound by", "ceiling busbw (GB/s)",
          "latency floor (us)", "published busbw (GB/s)")


def facts_line(facts: MachineFacts) -> str:
    if not facts.gpus_per_node:
        parts = [f"no GPUs, {facts.cpu_cores or '?'} cores"]
        if facts.memcpy_gbps:
            parts.append(f"memory copy {facts.memcpy_gbps:.1f} GB/s")
        if facts.loopback_gbps:
            parts.append(f"loopback TCP {facts.loopback_gbps:.2f} GB/s per stream")
    else:
        capability = ".".join(map(str, facts.compute_capability)) if facts.compute_capability else "?"
        links = (f"{facts.nvlink_links} NVLink links per GPU" + (" via NVSwitch" if facts.nvswitch else "") +
                 (" (NVLS)" if facts.nvls else "")) if facts.nvlink_links else \
            "NVLink unknown" if facts.nvlink_links is None else "no NVLink"
        pcie = f"PCIe gen{facts.pcie_gen} x{facts.pcie_width}" if facts.pcie_gen else "PCIe unknown"
        parts = [f"{facts.gpus_per_node} × {facts.gpu} (sm {capability})", links, pcie]
    nics = f"NICs: {nic_rates(facts.nic_gbits)} Gb/s" if facts.nic_gbits else "no NICs known"
    return ", ".join([*parts, nics])


def nic_rates(rates: tuple[float, ...]) -> str:
    """8 × 400, or 400 + 200 where they differ."""
    if len(set(rates)) == 1:
        return f"{len(rates)} × {rates[0]:g}"
    return " + ".join(f"{rate:g}" for rate in rates)


def scope(expectation: Expectation) -> str:
    return f"{expectation.nodes} node{'s' if expectation.nodes > 1 else ''} × {expectation.ranks_per_node}"


def rows(expectations: list[Expectation], published: dict[tuple[str, int], list[Published]]) -> list[tuple[str, ...]]:
    found: list[tuple[str, ...]] = []
    for item in expectations:
        figures = published.get((item.collective, item.nodes), [])
        shown = "; ".join(f"{figure.busbw_gbps:g} ({figure.kind})" for figure in figures) or "-"
        found.append((item.collective, scope(item), item.algorithm or "-",
                      f"{item.busbw_gbps:.1f}" if item.busbw_gbps is not None else f"- ({item.why_none})",
                      item.bound or "-", f"{item.ceiling_gbps:.1f}" if item.ceiling_gbps is not None else "-",
                      f"{item.latency_us:.1f}" if item.latency_us is not None else "-", shown))
    return found


def render(facts: MachineFacts, origin: str, expectations: list[Expectation],
           published: dict[tuple[str, int], list[Published]]) -> str:
    lines = [f"machine: {facts.name} ({origin})", f"facts: {facts_line(facts)}"]
    lines += [f"  source: {source}" for source in facts.sources]
    lines += [f"  finding: {finding}" for finding in facts.findings]
    table = [HEADER, *rows(expectations, published)]
    widths = [max(len(row[column]) for row in table) for column in range(len(HEADER))]
    lines += ["", *("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in table)]
    if facts.gpus_per_node:  # on CPU both figures are the host's measured rates
        lines += ["", "expected: what a healthy machine reaches with the algorithm NCCL would pick (each link at its "
                  "healthy share, below); ceiling: what the links' signaling rates allow, which no machine exceeds"]
    ruled = dict.fromkeys(reason for item in expectations for reason in item.ruled_out)
    lines += [f"  not expected: {reason}" for reason in ruled]
    terms = {(term.name, round(term.value, 3), term.source): term for item in expectations for term in item.terms}
    if terms:
        lines += ["", "terms:"]
        lines += [f"  {term.name}: {term.value:{'.1f' if term.unit == 'GB/s' else '.3g'}} {term.unit} = {term.source}"
                  for term in terms.values()]
    figures = {figure for found in published.values() for figure in found}
    if figures:
        lines += ["", "published figures:"]
        lines += [f"  {figure.collective} {figure.nodes} node(s){_size(figure)}: {figure.busbw_gbps:g} GB/s "
                  f"({figure.kind}) - {figure.source}" for figure in sorted(figures, key=lambda f: -f.busbw_gbps)]
    if facts.gpus_per_node:
        lines += ["", "where this model differs from NCCL's (src/graph/tuning.cc):"]
        lines += [f"  - {difference}" for difference in MODEL_DIFFERENCES]
    return "\n".join(lines)


def _size(figure: Published) -> str:
    if figure.size_bytes is None:
        return ""
    return f" at {figure.size_bytes / 1024**3:g} GiB"
