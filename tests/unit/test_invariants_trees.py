"""hack/invariants.py's Observer on trees of groups (issue 44), fed lists by
hand. No tree bound below minGroupCount at any level past `partial_grace`
(a CompositePodGroup with pods bound under it holds by its rule, each child
by its own); no room held past `release_grace` for a tree member whose leaf,
an ancestor CompositePodGroup or the root is gone, or whose tree is not ready."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack"))

from invariants import (  # noqa: E402
    COMPOSITE,
    GROUP_LABEL,
    Observer,
    TreeNode,
    TreeShape,
    tree_objects,
)

NODES = [
    {"metadata": {"name": n}, "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "20"}}} for n in "ab"
]


def leader_workers(k: int = 3) -> TreeShape:
    """t → {t-leader (gang 1, 1 pod), t-workers (gang k, k pods)}, the root a gang of 2."""
    return TreeShape(
        "t",
        {"t": TreeNode(None, 2)},
        {"t-leader": TreeNode("t", 1, 1), "t-workers": TreeNode("t", k, k)},
    )


def nested() -> TreeShape:
    """p (gang 2) → {m (gang 2) → {a (gang 2), b (gang 1)}, c (gang 1)}: depth 3."""
    return TreeShape(
        "p",
        {"p": TreeNode(None, 2, key="zone"), "m": TreeNode("p", 2, key="rack")},
        {"a": TreeNode("m", 2, 2), "b": TreeNode("m", 1, 1), "c": TreeNode("p", 1, 1)},
    )


def pods(
    shape: TreeShape,
    bound: dict[str, int] | None = None,
    nominated: dict[str, str] | None = None,
    missing: dict[str, int] | None = None,
) -> list[dict[str, Any]]:
    """The tree's pods: the first `bound[leaf]` of a leaf on node a, the rest
    nominated to `nominated[leaf]` if given; the last `missing[leaf]` left out."""
    out = []
    for o in tree_objects("ns", shape, cpu="100m"):
        if o["kind"] != "Pod":
            continue
        leaf = o["metadata"]["labels"][GROUP_LABEL]
        index = int(o["metadata"]["name"].rsplit("-", 1)[1])
        if index >= shape.leaves[leaf].size - (missing or {}).get(leaf, 0):
            continue
        o["metadata"]["uid"] = f"u-{o['metadata']['name']}"
        if index < (bound or {}).get(leaf, 0):
            o["spec"]["nodeName"] = "a"
            o["status"] = {}
        else:
            target = (nominated or {}).get(leaf)
            o["status"] = {"nominatedNodeName": target} if target else {}
        out.append(o)
    return out


def live(shape: TreeShape, *without: str) -> set[tuple[str, str, str]]:
    """The tree's group objects, as the soak's watch names them, but `without`."""
    out = {(COMPOSITE, "ns", c) for c in shape.composites} | {("troupe", "ns", leaf) for leaf in shape.leaves}
    return {g for g in out if g[2] not in without}


# ------------------------------------------------------------ the shapes


def test_tree_objects_are_troupe_kinds_parents_first():
    objs = tree_objects("ns", nested(), cpu="1")
    kinds = [(o["kind"], o["metadata"]["name"]) for o in objs if o["kind"] != "Pod"]
    assert kinds == [
        ("CompositePodGroup", "p"),
        ("CompositePodGroup", "m"),
        ("PodGroup", "a"),
        ("PodGroup", "b"),
        ("PodGroup", "c"),
    ]
    by_name = {o["metadata"]["name"]: o for o in objs}
    assert by_name["p"]["apiVersion"] == "scheduling.troupe.dev/v1alpha2"
    assert "parentCompositePodGroupName" not in by_name["p"]["spec"]
    assert by_name["m"]["spec"]["parentCompositePodGroupName"] == "p"
    assert by_name["m"]["spec"]["schedulingPolicy"] == {"gang": {"minGroupCount": 2}}
    assert by_name["m"]["spec"]["schedulingConstraints"] == {"topology": [{"key": "rack"}]}
    assert by_name["m"]["spec"]["workloadRef"] == {"workloadName": "p", "templateName": "m"}
    assert by_name["a"]["spec"] == {"schedulingPolicy": {"gang": {"minCount": 2}}, "parentCompositePodGroupName": "m"}
    assert [o["metadata"]["name"] for o in objs if o["kind"] == "Pod"] == ["a-0", "a-1", "b-0", "c-0"]
    assert by_name["a-1"]["metadata"]["labels"] == {GROUP_LABEL: "a"}
    assert nested().depth() == 3 and leader_workers().depth() == 2 and nested().pods == 4


def test_rule_counts_children_by_their_own_rule_and_basic_as_one():
    shape = TreeShape(
        "r",
        {"r": TreeNode(None, None), "m": TreeNode("r", 2)},
        {"x": TreeNode("m", None, 3), "y": TreeNode("m", 2, 2), "z": TreeNode("r", 1, 1)},
    )
    rule = shape.rule({"x": 1, "y": 1})
    assert rule["x"] == (True, 1, 1)  # a basic PodGroup: one pod
    assert rule["y"] == (False, 1, 1)
    assert rule["m"] == (False, 1, 2)
    assert rule["r"] == (False, 0, 2)  # a basic CompositePodGroup: one child that holds
    assert shape.rule({"z": 1})["r"][0]
    assert (
        shape.why_not(rule, "r")
        == "r has 0 of minGroupCount 1 child group(s): m has 1 of minGroupCount 2 child group(s): y has 1 of minCount 2 pod(s)"
    )


# ------------------------------------------ bound below minGroupCount


def test_root_below_min_group_count_past_the_grace_is_a_violation():
    obs = Observer(cluster=None, selector=None, partial_grace=5)
    shape = leader_workers()
    obs.expect_tree("ns", shape)
    ps = pods(shape, bound={"t-workers": 3})  # the workers whole, the leader not: the root holds 1 of 2
    obs.check(ps, NODES, 0.0)
    obs.check(ps, NODES, 5.0)
    assert obs.violations == [], "not past the grace yet"
    obs.check(ps, NODES, 6.0)
    assert len(obs.violations) == 1, obs.violations
    v = obs.violations[0]
    assert "tree ns/t bound below minGroupCount: CompositePodGroup t (the root) has 1 of minGroupCount 2" in v, v
    assert "t-leader not bound, t-workers bound" in v and "with 3 pod(s) bound under it" in v, v
    assert "timeline:" in v and "t-leader 0/1, t-workers 3/3 (below: t)" in v, v
    assert obs.tree_partial_violations == 1 and obs.max_tree_partial_seconds == 6.0
    obs.check(ps, NODES, 20.0)
    assert len(obs.violations) == 1, "each CompositePodGroup is reported once"


def test_a_mid_composite_below_its_rule_is_caught_while_the_root_holds():
    obs = Observer(cluster=None, selector=None, partial_grace=5)
    shape = nested()
    obs.expect_tree("ns", shape)
    # a and c whole, b not: m holds 1 of its 2 children, so the root holds 1 of
    # its 2 (c): both are below their rule, though no gang is partial.
    ps = pods(shape, bound={"a": 2, "c": 1})
    obs.check(ps, NODES, 0.0)
    obs.check(ps, NODES, 6.0)
    assert len(obs.violations) == 2, obs.violations
    assert any("CompositePodGroup m (under p) has 1 of minGroupCount 2" in v for v in obs.violations)
    assert any("CompositePodGroup p (the root) has 1 of minGroupCount 2" in v for v in obs.violations)


def test_an_ancestor_below_its_rule_is_caught_with_every_child_of_its_own_whole():
    obs = Observer(cluster=None, selector=None, partial_grace=5)
    shape = TreeShape(
        "r",
        {"r": TreeNode(None, 1), "m": TreeNode("r", 2)},
        {"a": TreeNode("m", 1, 1), "b": TreeNode("m", 1, 1)},
    )
    obs.expect_tree("ns", shape)
    ps = pods(shape, bound={"a": 1})  # a whole, so no gang is partial; m holds 1 of 2, so r holds 0 of 1
    obs.check(ps, NODES, 0.0)
    obs.check(ps, NODES, 6.0)
    assert len(obs.violations) == 2 and all("bound below minGroupCount" in v for v in obs.violations)


def test_binding_under_way_within_the_grace_is_no_violation():
    obs = Observer(cluster=None, selector=None, partial_grace=5)
    shape = nested()
    obs.expect_tree("ns", shape)
    obs.check(pods(shape, bound={"c": 1}), NODES, 0.0)
    obs.check(pods(shape, bound={"c": 1, "a": 2}), NODES, 3.0)
    obs.check(pods(shape, bound={"c": 1, "a": 2, "b": 1}), NODES, 4.9)
    obs.check(pods(shape, bound={"c": 1, "a": 2, "b": 1}), NODES, 60.0)
    assert obs.violations == [] and obs.max_tree_partial_seconds == 3.0
    assert obs.trees[("ns", "p")].history[-1].endswith("bound a 2/2, b 1/1, c 1/1")


def test_a_tree_whole_at_a_lower_quorum_and_a_basic_root_are_fine():
    obs = Observer(cluster=None, selector=None, partial_grace=5)
    shape = TreeShape(
        "r",
        {"r": TreeNode(None, 2)},
        {"x": TreeNode("r", 1, 1), "y": TreeNode("r", 2, 2), "z": TreeNode("r", 3, 3)},
    )
    obs.expect_tree("ns", shape)
    ps = pods(shape, bound={"x": 1, "y": 2})  # 2 of minGroupCount 2 children: z waits, as it may
    obs.check(ps, NODES, 0.0)
    obs.check(ps, NODES, 60.0)
    basic = TreeShape("q", {"q": TreeNode(None, None)}, {"q-a": TreeNode("q", None, 3), "q-b": TreeNode("q", 2, 2)})
    obs.expect_tree("ns", basic)
    ps = pods(basic, bound={"q-a": 1})  # a basic leaf with one pod bound holds, and so does the basic root
    obs.check(ps, NODES, 61.0)
    obs.check(ps, NODES, 120.0)
    assert obs.violations == []


def test_a_fault_excuses_the_tree_then_the_grace_starts_again():
    obs = Observer(cluster=None, selector=None, partial_grace=5)
    shape = leader_workers()
    obs.expect_tree("ns", shape)
    ps = pods(shape, bound={"t-workers": 3})
    obs.check(ps, NODES, 0.0)
    obs.disrupt("ns", "t-leader", seconds=0.0)  # the leader's pod deleted by a fault: the tree too
    tree = obs.trees[("ns", "t")]
    assert tree.partial_since == {}
    tree.disrupted_until = 10.0  # (disrupt counts from the clock; the test's clock is its own)
    obs.check(ps, NODES, 9.0)
    assert obs.violations == [] and tree.partial_since == {}
    obs.check(ps, NODES, 10.0)
    obs.check(ps, NODES, 15.0)
    assert obs.violations == []
    obs.check(ps, NODES, 15.5)
    assert len(obs.violations) == 1 and "CompositePodGroup t (the root)" in obs.violations[0]


def test_a_tree_deleted_on_purpose_is_not_checked():
    obs = Observer(cluster=None, selector=None, partial_grace=5)
    shape = leader_workers()
    obs.expect_tree("ns", shape)
    obs.forget_tree("ns", "t")
    ps = pods(shape, bound={"t-workers": 2})
    obs.check(ps, NODES, 0.0)
    obs.check(ps, NODES, 60.0)
    assert obs.violations == [] and obs.unbound() == []


def test_a_leaf_below_min_count_is_a_partial_gang_and_its_pods_are_expected():
    obs = Observer(cluster=None, selector=None, partial_grace=5)
    shape = leader_workers()
    obs.expect_tree("ns", shape)
    ps = pods(shape, bound={"t-leader": 1, "t-workers": 2})
    obs.check(ps, NODES, 0.0)
    obs.check(ps, NODES, 6.0)
    assert any("gang ns/t-workers has 2 of minCount 3" in v for v in obs.violations), obs.violations
    assert any("CompositePodGroup t (the root) has 1 of minGroupCount 2" in v for v in obs.violations)
    assert obs.unbound() == ["ns/t-workers-2"]


# ------------------------------------------- room held for a gone tree


def reserving(**kw: float) -> Observer:
    return Observer(cluster=None, selector=None, reservations=True, release_grace=10, **kw)


def test_room_held_after_the_root_is_deleted_past_the_grace_is_a_violation():
    obs = reserving()
    shape = leader_workers(2)
    obs.expect_tree("ns", shape)
    ps = pods(shape, nominated={"t-leader": "a", "t-workers": "b"})
    obs.check(ps, NODES, 0.0, groups=live(shape))
    assert not obs.gone, "a whole tree that exists may hold room"
    obs.forget_tree("ns", "t")  # the soak deletes the root on purpose
    obs.check(ps, NODES, 1.0, groups=live(shape, "t"))
    obs.check(ps, NODES, 11.0, groups=live(shape, "t"))
    assert obs.violations == [], "within the grace"
    obs.check(ps, NODES, 11.5, groups=live(shape, "t"))
    assert len(obs.violations) == 2, obs.violations
    assert all("its tree's root CompositePodGroup t is gone" in v for v in obs.violations)
    assert any("room held for tree ns/t member ns/t-leader" in v for v in obs.violations)
    assert obs.tree_held_violations == 2 and obs.held_violations == 2
    assert len(obs.leaked_nominations()) == 3
    obs.check([], NODES, 40.0, groups=set())  # the soak deletes what is left: the timeline says how it ended
    assert len(obs.held_ends) == 2 and all("still held 39s after" in e for e in obs.held_ends), obs.held_ends


def test_a_mid_deleted_frees_the_leaves_under_it_and_the_rest_of_a_tree_no_longer_ready():
    obs = reserving()
    shape = nested()
    obs.expect_tree("ns", shape)
    ps = pods(shape, nominated={"a": "a", "b": "a", "c": "b"})
    obs.check(ps, NODES, 0.0, groups=live(shape, "m"))
    assert obs.gone[("ns", "a", "troupe")].why == "its ancestor CompositePodGroup m is gone"
    assert obs.gone[("ns", "c", "troupe")].why == (
        "its tree ns/p is not ready: p has 1 of minGroupCount 2 child group(s): CompositePodGroup m is gone"
    )
    # the leaves under m released in time, c's room still held: only c is caught
    released = [p for p in ps if p["metadata"]["labels"][GROUP_LABEL] == "c"] + pods(shape, missing={"c": 1})
    obs.check(released, NODES, 3.0, groups=live(shape, "m"))
    obs.check(released, NODES, 9.9, groups=live(shape, "m"))
    assert obs.violations == []
    obs.check(released, NODES, 10.5, groups=live(shape, "m"))
    assert len(obs.violations) == 1 and "tree ns/p member ns/c" in obs.violations[0], obs.violations
    assert "nominatedNodeName c-0 on b" in obs.violations[0]
    assert sorted(obs.release_seconds) == [3.0, 3.0] and obs.held_ends == []
    obs.check(pods(shape, missing={"c": 0}), NODES, 12.0, groups=live(shape, "m"))
    assert obs.release_seconds[-1] == 12.0 and obs.held_ends[0].endswith(
        "ns/c: released 12s after "
        + ("its tree ns/p is not ready: p has 1 of minGroupCount 2 child group(s): CompositePodGroup m is gone")
    ), obs.held_ends


def test_a_member_or_a_leaf_deleted_makes_the_whole_tree_release():
    obs = reserving()
    shape = nested()
    obs.expect_tree("ns", shape)
    # a member of a (gang 2) deleted: a holds no room by the gang rule, b and c by the tree's
    ps = pods(shape, nominated={"a": "a", "b": "a", "c": "b"}, missing={"a": 1})
    obs.check(ps, NODES, 0.0, groups=live(shape))
    assert obs.gone[("ns", "a", "troupe")].why == "it has 1 of minCount 2 pods"
    assert obs.gone[("ns", "b", "troupe")].why.startswith("its tree ns/p is not ready: p has 1 of minGroupCount 2")
    obs.check(ps, NODES, 10.5, groups=live(shape))
    assert len(obs.violations) == 3, obs.violations
    obs2 = reserving()
    obs2.expect_tree("ns", shape)
    ps = pods(shape, nominated={"a": "a", "b": "a", "c": "b"})
    obs2.check(ps, NODES, 0.0, groups=live(shape, "c"))  # the leaf PodGroup c deleted
    assert obs2.gone[("ns", "c", "troupe")].why == "its PodGroup is gone"
    assert obs2.gone[("ns", "a", "troupe")].why.endswith("PodGroup c is gone")
    obs2.check(pods(shape), NODES, 2.0, groups=live(shape, "c"))
    obs2.check(pods(shape), NODES, 30.0, groups=live(shape, "c"))
    assert obs2.violations == [] and obs2.release_seconds == [2.0, 2.0, 2.0]


def test_a_tree_still_ready_at_its_quorum_may_hold_room():
    obs = reserving()
    shape = TreeShape(
        "r",
        {"r": TreeNode(None, 1), "m": TreeNode("r", 1)},
        {"a": TreeNode("m", 1, 1), "c": TreeNode("r", 1, 1)},
    )
    obs.expect_tree("ns", shape)
    ps = pods(shape, nominated={"a": "a", "c": "b"})
    obs.check(ps, NODES, 0.0, groups=live(shape, "m"))
    obs.check(ps, NODES, 30.0, groups=live(shape, "m"))
    assert set(obs.gone) == {("ns", "a", "troupe")}  # c: the root needs 1 of 2, c is ready
    assert len(obs.violations) == 1 and "its ancestor CompositePodGroup m is gone" in obs.violations[0]


def test_a_fault_moves_a_tree_members_deadline_as_a_gangs():
    obs = reserving(release_grace_max=60)
    shape = leader_workers(1)
    obs.expect_tree("ns", shape)
    ps = pods(shape, nominated={"t-leader": "a", "t-workers": "b"})
    obs.check(ps, NODES, 0.0, groups=live(shape, "t"))
    obs.fault_started(9.0)
    obs.check(ps, NODES, 12.0, groups=live(shape, "t"))
    obs.fault_made(13.0)
    obs.check(ps, NODES, 22.0, groups=live(shape, "t"))
    assert obs.violations == []
    obs.check(ps, NODES, 23.5, groups=live(shape, "t"))
    assert len(obs.violations) == 2


def test_groups_unknown_only_readiness_counts():
    obs = reserving()
    shape = leader_workers(2)
    obs.expect_tree("ns", shape)
    ps = pods(shape, nominated={"t-leader": "a", "t-workers": "b"})
    obs.check(ps, NODES, 0.0, groups=None)  # the watch not synced: every object taken as there
    obs.check(ps, NODES, 30.0, groups=None)
    assert obs.violations == []
    short = pods(shape, nominated={"t-leader": "a", "t-workers": "b"}, missing={"t-workers": 1})
    obs.check(short, NODES, 31.0, groups=None)
    obs.check(short, NODES, 41.5, groups=None)
    assert len(obs.violations) == 2, obs.violations
    assert any("tree ns/t member ns/t-leader" in v and "is not ready" in v for v in obs.violations)
