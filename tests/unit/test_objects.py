"""scheduler.api.quantity and scheduler.api.objects: quantities, Pod/Node parsing,
effective pod requests (upstream component-helpers resource.PodRequests and the
scheduler's non-zero requests), tolerations and node selector requirements."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.api.constants import POD_GROUP_LABEL
from scheduler.api.parse import parse_node, parse_node_selector_term, parse_pod
from scheduler.api.quantity import QuantityError, format_units, parse_quantity, to_units
from scheduler.api.records import NodeSelectorTerm, ObjectError, Requirement, Taint, Toleration
from scheduler.api.resources import DEFAULT_MEMORY_REQUEST, DEFAULT_MILLI_CPU_REQUEST, pod_requests

from .builders import GiB, MiB, container, make_node, make_pod, node_body, pod_body, requirement

ALWAYS = "Always"

# ------------------------------------------------------------------ quantity


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("100m", Decimal("0.1")),
        ("1", Decimal(1)),
        ("0.5", Decimal("0.5")),
        ("1Ki", Decimal(1024)),
        ("1Mi", Decimal(MiB)),
        ("1.5Gi", Decimal(3 * GiB // 2)),
        ("1k", Decimal(1000)),
        ("129M", Decimal(129_000_000)),
        ("129e6", Decimal(129_000_000)),
        ("1E", Decimal(10**18)),
        ("1Ei", Decimal(2**60)),
        ("5n", Decimal("5e-9")),
        ("7u", Decimal("7e-6")),
        ("+3", Decimal(3)),
        ("-2", Decimal(-2)),
        (" 2 ", Decimal(2)),
        (4, Decimal(4)),
        (0.25, Decimal("0.25")),
    ],
)
def test_parse_quantity(raw, expected):
    assert parse_quantity(raw) == expected


@pytest.mark.parametrize(
    "spec, message",
    [
        (
            {"containers": [{"name": "c", "resources": {"requests": {"cpu": []}}}]},
            "spec.containers[0].resources.requests.cpu: invalid quantity []: expected a number or a string",
        ),
        (
            {"containers": [{"name": "c", "resources": {"requests": "1"}}]},
            "spec.containers[0].resources.requests: expected a map of quantities, got the string '1'",
        ),
        ({"containers": [5]}, "spec.containers[0]: expected a map, got 5"),
        ({"containers": [], "nodeSelector": ["a"]}, "spec.nodeSelector: expected a map of strings, got a list"),
        ({"containers": [], "tolerations": {"key": "a"}}, "spec.tolerations: expected a list, got a map"),
        (
            {"containers": [], "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": 1}}},
            "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution: expected a list, got 1",
        ),
        (
            {"containers": [], "topologySpreadConstraints": [{"labelSelector": {"matchLabels": [1]}}]},
            "spec.topologySpreadConstraints[0].labelSelector.matchLabels: expected a map of strings, got a list",
        ),
    ],
)
def test_a_field_of_the_wrong_type_is_named_with_what_was_expected(spec, message):
    body = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": spec}
    with pytest.raises(ObjectError) as err:
        parse_pod(body)
    assert str(err.value).startswith(message), str(err.value)


def test_a_node_field_of_the_wrong_type_is_named():
    with pytest.raises(ObjectError, match=r"^spec\.taints: expected a list, got the string 'x'$"):
        parse_node({"metadata": {"name": "n"}, "spec": {"taints": "x"}})


@pytest.mark.parametrize("raw", ["", "abc", "1K", "1mi", "1.2.3", ".", "1 Gi", "Gi", "1e", "--1", True, False])
def test_parse_quantity_rejects(raw):
    with pytest.raises(QuantityError):
        parse_quantity(raw)


@pytest.mark.parametrize(
    "resource, raw, units",
    [
        ("cpu", "100m", 100),
        ("cpu", "1", 1000),
        ("cpu", "0.5", 500),
        ("cpu", "2.5", 2500),
        ("cpu", 3, 3000),
        ("cpu", "1n", 1),  # MilliValue rounds up
        ("cpu", "1500u", 2),
        ("cpu", "0", 0),
        ("memory", "1Mi", MiB),
        ("memory", "123Mi", 128_974_848),
        ("memory", "100m", 1),  # Value rounds up
        ("memory", "1.5k", 1500),
        ("memory", "1Gi", GiB),
        ("pods", "110", 110),
        ("nvidia.com/gpu", "2", 2),
        ("ephemeral-storage", "10Gi", 10 * GiB),
    ],
)
def test_to_units(resource, raw, units):
    assert to_units(resource, raw) == units


@pytest.mark.parametrize(
    "resource, amount, text",
    [
        ("cpu", 1500, "1500m"),
        ("cpu", 2000, "2"),
        ("cpu", 0, "0"),
        ("cpu", 1, "1m"),
        ("memory", GiB, "1Gi"),
        ("memory", 1536 * MiB, "1536Mi"),
        ("memory", 1024, "1Ki"),
        ("memory", 1000, "1000"),
        ("memory", 0, "0"),
        ("pods", 110, "110"),
    ],
)
def test_format_units(resource, amount, text):
    assert format_units(resource, amount) == text


@settings(max_examples=150, deadline=None)
@given(st.integers(min_value=0, max_value=2**50), st.sampled_from(["cpu", "memory", "pods"]))
def test_format_units_round_trips(amount, resource):
    assert to_units(resource, format_units(resource, amount)) == amount


# --------------------------------------------------------------- parse_pod


def test_parse_pod_fields():
    body = pod_body(
        "web-0",
        "250m",
        "64Mi",
        namespace="team",
        group="pg1",
        labels={"app": "web"},
        priority=7,
        node_name="",
        scheduler_name="troupe-scheduler",
        creation_timestamp="2026-01-02T03:04:05Z",
        resource_version="42",
        gates=("example.com/wait",),
    )
    pod = parse_pod(body)
    assert pod.uid == "uid-team-web-0"
    assert pod.key == "team/web-0"
    assert pod.namespace == "team"
    assert pod.scheduler_name == "troupe-scheduler"
    assert pod.node_name == "" and not pod.bound
    assert pod.phase == "Pending" and not pod.terminal
    assert not pod.deleting
    assert pod.labels == {"app": "web", POD_GROUP_LABEL: "pg1"}
    assert pod.group_name == "pg1"
    assert pod.priority == 7
    assert pod.creation_timestamp == "2026-01-02T03:04:05Z"
    assert pod.resource_version == "42"
    assert pod.requests == {"cpu": 250, "memory": 64 * MiB}
    assert (pod.nonzero_cpu, pod.nonzero_memory) == (250, 64 * MiB)
    assert pod.scheduling_gates == ("example.com/wait",)


def test_parse_pod_defaults():
    body = {"metadata": {"name": "p", "uid": "u1"}, "spec": {"containers": [{"name": "c"}]}}
    pod = parse_pod(body)
    assert pod.namespace == "default"
    assert pod.scheduler_name == "default-scheduler"
    assert pod.phase == "Pending"
    assert pod.priority == 0
    assert pod.group_name is None
    assert pod.requests == {}
    assert (pod.nonzero_cpu, pod.nonzero_memory) == (DEFAULT_MILLI_CPU_REQUEST, DEFAULT_MEMORY_REQUEST)
    assert pod.required_affinity is None
    assert pod.preferred_affinity == ()
    assert pod.tolerations == ()
    assert pod.node_selector == {}


@pytest.mark.parametrize(
    "phase, terminal",
    [("Pending", False), ("Running", False), ("Succeeded", True), ("Failed", True), ("Unknown", False)],
)
def test_parse_pod_terminal(phase, terminal):
    assert make_pod("p", phase=phase).terminal is terminal


def test_parse_pod_bound_and_deleting():
    pod = make_pod("p", node_name="n1", deleting=True)
    assert pod.bound and pod.node_name == "n1"
    assert pod.deleting


def test_parse_pod_empty_group_label_is_no_group():
    assert make_pod("p", labels={POD_GROUP_LABEL: ""}).group_name is None


@pytest.mark.parametrize(
    "body, where",
    [
        ({"metadata": {"name": "p"}, "spec": {}}, "metadata.uid"),
        ({"metadata": {"uid": "u"}, "spec": {}}, "metadata.uid and metadata.name"),
        ({"metadata": {"name": "p", "uid": "u"}, "spec": {"priority": "high"}}, "spec.priority"),
        (
            {
                "metadata": {"name": "p", "uid": "u"},
                "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "lots"}}}]},
            },
            "spec.containers[0].resources.requests.cpu",
        ),
        (
            {
                "metadata": {"name": "p", "uid": "u"},
                "spec": {
                    "containers": [],
                    "initContainers": [{"name": "i", "resources": {"requests": {"memory": "1Q"}}}],
                },
            },
            "spec.initContainers[0].resources.requests.memory",
        ),
        ({"metadata": {"name": "p", "uid": "u"}, "spec": {"overhead": {"cpu": "x"}}}, "spec.overhead.cpu"),
    ],
)
def test_parse_pod_errors_name_the_field(body, where):
    with pytest.raises(ObjectError) as exc:
        parse_pod(body)
    assert where in str(exc.value)


def test_parse_pod_tolerations_and_affinity():
    pod = make_pod(
        "p",
        tolerations=[{"key": "gpu", "value": "true", "effect": "NoSchedule"}, {"operator": "Exists"}],
        node_selector={"zone": "a"},
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [requirement("disk", "In", "ssd", "nvme")]}]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 5, "preference": {"matchExpressions": [requirement("arch", "Exists")]}}
                ],
            }
        },
    )
    assert pod.tolerations == (Toleration("gpu", "Equal", "true", "NoSchedule"), Toleration("", "Exists", "", ""))
    assert pod.node_selector == {"zone": "a"}
    assert pod.required_affinity == (NodeSelectorTerm((Requirement("disk", "In", ("ssd", "nvme")),)),)
    assert len(pod.preferred_affinity) == 1
    assert pod.preferred_affinity[0].weight == 5
    assert pod.preferred_affinity[0].term.match_expressions == (Requirement("arch", "Exists"),)


def test_required_affinity_present_but_empty_is_not_none():
    pod = make_pod(
        "p", affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}
    )
    assert pod.required_affinity == ()


def test_spec_key_shared_by_equivalent_pods_only():
    a = make_pod("a", "1", "1Gi", tolerations=[{"key": "k", "operator": "Exists"}])
    b = make_pod("b", "1000m", "1024Mi", tolerations=[{"key": "k", "operator": "Exists"}], group="g", priority=3)
    c = make_pod("c", "1", "1Gi")
    d = make_pod("d", "1", "1Gi", node_selector={"zone": "a"})
    assert a.spec_key == b.spec_key
    assert a.spec_key != c.spec_key
    assert c.spec_key != d.spec_key


# --------------------------------------------------------------- parse_node


def test_parse_node_fields():
    node = parse_node(
        node_body(
            "n1",
            "3500m",
            "16Gi",
            58,
            labels={"zone": "a"},
            taints=[
                {"key": "gpu", "value": "true", "effect": "NoSchedule"},
                {"key": "spot", "effect": "PreferNoSchedule"},
            ],
            unschedulable=True,
            extra={"nvidia.com/gpu": "4"},
        )
    )
    assert node.name == "n1"
    assert node.uid == "node-uid-n1"
    assert node.labels == {"zone": "a"}
    assert node.allocatable == {"cpu": 3500, "memory": 16 * GiB, "pods": 58, "nvidia.com/gpu": 4}
    assert node.taints == (Taint("gpu", "true", "NoSchedule"), Taint("spot", "", "PreferNoSchedule"))
    assert node.unschedulable is True


def test_parse_node_allocatable_falls_back_to_capacity():
    body = {"metadata": {"name": "n"}, "status": {"capacity": {"cpu": "2", "pods": "10"}}}
    node = parse_node(body)
    assert node.allocatable == {"cpu": 2000, "pods": 10}
    assert node.taints == () and node.unschedulable is False


def test_parse_node_prefers_allocatable_over_capacity():
    body = {"metadata": {"name": "n"}, "status": {"capacity": {"cpu": "4"}, "allocatable": {"cpu": "3"}}}
    assert parse_node(body).allocatable == {"cpu": 3000}


def test_parse_node_errors():
    with pytest.raises(ObjectError):
        parse_node({"metadata": {}})
    with pytest.raises(ObjectError) as exc:
        parse_node({"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "four"}}})
    assert "status.allocatable.cpu" in str(exc.value)


def test_taint_str_is_upstream_format():
    assert str(Taint("gpu", "true", "NoSchedule")) == "{gpu: true}"
    assert str(Taint("dedicated", "", "NoExecute")) == "{dedicated: }"


# ------------------------------------------------------------ pod_requests
# Cases from upstream component-helpers resource/helpers_test.go
# (TestPodResourceRequests) and scheduler framework/types_test.go
# (TestPodInfoCalculateResources).


def _spec(containers=(), init=(), overhead=None, pod_level=None):
    spec = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    if overhead:
        spec["overhead"] = overhead
    if pod_level:
        spec["resources"] = {"requests": pod_level}
    return spec


def test_requests_sum_of_containers():
    req, nz_cpu, nz_mem = pod_requests(
        _spec([container("a", {"cpu": "500m", "memory": "500Mi"}), container("b", {"cpu": "700m", "memory": "800Mi"})])
    )
    assert req == {"cpu": 1200, "memory": 1300 * MiB}
    assert (nz_cpu, nz_mem) == (1200, 1300 * MiB)


def test_requests_larger_init_container_wins():
    # "nil options, larger init container": init 4, container 1 -> 4
    req, _, _ = pod_requests(_spec([container("c", {"cpu": "1"})], [container("i", {"cpu": "4"})]))
    assert req == {"cpu": 4000}


def test_requests_larger_containers_win():
    req, _, _ = pod_requests(
        _spec([container("a", {"cpu": "2"}), container("b", {"cpu": "3"})], [container("i", {"cpu": "4"})])
    )
    assert req == {"cpu": 5000}


def test_requests_init_max_is_per_resource():
    req, _, _ = pod_requests(
        _spec([container("c", {"cpu": "1", "memory": "4Gi"})], [container("i", {"cpu": "3", "memory": "1Gi"})])
    )
    assert req == {"cpu": 3000, "memory": 4 * GiB}


def test_requests_restartable_init_container_adds():
    # "restartable init container": sidecar 1 + regular 1 = 2
    req, _, _ = pod_requests(
        _spec([container("c", {"cpu": "1"})], [container("s", {"cpu": "1"}, restart_policy=ALWAYS)])
    )
    assert req == {"cpu": 2000}


def test_requests_multiple_restartable_init_containers():
    # max(5, sidecars (1+2+3) + regular (1)) = 7
    init = [
        container("init-1", {"cpu": "5"}),
        container("s1", {"cpu": "1"}, restart_policy=ALWAYS),
        container("s2", {"cpu": "2"}, restart_policy=ALWAYS),
        container("s3", {"cpu": "3"}, restart_policy=ALWAYS),
    ]
    req, _, _ = pod_requests(_spec([container("c", {"cpu": "1"})], init))
    assert req == {"cpu": 7000}


def test_requests_init_runs_with_sidecars_started_before_it():
    # init-2 needs 5 + sidecars started before it (1+2) = 8; the sidecar after it does not count.
    init = [
        container("init-1", {"cpu": "5"}),
        container("s1", {"cpu": "1"}, restart_policy=ALWAYS),
        container("s2", {"cpu": "2"}, restart_policy=ALWAYS),
        container("init-2", {"cpu": "5"}),
        container("s3", {"cpu": "3"}, restart_policy=ALWAYS),
    ]
    req, _, _ = pod_requests(_spec([container("c", {"cpu": "1"})], init))
    assert req == {"cpu": 8000}


def test_requests_restartable_init_then_init_then_regular():
    init = [container("s", {"cpu": "10"}, restart_policy=ALWAYS), container("i", {"cpu": "200"})]
    req, _, _ = pod_requests(_spec([container("c", {"cpu": "100"})], init))
    assert req == {"cpu": 210_000}


def test_requests_init_container_restart_policy_other_than_always_is_classic():
    init = [container("i", {"cpu": "1"}, restart_policy="OnFailure")]
    req, _, _ = pod_requests(_spec([container("c", {"cpu": "1"})], init))
    assert req == {"cpu": 1000}


def test_requests_overhead_is_added():
    # fit_test "resources + pod overhead fits": 1m/1 + overhead 3m/13
    req, nz_cpu, nz_mem = pod_requests(
        _spec([container("c", {"cpu": "1m", "memory": "1"})], overhead={"cpu": "3m", "memory": "13"})
    )
    assert req == {"cpu": 4, "memory": 14}
    assert (nz_cpu, nz_mem) == (4, 14)


def test_requests_overhead_added_to_nonzero_defaults():
    req, nz_cpu, nz_mem = pod_requests(_spec([container("c")], overhead={"cpu": "250m", "memory": "120Mi"}))
    assert req == {"cpu": 250, "memory": 120 * MiB}
    assert (nz_cpu, nz_mem) == (DEFAULT_MILLI_CPU_REQUEST + 250, DEFAULT_MEMORY_REQUEST + 120 * MiB)


def test_requests_extended_resources_and_zero_dropped():
    req, _, _ = pod_requests(_spec([container("c", {"cpu": "0", "nvidia.com/gpu": "2", "example.com/foo": "0"})]))
    assert req == {"nvidia.com/gpu": 2}


def test_nonzero_requestless_container_gets_defaults():
    req, nz_cpu, nz_mem = pod_requests(_spec([container("c")]))
    assert req == {}
    assert (nz_cpu, nz_mem) == (DEFAULT_MILLI_CPU_REQUEST, DEFAULT_MEMORY_REQUEST)
    assert DEFAULT_MILLI_CPU_REQUEST == 100 and 200 * MiB == DEFAULT_MEMORY_REQUEST


def test_nonzero_defaults_apply_per_container_and_only_to_missing():
    containers = [
        container("a", {"cpu": "300m"}),  # memory missing -> 200Mi
        container("b", {"memory": "1Gi"}),  # cpu missing -> 100m
        container("c", {"cpu": "0", "memory": "0"}),  # explicit zero stays zero
        container("d"),  # both missing
    ]
    req, nz_cpu, nz_mem = pod_requests(_spec(containers))
    assert req == {"cpu": 300, "memory": GiB}
    assert nz_cpu == 300 + 100 + 0 + 100
    assert nz_mem == 200 * MiB + GiB + 0 + 200 * MiB


def test_nonzero_with_init_and_sidecars():
    # Non-zero requests follow the same max-of-sums with defaults substituted per container.
    init = [container("s", restart_policy=ALWAYS), container("i", {"cpu": "2", "memory": "1Gi"})]
    req, nz_cpu, nz_mem = pod_requests(_spec([container("c")], init))
    assert req == {"cpu": 2000, "memory": GiB}
    # steady: c(100m) + s(100m) = 200m; init i runs with s: 2000m + 100m
    assert nz_cpu == 2100
    assert nz_mem == GiB + 200 * MiB


def test_pod_level_requests_replace_container_sum():
    # types_test "1X container and 1X init container with pod-level requests"
    spec = _spec(
        [container("c", {"cpu": "500m", "memory": "500Mi"})],
        [container("i", {"cpu": "500m", "memory": "500Mi"})],
        pod_level={"cpu": "1200m", "memory": "1200Mi"},
    )
    req, nz_cpu, nz_mem = pod_requests(spec)
    assert req == {"cpu": 1200, "memory": 1200 * MiB}
    assert (nz_cpu, nz_mem) == (1200, 1200 * MiB)


def test_pod_level_requests_with_sidecar():
    spec = _spec(
        [container("c", {"cpu": "500m", "memory": "500Mi"})],
        [container("s", {"cpu": "500m", "memory": "500Mi"}, restart_policy=ALWAYS)],
        pod_level={"cpu": "1200m", "memory": "1200Mi"},
    )
    assert pod_requests(spec) == ({"cpu": 1200, "memory": 1200 * MiB}, 1200, 1200 * MiB)


def test_pod_level_memory_only():
    # types_test "1X container with pod-level memory requests": cpu falls back to the default.
    spec = _spec([container("c")], [container("i")], pod_level={"memory": "1200Mi"})
    assert pod_requests(spec) == ({"memory": 1200 * MiB}, DEFAULT_MILLI_CPU_REQUEST, 1200 * MiB)


def test_pod_level_cpu_only():
    spec = _spec([container("c")], [container("i")], pod_level={"cpu": "500m"})
    assert pod_requests(spec) == ({"cpu": 500}, 500, DEFAULT_MEMORY_REQUEST)


def test_pod_level_does_not_replace_unsupported_resources():
    # types_test "1X container unsupported resources and pod-level supported resources"
    spec = _spec(
        [container("c", {"ephemeral-storage": "800Mi"})],
        [container("i", {"ephemeral-storage": "500Mi"})],
        pod_level={"cpu": "500m"},
    )
    assert pod_requests(spec) == ({"cpu": 500, "ephemeral-storage": 800 * MiB}, 500, DEFAULT_MEMORY_REQUEST)


def test_pod_level_plus_overhead():
    spec = _spec([container("c", {"cpu": "1"})], overhead={"cpu": "100m"}, pod_level={"cpu": "2"})
    req, nz_cpu, _ = pod_requests(spec)
    assert req["cpu"] == 2100 and nz_cpu == 2100


def test_pod_level_hugepages_replace_container_sum():
    """Upstream IsSupportedPodLevelResource: cpu, memory and every hugepages-<size>.
    fit_test "pod-level hugepages resource not fit": pod-level hugepages 10 with
    containers asking none must request 10 (and 5 in containers, 10 at pod level, is 10)."""
    spec = _spec(
        [container("c", {"cpu": "1m", "memory": "1", "hugepages-2Mi": "3"})],
        pod_level={"cpu": "3m", "memory": "2", "hugepages-2Mi": "10"},
    )
    req, _, _ = pod_requests(spec)
    assert req == {"cpu": 3, "memory": 2, "hugepages-2Mi": 10}
    spec = _spec([container("c")], pod_level={"cpu": "3m", "memory": "2", "hugepages-1Gi": "5"})
    req, _, _ = pod_requests(spec)
    assert req == {"cpu": 3, "memory": 2, "hugepages-1Gi": 5}


@settings(max_examples=120, deadline=None)
@given(
    containers=st.lists(st.integers(0, 8), min_size=1, max_size=4),
    init=st.lists(st.tuples(st.integers(0, 8), st.booleans()), max_size=5),
    overhead=st.integers(0, 3),
)
def test_requests_match_kep_formula(containers, init, overhead):
    """KEP-753: max(sum(containers) + sum(sidecars), max_i(init_i + sidecars before i)) + overhead."""
    spec = _spec(
        [container(f"c{i}", {"cpu": str(c)}) for i, c in enumerate(containers)],
        [
            container(f"i{i}", {"cpu": str(c)}, restart_policy=ALWAYS if side else None)
            for i, (c, side) in enumerate(init)
        ],
        overhead={"cpu": str(overhead)} if overhead else None,
    )
    sidecars = 0
    peak = 0
    for c, side in init:
        if side:
            sidecars += c
            peak = max(peak, sidecars)
        else:
            peak = max(peak, sidecars + c)
    expected = max(sum(containers) + sidecars, peak) + overhead
    req, nz_cpu, _ = pod_requests(spec)
    assert req.get("cpu", 0) == expected * 1000
    assert nz_cpu == expected * 1000  # every container names cpu: no defaults


# ----------------------------------------------------------- tolerations
# Cases from upstream taint_toleration_test.go and v1 Toleration.ToleratesTaint.


@pytest.mark.parametrize(
    "tol, taint_, ok",
    [
        (Toleration("dedicated", "Equal", "user1", "NoSchedule"), Taint("dedicated", "user1", "NoSchedule"), True),
        (Toleration("dedicated", "Equal", "user2", "NoSchedule"), Taint("dedicated", "user1", "NoSchedule"), False),
        (Toleration("foo", "Exists", "", "NoSchedule"), Taint("foo", "bar", "NoSchedule"), True),
        (Toleration("foo", "Equal", "bar", "PreferNoSchedule"), Taint("foo", "bar", "NoSchedule"), False),
        (Toleration("foo", "Equal", "bar", ""), Taint("foo", "bar", "NoSchedule"), True),
        (Toleration("foo", "", "bar", ""), Taint("foo", "bar", "NoExecute"), True),  # empty operator means Equal
        (Toleration("", "Exists", "", ""), Taint("anything", "at-all", "NoExecute"), True),
        (Toleration("", "Exists", "", "NoSchedule"), Taint("anything", "x", "NoExecute"), False),
        (Toleration("", "Equal", "v", ""), Taint("k", "v", "NoSchedule"), True),  # empty key matches all keys
        (Toleration("other", "Exists", "", ""), Taint("foo", "bar", "NoSchedule"), False),
        (Toleration("foo", "Equal", "", ""), Taint("foo", "", "NoSchedule"), True),
        (Toleration("foo", "Equal", "", ""), Taint("foo", "bar", "NoSchedule"), False),
        # Lt/Gt need the alpha TaintTolerationComparisonOperators gate (off by default): never match.
        (Toleration("sla", "Gt", "950", "NoSchedule"), Taint("sla", "999", "NoSchedule"), False),
        (Toleration("sla", "Lt", "800", "NoSchedule"), Taint("sla", "700", "NoSchedule"), False),
        (Toleration("foo", "Bogus", "bar", ""), Taint("foo", "bar", "NoSchedule"), False),
    ],
)
def test_toleration_tolerates(tol, taint_, ok):
    assert tol.tolerates(taint_) is ok


# ------------------------------------------------- node selector requirements
# Upstream labels.Requirement semantics (component-helpers nodeaffinity).


LABELS = {"zone": "a", "disk": "ssd", "cores": "16", "empty": ""}


@pytest.mark.parametrize(
    "req, ok",
    [
        (Requirement("zone", "In", ("a", "b")), True),
        (Requirement("zone", "In", ("b",)), False),
        (Requirement("missing", "In", ("a",)), False),
        (Requirement("empty", "In", ("",)), True),
        (Requirement("zone", "NotIn", ("b", "c")), True),
        (Requirement("zone", "NotIn", ("a",)), False),
        (Requirement("missing", "NotIn", ("a",)), True),
        (Requirement("zone", "Exists"), True),
        (Requirement("empty", "Exists"), True),
        (Requirement("missing", "Exists"), False),
        (Requirement("missing", "DoesNotExist"), True),
        (Requirement("zone", "DoesNotExist"), False),
        (Requirement("cores", "Gt", ("8",)), True),
        (Requirement("cores", "Gt", ("16",)), False),
        (Requirement("cores", "Gt", ("32",)), False),
        (Requirement("cores", "Lt", ("32",)), True),
        (Requirement("cores", "Lt", ("16",)), False),
        (Requirement("missing", "Gt", ("1",)), False),
        (Requirement("zone", "Gt", ("1",)), False),  # label not an integer
        (Requirement("cores", "Gt", ("x",)), False),  # value not an integer
        (Requirement("cores", "Gt", ("1", "2")), False),  # Gt needs exactly one value
        (Requirement("cores", "Lt", ()), False),
        (Requirement("zone", "Near", ("a",)), False),  # unknown operator
    ],
)
def test_requirement_matches(req, ok):
    assert req.matches(LABELS) is ok


def test_gt_lt_parse_label_values_as_go_parseint():
    """labels.Requirement parses Gt/Lt label values with strconv.ParseInt(v, 10, 64):
    "1_000" is a valid label value but not a base-10 integer, and a value beyond
    int64 does not parse either, so neither matches."""
    assert not Requirement("n", "Gt", ("500",)).matches({"n": "1_000"})
    assert not Requirement("n", "Gt", ("5",)).matches({"n": "99999999999999999999"})


def test_term_ands_expressions_and_fields():
    term = parse_node_selector_term(
        {
            "matchExpressions": [requirement("zone", "In", "a"), requirement("disk", "Exists")],
            "matchFields": [requirement("metadata.name", "In", "node-1")],
        }
    )
    assert term.matches(LABELS, "node-1")
    assert not term.matches(LABELS, "node-2")
    assert not term.matches({"zone": "a"}, "node-1")


def test_match_fields_metadata_name():
    only = parse_node_selector_term({"matchFields": [requirement("metadata.name", "In", "n1")]})
    not_ = parse_node_selector_term({"matchFields": [requirement("metadata.name", "NotIn", "n1")]})
    assert only.matches({}, "n1") and not only.matches({}, "n2")
    assert not not_.matches({}, "n1") and not_.matches({}, "n2")
    # matchFields read the node's fields, never its labels
    assert not only.matches({"metadata.name": "n1"}, "n2")


def test_empty_term_matches_nothing():
    assert not NodeSelectorTerm().matches(LABELS, "n1")
    assert not parse_node_selector_term({}).matches({}, "n1")
    assert not parse_node_selector_term(None).matches({"a": "b"}, "x")
    assert not parse_node_selector_term({"matchExpressions": [], "matchFields": []}).matches({}, "n")


def test_parse_node_selector_term_values_are_strings():
    term = parse_node_selector_term({"matchExpressions": [{"key": "cores", "operator": "Gt", "values": [4]}]})
    assert term.match_expressions == (Requirement("cores", "Gt", ("4",)),)
    assert term.matches({"cores": "5"}, "n")


def test_make_node_builder_round_trip():
    node = make_node("n", "2", "4Gi", 10, labels={"a": "b"})
    assert node.allocatable == {"cpu": 2000, "memory": 4 * GiB, "pods": 10}
