"""The backtracking over a whole small tree (core/tree_search.py), through
`troupe simulate`: where it runs, what its budget and its limit say, and
that it tries each choice once. Its exhaustiveness is judged against an
oracle in test_tree_properties.py; the case it was written for is
test_tree_whole.py's `test_a_tree_no_child_order_places_...`."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.core import schedule_tree
from scheduler.core.tree_search import TreeSearch

from .test_simulate_trees import cpg, pg
from .test_tree_properties import NO_ORDER_FITS
from .test_tree_whole import node, simulate, steps
from .tree_harness import bodies

BACKTRACKING = "backtracking over the tree"
NOT_FINISHED = f"{BACKTRACKING} not finished"


def tree_pods_bound(result: Any) -> list[str]:
    return sorted(n for n, where in result.nodes.items() if where and not n.startswith("run"))


@pytest.mark.parametrize(("budget", "placed"), [(40, False), (58, False), (59, True), (2000, True)])
def test_a_budget_that_stops_the_backtracking_is_named(tmp_path, capsys, budget, placed):
    """NO_ORDER_FITS (8 waiting pods, no child order places them): the child
    orders take 40 steps, the backtracking 19 more. With less, nothing of the
    tree binds and its root says the backtracking did not finish, never that
    the tree does not fit."""
    result = simulate(tmp_path, capsys, bodies(NO_ORDER_FITS), config=steps(budget))
    root = result.composite("t")
    if placed:
        assert root["scheduled"] and f"(search: {BACKTRACKING})" in root["message"], root
        return
    assert not root["scheduled"] and NOT_FINISHED in root["message"], root
    assert tree_pods_bound(result) == []


def test_search_steps_0_keeps_upstreams_one_order(tmp_path, capsys):
    """searchSteps 0: no other order, no backtracking, and nothing said of a budget."""
    result = simulate(tmp_path, capsys, bodies(NO_ORDER_FITS), config=steps(0))
    root = result.composite("t")
    assert not root["scheduled"], root
    assert BACKTRACKING not in root["message"] and "search budget" not in root["message"], root


def test_a_tree_above_the_limit_keeps_the_child_orders_only(tmp_path, capsys, monkeypatch):
    """With the limit at 6 waiting pods, NO_ORDER_FITS (8) is not searched
    whole: the child orders fail, and nothing says it was backtracked."""
    monkeypatch.setattr(schedule_tree, "MAX_TREE_SEARCH_PODS", 6)
    result = simulate(tmp_path, capsys, bodies(NO_ORDER_FITS))
    root = result.composite("t")
    assert not root["scheduled"] and BACKTRACKING not in root["message"], root
    assert tree_pods_bound(result) == []


def test_alike_pods_on_alike_nodes_are_tried_once(tmp_path, capsys, monkeypatch):
    """r (gang, minGroupCount 2) over a (gang of 3 pods of 1 CPU) and b (1
    pod of 5 CPU), on 8 nodes of 1 CPU: b fits nowhere. a has one placement
    up to which alike pod goes on which alike node, so each search takes 3
    steps, not the 8 x 7 x 6 placements of a's pods on named nodes."""
    searches: list[TreeSearch] = []

    class Recorded(TreeSearch):
        def __init__(self, cycle: Any) -> None:
            super().__init__(cycle)
            searches.append(self)

    monkeypatch.setattr(schedule_tree, "TreeSearch", Recorded)
    docs = [*(node(f"n{i}", 1) for i in range(8)), cpg("r", 2), *pg("a", 3, "r", [1, 1, 1]), *pg("b", 1, "r", [5])]
    result = simulate(tmp_path, capsys, docs)
    assert not result.composite("r")["scheduled"]
    assert searches and all(s.steps == 3 and not s.spent for s in searches), [s.steps for s in searches]
