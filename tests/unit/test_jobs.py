"""The Job integration's pure part (api/jobs.py) and how the scheduler treats a Job's pods."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api.jobs import (
    JOB_POLICY_ANNOTATION,
    MIN_COUNT_ANNOTATION,
    TEMPLATE_ANNOTATION,
    WORKLOAD_ANNOTATION,
    group_name,
    parse_job,
    pod_group_of,
)
from scheduler.api.parse import parse_pod
from scheduler.api.podgroup import parse_podgroup, parse_workload
from scheduler.api.records import GroupKey

from .test_runtime_scheduler import drain, node, sched  # noqa: F401  (fixture)

UID = "0a1b2c3d-4e5f-6789-abcd-ef0123456789"


def job(
    annotations: dict[str, str] | None = None,
    parallelism: int | None = 4,
    suspend: bool = False,
    conditions: list[dict[str, str]] | None = None,
    priority_class: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "template": {
            "metadata": {"annotations": annotations if annotations is not None else {JOB_POLICY_ANNOTATION: "gang"}},
            "spec": {"schedulerName": "troupe-scheduler", "containers": [{"name": "c", "image": "x"}]},
        },
        "suspend": suspend,
    }
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if priority_class:
        spec["template"]["spec"]["priorityClassName"] = priority_class
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "ns", "uid": UID},
        "spec": spec,
        "status": {"conditions": conditions or []},
    }


def job_pod(
    name: str, annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "labels": labels or {"batch.kubernetes.io/job-name": "train"},
            "annotations": annotations if annotations is not None else {JOB_POLICY_ANNOTATION: "gang"},
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": UID, "controller": True}
            ],
        },
        "spec": {
            "schedulerName": "troupe-scheduler",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
        },
    }


def test_names_carry_the_jobs_uid_so_a_recreated_job_gets_new_objects():
    assert group_name("train", UID) == "train-0a1b2c3d"
    assert group_name("train", "ffffffff-0000-0000-0000-000000000000") != group_name("train", UID)


def test_a_job_without_the_annotation_is_not_ours():
    assert parse_job(job(annotations={})) is None
    assert parse_job(job(annotations={"other": "x"})) is None


def test_gang_defaults_to_parallelism_and_builds_valid_objects():
    intent = parse_job(job(parallelism=4))
    assert intent is not None and intent.problem is None
    assert (intent.policy, intent.min_count, intent.group) == ("gang", 4, "train-0a1b2c3d")
    workload = parse_workload(intent.workload())
    group = parse_podgroup(intent.podgroup())
    assert workload.spec.pod_group_templates[0].scheduling_policy.gang.min_count == 4  # type: ignore[union-attr]
    assert group.min_count == 4 and group.is_gang
    ref = group.spec.pod_group_template_ref
    assert ref is not None and ref.workload is not None
    assert (ref.workload.workload_name, ref.workload.pod_group_template_name) == ("train-0a1b2c3d", "workers")
    owners = intent.podgroup()["metadata"]["ownerReferences"]
    assert owners == [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": UID, "controller": True}]


def test_explicit_min_count_and_basic_and_priority_class():
    intent = parse_job(job({JOB_POLICY_ANNOTATION: "gang", MIN_COUNT_ANNOTATION: "3"}, parallelism=4))
    assert intent is not None and intent.problem is None and intent.min_count == 3
    basic = parse_job(job({JOB_POLICY_ANNOTATION: "basic"}, priority_class="high"))
    assert basic is not None and basic.problem is None
    assert basic.podgroup()["spec"]["schedulingPolicy"] == {"basic": {}}
    assert basic.podgroup()["spec"]["priorityClassName"] == "high"


@pytest.mark.parametrize(
    ("annotations", "parallelism", "says"),
    [
        (
            {JOB_POLICY_ANNOTATION: "gang", MIN_COUNT_ANNOTATION: "5"},
            4,
            "min-count is 5, more than the Job's parallelism 4",
        ),
        ({JOB_POLICY_ANNOTATION: "gang", MIN_COUNT_ANNOTATION: "zero"}, 4, "it must be an integer >= 1"),
        ({JOB_POLICY_ANNOTATION: "gang", MIN_COUNT_ANNOTATION: "0"}, 4, "it must be an integer >= 1"),
        ({JOB_POLICY_ANNOTATION: "all-or-nothing"}, 4, "it must be 'gang' or 'basic'"),
        ({JOB_POLICY_ANNOTATION: "basic", MIN_COUNT_ANNOTATION: "2"}, 4, "a minCount needs 'gang'"),
    ],
)
def test_impossible_requests_are_a_problem_not_an_exception(annotations, parallelism, says):
    intent = parse_job(job(annotations, parallelism=parallelism))
    assert intent is not None and intent.problem is not None and says in intent.problem


def test_suspended_and_finished_jobs():
    assert parse_job(job(suspend=True)).suspended  # type: ignore[union-attr]
    done = parse_job(job(conditions=[{"type": "Complete", "status": "True"}]))
    assert done is not None and done.finished
    running = parse_job(job(conditions=[{"type": "Suspended", "status": "False"}]))
    assert running is not None and not running.finished


def test_a_jobs_pod_joins_its_group_without_a_label():
    pod = parse_pod(job_pod("train-abc"))
    assert pod.group_name == "train-0a1b2c3d"
    # Not opted in: no group. A label of its own wins over the Job's group.
    assert parse_pod(job_pod("plain", annotations={})).group_name is None
    mine = parse_pod(job_pod("own", labels={"scheduling.troupe.dev/pod-group": "mine"}))
    assert mine.group_name == "mine"
    # Owned by something else than a Job: no group.
    body = job_pod("rs")
    body["metadata"]["ownerReferences"][0]["kind"] = "ReplicaSet"
    assert pod_group_of(body["metadata"]) is None


def test_pods_of_an_impossible_job_say_why_they_wait(sched):  # noqa: F811
    s, rec = sched
    s.on_node(node("a", cpu="8"))
    s.on_pod(job_pod("train-0"))
    drain(s)
    assert rec.pods["train-0"] == "waiting for PodGroup ns/train-0a1b2c3d to be created"
    s.on_group_problem(GroupKey("ns", "train-0a1b2c3d"), "min-count is 5, more than the Job's parallelism 4")
    assert rec.pods["train-0"] == (
        "waiting for PodGroup ns/train-0a1b2c3d, which troupe does not create: "
        "min-count is 5, more than the Job's parallelism 4"
    )
    s.on_group_problem(GroupKey("ns", "train-0a1b2c3d"), None)
    assert rec.pods["train-0"] == "waiting for PodGroup ns/train-0a1b2c3d to be created"
    assert rec.binds == []


def test_a_jobs_gang_binds_whole_once_its_group_exists(sched):  # noqa: F811
    s, rec = sched
    s.on_node(node("a", cpu="8"))
    intent = parse_job(job(parallelism=2))
    assert intent is not None
    s.on_pod(job_pod("train-0"))
    drain(s)
    assert rec.binds == []
    s.on_workload({**intent.workload(), "metadata": {**intent.workload()["metadata"], "uid": "wl-uid"}})
    s.on_podgroup({**intent.podgroup(), "metadata": {**intent.podgroup()["metadata"], "uid": "pg-uid"}})
    drain(s)
    assert rec.binds == []  # minCount 2, one pod
    s.on_pod(job_pod("train-1"))
    drain(s)
    assert sorted(n for n, _ in rec.binds) == ["train-0", "train-1"]


def _workload(*templates: dict[str, Any]):
    return parse_workload(
        {"metadata": {"name": "shared", "namespace": "ns", "uid": "wl"}, "spec": {"podGroupTemplates": list(templates)}}
    )


def test_a_job_may_name_a_workload_of_its_own_and_take_its_template():
    intent = parse_job(job({WORKLOAD_ANNOTATION: "shared"}))
    assert intent is not None and intent.problem is None and intent.workload_name == "shared"
    workload = _workload(
        {
            "name": "workers",
            "schedulingPolicy": {"gang": {"minCount": 3}},
            "schedulingConstraints": {"topology": [{"key": "rack"}]},
            "priorityClassName": "high",
        }
    )
    template, problem = intent.template_of(workload)
    assert problem is None and template is not None
    body = intent.podgroup(template)
    group = parse_podgroup(body)
    assert group.min_count == 3 and group.spec.priority_class_name == "high"
    assert body["spec"]["schedulingConstraints"] == {"topology": [{"key": "rack"}]}
    assert body["spec"]["podGroupTemplateRef"] == {
        "workload": {"workloadName": "shared", "podGroupTemplateName": "workers"}
    }
    assert body["metadata"]["name"] == "train-0a1b2c3d"  # the group is still the Job's own


def test_a_named_workload_with_several_templates_needs_one_named():
    two = _workload(
        {"name": "ps", "schedulingPolicy": {"basic": {}}}, {"name": "workers", "schedulingPolicy": {"basic": {}}}
    )
    intent = parse_job(job({WORKLOAD_ANNOTATION: "shared"}))
    assert intent is not None
    assert intent.template_of(two)[1] == (
        "Workload ns/shared has 2 podGroupTemplates (ps, workers): name one with scheduling.troupe.dev/pod-group-template"
    )
    named = parse_job(job({WORKLOAD_ANNOTATION: "shared", TEMPLATE_ANNOTATION: "ps"}))
    assert named is not None and named.template_of(two)[0].name == "ps"  # type: ignore[union-attr]
    missing = parse_job(job({WORKLOAD_ANNOTATION: "shared", TEMPLATE_ANNOTATION: "nope"}))
    assert missing is not None and missing.template_of(two)[1] == "Workload ns/shared has no podGroupTemplate 'nope'"


def test_naming_a_workload_and_a_policy_is_a_problem():
    both = parse_job(job({WORKLOAD_ANNOTATION: "shared", JOB_POLICY_ANNOTATION: "gang"}))
    assert both is not None and both.problem is not None and "set one" in both.problem
    empty = parse_job(job({WORKLOAD_ANNOTATION: " "}))
    assert empty is not None and empty.problem is not None and "must name a Workload" in empty.problem
    # Its pods are the Job's group's members either way.
    assert pod_group_of(job_pod("p", annotations={WORKLOAD_ANNOTATION: "shared"})["metadata"]) == "train-0a1b2c3d"


def test_completions_below_parallelism_bound_the_default_min_count():
    body = job(parallelism=4)
    body["spec"]["completions"] = 2
    intent = parse_job(body)
    assert intent is not None and intent.min_count == 2 and intent.problem is None


def test_the_floor_is_what_the_completions_still_to_come_allow():
    """Succeeded pods no longer count toward minCount: with 1 completion left
    the Job runs 1 pod, so its gang may go down to 1 (runtime/jobs.py lowers
    it only when a worker waits)."""
    body = job(parallelism=4)
    body["spec"]["completions"] = 4
    body["status"]["succeeded"] = 3
    intent = parse_job(body)
    assert intent is not None and (intent.min_count, intent.floor) == (4, 1)
    assert intent.podgroup(min_count=1)["spec"]["schedulingPolicy"] == {"gang": {"minCount": 1}}
    explicit = job({JOB_POLICY_ANNOTATION: "gang", MIN_COUNT_ANNOTATION: "3"}, parallelism=4)
    explicit["spec"]["completions"] = 4
    explicit["status"]["succeeded"] = 2
    intent = parse_job(explicit)
    assert intent is not None and intent.problem is None and (intent.min_count, intent.floor) == (3, 2)


@pytest.mark.parametrize(
    "body",
    [
        {"metadata": {"name": "j", "uid": "u"}, "spec": {"template": 3}},
        {"metadata": {"name": "j", "uid": "u"}, "spec": 3},
        {"metadata": 3, "spec": {}},
        {"metadata": {"name": "j", "uid": "u"}, "spec": {"template": {"metadata": {"annotations": ["x"]}}}},
    ],
)
def test_a_job_of_the_wrong_shape_is_not_opted_in_and_never_raises(body):
    assert parse_job(body) is None


def test_an_opted_in_job_with_a_malformed_status_still_parses():
    body = {
        "metadata": {"name": "j", "uid": "u", "namespace": "ns"},
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "template": {"metadata": {"annotations": {"scheduling.troupe.dev/job-policy": "gang"}}, "spec": 7},
        },
        "status": "weird",
    }
    intent = parse_job(body)
    assert intent is not None and (intent.min_count, intent.finished) == (2, False)
