"""The API layer of trees of groups (api/composite.py, api/podgroup.py,
api/sources): CompositePodGroups of troupe's kind and the native one,
PodGroups naming a parent, and Workloads with compositePodGroupTemplates."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pydantic import ValidationError

from scheduler.api import constants as C
from scheduler.api import sources
from scheduler.api.composite import (
    COMPOSITE_SCHEDULED,
    CompositePodGroup,
    config_error_reason,
    parse_composite,
)
from scheduler.api.podgroup import (
    CompositePodGroupTemplate,
    PodGroupTemplate,
    describe_validation_error,
    parse_podgroup,
    parse_workload,
)
from scheduler.api.records import GroupKey
from scheduler.api.sources import native, registry, troupe

NATIVE = "scheduling.k8s.io"
Obj = dict[str, Any]


def composite(api_version: str = C.API_VERSION, name: str = "root", **spec: Any) -> Obj:
    spec.setdefault("schedulingPolicy", {"gang": {"minGroupCount": 2}})
    spec.setdefault("workloadRef", {"workloadName": "w", "templateName": "replica"})
    return {
        "apiVersion": api_version,
        "kind": "CompositePodGroup",
        "metadata": {"name": name, "namespace": "ns", "uid": "u1", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": spec,
    }


def error_of(fn: Callable[[Obj], Any], body: Obj) -> str:
    with pytest.raises(ValidationError) as exc:
        fn(body)
    return describe_validation_error(exc.value)


# ------------------------------------------------------------------ troupe's CompositePodGroup


def test_troupes_composite_parses_field_for_field() -> None:
    body = composite(
        parentCompositePodGroupName="top",
        schedulingPolicy={"gang": {"minGroupCount": 3}},
        schedulingConstraints={"topology": [{"key": "rack"}, {"key": "zone"}]},
        disruptionMode={"all": {}},
        priorityClassName="high",
        priority=100,
    )
    body["status"] = {
        "conditions": [{"type": COMPOSITE_SCHEDULED, "status": "False", "reason": "Unschedulable", "message": "m"}]
    }
    cpg = sources.parse_composite(body)
    assert isinstance(cpg, CompositePodGroup) and cpg.problem is None
    assert cpg.key == GroupKey("ns", "root", C.GROUP)
    assert cpg.parent_key == GroupKey("ns", "top", C.GROUP)
    assert cpg.is_gang and cpg.min_group_count == 3
    assert cpg.topology_keys == ["rack", "zone"]
    assert cpg.spec.disruption_mode == "PodGroup"  # {all: {}}: troupe's word
    assert (cpg.spec.priority_class_name, cpg.spec.priority) == ("high", 100)
    assert cpg.spec.workload_ref is not None
    assert (cpg.spec.workload_ref.workload_name, cpg.spec.workload_ref.template_name) == ("w", "replica")
    cond = cpg.condition(COMPOSITE_SCHEDULED)
    assert cond is not None and (cond.status, cond.reason) == ("False", "Unschedulable")
    assert cpg.condition(C.DISRUPTION_TARGET) is None


def test_a_basic_root_counts_as_one_group() -> None:
    cpg = parse_composite(composite(schedulingPolicy={"basic": {}}, disruptionMode={"single": {}}))
    assert not cpg.is_gang and cpg.min_group_count == 1
    assert cpg.parent_key is None and cpg.topology_keys == []
    assert cpg.spec.disruption_mode == "Pod"
    # Unset stays unset (the CRD defaults it to single on the way in).
    assert parse_composite(composite()).spec.disruption_mode is None


def test_priority_is_its_own_else_its_class() -> None:
    assert parse_composite(composite(priority=7, priorityClassName="high")).priority_in({"high": 100}) == 7
    assert parse_composite(composite(priorityClassName="high")).priority_in({"high": 100}) == 100
    assert parse_composite(composite(priorityClassName="high")).priority_in({}) is None
    assert parse_composite(composite()).priority_in({"high": 100}) is None


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"schedulingPolicy": {"gang": {"minGroupCount": 0}}}, "spec.schedulingPolicy.gang.minGroupCount:"),
        ({"schedulingPolicy": {"gang": {"minGroupCount": -1}}}, "spec.schedulingPolicy.gang.minGroupCount:"),
        ({"schedulingPolicy": {"gang": {}}}, "spec.schedulingPolicy.gang.minGroupCount: Field required"),
        ({"schedulingPolicy": {"gang": {"minCount": 2}}}, "spec.schedulingPolicy.gang.minGroupCount:"),
        (
            {"schedulingPolicy": {"basic": {}, "gang": {"minGroupCount": 1}}},
            "spec.schedulingPolicy: Value error, exactly one of basic or gang must be set",
        ),
        ({"schedulingPolicy": {}}, "spec.schedulingPolicy: Value error, exactly one of basic or gang must be set"),
        (
            {"schedulingConstraints": {"topology": [{"key": k} for k in "abcde"]}},
            "spec.schedulingConstraints.topology:",
        ),
        ({"schedulingConstraints": {"topology": [{"key": "a"}, {"key": "a"}]}}, "spec.schedulingConstraints:"),
        (
            {"disruptionMode": {"single": {}, "all": {}}},
            "spec.disruptionMode: Value error, exactly one of single or all must be set",
        ),
        ({"disruptionMode": "Sometimes"}, "spec.disruptionMode: Value error, must be {single: {}} or {all: {}}"),
        ({"parentCompositePodGroupName": ""}, "spec.parentCompositePodGroupName:"),
        ({"workloadRef": {"workloadName": "w"}}, "spec.workloadRef.templateName: Field required"),
        ({"preemptionPolicy": "Sometimes"}, "spec.preemptionPolicy:"),
    ],
    ids=[
        "minGroupCount-0",
        "minGroupCount-negative",
        "minGroupCount-missing",
        "minCount-is-not-minGroupCount",
        "both-policies",
        "no-policy",
        "5-topology-keys",
        "duplicate-topology-keys",
        "both-disruption-modes",
        "bad-disruption-mode",
        "empty-parent",
        "workloadRef-without-template",
        "bad-preemption-policy",
    ],
)
def test_invalid_composites_name_the_field(spec: Obj, expected: str) -> None:
    body = composite()
    body["spec"] |= spec
    msg = error_of(parse_composite, body)
    assert msg.startswith(expected), msg


def test_the_policy_is_required() -> None:
    body = composite()
    del body["spec"]["schedulingPolicy"]
    assert error_of(parse_composite, body) == "spec.schedulingPolicy: Field required"


# ------------------------------------------------------------------ the native CompositePodGroup


def test_native_composite_translates_field_for_field() -> None:
    body = composite(
        f"{NATIVE}/v1alpha3",
        parentCompositePodGroupName="top",
        schedulingConstraints={"topology": [{"key": "rack"}]},
        disruptionMode={"all": {}},
        priorityClassName="high",
        priority=100,
        preemptionPolicy="Never",
    )
    body["status"] = {"conditions": [{"type": COMPOSITE_SCHEDULED, "status": "True", "reason": "Scheduled"}]}
    cpg = sources.parse_composite(body)
    assert cpg.problem is None
    assert cpg.key == GroupKey("ns", "root", NATIVE)
    assert cpg.parent_key == GroupKey("ns", "top", NATIVE)  # same namespace, same API group
    assert cpg.is_gang and cpg.min_group_count == 2
    assert cpg.topology_keys == ["rack"]
    assert (cpg.spec.disruption_mode, cpg.spec.priority, cpg.spec.preemption_policy) == ("PodGroup", 100, "Never")
    assert cpg.spec.workload_ref is not None and cpg.spec.workload_ref.template_name == "replica"
    cond = cpg.condition(COMPOSITE_SCHEDULED)  # one name everywhere: read as it is
    assert cond is not None and cond.reason == "Scheduled"
    single = sources.parse_composite(composite(f"{NATIVE}/v1alpha3", disruptionMode={"single": {}}))
    assert single.spec.disruption_mode == "Pod"


def test_what_troupe_cannot_honour_in_a_native_composite_is_named() -> None:
    unknown = native.parse_composite(composite(f"{NATIVE}/v1alpha3", futureField=1))
    assert unknown.problem == "spec.futureField: a field troupe does not know (scheduling.k8s.io/v1alpha3)"
    policy = native.parse_composite(
        composite(f"{NATIVE}/v1alpha3", schedulingPolicy={"gang": {"minGroupCount": 2, "timeoutSeconds": 5}})
    )
    assert policy.problem == "spec.schedulingPolicy.gang.timeoutSeconds: a scheduling policy troupe does not know"
    mode = native.parse_composite(composite(f"{NATIVE}/v1alpha3", disruptionMode={"some": {}}))
    assert mode.problem is not None and mode.problem.startswith("spec.disruptionMode:")
    assert mode.spec.disruption_mode is None
    version = native.parse_composite(composite(f"{NATIVE}/v1alpha2"))  # 1.36 served no CompositePodGroups
    assert version.problem is not None and version.problem.startswith("scheduling.k8s.io/v1alpha2 is an API version")
    beta = native.parse_composite(composite(f"{NATIVE}/v1beta1", futureField=1))
    assert beta.problem == "spec.futureField: a field troupe does not know (scheduling.k8s.io/v1beta1)"
    # What troupe needs and cannot read still raises, naming the field.
    msg = error_of(native.parse_composite, composite(f"{NATIVE}/v1alpha3", schedulingPolicy={"gang": {}}))
    assert msg.startswith("spec.schedulingPolicy.gang.minGroupCount:"), msg


def test_a_native_podgroup_names_its_parent() -> None:
    body: Obj = {
        "apiVersion": f"{NATIVE}/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "workers", "namespace": "ns"},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": 4}},
            "parentCompositePodGroupName": "replica-0",
            "workloadRef": {"workloadName": "w", "templateName": "workers"},
        },
    }
    group = sources.parse_group(body)
    assert group.problem is None  # no longer refused
    assert group.spec.parent_composite_pod_group_name == "replica-0"
    assert group.parent_key == GroupKey("ns", "replica-0", NATIVE)
    assert group.workload_ref == "w/workers"
    # v1alpha2 has no such field: said, not honoured.
    old = sources.parse_group({**body, "apiVersion": f"{NATIVE}/v1alpha2"})
    assert old.problem is not None and "spec.parentCompositePodGroupName" in old.problem
    assert old.parent_key is None


# ------------------------------------------------------------------ troupe's PodGroup


def test_troupes_podgroup_names_its_parent() -> None:
    body: Obj = {
        "apiVersion": C.API_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": "leader", "namespace": "ns"},
        "spec": {"schedulingPolicy": {"basic": {}}, "parentCompositePodGroupName": "replica-0"},
    }
    group = parse_podgroup(body)
    assert group.parent_key == GroupKey("ns", "replica-0", C.GROUP)
    body["spec"] = {"schedulingPolicy": {"basic": {}}}
    assert parse_podgroup(body).parent_key is None
    body["spec"]["parentCompositePodGroupName"] = ""
    assert error_of(parse_podgroup, body).startswith("spec.parentCompositePodGroupName:")


# ------------------------------------------------------------------ sources


def test_the_sources_read_both_composite_kinds() -> None:
    mine = troupe.SOURCE.kind("CompositePodGroup")
    assert mine is not None
    assert (mine.plural, mine.discovered, mine.writes_status, mine.versions) == (
        "compositepodgroups",
        False,
        True,
        ("v1alpha2",),
    )
    theirs = native.SOURCE.kind("CompositePodGroup")
    assert theirs is not None
    assert (theirs.plural, theirs.discovered, theirs.writes_status, theirs.versions) == (
        "compositepodgroups",
        True,
        True,
        ("v1beta1", "v1alpha3"),  # 1.38 serves v1beta1 (preferred), 1.37 v1alpha3 only
    )
    assert sources.api_versions("CompositePodGroup") == (C.API_VERSION, f"{NATIVE}/v1beta1", f"{NATIVE}/v1alpha3")
    # Chosen by apiVersion; one no source reads is read as troupe's own kind.
    assert sources.parse_composite(composite("example.com/v1")).problem is None
    assert {s.name for s in registry.SOURCES if s.kind("CompositePodGroup")} == {"troupe", "native"}


def test_a_native_v1beta1_composite_reads_as_v1alpha3_and_names_its_error_reason() -> None:
    """Kubernetes 1.38 serves CompositePodGroups at v1beta1, field for field
    as 1.37's v1alpha3, and names an invalid tree's reason CompositePodGroupError."""
    beta, alpha = composite(f"{NATIVE}/v1beta1"), composite(f"{NATIVE}/v1alpha3")
    parsed_beta, parsed_alpha = sources.parse_composite(beta), sources.parse_composite(alpha)
    assert parsed_beta.problem is None and parsed_beta.spec == parsed_alpha.spec
    assert parsed_beta.invalid_reason == "CompositePodGroupError"
    assert parsed_alpha.invalid_reason == "Invalid"  # 1.37's v1alpha3 names none: troupe's word
    assert sources.parse_composite(composite(C.API_VERSION)).invalid_reason == "Invalid"


@pytest.mark.parametrize(
    ("api_version", "kube_version", "reason"),
    [
        (f"{NATIVE}/v1beta1", (1, 38), "PodGroupError"),
        (f"{NATIVE}/v1alpha3", (1, 38), "PodGroupError"),  # 1.38 serves it too, with the same reasons
        (f"{NATIVE}/v1beta1", (1, 39), "PodGroupError"),
        (f"{NATIVE}/v1beta1", (2, 0), "PodGroupError"),
        (f"{NATIVE}/v1beta1", (1, 37), "SchedulerError"),  # 1.37 serves v1beta1 without the word
        (f"{NATIVE}/v1alpha3", (1, 37), "SchedulerError"),
        (f"{NATIVE}/v1alpha2", (1, 38), "SchedulerError"),
        (f"{NATIVE}/v1beta1", None, "SchedulerError"),  # not known (troupe simulate)
        (C.API_VERSION, (1, 38), "SchedulerError"),  # troupe's own kind keeps its vocabulary
        ("scheduling.x-k8s.io/v1alpha1", (1, 38), "SchedulerError"),
    ],
)
def test_a_podgroup_configured_wrong_says_podgrouperror_where_the_served_kubernetes_has_it(
    api_version: str, kube_version: tuple[int, int] | None, reason: str
) -> None:
    """Kubernetes 1.38 names the reason for a PodGroup configured wrong
    (upstream's runtime validation); 1.37 serves the same API versions
    without it, so the served version decides, not the apiVersion alone."""
    assert config_error_reason(api_version, kube_version) == reason


def test_composite_status_keeps_its_condition_name() -> None:
    conditions = [{"type": COMPOSITE_SCHEDULED, "status": "True", "observedGeneration": 0}]
    assert sources.export_conditions(f"{NATIVE}/v1alpha3", conditions) == [
        {"type": COMPOSITE_SCHEDULED, "status": "True"}
    ]
    assert sources.export_conditions(C.API_VERSION, conditions) == conditions


# ------------------------------------------------------------------ Workloads


def pg_template(name: str, **extra: Any) -> Obj:
    return {"name": name, "schedulingPolicy": {"gang": {"minCount": 2}}, **extra}


def cpg_template(name: str, pgs: list[Obj] | None = None, cpgs: list[Obj] | None = None, **extra: Any) -> Obj:
    out: Obj = {"name": name, "schedulingPolicy": {"gang": {"minGroupCount": 2}}, **extra}
    if pgs is not None:
        out["podGroupTemplates"] = pgs
    if cpgs is not None:
        out["compositePodGroupTemplates"] = cpgs
    return out


def workload(api_version: str = C.API_VERSION, **spec: Any) -> Obj:
    return {"apiVersion": api_version, "kind": "Workload", "metadata": {"name": "w", "namespace": "ns"}, "spec": spec}


def nested(levels: int) -> Obj:
    """A chain of `levels` composite templates, a PodGroup template at the bottom."""
    tree = cpg_template(f"c{levels}", [pg_template("leaf")])
    for level in range(levels - 1, 0, -1):
        tree = cpg_template(f"c{level}", cpgs=[tree])
    return tree


def test_a_workload_tree_finds_its_templates_anywhere() -> None:
    body = workload(
        compositePodGroupTemplates=[
            cpg_template(
                "replica",
                [pg_template("leader", schedulingPolicy={"basic": {}})],
                [cpg_template("workers", [pg_template("shard")], disruptionMode={"all": {}})],
                schedulingConstraints={"topology": [{"key": "zone"}]},
            )
        ]
    )
    w = parse_workload(body)
    assert w.spec.pod_group_templates == []
    replica = w.composite_template("replica")
    assert isinstance(replica, CompositePodGroupTemplate) and replica.scheduling_policy.gang is not None
    assert replica.scheduling_policy.gang.min_group_count == 2
    assert replica.scheduling_constraints is not None and replica.scheduling_constraints.topology_keys == ["zone"]
    workers = w.composite_template("workers")
    assert workers is not None and workers.disruption_mode == "PodGroup"
    shard = w.template("shard")
    assert isinstance(shard, PodGroupTemplate) and shard.scheduling_policy.gang is not None
    leader = w.template("leader")
    assert leader is not None and leader.scheduling_policy.basic is not None
    # Each lookup finds its own kind only.
    assert w.template("replica") is None and w.composite_template("leader") is None
    assert [(path, level) for path, level, _ in w.spec.templates()] == [
        ("compositePodGroupTemplates[0]", 1),
        ("compositePodGroupTemplates[0].podGroupTemplates[0]", 2),
        ("compositePodGroupTemplates[0].compositePodGroupTemplates[0]", 2),
        ("compositePodGroupTemplates[0].compositePodGroupTemplates[0].podGroupTemplates[0]", 3),
    ]


def test_a_workload_of_podgroup_templates_is_as_before() -> None:
    w = parse_workload(workload(podGroupTemplates=[pg_template("a"), pg_template("b")]))
    assert [t.name for t in w.spec.pod_group_templates] == ["a", "b"]
    assert w.spec.composite_pod_group_templates == [] and w.composite_template("a") is None
    assert w.template("b") is not None
    msg = error_of(parse_workload, workload(podGroupTemplates=[]))
    assert msg.startswith("spec.podGroupTemplates:") and "at least 1" in msg


@pytest.mark.parametrize("levels", [1, 2, 3])
def test_three_levels_of_composite_templates_are_allowed(levels: int) -> None:
    w = parse_workload(workload(compositePodGroupTemplates=[nested(levels)]))
    assert w.template("leaf") is not None and w.composite_template(f"c{levels}") is not None


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({}, "spec: Value error, exactly one of podGroupTemplates or compositePodGroupTemplates must be set"),
        (
            {"podGroupTemplates": [pg_template("a")], "compositePodGroupTemplates": [nested(1)]},
            "spec: Value error, exactly one of podGroupTemplates or compositePodGroupTemplates must be set",
        ),
        (
            {"compositePodGroupTemplates": [nested(4)]},
            "spec: Value error, compositePodGroupTemplates[0].compositePodGroupTemplates[0]"
            ".compositePodGroupTemplates[0].compositePodGroupTemplates[0]: maximum template hierarchy depth is 4",
        ),
        ({"compositePodGroupTemplates": []}, "spec.compositePodGroupTemplates: List should have at least 1 item"),
        (
            {"compositePodGroupTemplates": [cpg_template("empty")]},
            "spec.compositePodGroupTemplates.0: Value error, must have at least one child",
        ),
        (
            {"compositePodGroupTemplates": [cpg_template("r", [pg_template(f"p{i}") for i in range(9)])]},
            "spec.compositePodGroupTemplates.0.podGroupTemplates: List should have at most 8 items",
        ),
        (
            {
                "compositePodGroupTemplates": [
                    cpg_template("r", [pg_template("a")], [cpg_template("s", [pg_template("a")])])
                ]
            },
            "spec: Value error, compositePodGroupTemplates[0].compositePodGroupTemplates[0].podGroupTemplates[0]"
            ".name: duplicate template name 'a' (also compositePodGroupTemplates[0].podGroupTemplates[0])",
        ),
        (
            {"compositePodGroupTemplates": [cpg_template("r", [pg_template("r")])]},
            "spec: Value error, compositePodGroupTemplates[0].podGroupTemplates[0].name: duplicate template name 'r'",
        ),
        (
            {"compositePodGroupTemplates": [cpg_template("r", [pg_template("a")], schedulingPolicy={"gang": {}})]},
            "spec.compositePodGroupTemplates.0.schedulingPolicy.gang.minGroupCount: Field required",
        ),
    ],
    ids=[
        "neither",
        "both",
        "depth-5",
        "empty-list",
        "composite-without-children",
        "9-children",
        "duplicate-name-across-levels",
        "leaf-named-as-its-parent",
        "minGroupCount-missing",
    ],
)
def test_invalid_workload_trees_name_the_field(spec: Obj, expected: str) -> None:
    msg = error_of(parse_workload, workload(**spec))
    assert msg.startswith(expected), msg


def test_native_workload_composite_templates() -> None:
    body = workload(
        f"{NATIVE}/v1beta1",
        compositePodGroupTemplates=[
            cpg_template(
                "replica",
                [pg_template("leader", disruptionMode={"all": {}}, futureField=1)],
                [cpg_template("workers", [pg_template("shard")], disruptionMode={"all": {}})],
                disruptionMode={"single": {}},
                preemptionPolicy="Never",
            )
        ],
    )
    w = sources.parse_workload(body)
    assert w.key == GroupKey("ns", "w", NATIVE)
    replica = w.composite_template("replica")
    assert replica is not None and (replica.disruption_mode, replica.preemption_policy) == ("Pod", "Never")
    workers = w.composite_template("workers")
    assert workers is not None and workers.disruption_mode == "PodGroup"
    leader = w.template("leader")
    assert leader is not None and leader.disruption_mode == "PodGroup"
    assert w.template("shard") is not None
    # v1alpha2 has no composite templates: troupe's model then says none is set.
    msg = error_of(sources.parse_workload, workload(f"{NATIVE}/v1alpha2", compositePodGroupTemplates=[nested(1)]))
    assert msg.startswith("spec.podGroupTemplates:"), msg
