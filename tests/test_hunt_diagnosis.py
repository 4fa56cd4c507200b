"""The hunt's diagnosis alone (no processes): how figures become suspects, and what the second pass confirms. The
figures are written out here; the real runs are tests/test_hunt.py."""

import json
import math
import random

import pytest

from commbench.cluster import confirmation, hunt_rows, pair_statistics
from commbench.cluster import diagnosis as judge
from commbench.cluster.baseline import read_baseline
from commbench.cluster.gpu_health import findings
from commbench.cluster.hunt_rows import describe
from commbench.cluster.nodes import Layout, node_name
from commbench.errors import CommbenchError
from commbench.faults import send_slowdown
from tests.refusals import assert_refused, invoke

SETTINGS = judge.Settings(threshold_pct=10, min_z=3)
NODES = ["n1", "n2", "n3", "n4"]


def pairs_of(bandwidth: dict, default: float = 10.0, nodes=NODES) -> dict:
    """Every pair at `default` GB/s (latency 100 µs scaled alike), except those given."""
    result = {}
    for i, a in enumerate(nodes):
        for b in nodes[i + 1:]:
            value = bandwidth.get((a, b), bandwidth.get((b, a), default))
            # a little spread, so that the median absolute deviation is not zero
            value *= 1 + 0.01 * ((i + len(b)) % 3)
            result[(a, b)] = {"busbw_gbps": value, "latency_us": 100.0 * default / value}
    return result


@pytest.mark.no_process
def test_a_slow_node_is_named_as_a_node_and_its_pairs_not_as_links():
    # n2 at half speed with everyone: 3 of the 6 pairs are slow, so the median of all pairs would be half slow
    found = judge.diagnose(NODES, pairs_of({("n2", "n1"): 5, ("n2", "n3"): 5, ("n2", "n4"): 5}), {}, SETTINGS)
    assert list(found.suspect_nodes) == ["n2"] and not found.suspect_links
    evidence = {entry["test"]: entry for entry in found.suspect_nodes["n2"]}
    assert set(evidence) == {"bandwidth", "latency"}
    assert evidence["bandwidth"]["slow_with"] == ["n1", "n3", "n4"]
    assert evidence["bandwidth"]["slower_pct"] == pytest.approx(100, abs=5)  # 10 / 5 − 1, against the healthy 10
    assert found.references["bandwidth"] == pytest.approx(10, rel=0.03)


@pytest.mark.no_process
def test_a_slow_pair_whose_ends_are_fine_elsewhere_is_a_link_not_a_node():
    found = judge.diagnose(NODES, pairs_of({("n1", "n3"): 4}), {}, SETTINGS)
    assert not found.suspect_nodes
    assert list(found.suspect_links) == [("n1", "n3")]
    assert found.suspect_links[("n1", "n3")][0]["ends_fine_elsewhere"] == {"n1": True, "n3": True}


@pytest.mark.no_process
def test_three_nodes_tell_a_node_from_a_link():
    nodes = ["a", "b", "c"]
    slow_node = judge.diagnose(nodes, pairs_of({("a", "b"): 5, ("a", "c"): 5}, nodes=nodes), {}, SETTINGS)
    assert list(slow_node.suspect_nodes) == ["a"] and not slow_node.suspect_links
    slow_link = judge.diagnose(nodes, pairs_of({("a", "b"): 5}, nodes=nodes), {}, SETTINGS)
    assert not slow_link.suspect_nodes and list(slow_link.suspect_links) == [("a", "b")]


@pytest.mark.no_process
def test_a_healthy_allocation_and_small_wobbles_name_nothing():
    assert not judge.diagnose(NODES, pairs_of({}), {}, SETTINGS).suspect_nodes
    wobble = judge.diagnose(NODES, pairs_of({("n1", "n2"): 9.5}), {}, SETTINGS)  # 5 % slower: under the threshold
    assert not wobble.suspect_nodes and not wobble.suspect_links


@pytest.mark.no_process
def test_two_nodes_need_a_baseline_and_then_name_the_link_with_a_note():
    alone = judge.diagnose(["a", "b"], {("a", "b"): {"busbw_gbps": 5.0}}, {}, SETTINGS)
    assert not alone.suspect_links and "give --baseline" in alone.notes[0]
    judged = judge.diagnose(["a", "b"], {("a", "b"): {"busbw_gbps": 5.0}}, {}, SETTINGS, baseline={"bandwidth": 10})
    assert judged.reference_source == "baseline" and judged.references["bandwidth"] == 10
    evidence = judged.suspect_links[("a", "b")][0]
    assert evidence["slower_pct"] == 100 and "cannot be told" in evidence["note"]


@pytest.mark.no_process
def test_a_metric_the_baseline_lacks_is_judged_against_the_allocation_and_says_so():
    """--baseline expected gives no latency: latency falls back to the allocation's own reference, and the source,
    the note and the second pass all say so; a baseline with both figures names the baseline alone."""
    pairs = pairs_of({("n2", "n1"): 5, ("n2", "n3"): 5, ("n2", "n4"): 5})
    partial = judge.diagnose(NODES, pairs, {}, SETTINGS, baseline={"bandwidth": 10.0})
    assert partial.reference_sources == {"bandwidth": "baseline", "latency": "allocation"}
    assert partial.reference_source == "baseline for bandwidth; allocation for latency"
    assert partial.references["bandwidth"] == 10 and partial.references["latency"] == pytest.approx(100, rel=0.03)
    note = next(note for note in partial.notes if note.startswith("latency: "))
    assert "the baseline has no latency figure; judged against the allocation's own reference" in note
    assert "as without --baseline" in note
    # the second pass keeps the baseline's bandwidth and judges latency against its own controls
    controls = {("n3", "n4"): {"busbw_gbps": 20.0, "latency_us": 50.0}}
    second = confirmation.second_references(partial, controls, {})
    assert second == {"bandwidth": 10.0, "latency": 50.0}
    full = judge.diagnose(NODES, pairs, {}, SETTINGS, baseline={"bandwidth": 10.0, "latency": 100.0})
    assert full.reference_source == "baseline" and not any("baseline has no" in note for note in full.notes)
    assert confirmation.second_references(full, controls, {}) == {"bandwidth": 10.0, "latency": 100.0}
    alone = judge.diagnose(NODES, pairs, {}, SETTINGS)
    assert alone.reference_source == "allocation" and not alone.notes


@pytest.mark.no_process
def test_a_node_slow_inside_is_named_from_its_intra_node_all_reduce():
    found = judge.diagnose(NODES, {}, {"n1": 100.0, "n2": 101.0, "n3": 50.0, "n4": 99.0}, SETTINGS)
    assert list(found.suspect_nodes) == ["n3"]
    assert found.suspect_nodes["n3"][0]["test"] == "intra_all_reduce"
    assert confirmation.confirm_plan(NODES, found, partners=2).intra == tuple(NODES)  # every node again, as in pass one
    # the second pass's intra-node figures are its own reference (twice as fast here): n3 at half of them again is
    # named, at par it is cleared
    again = confirmation.confirm(found, {}, {"n1": 200.0, "n2": 198.0, "n3": 100.0, "n4": 201.0}, SETTINGS)
    assert list(again.suspect_nodes) == ["n3"]
    assert again.second_references["intra_all_reduce"] == pytest.approx(200, rel=0.01)
    assert again.suspect_nodes["n3"][0]["second_pass"]["slower_pct"] == pytest.approx(100, abs=1)  # twice the time
    cleared = confirmation.confirm(found, {}, {"n1": 200.0, "n2": 198.0, "n3": 199.0, "n4": 201.0}, SETTINGS)
    assert not cleared.suspect_nodes and cleared.cleared[0]["node"] == "n3"


@pytest.mark.no_process
def test_the_second_pass_repairs_suspects_with_good_nodes_and_controls_fill_its_rounds():
    found = judge.diagnose(NODES, pairs_of({("n2", "n1"): 5, ("n2", "n3"): 5, ("n2", "n4"): 5}), {}, SETTINGS)
    plan = confirmation.confirm_plan(NODES, found, partners=2)
    suspects = [pair for round_ in plan.rounds for pair in round_ if pair not in plan.controls]
    assert suspects == [("n1", "n2"), ("n2", "n3")]
    for round_ in plan.rounds:  # every node at most once per round, and the idle good nodes paired as controls
        ends = [node for pair in round_ for node in pair]
        assert len(ends) == len(set(ends)) == 4
    assert all("n2" not in pair for pair in plan.controls)


@pytest.mark.no_process
def test_confirm_names_only_what_the_second_pass_measures_slow_again_against_its_controls():
    found = judge.diagnose(NODES, pairs_of({("n2", "n1"): 5, ("n2", "n3"): 5, ("n2", "n4"): 5}), {}, SETTINGS)
    # the second pass ran twice as fast overall (fewer pairs at once); its controls say so
    controls = {("n3", "n4"): {"busbw_gbps": 20.0}, ("n1", "n4"): {"busbw_gbps": 20.0}}
    again = {("n1", "n2"): {"busbw_gbps": 10.0}, ("n2", "n3"): {"busbw_gbps": 10.5}}
    confirmed = confirmation.confirm(found, again, {}, SETTINGS, controls=controls)
    assert list(confirmed.suspect_nodes) == ["n2"] and confirmed.second_references["bandwidth"] == 20
    healthy_again = {("n1", "n2"): {"busbw_gbps": 20.0}, ("n2", "n3"): {"busbw_gbps": 19.0}}
    cleared = confirmation.confirm(found, healthy_again, {}, SETTINGS, controls=controls)
    assert not cleared.suspect_nodes and cleared.cleared[0]["node"] == "n2"


@pytest.mark.no_process
def test_a_node_is_confirmed_by_its_good_partners_not_by_its_suspect_link():
    """A node suspected next to a suspect link of its own: the link measured again is slow by the link, so only the
    known-good partners judge the node (in a CI run, n4 of a slow n4–n5 was named for one noisy good pair)."""
    entry = {"test": "bandwidth", "value": 5.0, "slower_pct": 100.0}
    found = judge.Diagnosis(references={"bandwidth": 10.0}, suspect_nodes={"n4": [entry]},
                            suspect_links={("n4", "n5"): [entry]})
    controls = {("n1", "n3"): {"busbw_gbps": 10.0}}
    again = {("n4", "n5"): {"busbw_gbps": 3.0}, ("n3", "n4"): {"busbw_gbps": 6.0}, ("n1", "n4"): {"busbw_gbps": 9.8}}
    judged = confirmation.confirm(found, again, {}, SETTINGS, controls=controls)
    assert "n4" not in judged.suspect_nodes and {"n5", "n3", "n1"} <= set(judged.cleared[0]["second_pass"])
    both_slow = {**again, ("n1", "n4"): {"busbw_gbps": 5.0}}
    assert "n4" in confirmation.confirm(found, both_slow, {}, SETTINGS, controls=controls).suspect_nodes


@pytest.mark.no_process
def test_a_link_slow_again_with_one_end_slow_against_a_good_node_names_that_end():
    found = judge.diagnose(NODES, pairs_of({("n1", "n3"): 4}), {}, SETTINGS)
    plan = confirmation.confirm_plan(NODES, found, partners=2)
    repaired = [pair for round_ in plan.rounds for pair in round_ if pair not in plan.controls]
    assert ("n1", "n3") in repaired and len(repaired) == 3  # the link, and each end with a good node
    n1_partner = next(b for a, b in repaired if a == "n1" and b != "n3")
    n3_partner = next(a if b == "n3" else b for a, b in repaired if "n3" in (a, b) and "n1" not in (a, b))
    controls = {("x", "y"): {"busbw_gbps": 10.0}}
    link = confirmation.confirm(found, {("n1", "n3"): {"busbw_gbps": 4.0}, ("n1", n1_partner): {"busbw_gbps": 10.0},
                                 (n3_partner, "n3"): {"busbw_gbps": 10.0}}, {}, SETTINGS, controls=controls)
    assert list(link.suspect_links) == [("n1", "n3")] and not link.suspect_nodes
    node = confirmation.confirm(found, {("n1", "n3"): {"busbw_gbps": 4.0}, ("n1", n1_partner): {"busbw_gbps": 4.0},
                                 (n3_partner, "n3"): {"busbw_gbps": 10.0}}, {}, SETTINGS, controls=controls)
    assert list(node.suspect_nodes) == ["n1"] and not node.suspect_links


def samples_of(slow: dict, *, nodes=NODES, count: int = 40, stalls: dict | None = None, seed: int = 0) -> dict:
    """Exchange times (s) of every pair: ~1 ms with a few % of jitter, `slow` pairs that many times longer, and in
    `stalls` pairs (pair → share) that share of the exchanges 50 ms late."""
    draw = random.Random(seed)
    found = {}
    for i, a in enumerate(nodes):
        for b in nodes[i + 1:]:
            factor = slow.get((a, b), slow.get((b, a), 1.0))
            share = (stalls or {}).get((a, b), (stalls or {}).get((b, a), 0.0))
            found[(a, b)] = [1e-3 * factor * draw.uniform(0.97, 1.03) + (0.05 if draw.random() < share else 0.0)
                             for _ in range(count)]
    return found


@pytest.mark.no_process
def test_a_stalling_node_is_named_by_its_lost_time_and_a_clean_run_by_nobody():
    n2_pairs = {("n1", "n2"): 0.15, ("n2", "n3"): 0.15, ("n2", "n4"): 0.15}
    samples = {"bandwidth": samples_of({}, stalls=n2_pairs), "latency": samples_of({}, stalls=n2_pairs, seed=1)}
    figures = pairs_of({})  # the medians do not move
    found = judge.diagnose(NODES, figures, {}, SETTINGS, samples=samples)
    assert list(found.suspect_nodes) == ["n2"] and not found.suspect_links
    evidence = found.suspect_nodes["n2"][0]
    assert evidence["test"] == "stalls" and evidence["slow_with"] == ["n1", "n3", "n4"]
    assert evidence["p"] < 0.01 / 4 and evidence["lost_ms"] > 0 and evidence["stalls"] > 0
    assert "stalls in " in describe(evidence) and " ms lost" in describe(evidence)
    clean = {"bandwidth": samples_of({}), "latency": samples_of({}, seed=1)}
    healthy = judge.diagnose(NODES, figures, {}, SETTINGS, samples=clean)
    assert not healthy.suspect_nodes and not healthy.suspect_links
    assert set(healthy.detectable) == {"bandwidth", "latency", "stalls"}
    assert all(value >= SETTINGS.threshold_pct for value in healthy.detectable.values())


@pytest.mark.no_process
def test_slow_figures_whose_samples_do_not_stand_out_name_nobody():
    # the figures say n2 is 2× slower, but its pairs' exchanges are drawn like every other pair's: the rank test
    # (corrected for the 4 nodes tested) finds nothing, and a figure is not a verdict by itself
    figures = pairs_of({("n2", "n1"): 5, ("n2", "n3"): 5, ("n2", "n4"): 5})
    found = judge.diagnose(NODES, figures, {}, SETTINGS, samples={"bandwidth": samples_of({})})
    assert "n2" not in found.suspect_nodes or all(entry["test"] != "bandwidth"
                                                  for entry in found.suspect_nodes["n2"])
    slow = judge.diagnose(NODES, figures, {}, SETTINGS,
                          samples={"bandwidth": samples_of({("n2", "n1"): 2, ("n2", "n3"): 2, ("n2", "n4"): 2})})
    assert slow.suspect_nodes["n2"][0]["p"] < 0.01 / 4


@pytest.mark.no_process
def test_a_node_slow_in_one_repeat_only_is_not_a_suspect_and_the_noise_raises_the_bar():
    slow = {("n2", "n1"): 2, ("n2", "n3"): 2, ("n2", "n4"): 2}
    figures = pairs_of({pair: 5 for pair in slow})
    once = [{"bandwidth": samples_of(slow)}, {"bandwidth": samples_of({}, seed=1)}]  # slow, then not
    found = judge.diagnose(NODES, figures, {}, SETTINGS, samples={"bandwidth": samples_of(slow)}, repeats=once)
    assert all(entry["test"] != "bandwidth" for entry in found.suspect_nodes.get("n2", []))
    # the two repeats of a pair disagree by ~2× for n2's pairs: the run's own noise, which the detectable slowdown
    # reports, well above the threshold
    assert found.detectable["bandwidth"] > SETTINGS.threshold_pct
    twice = [{"bandwidth": samples_of(slow)}, {"bandwidth": samples_of(slow, seed=1)}]
    named = judge.diagnose(NODES, figures, {}, SETTINGS, samples={"bandwidth": samples_of(slow)}, repeats=twice)
    bandwidth = next(entry for entry in named.suspect_nodes["n2"] if entry["test"] == "bandwidth")
    assert bandwidth["repeats_slower_pct"][0] >= 90


@pytest.mark.no_process
def test_the_detectable_slowdown_is_min_z_times_the_repeats_noise_where_that_is_largest():
    """detectable = max(threshold, min_z × the nodes' spread, min_z × the repeat noise), the repeat noise being
    1.4826 × the median absolute deviation of the pairs' log ratios between the two repeats, over √2."""
    pairs = list(pairs_of({}))
    logs = [0.0, 0.1, -0.1, 0.2, -0.2, 0.3]  # repeat 2 over repeat 1, per pair: median 0.05, MAD 0.15
    repeats = [{"bandwidth": {pair: [1e-3] * 3 for pair in pairs}},
               {"bandwidth": {pair: [1e-3 * math.exp(log)] * 3 for pair, log in zip(pairs, logs)}}]
    found = judge.diagnose(NODES, pairs_of({}), {}, SETTINGS, samples={"bandwidth": samples_of({})}, repeats=repeats)
    noise_pct = 100 * 1.4826 * 0.15 / math.sqrt(2)  # 15.7 %: three of it is above the threshold and the spread
    assert found.detectable["bandwidth"] == pytest.approx(SETTINGS.min_z * noise_pct)


@pytest.mark.no_process
def test_better_middle_and_spread():
    assert pair_statistics.better_middle([1, 2, 3, 4], higher_is_better=True) == 3
    assert pair_statistics.better_middle([1, 2, 3, 4], higher_is_better=False) == 2
    assert pair_statistics.robust_spread([0, 0, 0]) == pair_statistics.SPREAD_FLOOR_PCT
    assert pair_statistics.robust_spread([0, 10, 20, 30, 1000]) == pytest.approx(1.4826 * 10)


@pytest.mark.no_process
def test_each_repeat_of_a_pair_is_judged_against_its_own_controls_and_no_spread_is_the_floor():
    """pair_repeat_slowdowns: a pair twice as slow as its repeat's controls is 100 % slower in that repeat, and a
    repeat without the pair or without a control says nothing; robust_spread of nothing is its floor."""
    repeats = [{"bandwidth": {("n1", "n2"): [2.0] * 5, ("n3", "n4"): [1.0] * 5}},
               {"bandwidth": {("n2", "n1"): [3.0] * 5, ("n3", "n4"): [1.0] * 5, ("n1", "n3"): [9.0] * 5}},
               {"bandwidth": {("n3", "n4"): [1.0] * 5}}, {"bandwidth": {("n1", "n2"): [2.0] * 5}}]
    assert pair_statistics.pair_repeat_slowdowns(("n1", "n2"), "bandwidth", repeats, "median", {("n3", "n4")}) == \
        pytest.approx([100.0, 200.0])
    assert pair_statistics.robust_spread([]) == pair_statistics.SPREAD_FLOOR_PCT


@pytest.mark.no_process
def test_evidence_lines_and_the_healthy_note_say_what_was_seen_and_what_could_have_been():
    gpu = {"test": "nvml", "gpu": 3, "fact": "pcie_link_width", "value": 8, "peers": 16}
    assert describe(gpu) == "GPU 3 pcie_link_width = 8 (peers: 16)"
    pair = {"test": "bandwidth", "value": 5.0, "unit": "GB/s", "slower_pct": 100.0, "reference": 10.0, "z": 6.0,
            "slow_with": ["n1", "n3"], "fine_with": ["n4"], "note": "the node, not the link"}
    assert describe(pair) == ("bandwidth 5 GB/s, +100 % against 10 (z 6.0), slow with n1,n3, fine with n4; "
                              "the node, not the link")
    seen = judge.Diagnosis(detectable={"bandwidth": 18.4, "latency": 25.0})
    assert hunt_rows.healthy_note(4, seen) == ("no suspect among 4 node(s); a node this much slower would have been "
                                               "named (bandwidth ≥ 18 %, latency ≥ 25 %; stalls: time lost to them)")
    assert hunt_rows.healthy_note(1, judge.Diagnosis()) == "no suspect among 1 node(s)"


@pytest.mark.no_process
def test_gpu_health_names_what_peers_do_not_share():
    healthy = {"name": "H200", "nvlink_up": 18, "pcie_width": 16, "throttle_reasons": 0x1, "ecc_uncorrected": 0}
    facts = {"a": [dict(healthy, index=0), dict(healthy, index=1)],
             "b": [dict(healthy, index=0), dict(healthy, index=1, nvlink_up=16)],
             "c": [dict(healthy, index=0, throttle_reasons=0x40, sm_clock_mhz=1100, sm_clock_max_mhz=1980)],
             "d": [dict(healthy, index=0, ecc_uncorrected=3)], "e": [{"error": "NVML not available"}]}
    found = findings(facts)
    assert set(found) == {"b", "c", "d"}
    assert found["b"][0]["fact"] == "nvlink_up" and found["b"][0]["peers"] == 18 and found["b"][0]["gpu"] == 1
    assert "hardware thermal slowdown" in found["c"][0]["value"]
    assert found["d"][0]["fact"] == "ecc_uncorrected"


@pytest.mark.no_process
def test_node_names_and_layout():
    assert node_name({"SLURMD_NODENAME": "gpu7", "COMMBENCH_NODE_NAME": "x"}) == "gpu7"
    assert node_name({"COMMBENCH_NODE_NAME": "x"}) == "x"
    layout = Layout.from_names(["b", "b", "a", "a", "b"])
    assert layout.nodes == ("b", "a") and layout.ranks["b"] == (0, 1, 4)
    assert layout.lanes("b", "a") == [(0, 2), (1, 3)]
    assert layout.ranks_text("a") == "2-3" and layout.ranks_text("b") == "0,1,4"


@pytest.mark.no_process
def test_send_slowdown_faults(monkeypatch):
    monkeypatch.setenv("COMMBENCH_SLOW_NODE", "n2:50")
    monkeypatch.setenv("COMMBENCH_SLOW_LINK", "n1,n3:200")
    assert send_slowdown("n2", "n1") == 0.5 and send_slowdown("n2", None) == 0.5
    assert send_slowdown("n1", "n3") == 2.0 and send_slowdown("n3", "n1") == 2.0
    assert send_slowdown("n1", "n4") == 0.0 and send_slowdown("n1", None) == 0.0
    monkeypatch.setenv("COMMBENCH_SLOW_LINK", "n1:200")
    with pytest.raises(ValueError):
        send_slowdown("n1", "n3")


@pytest.mark.no_process
def test_baseline_files(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "hunt.json").write_text(json.dumps({"reference": {"bandwidth": 12.5, "latency": 30,
                                                                          "source": "allocation"}}))
    assert read_baseline(str(tmp_path / "run")) == {"bandwidth": 12.5, "latency": 30.0}
    (tmp_path / "bad.json").write_text(json.dumps({"bandwidth": -1}))
    (tmp_path / "none.json").write_text(json.dumps({"other": 1}))
    (tmp_path / "torn.json").write_text("{")
    for name, fragment in (("bad.json", "must be a number above 0"), ("none.json", "none of bandwidth"),
                           ("torn.json", "not readable JSON"), ("missing", "does not exist")):
        with pytest.raises(CommbenchError, match=fragment):
            read_baseline(str(tmp_path / name))


@pytest.mark.parametrize("args, fragment", [
    (["hunt", "--pairs", "some"], "--pairs 'some' is not all or random:K"),
    (["hunt", "--pairs", "random:0"], "is not all or random:K"),
    (["hunt", "--pair-size", "1K,2K"], "--pair-size '1K,2K' names 2 sizes"),
    (["hunt", "--intra-sizes", "1X"], "--intra-sizes"),
    (["hunt", "--threshold", "0"], "--threshold 0 must be above 0 percent"),
    (["hunt", "--iters", "3"], "--iters 3 must be 6 or more"),
    (["hunt", "--baseline", "/no/such/hunt"], "does not exist"),
    (["hunt", "--statistic", "mean"], "unknown --statistic 'mean'"),
    (["hunt", "--backend", "gloo", "--device", "cuda"], "--device cuda"),
    (["p2p", "--nproc", "1"], "p2p needs at least 2 ranks"),
    (["p2p", "--schedule", "random"], "unknown --schedule 'random'"),
    (["p2p", "--sizes", "0"], "--sizes"),
])
@pytest.mark.no_process
def test_bad_hunt_and_p2p_input_is_one_line_and_exit_2(tmp_path, args, fragment):
    assert_refused(invoke([*args, "--out", str(tmp_path / "results")], cwd=tmp_path), fragment=fragment,
                   left_empty=[tmp_path])


@pytest.mark.no_process
def test_pooling_no_exchanges_gives_an_empty_set_of_none_stalled():
    from commbench.cluster.stalls import Exchanges

    pooled = Exchanges.pooled([])
    assert pooled.count == 0 and len(pooled.lost_s) == 0


@pytest.mark.no_process
def test_a_link_slow_in_its_figure_whose_exchanges_do_not_stand_out_is_not_named():
    # the link's figure is 4x, but its exchanges are drawn like every other pair's: the rank test (corrected for the
    # pairs tested) finds nothing, so the figure alone names no link
    quiet = judge.diagnose(NODES, pairs_of({("n1", "n3"): 4}), {}, SETTINGS,
                           samples={"bandwidth": samples_of({}), "latency": samples_of({}, seed=1)})
    assert ("n1", "n3") not in quiet.suspect_links
    slow = judge.diagnose(NODES, pairs_of({("n1", "n3"): 4}), {}, SETTINGS,
                          samples={"bandwidth": samples_of({("n1", "n3"): 4}),
                                   "latency": samples_of({("n1", "n3"): 4}, seed=1)})
    assert list(slow.suspect_links) == [("n1", "n3")]


@pytest.mark.no_process
def test_a_link_less_slow_than_a_named_node_is_judged_against_the_pairs_of_nodes_not_named():
    # n2's port 40x slow, the n4-n5 link 30x: against every other pair, n2's four pairs among them, the link's
    # exchanges are the faster ones; against the pairs of the nodes not named they stand out, as its figure does
    nodes = ["n1", "n2", "n3", "n4", "n5"]
    slow = {("n1", "n2"): 40, ("n2", "n3"): 40, ("n2", "n4"): 40, ("n2", "n5"): 40, ("n4", "n5"): 30}
    found = judge.diagnose(nodes, pairs_of({pair: 10 / factor for pair, factor in slow.items()}, nodes=nodes), {},
                           SETTINGS, samples={"bandwidth": samples_of(slow, nodes=nodes),
                                              "latency": samples_of(slow, nodes=nodes, seed=1)})
    assert list(found.suspect_nodes) == ["n2"] and list(found.suspect_links) == [("n4", "n5")]
    assert found.suspect_links[("n4", "n5")][0]["p"] < 0.01 / 10


@pytest.mark.no_process
def test_a_stalling_node_without_control_pairs_is_judged_against_the_first_pass_without_it():
    """Too few known-good nodes for control pairs in the second pass: the node's re-pairs are held against the first
    pass's pairs that do not include it."""
    n2_pairs = {("n1", "n2"): 0.15, ("n2", "n3"): 0.15, ("n2", "n4"): 0.15}
    first = {"bandwidth": samples_of({}, stalls=n2_pairs), "latency": samples_of({}, stalls=n2_pairs, seed=1)}
    found = judge.diagnose(NODES, pairs_of({}), {}, SETTINGS, samples=first)
    again = {"bandwidth": samples_of({}, stalls=n2_pairs, seed=2), "latency": samples_of({}, stalls=n2_pairs, seed=3)}
    again = {metric: {pair: times for pair, times in pairs.items() if "n2" in pair} for metric, pairs in again.items()}
    judged = confirmation.confirm(found, pairs_of({}), {}, SETTINGS, controls={}, samples=again, first_samples=first)
    assert "n2" in judged.suspect_nodes
    stalls = next(entry for entry in judged.suspect_nodes["n2"] if entry["test"] == "stalls")
    assert stalls["second_pass"]["p"] < 0.01
