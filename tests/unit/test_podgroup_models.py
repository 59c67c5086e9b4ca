"""pydantic models of PodGroup / Workload (scheduling.troupe.dev/v1alpha2)."""

from __future__ import annotations

import copy

import pytest
from pydantic import ValidationError

from scheduler.api.podgroup import PodGroup, Workload, describe_validation_error, parse_podgroup, parse_workload
from scheduler.api.records import GroupKey


def pg(spec: dict, **meta) -> dict:
    return {
        "apiVersion": "scheduling.troupe.dev/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "ns", "uid": "u1", "generation": 3, **meta},
        "spec": spec,
    }


def wl(templates: list) -> dict:
    return {
        "apiVersion": "scheduling.troupe.dev/v1alpha2",
        "kind": "Workload",
        "metadata": {"name": "w", "namespace": "ns"},
        "spec": {"podGroupTemplates": templates},
    }


def template(name: str = "workers", **extra) -> dict:
    return {"name": name, "schedulingPolicy": {"gang": {"minCount": 2}}, **extra}


def error_of(fn, body) -> str:
    with pytest.raises(ValidationError) as exc:
        fn(body)
    return describe_validation_error(exc.value)


# ------------------------------------------------------------------ PodGroup


def test_gang_podgroup_parses():
    group = parse_podgroup(
        pg(
            {
                "podGroupTemplateRef": {"workload": {"workloadName": "w", "podGroupTemplateName": "workers"}},
                "schedulingPolicy": {"gang": {"minCount": 4}},
                "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/zone"}]},
                "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "gpu-tpl"}],
                "priorityClassName": "high",
                "priority": 1000,
                "disruptionMode": "PodGroup",
                "someFutureField": {"ignored": True},
            }
        )
    )
    assert isinstance(group, PodGroup)
    assert group.key == GroupKey("ns", "g", "scheduling.troupe.dev")
    assert group.is_gang and group.min_count == 4
    assert group.metadata.generation == 3 and group.metadata.uid == "u1"
    assert group.spec.pod_group_template_ref.workload.workload_name == "w"
    assert group.spec.scheduling_constraints.topology[0].key == "topology.kubernetes.io/zone"
    assert group.spec.resource_claims[0].resource_claim_template_name == "gpu-tpl"
    assert group.spec.resource_claims[0].resource_claim_name is None
    assert group.spec.priority == 1000 and group.spec.priority_class_name == "high"
    assert group.spec.disruption_mode == "PodGroup"
    assert group.condition("PodGroupScheduled") is None


def test_basic_podgroup_min_count_is_one():
    group = parse_podgroup(pg({"schedulingPolicy": {"basic": {}}}))
    assert not group.is_gang
    assert group.min_count == 1


def test_namespace_defaults():
    body = pg({"schedulingPolicy": {"basic": {}}})
    del body["metadata"]["namespace"]
    assert parse_podgroup(body).key == GroupKey("default", "g")


def test_status_conditions():
    body = pg({"schedulingPolicy": {"gang": {"minCount": 1}}})
    body["status"] = {
        "conditions": [
            {
                "type": "PodGroupScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "m",
                "observedGeneration": 3,
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ]
    }
    cond = parse_podgroup(body).condition("PodGroupScheduled")
    assert cond is not None
    assert (cond.status, cond.reason, cond.message, cond.observed_generation) == ("False", "Unschedulable", "m", 3)


def test_models_are_frozen():
    group = parse_podgroup(pg({"schedulingPolicy": {"basic": {}}}))
    with pytest.raises(ValidationError):
        group.spec.priority = 5  # type: ignore[misc]


@pytest.mark.parametrize(
    "policy, where",
    [
        ({}, "spec.schedulingPolicy"),
        ({"basic": {}, "gang": {"minCount": 2}}, "spec.schedulingPolicy"),
        ({"gang": {"minCount": 0}}, "spec.schedulingPolicy.gang.minCount"),
        ({"gang": {"minCount": -3}}, "spec.schedulingPolicy.gang.minCount"),
        ({"gang": {}}, "spec.schedulingPolicy.gang.minCount"),
        ({"gang": {"minCount": "many"}}, "spec.schedulingPolicy.gang.minCount"),
    ],
)
def test_policy_validation_names_the_field(policy, where):
    msg = error_of(parse_podgroup, pg({"schedulingPolicy": policy}))
    assert msg.startswith(where + ":"), msg


def test_exactly_one_policy_message():
    msg = error_of(parse_podgroup, pg({"schedulingPolicy": {"basic": {}, "gang": {"minCount": 1}}}))
    assert "exactly one of basic or gang must be set" in msg
    assert error_of(parse_podgroup, pg({"schedulingPolicy": {}})) == msg


def test_min_count_message():
    msg = error_of(parse_podgroup, pg({"schedulingPolicy": {"gang": {"minCount": 0}}}))
    assert msg == "spec.schedulingPolicy.gang.minCount: Input should be greater than or equal to 1"


def test_missing_policy():
    msg = error_of(parse_podgroup, pg({}))
    assert msg == "spec.schedulingPolicy: Field required"


@pytest.mark.parametrize(
    "claim",
    [
        {"name": "c"},
        {"name": "c", "resourceClaimName": "a", "resourceClaimTemplateName": "b"},
    ],
)
def test_claim_needs_exactly_one_source(claim):
    msg = error_of(
        parse_podgroup,
        pg({"schedulingPolicy": {"basic": {}}, "resourceClaims": [{"name": "ok", "resourceClaimName": "x"}, claim]}),
    )
    assert msg.startswith("spec.resourceClaims.1:"), msg
    assert "exactly one of resourceClaimName or resourceClaimTemplateName must be set" in msg


def test_claim_with_either_source_is_valid():
    for claim in ({"name": "a", "resourceClaimName": "x"}, {"name": "b", "resourceClaimTemplateName": "y"}):
        group = parse_podgroup(pg({"schedulingPolicy": {"basic": {}}, "resourceClaims": [claim]}))
        assert len(group.spec.resource_claims) == 1


def test_at_most_four_claims():
    claims = [{"name": f"c{i}", "resourceClaimName": f"x{i}"} for i in range(5)]
    msg = error_of(parse_podgroup, pg({"schedulingPolicy": {"basic": {}}, "resourceClaims": claims}))
    assert msg.startswith("spec.resourceClaims:") and "at most 4" in msg
    assert (
        len(parse_podgroup(pg({"schedulingPolicy": {"basic": {}}, "resourceClaims": claims[:4]})).spec.resource_claims)
        == 4
    )


def test_up_to_four_unique_topology_levels():
    def topology(*keys: str) -> dict:
        return {"schedulingPolicy": {"basic": {}}, "schedulingConstraints": {"topology": [{"key": k} for k in keys]}}

    group = parse_podgroup(pg(topology("rack", "block", "zone")))
    assert group.spec.scheduling_constraints is not None
    assert group.spec.scheduling_constraints.topology_keys == ["rack", "block", "zone"]
    msg = error_of(parse_podgroup, pg(topology("a", "b", "c", "d", "e")))
    assert msg.startswith("spec.schedulingConstraints.topology:") and "at most 4" in msg, msg
    msg = error_of(parse_podgroup, pg(topology("rack", "zone", "rack")))
    assert msg.startswith("spec.schedulingConstraints:") and "unique" in msg, msg


def test_topology_key_required_non_empty():
    spec = {"schedulingPolicy": {"basic": {}}, "schedulingConstraints": {"topology": [{"key": ""}]}}
    assert error_of(parse_podgroup, pg(spec)).startswith("spec.schedulingConstraints.topology.0.key:")


def test_disruption_mode_literal():
    msg = error_of(parse_podgroup, pg({"schedulingPolicy": {"basic": {}}, "disruptionMode": "Node"}))
    assert msg.startswith("spec.disruptionMode:"), msg


def test_several_errors_are_all_reported():
    spec = {"schedulingPolicy": {"gang": {"minCount": 0}}, "disruptionMode": "Everything"}
    msg = error_of(parse_podgroup, pg(spec))
    parts = msg.split("; ")
    assert len(parts) == 2
    assert {p.split(":")[0] for p in parts} == {"spec.schedulingPolicy.gang.minCount", "spec.disruptionMode"}


def test_metadata_name_required():
    body = pg({"schedulingPolicy": {"basic": {}}})
    del body["metadata"]["name"]
    assert error_of(parse_podgroup, body) == "metadata.name: Field required"


# ------------------------------------------------------------------ Workload


def test_workload_parses_and_finds_templates():
    w = parse_workload(wl([template("a"), template("b", schedulingPolicy={"basic": {}}, priorityClassName="p")]))
    assert isinstance(w, Workload)
    assert w.key == GroupKey("ns", "w")
    assert w.template("a").scheduling_policy.gang.min_count == 2
    assert w.template("b").scheduling_policy.basic is not None
    assert w.template("b").priority_class_name == "p"
    assert w.template("c") is None


def test_workload_template_count_bounds():
    assert len(parse_workload(wl([template(f"t{i}") for i in range(8)])).spec.pod_group_templates) == 8
    msg = error_of(parse_workload, wl([template(f"t{i}") for i in range(9)]))
    assert msg.startswith("spec.podGroupTemplates:") and "at most 8" in msg
    msg = error_of(parse_workload, wl([]))
    assert msg.startswith("spec.podGroupTemplates:") and "at least 1" in msg


def test_workload_template_errors_name_the_index():
    templates = [template("a"), template("b", schedulingPolicy={"gang": {"minCount": 0}})]
    assert error_of(parse_workload, wl(templates)).startswith(
        "spec.podGroupTemplates.1.schedulingPolicy.gang.minCount:"
    )
    templates = [template("a"), {"name": "b", "schedulingPolicy": {}}]
    assert error_of(parse_workload, wl(templates)).startswith("spec.podGroupTemplates.1.schedulingPolicy:")


def test_workload_template_claims_validated():
    templates = [template("a", resourceClaims=[{"name": "c"}])]
    msg = error_of(parse_workload, wl(templates))
    assert msg.startswith("spec.podGroupTemplates.0.resourceClaims.0:")


def test_parse_does_not_mutate_the_body():
    body = pg({"schedulingPolicy": {"gang": {"minCount": 2}}})
    before = copy.deepcopy(body)
    parse_podgroup(body)
    assert body == before


def test_describe_validation_error_without_location():
    with pytest.raises(ValidationError) as exc:
        PodGroup.model_validate("not a mapping")
    assert describe_validation_error(exc.value) == "Input should be a valid dictionary or instance of PodGroup"
