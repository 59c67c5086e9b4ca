"""A CompositePodGroup's candidate domains in the tree cycle
(core/schedule_tree.py): in domain-id order, within the parent's rows,
pinned to the domain of pods placed before, full ones dropped by the room
check, and each domain's rows made only when it is tried."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from scheduler.api.composite import parse_composite
from scheduler.api.podgroup import parse_podgroup
from scheduler.api.records import GroupKey, PodInfo
from scheduler.cluster.tree import TreeNode
from scheduler.core import schedule_tree
from scheduler.core.schedule_podgroup import Outcome
from scheduler.core.schedule_tree import TreeCycle

from .builders import make_cache, make_framework, make_node, make_pod, podgroup_body

RACK = "topology.kubernetes.io/rack"
API = "scheduling.troupe.dev/v1alpha2"
# Rack ids follow node order (b=0, a=1, c=2): candidates go by id, not by name.
RACKS = ("b", "a", "c")
PER_RACK = 3


def rack_nodes(rack: str) -> list[str]:
    return [f"{rack}-{i}" for i in range(PER_RACK)]


def cycle(
    placed: Mapping[str, Sequence[str]] | None = None, running: Sequence[PodInfo] = ()
) -> tuple[TreeCycle, TreeNode]:
    """A root in one rack over a 1-pod leader and a gang of 3 workers (1 cpu
    each) on 3 racks of 3 4-cpu nodes, and 2 nodes without the label."""
    nodes = [make_node(n, "4", labels={RACK: r}) for r in RACKS for n in rack_nodes(r)]
    nodes += [make_node(f"bare-{i}", "4") for i in range(2)]
    cache = make_cache(nodes, running)
    root = GroupKey("default", "root")
    spec: dict[str, Any] = {
        "workloadRef": {"workloadName": "w", "templateName": "t"},
        "schedulingPolicy": {"gang": {"minGroupCount": 2}},
        "schedulingConstraints": {"topology": [{"key": RACK}]},
    }
    body = {"apiVersion": API, "kind": "CompositePodGroup", "metadata": {"name": "root", "namespace": "default"}}
    cache.upsert_composite(root, parse_composite({**body, "spec": spec}))
    pending: dict[GroupKey, list[PodInfo]] = {}
    for leaf, count in (("leader", 1), ("workers", 3)):
        group_body = podgroup_body(leaf, count if count > 1 else None)
        group_body["spec"]["parentCompositePodGroupName"] = "root"
        group = parse_podgroup(group_body)
        cache.upsert_group(group.key, group)
        pending[group.key] = [make_pod(f"{leaf}-{i}", "1", group=leaf) for i in range(count)]
    tree = cache.tree(root)
    assert tree is not None
    on = {GroupKey("default", leaf): list(names) for leaf, names in (placed or {}).items()}
    return TreeCycle(make_framework(cache), cache.snapshot(), tree, pending, on), tree.root


def mask(tc: TreeCycle, names: Sequence[str]) -> np.ndarray:
    rows = np.zeros(len(tc.snapshot.names), dtype=bool)
    rows[[tc.snapshot.row[n] for n in names]] = True
    return rows


def rows_of(domains: schedule_tree._Domains, domain: int) -> np.ndarray:
    rows = domains.rows(domain)
    assert rows is not None
    return rows


def test_candidates_in_domain_id_order_with_their_rows() -> None:
    tc, root = cycle()
    domains, problem = tc.domains(root, None, RACK)
    assert problem is None
    assert [label for label, _ in domains.candidates] == [f"{RACK}={r}" for r in RACKS]
    assert [i for _, i in domains.candidates] == [0, 1, 2]
    for (_, i), rack in zip(domains.candidates, RACKS, strict=True):
        assert np.array_equal(rows_of(domains, i), mask(tc, rack_nodes(rack)))  # the bare nodes in none


def test_candidates_within_the_parents_rows() -> None:
    tc, root = cycle()
    within = mask(tc, rack_nodes("c") + rack_nodes("b")[:1] + ["bare-0"])
    domains, _ = tc.domains(root, within, RACK)
    assert domains.candidates == [(f"{RACK}=b", 0), (f"{RACK}=c", 2)]
    assert np.array_equal(rows_of(domains, 0), mask(tc, ["b-0"]))


def test_without_a_key_the_one_candidate_is_within() -> None:
    tc, root = cycle()
    within = mask(tc, rack_nodes("a"))
    domains, _ = tc.domains(root, within, None)
    assert domains.candidates == [("", -1)]
    assert domains.rows(-1) is within
    domains, _ = tc.domains(root, None, None)
    assert domains.rows(-1) is None


def test_room_check_drops_full_domains() -> None:
    # Rack b full; rack c with 1 cpu left on each node: 3 cpu in all, the subtree needs 4 at the least.
    running = [make_pod(f"big-{n}", "4", node_name=n) for n in rack_nodes("b")]
    running += [make_pod(f"mid-{n}", "3", node_name=n) for n in rack_nodes("c")]
    tc, root = cycle(running=running)
    domains, _ = tc.domains(root, None, RACK)
    assert tc.roomy(root, domains) == [(f"{RACK}=a", 1)]


def test_placed_pods_pin_their_domain() -> None:
    tc, root = cycle(placed={"workers": ["c-1"]})
    domains, problem = tc.domains(root, None, RACK)
    assert problem is None
    assert domains.candidates == [(f"{RACK}=c", 2)]
    assert tc.roomy(root, domains) == domains.candidates


def test_pinned_domain_outside_within_has_no_room() -> None:
    tc, root = cycle(placed={"workers": ["c-1"]})
    result = tc._composite(root, mask(tc, rack_nodes("a")))
    assert result.outcome is Outcome.UNSCHEDULABLE
    assert result.message.startswith(f"no {RACK} domain has the free room the subtree needs at the least")


def test_placed_pod_on_a_node_without_the_label() -> None:
    tc, root = cycle(placed={"leader": ["bare-1"]})
    domains, problem = tc.domains(root, None, RACK)
    assert domains.candidates == []
    assert problem == f"a pod of PodGroup default/leader runs on node bare-1, which has no label {RACK}"


def test_only_the_domain_tried_has_its_rows_made(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[int] = []
    rows = schedule_tree._Domains.rows

    def spy(self: schedule_tree._Domains, domain: int) -> np.ndarray | None:
        made.append(domain)
        return rows(self, domain)

    monkeypatch.setattr(schedule_tree._Domains, "rows", spy)
    running = [make_pod(f"big-{n}", "4", node_name=n) for n in rack_nodes("b")]
    tc, _ = cycle(running=running)
    decision = tc.run()
    assert decision.outcome is Outcome.SCHEDULED
    assert {a.node for a in decision.assignments} <= set(rack_nodes("a"))
    assert len(decision.assignments) == 4
    assert made == [1]  # rack a: b is full, c is never tried
