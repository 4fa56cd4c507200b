"""Who arrives last: across the ranks' traces, each collective call matched with its counterparts (the same step,
process group, kind, size and sequence number: the k-th such call of the step on every rank), and which rank
reached it last.

A rank arrives when its side of the call starts: its NCCL kernel (which then waits inside for the others) or its gloo
span. late_by_us is how long the last rank came after the one before it (how long the others waited for it at
least); spread_us after the first. A rank that is last in far more than 1/N of the matched calls is named: a
one-sided binomial test that it is last more often than 1/N gives p < ALPHA (with 2 ranks, last in 7 of 7 calls, or
in 9 of 10). Arrival times compare the ranks' clocks: they mean something on one host or on hosts with synchronised
clocks.
"""

from collections import Counter, defaultdict

from commbench.profiling.collective_calls import Call

ALPHA = 0.01


def _nothing(note: str) -> dict:
    return {"matched": [], "ranks": [], "stragglers": [], "unmatched": 0, "fair_share_pct": None, "note": note}


def straggler_view(calls_by_trace: dict[str, list[Call]]) -> dict:
    """calls_by_trace: each trace's calls (its path → list). Returns the matched calls, the share of each rank and
    the named stragglers; traces without a rank are told apart by their order."""
    ranks = {path: (calls[0].rank if calls and calls[0].rank is not None else position)
             for position, (path, calls) in enumerate(calls_by_trace.items())}
    if len(calls_by_trace) < 2:
        return _nothing("one trace: no one to arrive before or after")
    if len(set(ranks.values())) < len(ranks):
        return _nothing("two traces hold the same rank (different jobs or runs, whose calls are not the same); "
                        "analyse one job's traces at a time")
    arrivals: dict[tuple, dict] = defaultdict(dict)
    for path, calls in calls_by_trace.items():
        for call in calls:
            arrivals[call.key()][ranks[path]] = call
    everyone = set(ranks.values())
    matched = []
    for key, by_rank in arrivals.items():
        if set(by_rank) != everyone:
            continue
        ordered = sorted(by_rank.items(), key=lambda item: item[1].start_us)
        second, (last_rank, last) = ordered[-2][1], ordered[-1]
        first = ordered[0][1]
        matched.append({"step": key[0], "group": key[1], "kind": key[2], "bytes": key[3], "sequence": key[4],
                        "last_rank": last_rank, "late_by_us": last.start_us - second.start_us,
                        "spread_us": last.start_us - first.start_us})
    matched.sort(key=lambda entry: min(call.start_us for call in arrivals[
        (entry["step"], entry["group"], entry["kind"], entry["bytes"], entry["sequence"])].values()))
    counts = Counter(entry["last_rank"] for entry in matched)
    fair = 1 / len(everyone)
    shares = [{"rank": rank, "last": counts.get(rank, 0),
               "share_pct": 100 * counts.get(rank, 0) / len(matched) if matched else None,
               "late_by_us_total": sum(entry["late_by_us"] for entry in matched if entry["last_rank"] == rank)}
              for rank in sorted(everyone)]
    from scipy.stats import binomtest  # here: a training rank analyses its trace without this view (0.6 s of a core)

    for share in shares:
        share["p_value"] = float(binomtest(share["last"], len(matched), fair, alternative="greater").pvalue) \
            if matched else None
    named = [share for share in shares if share["p_value"] is not None and share["p_value"] < ALPHA]
    unmatched = sum(len(by_rank) for by_rank in arrivals.values() if set(by_rank) != everyone)
    return {"matched": matched, "ranks": shares, "stragglers": [share["rank"] for share in named],
            "unmatched": unmatched, "fair_share_pct": 100 * fair,
            "note": None if matched else "no call was found on every rank with the same group, kind, size and "
                                         "sequence number"}
