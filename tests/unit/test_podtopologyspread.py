"""PodTopologySpread (scheduler/plugins/podtopologyspread/).

Cases are ported from upstream v1.37 podtopologyspread/filtering_test.go
(TestPreFilterState, TestSingleConstraint, TestMultipleConstraints) and
scoring_test.go (TestPodTopologySpreadScore, TestPreScoreStateEmptyNodes,
TestPreScoreSkip), with the feature gates as they are on in v1.37
(NodeInclusionPolicy, MatchLabelKeys); the "feature gate disabled" cases are
left out. Default constraints use the pod's PodGroup where upstream uses a
Service/ReplicaSet. Then: the plugin through Framework/schedule_pod, a gang
spread in one group cycle, and hypothesis properties against a per-node
reference written straight from upstream's Go code.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from scheduler.api.config import Profile
from scheduler.api.constants import POD_GROUP_LABEL
from scheduler.api.parse import parse_pod
from scheduler.api.records import NodeInfo, PodInfo
from scheduler.cluster.cache import ClusterCache
from scheduler.cluster.snapshot import Snapshot
from scheduler.core.schedule_one import schedule_pod
from scheduler.core.schedule_podgroup import schedule_group
from scheduler.framework.framework import Framework, ProfileError
from scheduler.framework.interface import CycleState, Handle
from scheduler.plugins import in_tree_registry
from scheduler.plugins.podtopologyspread import (
    IGNORED,
    LABEL_HOSTNAME,
    LABEL_ZONE,
    REASON,
    REASON_MISSING_LABEL,
    PodTopologySpread,
    merge_match_label_keys,
)
from scheduler.plugins.podtopologyspread.args import PodTopologySpreadArgs
from scheduler.plugins.podtopologyspread.common import DO_NOT_SCHEDULE, Constraint
from scheduler.plugins.podtopologyspread.counting import has_all_keys

from .builders import make_cache, make_group, make_node, make_pod, pod_body, required_affinity, taint, toleration

HOST = LABEL_HOSTNAME
FOO = {"matchExpressions": [{"key": "foo", "operator": "Exists"}]}
BAR = {"matchExpressions": [{"key": "bar", "operator": "Exists"}]}
EMPTY: dict[str, Any] = {}
NULL = None
DNS = "DoNotSchedule"
SA = "ScheduleAnyway"
HONOR = "Honor"
IGNORE = "Ignore"
UNSCHED_TAINT = taint("node.kubernetes.io/unschedulable", "", "NoSchedule")  # upstream `taints`

S, U, UU = "Success", "Unschedulable", "UnschedulableAndUnresolvable"


# ------------------------------------------------------------------ builders


def N(name: str, *, taints: Sequence[Mapping[str, str]] = (), **labels: str) -> NodeInfo:
    """A node; keyword labels (use `labels_` for keys that are not identifiers)."""
    extra = labels.pop("labels_", None) or {}
    return make_node(name, "100", "100Gi", 500, labels={**labels, **extra}, taints=taints)


def E(name: str, node: str, *, ns: str = "default", terminating: bool = False, **labels: str) -> PodInfo:
    """An existing pod bound to `node`."""
    return make_pod(name, node_name=node, phase="Running", namespace=ns, deleting=terminating, labels=labels)


def spread_on(counts: Mapping[str, int], prefix: str = "p", **labels: str) -> list[PodInfo]:
    """`counts[node]` existing pods with `labels` on each node."""
    return [E(f"{prefix}-{node}-{i}", node, **labels) for node, k in counts.items() for i in range(k)]


def C(
    max_skew: int,
    key: str,
    when: str = DNS,
    selector: Mapping[str, Any] | None = FOO,
    *,
    min_domains: int | None = None,
    affinity_policy: str | None = None,
    taints_policy: str | None = None,
    match_label_keys: Sequence[str] | None = None,
) -> dict[str, Any]:
    """A v1 TopologySpreadConstraint body (upstream st.SpreadConstraint)."""
    c: dict[str, Any] = {"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": when}
    if selector is not None:
        c["labelSelector"] = dict(selector)
    if min_domains is not None:
        c["minDomains"] = min_domains
    if affinity_policy is not None:
        c["nodeAffinityPolicy"] = affinity_policy
    if taints_policy is not None:
        c["nodeTaintsPolicy"] = taints_policy
    if match_label_keys is not None:
        c["matchLabelKeys"] = list(match_label_keys)
    return c


def P(labels: Mapping[str, str] | None = None, *constraints: Mapping[str, Any], name: str = "p", **kw: Any) -> PodInfo:
    """The incoming pod, with its topologySpreadConstraints."""
    body = pod_body(name, labels=labels, **kw)
    if constraints:
        body["spec"]["topologySpreadConstraints"] = [dict(c) for c in constraints]
    return parse_pod(body)


def plugin(args: Mapping[str, Any] | None = None, cache: ClusterCache | None = None) -> PodTopologySpread:
    return PodTopologySpread(PodTopologySpreadArgs.model_validate(dict(args or {})), Handle(cache or ClusterCache()))


LIST = {"defaultingType": "List"}


def filter_codes(
    pod: PodInfo, nodes: Sequence[NodeInfo], existing: Sequence[PodInfo] = (), args=LIST
) -> dict[str, str]:
    """Upstream's per-node status code of this plugin's Filter alone."""
    cache = make_cache(nodes, existing)
    snap = cache.snapshot()
    result = plugin(args, cache).filter(CycleState(), pod, snap)
    reasons = dict(result.reasons)
    out = {}
    for node in nodes:
        r = snap.row[node.name]
        if result.feasible[r]:
            out[node.name] = S
        elif REASON_MISSING_LABEL in reasons and reasons[REASON_MISSING_LABEL][r]:
            assert REASON_MISSING_LABEL in result.unresolvable
            out[node.name] = UU
        else:
            assert reasons[REASON][r]
            out[node.name] = U
    return out


@dataclass(frozen=True, slots=True)
class DomainCounts:
    """Upstream's preFilterState for one constraint, as plain values:
    matching pods per eligible domain, and the global minimum used for the
    skew (0 while there are fewer domains than minDomains)."""

    constraint: Constraint
    counts: dict[str, int]
    min_match: int


def pre_filter_state(spread: PodTopologySpread, pod: PodInfo, snapshot: Snapshot) -> list[DomainCounts]:
    """Upstream's preFilterState (TpValueToMatchNum and the global minimum),
    from what the filter reads: the pod's DoNotSchedule constraints and
    their counts per domain."""
    constraints = spread.constraints(pod, DO_NOT_SCHEDULE)
    has_all = has_all_keys(constraints, snapshot)
    out = []
    for c in constraints:
        per_domain, present, min_match = spread.counting.domain_counts(c, pod, snapshot, has_all)
        values = snapshot.domains(c.topology_key)[1]
        counts = {values[d]: int(per_domain[d]) for d in np.flatnonzero(present)}
        out.append(DomainCounts(c, counts, min_match))
    return out


def prefilter_state(pod: PodInfo, nodes: Sequence[NodeInfo], existing: Sequence[PodInfo] = (), args=LIST):
    cache = make_cache(nodes, existing)
    return [(s.counts, s.min_match) for s in pre_filter_state(plugin(args, cache), pod, cache.snapshot())]


def scores(
    pod: PodInfo,
    nodes: Sequence[NodeInfo],
    failed: Sequence[NodeInfo] = (),
    existing: Sequence[PodInfo] = (),
    args: Mapping[str, Any] | None = None,
) -> dict[str, int]:
    """Upstream's scoring harness: PreScore over `nodes` (all nodes = nodes + failed),
    Score each of `nodes`, NormalizeScore. System defaulting, as upstream's test."""
    cache = make_cache([*nodes, *failed], existing)
    snap = cache.snapshot()
    pl = plugin(args, cache)
    rows = np.array([snap.row[n.name] for n in nodes], dtype=np.int64)
    raw = pl.score(CycleState(), pod, snap, rows)
    return dict(zip((n.name for n in nodes), pl.normalize(raw).tolist()))


def four_nodes(**extra: str) -> list[NodeInfo]:
    return [
        N("node-a", zone="zone1", node="node-a", **extra),
        N("node-b", zone="zone1", node="node-b", **extra),
        N("node-x", zone="zone2", node="node-x", **extra),
        N("node-y", zone="zone2", node="node-y", **extra),
    ]


def host_nodes(*names: str, zone: Mapping[str, str] | None = None) -> list[NodeInfo]:
    return [N(n, labels_={HOST: n, **({"zone": zone[n]} if zone else {})}) for n in names]


FOO_POD = {"foo": ""}


# ======================================================== TestPreFilterState


PREFILTER_CASES = [
    (
        "clean cluster with one spreadConstraint",
        P(FOO_POD, C(5, "zone", selector={"matchLabels": {"foo": "bar"}})),
        four_nodes(),
        [],
        [({"zone1": 0, "zone2": 0}, 0)],
    ),
    (
        "normal case with one spreadConstraint",
        P(FOO_POD, C(1, "zone")),
        four_nodes(),
        spread_on({"node-a": 2, "node-b": 1, "node-y": 2}, foo=""),
        [({"zone1": 3, "zone2": 2}, 2)],
    ),
    (
        "normal case with null label selector",
        P(FOO_POD, C(1, "zone", selector=NULL)),
        four_nodes(),
        spread_on({"node-a": 2, "node-b": 1, "node-y": 2}, foo=""),
        [({"zone1": 0, "zone2": 0}, 0)],
    ),
    (
        "normal case with one spreadConstraint, on a 3-zone cluster",
        P(FOO_POD, C(1, "zone")),
        [*four_nodes(), N("node-o", zone="zone3", node="node-o"), N("node-p", zone="zone3", node="node-p")],
        spread_on({"node-a": 2, "node-b": 1, "node-y": 2}, foo=""),
        [({"zone1": 3, "zone2": 2, "zone3": 0}, 0)],
    ),
    (
        "namespace mismatch doesn't count",
        P(FOO_POD, C(1, "zone")),
        four_nodes(),
        [
            E("p-a1", "node-a", foo=""),
            E("p-a2", "node-a", ns="ns1", foo=""),
            E("p-b1", "node-b", foo=""),
            E("p-y1", "node-y", ns="ns2", foo=""),
            E("p-y2", "node-y", foo=""),
        ],
        [({"zone1": 2, "zone2": 1}, 1)],
    ),
    (
        "normal case with two spreadConstraints",
        P(FOO_POD, C(1, "zone"), C(1, "node")),
        four_nodes(),
        spread_on({"node-a": 2, "node-b": 1, "node-y": 4}, foo=""),
        [({"zone1": 3, "zone2": 4}, 3), ({"node-a": 2, "node-b": 1, "node-x": 0, "node-y": 4}, 0)],
    ),
    (
        "soft spreadConstraints should be bypassed",
        P(FOO_POD, C(1, "zone", SA), C(1, "zone"), C(1, "node", SA), C(1, "node")),
        [
            N("node-a", zone="zone1", node="node-a"),
            N("node-b", zone="zone1", node="node-b"),
            N("node-y", zone="zone2", node="node-y"),
        ],
        spread_on({"node-a": 2, "node-b": 1, "node-y": 4}, foo=""),
        [({"zone1": 3, "zone2": 4}, 3), ({"node-a": 2, "node-b": 1, "node-y": 4}, 1)],
    ),
    (
        "different labelSelectors - simple version",
        P({"foo": "", "bar": ""}, C(1, "zone"), C(1, "node", selector=BAR)),
        [
            N("node-a", zone="zone1", node="node-a"),
            N("node-b", zone="zone1", node="node-b"),
            N("node-y", zone="zone2", node="node-y"),
        ],
        [E("p-a", "node-a", foo=""), E("p-b", "node-b", bar="")],
        [({"zone1": 1, "zone2": 0}, 0), ({"node-a": 0, "node-b": 1, "node-y": 0}, 0)],
    ),
    (
        "different labelSelectors - complex pods",
        P({"foo": "", "bar": ""}, C(1, "zone"), C(1, "node", selector=BAR)),
        [
            N("node-a", zone="zone1", node="node-a"),
            N("node-b", zone="zone1", node="node-b"),
            N("node-y", zone="zone2", node="node-y"),
        ],
        [
            E("p-a1", "node-a", foo=""),
            E("p-a2", "node-a", foo="", bar=""),
            E("p-b1", "node-b", foo=""),
            E("p-y1", "node-y", foo=""),
            E("p-y2", "node-y", foo="", bar=""),
            E("p-y3", "node-y", foo=""),
            E("p-y4", "node-y", foo="", bar=""),
        ],
        [({"zone1": 3, "zone2": 4}, 3), ({"node-a": 1, "node-b": 0, "node-y": 2}, 0)],
    ),
    (
        "two spreadConstraints, and with podAffinity",
        P(
            FOO_POD,
            C(1, "zone"),
            C(1, "node"),
            affinity=required_affinity(
                {"matchExpressions": [{"key": "node", "operator": "NotIn", "values": ["node-x"]}]}
            ),
        ),
        four_nodes(),
        spread_on({"node-a": 2, "node-b": 1, "node-y": 4}, foo=""),
        [({"zone1": 3, "zone2": 4}, 3), ({"node-a": 2, "node-b": 1, "node-y": 4}, 1)],
    ),
    (
        "NodeAffinityPolicy honored with labelSelectors",
        P(FOO_POD, C(1, "node", selector=BAR), node_selector={"foo": ""}),
        [N("node-a", node="node-a", foo=""), N("node-b", node="node-b", foo=""), N("node-c", node="node-c", bar="")],
        [E("p-a", "node-a", bar=""), E("p-b", "node-b", bar=""), E("p-c", "node-b", bar=""), E("p-d", "node-c")],
        [({"node-a": 1, "node-b": 2}, 1)],
    ),
    (
        "NodeAffinityPolicy ignored with labelSelectors",
        P(FOO_POD, C(1, "node", selector=BAR, affinity_policy=IGNORE), node_selector={"foo": ""}),
        [N("node-a", node="node-a", foo=""), N("node-b", node="node-b", foo=""), N("node-c", node="node-c", bar="")],
        [E("p-a", "node-a", bar=""), E("p-b", "node-b", bar=""), E("p-c", "node-b", bar=""), E("p-d", "node-c")],
        [({"node-a": 1, "node-b": 2, "node-c": 0}, 0)],
    ),
    (
        "NodeAffinityPolicy honored with nodeAffinity",
        P(
            FOO_POD,
            C(1, "node", selector=BAR),
            affinity=required_affinity({"matchExpressions": [{"key": "foo", "operator": "In", "values": [""]}]}),
        ),
        [N("node-a", node="node-a", foo=""), N("node-b", node="node-b", foo=""), N("node-c", node="node-c", bar="")],
        [E("p-a", "node-a", bar=""), E("p-c", "node-b", bar=""), E("p-d", "node-b", bar=""), E("p-e", "node-c")],
        [({"node-a": 1, "node-b": 2}, 1)],
    ),
    (
        "NodeAffinityPolicy ignored with nodeAffinity",
        P(
            FOO_POD,
            C(1, "node", selector=BAR, affinity_policy=IGNORE),
            affinity=required_affinity({"matchExpressions": [{"key": "foo", "operator": "In", "values": [""]}]}),
        ),
        [N("node-a", node="node-a", foo=""), N("node-b", node="node-b", foo=""), N("node-c", node="node-c", bar="")],
        [E("p-a", "node-a", bar=""), E("p-b", "node-b", bar=""), E("p-c", "node-b", bar=""), E("p-d", "node-c")],
        [({"node-a": 1, "node-b": 2, "node-c": 0}, 0)],
    ),
    (
        "NodeTaintsPolicy ignored",
        P(FOO_POD, C(1, "node", selector=BAR)),
        [
            N("node-a", node="node-a"),
            N("node-b", node="node-b"),
            N("node-c", node="node-c", bar="", taints=[UNSCHED_TAINT]),
        ],
        [E("p-a", "node-a", bar=""), E("p-b", "node-b", bar=""), E("p-c", "node-b", bar=""), E("p-d", "node-c")],
        [({"node-a": 1, "node-b": 2, "node-c": 0}, 0)],
    ),
    (
        "NodeTaintsPolicy honored",
        P(FOO_POD, C(1, "node", selector=BAR, taints_policy=HONOR)),
        [
            N("node-a", node="node-a"),
            N("node-b", node="node-b"),
            N("node-c", node="node-c", bar="", taints=[UNSCHED_TAINT]),
        ],
        [E("p-a", "node-a", bar=""), E("p-b", "node-b", bar=""), E("p-c", "node-b", bar=""), E("p-d", "node-c")],
        [({"node-a": 1, "node-b": 2}, 1)],
    ),
    (
        "NodeTaintsPolicy honored with tolerated taints",
        P(
            FOO_POD,
            C(1, "node", selector=BAR, taints_policy=HONOR),
            tolerations=[toleration("node.kubernetes.io/unschedulable", operator="Exists")],
        ),
        [
            N("node-a", node="node-a"),
            N("node-b", node="node-b"),
            N("node-c", node="node-c", bar="", taints=[UNSCHED_TAINT]),
        ],
        [E("p-a", "node-a", bar=""), E("p-b", "node-b", bar=""), E("p-c", "node-b", bar=""), E("p-d", "node-c")],
        [({"node-a": 1, "node-b": 2, "node-c": 0}, 0)],
    ),
    (
        "two node inclusion Constraints, zone: honor/ignore, node: ignore/ignore",
        P(FOO_POD, C(1, "zone"), C(1, "node", affinity_policy=IGNORE), node_selector={"foo": ""}),
        [
            N("node-a", zone="zone1", node="node-a", foo=""),
            N("node-b", zone="zone1", node="node-b"),
            N("node-x", zone="zone2", node="node-x", foo=""),
        ],
        [E("p-b1", "node-b", foo=""), E("p-b2", "node-b", foo=""), E("p-x1", "node-x", foo="")],
        [({"zone1": 0, "zone2": 1}, 0), ({"node-a": 0, "node-b": 2, "node-x": 1}, 0)],
    ),
    (
        "two node inclusion Constraints, zone: honor/honor, node: honor/ignore",
        P(FOO_POD, C(1, "zone", taints_policy=HONOR), C(1, "node")),
        [
            N("node-a", zone="zone1", node="node-a", foo=""),
            N("node-b", zone="zone1", node="node-b", taints=[UNSCHED_TAINT]),
            N("node-x", zone="zone2", node="node-x", foo=""),
        ],
        [E("p-b1", "node-b", foo=""), E("p-b2", "node-b", foo=""), E("p-x1", "node-x", foo="")],
        [({"zone1": 0, "zone2": 1}, 0), ({"node-a": 0, "node-b": 2, "node-x": 1}, 0)],
    ),
    (
        "two node inclusion Constraints, zone: honor/ignore, node: honor/ignore",
        P(FOO_POD, C(1, "zone"), C(1, "node"), node_selector={"foo": ""}),
        [
            N("node-a", zone="zone1", node="node-a"),
            N("node-b", zone="zone1", node="node-b", foo="", taints=[UNSCHED_TAINT]),
            N("node-x", zone="zone2", node="node-x", foo=""),
            N("node-y", zone="zone2", node="node-y"),
        ],
        [
            E("p-a1", "node-a", foo=""),
            E("p-a2", "node-a", foo=""),
            E("p-x1", "node-x", foo=""),
            E("p-y1", "node-y", foo=""),
        ],
        [({"zone1": 0, "zone2": 1}, 0), ({"node-b": 0, "node-x": 1}, 0)],
    ),
    (
        "two node inclusion Constraints, zone: ignore/ignore, node: honor/honor",
        P(FOO_POD, C(1, "zone", affinity_policy=IGNORE), C(1, "node", taints_policy=HONOR), node_selector={"foo": ""}),
        [
            N("node-a", zone="zone1", node="node-a"),
            N("node-b", zone="zone1", node="node-b", foo="", taints=[UNSCHED_TAINT]),
            N("node-x", zone="zone2", node="node-x", foo=""),
            N("node-y", zone="zone2", node="node-y", foo=""),
        ],
        [
            E("p-a1", "node-a", foo=""),
            E("p-a2", "node-a", foo=""),
            E("p-x1", "node-x", foo=""),
            E("p-x2", "node-x", foo=""),
            E("p-y1", "node-y", foo=""),
        ],
        [({"zone1": 2, "zone2": 3}, 2), ({"node-x": 2, "node-y": 1}, 1)],
    ),
    (
        "matchLabelKeys ANDed with LabelSelector when LabelSelector isn't empty",
        P({"foo": "", "bar": "a"}, C(1, "zone", match_label_keys=["bar"])),
        four_nodes(),
        [
            E("p-a1", "node-a", foo=""),
            E("p-a2", "node-a", foo="", bar="a"),
            E("p-b1", "node-b", foo=""),
            E("p-y1", "node-y", foo="", bar="a"),
            E("p-y2", "node-y", bar=""),
        ],
        [({"zone1": 1, "zone2": 1}, 1)],
    ),
    (
        "matchLabelKeys ANDed with LabelSelector when LabelSelector is empty",
        P({"foo": "a"}, C(1, "zone", selector=EMPTY, match_label_keys=["foo"])),
        four_nodes(),
        spread_on({"node-a": 2, "node-b": 1, "node-y": 2}, foo="a"),
        [({"zone1": 3, "zone2": 2}, 2)],
    ),
    (
        "key in matchLabelKeys is ignored when LabelSelector is nil",
        P(FOO_POD, C(1, "zone", selector=NULL, match_label_keys=["bar"])),
        four_nodes(),
        spread_on({"node-a": 2, "node-b": 1, "node-y": 2}, foo="a"),
        [({"zone1": 0, "zone2": 0}, 0)],
    ),
    (
        "key in matchLabelKeys is ignored when it isn't exist in pod.labels",
        P(FOO_POD, C(1, "zone", match_label_keys=["bar"])),
        four_nodes(),
        spread_on({"node-a": 2, "node-b": 1, "node-y": 2}, foo="a"),
        [({"zone1": 3, "zone2": 2}, 2)],
    ),
    (
        "two spreadConstraints with the same topologyKey",
        P({"foo": "", "bar": ""}, C(1, "zone"), C(1, "zone", selector=BAR)),
        four_nodes(),
        [
            E("p-a1", "node-a", foo="", bar=""),
            E("p-b1", "node-b", foo=""),
            E("p-x1", "node-x", bar=""),
            E("p-y1", "node-y", foo="", bar=""),
            E("p-y2", "node-y", bar=""),
        ],
        [({"zone1": 2, "zone2": 1}, 1), ({"zone1": 1, "zone2": 3}, 1)],
    ),
    ("skip if not specified", P(FOO_POD), [N("node-a", zone="zone1", node="node-a")], [], []),
]


@pytest.mark.parametrize("name, pod, nodes, existing, want", PREFILTER_CASES, ids=[c[0] for c in PREFILTER_CASES])
def test_pre_filter_state(name, pod, nodes, existing, want):
    assert prefilter_state(pod, nodes, existing) == want


def test_pre_filter_state_min_domains():
    """TpKeyToDomainsNum / minMatchNum: fewer eligible domains than minDomains -> global minimum 0."""
    pod = P(FOO_POD, C(1, "zone", min_domains=3), C(1, "node", min_domains=4))
    state = prefilter_state(pod, four_nodes(), spread_on({"node-a": 2, "node-b": 1, "node-x": 1, "node-y": 4}, foo=""))
    assert state == [({"zone1": 3, "zone2": 5}, 0), ({"node-a": 2, "node-b": 1, "node-x": 1, "node-y": 4}, 1)]


def test_pre_filter_state_default_constraints_and_a_group():
    """'default constraints and a service': the DoNotSchedule defaults with the
    group's selector; no node has the keys, so nothing is counted."""
    args = {
        "defaultingType": "List",
        "defaultConstraints": [
            {"maxSkew": 3, "topologyKey": "node", "whenUnsatisfiable": DNS},
            {"maxSkew": 2, "topologyKey": "node", "whenUnsatisfiable": SA},
            {"maxSkew": 5, "topologyKey": "rack", "whenUnsatisfiable": DNS},
        ],
    }
    pod = P({"foo": "bar", "baz": "kar"}, group="g")
    cache = make_cache([N("n1", zone="z")])
    state = pre_filter_state(plugin(args, cache), pod, cache.snapshot())
    assert [(s.constraint.max_skew, s.constraint.topology_key, s.counts, s.min_match) for s in state] == [
        (3, "node", {}, 0),
        (5, "rack", {}, 0),
    ]
    assert all(s.constraint.selector.match_labels == ((POD_GROUP_LABEL, "g"),) for s in state)
    # 'default constraints and a service that doesn't match': no group, no defaults (Skip)
    assert pre_filter_state(plugin(args, cache), P({"foo": "bar"}), cache.snapshot()) == []
    # 'default constraints and a service, but pod has constraints': only the pod's own
    own = P(
        {"foo": "bar", "baz": "tar"},
        C(1, "zone", selector={"matchLabels": {"baz": "tar"}}),
        C(2, "planet", SA, {"matchLabels": {"fot": "rok"}}),
        group="g",
    )
    state = pre_filter_state(plugin(args, cache), own, cache.snapshot())
    assert [(s.constraint.topology_key, s.counts) for s in state] == [("zone", {"z": 0})]
    # 'default soft constraints and a service': only ScheduleAnyway defaults -> filter skipped
    soft = {
        "defaultingType": "List",
        "defaultConstraints": [{"maxSkew": 2, "topologyKey": "node", "whenUnsatisfiable": SA}],
    }
    assert pre_filter_state(plugin(soft, cache), P(group="g"), cache.snapshot()) == []


# ===================================================== TestSingleConstraint

SPREAD_2103 = {"node-a": 2, "node-b": 1, "node-y": 3}
TWO_ONE = [E("p-b1", "node-a", foo=""), E("p-b2", "node-b", foo=""), E("p-y1", "node-y", foo="")]
POLICY_NODES = [
    N("node-a", node="node-a", foo=""),
    N("node-b", node="node-b", foo=""),
    N("node-x", node="node-x", foo=""),
    N("node-y", node="node-y"),
]
TAINT_NODES = [
    N("node-a", node="node-a", foo=""),
    N("node-b", node="node-b", foo=""),
    N("node-x", node="node-x", foo=""),
    N("node-y", node="node-y", taints=[UNSCHED_TAINT]),
]
FOO_IN_EMPTY = required_affinity({"matchExpressions": [{"key": "foo", "operator": "In", "values": [""]}]})
THREE_HOSTS = [N("node-a", node="node-a"), N("node-b", node="node-b"), N("node-c", node="node-c")]

SINGLE_CASES = [
    ("no existing pods", P(FOO_POD, C(1, "zone")), four_nodes(), [], [S, S, S, S]),
    (
        "no existing pods, incoming pod doesn't match itself",
        P(FOO_POD, C(1, "zone", selector=BAR)),
        four_nodes(),
        [],
        [S, S, S, S],
    ),
    (
        "existing pods in a different namespace do not count",
        P(FOO_POD, C(1, "zone")),
        four_nodes(),
        [
            E("p-a1", "node-a", ns="ns1", foo=""),
            E("p-b1", "node-a", ns="ns2", foo=""),
            E("p-x1", "node-x", foo=""),
            E("p-y1", "node-y", foo=""),
        ],
        [S, S, U, U],
    ),
    (
        "existing pods do not match null selector",
        P(FOO_POD, C(1, "zone", selector=NULL)),
        four_nodes(),
        [E("p-x1", "node-x", foo=""), E("p-y1", "node-y", foo="")],
        [S, S, S, S],
    ),
    (
        "pods spread across zones as 3/3, all nodes fit",
        P(FOO_POD, C(1, "zone")),
        four_nodes(),
        spread_on(SPREAD_2103, foo=""),
        [S, S, S, S],
    ),
    (
        "pods spread across zones as 1/2 due to absence of label 'zone' on node-b",
        P(FOO_POD, C(1, "zone")),
        [
            N("node-a", zone="zone1", node="node-a"),
            N("node-b", zon="zone1", node="node-b"),
            N("node-x", zone="zone2", node="node-x"),
            N("node-y", zone="zone2", node="node-y"),
        ],
        spread_on({"node-a": 1, "node-b": 1, "node-x": 1, "node-y": 1}, foo=""),
        [S, UU, U, U],
    ),
    (
        "pods spread across nodes as 2/1/0/3, only node-x fits",
        P(FOO_POD, C(1, "node")),
        four_nodes(),
        spread_on(SPREAD_2103, foo=""),
        [U, U, S, U],
    ),
    (
        "pods spread across nodes as 2/1/0/3, maxSkew is 2, node-b and node-x fit",
        P(FOO_POD, C(2, "node")),
        four_nodes(),
        spread_on(SPREAD_2103, foo=""),
        [U, S, S, U],
    ),
    (
        "pods spread across nodes as 2/1/0/3, but pod doesn't match itself",
        P({"bar": ""}, C(1, "node")),
        four_nodes(),
        spread_on(SPREAD_2103, foo=""),
        [U, S, S, U],
    ),
    (
        "incoming pod has nodeAffinity, pods spread as 2/~1~/~0~/3, hence node-a fits",
        P(
            FOO_POD,
            C(1, "node"),
            affinity=required_affinity(
                {"matchExpressions": [{"key": "node", "operator": "In", "values": ["node-a", "node-y"]}]}
            ),
        ),
        four_nodes(),
        spread_on(SPREAD_2103, foo=""),
        [S, S, S, U],
    ),
    (
        "incoming pod has nodeAffinity, pods spread as 0/~2~/0/1, hence node-a fits",
        P(
            FOO_POD,
            C(1, "zone"),
            affinity=required_affinity(
                {"matchExpressions": [{"key": "node", "operator": "NotIn", "values": ["node-b"]}]}
            ),
        ),
        four_nodes(),
        [E("p-b1", "node-b", foo=""), E("p-b2", "node-b", foo=""), E("p-y1", "node-y", foo="")],
        [S, S, U, U],
    ),
    (
        "pods spread across nodes as 2/2/1, maxSkew is 2, and the number of domains < minDomains, then the third node fits",
        P(FOO_POD, C(2, "node", min_domains=4)),
        THREE_HOSTS,
        spread_on({"node-a": 2, "node-b": 2, "node-c": 1}, foo=""),
        [U, U, S],
    ),
    (
        "pods spread across nodes as 2/2/1, maxSkew is 2, and the number of domains > minDomains, then the all nodes fit",
        P(FOO_POD, C(2, "node", min_domains=2)),
        THREE_HOSTS,
        spread_on({"node-a": 2, "node-b": 2, "node-c": 1}, foo=""),
        [S, S, S],
    ),
    (
        "pods spread across zone as 2/1, maxSkew is 2 and the number of domains < minDomains, then the third and fourth nodes fit",
        P(FOO_POD, C(2, "zone", min_domains=3)),
        four_nodes(),
        TWO_ONE,
        [U, U, S, S],
    ),
    (
        "pods spread across zone as 2/1, maxSkew is 2 and the number of domains > minDomains, then the all nodes fit",
        P(FOO_POD, C(2, "zone", min_domains=1)),
        four_nodes(),
        TWO_ONE,
        [S, S, S, S],
    ),
    (
        "NodeAffinityPolicy honored with labelSelectors",
        P(FOO_POD, C(1, "node"), node_selector={"foo": ""}),
        POLICY_NODES,
        TWO_ONE,
        [U, U, S, S],
    ),
    (
        "NodeAffinityPolicy ignored with labelSelectors",
        P(FOO_POD, C(1, "node", affinity_policy=IGNORE), node_selector={"foo": ""}),
        POLICY_NODES,
        TWO_ONE,
        [U, U, S, U],
    ),
    (
        "NodeAffinityPolicy honored with nodeAffinity",
        P(FOO_POD, C(1, "node"), affinity=FOO_IN_EMPTY),
        POLICY_NODES,
        TWO_ONE,
        [U, U, S, S],
    ),
    (
        "NodeAffinityPolicy ignored with nodeAffinity",
        P(FOO_POD, C(1, "node", affinity_policy=IGNORE), affinity=FOO_IN_EMPTY),
        POLICY_NODES,
        TWO_ONE,
        [U, U, S, U],
    ),
    ("NodeTaintsPolicy honored", P(FOO_POD, C(1, "node", taints_policy=HONOR)), TAINT_NODES, TWO_ONE, [U, U, S, S]),
    ("NodeTaintsPolicy ignored", P(FOO_POD, C(1, "node")), TAINT_NODES, TWO_ONE, [U, U, S, U]),
]


@pytest.mark.parametrize("name, pod, nodes, existing, want", SINGLE_CASES, ids=[c[0] for c in SINGLE_CASES])
def test_single_constraint(name, pod, nodes, existing, want):
    assert filter_codes(pod, nodes, existing) == dict(zip((n.name for n in nodes), want))


def test_all_nodes_lack_the_key():
    """'pod cannot be scheduled as all nodes don't have label 'rack''."""
    nodes = [N("node-a", zone="zone1", node="node-a"), N("node-x", zone="zone2", node="node-x")]
    assert filter_codes(P(FOO_POD, C(1, "rack")), nodes) == {"node-a": UU, "node-x": UU}


def test_terminating_pods_are_excluded():
    nodes = [N("node-a", node="node-a"), N("node-b", node="node-b")]
    existing = [E("p-a", "node-a", terminating=True, foo=""), E("p-b", "node-b", foo="")]
    assert filter_codes(P(FOO_POD, C(1, "node")), nodes, existing) == {"node-a": S, "node-b": U}


# =================================================== TestMultipleConstraints

FOO_BAR_POD = {"foo": "", "bar": ""}
MULTI_CASES = [
    (
        "two Constraints on zone and node, spreads = [3/3, 2/1/0/3]",
        P(FOO_POD, C(1, "zone"), C(1, "node")),
        four_nodes(),
        spread_on(SPREAD_2103, foo=""),
        [U, U, S, U],
    ),
    (
        "two Constraints on zone and node, spreads = [3/4, 2/1/0/4]",
        P(FOO_POD, C(1, "zone"), C(1, "node")),
        four_nodes(),
        spread_on({"node-a": 2, "node-b": 1, "node-y": 4}, foo=""),
        [U, U, U, U],
    ),
    (
        "Constraints hold different labelSelectors, spreads = [1/0, 1/0/0/1]",
        P(FOO_BAR_POD, C(1, "zone"), C(1, "node", selector=BAR)),
        four_nodes(),
        [E("p-a1", "node-a", foo=""), E("p-y1", "node-y", bar="")],
        [U, U, S, U],
    ),
    (
        "Constraints hold different labelSelectors, spreads = [1/0, 0/0/1/1]",
        P(FOO_BAR_POD, C(1, "zone"), C(1, "node", selector=BAR)),
        four_nodes(),
        [E("p-a1", "node-a", foo=""), E("p-x1", "node-x", bar=""), E("p-y1", "node-y", bar="")],
        [U, U, U, U],
    ),
    (
        "Constraints hold different labelSelectors, spreads = [2/3, 1/0/0/1]",
        P(FOO_BAR_POD, C(1, "zone"), C(1, "node", selector=BAR)),
        four_nodes(),
        [
            E("p-a1", "node-a", foo=""),
            E("p-a2", "node-a", foo="", bar=""),
            E("p-y1", "node-y", foo=""),
            E("p-y2", "node-y", foo="", bar=""),
            E("p-y3", "node-y", foo=""),
        ],
        [U, S, U, U],
    ),
    (
        "Constraints hold different labelSelectors but pod doesn't match itself on 'zone' constraint",
        P({"bar": ""}, C(1, "zone"), C(1, "node", selector=BAR)),
        four_nodes(),
        [E("p-a1", "node-a", foo=""), E("p-x1", "node-x", bar=""), E("p-y1", "node-y", bar="")],
        [S, S, U, U],
    ),
    (
        "two Constraints on zone and node, absence of label 'node' on node-x, spreads = [1/1, 1/0/0/1]",
        P(FOO_POD, C(1, "zone"), C(1, "node")),
        [
            N("node-a", zone="zone1", node="node-a"),
            N("node-b", zone="zone1", node="node-b"),
            N("node-x", zone="zone2"),
            N("node-y", zone="zone2", node="node-y"),
        ],
        [E("p-a1", "node-a", foo=""), E("p-y3", "node-y", foo="")],
        [U, S, UU, U],
    ),
    (
        "two node inclusion Constraints, zone: honor/ignore, node: ignore/ignore",
        P(FOO_POD, C(1, "zone"), C(1, "node", affinity_policy=IGNORE), node_selector={"foo": ""}),
        [
            N("node-a", zone="zone1", node="node-a", foo=""),
            N("node-b", zone="zone1", node="node-b", foo=""),
            N("node-x", zone="zone2", node="node-x", foo=""),
            N("node-y", zone="zone2", node="node-y"),
        ],
        [E("p-a1", "node-a", foo=""), E("p-b1", "node-b", foo=""), E("p-y1", "node-y", foo="")],
        [U, U, S, U],
    ),
    (
        "two node inclusion Constraints, zone: honor/honor, node: honor/ignore",
        P(FOO_POD, C(1, "zone", taints_policy=HONOR), C(1, "node")),
        [
            N("node-a", zone="zone1", node="node-a", foo=""),
            N("node-b", zone="zone1", node="node-b", foo=""),
            N("node-x", zone="zone2", node="node-x", foo=""),
            N("node-y", zone="zone2", node="node-y", taints=[UNSCHED_TAINT]),
        ],
        [E("p-a1", "node-a", foo=""), E("p-b1", "node-b", foo=""), E("p-y1", "node-y", foo="")],
        [U, U, S, U],
    ),
    (
        "two node inclusion Constraints, zone: honor/ignore, node: honor/ignore",
        P(FOO_POD, C(1, "zone"), C(1, "node"), node_selector={"foo": ""}),
        [
            N("node-a", zone="zone1", node="node-a", foo=""),
            N("node-b", zone="zone1", node="node-b"),
            N("node-x", zone="zone2", node="node-x", foo=""),
            N("node-y", zone="zone2", node="node-y", foo="", taints=[UNSCHED_TAINT]),
        ],
        [E("p-a1", "node-a", foo=""), E("p-b1", "node-b", foo=""), E("p-y1", "node-y", foo="")],
        [U, S, S, U],
    ),
    (
        "two node inclusion Constraints, zone: honor/honor, node: ignore/ignore",
        P(FOO_POD, C(1, "zone", taints_policy=HONOR), C(1, "node", affinity_policy=IGNORE), node_selector={"foo": ""}),
        [
            N("node-a", zone="zone1", node="node-a", foo=""),
            N("node-b", zone="zone1", node="node-b"),
            N("node-x", zone="zone2", node="node-x", foo=""),
            N("node-y", zone="zone2", node="node-y", foo="", taints=[UNSCHED_TAINT]),
        ],
        [E("p-a1", "node-a", foo=""), E("p-b1", "node-b", foo=""), E("p-y1", "node-y", foo="")],
        [U, U, S, U],
    ),
    (
        "two Constraints on zone, spreads = [3/3, 2/1]",
        P(FOO_BAR_POD, C(1, "zone", selector=BAR), C(1, "zone")),
        four_nodes(),
        [
            E("p-a1", "node-a", foo="", bar=""),
            E("p-a2", "node-a", foo=""),
            E("p-b1", "node-b", foo="", bar=""),
            E("p-y1", "node-y", foo=""),
            E("p-y2", "node-y", foo="", bar=""),
            E("p-y3", "node-y", foo=""),
        ],
        [U, U, S, S],
    ),
    (
        "two Constraints on zone, spreads = [3/4, 2/1]",
        P(FOO_BAR_POD, C(1, "zone", selector=BAR), C(1, "zone")),
        four_nodes(),
        [
            E("p-a1", "node-a", foo="", bar=""),
            E("p-a2", "node-a", foo=""),
            E("p-b1", "node-b", foo="", bar=""),
            E("p-y1", "node-y", foo=""),
            E("p-y2", "node-y", foo="", bar=""),
            E("p-y3", "node-y", foo=""),
            E("p-y4", "node-y", foo=""),
        ],
        [U, U, U, U],
    ),
]


@pytest.mark.parametrize("name, pod, nodes, existing, want", MULTI_CASES, ids=[c[0] for c in MULTI_CASES])
def test_multiple_constraints(name, pod, nodes, existing, want):
    assert filter_codes(pod, nodes, existing) == dict(zip((n.name for n in nodes), want))


def test_first_failing_constraint_names_the_reason():
    """Upstream returns at the first constraint that fails: a skew on the first
    wins over a missing label of the second (resolvable, not unresolvable)."""
    nodes = [
        N("node-a", zone="zone1"),
        N("node-b", zone="zone1", node="node-b"),
        N("node-x", zone="zone2", node="node-x"),
    ]
    existing = spread_on({"node-b": 2}, foo="")  # zone1 2 (node-a lacks "node": not counted), zone2 0
    pod = P(FOO_POD, C(1, "zone"), C(1, "node"))
    assert filter_codes(pod, nodes, existing) == {"node-a": U, "node-b": U, "node-x": S}
    pod = P(FOO_POD, C(1, "node"), C(1, "zone"))
    assert filter_codes(pod, nodes, existing) == {"node-a": UU, "node-b": U, "node-x": S}


# ================================================================ matchLabelKeys


def test_match_label_keys_merge_is_idempotent():
    """The apiserver may already have merged matchLabelKeys into labelSelector
    (MatchLabelKeysInPodTopologySpreadSelectorMerge); merging again is harmless."""
    labels = {"foo": "", "app": "web", "rev": "7"}
    merged_by_apiserver = {
        "matchExpressions": [{"key": "foo", "operator": "Exists"}, {"key": "rev", "operator": "In", "values": ["7"]}]
    }
    existing = [
        E("p-a1", "node-a", foo="", rev="7"),
        E("p-a2", "node-a", foo="", rev="6"),
        E("p-a3", "node-a", foo="", rev="6"),
        E("p-x1", "node-x", foo="", rev="7"),
    ]
    plain = P(labels, C(1, "zone", match_label_keys=["rev"]))
    twice = P(labels, C(1, "zone", selector=merged_by_apiserver, match_label_keys=["rev"]))
    assert prefilter_state(plain, four_nodes(), existing) == [({"zone1": 1, "zone2": 1}, 1)]
    assert prefilter_state(twice, four_nodes(), existing) == [({"zone1": 1, "zone2": 1}, 1)]
    assert (
        filter_codes(plain, four_nodes(), existing)
        == filter_codes(twice, four_nodes(), existing)
        == dict.fromkeys(["node-a", "node-b", "node-x", "node-y"], S)
    )
    # merging the same keys twice yields the same (hashable) selector
    pl = plugin(LIST)
    sel = pl.constraints(plain, DNS)[0].selector
    assert merge_match_label_keys(sel, ["rev"], labels) == sel


def test_match_label_keys_with_conflicting_value_matches_nothing():
    """selector rev=6 AND matchLabelKeys rev (=7): nothing matches, not even the pod."""
    pod = P({"foo": "", "rev": "7"}, C(1, "zone", selector={"matchLabels": {"rev": "6"}}, match_label_keys=["rev"]))
    existing = spread_on({"node-a": 3}, rev="6")
    assert prefilter_state(pod, four_nodes(), existing) == [({"zone1": 0, "zone2": 0}, 0)]


def test_empty_selector_counts_nothing_but_matches_the_pod():
    """Upstream quirk: labels.Everything().Empty() -> countPodsMatchSelector is 0,
    while selfMatch is 1, so every node passes (skew 1 <= maxSkew)."""
    pod = P(FOO_POD, C(1, "zone", selector=EMPTY))
    assert filter_codes(pod, four_nodes(), spread_on({"node-a": 5}, foo="")) == dict.fromkeys(
        ["node-a", "node-b", "node-x", "node-y"], S
    )


# ============================================================ default constraints


def test_default_constraints_list_do_not_schedule_use_the_pod_group():
    args = {
        "defaultingType": "List",
        "defaultConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": DNS}],
    }
    existing = [
        E("g-a1", "node-a", **{POD_GROUP_LABEL: "g"}),
        E("h-a1", "node-a", **{POD_GROUP_LABEL: "h"}),
        E("h-a2", "node-x", **{POD_GROUP_LABEL: "h"}),
        E("h-a3", "node-y", **{POD_GROUP_LABEL: "h"}),
    ]
    # group g has one pod in zone1: zone1 is full for maxSkew 1
    assert filter_codes(P(group="g"), four_nodes(), existing, args) == {
        "node-a": U,
        "node-b": U,
        "node-x": S,
        "node-y": S,
    }
    # group h is 1/2: zone1 is the emptier one
    assert filter_codes(P(group="h"), four_nodes(), existing, args) == {
        "node-a": S,
        "node-b": S,
        "node-x": U,
        "node-y": U,
    }
    # no group: no default constraints
    assert set(filter_codes(P(), four_nodes(), existing, args).values()) == {S}
    # a pod with its own constraints ignores the defaults (its ScheduleAnyway one does not filter)
    assert set(filter_codes(P({"foo": ""}, C(1, "zone", SA), group="g"), four_nodes(), existing, args).values()) == {S}
    # the group's pods are counted in the pod's namespace only
    assert set(filter_codes(P(group="g", namespace="other"), four_nodes(), existing, args).values()) == {S}


def test_system_defaults_do_not_filter():
    existing = spread_on({"node-a": 9}, **{POD_GROUP_LABEL: "g"})
    assert set(filter_codes(P(group="g"), four_nodes(), existing, args={}).values()) == {S}
    pl = plugin({})
    assert pl.system_defaulted
    assert [(c.topology_key, c.max_skew) for c in pl.constraints(P(group="g"), SA)] == [
        (LABEL_HOSTNAME, 3),
        (LABEL_ZONE, 5),
    ]
    assert pl.constraints(P(group="g"), DNS) == []
    assert pl.constraints(P(), SA) == []


@pytest.mark.parametrize(
    "args, messages",
    [
        ({"defaultingType": "Bogus"}, ["defaultingType: unsupported value 'Bogus'; allowed: 'System', 'List'"]),
        (
            {"defaultConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": DNS}]},
            ["defaultingType: invalid value 'System': when .defaultConstraints are not empty"],
        ),
        (
            {
                "defaultingType": "List",
                "defaultConstraints": [{"maxSkew": 0, "topologyKey": "zone", "whenUnsatisfiable": DNS}],
            },
            ["defaultConstraints[0].maxSkew: invalid value 0: not in valid range (0, inf)"],
        ),
        (
            {
                "defaultingType": "List",
                "defaultConstraints": [{"maxSkew": 1, "topologyKey": "", "whenUnsatisfiable": DNS}],
            },
            ["defaultConstraints[0].topologyKey: can not be empty"],
        ),
        (
            {"defaultingType": "List", "defaultConstraints": [{"maxSkew": 1, "whenUnsatisfiable": DNS}]},
            ["defaultConstraints[0].topologyKey: Field required"],
        ),
        (
            {
                "defaultingType": "List",
                "defaultConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "Maybe"}],
            },
            [
                "defaultConstraints[0].whenUnsatisfiable: unsupported value 'Maybe'; allowed: 'DoNotSchedule', 'ScheduleAnyway'"
            ],
        ),
        (
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {
                        "maxSkew": 1,
                        "topologyKey": "zone",
                        "whenUnsatisfiable": DNS,
                        "labelSelector": {"matchLabels": {"a": "b"}},
                    }
                ],
            },
            [
                "defaultConstraints[0].labelSelector: constraint must not define a selector, as they deduced for each pod"
            ],
        ),
        (
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": DNS},
                    {"maxSkew": 2, "topologyKey": "zone", "whenUnsatisfiable": DNS},
                ],
            },
            ["defaultConstraints[1]: duplicate value '{zone, DoNotSchedule}'"],
        ),
        (
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {"maxSkew": 0, "topologyKey": "zone", "whenUnsatisfiable": "Maybe", "nodeTaintsPolicy": "honor"}
                ],
            },
            [
                "defaultConstraints[0].maxSkew: invalid value 0: not in valid range (0, inf)",
                "defaultConstraints[0].whenUnsatisfiable: unsupported value 'Maybe'; allowed: 'DoNotSchedule', 'ScheduleAnyway'",
                "defaultConstraints[0].nodeTaintsPolicy: unsupported value 'honor'; allowed: 'Honor', 'Ignore'",
            ],
        ),
    ],
)
def test_args_validation(args, messages):
    with pytest.raises(ProfileError) as exc:
        framework(ClusterCache(), args=args)
    assert str(exc.value).splitlines() == [f"profile troupe-scheduler: pluginConfig[0].args.{m}" for m in messages]


# ============================================================== TestPodTopologySpreadScore

H4 = ("node-a", "node-b", "node-c", "node-d")
SPREAD_4321 = {"node-a": 4, "node-b": 3, "node-c": 2, "node-d": 1}
SPREAD_42_1_3 = {"node-a": 4, "node-b": 2, "node-x": 1, "node-y": 3}


def zone_host(*specs: tuple[str, str]) -> list[NodeInfo]:
    return [N(name, zone=zone, labels_={HOST: name}) for name, zone in specs]


SCORE_CASES = [
    (
        "one constraint on node, no existing pods",
        P(FOO_POD, C(1, HOST, SA)),
        host_nodes("node-a", "node-b"),
        [],
        [],
        {"node-a": 100, "node-b": 100},
    ),
    (
        "one constraint on node, only one node is candidate",
        P(FOO_POD, C(1, HOST, SA)),
        host_nodes("node-a"),
        host_nodes("node-b"),
        spread_on({"node-a": 2, "node-b": 1}, foo=""),
        {"node-a": 100},
    ),
    (
        "one constraint on node, all nodes have the same number of matching pods",
        P(FOO_POD, C(1, HOST, SA)),
        host_nodes("node-a", "node-b"),
        [],
        spread_on({"node-a": 1, "node-b": 1}, foo=""),
        {"node-a": 100, "node-b": 100},
    ),
    (
        "one constraint on node, all 4 nodes are candidates",
        P(FOO_POD, C(1, HOST, SA)),
        host_nodes(*H4),
        [],
        spread_on({"node-a": 2, "node-b": 1, "node-d": 3}, foo=""),
        {"node-a": 20, "node-b": 60, "node-c": 100, "node-d": 0},
    ),
    (
        "one constraint on node, null selector",
        P(FOO_POD, C(1, HOST, SA, NULL)),
        host_nodes(*H4),
        [],
        spread_on({"node-a": 2, "node-b": 1, "node-d": 3}, foo=""),
        dict.fromkeys(H4, 100),
    ),
    (
        "one constraint on node, all 4 nodes are candidates, maxSkew=2",
        P(FOO_POD, C(2, HOST, SA)),
        host_nodes(*H4),
        [],
        spread_on({"node-a": 2, "node-b": 1, "node-d": 3}, foo=""),
        {"node-a": 33, "node-b": 66, "node-c": 100, "node-d": 16},
    ),
    (
        "one constraint on node, all 4 nodes are candidates, maxSkew=3",
        P(FOO_POD, C(3, HOST, SA)),
        host_nodes(*H4),
        [],
        spread_on(SPREAD_4321, foo=""),
        {"node-a": 44, "node-b": 66, "node-c": 77, "node-d": 100},
    ),
    (
        "one constraint on node, 3 out of 4 nodes are candidates",
        P(FOO_POD, C(1, HOST, SA)),
        host_nodes("node-a", "node-b", "node-x"),
        host_nodes("node-y"),
        spread_on(SPREAD_42_1_3, foo=""),
        {"node-a": 33, "node-b": 83, "node-x": 100},
    ),
    (
        "one constraint on node, 3 out of 4 nodes are candidates, one node doesn't match topology key",
        P(FOO_POD, C(1, HOST, SA)),
        [N("node-a", labels_={HOST: "node-a"}), N("node-b", n="node-b"), N("node-x", labels_={HOST: "node-x"})],
        host_nodes("node-y"),
        spread_on(SPREAD_42_1_3, foo=""),
        {"node-a": 16, "node-b": 0, "node-x": 100},
    ),
    (
        "one constraint on zone, 3 out of 4 nodes are candidates",
        P(FOO_POD, C(1, "zone", SA)),
        zone_host(("node-a", "zone1"), ("node-b", "zone1"), ("node-x", "zone2")),
        zone_host(("node-y", "zone2")),
        spread_on(SPREAD_42_1_3, foo=""),
        {"node-a": 75, "node-b": 75, "node-x": 100},
    ),
    (
        "two Constraints on zone and node, 2 out of 4 nodes are candidates",
        P(FOO_POD, C(1, "zone", SA), C(1, HOST, SA)),
        zone_host(("node-a", "zone1"), ("node-x", "zone2")),
        zone_host(("node-b", "zone1"), ("node-y", "zone2")),
        spread_on({"node-a": 2, "node-b": 1, "node-x": 2, "node-y": 4}, foo=""),
        {"node-a": 100, "node-x": 63},
    ),
    (
        "two Constraints on zone, 2 out of 4 nodes are candidates",
        P(FOO_BAR_POD, C(1, "zone", SA), C(1, "zone", SA, BAR)),
        [N("node-a", zone="zone1"), N("node-x", zone="zone2")],
        [N("node-b", zone="zone1"), N("node-y", zone="zone2")],
        [
            E("p-a1", "node-a", foo="", bar=""),
            E("p-a2", "node-a", foo=""),
            E("p-b1", "node-b", foo="", bar=""),
            E("p-y1", "node-y", foo=""),
            E("p-y2", "node-y", foo="", bar=""),
            E("p-y3", "node-y", foo=""),
        ],
        {"node-a": 85, "node-x": 100},
    ),
    (
        "two Constraints on zone and node, with different labelSelectors",
        P(FOO_BAR_POD, C(1, "zone", SA), C(1, HOST, SA, BAR)),
        zone_host(("node-a", "zone1"), ("node-b", "zone1"), ("node-x", "zone2"), ("node-y", "zone2")),
        [],
        [
            E("p-a1", "node-a", foo=""),
            E("p-b1", "node-b", foo="", bar=""),
            E("p-y1", "node-y", foo=""),
            E("p-y2", "node-y", bar=""),
        ],
        {"node-a": 60, "node-b": 20, "node-x": 100, "node-y": 60},
    ),
    (
        "two Constraints on zone and node, with different labelSelectors, some nodes have 0 pods",
        P(FOO_BAR_POD, C(1, "zone", SA), C(1, HOST, SA, BAR)),
        zone_host(("node-a", "zone1"), ("node-b", "zone1"), ("node-x", "zone2"), ("node-y", "zone2")),
        [],
        [E("p-b1", "node-b", bar=""), E("p-x1", "node-x", foo=""), E("p-y1", "node-y", foo="", bar="")],
        {"node-a": 100, "node-b": 60, "node-x": 40, "node-y": 0},
    ),
    (
        "two Constraints on zone and node, with different labelSelectors, 3 out of 4 nodes are candidates",
        P(FOO_BAR_POD, C(1, "zone", SA), C(1, HOST, SA, BAR)),
        zone_host(("node-a", "zone1"), ("node-b", "zone1"), ("node-x", "zone2")),
        zone_host(("node-y", "zone2")),
        [
            E("p-a1", "node-a", foo=""),
            E("p-b1", "node-b", foo="", bar=""),
            E("p-y1", "node-y", foo=""),
            E("p-y2", "node-y", bar=""),
        ],
        {"node-a": 50, "node-b": 25, "node-x": 100},
    ),
    (
        "existing pods in a different namespace do not count",
        P(FOO_POD, C(1, HOST, SA)),
        host_nodes("node-a", "node-b"),
        [],
        [
            E("p-a1", "node-a", ns="ns1", foo=""),
            E("p-a2", "node-a", foo=""),
            E("p-b1", "node-b", foo=""),
            E("p-b2", "node-b", foo=""),
        ],
        {"node-a": 100, "node-b": 33},
    ),
    (
        "terminating Pods should be excluded",
        P(FOO_POD, C(1, HOST, SA)),
        host_nodes("node-a", "node-b"),
        [],
        [E("p-a", "node-a", terminating=True, foo=""), E("p-b", "node-b", foo="")],
        {"node-a": 100, "node-b": 0},
    ),
    (
        "minDomains has no effect when ScheduleAnyway",
        P(FOO_POD, C(2, "node", SA, min_domains=10)),
        THREE_HOSTS,
        [],
        spread_on({"node-a": 2, "node-b": 2, "node-c": 1}, foo=""),
        {"node-a": 75, "node-b": 75, "node-c": 100},
    ),
    (
        "NodeAffinityPolicy honoed with labelSelectors",
        P(FOO_POD, C(1, "node", SA), node_selector={"foo": ""}),
        [N("node-a", node="node-a", foo=""), N("node-b", node="node-b", foo=""), N("node-c", node="node-c")],
        [],
        spread_on({"node-a": 2, "node-b": 1, "node-c": 1}, foo=""),
        {"node-a": 0, "node-b": 33, "node-c": 100},
    ),
    (
        "NodeAffinityPolicy ignored with labelSelectors",
        P(FOO_POD, C(1, "node", SA, affinity_policy=IGNORE), node_selector={"foo": ""}),
        [N("node-a", node="node-a", foo=""), N("node-b", node="node-b", foo=""), N("node-c", node="node-c")],
        [],
        spread_on({"node-a": 2, "node-b": 1, "node-c": 1}, foo=""),
        {"node-a": 66, "node-b": 100, "node-c": 100},
    ),
    (
        "NodeAffinityPolicy honoed with nodeAffinity",
        P(FOO_POD, C(1, "node", SA), affinity=FOO_IN_EMPTY),
        [N("node-a", node="node-a", foo=""), N("node-b", node="node-b", foo=""), N("node-c", node="node-c")],
        [],
        spread_on({"node-a": 2, "node-b": 1, "node-c": 1}, foo=""),
        {"node-a": 0, "node-b": 33, "node-c": 100},
    ),
    (
        "NodeAffinityPolicy ignored with nodeAffinity",
        P(FOO_POD, C(1, "node", SA, affinity_policy=IGNORE), affinity=FOO_IN_EMPTY),
        [N("node-a", node="node-a", foo=""), N("node-b", node="node-b", foo=""), N("node-c", node="node-c")],
        [],
        spread_on({"node-a": 2, "node-b": 1, "node-c": 1}, foo=""),
        {"node-a": 66, "node-b": 100, "node-c": 100},
    ),
    (
        "NodeTaintsPolicy honored",
        P(FOO_POD, C(1, "node", SA, taints_policy=HONOR)),
        [N("node-a", node="node-a"), N("node-b", node="node-b"), N("node-c", node="node-c", taints=[UNSCHED_TAINT])],
        [],
        spread_on({"node-a": 2, "node-b": 1, "node-c": 1}, foo=""),
        {"node-a": 0, "node-b": 33, "node-c": 100},
    ),
    (
        "NodeTaintsPolicy ignored",
        P(FOO_POD, C(1, "node", SA)),
        [N("node-a", node="node-a"), N("node-b", node="node-b"), N("node-c", node="node-c", taints=[UNSCHED_TAINT])],
        [],
        spread_on({"node-a": 2, "node-b": 1, "node-c": 1}, foo=""),
        {"node-a": 66, "node-b": 100, "node-c": 100},
    ),
    (
        "matchLabelKeys ANDed with LabelSelector when LabelSelector is empty",
        P(
            FOO_BAR_POD,
            C(1, "zone", SA, EMPTY, match_label_keys=["foo"]),
            C(1, HOST, SA, EMPTY, match_label_keys=["bar"]),
        ),
        zone_host(("node-a", "zone1"), ("node-b", "zone1"), ("node-c", "zone2"), ("node-d", "zone2")),
        [],
        [
            E("p-a1", "node-a", foo=""),
            E("p-b1", "node-b", foo="", bar=""),
            E("p-y1", "node-c", foo=""),
            E("p-y2", "node-c", bar=""),
        ],
        {"node-a": 60, "node-b": 20, "node-c": 60, "node-d": 100},
    ),
    (
        "matchLabelKeys ANDed with LabelSelector when LabelSelector isn't empty",
        P({"foo": "", "bar": "", "baz": ""}, C(1, "zone", SA), C(1, HOST, SA, BAR, match_label_keys=["baz"])),
        zone_host(("node-a", "zone1"), ("node-b", "zone1"), ("node-c", "zone2"), ("node-d", "zone2")),
        [],
        [
            E("p-a1", "node-a", foo=""),
            E("p-b1", "node-b", foo="", bar="", baz=""),
            E("p-c1", "node-c", foo=""),
            E("p-c2", "node-c", bar=""),
            E("p-d3", "node-c", bar="", baz=""),
        ],
        {"node-a": 60, "node-b": 20, "node-c": 60, "node-d": 100},
    ),
]


@pytest.mark.parametrize("name, pod, nodes, failed, existing, want", SCORE_CASES, ids=[c[0] for c in SCORE_CASES])
def test_score(name, pod, nodes, failed, existing, want):
    assert scores(pod, nodes, failed, existing) == want


def test_score_system_defaulting_uses_the_pod_group():
    """'system defaulting, nodes don't have zone, pods match service': the same
    scores as one hostname constraint with maxSkew 3 (the zone one is absent)."""
    existing = spread_on(SPREAD_4321, **{POD_GROUP_LABEL: "g"}) + spread_on(
        SPREAD_4321, prefix="other", **{POD_GROUP_LABEL: "h"}
    )
    got = scores(P(group="g"), host_nodes(*H4), [], existing)
    assert got == {"node-a": 44, "node-b": 66, "node-c": 77, "node-d": 100}
    # a pod in no group is not scored (PreScore Skip): 0 everywhere
    assert scores(P(), host_nodes(*H4), [], existing) == dict.fromkeys(H4, 0)


def test_score_system_defaults_nodes_without_zone_form_a_zone():
    """TestPreScoreStateEmptyNodes 'system default constraints and a replicaset':
    nodes without a zone are one more zone ("" value) under System defaulting,
    so the zone weight is log(2 + 2) and hostname log(4 + 2)."""
    g = {POD_GROUP_LABEL: "g"}
    nodes = [
        N("node-a", labels_={HOST: "node-a", LABEL_ZONE: "mars"}),
        N("node-b", labels_={HOST: "node-b", LABEL_ZONE: "mars"}),
        N("node-c", labels_={HOST: "node-c"}),
        N("node-d", labels_={HOST: "node-d"}),
    ]
    existing = spread_on({"node-a": 4, "node-c": 3}, **g)
    wz, wh = math.log(4), math.log(6)
    # hostname maxSkew 3, zone maxSkew 5; counts: zone mars 4, zone "" 3
    raw = {
        "node-a": round(4 * wh + 2 + 4 * wz + 4),
        "node-b": round(0 * wh + 2 + 4 * wz + 4),
        # no zone label: no zone term (upstream Score skips it), but the ""
        # domain makes the zone weight log(4) rather than log(3)
        "node-c": round(3 * wh + 2),
        "node-d": round(0 * wh + 2),
    }
    hi, lo = max(raw.values()), min(raw.values())
    want = {k: 100 * (hi + lo - v) // hi for k, v in raw.items()}
    assert scores(P(group="g"), nodes, [], existing) == want
    assert want == {"node-a": 10, "node-b": 47, "node-c": 73, "node-d": 100}
    # with log(3) the scores would differ: the "" zone is really counted
    assert round(4 * wh + 2 + 4 * math.log(3) + 4) != raw["node-a"]


def test_score_list_defaulting_requires_all_keys():
    """Non-system default constraints require every key, like a pod's own."""
    args = {
        "defaultingType": "List",
        "defaultConstraints": [
            {"maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": SA},
            {"maxSkew": 2, "topologyKey": "rack", "whenUnsatisfiable": DNS},
            {"maxSkew": 2, "topologyKey": "planet", "whenUnsatisfiable": SA},
        ],
    }
    g = {POD_GROUP_LABEL: "g"}
    nodes = [
        N("node-a", rack="rack1", planet="mars", labels_={HOST: "node-a"}),
        N("node-b", planet="mars", labels_={HOST: "node-b"}),
        N("node-c", labels_={HOST: "node-c"}),
    ]
    existing = spread_on({"node-a": 2, "node-b": 1, "node-c": 5}, **g)
    # node-c lacks planet: ignored (0); node-a 2*log(4)+0 + 3*log(3)+1, node-b 1*log(4) + 3*log(3)+1
    got = scores(P(group="g"), nodes, [], existing, args)
    raw_a = round(2 * math.log(4) + 3 * math.log(3) + 1)
    raw_b = round(1 * math.log(4) + 3 * math.log(3) + 1)
    assert got == {"node-a": 100 * (raw_a + raw_b - raw_a) // raw_a, "node-b": 100, "node-c": 0}


def test_pre_score_skip():
    """TestPreScoreSkip: no soft constraints -> every node IGNORED -> 0."""
    cache = make_cache(host_nodes("node-a", "node-b"))
    snap = cache.snapshot()
    pl = plugin(LIST, cache)
    raw = pl.score(CycleState(), P(), snap, np.arange(2))
    assert raw.tolist() == [IGNORED, IGNORED]
    assert pl.normalize(raw).tolist() == [0, 0]
    raw = pl.score(CycleState(), P(FOO_POD, C(1, HOST, DNS)), snap, np.arange(2))
    assert raw.tolist() == [IGNORED, IGNORED]


def test_normalize():
    pl = plugin()
    assert pl.normalize(np.array([4, 2, 0, IGNORED])).tolist() == [0, 50, 100, 0]
    assert pl.normalize(np.array([0, 0])).tolist() == [100, 100]
    assert pl.normalize(np.array([3, 5])).tolist() == [100, 60]  # 100*(5+3-3)/5, 100*(5+3-5)/5
    assert pl.normalize(np.array([], dtype=np.int64)).tolist() == []


# ===================================================== through the framework


def registry():
    reg = in_tree_registry()
    reg.register(PodTopologySpread)
    return reg


def framework(
    cache: ClusterCache, args: Mapping[str, Any] | None = None, enable: bool = True, weight: int = 2
) -> Framework:
    raw: dict[str, Any] = {}
    if enable:
        raw["plugins"] = {
            "filter": {"enabled": [{"name": "PodTopologySpread"}]},
            "score": {"enabled": [{"name": "PodTopologySpread", "weight": weight}]},
        }
    else:  # it is in the default profile: take it out for the baseline
        raw["plugins"] = {
            "filter": {"disabled": [{"name": "PodTopologySpread"}]},
            "score": {"disabled": [{"name": "PodTopologySpread"}]},
        }
    if args is not None:
        raw["pluginConfig"] = [{"name": "PodTopologySpread", "args": dict(args)}]
    return Framework(Profile.model_validate(raw), registry(), Handle(cache))


def test_diagnosis_message_through_schedule_pod():
    nodes = [
        N("node-a", zone="zone1", disk="ssd"),
        N("node-b", zone="zone1", disk="ssd"),
        N("node-x", zone="zone2"),
        N("node-n", disk="ssd"),
    ]
    cache = make_cache(nodes, spread_on({"node-a": 1, "node-b": 1}, foo=""))
    fwk = framework(cache)
    # NodeAffinity rejects node-x, but with nodeAffinityPolicy Ignore its empty zone2 still sets the minimum to 0
    pod = P(FOO_POD, C(1, "zone", affinity_policy=IGNORE), node_selector={"disk": "ssd"})
    snap = cache.snapshot()
    result = schedule_pod(fwk, pod, snap)
    assert result.row is None
    assert result.diagnosis.message == (
        "0/4 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) didn't match pod topology spread constraints (missing required label), "
        "2 node(s) didn't match pod topology spread constraints."
    )
    assert not result.diagnosis.unresolvable  # the skew could be resolved
    only_label = P(FOO_POD, C(1, "rack"))
    result = schedule_pod(fwk, only_label, snap)
    assert (
        result.diagnosis.message
        == "0/4 nodes are available: 4 node(s) didn't match pod topology spread constraints (missing required label)."
    )
    assert result.diagnosis.unresolvable


def test_score_steers_placement():
    """ScheduleAnyway zone spreading overrides LeastAllocated's preference for the big node."""
    nodes = [
        make_node("big", "64", "256Gi", labels={"zone": "z1"}),
        make_node("small", "4", "8Gi", labels={"zone": "z2"}),
    ]
    existing = spread_on({"big": 3}, app="web")
    cache = make_cache(nodes, existing)
    pod = P({"app": "web"}, C(1, "zone", SA, {"matchLabels": {"app": "web"}}), cpu="1")
    with_spread = schedule_pod(framework(cache, weight=2), pod, cache.snapshot())
    without = schedule_pod(framework(cache, enable=False), pod, cache.snapshot())
    snap = cache.snapshot()
    assert snap.names[without.row] == "big"
    assert snap.names[with_spread.row] == "small"


def gang_cycle(pods, group, nodes, existing=(), enable=True):
    cache = make_cache(nodes, existing, [group])
    fwk = framework(cache, enable=enable)
    snap = cache.snapshot()
    return schedule_group(fwk, snap, group.key, group, pods), snap


def zone_nodes() -> list[NodeInfo]:
    # zone1's node is much bigger: LeastAllocated alone would put every pod there
    return [
        make_node("z1-big", "64", "256Gi", labels={"zone": "zone1"}),
        make_node("z2-n", "8", "32Gi", labels={"zone": "zone2"}),
        make_node("z3-n", "8", "32Gi", labels={"zone": "zone3"}),
    ]


def gang(n: int, max_skew: int = 1) -> list[PodInfo]:
    sel = {"matchLabels": {POD_GROUP_LABEL: "g"}}
    return [P(None, C(max_skew, "zone", DNS, sel), name=f"w{i}", group="g", cpu="1") for i in range(n)]


def test_gang_spreads_over_zones_in_one_cycle():
    decision, snap = gang_cycle(gang(6), make_group("g", 6), zone_nodes())
    assert decision.scheduled, decision.message
    per_zone: dict[str, int] = {}
    for p in decision.assignments:
        zone = {"z1-big": "zone1", "z2-n": "zone2", "z3-n": "zone3"}[p.node]
        per_zone[zone] = per_zone.get(zone, 0) + 1
    assert per_zone == {"zone1": 2, "zone2": 2, "zone3": 2}
    # the snapshot's match counts include the pods assumed in this cycle
    assert len(snap.assumed) == 6
    # control: without the plugin the same gang packs onto the big node
    control, _ = gang_cycle(gang(6), make_group("g", 6), zone_nodes(), enable=False)
    assert {p.node for p in control.assignments} == {"z1-big"}


def test_gang_seven_pods_spread_three_two_two():
    decision, _ = gang_cycle(gang(7), make_group("g", 7), zone_nodes())
    counts = sorted(
        (sum(1 for p in decision.assignments if p.node == n) for n in ("z1-big", "z2-n", "z3-n")), reverse=True
    )
    assert decision.scheduled and counts == [3, 2, 2]


def test_gang_blocked_by_a_full_zone():
    """zone3 cannot take a pod, so with maxSkew 1 at most one pod per other zone
    fits: a gang of 4 cannot reach minCount and nothing is placed."""
    nodes = zone_nodes()[:2] + [make_node("z3-n", "0", "32Gi", labels={"zone": "zone3"})]
    decision, _ = gang_cycle(gang(4), make_group("g", 4), nodes)
    assert not decision.scheduled and decision.assignments == []
    assert "node(s) didn't match pod topology spread constraints" in decision.message
    assert "Insufficient cpu" in decision.message


def test_existing_group_pods_count_with_assumed_ones():
    existing = [E("old-0", "z1-big", **{POD_GROUP_LABEL: "g"}), E("old-1", "z1-big", **{POD_GROUP_LABEL: "g"})]
    decision, _ = gang_cycle(gang(4), make_group("g", 4), zone_nodes(), existing)
    assert decision.scheduled
    # 2 already in zone1: the 4 new ones fill zone2 and zone3 to 2 each
    assert sorted(p.node for p in decision.assignments) == ["z2-n", "z2-n", "z3-n", "z3-n"]


def test_masks_follow_node_changes():
    """The cached eligibility masks are dropped when labels/taints change."""
    nodes = [N("node-a", node="node-a"), N("node-b", node="node-b")]
    cache = make_cache(nodes, spread_on({"node-a": 1}, foo=""))
    pl = plugin(LIST, cache)
    pod = P(FOO_POD, C(1, "node", taints_policy=HONOR))
    assert pl.filter(CycleState(), pod, cache.snapshot()).feasible[[0, 1]].tolist() == [False, True]
    cache.upsert_node(N("node-b", node="node-b", taints=[UNSCHED_TAINT]))  # node-b now excluded from the domains
    assert pl.filter(CycleState(), pod, cache.snapshot()).feasible[[0, 1]].tolist() == [True, True]


# ============================================================ hypothesis


ZONES = ["z1", "z2", "z3", ""]
LABEL_VALUES = ["a", "b"]
SELECTORS: list[Any] = [
    None,
    {},
    {"matchLabels": {"app": "a"}},
    {"matchExpressions": [{"key": "app", "operator": "Exists"}]},
    {
        "matchExpressions": [
            {"key": "app", "operator": "In", "values": ["b"]},
            {"key": "tier", "operator": "DoesNotExist"},
        ]
    },
    {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["a"]}]},
]
TAINT_CHOICES = [[], [], [taint("t", "x")], [taint("t", "x", "NoExecute")], [taint("t", "x", "PreferNoSchedule")]]

node_st = st.fixed_dictionaries(
    {
        "zone": st.sampled_from(["z1", "z2", "z3", "z1", "z2", "", None]),  # None: no zone label; "" an empty value
        "host": st.sampled_from([True, True, True, False]),
        "rack": st.sampled_from([None, "r1", "r2", "r1", "r2"]),
        "disk": st.sampled_from([None, "ssd"]),
        "taints": st.sampled_from(TAINT_CHOICES),
    }
)
existing_st = st.fixed_dictionaries(
    {
        "node": st.integers(0, 5),
        "ns": st.sampled_from(["default", "default", "default", "other"]),
        "app": st.sampled_from([None, "a", "a", "b"]),
        "tier": st.sampled_from([None, "web"]),
        "terminating": st.sampled_from([False, False, False, True]),
    }
)


def constraint_st(when: Sequence[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {
            "max_skew": st.sampled_from([1, 1, 1, 2, 3]),
            "key": st.sampled_from(["zone", "rack", HOST]),
            "when": st.sampled_from(when),
            "selector": st.sampled_from([0, 1, 2, 2, 2, 3, 3, 3, 4, 5]),  # index into SELECTORS
            "min_domains": st.sampled_from([None, None, 1, 2, 4]),
            "affinity_policy": st.sampled_from([None, HONOR, IGNORE]),
            "taints_policy": st.sampled_from([None, HONOR, IGNORE]),
            "mlk": st.sampled_from([None, None, None, ["tier"], ["app", "tier"]]),
        }
    )


def incoming_st(when: Sequence[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {
            "app": st.sampled_from([None, "a", "b"]),
            "tier": st.sampled_from([None, "web"]),
            "disk": st.booleans(),
            "tolerate": st.booleans(),
            "constraints": st.lists(constraint_st(when), min_size=1, max_size=2),
        }
    )


def build_cluster(node_specs, existing_specs, zone_key: str = "zone"):
    """Nodes n0.. and existing pods; pods with app=a are also in PodGroup g."""
    nodes = []
    for i, s in enumerate(node_specs):
        labels = {}
        if s["zone"] is not None:
            labels[zone_key] = s["zone"]
        if s["host"]:
            labels[HOST] = f"n{i}"
        if s["rack"]:
            labels["rack"] = s["rack"]
        if s["disk"]:
            labels["disk"] = s["disk"]
        nodes.append(make_node(f"n{i}", "100", "100Gi", 500, labels=labels, taints=s["taints"]))
    existing = []
    for j, e in enumerate(existing_specs):
        labels = {k: e[k] for k in ("app", "tier") if e[k] is not None}
        if e["app"] == "a":
            labels[POD_GROUP_LABEL] = "g"
        existing.append(
            make_pod(
                f"e{j}",
                node_name=f"n{e['node'] % len(nodes)}",
                phase="Running",
                namespace=e["ns"],
                deleting=e["terminating"],
                labels=labels,
            )
        )
    return nodes, existing


def build_incoming(spec):
    labels = {k: spec[k] for k in ("app", "tier") if spec[k] is not None}
    cons = [
        C(
            c["max_skew"],
            c["key"],
            c["when"],
            SELECTORS[c["selector"]],
            min_domains=c["min_domains"],
            affinity_policy=c["affinity_policy"],
            taints_policy=c["taints_policy"],
            match_label_keys=c["mlk"],
        )
        for c in spec["constraints"]
    ]
    kw: dict[str, Any] = {}
    if spec["disk"]:
        kw["node_selector"] = {"disk": "ssd"}
    if spec["tolerate"]:
        kw["tolerations"] = [toleration("t", operator="Exists")]
    return P(labels, *cons, **kw)


# --- the reference: upstream's Go, transliterated per node with dicts --------


def ref_selector(raw, pod_labels, mlk):
    """-> (matches(labels) function, empty?) after matchLabelKeys, like LabelSelectorAsSelector + merge."""
    if raw is None:
        return (lambda labels: False), False
    reqs = [(k, "In", [v]) for k, v in (raw.get("matchLabels") or {}).items()]
    reqs += [(r["key"], r["operator"], r.get("values", [])) for r in raw.get("matchExpressions") or []]
    for k in mlk or []:
        if k in pod_labels:
            reqs.append((k, "In", [pod_labels[k]]))

    def matches(labels):
        for k, op, vs in reqs:
            if op == "In" and not (k in labels and labels[k] in vs):
                return False
            if op == "NotIn" and k in labels and labels[k] in vs:
                return False
            if op == "Exists" and k not in labels:
                return False
            if op == "DoesNotExist" and k in labels:
                return False
        return True

    return matches, not reqs


def ref_constraints(spec, action):
    pod_labels = {k: spec[k] for k in ("app", "tier") if spec[k] is not None}
    out = []
    for c in spec["constraints"]:
        if c["when"] != action:
            continue
        matches, empty = ref_selector(SELECTORS[c["selector"]], pod_labels, c["mlk"])
        out.append(
            dict(
                c,
                matches=matches,
                empty=empty,
                min_domains=c["min_domains"] or 1,
                affinity_policy=c["affinity_policy"] or HONOR,
                taints_policy=c["taints_policy"] or IGNORE,
            )
        )
    return out, pod_labels


def ref_node_passes_policies(c, spec, node):
    if c["affinity_policy"] == HONOR and spec["disk"] and node.labels.get("disk") != "ssd":
        return False
    if c["taints_policy"] == HONOR:
        for t in node.taints:
            if t.effect in ("NoSchedule", "NoExecute") and not spec["tolerate"]:
                return False
    return True


def ref_count(c, node_name, existing):
    if c["empty"]:
        return 0
    return sum(
        1
        for p in existing
        if p.node_name == node_name and not p.deleting and p.namespace == "default" and c["matches"](p.labels)
    )


def ref_filter(spec, nodes, existing):
    constraints, pod_labels = ref_constraints(spec, DNS)
    if not constraints:
        return {n.name: S for n in nodes}
    tp = [dict() for _ in constraints]
    for node in nodes:
        if not all(c["key"] in node.labels for c in constraints):
            continue
        for i, c in enumerate(constraints):
            if not ref_node_passes_policies(c, spec, node):
                continue
            v = node.labels[c["key"]]
            tp[i][v] = tp[i].get(v, 0) + ref_count(c, node.name, existing)
    out = {}
    for node in nodes:
        code = S
        for i, c in enumerate(constraints):
            if c["key"] not in node.labels:
                code = UU
                break
            min_match = min(tp[i].values()) if tp[i] else MAX32
            if len(tp[i]) < c["min_domains"]:
                min_match = 0
            self_match = 1 if c["matches"](pod_labels) else 0
            if tp[i].get(node.labels[c["key"]], 0) + self_match - min_match > c["max_skew"]:
                code = U
                break
        out[node.name] = code
    return out


MAX32 = 2**31 - 1


def ref_score(spec, nodes, filtered, existing, system: bool = False):
    if system:  # upstream systemDefaultConstraints, selector = the PodGroup's
        in_g = lambda labels: labels.get(POD_GROUP_LABEL) == "g"  # noqa: E731
        constraints = [
            dict(key=k, max_skew=m, matches=in_g, empty=False, affinity_policy=HONOR, taints_policy=IGNORE)
            for k, m in ((HOST, 3), (LABEL_ZONE, 5))
        ]
    else:
        constraints, _ = ref_constraints(spec, SA)
    if not constraints:
        return {n.name: 0 for n in filtered}
    require_all = not system
    ignored = {n.name for n in filtered if require_all and not all(c["key"] in n.labels for c in constraints)}
    counts = [dict() for _ in constraints]
    size = [0] * len(constraints)
    for n in filtered:
        if n.name in ignored:
            continue
        for i, c in enumerate(constraints):
            if c["key"] == HOST:
                continue
            v = n.labels.get(c["key"], "")
            if v not in counts[i]:
                counts[i][v] = 0
                size[i] += 1
    weights = [
        math.log((len(filtered) - len(ignored) if c["key"] == HOST else size[i]) + 2) for i, c in enumerate(constraints)
    ]
    for node in nodes:
        if require_all and not all(c["key"] in node.labels for c in constraints):
            continue
        for i, c in enumerate(constraints):
            if not ref_node_passes_policies(c, spec, node):
                continue
            v = node.labels.get(c["key"], "")
            if c["key"] == HOST or v not in counts[i]:
                continue
            counts[i][v] += ref_count(c, node.name, existing)
    raw = {}
    for n in filtered:
        if n.name in ignored:
            raw[n.name] = -1
            continue
        s = 0.0
        for i, c in enumerate(constraints):
            if c["key"] in n.labels:
                cnt = ref_count(c, n.name, existing) if c["key"] == HOST else counts[i][n.labels[c["key"]]]
                s += cnt * weights[i] + (c["max_skew"] - 1)
        raw[n.name] = int(math.floor(s + 0.5))
    live = [v for v in raw.values() if v != -1]
    lo, hi = (min(live), max(max(live), 0)) if live else (0, 0)
    out = {}
    for name, v in raw.items():
        if v == -1:
            out[name] = 0
        elif hi == 0:
            out[name] = 100
        else:
            out[name] = 100 * (hi + lo - v) // hi
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    node_specs=st.lists(node_st, min_size=2, max_size=6),
    existing_specs=st.lists(existing_st, min_size=2, max_size=16),
    spec=incoming_st([DNS, DNS, DNS, SA]),
)
def test_filter_agrees_with_per_node_reference(node_specs, existing_specs, spec):
    nodes, existing = build_cluster(node_specs, existing_specs)
    pod = build_incoming(spec)
    want = ref_filter(spec, nodes, existing)
    event("codes: " + "/".join(sorted(set(want.values()))))
    assert filter_codes(pod, nodes, existing) == want


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    node_specs=st.lists(node_st, min_size=2, max_size=6),
    existing_specs=st.lists(existing_st, min_size=2, max_size=16),
    spec=incoming_st([SA, SA, SA, DNS]),
    filtered=st.lists(st.sampled_from([True, True, False]), min_size=6, max_size=6),
)
def test_score_agrees_with_per_node_reference(node_specs, existing_specs, spec, filtered):
    nodes, existing = build_cluster(node_specs, existing_specs)
    chosen = [n for n, keep in zip(nodes, filtered) if keep] or nodes[:1]
    pod = build_incoming(spec)
    want = ref_score(spec, nodes, chosen, existing)
    event(f"distinct scores: {min(len(set(want.values())), 3)}")
    assert scores(pod, chosen, [n for n in nodes if n not in chosen], existing, LIST) == want


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    node_specs=st.lists(node_st, min_size=2, max_size=6),
    existing_specs=st.lists(existing_st, min_size=2, max_size=16),
    spec=incoming_st([SA]),
    filtered=st.lists(st.sampled_from([True, True, False]), min_size=6, max_size=6),
)
def test_system_default_score_agrees_with_per_node_reference(node_specs, existing_specs, spec, filtered):
    """System defaulting: hostname + zone over the pod's group, nodes without a
    zone forming the "" zone, nodes without a hostname still scored."""
    nodes, existing = build_cluster(node_specs, existing_specs, zone_key=LABEL_ZONE)
    chosen = [n for n, keep in zip(nodes, filtered) if keep] or nodes[:1]
    kw: dict[str, Any] = {"node_selector": {"disk": "ssd"}} if spec["disk"] else {}
    pod = P(None, group="g", **kw)
    want = ref_score(spec, nodes, chosen, existing, system=True)
    event(f"distinct scores: {min(len(set(want.values())), 3)}")
    assert scores(pod, chosen, [n for n in nodes if n not in chosen], existing, {}) == want


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    node_specs=st.lists(node_st, min_size=1, max_size=6),
    existing_specs=st.lists(existing_st, max_size=8),
    spec=incoming_st([DNS, DNS, DNS, SA]),
    k=st.integers(1, 5),
)
def test_counts_stay_current_as_pods_are_assumed(node_specs, existing_specs, spec, k):
    """After each assume, the filter on the same snapshot equals the reference
    on a cluster where the assumed pods are bound."""
    nodes, existing = build_cluster(node_specs, existing_specs)
    cache = make_cache(nodes, existing)
    snap = cache.snapshot()
    pl = plugin(LIST, cache)
    bound = list(existing)
    for i in range(k):
        pod = build_incoming(spec)
        result = pl.filter(CycleState(), pod, snap)
        ref = ref_filter(spec, nodes, bound)
        assert {n.name: result.feasible[snap.row[n.name]] for n in nodes} == {n: c == S for n, c in ref.items()}
        rows = [snap.row[n.name] for n in nodes if result.feasible[snap.row[n.name]]]
        if not rows:
            break
        row = rows[i % len(rows)]
        placed = make_pod(f"new{i}", node_name=snap.names[row], phase="Running", labels=dict(pod.labels))
        vec = snap.request_vector(pod)[0]
        snap.assume(row, vec, (pod.nonzero_cpu, pod.nonzero_memory), pod)
        bound.append(placed)
