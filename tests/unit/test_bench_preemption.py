"""Shape p of the core benchmark (bench/preemption.py), on a small cluster
through the same function as `python -m bench core --shapes p`: every
preemptor ends bound whole, victim gangs are evicted whole, and the gang
search takes no more victims than the remove-all-then-reprieve baseline."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # bench/ is not an installed package
    sys.path.insert(0, str(ROOT))

from bench.core import render_preemption  # noqa: E402
from bench.preemption import compare, run  # noqa: E402
from bench.shapes import PREEMPT_QUICK, PreemptShape, high_name, low_pod_body  # noqa: E402

# 100 nodes of 4 CPU: 133 low gangs + 1 lone pod; 5 high gangs of 8 whole nodes.
SMALL = PreemptShape("p", "100Nodes_Preempt_5Gangs_x8", 100, 5)


@pytest.fixture(scope="module")
def runs() -> dict[str, dict[str, Any]]:
    return {search: run(SMALL, search) for search in ("gang", "baseline")}


def test_shape_fills_every_node() -> None:
    for shape in (SMALL, PREEMPT_QUICK):
        used: dict[str, int] = {}
        for i in range(shape.low_pods):
            node = low_pod_body(shape, i)["spec"]["nodeName"]
            used[node] = used.get(node, 0) + shape.low_cpu
        assert len(used) == shape.nodes
        assert set(used.values()) == {shape.node_cpu}  # full: a high pod fits nowhere without preemption


@pytest.mark.parametrize("search", ["gang", "baseline"])
def test_every_high_gang_bound_whole_and_victim_gangs_taken_whole(runs: dict[str, dict[str, Any]], search: str) -> None:
    r = runs[search]
    assert r["high_bound_whole"] == SMALL.high_gangs
    assert r["high_partly_bound"] == []
    assert r["covered_not_bound"] == []
    assert r["low_gangs_partly_evicted"] == []
    assert r["victims_not_in_low_gangs"] == 0
    assert not r["budget_spent"]
    # Each preemptor chose victims once (nothing else frees room here), and
    # the first needs at least 8 whole nodes: 11 packed gangs.
    assert r["preemptors"] == r["preemption_decisions"]
    assert r["victims"][high_name(0)] >= 33


def test_search_takes_no_more_victims_than_baseline(runs: dict[str, dict[str, Any]]) -> None:
    gang, baseline = runs["gang"], runs["baseline"]
    c = compare(gang, baseline)
    assert c["preemptors"] == len(baseline["victims"]) > 0
    # The first preemptor sees the same cluster in both runs.
    first_gang, first_baseline = c["first_victims"]
    assert first_gang <= first_baseline
    assert c["gang_victims_mean"] <= c["baseline_victims_mean"]
    assert gang["victims_max"] <= baseline["victims_max"]
    # Fewer gang cycles: that is the point of the search.
    assert gang["trials_mean"] < baseline["trials_mean"]


def test_budget_stops_the_baseline_after_one_decision() -> None:
    r = run(SMALL, "baseline", budget_s=0.0)
    assert r["budget_spent"]
    assert r["preemptors"] == 1  # the decision under way is finished
    assert r["covered_not_bound"] == []
    assert r["high_bound_whole"] >= 1
    assert r["low_gangs_partly_evicted"] == []


def test_render(runs: dict[str, dict[str, Any]]) -> None:
    entry = {
        "key": SMALL.key,
        "name": SMALL.name,
        "nodes": SMALL.nodes,
        "low_gangs": SMALL.low_gangs,
        "high_gangs": SMALL.high_gangs,
        "high_size": SMALL.high_size,
        "high_priority": SMALL.high_priority,
        "node_cpu": SMALL.node_cpu,
        "low_cpu": SMALL.low_cpu,
        "high_cpu": SMALL.high_cpu,
        "gang": {**runs["gang"], "peak_rss_mib": 1.0},
        "baseline": {**runs["baseline"], "peak_rss_mib": 1.0},
        "compare": compare(runs["gang"], runs["baseline"]),
    }
    text = render_preemption(entry)
    assert "victims of the first preemptor" in text
    assert "PROBLEMS" not in text
