"""NodeResourcesFit scoring strategies MostAllocated and RequestedToCapacityRatio,
and the validation of NodeResourcesFit args. Cases and exact scores follow
upstream v1.37 noderesources/most_allocated_test.go,
requested_to_capacity_ratio_test.go and
apis/config/validation/validation_pluginargs_test.go (TestValidateFitArgs,
TestValidate*ScoringStrategy; upstream's messages in troupe's
`path: message` form, the path from the profile). As there, cpu "4000" is
4000 cores and memory "10000" is 10000 bytes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from scheduler.api.records import NodeInfo, PodInfo
from scheduler.core.schedule_one import schedule_pod
from scheduler.framework.framework import ProfileError
from scheduler.framework.interface import CycleState
from scheduler.plugins.noderesources import NodeResourcesFit
from scheduler.plugins.noderesources.resource_allocation import go_div
from scheduler.plugins.noderesources.scoring import broken_linear

from .builders import MiB, container, make_cache, make_framework, make_node, make_pod, profile_with_args

EXT = "abc.com/xyz"  # upstream extendedRes
FOO = "intel.com/foo"
BAR = "intel.com/bar"
DEFAULT = [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]
EXTENDED_SET = DEFAULT + [{"name": EXT, "weight": 1}]


def scores(
    pod: PodInfo, nodes: Sequence[NodeInfo], existing: Sequence[PodInfo] = (), args: Mapping[str, Any] | None = None
) -> list[int]:
    """Raw NodeResourcesFit scores (no normalize upstream) of every node, in order."""
    cache = make_cache(nodes, existing)
    fwk = make_framework(cache, profile_with_args("NodeResourcesFit", args or {}))
    snap = cache.snapshot()
    plugin = fwk.plugins["NodeResourcesFit"]
    rows = np.array([snap.row[n.name] for n in nodes])
    return [int(s) for s in plugin.normalize(plugin.score(CycleState(), pod, snap, rows))]


def most(resources: Sequence[Mapping[str, Any]] | None = DEFAULT) -> dict[str, Any]:
    return {"scoringStrategy": {"type": "MostAllocated", "resources": list(resources or [])}}


def rtcr(shape: Sequence[tuple[int, int]], resources: Sequence[Mapping[str, Any]] = DEFAULT) -> dict[str, Any]:
    return {
        "scoringStrategy": {
            "type": "RequestedToCapacityRatio",
            "resources": list(resources),
            "requestedToCapacityRatio": {"shape": [{"utilization": u, "score": s} for u, s in shape]},
        }
    }


def cap(name: str, cpu: str, memory: str | int, **extra: Any) -> NodeInfo:
    """st.MakeNode().Capacity(...): no pods allocatable (scoring ignores it)."""
    return make_node(name, cpu, memory, None, extra=extra or None)


def mk_node(name: str, milli_cpu: int, memory: int, extended: Mapping[str, int] | None = None) -> NodeInfo:
    """util_test.go makeNode: cpu in millicores, memory in bytes."""
    return make_node(
        name, f"{milli_cpu}m", memory, None, extra={k: str(v) for k, v in (extended or {}).items()} or None
    )


def req_pod(*reqs: Mapping[str, str], name: str = "p", node: str = "") -> PodInfo:
    """st.MakePod().Req(r1).Req(r2)...: one container per request map."""
    kw: dict[str, Any] = {"node_name": node, "phase": "Running"} if node else {}
    return make_pod(name, containers=[container(f"c{i}", dict(r)) for i, r in enumerate(reqs)], **kw)


def cm(cpu: str, memory: str, **extra: str) -> dict[str, str]:
    return {"cpu": cpu, "memory": memory, **extra}


EMPTY_POD = make_pod("p", containers=[])  # st.MakePod().Obj(): no containers, no non-zero defaults


# =========================================================== MostAllocated


def test_most_nothing_scheduled_nothing_requested():
    nodes = [cap("node1", "4000", "10000"), cap("node2", "4000", "10000")]
    assert scores(EMPTY_POD, nodes, args=most()) == [0, 0]


def test_most_nothing_scheduled_differently_sized_nodes():
    pod = req_pod(cm("1000", "2000"), cm("2000", "3000"))
    nodes = [cap("node1", "4000", "10000"), cap("node2", "6000", "10000")]
    assert scores(pod, nodes, args=most()) == [62, 50]


def test_most_resources_not_set_default_to_cpu_and_memory():
    # Upstream's internal API errors on an empty list; the v1 config API (ours)
    # defaults it to cpu and memory, weight 1.
    pod = req_pod(cm("1000", "2000"), cm("2000", "3000"))
    nodes = [cap("node1", "4000", "10000"), cap("node2", "6000", "10000")]
    assert scores(pod, nodes, args=most([])) == [62, 50]
    assert scores(pod, nodes, args={"scoringStrategy": {"type": "MostAllocated"}}) == [62, 50]


def test_most_no_resources_requested_pods_scheduled_with_resources():
    nodes = [cap("node1", "10000", "20000"), cap("node2", "10000", "20000")]
    existing = [
        req_pod(cm("3000", "0"), name="e1", node="node1"),
        req_pod(cm("3000", "0"), name="e2", node="node1"),
        req_pod(cm("3000", "0"), name="e3", node="node2"),
        req_pod(cm("3000", "5000"), name="e4", node="node2"),
    ]
    assert scores(EMPTY_POD, nodes, existing, most()) == [30, 42]


def test_most_resources_requested_pods_scheduled_with_resources():
    pod = req_pod(cm("1000", "2000"), cm("2000", "3000"))
    nodes = [cap("node1", "10000", "20000"), cap("node2", "10000", "20000")]
    existing = [req_pod(cm("3000", "0"), name="e1", node="node1"), req_pod(cm("3000", "5000"), name="e2", node="node2")]
    assert scores(pod, nodes, existing, most()) == [42, 55]


def test_most_resources_requested_equal_node_capacity():
    pod = req_pod(cm("2000", "4000"), cm("3000", "5000"))
    nodes = [cap("node1", "5000", "10000"), cap("node2", "10000", "9000")]
    assert scores(pod, nodes, args=most()) == [95, 75]


def test_most_weighted_resources():
    pod = req_pod(cm("1000", "2000"), cm("2000", "3000"))
    nodes = [cap("node1", "4000", "10000"), cap("node2", "6000", "10000")]
    args = most([{"name": "memory", "weight": 2}, {"name": "cpu", "weight": 1}])
    assert scores(pod, nodes, args=args) == [58, 50]


def test_most_nonzero_request_for_requestless_containers():
    # 100m / 200Mi per requestless container; cpu 300m on 250m caps at 100.
    pod = make_pod("p", containers=[container("container")])
    nodes = [cap("node1", "250m", "1000Mi"), cap("node2", "250m", "1000Mi")]
    existing = [
        make_pod(f"e{i}", containers=[container("container")], node_name="node1", phase="Running") for i in range(2)
    ]
    assert scores(pod, nodes, existing, most()) == [80, 30]


@pytest.mark.parametrize(
    "resources, field",
    [
        ([{"name": "memory", "weight": -1}, {"name": "cpu", "weight": 1}], "scoringStrategy.resources[0].weight"),
        ([{"name": "memory", "weight": 101}], "scoringStrategy.resources[0].weight"),
    ],
)
def test_most_weight_out_of_range_is_a_profile_error(resources, field):
    (line,) = profile_error(most(resources))
    assert line.startswith(f"{field}: invalid value ")
    assert line.endswith("resource weight of memory not in valid range (0, 100]")


def test_most_zero_weight_defaults_to_one():
    # Upstream's internal API rejects weight 0; the v1 API defaults it to 1.
    pod = req_pod(cm("1000", "2000"), cm("2000", "3000"))
    nodes = [cap("node1", "4000", "10000")]
    assert scores(pod, nodes, args=most([{"name": "memory", "weight": 1}, {"name": "cpu", "weight": 0}])) == [62]
    assert scores(pod, nodes, args=most([{"name": "memory"}, {"name": "cpu"}])) == [62]


def test_most_bypasses_extended_resource_the_pod_does_not_request():
    pod = req_pod(cm("1000", "2000"), cm("2000", "3000"))
    nodes = [cap("node1", "6000", "10000"), cap("node2", "6000", "10000", **{EXT: "4"})]
    assert scores(pod, nodes, args=most(EXTENDED_SET)) == [50, 50]


def test_most_honors_extended_resource_the_pod_requests():
    pod = req_pod(cm("3000", "5000", **{EXT: "2"}))
    nodes = [cap("node1", "6000", "10000", **{EXT: "4"}), cap("node2", "6000", "10000", **{EXT: "10"})]
    assert scores(pod, nodes, args=most(EXTENDED_SET)) == [50, 40]


def test_most_node_without_the_resource():
    pod = req_pod(cm("3000", "4000"))
    nodes = [cap("node1", "6000", "10000"), cap("node2", "6000", "10000", **{EXT: "4"})]
    args = most([{"name": EXT, "weight": 2}, {"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}])
    assert scores(pod, nodes, args=args) == [45, 45]


def test_most_allocated_packs_through_schedule_pod():
    # Through the whole algorithm: MostAllocated picks the fuller node, the
    # default LeastAllocated the emptier one.
    nodes = [make_node("a", "4", "8Gi"), make_node("b", "4", "8Gi")]
    existing = [make_pod("x", "2", "2Gi", node_name="b", phase="Running")]
    pod = make_pod("p", "1", "1Gi")
    for args, want in ((most(), "b"), (None, "a")):
        cache = make_cache(nodes, existing)
        fwk = make_framework(cache, profile_with_args("NodeResourcesFit", args) if args else None)
        snap = cache.snapshot()
        assert snap.names[schedule_pod(fwk, pod, snap).row] == want


# ================================================ RequestedToCapacityRatio

SHAPE = [(0, 10), (100, 0)]


def test_rtcr_nothing_scheduled_nothing_requested():
    nodes = [cap("node1", "4000", "10000"), cap("node2", "4000", "10000")]
    existing = [make_pod(f"e{i}", containers=[], node_name="node1", phase="Running") for i in range(2)]
    assert scores(EMPTY_POD, nodes, existing, rtcr(SHAPE)) == [100, 100]


def test_rtcr_resources_requested_differently_sized_nodes():
    pod = req_pod(cm("1000", "2000"), cm("2000", "3000"))
    nodes = [cap("node1", "4000", "10000"), cap("node2", "6000", "10000")]
    existing = [make_pod(f"e{i}", containers=[], node_name="node1", phase="Running") for i in range(2)]
    # node1: cpu 75% -> 25, memory 50% -> 50, mean 37.5 rounds to 38.
    assert scores(pod, nodes, existing, rtcr(SHAPE)) == [38, 50]


def test_rtcr_no_resources_requested_pods_scheduled_with_resources():
    nodes = [cap("node1", "4000", "10000"), cap("node2", "6000", "10000")]
    existing = [
        req_pod(cm("3000", "5000"), name="e1", node="node1"),
        req_pod(cm("3000", "5000"), name="e2", node="node2"),
    ]
    assert scores(EMPTY_POD, nodes, existing, rtcr(SHAPE)) == [38, 50]


@pytest.mark.parametrize(
    "points, assertions",
    [
        (
            [(10, 1), (90, 9)],
            [
                (-10, 1),
                (0, 1),
                (9, 1),
                (10, 1),
                (15, 1),
                (19, 1),
                (20, 2),
                (89, 8),
                (90, 9),
                (99, 9),
                (100, 9),
                (110, 9),
            ],
        ),
        ([(0, 2), (40, 10), (100, 0)], [(-10, 2), (0, 2), (20, 6), (30, 8), (40, 10), (70, 5), (100, 0), (110, 0)]),
        ([(0, 2), (40, 2), (100, 2)], [(-10, 2), (0, 2), (20, 2), (30, 2), (40, 2), (70, 2), (100, 2), (110, 2)]),
    ],
)
def test_broken_linear_function(points, assertions):
    for p, want in assertions:
        assert broken_linear(points, p) == want, (points, p)


def test_broken_linear_truncates_toward_zero_like_go():
    # A falling segment: (0-10)*(15-10)/(20-10) is -5 exactly, (0-10)*3/20 = -1.5 -> -1 in Go.
    assert broken_linear([(10, 10), (30, 0)], 13) == 9
    assert broken_linear([(0, 100), (100, 0)], 33) == 67  # 100 + (-100*33)/100 = 100 - 33
    assert broken_linear([(0, 100), (30, 0)], 1) == 97  # -100*1/30 = -3.33 -> -3
    assert list(go_div(np.array([-7, 7, -6]), 2)) == [-3, 3, -3]


SINGLE = [{"name": FOO, "weight": 1}]
BIN_SHAPE = [(0, 0), (100, 1)]


def ext_nodes(foo1: int, foo2: int, bar1: int | None = None, bar2: int | None = None) -> list[NodeInfo]:
    e1 = {FOO: foo1} | ({BAR: bar1} if bar1 is not None else {})
    e2 = {FOO: foo2} | ({BAR: bar2} if bar2 is not None else {})
    return [mk_node("node1", 4000, 10000 * MiB, e1), mk_node("node2", 4000, 10000 * MiB, e2)]


def test_bin_packing_single_extended_nothing_requested():
    assert scores(EMPTY_POD, ext_nodes(8, 4), args=rtcr(BIN_SHAPE, SINGLE)) == [0, 0]


def test_bin_packing_single_extended_requested():
    pod = req_pod({FOO: "2"})
    assert scores(pod, ext_nodes(8, 4), args=rtcr(BIN_SHAPE, SINGLE)) == [2, 5]


def test_bin_packing_single_extended_existing_pod():
    pod = req_pod({FOO: "2"})
    existing = [req_pod({FOO: "2"}, name="e", node="node2")]
    assert scores(pod, ext_nodes(8, 4), existing, rtcr(BIN_SHAPE, SINGLE)) == [2, 10]


def test_bin_packing_single_extended_more_requested():
    pod = req_pod({FOO: "4"})
    assert scores(pod, ext_nodes(8, 4), args=rtcr(BIN_SHAPE, SINGLE)) == [5, 10]


MULTI = [{"name": FOO, "weight": 3}, {"name": BAR, "weight": 5}]


def test_bin_packing_multiple_extended_nothing_requested():
    assert scores(EMPTY_POD, ext_nodes(8, 4, 4, 8), args=rtcr(BIN_SHAPE, MULTI)) == [0, 0]


def test_bin_packing_multiple_extended_requested():
    # node1: foo 25% -> 2, bar 50% -> 5: (6 + 25) / 8 = 3.875 -> 4; node2: (15 + 10) / 8 -> 3.
    pod = req_pod({FOO: "2", BAR: "2"})
    assert scores(pod, ext_nodes(8, 4, 4, 8), args=rtcr(BIN_SHAPE, MULTI)) == [4, 3]


def test_bin_packing_multiple_extended_existing_pod():
    pod = req_pod({FOO: "2", BAR: "2"})
    existing = [req_pod({FOO: "4", BAR: "2"}, name="e", node="node2")]
    assert scores(pod, ext_nodes(8, 4, 4, 8), existing, rtcr(BIN_SHAPE, MULTI)) == [4, 7]


def test_bin_packing_multiple_extended_more_requested():
    pod = req_pod({FOO: "4", BAR: "2"})
    assert scores(pod, ext_nodes(8, 4, 4, 8), args=rtcr(BIN_SHAPE, MULTI)) == [5, 5]


def test_rtcr_zero_scored_resources_leave_the_mean():
    # cpu 50% on a shape that gives 0 below 60%: left out, so memory alone decides.
    shape = [(60, 0), (100, 10)]
    pod = req_pod(cm("2", "800"))
    nodes = [cap("n", "4", "1000")]  # memory 80% -> 50
    assert scores(pod, nodes, args=rtcr(shape)) == [50]


# ================================================================ validation


PREFIX = "profile troupe-scheduler: pluginConfig[0].args."


def profile_error(args: Mapping[str, Any]) -> list[str]:
    """The problems Framework reports for these args, one per line, each
    located from the args (the PREFIX names the profile and the entry)."""
    with pytest.raises(ProfileError) as exc:
        make_framework(profile=profile_with_args("NodeResourcesFit", args))
    lines = str(exc.value).splitlines()
    assert all(line.startswith(PREFIX) for line in lines), lines
    return [line.removeprefix(PREFIX) for line in lines]


def valid(args: Mapping[str, Any]) -> NodeResourcesFit:
    fwk = make_framework(profile=profile_with_args("NodeResourcesFit", args))
    plugin = fwk.plugins["NodeResourcesFit"]
    assert isinstance(plugin, NodeResourcesFit)
    return plugin


LONG = "longvalue" + "a" * 64


@pytest.mark.parametrize(
    "args, expect",
    [
        (
            {"ignoredResources": [LONG]},
            [f"ignoredResources[0]: invalid value '{LONG}': name part must be no more than 63 bytes"],
        ),
        (
            {"ignoredResources": ["example.com/"]},
            [
                "ignoredResources[0]: invalid value 'example.com/': name part must be non-empty",
                "ignoredResources[0]: invalid value 'example.com/': name part must consist of alphanumeric characters",
            ],
        ),
        (
            {"ignoredResources": ["example.com/aaa/bbb"]},
            ["ignoredResources[0]: invalid value 'example.com/aaa/bbb': a valid label key must consist of"],
        ),
        (
            {"ignoredResourceGroups": ["example.com/"]},
            [
                "ignoredResourceGroups[0]: invalid value 'example.com/': resource group name can't contain '/'",
                "ignoredResourceGroups[0]: invalid value 'example.com/': name part must be non-empty",
                "ignoredResourceGroups[0]: invalid value 'example.com/': name part must consist of",
            ],
        ),
        (
            {"ignoredResourceGroups": ["a" * 64]},
            [f"ignoredResourceGroups[0]: invalid value '{'a' * 64}': name part must be no more than 63 bytes"],
        ),
        (
            {"ignoredResourceGroups": ["example.com/aa"]},
            ["ignoredResourceGroups[0]: invalid value 'example.com/aa': resource group name can't contain '/'"],
        ),
        (
            {"scoringStrategy": {"type": "Invalid"}},
            [
                "scoringStrategy.type: unsupported value 'Invalid'; allowed: 'LeastAllocated', 'MostAllocated', 'RequestedToCapacityRatio'"
            ],
        ),
        (
            {
                "scoringStrategy": {"type": ""}
            },  # upstream's v1 API rejects the empty type too; only a missing one is LeastAllocated
            [
                "scoringStrategy.type: unsupported value ''; allowed: 'LeastAllocated', 'MostAllocated', 'RequestedToCapacityRatio'"
            ],
        ),
        (
            {"scoringStrategy": {"type": "RequestedToCapacityRatio"}},
            ["scoringStrategy.requestedToCapacityRatio: must be specified when type is RequestedToCapacityRatio"],
        ),
        (
            {
                "scoringStrategy": {
                    "type": "MostAllocated",
                    "requestedToCapacityRatio": {"shape": [{"utilization": 1, "score": 1}]},
                }
            },
            ["scoringStrategy.requestedToCapacityRatio: must be nil when type is not RequestedToCapacityRatio"],
        ),
        (
            {"scoringStrategy": {"type": "LeastAllocated", "typo": 1}},
            [
                "scoringStrategy.typo: unknown field (did you mean type?); allowed: type, resources, requestedToCapacityRatio"
            ],
        ),
        (
            {"scoringStrategy": {"resources": [{"name": "cpu", "weight": "heavy"}]}},
            ["scoringStrategy.resources[0].weight: Input should be a valid integer"],
        ),
        ({"scoringStrategy": {"resources": [{"weight": 1}]}}, ["scoringStrategy.resources[0].name: Field required"]),
        ({"scoringStrategy": 5}, ["scoringStrategy: expected a mapping, got an integer"]),
        ({"ignoredResources": "example.com/foo"}, ["ignoredResources: Input should be a valid list"]),
        (
            {"scoringStrategies": {}},
            [
                "scoringStrategies: unknown field (did you mean scoringStrategy?); allowed: ignoredResources, ignoredResourceGroups, scoringStrategy"
            ],
        ),
    ],
)
def test_fit_args_validation(args, expect):
    lines = profile_error(args)
    assert len(lines) == len(expect) and all(line.startswith(want) for line, want in zip(lines, expect)), lines


@pytest.mark.parametrize(
    "args",
    [
        {"ignoredResources": ["example.com"]},
        {"ignoredResourceGroups": ["example.com"]},
        {
            "scoringStrategy": {
                "type": "LeastAllocated",
                "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 10}],
            }
        },
        {"scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "cpu", "weight": 100}]}},
        {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "NodeResourcesFitArgs"},
        {"ignoredResources": None, "scoringStrategy": None},  # null: the default, as Go decodes it
        {"scoringStrategy": {"type": "LeastAllocated", "requestedToCapacityRatio": None}},
    ],
)
def test_fit_args_valid(args):
    valid(args)


@pytest.mark.parametrize("strategy", ["LeastAllocated", "MostAllocated"])
def test_weight_validation_per_strategy(strategy):
    args = {
        "scoringStrategy": {
            "type": strategy,
            "resources": [{"name": "cpu", "weight": 0}, {"name": "memory", "weight": 101}],
        }
    }
    # Weight 0 is defaulted to 1 (v1 API), so only the 101 is reported.
    assert profile_error(args) == [
        "scoringStrategy.resources[1].weight: invalid value 101: resource weight of memory not in valid range (0, 100]",
    ]
    args = {
        "scoringStrategy": {
            "type": strategy,
            "resources": [{"name": "cpu", "weight": -3}, {"name": "memory", "weight": 101}],
        }
    }
    # Several errors: one line each.
    assert profile_error(args) == [
        "scoringStrategy.resources[0].weight: invalid value -3: resource weight of cpu not in valid range (0, 100]",
        "scoringStrategy.resources[1].weight: invalid value 101: resource weight of memory not in valid range (0, 100]",
    ]


def rtcr_error(
    shape: Sequence[tuple[int, int]] | None, resources: Sequence[Mapping[str, Any]] | None = None
) -> str | None:
    strategy: dict[str, Any] = {"type": "RequestedToCapacityRatio", "requestedToCapacityRatio": {}}
    if shape is not None:
        strategy["requestedToCapacityRatio"]["shape"] = [{"utilization": u, "score": s} for u, s in shape]
    if resources is not None:
        strategy["resources"] = list(resources)
    try:
        valid({"scoringStrategy": strategy})
    except ProfileError:
        return "\n".join(profile_error({"scoringStrategy": strategy}))
    return None


SHAPE_PATH = "scoringStrategy.requestedToCapacityRatio.shape"


@pytest.mark.parametrize(
    "shape, resources, want",
    [
        (None, None, f"{SHAPE_PATH}: at least one point must be specified"),
        (
            [(30, 3)],
            [{"name": "cpu", "weight": 101}],
            "scoringStrategy.resources[0].weight: invalid value 101: resource weight of cpu not in valid range (0, 100]",
        ),
        ([(30, 3)], None, None),
        ([(-1, 3)], None, f"{SHAPE_PATH}[0].utilization: invalid value -1: not in valid range [0, 100]"),
        ([(101, 3)], None, f"{SHAPE_PATH}[0].utilization: invalid value 101: not in valid range [0, 100]"),
        (
            [(10, 3), (10, 3)],
            None,
            f"{SHAPE_PATH}[1].utilization: invalid value 10: values must be sorted in increasing order",
        ),
        ([(10, 3), (20, 3), (30, 3)], None, None),
        (
            [(10, 3), (20, 3), (15, 3)],
            None,
            f"{SHAPE_PATH}[2].utilization: invalid value 15: values must be sorted in increasing order",
        ),
        ([(10, -1)], None, f"{SHAPE_PATH}[0].score: invalid value -1: not in valid range [0, 10]"),
        ([(10, 11)], None, f"{SHAPE_PATH}[0].score: invalid value 11: not in valid range [0, 10]"),
        (
            [(-1, 11)],
            None,
            f"{SHAPE_PATH}[0].utilization: invalid value -1: not in valid range [0, 100]\n"
            f"{SHAPE_PATH}[0].score: invalid value 11: not in valid range [0, 10]",
        ),
    ],
)
def test_rtcr_shape_validation(shape, resources, want):
    assert rtcr_error(shape, resources) == want


def test_default_args_keep_least_allocated():
    plugin = valid({})
    assert plugin.strategy == "LeastAllocated"
    assert plugin.score_resources == [("cpu", 1), ("memory", 1)]
