"""The batch ecosystem's group sources (scheduler/api/sources): scheduler-plugins'
coscheduling PodGroups, Volcano PodGroups and Kueue's plain pod groups, as
troupe's PodGroup; their status in their own vocabulary; and the core's
handling of what they ask beyond upstream (minResources, minTaskMember,
groups made of their pods), through `troupe simulate`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from scheduler.api import constants as C
from scheduler.api.parse import parse_pod
from scheduler.api.records import GroupKey
from scheduler.api.sources import (
    MemberCounts,
    coscheduling,
    enabled_sources,
    export_status,
    implied_group,
    parse_group,
    pod_group,
    volcano,
)
from scheduler.core.schedule_podgroup import order_pods

from .test_runtime_scheduler import drain, sched  # noqa: F401  (fixture)
from .test_simulate import node, run, run_json

SP = "scheduling.x-k8s.io/v1alpha1"
VC = "scheduling.volcano.sh/v1beta1"
NOW = "2026-12-05T12:00:00Z"


def group(api_version: str, name: str = "g", status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "ns", "uid": "u1", "generation": 1},
        "spec": spec,
        "status": status or {},
    }


def pod(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    cpu: str = "1",
    scheduler: str = "troupe-scheduler",
    **spec: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "labels": labels or {}, "annotations": annotations or {}},
        "spec": {
            "schedulerName": scheduler,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
            **spec,
        },
    }


def sp_pod(name: str, grp: str, **kw: Any) -> dict[str, Any]:
    return pod(name, labels={coscheduling.LABEL: grp}, **kw)


def vc_pod(name: str, grp: str, task: str = "", **kw: Any) -> dict[str, Any]:
    annotations = {volcano.ANNOTATION: grp}
    if task:
        annotations[volcano.TASK_KEY] = task
    return pod(name, annotations=annotations, **kw)


def kueue_pod(name: str, grp: str, total: str | None, **kw: Any) -> dict[str, Any]:
    annotations = {"kueue.x-k8s.io/pod-group-total-count": total} if total is not None else {}
    return pod(name, labels={"kueue.x-k8s.io/pod-group-name": grp}, annotations=annotations, **kw)


# ------------------------------------------------------------ pod -> group


def test_each_source_names_its_group_and_the_rule_orders_them():
    meta = {
        "namespace": "ns",
        "labels": {coscheduling.LABEL: "sp", "kueue.x-k8s.io/pod-group-name": "kq"},
        "annotations": {volcano.ANNOTATION: "vc"},
    }
    assert pod_group(meta, {}) == GroupKey("ns", "sp", "scheduling.x-k8s.io")
    del meta["labels"][coscheduling.LABEL]
    assert pod_group(meta, {}) == GroupKey("ns", "vc", "scheduling.volcano.sh")
    del meta["annotations"][volcano.ANNOTATION]
    assert pod_group(meta, {}) == GroupKey("ns", "kq", "kueue.x-k8s.io")
    meta["labels"][C.POD_GROUP_LABEL] = "mine"  # troupe's label comes before all three
    assert pod_group(meta, {}) == GroupKey("ns", "mine")


def test_a_source_turned_off_names_no_group():
    meta = {"namespace": "ns", "annotations": {volcano.ANNOTATION: "vc"}}
    assert pod_group(meta, {}, enabled_sources(["native", "kueue"])) is None
    assert pod_group(meta, {}, enabled_sources(["volcano"])) == GroupKey("ns", "vc", "scheduling.volcano.sh")


def test_a_volcano_pod_has_its_task_and_a_kueue_pod_its_group_size():
    p = parse_pod(
        {**vc_pod("a", "g", task="worker"), "metadata": {**vc_pod("a", "g", task="worker")["metadata"], "uid": "1"}}
    )
    assert (p.group, p.task) == (GroupKey("ns", "g", "scheduling.volcano.sh"), "worker")
    body = kueue_pod("b", "q", "3")
    body["metadata"]["uid"] = "2"
    p = parse_pod(body)
    assert (p.group, p.group_size) == (GroupKey("ns", "q", "kueue.x-k8s.io"), 3)
    # default spreading selects a foreign group's pods by a synthesized label
    assert p.labels["kueue.x-k8s.io:pod-group"] == "q"


# --------------------------------------------------------- scheduler-plugins


def test_scheduler_plugins_podgroup_is_a_gang_of_min_member():
    g = parse_group(group(SP, minMember=3, minResources={"cpu": "3", "memory": "1Gi"}, scheduleTimeoutSeconds=10))
    assert g.key == GroupKey("ns", "g", "scheduling.x-k8s.io")
    assert g.is_gang and g.min_count == 3
    assert g.min_resources == {"cpu": 3000, "memory": 1 << 30}
    assert g.problem is None and g.ignored == ()
    assert not parse_group(group(SP)).is_gang  # minMember unset: nothing to wait for


def test_scheduler_plugins_bad_fields_are_named():
    g = parse_group(group(SP, minMember="three", minResources={"cpu": "lots"}, surprise=1))
    assert "spec.minMember: 'three' is not an integer" in (g.problem or "")
    assert "spec.minResources.cpu" in (g.problem or "")
    assert g.ignored == ("spec.surprise: a field troupe does not know",)


def test_scheduler_plugins_phase_follows_its_controller():
    g = parse_group(group(SP, minMember=3))
    assert coscheduling.phase(g, MemberCounts(pods=2)) == "Pending"
    assert coscheduling.phase(g, MemberCounts(pods=3, bound=3)) == "Scheduling"
    assert coscheduling.phase(g, MemberCounts(pods=3, bound=3, running=2, succeeded=1)) == "Running"
    assert coscheduling.phase(g, MemberCounts(pods=3, running=2, failed=1)) == "Failed"
    assert coscheduling.phase(g, MemberCounts(pods=3, succeeded=3)) == "Finished"
    done = parse_group(group(SP, minMember=3, status={"phase": "Finished"}))
    assert coscheduling.phase(done, MemberCounts(pods=0)) == "Finished"  # final


def test_scheduler_plugins_status_has_no_conditions_and_a_start_time_once():
    g = parse_group(group(SP, minMember=2))
    conditions = [{"type": C.POD_GROUP_SCHEDULED, "status": "True", "reason": "Scheduled", "message": "2 placed"}]
    out = export_status(g, conditions, MemberCounts(pods=2, bound=2), NOW)
    assert out == {"phase": "Scheduling", "running": 0, "succeeded": 0, "failed": 0, "scheduleStartTime": NOW}
    started = parse_group(group(SP, minMember=2, status={"scheduleStartTime": "earlier"}))
    assert "scheduleStartTime" not in export_status(started, conditions, MemberCounts(pods=2), NOW)
    assert "scheduleStartTime" not in export_status(g, None, MemberCounts(pods=2), NOW)  # counts only


def test_scheduler_plugins_occupied_by_is_the_first_pods_owners_once_the_group_is_whole():
    """As fillOccupiedObj: "ns/owner" of each ownerReference, sorted, set once on Pending -> Scheduling."""
    body = sp_pod("w0", "g")
    body["metadata"] |= {"uid": "u0", "ownerReferences": [{"kind": "PyTorchJob", "name": "job"}, {"name": "a"}]}
    assert parse_pod(body).owners == ("job", "a")
    alone = sp_pod("x", "")  # no group: owners are not kept
    alone["metadata"] |= {"uid": "u1", "labels": {}, "ownerReferences": [{"name": "rs"}]}
    assert parse_pod(alone).owners == ()
    g = parse_group(group(SP, minMember=2))
    whole = MemberCounts(pods=2, occupied_by="ns/a,ns/job")
    assert export_status(g, None, whole, NOW)["occupiedBy"] == "ns/a,ns/job"
    assert "occupiedBy" not in export_status(g, None, MemberCounts(pods=1, occupied_by="ns/a"), NOW)  # Pending
    taken = parse_group(group(SP, minMember=2, status={"occupiedBy": "ns/first"}))
    assert "occupiedBy" not in export_status(taken, None, whole, NOW)  # never rewritten


# ------------------------------------------------------------------- Volcano


def test_volcano_podgroup_fields():
    g = parse_group(
        group(VC, minMember=4, minTaskMember={"head": 1, "worker": 3}, priorityClassName="high", queue="default")
    )
    assert g.min_count == 4 and g.min_per_task == {"head": 1, "worker": 3}
    assert g.spec.priority_class_name == "high"
    assert g.ignored == ()


def test_volcano_fields_troupe_does_not_honour_are_named_in_every_message():
    g = parse_group(group(VC, minMember=2, queue="research", networkTopology={"mode": "hard"}))
    assert any("spec.queue 'research'" in i for i in g.ignored)
    assert any("spec.networkTopology" in i for i in g.ignored)
    conditions = [{"type": C.POD_GROUP_SCHEDULED, "status": "False", "reason": "Unschedulable", "message": "no room"}]
    out = export_status(g, conditions, MemberCounts(pods=2), NOW)
    (unsched,) = [c for c in out["conditions"] if c["type"] == "Unschedulable"]
    assert unsched["status"] == "True" and unsched["reason"] == "NotEnoughResources"
    assert unsched["message"].startswith("no room; spec.queue 'research'")


def test_volcano_status_follows_its_scheduler():
    g = parse_group(group(VC, minMember=2))
    scheduled = [
        {
            "type": C.POD_GROUP_SCHEDULED,
            "status": "True",
            "reason": "Scheduled",
            "message": "2 placed",
            "lastTransitionTime": NOW,
        }
    ]
    out = export_status(g, scheduled, MemberCounts(pods=2, bound=2), NOW)
    assert out["phase"] == "Running"
    assert {(c["type"], c["status"]) for c in out["conditions"]} == {("Scheduled", "True"), ("Unschedulable", "False")}
    waiting = [{"type": C.POD_GROUP_SCHEDULED, "status": "False", "reason": "Unschedulable", "message": "x"}]
    assert export_status(g, waiting, MemberCounts(pods=2), NOW)["phase"] == "Inqueue"  # tried, not placed
    assert export_status(g, None, MemberCounts(pods=2), NOW)["phase"] == "Pending"  # never tried
    assert export_status(g, waiting, MemberCounts(pods=3, bound=1, running=1), NOW)["phase"] == "Unknown"
    assert export_status(g, None, MemberCounts(pods=2, succeeded=2), NOW)["phase"] == "Completed"


def test_volcano_conditions_are_read_back_as_troupes():
    g = parse_group(
        group(
            VC,
            minMember=2,
            status={
                "conditions": [
                    {"type": "Scheduled", "status": "True", "reason": volcano.READY, "message": "m"},
                    {"type": "Unschedulable", "status": "False", "reason": volcano.READY},
                ]
            },
        )
    )
    c = g.condition(C.POD_GROUP_SCHEDULED)
    assert c is not None and c.status == "True"


# --------------------------------------------------------------------- Kueue


def _kueue_members(*totals: str | None) -> list[Any]:
    members = []
    for i, total in enumerate(totals):
        body = kueue_pod(f"q{i}", "q", total)
        body["metadata"]["uid"] = str(i)
        members.append(parse_pod(body))
    return members


def test_kueue_group_is_made_of_what_its_pods_declare():
    made = implied_group(GroupKey("ns", "q", "kueue.x-k8s.io"), _kueue_members("3", "3"), NOW)
    assert made is not None and made.min_count == 3 and made.problem is None
    bad = implied_group(GroupKey("ns", "q", "kueue.x-k8s.io"), _kueue_members("3", None), NOW)
    assert bad is not None and "pod-group-total-count" in (bad.problem or "")
    assert implied_group(GroupKey("ns", "q", "scheduling.volcano.sh"), _kueue_members("3"), NOW) is None


# ----------------------------------------------- the core, through simulate


def _placed(doc: dict[str, Any]) -> dict[str, str | None]:
    return {p["name"]: p["node"] for p in doc["pods"]}


def test_two_scheduler_plugins_gangs_one_whole_one_waiting(capsys, tmp_path):
    docs: list[dict[str, Any]] = [node("n1", cpu="2"), node("n2", cpu="2")]
    for g in ("a", "b"):
        docs.append(group(SP, g, minMember=4))
        docs += [sp_pod(f"{g}{i}", g) for i in range(4)]
    placed = _placed(run_json(capsys, tmp_path, docs))
    counts = {g: sum(1 for n, node_ in placed.items() if n.startswith(g) and node_) for g in ("a", "b")}
    assert sorted(counts.values()) == [0, 4]


def test_min_resources_the_cluster_cannot_hold_is_not_tried(capsys, tmp_path):
    docs = [node("n1", cpu="4"), group(SP, "g", minMember=1, minResources={"cpu": "8"}), sp_pod("g0", "g")]
    doc = run_json(capsys, tmp_path, docs)
    assert _placed(doc) == {"g0": None}
    (pg,) = doc["podGroups"]
    assert "minResources" in pg["message"] and "cpu 8 (free 4)" in pg["message"]


def test_min_task_member_holds_each_task_to_its_minimum(capsys, tmp_path):
    # Room for 3 pods: 3 workers fit, but the head cannot (it asks more than a node has).
    docs = [node("n1", cpu="3"), group(VC, "g", minMember=3, minTaskMember={"head": 1, "worker": 2})]
    docs += [vc_pod("w0", "g", "worker"), vc_pod("w1", "g", "worker"), vc_pod("w2", "g", "worker")]
    docs += [vc_pod("h", "g", "head", cpu="4")]
    doc = run_json(capsys, tmp_path, docs)
    assert set(_placed(doc).values()) == {None}  # minMember 3 fits, the head's task does not: none bound
    (pg,) = doc["podGroups"]
    assert "task head: needs 1, 0 fit" in pg["message"]


def test_min_task_member_is_filled_before_spare_pods_of_another_task(capsys, tmp_path):
    # Room for 3 pods; 3 workers come first. Placing them first would leave no
    # room for the head, so the gang would wait though head + 2 workers fit.
    docs = [node("n1", cpu="3"), group(VC, "g", minMember=3, minTaskMember={"head": 1, "worker": 2})]
    docs += [vc_pod("w0", "g", "worker"), vc_pod("w1", "g", "worker"), vc_pod("w2", "g", "worker")]
    docs += [vc_pod("h", "g", "head")]
    placed = _placed(run_json(capsys, tmp_path, docs))
    assert placed["h"] == "n1"
    assert sorted(n for n, node_ in placed.items() if node_) == ["h", "w0", "w1"]


def test_order_pods_puts_each_task_minimum_first():
    def parsed(name: str, task: str):
        body = vc_pod(name, "g", task)
        body["metadata"]["uid"] = name
        return parse_pod(body)

    pods = [parsed(f"w{i}", "worker") for i in range(3)]
    head = parsed("h", "head")
    seen = {"w0": 1.0, "w1": 2.0, "w2": 3.0, "h": 4.0}
    assert [p.name for p in order_pods([*pods, head], seen)] == ["w0", "w1", "w2", "h"]
    assert [p.name for p in order_pods([*pods, head], seen, {"head": 1, "worker": 2})] == ["w0", "w1", "h", "w2"]


def test_kueue_pods_wait_for_their_whole_group(capsys, tmp_path):
    docs: list[dict[str, Any]] = [node("n1", cpu="4")]
    docs += [kueue_pod(f"q{i}", "q", "3") for i in range(2)]  # 2 of 3 exist
    doc = run_json(capsys, tmp_path, docs)
    assert set(_placed(doc).values()) == {None}
    docs.append(kueue_pod("q2", "q", "3"))
    assert None not in set(_placed(run_json(capsys, tmp_path, docs)).values())


def test_kueue_pods_without_a_count_say_why(sched):  # noqa: F811
    """No count, or one that is not a number: the group's size is unknown, so
    nothing binds and each pod's condition (a Kueue group has no object) names
    the annotation."""
    s, rec = sched
    s.on_node(node("n1", cpu="4"))
    for i, total in enumerate((None, "three")):
        body = kueue_pod(f"q{i}", "q", total)
        body["metadata"]["uid"] = str(i)
        assert parse_pod(body).group_size == 0
        s.on_pod(body)
    drain(s)
    assert set(rec.pods) == {"q0", "q1"}, rec.pods
    for message in rec.pods.values():
        assert message.startswith("PodGroup ns/q (kueue.x-k8s.io): "), message
        assert "kueue.x-k8s.io/pod-group-total-count" in message, message
        assert "missing or not a positive count" in message, message
    assert rec.binds == []


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "simulate-operators.yaml"


def test_simulate_reads_every_source_in_one_file(capsys, tmp_path):
    """examples/simulate-operators.yaml: troupe, native, scheduler-plugins,
    Volcano and Kueue groups side by side; every one whole or not at all."""
    rc, out, err = run(capsys, tmp_path, EXAMPLE.read_text(), "--output", "json")
    assert rc == 0 and "warning" not in err, err  # a Kueue group has no object: nothing is missing
    doc = json.loads(out)
    groups = {g["name"]: g for g in doc["podGroups"]}
    assert {name: g["apiGroup"] for name, g in groups.items()} == {
        "own": "scheduling.troupe.dev",
        "native": "scheduling.k8s.io",
        "pytorch-a": "scheduling.x-k8s.io",
        "pytorch-b": "scheduling.x-k8s.io",
        "lws-0-5d8f7b9c4": "scheduling.volcano.sh",
        "batch": "kueue.x-k8s.io",
    }
    placed = _placed(doc)
    prefix = {"lws-0-5d8f7b9c4": "lws-0-", "batch": "kueue-"}
    for name, g in groups.items():
        members = [node_ for pod_, node_ in placed.items() if pod_.startswith(prefix.get(name, name + "-"))]
        bound = sum(1 for node_ in members if node_)
        assert len(members) >= 2 and bound in (0, len(members)), (name, members)
        assert g["reason"] == ("Unschedulable" if name == "pytorch-b" else "Scheduled"), g
    assert "minResources" in groups["pytorch-b"]["message"]
    assert placed["kueue-0"] == placed["kueue-1"] == "node-3"  # the flavor's node selector Kueue injected
