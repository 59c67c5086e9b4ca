"""InterPodAffinity: cases ported from upstream v1.37 filtering_test.go
(TestRequiredAffinitySingleNode, TestRequiredAffinityMultipleNodes,
TestMultipleAffinityTermsRequireSingleMatchingPod, TestFastTrackInterPodAffinity)
and scoring_test.go (TestPreferredAffinity,
TestPreferredAffinityWithHardPodAffinitySymmetricWeight), plus matchLabelKeys,
unknown namespace labels, the framework / gang cycle, and a hypothesis
comparison with a literal per-node port of upstream's algorithm.

Upstream's namespace "" is "default" here (parse_pod's default). The invalid
label-syntax cases are not ported: selectors are validated by the apiserver."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from scheduler.api.config import Profile
from scheduler.api.constants import POD_GROUP_LABEL, REASON_SCHEDULED, REASON_UNSCHEDULABLE
from scheduler.api.records import LabelSelector, NodeInfo, PodAffinityTerm, PodInfo, Requirement
from scheduler.cluster.snapshot import Snapshot
from scheduler.core.schedule_one import schedule_pod
from scheduler.core.schedule_podgroup import schedule_group
from scheduler.framework.framework import Framework, ProfileError
from scheduler.framework.interface import CycleState, Handle
from scheduler.plugins import in_tree_registry
from scheduler.plugins.interpodaffinity import (
    REASON_AFFINITY,
    REASON_ANTI_AFFINITY,
    REASON_EXISTING_ANTI_AFFINITY,
    InterPodAffinity,
    InterPodAffinityArgs,
)

from .builders import make_cache, make_group, make_node, make_pod

AFF, ANTI, EXIST = REASON_AFFINITY, REASON_ANTI_AFFINITY, REASON_EXISTING_ANTI_AFFINITY
HOST = "kubernetes.io/hostname"

# scoring_test.go `namespaces`
NS_T1 = {"team": "team1"}
NS_T2 = {"team": "team2"}
NAMESPACES = {"subteam1.team1": NS_T1, "subteam2.team1": NS_T1, "subteam1.team2": NS_T2, "subteam2.team2": NS_T2}


# ------------------------------------------------------------------ builders


def sel_in(key: str, *values: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]}


def sel_not_in(key: str, *values: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": "NotIn", "values": list(values)}]}


def sel_exists(key: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": "Exists"}]}


def exprs(*reqs: tuple[str, str, Sequence[str]]) -> dict[str, Any]:
    return {"matchExpressions": [{"key": k, "operator": op, **({"values": list(v)} if v else {})} for k, op, v in reqs]}


def term(
    selector: Mapping[str, Any] | None,
    topology_key: str,
    *,
    namespaces: Sequence[str] | None = None,
    ns_selector: Mapping[str, Any] | None = None,
    match_label_keys: Sequence[str] | None = None,
    mismatch_label_keys: Sequence[str] | None = None,
) -> dict[str, Any]:
    t: dict[str, Any] = {"topologyKey": topology_key}
    if selector is not None:
        t["labelSelector"] = dict(selector)
    if namespaces is not None:
        t["namespaces"] = list(namespaces)
    if ns_selector is not None:
        t["namespaceSelector"] = dict(ns_selector)
    if match_label_keys is not None:
        t["matchLabelKeys"] = list(match_label_keys)
    if mismatch_label_keys is not None:
        t["mismatchLabelKeys"] = list(mismatch_label_keys)
    return t


def affinity(
    req: Sequence[dict] = (),
    pref: Sequence[tuple[int, dict]] = (),
    anti: Sequence[dict] = (),
    anti_pref: Sequence[tuple[int, dict]] = (),
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if req or pref:
        out["podAffinity"] = {}
        if req:
            out["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = list(req)
        if pref:
            out["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = [
                {"weight": w, "podAffinityTerm": t} for w, t in pref
            ]
    if anti or anti_pref:
        out["podAntiAffinity"] = {}
        if anti:
            out["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = list(anti)
        if anti_pref:
            out["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = [
                {"weight": w, "podAffinityTerm": t} for w, t in anti_pref
            ]
    return out


_seq = iter(range(10**9))


def pod(
    labels: Mapping[str, str] | None = None,
    ns: str = "default",
    aff: Mapping[str, Any] | None = None,
    node: str = "",
    name: str | None = None,
    **kw: Any,
) -> PodInfo:
    name = name or f"p{next(_seq)}"
    extra: dict[str, Any] = {"node_name": node, "phase": "Running"} if node else {}
    return make_pod(name, namespace=ns, labels=dict(labels or {}), affinity=dict(aff) if aff else None, **extra, **kw)


def node(name: str, **labels: str) -> NodeInfo:
    return make_node(name, labels=labels)


def setup(
    nodes: Sequence[NodeInfo],
    existing: Sequence[PodInfo] = (),
    ns_labels: Mapping[str, Mapping[str, str]] | None = None,
    args: Mapping[str, Any] | None = None,
) -> tuple[InterPodAffinity, Snapshot]:
    cache = make_cache(nodes, existing)
    cache.namespace_labels.update(ns_labels or {})
    return InterPodAffinity(InterPodAffinityArgs.model_validate(dict(args or {})), Handle(cache)), cache.snapshot()


def statuses(plugin: InterPodAffinity, snap: Snapshot, incoming: PodInfo) -> dict[str, str | None]:
    """Node name -> the (single) rejection reason or None, as upstream's per-node Filter status."""
    result = plugin.filter(CycleState(), incoming, snap)
    assert result.unresolvable == frozenset({AFF})
    out: dict[str, str | None] = {}
    for row, name in enumerate(snap.names):
        if not snap.valid[row]:
            continue  # a placeholder row (pods bound to a node the cache does not have)
        hits = [r for r, m in result.reasons if m[row]]
        if result.feasible[row]:
            assert hits == []
            out[name] = None
        else:
            assert len(hits) == 1, hits
            out[name] = hits[0]
    return out


def filter_nodes(nodes, existing, incoming, ns_labels=None) -> list[str | None]:
    plugin, snap = setup(nodes, existing, ns_labels)
    got = statuses(plugin, snap, incoming)
    return [got[n.name] for n in nodes]


def scores(nodes, existing, incoming, ns_labels=None, args=None) -> list[int]:
    plugin, snap = setup(nodes, existing, ns_labels, args)
    rows = np.array([snap.row[n.name] for n in nodes], dtype=np.int64)
    raw = plugin.score(CycleState(), incoming, snap, rows)
    assert len(raw) == len(rows)
    return [int(s) for s in plugin.normalize(raw)]


# ===================================================== TestRequiredAffinitySingleNode

POD_LABEL = {"service": "securityscan"}
POD_LABEL2 = {"security": "S1"}
NODE1 = node("node1", region="r1", zone="z11")


def existing_default() -> PodInfo:
    return pod(POD_LABEL, node="node1")


SINGLE_NODE_CASES: list[tuple[str, PodInfo, list[PodInfo], str | None]] = [
    ("no required pod affinity, no existing pods", pod(), [], None),
    (
        "affinity In matches the existing pod",
        pod(POD_LABEL2, aff=affinity([term(sel_in("service", "securityscan", "value2"), "region")])),
        [existing_default()],
        None,
    ),
    (
        "affinity NotIn matches the existing pod",
        pod(POD_LABEL2, aff=affinity([term(sel_not_in("service", "securityscan3", "value3"), "region")])),
        [existing_default()],
        None,
    ),
    (
        "affinity does not match because of a different namespace",
        pod(
            POD_LABEL2,
            aff=affinity([term(sel_in("service", "securityscan", "value2"), "", namespaces=["DiffNameSpace"])]),
        ),
        [pod({"service": "securityscan"}, ns="ns", node="node1")],
        AFF,
    ),
    (
        "affinity with a label selector the existing pod does not match",
        pod(POD_LABEL, aff=affinity([term(sel_in("service", "antivirusscan", "value2"), "")])),
        [existing_default()],
        AFF,
    ),
    (
        "different operators in multiple terms all satisfied",
        pod(
            POD_LABEL2,
            aff=affinity(
                [
                    term(exprs(("service", "Exists", ()), ("wrongkey", "DoesNotExist", ())), "region"),
                    term(exprs(("service", "In", ["securityscan"]), ("service", "NotIn", ["WrongValue"])), "region"),
                ]
            ),
        ),
        [existing_default()],
        None,
    ),
    (
        "matchExpressions are ANDed: one item does not match",
        pod(
            POD_LABEL2,
            aff=affinity(
                [
                    term(exprs(("service", "Exists", ()), ("wrongkey", "DoesNotExist", ())), "region"),
                    term(exprs(("service", "In", ["securityscan2"]), ("service", "NotIn", ["WrongValue"])), "region"),
                ]
            ),
        ),
        [existing_default()],
        AFF,
    ),
    (
        "satisfies affinity and anti-affinity",
        pod(
            POD_LABEL2,
            aff=affinity(
                [term(sel_in("service", "securityscan", "value2"), "region")],
                anti=[term(sel_in("service", "antivirusscan", "value2"), "node")],
            ),
        ),
        [existing_default()],
        None,
    ),
    (
        "satisfies affinity, anti-affinity and anti-affinity symmetry",
        pod(
            POD_LABEL2,
            aff=affinity(
                [term(sel_in("service", "securityscan", "value2"), "region")],
                anti=[term(sel_in("service", "antivirusscan", "value2"), "node")],
            ),
        ),
        [pod(POD_LABEL, node="node1", aff=affinity(anti=[term(sel_in("service", "antivirusscan", "value2"), "node")]))],
        None,
    ),
    (
        "satisfies affinity but not anti-affinity",
        pod(
            POD_LABEL2,
            aff=affinity(
                [term(sel_in("service", "securityscan", "value2"), "region")],
                anti=[term(sel_in("service", "securityscan", "value2"), "zone")],
            ),
        ),
        [existing_default()],
        ANTI,
    ),
    (
        "satisfies affinity and anti-affinity but not anti-affinity symmetry",
        pod(
            POD_LABEL,
            aff=affinity(
                [term(sel_in("service", "securityscan", "value2"), "region")],
                anti=[term(sel_in("service", "antivirusscan", "value2"), "node")],
            ),
        ),
        [pod(POD_LABEL, node="node1", aff=affinity(anti=[term(sel_in("service", "securityscan", "value2"), "zone")]))],
        EXIST,
    ),
    (
        "pod matches its own NotIn term but the matching pod is on another node",
        pod(POD_LABEL, aff=affinity([term(sel_not_in("service", "securityscan", "value2"), "region")])),
        [pod({"service": "securityscan"}, node="node2")],
        AFF,
    ),
    (
        "existing pod's anti-affinity respected when the incoming pod has none",
        pod(POD_LABEL),
        [pod(POD_LABEL, node="node1", aff=affinity(anti=[term(sel_in("service", "securityscan", "value2"), "zone")]))],
        EXIST,
    ),
    (
        "existing pod's anti-affinity NotIn does not match the incoming pod",
        pod(POD_LABEL),
        [
            pod(
                POD_LABEL,
                node="node1",
                aff=affinity(anti=[term(sel_not_in("service", "securityscan", "value2"), "zone")]),
            )
        ],
        None,
    ),
    (
        "anti-affinity of the incoming pod wins over the existing pod's symmetry",
        pod(
            POD_LABEL,
            aff=affinity(anti=[term(sel_exists("service"), "region"), term(sel_exists("security"), "region")]),
        ),
        [pod(POD_LABEL2, node="node1", aff=affinity(anti=[term(sel_exists("security"), "zone")]))],
        ANTI,
    ),
    (
        "symmetry a1: partial match on terms",
        pod(POD_LABEL, aff=affinity(anti=[term(sel_exists("service"), "zone"), term(sel_exists("security"), "zone")])),
        [pod(POD_LABEL2, node="node1", aff=affinity(anti=[term(sel_exists("security"), "zone")]))],
        ANTI,
    ),
    (
        "symmetry a2: partial match on terms",
        pod(POD_LABEL2, aff=affinity(anti=[term(sel_exists("security"), "zone")])),
        [
            pod(
                POD_LABEL,
                node="node1",
                aff=affinity(anti=[term(sel_exists("service"), "zone"), term(sel_exists("security"), "zone")]),
            )
        ],
        EXIST,
    ),
    (
        "symmetry b1: partial match on terms",
        pod(
            {"abc": "", "xyz": ""},
            aff=affinity(anti=[term(sel_exists("abc"), "zone"), term(sel_exists("def"), "zone")]),
        ),
        [
            pod(
                {"def": "", "xyz": ""},
                node="node1",
                aff=affinity(anti=[term(sel_exists("abc"), "zone"), term(sel_exists("def"), "zone")]),
            )
        ],
        ANTI,
    ),
    (
        "symmetry b2: partial match on terms",
        pod(
            {"def": "", "xyz": ""},
            aff=affinity(anti=[term(sel_exists("abc"), "zone"), term(sel_exists("def"), "zone")]),
        ),
        [
            pod(
                {"abc": "", "xyz": ""},
                node="node1",
                aff=affinity(anti=[term(sel_exists("abc"), "zone"), term(sel_exists("def"), "zone")]),
            )
        ],
        ANTI,
    ),
    (
        "affinity with NamespaceSelector",
        pod(
            POD_LABEL2,
            aff=affinity(
                [term(sel_in("service", "securityscan", "value2"), "region", ns_selector=sel_in("team", "team1"))]
            ),
        ),
        [pod(POD_LABEL, ns="subteam1.team1", node="node1")],
        None,
    ),
    (
        "affinity with non-matching NamespaceSelector",
        pod(
            POD_LABEL2,
            aff=affinity(
                [term(sel_in("service", "securityscan", "value2"), "region", ns_selector=sel_in("team", "team1"))]
            ),
        ),
        [pod(POD_LABEL, ns="subteam1.team2", node="node1")],
        AFF,
    ),
    (
        "anti-affinity with matching NamespaceSelector",
        pod(
            POD_LABEL2,
            ns="subteam1.team1",
            aff=affinity(
                anti=[term(sel_in("service", "securityscan", "value2"), "zone", ns_selector=sel_in("team", "team1"))]
            ),
        ),
        [pod(POD_LABEL, ns="subteam2.team1", node="node1")],
        ANTI,
    ),
    (
        "anti-affinity with matching all NamespaceSelector",
        pod(
            POD_LABEL2,
            ns="subteam1.team1",
            aff=affinity(anti=[term(sel_in("service", "securityscan", "value2"), "zone", ns_selector={})]),
        ),
        [pod(POD_LABEL, ns="subteam2.team1", node="node1")],
        ANTI,
    ),
    (
        "anti-affinity with non-matching NamespaceSelector",
        pod(
            POD_LABEL2,
            ns="subteam1.team1",
            aff=affinity(
                anti=[term(sel_in("service", "securityscan", "value2"), "zone", ns_selector=sel_in("team", "team1"))]
            ),
        ),
        [pod(POD_LABEL, ns="subteam1.team2", node="node1")],
        None,
    ),
]


@pytest.mark.parametrize("name,incoming,existing,want", SINGLE_NODE_CASES, ids=[c[0] for c in SINGLE_NODE_CASES])
def test_required_affinity_single_node(name, incoming, existing, want):
    assert filter_nodes([NODE1], existing, incoming, NAMESPACES) == [want]


# ================================================== TestRequiredAffinityMultipleNodes

CHINA = {"region": "China"}
CHINA_AZ1 = {"region": "China", "az": "az1"}
INDIA = {"region": "India"}


def nodes_abc(*label_sets: Mapping[str, str], names: str = "ABC") -> list[NodeInfo]:
    return [node(f"node{names[i]}", **labels) for i, labels in enumerate(label_sets)]


MULTI_NODE_CASES: list[tuple[str, PodInfo, list[PodInfo], list[NodeInfo], list[str | None]]] = [
    (
        "nodes sharing the domain of a matching pod all pass",
        pod(aff=affinity([term(sel_in("foo", "bar"), "region")])),
        [pod({"foo": "bar"}, node="node1")],
        [node("node1", **CHINA), node("node2", **CHINA_AZ1), node("node3", **INDIA)],
        [None, None, AFF],
    ),
    (
        "first pod of a collection with affinity to itself may go anywhere",
        pod(
            {"foo": "bar", "service": "securityscan"},
            aff=affinity([term(sel_in("foo", "bar"), "zone"), term(sel_in("service", "securityscan"), "zone")]),
        ),
        [pod({"foo": "bar"}, node="nodeA")],
        [node("nodeA", zone="az1", hostname="h1"), node("nodeB", zone="az2", hostname="h2")],
        [None, None],
    ),
    (
        "first pod of a collection only on nodes with the topology keys",
        pod(
            {"foo": "bar", "service": "securityscan"},
            aff=affinity([term(sel_in("foo", "bar"), "zone"), term(sel_in("service", "securityscan"), "zone")]),
        ),
        [pod({"foo": "bar"}, node="nodeA")],
        [node("nodeA", zoneLabel="az1", hostname="h1"), node("nodeB", zoneLabel="az2", hostname="h2")],
        [AFF, AFF],
    ),
    (
        "anti-affinity rejects every node of the domain",
        pod(aff=affinity(anti=[term(sel_in("foo", "abc"), "region")])),
        [pod({"foo": "abc"}, node="nodeA")],
        [node("nodeA", region="r1", hostname="nodeA"), node("nodeB", region="r1", hostname="nodeB")],
        [ANTI, ANTI],
    ),
    (
        "anti-affinity matches when any term matches",
        pod(aff=affinity(anti=[term(sel_in("foo", "abc"), "region"), term(sel_in("service", "securityscan"), "zone")])),
        [pod({"foo": "abc", "service": "securityscan"}, node="nodeA")],
        [
            node("nodeA", region="r1", zone="z1", hostname="nodeA"),
            node("nodeB", region="r1", zone="z2", hostname="nodeB"),
        ],
        [ANTI, ANTI],
    ),
    (
        "anti-affinity: other domain is fine",
        pod(aff=affinity(anti=[term(sel_in("foo", "abc"), "region")])),
        [pod({"foo": "abc"}, node="nodeA")],
        nodes_abc(CHINA, CHINA_AZ1, INDIA),
        [ANTI, ANTI, None],
    ),
    (
        "anti-affinity: existing pod in another namespace does not match",
        pod({"foo": "123"}, ns="NS1", aff=affinity(anti=[term(sel_in("foo", "bar"), "region")])),
        [
            pod({"foo": "bar"}, ns="NS1", node="nodeA"),
            pod(ns="NS2", node="nodeC", aff=affinity(anti=[term(sel_in("foo", "123"), "region")])),
        ],
        nodes_abc(CHINA, CHINA_AZ1, INDIA),
        [ANTI, ANTI, None],
    ),
    (
        "existing pod's term with a topology key no node has",
        pod({"foo": ""}),
        [pod(node="nodeA", aff=affinity(anti=[term(sel_exists("foo"), "invalid-node-label")]))],
        [
            node("nodeA", region="r1", zone="z1", hostname="nodeA"),
            node("nodeB", region="r1", zone="z1", hostname="nodeB"),
        ],
        [None, None],
    ),
    (
        "incoming pod's anti-affinity with a topology key no node has",
        pod(aff=affinity(anti=[term(sel_exists("foo"), "invalid-node-label")])),
        [pod({"foo": ""}, node="nodeA")],
        [
            node("nodeA", region="r1", zone="z1", hostname="nodeA"),
            node("nodeB", region="r1", zone="z1", hostname="nodeB"),
        ],
        [None, None],
    ),
    (
        "existing pods' terms violated on all nodes",
        pod({"foo": "", "bar": ""}),
        [
            pod(node="nodeA", aff=affinity(anti=[term(sel_exists("foo"), "zone")])),
            pod(node="nodeA", aff=affinity(anti=[term(sel_exists("bar"), "region")])),
        ],
        [
            node("nodeA", region="r1", zone="z1", hostname="nodeA"),
            node("nodeB", region="r1", zone="z2", hostname="nodeB"),
        ],
        [EXIST, EXIST],
    ),
    (
        "incoming pod violates one anti-affinity term on each node",
        pod(aff=affinity(anti=[term(sel_exists("foo"), "zone"), term(sel_exists("bar"), "region")])),
        [pod({"foo": ""}, node="nodeA"), pod({"bar": ""}, node="nodeB")],
        [
            node("nodeA", region="r1", zone="z1", hostname="nodeA"),
            node("nodeB", region="r1", zone="z2", hostname="nodeB"),
        ],
        [ANTI, ANTI],
    ),
    (
        "existing pod: term counts only if selector and topology key both match (one invalid key)",
        pod({"foo": "", "bar": ""}),
        [
            pod(
                node="nodeA",
                aff=affinity(anti=[term(sel_exists("foo"), "invalid-node-label"), term(sel_exists("bar"), "zone")]),
            )
        ],
        [
            node("nodeA", region="r1", zone="z1", hostname="nodeA"),
            node("nodeB", region="r1", zone="z2", hostname="nodeB"),
        ],
        [EXIST, None],
    ),
    (
        "incoming pod: term counts only if selector and topology key both match (one invalid key)",
        pod(aff=affinity(anti=[term(sel_exists("foo"), "invalid-node-label"), term(sel_exists("bar"), "zone")])),
        [pod({"foo": "", "bar": ""}, node="nodeA")],
        [
            node("nodeA", region="r1", zone="z1", hostname="nodeA"),
            node("nodeB", region="r1", zone="z2", hostname="nodeB"),
        ],
        [ANTI, None],
    ),
    (
        "existing pod: all terms with valid topology keys",
        pod({"foo": "", "bar": ""}),
        [pod(node="nodeA", aff=affinity(anti=[term(sel_exists("foo"), "region"), term(sel_exists("bar"), "zone")]))],
        [
            node("nodeA", region="r1", zone="z1", hostname="nodeA"),
            node("nodeB", region="r1", zone="z2", hostname="nodeB"),
        ],
        [EXIST, EXIST],
    ),
    (
        "incoming pod: all terms with valid topology keys",
        pod(aff=affinity(anti=[term(sel_exists("foo"), "region"), term(sel_exists("bar"), "zone")])),
        [pod({"foo": "", "bar": ""}, node="nodeA")],
        [
            node("nodeA", region="r1", zone="z1", hostname="nodeA"),
            node("nodeB", region="r1", zone="z2", hostname="nodeB"),
        ],
        [ANTI, ANTI],
    ),
    (
        "existing pods on nodeA and nodeB each have a matching term: only nodeC",
        pod({"foo": "", "bar": ""}),
        [
            pod(node="nodeA", aff=affinity(anti=[term(sel_exists("foo"), "zone"), term(sel_exists("labelA"), "zone")])),
            pod(node="nodeB", aff=affinity(anti=[term(sel_exists("bar"), "zone"), term(sel_exists("labelB"), "zone")])),
        ],
        [
            node("nodeA", region="r1", zone="z1", hostname="nodeA"),
            node("nodeB", region="r1", zone="z2", hostname="nodeB"),
            node("nodeC", region="r1", zone="z3", hostname="nodeC"),
        ],
        [EXIST, EXIST, None],
    ),
    (
        "affinity: all terms match one pod, then all topology keys",
        pod(aff=affinity([term(sel_exists("foo"), "region"), term(sel_exists("bar"), "zone")])),
        [pod({"foo": "", "bar": ""}, node="nodeA")],
        [
            node("nodeA", region="r1", zone="z1", hostname="nodeA"),
            node("nodeB", region="r1", zone="z1", hostname="nodeB"),
        ],
        [None, None],
    ),
    (
        "affinity: the terms must be satisfied by the same pod",
        pod(aff=affinity([term(sel_exists("foo"), "region"), term(sel_exists("bar"), "zone")])),
        [pod({"foo": ""}, node="nodeA"), pod({"bar": ""}, node="nodeB")],
        [
            node("nodeA", region="r1", zone="z1", hostname="nodeA"),
            node("nodeB", region="r1", zone="z2", hostname="nodeB"),
        ],
        [AFF, AFF],
    ),
    (
        "host-scoped affinity",
        pod(aff=affinity([term(sel_exists("foo"), HOST)])),
        [pod({"foo": ""}, node="nodeA")],
        [node("nodeA", **{HOST: "nodeA"}), node("nodeB", **{HOST: "nodeB"})],
        [None, AFF],
    ),
    (
        "host-scoped anti-affinity",
        pod(aff=affinity(anti=[term(sel_exists("foo"), HOST)])),
        [pod({"foo": ""}, node="nodeA")],
        [node("nodeA", **{HOST: "nodeA"}), node("nodeB", **{HOST: "nodeB"})],
        [ANTI, None],
    ),
]


@pytest.mark.parametrize("name,incoming,existing,nodes,want", MULTI_NODE_CASES, ids=[c[0] for c in MULTI_NODE_CASES])
def test_required_affinity_multiple_nodes(name, incoming, existing, nodes, want):
    assert filter_nodes(nodes, existing, incoming, {"NS1": {}}) == want


def test_multiple_affinity_terms_require_single_matching_pod():
    terms = [term(sel_in("foo", "bar"), HOST), term(sel_in("baz", "qux"), HOST)]
    incoming = pod(aff=affinity(terms))
    pod_a = pod({"foo": "bar"}, node="node-1")
    pod_b = pod({"baz": "qux"}, node="node-1")
    pod_c = pod({"foo": "bar", "baz": "qux"}, node="node-3")
    nodes = [node(f"node-{i}", **{HOST: f"node-{i}"}) for i in (1, 2, 3)]
    assert filter_nodes(nodes, [pod_a, pod_b, pod_c], incoming, {"default": {}}) == [AFF, AFF, None]
    # Without podC nothing matches both terms: a pod carrying both labels matches itself.
    self_matching = pod({"foo": "bar", "baz": "qux"}, aff=affinity(terms))
    assert filter_nodes(nodes, [pod_a, pod_b], self_matching, {"default": {}}) == [None, None, None]
    assert filter_nodes(nodes, [pod_a, pod_b], incoming, {"default": {}}) == [AFF, AFF, AFF]


def test_fast_track_inter_pod_affinity_cases():
    zone = "topology.kubernetes.io/zone"
    nodes = [node("node-1", **{HOST: "node-1", zone: "zone-a"}), node("node-2", **{HOST: "node-2", zone: "zone-b"})]
    existing = [
        pod({"app": "foo"}, node="node-1"),
        pod({"app": "blocked", "team": "blue"}, ns="blue-ns", node="node-1"),
        pod({"app": "bar"}, node="node-2"),
    ]
    ns_labels = {"default": {}, "other": {}, "blue-ns": {"team": "blue"}}
    zone_anti = pod({"app": "foo"}, aff=affinity(anti=[term(sel_in("app", "foo"), zone)]))
    host_anti = pod({"app": "bar"}, aff=affinity(anti=[term(sel_in("app", "bar"), HOST)]))
    ns_anti = pod(
        {"app": "baz"},
        ns="other",
        aff=affinity(anti=[term(sel_in("app", "blocked"), zone, ns_selector=exprs(("team", "DoesNotExist", ())))]),
    )
    assert filter_nodes(nodes, existing, zone_anti, ns_labels) == [ANTI, None]
    assert filter_nodes(nodes, existing, host_anti, ns_labels) == [None, ANTI]
    assert filter_nodes(nodes, existing, ns_anti, ns_labels) == [None, None]


# ------------------------------------------------ beyond upstream's filter tables


def test_match_label_keys_merge_into_the_selector():
    nodes = [node("n1", zone="z1"), node("n2", zone="z2"), node("n3", zone="z3")]
    existing = [pod({"app": "web", "version": "v2"}, node="n1"), pod({"app": "web", "version": "v1"}, node="n2")]
    incoming = pod(
        {"app": "web", "version": "v1"},
        aff=affinity([term(sel_in("app", "web"), "zone", match_label_keys=["version"])]),
    )
    assert filter_nodes(nodes, existing, incoming) == [AFF, None, AFF]
    # A key the pod lacks adds nothing: any app=web pod satisfies the term.
    no_version = pod({"app": "web"}, aff=affinity([term(sel_in("app", "web"), "zone", match_label_keys=["version"])]))
    assert filter_nodes(nodes, existing, no_version) == [None, None, AFF]


def test_mismatch_label_keys_and_symmetry_use_each_owner_labels():
    nodes = [node("n1", zone="z1"), node("n2", zone="z2"), node("n3", zone="z3")]
    # Incoming: stay away from pods of *other* tenants.
    incoming = pod(
        {"app": "x", "tenant": "a"},
        aff=affinity(anti=[term(sel_exists("tenant"), "zone", mismatch_label_keys=["tenant"])]),
    )
    existing = [pod({"tenant": "b"}, node="n1"), pod({"tenant": "a"}, node="n2")]
    assert filter_nodes(nodes, existing, incoming) == [ANTI, None, None]
    # Symmetry: the existing pod's mismatchLabelKeys are merged with ITS labels (tenant b).
    existing = [
        pod(
            {"tenant": "b"},
            node="n1",
            aff=affinity(anti=[term(sel_exists("tenant"), "zone", mismatch_label_keys=["tenant"])]),
        )
    ]
    assert filter_nodes(nodes, existing, pod({"tenant": "a"})) == [EXIST, None, None]
    assert filter_nodes(nodes, existing, pod({"tenant": "b"})) == [None, None, None]


def test_unknown_namespace_labels_match_no_non_empty_namespace_selector():
    nodes = [node("n1", zone="z1"), node("n2", zone="z2")]
    existing = [pod({"app": "db"}, ns="data", node="n1")]
    by_selector = pod(
        {"app": "web"}, aff=affinity([term(sel_in("app", "db"), "zone", ns_selector=sel_in("team", "data"))])
    )
    everywhere = pod({"app": "web"}, aff=affinity([term(sel_in("app", "db"), "zone", ns_selector={})]))
    # Labels known: the selector finds namespace "data".
    assert filter_nodes(nodes, existing, by_selector, {"data": {"team": "data"}}) == [None, AFF]
    # Labels unknown: it matches no namespace (and the pod does not match itself either).
    assert filter_nodes(nodes, existing, by_selector, {}) == [AFF, AFF]
    # An empty namespaceSelector needs no labels.
    assert filter_nodes(nodes, existing, everywhere, {}) == [None, AFF]
    # Symmetry: an existing pod's namespaceSelector is matched against the incoming pod's namespace labels.
    guard = [
        pod(
            {"app": "db"},
            ns="data",
            node="n1",
            aff=affinity(anti=[term(sel_exists("app"), "zone", ns_selector=sel_in("team", "web"))]),
        )
    ]
    web = pod({"app": "web"}, ns="web")
    assert filter_nodes(nodes, guard, web, {"web": {"team": "web"}}) == [EXIST, None]
    assert filter_nodes(nodes, guard, web, {}) == [None, None]


def test_nil_label_selector_matches_nothing():
    nodes = [node("n1", zone="z1")]
    existing = [pod({"app": "a"}, node="n1")]
    assert filter_nodes(nodes, existing, pod(aff=affinity([term(None, "zone")]))) == [AFF]
    assert filter_nodes(nodes, existing, pod(aff=affinity(anti=[term(None, "zone")]))) == [None]
    # An empty selector matches every pod (of the namespaces).
    assert filter_nodes(nodes, existing, pod(aff=affinity(anti=[term({}, "zone")]))) == [ANTI]


def test_existing_pods_assumed_in_the_cache_and_on_unknown_nodes():
    nodes = [node("n1", zone="z1"), node("n2", zone="z2")]
    guard = pod({"app": "db"}, aff=affinity(anti=[term(sel_exists("app"), "zone")]), name="guard")  # pending
    ghost = pod({"app": "db"}, node="gone", aff=affinity(anti=[term(sel_exists("app"), "zone")]))
    cache = make_cache(nodes, [guard, ghost])
    cache.assume(guard.uid, "n2")  # binding in flight: no nodeName yet, the cache knows the node
    plugin = InterPodAffinity(InterPodAffinityArgs(), Handle(cache))
    assert statuses(plugin, cache.snapshot(), pod({"app": "web"})) == {"n1": None, "n2": EXIST}


def test_snapshot_index_follows_pods_assumed_in_the_cycle():
    nodes = [node(f"n{i}", **{HOST: f"n{i}"}) for i in range(3)]
    plugin, snap = setup(nodes)
    spread = affinity(anti=[term(sel_in("app", "a"), HOST)])
    first = pod({"app": "a"}, aff=spread)
    assert statuses(plugin, snap, first) == {"n0": None, "n1": None, "n2": None}
    vec = snap.request_vector(first)[0]
    snap.assume(1, vec, (first.nonzero_cpu, first.nonzero_memory), first)
    # Both directions: the incoming pod's own term and the assumed pod's term (symmetry).
    assert statuses(plugin, snap, pod({"app": "a"}, aff=spread)) == {"n0": None, "n1": ANTI, "n2": None}
    assert statuses(plugin, snap, pod({"app": "a"})) == {"n0": None, "n1": EXIST, "n2": None}
    # A fresh snapshot forgets the cycle's placements.
    assert statuses(plugin, setup(nodes)[1], pod({"app": "a"})) == {"n0": None, "n1": None, "n2": None}


# ============================================================= TestPreferredAffinity

RG_CHINA, RG_INDIA = {"region": "China"}, {"region": "India"}
AZ1, AZ2 = {"az": "az1"}, {"az": "az2"}
RG_CHINA_AZ1 = {"region": "China", "az": "az1"}
S1, S2 = {"security": "S1"}, {"security": "S2"}

STAY_S1_REGION = affinity(pref=[(5, term(sel_in("security", "S1"), "region"))])
STAY_S2_REGION = affinity(pref=[(6, term(sel_in("security", "S2"), "region"))])
AFFINITY3 = affinity(
    pref=[
        (8, term(exprs(("security", "NotIn", ["S1"]), ("security", "In", ["S2"])), "region")),
        (2, term(exprs(("security", "Exists", ()), ("wrongkey", "DoesNotExist", ())), "region")),
    ]
)
HARD_AFFINITY = affinity(
    req=[
        term(sel_in("security", "S1", "value2"), "region"),
        term(exprs(("security", "Exists", ()), ("wrongkey", "DoesNotExist", ())), "region"),
    ]
)
AWAY_S1_AZ = affinity(anti_pref=[(5, term(sel_in("security", "S1"), "az"))])
AWAY_S2_AZ = affinity(anti_pref=[(5, term(sel_in("security", "S2"), "az"))])
STAY_S1_REGION_AWAY_S2_AZ = affinity(
    pref=[(8, term(sel_in("security", "S1"), "region"))], anti_pref=[(5, term(sel_in("security", "S2"), "az"))]
)
NS_SEL_T1 = sel_in("team", "team1")
AFFINITY_NS_SELECTOR = affinity(
    pref=[(5, term(sel_in("security", "S1"), "region", namespaces=["subteam2.team2"], ns_selector=NS_SEL_T1))]
)
ANTI_AFFINITY_NS_SELECTOR = affinity(
    anti_pref=[(5, term(sel_in("security", "S1"), "region", namespaces=["subteam2.team2"], ns_selector=NS_SEL_T1))]
)
AFFINITY_NEG_NS_SELECTOR = affinity(
    pref=[(5, term(sel_in("security", "S1"), "region", ns_selector=sel_not_in("team", "team1")))]
)
ANTI_AFFINITY_NEG_NS_SELECTOR = affinity(
    anti_pref=[(5, term(sel_in("security", "S1"), "region", ns_selector=sel_not_in("team", "team1")))]
)


def nodes_n(*label_sets: Mapping[str, str]) -> list[NodeInfo]:
    return [node(f"node{i + 1}", **labels) for i, labels in enumerate(label_sets)]


def on(n: int, labels=None, aff=None, ns: str = "default") -> PodInfo:
    return pod(labels, ns=ns, aff=aff, node=f"node{n}")


M = 100
PREFERRED_CASES: list[tuple[str, PodInfo, list[PodInfo], list[NodeInfo], list[int], bool]] = [
    ("affinity is nil", pod(S1), [], nodes_n(RG_CHINA, RG_INDIA, AZ1), [0, 0, 0], False),
    (
        "affinity: matching topology key and pods get the high score",
        pod(S1, aff=STAY_S1_REGION),
        [on(1, S1), on(2, S2), on(3, S1)],
        nodes_n(RG_CHINA, RG_INDIA, AZ1),
        [M, 0, 0],
        False,
    ),
    (
        "nodes of the same domain get the same score",
        pod(aff=STAY_S1_REGION),
        [on(1, S1)],
        nodes_n(RG_CHINA, RG_CHINA_AZ1, RG_INDIA),
        [M, M, 0],
        False,
    ),
    (
        "the region with more matches scores higher",
        pod(S1, aff=STAY_S2_REGION),
        [on(1, S2), on(1, S2), on(2, S2), on(3, S2), on(4, S2), on(5, S2)],
        nodes_n(RG_CHINA, RG_INDIA, RG_CHINA, RG_CHINA, RG_INDIA),
        [M, 0, M, M, 0],
        False,
    ),
    (
        "different operators, some failures",
        pod(S1, aff=AFFINITY3),
        [on(1, S1), on(2, S2), on(3, S1)],
        nodes_n(RG_CHINA, RG_INDIA, AZ1),
        [20, M, 0],
        False,
    ),
    (
        "affinity symmetry: preferred terms of existing pods",
        pod(S2),
        [on(1, S1, STAY_S1_REGION), on(2, S2, STAY_S2_REGION)],
        nodes_n(RG_CHINA, RG_INDIA, AZ1),
        [0, M, 0],
        False,
    ),
    (
        "affinity symmetry with namespace selector",
        pod(S1, ns="subteam1.team1"),
        [on(1, S1, AFFINITY_NS_SELECTOR), on(2, S2, STAY_S2_REGION)],
        nodes_n(RG_CHINA, RG_INDIA, AZ1),
        [M, 0, 0],
        False,
    ),
    (
        "anti-affinity symmetry with namespace selector",
        pod(S1, ns="subteam1.team1"),
        [on(1, S1, ANTI_AFFINITY_NS_SELECTOR), on(2, S2, STAY_S2_REGION)],
        nodes_n(RG_CHINA, RG_INDIA, AZ1),
        [0, M, M],
        False,
    ),
    (
        "affinity symmetry: required terms of existing pods",
        pod(S1),
        [on(1, S1, HARD_AFFINITY), on(2, S2, HARD_AFFINITY)],
        nodes_n(RG_CHINA, RG_INDIA, AZ1),
        [M, M, 0],
        False,
    ),
    (
        "anti-affinity: node with no matching pods scores high",
        pod(S1, aff=AWAY_S1_AZ),
        [on(1, S1), on(2, S2)],
        nodes_n(AZ1, RG_CHINA),
        [0, M],
        False,
    ),
    (
        "anti-affinity: node without the topology key scores high",
        pod(S1, aff=AWAY_S1_AZ),
        [on(1, S1), on(2, S1)],
        nodes_n(AZ1, RG_CHINA),
        [0, M],
        False,
    ),
    (
        "anti-affinity: more matching pods score lower",
        pod(S1, aff=AWAY_S1_AZ),
        [on(1, S1), on(1, S1), on(2, S2)],
        nodes_n(AZ1, RG_INDIA),
        [0, M],
        False,
    ),
    (
        "anti-affinity symmetry",
        pod(S2),
        [on(1, S1, AWAY_S2_AZ), on(2, S2, AWAY_S1_AZ)],
        nodes_n(AZ1, AZ2),
        [0, M],
        False,
    ),
    (
        "affinity and anti-affinity",
        pod(S1, aff=STAY_S1_REGION_AWAY_S2_AZ),
        [on(1, S1), on(2, S1)],
        nodes_n(RG_CHINA, AZ1),
        [M, 0],
        False,
    ),
    (
        "affinity and anti-affinity, same labels as the existing pods",
        pod(S1, aff=STAY_S1_REGION_AWAY_S2_AZ),
        [on(1, S1), on(1, S1), on(2, S1), on(3, S1), on(3, S1), on(4, S1), on(5, S1)],
        nodes_n(RG_CHINA_AZ1, RG_INDIA, RG_CHINA, RG_CHINA, RG_INDIA),
        [M, 0, M, M, 0],
        False,
    ),
    (
        "affinity, anti-affinity and symmetry",
        pod(S1, aff=STAY_S1_REGION_AWAY_S2_AZ),
        [on(1, S1), on(2, S2), on(3, None, STAY_S1_REGION_AWAY_S2_AZ), on(4, None, AWAY_S1_AZ)],
        nodes_n(RG_CHINA, AZ1, RG_INDIA, AZ2),
        [M, 0, M, 0],
        False,
    ),
    (
        "partial nodes of a topology have pods with affinity (issue 82796)",
        pod(S1),
        [on(1, S1), on(2, None, STAY_S1_REGION_AWAY_S2_AZ)],
        nodes_n(RG_CHINA, RG_CHINA),
        [0, 0],
        False,
    ),
    (
        "affinity with pods matching NamespaceSelector",
        pod(S1, ns="subteam1.team1", aff=AFFINITY_NS_SELECTOR),
        [
            on(1, S1, ns="subteam1.team1"),
            on(1, S1, ns="subteam1.team1"),
            on(1, S1, ns="subteam1.team2"),
            on(2, S1, ns="subteam2.team1"),
        ],
        nodes_n(RG_CHINA, RG_INDIA),
        [M, 0],
        False,
    ),
    (
        "affinity with pods matching both NamespaceSelector and Namespaces",
        pod(S1, ns="subteam1.team1", aff=AFFINITY_NS_SELECTOR),
        [
            on(1, S1, ns="subteam1.team1"),
            on(1, S1, ns="subteam1.team1"),
            on(1, S1, ns="subteam2.team2"),
            on(2, S1, ns="subteam2.team1"),
        ],
        nodes_n(RG_CHINA, RG_INDIA),
        [M, 0],
        False,
    ),
    (
        "anti-affinity with pods matching NamespaceSelector",
        pod(S1, ns="subteam1.team1", aff=ANTI_AFFINITY_NS_SELECTOR),
        [
            on(1, S1, ns="subteam1.team1"),
            on(1, S1, ns="subteam1.team1"),
            on(1, S1, ns="subteam1.team2"),
            on(2, S1, ns="subteam2.team1"),
        ],
        nodes_n(RG_CHINA, RG_INDIA),
        [0, M],
        False,
    ),
    (
        "anti-affinity with pods matching both NamespaceSelector and Namespaces",
        pod(S1, ns="subteam1.team1", aff=ANTI_AFFINITY_NS_SELECTOR),
        [
            on(1, S1, ns="subteam1.team1"),
            on(1, S1, ns="subteam1.team1"),
            on(1, S1, ns="subteam2.team2"),
            on(2, S1, ns="subteam2.team1"),
        ],
        nodes_n(RG_CHINA, RG_INDIA),
        [0, M],
        False,
    ),
    (
        "affinity with a negative NamespaceSelector",
        pod(S1, ns="subteam1.team1", aff=AFFINITY_NEG_NS_SELECTOR),
        [on(1, S1, ns="subteam1.team1"), on(1, S1, ns="subteam1.team1"), on(2, S1, ns="subteam1.team2")],
        nodes_n(RG_CHINA, RG_INDIA),
        [0, M],
        False,
    ),
    (
        "anti-affinity with a negative NamespaceSelector",
        pod(S1, ns="subteam1.team1", aff=ANTI_AFFINITY_NEG_NS_SELECTOR),
        [on(1, S1, ns="subteam1.team1"), on(1, S1, ns="subteam1.team1"), on(2, S1, ns="subteam1.team2")],
        nodes_n(RG_CHINA, RG_INDIA),
        [M, 0],
        False,
    ),
    (
        "ignore preferred terms of existing pods",
        pod(S2),
        [on(1, S1, STAY_S1_REGION_AWAY_S2_AZ), on(2, S2, STAY_S2_REGION)],
        nodes_n(RG_CHINA, RG_INDIA),
        [0, 0],
        True,
    ),
    (
        "do not ignore preferred terms of existing pods",
        pod(S2),
        [on(1, S1, STAY_S1_REGION_AWAY_S2_AZ), on(2, S2, STAY_S2_REGION)],
        nodes_n(RG_CHINA, RG_INDIA),
        [0, M],
        False,
    ),
    ("no nodes to score", pod(S2), [], [], [], False),
]


@pytest.mark.parametrize(
    "name,incoming,existing,nodes,want,ignore", PREFERRED_CASES, ids=[c[0] for c in PREFERRED_CASES]
)
def test_preferred_affinity(name, incoming, existing, nodes, want, ignore):
    args = {"hardPodAffinityWeight": 1, "ignorePreferredTermsOfExistingPods": ignore}
    assert scores(nodes, existing, incoming, NAMESPACES, args) == want


def test_ignore_preferred_terms_still_counts_existing_terms_when_the_pod_has_its_own():
    # Upstream skips only when the incoming pod has no preferred terms; otherwise
    # existing pods' terms count as well.
    nodes = nodes_n(RG_CHINA, RG_INDIA, AZ1)
    existing = [on(1, S1), on(2, S2, STAY_S2_REGION)]
    incoming = pod(S2, aff=affinity(pref=[(1, term(sel_in("security", "S1"), "region"))]))
    assert scores(nodes, existing, incoming, args={"ignorePreferredTermsOfExistingPods": True}) == [16, M, 0]


# ============================================ TestPreferredAffinityWithHardPodAffinitySymmetricWeight

# Upstream lists namespaces ["", "subteam2.team2"]; "" is the test pods' namespace, "default" here.
HARD_POD_AFFINITY = affinity(
    req=[term(sel_in("service", "S1"), "region", namespaces=["default", "subteam2.team2"], ns_selector=NS_SEL_T1)]
)


@pytest.mark.parametrize(
    "name,ns,weight,want",
    [
        ("with default weight", "default", None, [M, M, 0]),
        ("with zero weight", "default", 0, [0, 0, 0]),
        ("with no matching namespace", "subteam1.team2", 1, [0, 0, 0]),
        ("with matching NamespaceSelector", "subteam1.team1", 1, [M, M, 0]),
        ("with matching Namespaces", "subteam2.team2", 1, [M, M, 0]),
    ],
)
def test_preferred_affinity_with_hard_pod_affinity_symmetric_weight(name, ns, weight, want):
    nodes = nodes_n(RG_CHINA, RG_INDIA, AZ1)
    existing = [on(1, None, HARD_POD_AFFINITY), on(2, None, HARD_POD_AFFINITY)]
    args = {} if weight is None else {"hardPodAffinityWeight": weight}
    assert scores(nodes, existing, pod({"service": "S1"}, ns=ns), NAMESPACES, args) == want


def test_hard_pod_affinity_weight_scales_against_preferred_terms():
    # Region China: one required term (x hardPodAffinityWeight); India: a preferred term of weight 5.
    nodes = nodes_n(RG_CHINA, RG_INDIA, AZ1)
    existing = [
        on(1, None, affinity([term(sel_in("app", "x"), "region")])),
        on(2, None, affinity(pref=[(5, term(sel_in("app", "x"), "region"))])),
    ]
    incoming = pod({"app": "x"})
    assert scores(nodes, existing, incoming, args={"hardPodAffinityWeight": 10}) == [M, 50, 0]
    assert scores(nodes, existing, incoming, args={"hardPodAffinityWeight": 1}) == [20, M, 0]


def test_normalize_truncates_like_upstream():
    plugin, _ = setup([])
    assert plugin.normalize(np.array([-5, 0, 1, 10])).tolist() == [0, 33, 40, 100]
    assert plugin.normalize(np.array([7, 7])).tolist() == [0, 0]
    assert plugin.normalize(np.array([], dtype=np.int64)).tolist() == []


@pytest.mark.parametrize(
    "args,message",
    [
        ({"hardPodAffinityWeight": 101}, "hardPodAffinityWeight: invalid value 101: not in valid range [0, 100]"),
        ({"hardPodAffinityWeight": -1}, "hardPodAffinityWeight: invalid value -1: not in valid range [0, 100]"),
        ({"hardPodAffinityWeight": 1.5}, "hardPodAffinityWeight: Input should be a valid integer"),
        (
            {"ignorePreferredTermsOfExistingPods": "yes"},
            "ignorePreferredTermsOfExistingPods: Input should be a valid boolean",
        ),
        (
            {"hardPodAffinityWeigth": 2},
            "hardPodAffinityWeigth: unknown field (did you mean hardPodAffinityWeight?); "
            "allowed: hardPodAffinityWeight, ignorePreferredTermsOfExistingPods",
        ),
    ],
)
def test_invalid_args(args, message):
    with pytest.raises(ProfileError) as exc:
        framework(make_cache(), args)
    assert str(exc.value) == f"profile troupe-scheduler: pluginConfig[0].args.{message}"


# ====================================================== through the framework and the cycle


def framework(cache, args: Mapping[str, Any] | None = None) -> Framework:
    registry = in_tree_registry()
    if registry.get(InterPodAffinity.name) is None:
        registry.register(InterPodAffinity)
    profile: dict[str, Any] = {
        "plugins": {
            "filter": {"enabled": [{"name": "InterPodAffinity"}]},
            "score": {"enabled": [{"name": "InterPodAffinity", "weight": 2}]},
        }
    }
    if args is not None:
        profile["pluginConfig"] = [{"name": "InterPodAffinity", "args": dict(args)}]
    return Framework(Profile.model_validate(profile), registry, Handle(cache))


def test_diagnosis_message_and_unresolvable():
    nodes = [node("n1", zone="z1"), node("n2", zone="z2"), node("n3", zone="z2"), node("n4")]
    existing = [pod({"app": "db"}, node="n1"), pod({"app": "web"}, node="n2")]
    cache = make_cache(nodes, existing)
    fwk = framework(cache)
    incoming = pod(
        {"app": "web"}, aff=affinity([term(sel_in("app", "db"), "zone")], anti=[term(sel_in("app", "db"), "zone")])
    )
    result = schedule_pod(fwk, incoming, cache.snapshot())
    assert result.row is None
    assert result.diagnosis.message == (
        "0/4 nodes are available: 1 node(s) didn't match pod anti-affinity rules, 3 node(s) didn't match pod affinity rules."
    )
    assert not result.diagnosis.unresolvable  # anti-affinity can be resolved by preemption
    only_affinity = pod({"app": "web"}, aff=affinity([term(sel_in("app", "cache"), "zone")]))
    result = schedule_pod(fwk, only_affinity, cache.snapshot())
    assert result.diagnosis.message == "0/4 nodes are available: 4 node(s) didn't match pod affinity rules."
    assert result.diagnosis.unresolvable


def test_score_steers_the_choice_with_weight_two():
    nodes = [node("n1", zone="z1"), node("n2", zone="z2")]
    cache = make_cache(nodes, [pod({"app": "db"}, node="n2")])
    fwk = framework(cache)
    assert [ws.weight for ws in fwk.scores if ws.plugin.name == "InterPodAffinity"] == [2]
    snap = cache.snapshot()
    near = pod({"app": "web"}, aff=affinity(pref=[(10, term(sel_in("app", "db"), "zone"))]))
    far = pod({"app": "web"}, aff=affinity(anti_pref=[(10, term(sel_in("app", "db"), "zone"))]))
    assert snap.names[schedule_pod(fwk, near, snap).row] == "n2"
    assert snap.names[schedule_pod(fwk, far, snap).row] == "n1"


def gang(n: int, group: str, aff: Mapping[str, Any], labels: Mapping[str, str] | None = None) -> list[PodInfo]:
    return [
        make_pod(f"{group}-{i}", "100m", group=group, labels=dict(labels or {}), affinity=dict(aff)) for i in range(n)
    ]


ONE_PER_NODE = affinity(anti=[term({"matchLabels": {"app": "trainer"}}, HOST)])


def test_gang_with_anti_affinity_to_itself_lands_one_per_node_in_one_cycle():
    nodes = [node(f"n{i}", **{HOST: f"n{i}"}) for i in range(4)]
    cache = make_cache(nodes)
    fwk = framework(cache)
    pods = gang(4, "g", ONE_PER_NODE, {"app": "trainer"})
    decision = schedule_group(fwk, cache.snapshot(), ("default", "g"), make_group("g", 4), pods)
    assert decision.outcome == REASON_SCHEDULED
    assert sorted(p.node for p in decision.assignments) == ["n0", "n1", "n2", "n3"]


def test_gang_larger_than_the_nodes_is_rejected_whole():
    nodes = [node(f"n{i}", **{HOST: f"n{i}"}) for i in range(4)]
    cache = make_cache(nodes)
    fwk = framework(cache)
    pods = gang(5, "g", ONE_PER_NODE, {"app": "trainer"})
    decision = schedule_group(fwk, cache.snapshot(), ("default", "g"), make_group("g", 5), pods)
    assert decision.outcome == REASON_UNSCHEDULABLE
    assert decision.assignments == []
    assert "0/4 nodes are available: 4 node(s) didn't match pod anti-affinity rules." in decision.message


def test_gangs_repel_only_their_own_members_with_match_label_keys():
    nodes = [node(f"n{i}", **{HOST: f"n{i}"}) for i in range(3)]
    cache = make_cache(nodes)
    fwk = framework(cache)
    aff = affinity(anti=[term(sel_exists(POD_GROUP_LABEL), HOST, match_label_keys=[POD_GROUP_LABEL])])
    snap = cache.snapshot()
    a = schedule_group(fwk, snap, ("default", "a"), make_group("a", 3), gang(3, "a", aff))
    b = schedule_group(fwk, snap, ("default", "b"), make_group("b", 3), gang(3, "b", aff))
    assert a.scheduled and b.scheduled
    assert sorted(p.node for p in a.assignments) == sorted(p.node for p in b.assignments) == ["n0", "n1", "n2"]


def test_gang_with_affinity_to_itself_stays_in_one_zone():
    # z1 has room for 2 small pods per node; the group of 4 must share one zone.
    nodes = [make_node(f"a{i}", "1", labels={"zone": "z1"}) for i in range(2)] + [
        make_node(f"b{i}", "4", labels={"zone": "z2"}) for i in range(2)
    ]
    cache = make_cache(nodes)
    fwk = framework(cache)
    together = affinity([term({"matchLabels": {"job": "j"}}, "zone")])
    pods = [make_pod(f"j{i}", "500m", group="j", labels={"job": "j"}, affinity=together) for i in range(6)]
    decision = schedule_group(fwk, cache.snapshot(), ("default", "j"), make_group("j", 6), pods)
    assert decision.scheduled
    zones = {cache.node(p.node).labels["zone"] for p in decision.assignments}
    assert len(zones) == 1 and len(decision.assignments) == 6


def test_identical_gang_shares_one_count_per_term():
    n = 300
    nodes = [node(f"n{i}", **{HOST: f"n{i}"}, zone=f"z{i % 3}") for i in range(n)]
    background = [pod({"app": "other"}, node=f"n{i}") for i in range(0, n, 7)]
    cache = make_cache(nodes, background)
    fwk = framework(cache)
    snap = cache.snapshot()
    keys: list[Any] = []
    original = snap.count_matching

    def spy(key, predicate, selector=None):
        if key not in snap._counts and key[0] == "InterPodAffinity":
            keys.append(key)
        return original(key, predicate, selector)

    snap.count_matching = spy  # type: ignore[method-assign]
    aff = affinity(
        anti=[term({"matchLabels": {"app": "trainer"}}, HOST)],
        anti_pref=[(3, term({"matchLabels": {"app": "trainer"}}, "zone"))],
    )
    pods = gang(n, "g", aff, {"app": "trainer"})
    decision = schedule_group(fwk, snap, ("default", "g"), make_group("g", n), pods)
    assert decision.scheduled and len({p.node for p in decision.assignments}) == n
    # One (selector, namespaces) pair, shared by the required and the preferred term: one pass.
    assert len(keys) == 1
    # The preferred zone anti-affinity spreads evenly over the three zones.
    per_zone = defaultdict(int)
    for p in decision.assignments:
        per_zone[cache.node(p.node).labels["zone"]] += 1
    assert sorted(per_zone.values()) == [100, 100, 100]


# ============================================ hypothesis: agreement with a literal port of upstream


def ref_merge(t: PodAffinityTerm, labels: Mapping[str, str]) -> LabelSelector | None:
    if t.selector is None or not (t.match_label_keys or t.mismatch_label_keys):
        return t.selector
    extra = tuple(Requirement(k, "In", (labels[k],)) for k in t.match_label_keys if k in labels) + tuple(
        Requirement(k, "NotIn", (labels[k],)) for k in t.mismatch_label_keys if k in labels
    )
    return LabelSelector(t.selector.match_labels, t.selector.match_expressions + extra)


def ref_incoming(t: PodAffinityTerm, owner: PodInfo, ns_labels: Mapping[str, Mapping[str, str]]):
    """(selector, namespaces, everything?) of the incoming pod's term after PreFilter's merge."""
    sel = ref_merge(t, owner.labels)
    if not t.namespaces and t.namespace_selector is None:
        return sel, {owner.namespace}, False
    names = set(t.namespaces)
    nss = t.namespace_selector
    if nss is not None and not nss.match_labels and not nss.match_expressions:
        return sel, names, True
    if nss is not None:
        names |= {ns for ns, labels in ns_labels.items() if nss.matches(labels)}
    return sel, names, False


def ref_matches_incoming(resolved, p: PodInfo) -> bool:
    sel, names, everything = resolved
    return (everything or p.namespace in names) and sel is not None and sel.matches(p.labels)


def ref_matches_existing(t: PodAffinityTerm, owner: PodInfo, incoming: PodInfo, ns_labels) -> bool:
    names = set(t.namespaces) if (t.namespaces or t.namespace_selector is not None) else {owner.namespace}
    nss = t.namespace_selector
    labels = ns_labels.get(incoming.namespace)
    ns_ok = incoming.namespace in names or (
        nss is not None
        and ((not nss.match_labels and not nss.match_expressions) or (labels is not None and nss.matches(labels)))
    )
    sel = ref_merge(t, owner.labels)
    return ns_ok and sel is not None and sel.matches(incoming.labels)


def ref_filter(
    incoming, nodes: Sequence[NodeInfo], placed: Sequence[tuple[str, PodInfo]], ns_labels
) -> dict[str, str | None]:
    by_name = {n.name: n for n in nodes}
    aff = [(ref_incoming(t, incoming, ns_labels), t.topology_key) for t in incoming.pod_affinity]
    anti = [(ref_incoming(t, incoming, ns_labels), t.topology_key) for t in incoming.pod_anti_affinity]
    existing_counts: dict[tuple[str, str], int] = defaultdict(int)
    aff_counts: dict[tuple[str, str], int] = {}
    anti_counts: dict[tuple[str, str], int] = defaultdict(int)
    for node_name, p in placed:
        labels = by_name[node_name].labels
        for t in p.pod_anti_affinity:
            if ref_matches_existing(t, p, incoming, ns_labels) and t.topology_key in labels:
                existing_counts[(t.topology_key, labels[t.topology_key])] += 1
        if aff and all(ref_matches_incoming(r, p) for r, _ in aff):
            for _, key in aff:
                if key in labels:
                    aff_counts[(key, labels[key])] = aff_counts.get((key, labels[key]), 0) + 1
        for r, key in anti:
            if ref_matches_incoming(r, p) and key in labels:
                anti_counts[(key, labels[key])] += 1
    out: dict[str, str | None] = {}
    for n in nodes:
        labels = n.labels
        reason = None
        if aff:
            pods_exist, missing = True, False
            for _, key in aff:
                if key not in labels:
                    missing = True
                    break
                if aff_counts.get((key, labels[key]), 0) <= 0:
                    pods_exist = False
            if missing or (
                not pods_exist and not (len(aff_counts) == 0 and all(ref_matches_incoming(r, incoming) for r, _ in aff))
            ):
                reason = AFF
        if reason is None and any(key in labels and anti_counts[(key, labels[key])] > 0 for _, key in anti):
            reason = ANTI
        if reason is None and any(existing_counts[(k, v)] > 0 for k, v in labels.items()):
            reason = EXIST
        out[n.name] = reason
    return out


def ref_score(incoming, nodes, placed, ns_labels, hard: int, ignore: bool) -> dict[str, int]:
    by_name = {n.name: n for n in nodes}
    if ignore and not (incoming.pod_affinity_preferred or incoming.pod_anti_affinity_preferred):
        return {n.name: 0 for n in nodes}
    topo: dict[tuple[str, str], int] = defaultdict(int)
    pref = [
        (w.weight, ref_incoming(w.term, incoming, ns_labels), w.term.topology_key)
        for w in incoming.pod_affinity_preferred
    ]
    anti = [
        (w.weight, ref_incoming(w.term, incoming, ns_labels), w.term.topology_key)
        for w in incoming.pod_anti_affinity_preferred
    ]
    for node_name, p in placed:
        labels = by_name[node_name].labels
        if not labels:
            continue
        for sign, terms in ((1, pref), (-1, anti)):
            for w, r, key in terms:
                if ref_matches_incoming(r, p) and key in labels:
                    topo[(key, labels[key])] += sign * w
        if hard > 0:
            for t in p.pod_affinity:
                if ref_matches_existing(t, p, incoming, ns_labels) and t.topology_key in labels:
                    topo[(t.topology_key, labels[t.topology_key])] += hard
        for sign, weighted in ((1, p.pod_affinity_preferred), (-1, p.pod_anti_affinity_preferred)):
            for w in weighted:
                if ref_matches_existing(w.term, p, incoming, ns_labels) and w.term.topology_key in labels:
                    topo[(w.term.topology_key, labels[w.term.topology_key])] += sign * w.weight
    return {n.name: sum(topo.get((k, v), 0) for k, v in n.labels.items()) for n in nodes}


def ref_normalize(raw: list[int]) -> list[int]:
    if not raw:
        return []
    lo, hi = min(raw), max(raw)
    return [int(100.0 * ((s - lo) / (hi - lo))) if hi > lo else 0 for s in raw]


# Weighted towards terms that match something: most draws should reject or score some nodes.
SELECTORS = [
    None,
    {},
    {"matchLabels": {"app": "a"}},
    {"matchLabels": {"app": "a"}},
    sel_in("app", "a", "b"),
    sel_not_in("app", "a"),
    sel_exists("tier"),
    exprs(("tier", "DoesNotExist", ())),
]
NS_SELECTORS = [None, None, None, {}, {"matchLabels": {"team": "t1"}}, exprs(("team", "DoesNotExist", ()))]
TOPOLOGY = ["zone", "zone", HOST, HOST, "region", "missing"]
term_st = st.builds(
    lambda s, k, ns, nss, m, mm: term(s, k, namespaces=ns, ns_selector=nss, match_label_keys=m, mismatch_label_keys=mm),
    st.sampled_from(SELECTORS),
    st.sampled_from(TOPOLOGY),
    st.sampled_from([None, None, None, ["default"], ["ns1", "ns2"]]),
    st.sampled_from(NS_SELECTORS),
    st.sampled_from([None, None, None, ["app"], ["tier"]]),
    st.sampled_from([None, None, None, ["tier"], ["app"]]),
)
weighted_st = st.lists(st.tuples(st.integers(1, 10), term_st), max_size=2)
# Required affinity rejects most nodes when present: draw it less often so the other checks show.
rare_terms_st = st.one_of(st.just([]), st.just([]), st.lists(term_st, min_size=1, max_size=2))
affinity_st = st.builds(
    affinity, rare_terms_st, weighted_st, st.one_of(st.just([]), st.lists(term_st, min_size=1, max_size=2)), weighted_st
)
labels_st = st.fixed_dictionaries(
    {}, optional={"app": st.sampled_from(["a", "a", "b"]), "tier": st.sampled_from(["a", "x"])}
)
pod_st = st.fixed_dictionaries(
    {
        "labels": labels_st,
        "ns": st.sampled_from(["default", "default", "ns1", "ns2"]),
        "aff": affinity_st,  # may be {} (no terms at all)
    }
)
existing_st = st.fixed_dictionaries(
    {
        "pod": pod_st,
        "node": st.integers(0, 5),  # modulo the node count
        # ghost: bound to a node the cache does not have; terminal: Succeeded, not running
        "mode": st.sampled_from(["bound", "bound", "bound", "cache-assumed", "cycle-assumed", "terminal", "ghost"]),
    }
)
node_st = st.fixed_dictionaries(
    {
        "zone": st.sampled_from([None, "z1", "z1", "z2"]),
        "region": st.sampled_from([None, "r1", "r2"]),
        "host": st.sampled_from(["own", "own", "own", "shared", None]),
    }
)
NS_LABEL_CHOICES = [{}, {"default": {}, "ns1": {"team": "t1"}, "ns2": {"team": "t2"}}, {"ns1": {"team": "t1"}}]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    node_specs=st.lists(node_st, min_size=1, max_size=6),
    existing_specs=st.lists(existing_st, min_size=1, max_size=6),
    incoming_spec=pod_st,
    ns_choice=st.integers(0, len(NS_LABEL_CHOICES) - 1),
    hard=st.sampled_from([0, 1, 3]),
    ignore=st.booleans(),
    warm=st.booleans(),
)
def test_agrees_with_a_per_node_port_of_upstream(
    node_specs, existing_specs, incoming_spec, ns_choice, hard, ignore, warm
):
    nodes = []
    for i, spec in enumerate(node_specs):
        labels = {k: v for k, v in (("zone", spec["zone"]), ("region", spec["region"])) if v is not None}
        if spec["host"] is not None:
            labels[HOST] = f"n{i}" if spec["host"] == "own" else "shared"
        nodes.append(node(f"n{i}", **labels))
    ns_labels = NS_LABEL_CHOICES[ns_choice]
    cache_pods, cache_assumed, cycle_assumed, placed = [], [], [], []
    for j, spec in enumerate(existing_specs):
        p = spec["pod"]
        mode = spec["mode"]
        known = mode != "ghost"
        target = f"n{spec['node'] % len(nodes)}" if known else "gone"
        if mode in ("bound", "terminal", "ghost"):
            info = make_pod(
                f"e{j}",
                namespace=p["ns"],
                labels=p["labels"],
                affinity=p["aff"],
                node_name=target,
                phase="Succeeded" if mode == "terminal" else "Running",
            )
            cache_pods.append(info)
        else:
            info = make_pod(f"e{j}", namespace=p["ns"], labels=p["labels"], affinity=p["aff"])
            if mode == "cache-assumed":
                cache_pods.append(info)
                cache_assumed.append((info.uid, target))
            else:
                cycle_assumed.append((target, info))
        if known and mode != "terminal":
            placed.append((target, info))
    cache = make_cache(nodes, cache_pods)
    for uid, target in cache_assumed:
        cache.assume(uid, target)
    cache.namespace_labels.update(ns_labels)
    args = InterPodAffinityArgs(hard_pod_affinity_weight=hard, ignore_preferred_terms_of_existing_pods=ignore)
    plugin = InterPodAffinity(args, Handle(cache))
    snap = cache.snapshot()
    incoming = make_pod(
        "incoming", namespace=incoming_spec["ns"], labels=incoming_spec["labels"], affinity=incoming_spec["aff"]
    )
    if warm:
        # Build the plugin's per-snapshot state and counts first: the cycle's
        # placements must then be folded in incrementally.
        plugin.filter(CycleState(), incoming, snap)
        plugin.score(CycleState(), incoming, snap, np.flatnonzero(snap.valid))
    for target, info in cycle_assumed:
        snap.assume(snap.row[target], snap.request_vector(info)[0], (info.nonzero_cpu, info.nonzero_memory), info)

    expected = ref_filter(incoming, nodes, placed, ns_labels)
    event(f"rejections: {sorted({r for r in expected.values() if r})}")
    assert statuses(plugin, snap, incoming) == expected

    rows = np.array([snap.row[n.name] for n in nodes], dtype=np.int64)
    raw = plugin.score(CycleState(), incoming, snap, rows)
    want = ref_score(incoming, nodes, placed, ns_labels, hard, ignore)
    event(f"distinct raw scores: {min(len(set(want.values())), 3)}")
    assert raw.tolist() == [want[n.name] for n in nodes]
    assert plugin.normalize(raw).tolist() == ref_normalize([want[n.name] for n in nodes])
    # Scoring a subset normalizes over that subset only.
    sub = rows[::2]
    assert plugin.normalize(plugin.score(CycleState(), incoming, snap, sub)).tolist() == ref_normalize(
        [want[snap.names[r]] for r in sub]
    )
