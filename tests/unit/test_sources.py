"""Group sources (scheduler/api/sources): which group a pod names, the native
scheduling.k8s.io PodGroup of each version as troupe's, and the status in the
served version's vocabulary; and `troupe simulate` on native objects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.api import constants as C
from scheduler.api.config import SchedulerConfiguration
from scheduler.api.parse import parse_pod
from scheduler.api.records import GroupKey
from scheduler.api.sources import export_conditions, parse_group, parse_workload, pod_group
from scheduler.cluster.cache import ClusterCache
from scheduler.core.scheduler import Scheduler
from scheduler.plugins import in_tree_registry

from .test_runtime_scheduler import Recorder, drain
from .test_runtime_scheduler import node as core_node
from .test_runtime_scheduler import pod as troupe_pod
from .test_runtime_scheduler import podgroup as troupe_podgroup
from .test_simulate import node, priority_class, run, run_json

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "simulate-native.yaml"


def native(version: str, name: str = "g", **spec: Any) -> dict[str, Any]:
    spec.setdefault("schedulingPolicy", {"gang": {"minCount": 2}})
    return {
        "apiVersion": f"scheduling.k8s.io/{version}",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "ns", "uid": "u1", "generation": 1},
        "spec": spec,
    }


def worker(name: str, group: str, cpu: str = "1", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {
            "schedulerName": "troupe-scheduler",
            "schedulingGroup": {"podGroupName": group},
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
            **spec,
        },
    }


# ------------------------------------------------------------ pod -> group


def test_a_pod_names_its_group_by_the_first_source():
    """troupe's label, then the Job that owns it (opted in), then
    spec.schedulingGroup: the 1.37 Job controller names a native group for
    the pods of every Job, a basic one unless the Job asks otherwise, and
    must not turn a Job that asked troupe for a gang into a basic group."""
    job_owner = [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "0a1b2c3d-x", "controller": True}]
    meta = {
        "namespace": "ns",
        "labels": {C.POD_GROUP_LABEL: "mine"},
        "annotations": {"scheduling.troupe.dev/job-policy": "gang"},
        "ownerReferences": job_owner,
    }
    native_spec = {"schedulingGroup": {"podGroupName": "native"}}
    assert pod_group(meta, native_spec) == GroupKey("ns", "mine")
    assert pod_group(meta, {}) == GroupKey("ns", "mine")
    meta["labels"] = {}
    assert pod_group(meta, native_spec) == GroupKey("ns", "j-0a1b2c3d")
    meta["annotations"] = {}
    assert pod_group(meta, native_spec) == GroupKey("ns", "native", "scheduling.k8s.io")
    assert pod_group({"namespace": "ns"}, {"schedulingGroup": {}}) is None


def test_a_native_member_is_labelled_for_default_spreading_without_touching_its_labels():
    pod = parse_pod(
        {**worker("p", "g"), "metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"a": "b"}}}
    )
    assert pod.group == GroupKey("ns", "g", "scheduling.k8s.io")
    assert str(pod.group) == "PodGroup ns/g (scheduling.k8s.io)"
    assert pod.labels == {"a": "b", "scheduling.k8s.io:pod-group": "g"}  # a key no real label can have


def test_same_name_in_two_sources_are_two_groups():
    """A troupe PodGroup and a native one, both ns/g, each with its own pod:
    the cache keeps two groups, each with only its own member."""
    labelled = worker("t", "g")
    del labelled["spec"]["schedulingGroup"]
    labelled["metadata"] |= {"uid": "t", "labels": {C.POD_GROUP_LABEL: "g"}}
    troupe_pod = parse_pod(labelled)
    native_pod = parse_pod({**worker("n", "g"), "metadata": {"name": "n", "namespace": "ns", "uid": "n"}})
    cache = ClusterCache()
    for p in (troupe_pod, native_pod):
        cache.upsert_pod(p)
    troupe_group = {**native("v1alpha2"), "apiVersion": C.API_VERSION}
    for body in (troupe_group, native("v1beta1")):
        group = parse_group(body)
        cache.upsert_group(group.key, group)
    troupe_key, native_key = GroupKey("ns", "g"), GroupKey("ns", "g", "scheduling.k8s.io")
    assert (troupe_pod.group, native_pod.group) == (troupe_key, native_key)
    assert set(cache.groups) == {troupe_key, native_key}
    assert [p.name for p in cache.members(troupe_key)] == ["t"]
    assert [p.name for p in cache.members(native_key)] == ["n"]
    assert str(troupe_key) == "PodGroup ns/g" and str(native_key) == "PodGroup ns/g (scheduling.k8s.io)"


# --------------------------------------------------------------- versions


@pytest.mark.parametrize("version", ["v1beta1", "v1alpha3"])
def test_v1beta1_and_v1alpha3_translate_field_for_field(version):
    group = parse_group(
        native(
            version,
            workloadRef={"workloadName": "w", "templateName": "worker"},
            schedulingConstraints={"topology": [{"key": "rack"}]},
            resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "t"}],
            disruptionMode={"all": {}},
            priorityClassName="high",
            priority=7,
            preemptionPolicy="Never",
        )
        | {"status": {"conditions": [{"type": "PodGroupInitiallyScheduled", "status": "True", "reason": "Scheduled"}]}}
    )
    assert group.key == GroupKey("ns", "g", "scheduling.k8s.io")
    assert group.is_gang and group.min_count == 2
    assert group.spec.scheduling_constraints is not None and group.spec.scheduling_constraints.topology_keys == ["rack"]
    assert group.spec.resource_claims[0].resource_claim_template_name == "t"
    assert (group.spec.disruption_mode, group.spec.priority_class_name, group.spec.priority) == ("PodGroup", "high", 7)
    assert group.spec.preemption_policy == "Never"
    assert group.spec.pod_group_template_ref is None  # the link is for display: no Workload is waited for
    assert group.workload_ref == "w/worker"
    assert group.problem is None
    scheduled = group.condition(C.POD_GROUP_SCHEDULED)  # troupe's vocabulary inside
    assert scheduled is not None and scheduled.status == "True"
    assert parse_group(native(version, disruptionMode={"single": {}})).spec.disruption_mode == "Pod"


def test_v1alpha2_is_troupes_shape():
    ref = {"workload": {"workloadName": "w", "podGroupTemplateName": "worker"}}
    group = parse_group(native("v1alpha2", podGroupTemplateRef=ref, disruptionMode="PodGroup"))
    assert (group.spec.disruption_mode, group.workload_ref, group.problem) == ("PodGroup", "w/worker", None)
    assert group.spec.pod_group_template_ref is None


def test_status_is_written_in_the_served_versions_vocabulary():
    conditions = [{"type": C.POD_GROUP_SCHEDULED, "status": "False"}, {"type": C.DISRUPTION_TARGET, "status": "True"}]
    assert [c["type"] for c in export_conditions("scheduling.k8s.io/v1beta1", conditions)] == [
        "PodGroupInitiallyScheduled",
        "DisruptionTarget",
    ]
    assert export_conditions("scheduling.k8s.io/v1alpha3", conditions)[0]["type"] == "PodGroupInitiallyScheduled"
    assert export_conditions("scheduling.k8s.io/v1alpha2", conditions) == conditions
    assert export_conditions(C.API_VERSION, conditions) == conditions


def test_what_troupe_cannot_honour_is_named():
    # A parent CompositePodGroup is honoured (issue 36): the PodGroup is a leaf of its tree.
    child = parse_group(native("v1beta1", parentCompositePodGroupName="parent"))
    assert child.problem is None and child.parent_key == GroupKey("ns", "parent", "scheduling.k8s.io")
    unknown = parse_group(native("v1beta1", futureField={"x": 1}))
    assert unknown.problem == "spec.futureField: a field troupe does not know (scheduling.k8s.io/v1beta1)"
    policy = parse_group(native("v1beta1", schedulingPolicy={"gang": {"minCount": 2, "timeoutSeconds": 5}}))
    assert policy.problem == "spec.schedulingPolicy.gang.timeoutSeconds: a scheduling policy troupe does not know"
    # podGroupTemplateRef is not a v1beta1 field
    old = parse_group(native("v1beta1", podGroupTemplateRef={"workload": {}}))
    assert old.problem is not None and "spec.podGroupTemplateRef" in old.problem
    version = parse_group(native("v1"))
    assert version.problem is not None and version.problem.startswith("scheduling.k8s.io/v1 is an API version")


def test_native_workload_templates():
    workload = parse_workload(
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "Workload",
            "metadata": {"name": "w", "namespace": "ns"},
            "spec": {
                "podGroupTemplates": [
                    {"name": "worker", "schedulingPolicy": {"basic": {}}, "disruptionMode": {"all": {}}}
                ]
            },
        }
    )
    assert workload.key == GroupKey("ns", "w", "scheduling.k8s.io")
    template = workload.template("worker")
    assert template is not None and template.disruption_mode == "PodGroup"


# --------------------------------------------------------------- simulate


def test_simulate_the_documentation_example_places_one_gang_whole(capsys, tmp_path):
    out = run_json(capsys, tmp_path, [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d])
    placed = {p["name"]: p["node"] for p in out["pods"]}
    by_gang = {g: sum(1 for n, node in placed.items() if n.startswith(f"training-{g}") and node) for g in "ab"}
    assert sorted(by_gang.values()) == [0, 4], by_gang  # one whole, none split
    reasons = sorted(g["reason"] for g in out["podGroups"])
    assert reasons == ["Scheduled", "Unschedulable"]
    assert {(g["apiGroup"], g["workload"]) for g in out["podGroups"]} == {
        ("scheduling.k8s.io", "training-a/worker"),
        ("scheduling.k8s.io", "training-b/worker"),
    }


def test_simulate_matches_kinds_by_group_and_version(capsys, tmp_path):
    other = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha2",  # a version scheduler-plugins never served
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "ns"},
        "spec": {"minMember": 2},
    }
    rc, out, err = run(capsys, tmp_path, [node("n1"), other])
    assert rc == 0
    assert "apiVersion 'scheduling.x-k8s.io/v1alpha2' is not one troupe reads" in err
    # A troupe PodGroup and a native one of the same name are two groups.
    troupe_group = {
        "apiVersion": C.API_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "ns"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 3}}},
    }
    docs = [node("n1", cpu="4"), troupe_group, native("v1beta1"), worker("w0", "g"), worker("w1", "g")]
    out_json = run_json(capsys, tmp_path, docs)
    assert {p["name"]: p["node"] for p in out_json["pods"]} == {"w0": "n1", "w1": "n1"}  # the native gang of 2


def test_simulate_a_native_podgroup_whose_parent_is_missing_waits_and_says_which(capsys, tmp_path):
    docs = [
        node("n1", cpu="4"),
        native("v1beta1", parentCompositePodGroupName="p", workloadRef={"workloadName": "w", "templateName": "t"}),
        worker("w0", "g"),
        worker("w1", "g"),
    ]
    assert all(p["node"] is None for p in run_json(capsys, tmp_path, docs)["pods"])
    rc, out, _ = run(capsys, tmp_path, docs)
    said = [line for line in out.splitlines() if "waiting for CompositePodGroup ns/p to be created" in line]
    assert rc == 0 and sum(1 for line in said if line.startswith(("ns/w0", "ns/w1"))) == 2, out


def test_a_native_group_with_preemption_policy_never_does_not_preempt(capsys, tmp_path):
    low = [
        {
            **worker(f"low-{i}", "low", priorityClassName="low"),
            "spec": {**worker(f"low-{i}", "low")["spec"], "nodeName": "n1", "priorityClassName": "low"},
        }
        for i in range(2)
    ]
    docs = [
        node("n1"),
        priority_class("low", 1),
        priority_class("high", 1000),
        native("v1beta1", "low", disruptionMode={"all": {}}),
        native("v1beta1", "high", preemptionPolicy="Never", priorityClassName="high"),
        *low,
        worker("high-0", "high", priorityClassName="high"),
        worker("high-1", "high", priorityClassName="high"),
    ]
    out = run_json(capsys, tmp_path, docs)
    placed = {p["name"]: p["node"] for p in out["pods"]}
    assert placed == {"low-0": "n1", "low-1": "n1", "high-0": None, "high-1": None}
    # Without Never, the same input preempts the low gang whole.
    docs[4] = native("v1beta1", "high", priorityClassName="high")
    out = run_json(capsys, tmp_path, docs)
    placed = {p["name"]: p["node"] for p in out["pods"]}
    assert placed["high-0"] == "n1" and placed["high-1"] == "n1"


@pytest.mark.parametrize("version", ["v1beta1", "v1alpha2"])
@pytest.mark.parametrize("ref", [3, "w/t", ["w"], {"workload": 3}])
def test_a_malformed_template_link_is_shown_as_none_not_a_crash(version, ref):
    # The API server's schema types these; a file given to simulate may not.
    field = "podGroupTemplateRef" if version == "v1alpha2" else "workloadRef"
    body = {
        "apiVersion": f"scheduling.k8s.io/{version}",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "ns"},
        "spec": {field: ref, "schedulingPolicy": {"basic": {}}},
    }
    assert parse_group(body).workload_ref is None


def test_a_pod_with_a_null_spec_is_read_as_the_api_server_reads_it(capsys, tmp_path):
    docs = [node("n1"), {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}, "spec": None}]
    rc, out, err = run(capsys, tmp_path, docs)
    assert rc == 0, err
    assert "ns/p" in out and "not placed by this scheduler" in out


# ------------------------------------------ a configuration error's reason, by served version

TWO_PROFILES = SchedulerConfiguration.model_validate(
    {"profiles": [{"schedulerName": "troupe-scheduler"}, {"schedulerName": "troupe-second"}]}
)


class ReasonRecorder(Recorder):
    """The Recorder, with each pod's PodScheduled reason."""

    def __init__(self) -> None:
        super().__init__()
        self.pod_reasons: dict[str, str] = {}

    def pod_unschedulable(self, pod, message, still_waiting=None, reason="Unschedulable") -> None:
        super().pod_unschedulable(pod, message, still_waiting, reason)
        self.pod_reasons[pod.name] = reason


def served(kube_version: tuple[int, int] | None) -> tuple[Scheduler, ReasonRecorder]:
    """The core as the runtime wires it to a server of `kube_version` (None: not known, as simulate)."""
    rec = ReasonRecorder()
    s = Scheduler(TWO_PROFILES, in_tree_registry(), binder=rec, writer=rec, report_delay=0)
    s.kube_version = kube_version
    s.start_scheduling()
    s.on_node(core_node("n1", cpu="8"))
    return s, rec


def native_group(name: str, version: str = "v1beta1", **spec: Any) -> dict[str, Any]:
    body = native(version, name, **spec)
    body["metadata"]["uid"] = f"uid-pg-{name}"
    return body


def member(name: str, group: str, scheduler: str = "troupe-scheduler") -> dict[str, Any]:
    body = worker(name, group, schedulerName=scheduler)
    body["metadata"]["uid"] = f"uid-{name}"
    return body


def reasons(rec: Recorder) -> dict[str, tuple[str, str]]:
    """Each group's last condition written (PodGroups and CompositePodGroups): status, reason."""
    return {name: (status, reason) for name, status, reason, _ in rec.groups}


@pytest.mark.parametrize(
    ("kube_version", "reason"),
    [((1, 37), "SchedulerError"), ((1, 38), "PodGroupError"), ((1, 39), "PodGroupError"), (None, "SchedulerError")],
)
def test_a_native_gang_whose_pods_name_two_schedulers_says_podgrouperror_from_138(kube_version, reason):
    """Pods of one group with two schedulerNames (both troupe's profiles) is
    upstream's runtime validation error: PodGroupError on Kubernetes 1.38,
    SchedulerError on 1.37 (the same v1beta1 without the word) and where the
    version is not known. Its pods say SchedulerError either way, as upstream's."""
    s, rec = served(kube_version)
    s.on_podgroup(native_group("g"))
    s.on_pod(member("g-0", "g"))
    s.on_pod(member("g-1", "g", scheduler="troupe-second"))
    drain(s)
    assert rec.binds == []
    assert reasons(rec) == {"g": ("False", reason)}
    assert "name different schedulerName values (troupe-scheduler, troupe-second)" in rec.groups[-1][3]
    assert rec.pod_reasons == {"g-0": "SchedulerError", "g-1": "SchedulerError"}


def test_on_138_other_errors_and_troupes_own_podgroups_keep_schedulererror():
    """A field troupe does not know is troupe's error, not the group's
    configuration; troupe's own kind has no PodGroupError in its vocabulary."""
    s, rec = served((1, 38))
    s.on_podgroup(native_group("unknown", futureField={"x": 1}))
    for i in range(2):
        s.on_pod(member(f"unknown-{i}", "unknown"))
    s.on_podgroup(troupe_podgroup("own", 2))
    s.on_pod(troupe_pod("own-0", "own"))
    s.on_pod(troupe_pod("own-1", "own", scheduler="troupe-second"))
    drain(s)
    assert reasons(rec) == {"unknown": ("False", "SchedulerError"), "own": ("False", "SchedulerError")}


def native_composite(name: str, version: str) -> dict[str, Any]:
    return {
        "apiVersion": f"scheduling.k8s.io/{version}",
        "kind": "CompositePodGroup",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-cpg-{name}", "generation": 1},
        "spec": {"schedulingPolicy": {"gang": {"minGroupCount": 2}}},
    }


@pytest.mark.parametrize(
    ("kube_version", "composite_version", "root_reason", "leaf_reason"),
    [
        ((1, 37), "v1alpha3", "Invalid", "SchedulerError"),  # 1.37 serves CompositePodGroups at v1alpha3 only
        ((1, 38), "v1alpha3", "Invalid", "PodGroupError"),
        ((1, 38), "v1beta1", "CompositePodGroupError", "PodGroupError"),
    ],
)
def test_the_podgroups_of_an_invalid_native_tree_say_podgrouperror_from_138(
    kube_version, composite_version, root_reason, leaf_reason
):
    """A leaf whose priority is not its root's: the CompositePodGroup says its
    invalid reason, and on 1.38 each PodGroup below it PodGroupError (upstream
    writes it down the tree below its CompositePodGroupError), on 1.37 SchedulerError."""
    s, rec = served(kube_version)
    s.on_composite(native_composite("root", composite_version))
    for name, extra in (("a", {}), ("b", {"priority": 5})):
        policy = {"gang": {"minCount": 1}}
        s.on_podgroup(native_group(name, schedulingPolicy=policy, parentCompositePodGroupName="root", **extra))
        s.on_pod(member(f"{name}-0", name))
    drain(s)
    assert rec.binds == []
    assert reasons(rec) == {"root": ("False", root_reason), "a": ("False", leaf_reason), "b": ("False", leaf_reason)}
    assert "a tree has one priority" in rec.groups[-1][3]
    assert rec.pod_reasons == {"a-0": "SchedulerError", "b-0": "SchedulerError"}


@pytest.mark.parametrize(("kube_version", "leaf_reason"), [((1, 37), "SchedulerError"), ((1, 38), "PodGroupError")])
def test_the_podgroups_of_a_native_tree_whose_pods_name_two_schedulers_say_podgrouperror_from_138(
    kube_version, leaf_reason
):
    """The same error across a tree's leaves: each PodGroup says it in the
    served version's word."""
    s, rec = served(kube_version)
    s.on_composite(native_composite("root", "v1beta1" if kube_version >= (1, 38) else "v1alpha3"))
    policy = {"gang": {"minCount": 1}}
    for name, scheduler in (("a", "troupe-scheduler"), ("b", "troupe-second")):
        s.on_podgroup(native_group(name, schedulingPolicy=policy, parentCompositePodGroupName="root"))
        s.on_pod(member(f"{name}-0", name, scheduler))
    drain(s)
    assert rec.binds == []
    got = reasons(rec)
    assert (got["a"], got["b"]) == (("False", leaf_reason), ("False", leaf_reason))
    assert "name different schedulerName values" in rec.groups[-1][3]
    # The CompositePodGroup as upstream 1.38 writes it (v1beta1); 1.37's v1alpha3 has no such word.
    assert got["root"] == ("False", "CompositePodGroupError" if kube_version >= (1, 38) else "SchedulerError")
