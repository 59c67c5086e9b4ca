"""ClusterCache / NodeTable / Snapshot: usage accounting, assume/forget, pods
before nodes, node churn, terminal pods, moves, group member counts, snapshot
isolation; plus a random-operation property test against a plain recount."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.api.records import GroupKey
from scheduler.api.resources import CPU, DEFAULT_MEMORY_REQUEST, DEFAULT_MILLI_CPU_REQUEST, MEMORY, PODS
from scheduler.cluster.cache import ClusterCache, InvalidObject

from .builders import GiB, make_cache, make_group, make_node, make_pod

G = GroupKey("default", "g")


def usage(cache: ClusterCache, node: str, resource: str = CPU) -> int:
    row = cache.table.row[node]
    return int(cache.table.req[row, cache.table.column[resource]])


def nonzero(cache: ClusterCache, node: str) -> tuple[int, int]:
    row = cache.table.row[node]
    return int(cache.table.nonzero[row, 0]), int(cache.table.nonzero[row, 1])


def free_cpu(cache: ClusterCache, node: str) -> int:
    snap = cache.snapshot()
    row = snap.row[node]
    col = snap.column[CPU]
    return int(snap.alloc[row, col] - snap.req[row, col])


# ------------------------------------------------------------------ basics


def test_bound_pod_uses_capacity():
    cache = make_cache([make_node("n", "4", "8Gi")])
    cache.upsert_pod(make_pod("p", "1500m", "1Gi", node_name="n", phase="Running"))
    assert usage(cache, "n") == 1500
    assert usage(cache, "n", MEMORY) == GiB
    assert usage(cache, "n", PODS) == 1
    assert nonzero(cache, "n") == (1500, GiB)
    assert free_cpu(cache, "n") == 2500


def test_pending_pod_uses_nothing():
    cache = make_cache([make_node("n")])
    cache.upsert_pod(make_pod("p", "1"))
    assert usage(cache, "n") == 0 and usage(cache, "n", PODS) == 0


def test_requestless_pod_counts_defaults_for_scoring_only():
    cache = make_cache([make_node("n")])
    cache.upsert_pod(make_pod("p", node_name="n"))
    assert usage(cache, "n") == 0
    assert usage(cache, "n", PODS) == 1
    assert nonzero(cache, "n") == (DEFAULT_MILLI_CPU_REQUEST, DEFAULT_MEMORY_REQUEST)


def test_node_count_and_lookup():
    cache = make_cache([make_node("a"), make_node("b")])
    assert cache.node_count == 2
    assert cache.node("a").name == "a"
    assert cache.node("zzz") is None


def test_extended_resource_column_added_on_demand():
    cache = make_cache([make_node("n", extra={"nvidia.com/gpu": "4"})])
    cache.upsert_pod(make_pod("p", node_name="n", requests={"nvidia.com/gpu": "3", "example.com/new": "2"}))
    assert usage(cache, "n", "nvidia.com/gpu") == 3
    assert usage(cache, "n", "example.com/new") == 2
    snap = cache.snapshot()
    assert snap.alloc[snap.row["n"], snap.column["nvidia.com/gpu"]] == 4
    assert snap.alloc[snap.row["n"], snap.column["example.com/new"]] == 0


def test_node_update_changes_allocatable_not_usage():
    cache = make_cache([make_node("n", "2")])
    cache.upsert_pod(make_pod("p", "1", node_name="n"))
    cache.upsert_node(make_node("n", "8"))
    assert usage(cache, "n") == 1000
    assert free_cpu(cache, "n") == 7000


def test_upsert_is_idempotent():
    cache = make_cache([make_node("n")])
    pod = make_pod("p", "1", node_name="n")
    for _ in range(3):
        cache.upsert_pod(pod)
    assert usage(cache, "n") == 1000 and usage(cache, "n", PODS) == 1


def test_remove_unknown_pod_is_harmless():
    cache = make_cache([make_node("n")])
    assert cache.remove_pod("nope") is None
    assert usage(cache, "n", PODS) == 0


# ---------------------------------------------------------- assume / forget


def test_assume_and_forget():
    cache = make_cache([make_node("n", "4")])
    pod = make_pod("p", "1")
    cache.upsert_pod(pod)
    cache.assume(pod.uid, "n")
    assert cache.placed_node(pod.uid) == "n"
    assert usage(cache, "n") == 1000
    cache.forget(pod.uid)
    assert cache.placed_node(pod.uid) == ""
    assert usage(cache, "n") == 0 and usage(cache, "n", PODS) == 0


def test_forget_twice_and_forget_unassumed_are_harmless():
    cache = make_cache([make_node("n")])
    pod = make_pod("p", "1")
    cache.upsert_pod(pod)
    cache.forget(pod.uid)
    cache.assume(pod.uid, "n")
    cache.forget(pod.uid)
    cache.forget(pod.uid)
    assert usage(cache, "n") == 0


def test_assume_unknown_or_bound_pod_is_ignored():
    cache = make_cache([make_node("a"), make_node("b")])
    cache.assume("ghost", "a")
    assert "ghost" not in cache.assumed
    pod = make_pod("p", "1", node_name="a")
    cache.upsert_pod(pod)
    cache.assume(pod.uid, "b")
    assert cache.placed_node(pod.uid) == "a"
    assert usage(cache, "a") == 1000 and usage(cache, "b") == 0


def test_binding_confirmed_replaces_assumption():
    cache = make_cache([make_node("n")])
    pod = make_pod("p", "1")
    cache.upsert_pod(pod)
    cache.assume(pod.uid, "n")
    cache.upsert_pod(make_pod("p", "1", node_name="n"))
    assert pod.uid not in cache.assumed
    assert usage(cache, "n") == 1000 and usage(cache, "n", PODS) == 1
    cache.forget(pod.uid)  # a late forget does not undo the API's word
    assert usage(cache, "n") == 1000


def test_binding_to_another_node_moves_usage():
    cache = make_cache([make_node("a"), make_node("b")])
    pod = make_pod("p", "1")
    cache.upsert_pod(pod)
    cache.assume(pod.uid, "a")
    cache.upsert_pod(make_pod("p", "1", node_name="b"))
    assert usage(cache, "a") == 0 and usage(cache, "a", PODS) == 0
    assert usage(cache, "b") == 1000


def test_unrelated_update_of_assumed_pod_keeps_assumption():
    cache = make_cache([make_node("n")])
    pod = make_pod("p", "1")
    cache.upsert_pod(pod)
    cache.assume(pod.uid, "n")
    cache.upsert_pod(make_pod("p", "1", labels={"x": "y"}, resource_version="9"))
    assert cache.placed_node(pod.uid) == "n"
    assert usage(cache, "n") == 1000


def test_assumed_pod_deleted_frees_capacity():
    cache = make_cache([make_node("n")])
    pod = make_pod("p", "1")
    cache.upsert_pod(pod)
    cache.assume(pod.uid, "n")
    cache.remove_pod(pod.uid)
    assert pod.uid not in cache.assumed
    assert usage(cache, "n") == 0 and usage(cache, "n", PODS) == 0


# --------------------------------------------------------- pods before nodes


def test_pod_arriving_before_its_node():
    cache = make_cache()
    cache.upsert_pod(make_pod("p", "1", node_name="late"))
    assert cache.node_count == 0
    snap = cache.snapshot()
    assert snap.num_nodes == 0 and not snap.valid[snap.row["late"]]
    cache.upsert_node(make_node("late", "4"))
    assert cache.node_count == 1
    assert free_cpu(cache, "late") == 3000


def test_node_removed_with_pods_then_re_added_keeps_usage():
    cache = make_cache([make_node("n", "4")])
    cache.upsert_pod(make_pod("p", "1", node_name="n"))
    cache.remove_node("n")
    assert cache.node_count == 0 and cache.node("n") is None
    snap = cache.snapshot()
    assert snap.num_nodes == 0
    cache.upsert_node(make_node("n", "4"))
    assert free_cpu(cache, "n") == 3000


def test_empty_node_removed_releases_row_and_re_add_starts_clean():
    cache = make_cache([make_node("a"), make_node("b")])
    cache.remove_node("a")
    assert "a" not in cache.table.row
    cache.upsert_node(make_node("c", "2"))
    assert cache.node_count == 2
    assert free_cpu(cache, "c") == 2000
    cache.upsert_node(make_node("a", "1"))
    assert free_cpu(cache, "a") == 1000


def test_row_released_when_last_pod_of_a_removed_node_leaves():
    cache = make_cache([make_node("n")])
    cache.upsert_pod(make_pod("p", "1", node_name="n"))
    cache.remove_node("n")
    assert "n" in cache.table.row
    cache.remove_pod("uid-default-p")
    assert "n" not in cache.table.row
    cache.upsert_node(make_node("n", "4"))
    assert usage(cache, "n") == 0 and usage(cache, "n", PODS) == 0


def test_remove_unknown_node_is_harmless():
    cache = make_cache([make_node("n")])
    cache.remove_node("nope")
    cache.remove_node("n")
    cache.remove_node("n")
    assert cache.node_count == 0


def test_many_nodes_grow_the_table():
    cache = make_cache([make_node(f"n{i}", "1") for i in range(200)])
    for i in range(200):
        cache.upsert_pod(make_pod(f"p{i}", f"{i}m", node_name=f"n{i}"))
    assert cache.node_count == 200
    assert usage(cache, "n199") == 199 and usage(cache, "n0") == 0


# ------------------------------------------------------------ terminal pods


def test_terminal_pod_frees_capacity():
    cache = make_cache([make_node("n", "2")])
    cache.upsert_pod(make_pod("p", "1", node_name="n", phase="Running"))
    cache.upsert_pod(make_pod("p", "1", node_name="n", phase="Succeeded"))
    assert usage(cache, "n") == 0 and usage(cache, "n", PODS) == 0
    cache.remove_pod("uid-default-p")
    assert usage(cache, "n") == 0 and usage(cache, "n", PODS) == 0


def test_terminal_pod_seen_first_never_counts():
    cache = make_cache([make_node("n")])
    cache.upsert_pod(make_pod("p", "1", node_name="n", phase="Failed"))
    assert usage(cache, "n") == 0


def test_deleting_bound_pod_still_uses_capacity():
    cache = make_cache([make_node("n")])
    cache.upsert_pod(make_pod("p", "1", node_name="n", deleting=True))
    assert usage(cache, "n") == 1000


def test_request_change_of_bound_pod_is_reaccounted():
    cache = make_cache([make_node("n", "4")])
    cache.upsert_pod(make_pod("p", "1", node_name="n"))
    cache.upsert_pod(make_pod("p", "3", node_name="n"))
    assert usage(cache, "n") == 3000 and usage(cache, "n", PODS) == 1


def test_request_change_of_assumed_pod_is_reaccounted():
    cache = make_cache([make_node("n", "4")])
    cache.upsert_pod(make_pod("p", "1"))
    cache.assume("uid-default-p", "n")
    cache.upsert_pod(make_pod("p", "2"))
    assert usage(cache, "n") == 2000 and usage(cache, "n", PODS) == 1


def test_pod_update_moving_nodes():
    cache = make_cache([make_node("a"), make_node("b")])
    cache.upsert_pod(make_pod("p", "1", "1Gi", node_name="a"))
    cache.upsert_pod(make_pod("p", "1", "1Gi", node_name="b"))
    assert usage(cache, "a") == 0 and usage(cache, "a", PODS) == 0 and nonzero(cache, "a") == (0, 0)
    assert usage(cache, "b") == 1000 and nonzero(cache, "b") == (1000, GiB)
    cache.upsert_pod(make_pod("p", "1", "1Gi", node_name=""))  # (not a real transition; must still balance)
    assert usage(cache, "b") == 0


# ------------------------------------------------------------------ groups


def placed_count(cache: ClusterCache, key: GroupKey) -> int:
    """The group's pods bound or assumed to a node and still running, as the cycle counts them (placed_before)."""
    return len(cache.member_summary(key)[1])


def test_group_member_counts():
    cache = make_cache([make_node("n")], groups=[make_group("g", 2)])
    a, b, c = (make_pod(x, "100m", group="g") for x in "abc")
    for p in (a, b, c):
        cache.upsert_pod(p)
    assert cache.live_member_count(G) == 3
    assert placed_count(cache, G) == 0
    assert [p.name for p in cache.members(G)] == ["a", "b", "c"]

    cache.assume(a.uid, "n")
    cache.upsert_pod(make_pod("b", "100m", group="g", node_name="n"))
    assert placed_count(cache, G) == 2

    cache.upsert_pod(make_pod("b", "100m", group="g", node_name="n", phase="Succeeded"))
    assert cache.live_member_count(G) == 2
    assert placed_count(cache, G) == 1

    cache.upsert_pod(make_pod("c", "100m", group="g", deleting=True))
    assert cache.live_member_count(G) == 1

    cache.forget(a.uid)
    assert placed_count(cache, G) == 0
    cache.remove_pod(a.uid)
    cache.remove_pod(b.uid)
    cache.remove_pod(c.uid)
    assert cache.live_member_count(G) == 0
    assert list(cache.members(G)) == []


def test_group_member_counts_name_the_first_member_with_owners():
    cache = make_cache([make_node("n")], groups=[make_group("g", 2)])
    cache.upsert_pod(make_pod("a", "100m", group="g"))
    assert cache.member_counts(G).occupied_by == ""
    cache.upsert_pod(dataclasses.replace(make_pod("b", "100m", group="g"), owners=("job", "cm")))
    assert cache.member_counts(G).occupied_by == "default/cm,default/job"


def test_group_label_change_moves_membership():
    cache = make_cache()
    cache.upsert_pod(make_pod("p", group="g"))
    cache.upsert_pod(make_pod("p", group="h"))
    assert cache.live_member_count(G) == 0 and list(cache.members(G)) == []
    assert cache.live_member_count(GroupKey("default", "h")) == 1
    cache.upsert_pod(make_pod("p"))
    assert cache.live_member_count(GroupKey("default", "h")) == 0
    assert list(cache.members(GroupKey("default", "h"))) == []


def test_groups_are_per_namespace():
    cache = make_cache()
    cache.upsert_pod(make_pod("p", group="g", namespace="x"))
    cache.upsert_pod(make_pod("p", group="g", namespace="y"))
    assert cache.live_member_count(GroupKey("x", "g")) == 1
    assert cache.live_member_count(GroupKey("y", "g")) == 1
    assert cache.live_member_count(G) == 0


def test_repeated_upserts_do_not_inflate_live_count():
    cache = make_cache()
    for rv in range(5):
        cache.upsert_pod(make_pod("p", group="g", resource_version=str(rv)))
    assert cache.live_member_count(G) == 1


def test_group_and_workload_objects():
    cache = make_cache()
    g = make_group("g", 2)
    cache.upsert_group(G, g)
    assert cache.groups[G] is g
    cache.upsert_group(G, InvalidObject("bad"))
    assert cache.groups[G] == InvalidObject("bad")
    cache.remove_group(G)
    cache.remove_group(G)
    assert G not in cache.groups
    cache.upsert_workload(("default", "w"), InvalidObject("x"))
    cache.remove_workload(("default", "w"))
    assert cache.workloads == {}


# ---------------------------------------------------------------- snapshot


def test_snapshot_assume_does_not_touch_the_cache():
    cache = make_cache([make_node("n", "4")])
    snap = cache.snapshot()
    pod = make_pod("p", "1", "1Gi")
    vec, unknown = snap.request_vector(pod)
    assert unknown == ()
    assert vec[snap.column[PODS]] == 1 and vec[snap.column[CPU]] == 1000
    snap.assume(snap.row["n"], vec, (pod.nonzero_cpu, pod.nonzero_memory))
    assert snap.req[snap.row["n"], snap.column[CPU]] == 1000
    assert snap.nonzero[snap.row["n"], 0] == 1000
    assert usage(cache, "n") == 0 and nonzero(cache, "n") == (0, 0)
    assert cache.snapshot().req[0, snap.column[CPU]] == 0


def test_cache_changes_do_not_reach_an_existing_snapshot():
    cache = make_cache([make_node("n", "4")])
    snap = cache.snapshot()
    cache.upsert_pod(make_pod("p", "1", node_name="n"))
    cache.upsert_node(make_node("m"))
    cache.remove_node("n")
    assert snap.req[snap.row["n"], snap.column[CPU]] == 0
    assert snap.valid[snap.row["n"]]
    assert snap.num_nodes == 1 and "m" not in snap.row


def test_snapshot_request_vector_unknown_resources():
    cache = make_cache([make_node("n")])
    snap = cache.snapshot()
    _, unknown = snap.request_vector(make_pod("p", requests={"z.io/b": "1", "a.io/a": "1"}))
    assert unknown == ("a.io/a", "z.io/b")


def test_snapshots_are_independent():
    cache = make_cache([make_node("n")])
    s1, s2 = cache.snapshot(), cache.snapshot()
    vec, _ = s1.request_vector(make_pod("p", "1"))
    s1.assume(0, vec, (1000, 0))
    assert s2.req[0].sum() == 0


# ------------------------------------------------------- random operations


NODES = ["n0", "n1", "n2"]


@st.composite
def ops(draw):
    return draw(
        st.lists(
            st.one_of(
                st.tuples(st.just("node"), st.sampled_from(NODES), st.integers(1, 8)),
                st.tuples(st.just("rmnode"), st.sampled_from(NODES)),
                st.tuples(
                    st.just("pod"),
                    st.integers(0, 5),
                    st.integers(0, 3),
                    st.sampled_from(["", *NODES]),
                    st.sampled_from(["Pending", "Running", "Succeeded"]),
                    st.sampled_from([None, "g", "h"]),
                    st.booleans(),
                ),
                st.tuples(st.just("rmpod"), st.integers(0, 5)),
                st.tuples(st.just("assume"), st.integers(0, 5), st.sampled_from(NODES)),
                st.tuples(st.just("forget"), st.integers(0, 5)),
            ),
            max_size=40,
        )
    )


@settings(max_examples=300, deadline=None)
@given(ops())
def test_accounting_matches_a_recount(operations):
    cache = ClusterCache()
    nodes: dict[str, int] = {}
    for op in operations:
        kind = op[0]
        if kind == "node":
            cache.upsert_node(make_node(op[1], str(op[2])))
            nodes[op[1]] = op[2]
        elif kind == "rmnode":
            cache.remove_node(op[1])
            nodes.pop(op[1], None)
        elif kind == "pod":
            _, i, cpu, node, phase, group, deleting = op
            cache.upsert_pod(make_pod(f"p{i}", str(cpu), node_name=node, phase=phase, group=group, deleting=deleting))
        elif kind == "rmpod":
            cache.remove_pod(f"uid-default-p{op[1]}")
        elif kind == "assume":
            cache.assume(f"uid-default-p{op[1]}", op[2])
        elif kind == "forget":
            cache.forget(f"uid-default-p{op[1]}")

        # recount from the pods the cache holds
        expect_cpu: dict[str, int] = {}
        expect_pods: dict[str, int] = {}
        for p in cache.pods.values():
            where = p.node_name or cache.assumed.get(p.uid, "")
            if where and not p.terminal:
                expect_cpu[where] = expect_cpu.get(where, 0) + p.requests.get(CPU, 0)
                expect_pods[where] = expect_pods.get(where, 0) + 1
        table = cache.table
        for name, row in table.row.items():
            assert table.req[row, table.column[CPU]] == expect_cpu.get(name, 0), (name, op)
            assert table.req[row, table.column[PODS]] == expect_pods.get(name, 0), (name, op)
            assert table.pod_count[row] == expect_pods.get(name, 0)
            assert table.valid[row] == (name in nodes)
        for name in set(expect_cpu) | set(nodes):
            assert name in table.row
        assert cache.node_count == len(nodes)
        snap = cache.snapshot()
        for name, cpu in nodes.items():
            assert snap.alloc[snap.row[name], snap.column[CPU]] == cpu * 1000
        for key in (GroupKey("default", "g"), GroupKey("default", "h")):
            live = sum(1 for p in cache.pods.values() if p.group_name == key[1] and not p.terminal and not p.deleting)
            placed = sum(
                1
                for p in cache.pods.values()
                if p.group_name == key[1] and not p.terminal and (p.node_name or p.uid in cache.assumed)
            )
            assert cache.live_member_count(key) == live
            assert placed_count(cache, key) == placed
            assert {p.uid for p in cache.members(key)} == {p.uid for p in cache.pods.values() if p.group_name == key[1]}
        # a freed row has no leftovers
        for idx in table._free:
            assert table.req[idx].sum() == 0 and table.nonzero[idx].sum() == 0 and table.pod_count[idx] == 0
