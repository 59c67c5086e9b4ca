"""Asking autoscalers for a whole unit's nodes (CapacityRequest, api/nodepool):
which domain, which NodePools, limits, what the unit says, and what it takes
(`troupe simulate` with NodePools). The runtime's stand-in pods against the
real Karpenter are in tests/integration/test_autoscaling.py."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api import constants as C
from scheduler.api.config import SchedulerConfiguration
from scheduler.api.nodepool import CapacityPlan, parse_nodepool
from scheduler.api.parse import parse_pod
from scheduler.api.records import GroupKey, ObjectError, Taint
from scheduler.core.scheduler import Scheduler
from scheduler.plugins import in_tree_registry
from scheduler.queue.scheduling_queue import State
from scheduler.runtime.capacity import stand_in

from .test_runtime_scheduler import Clock, Recorder, drain
from .test_simulate import node, pod, podgroup, run_json

KEY = "rack"


def nodepool(name: str, rack: str | None = None, limits: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    labels = {KEY: rack} if rack else {}
    body: dict[str, Any] = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"labels": labels},
                "spec": {"nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}},
            }
        },
    }
    if limits:
        body["spec"]["limits"] = limits
    for k, v in extra.items():
        if k == "requirements":
            body["spec"]["template"]["spec"]["requirements"] = v
        elif k == "taints":
            body["spec"]["template"]["spec"]["taints"] = v
        elif k == "used":
            body["status"] = {"resources": v}
    return body


def rack_gang(name: str, n: int, cpu: str = "1", **spec: Any) -> list[dict[str, Any]]:
    group = podgroup(name, n)
    group["spec"]["schedulingConstraints"] = {"topology": [{"key": KEY}]}
    return [group] + [pod(f"{name}-{i}", name, cpu, **spec) for i in range(n)]


def racked(name: str, rack: str, cpu: str = "2") -> dict[str, Any]:
    body = node(name, cpu)
    body["metadata"]["labels"] = {KEY: rack}
    return body


def capacity_of(doc: dict[str, Any]) -> dict[str, tuple[str, str, list[str], int]]:
    return {c["name"]: (c["key"], c["value"], c["nodePools"], len(c["pods"])) for c in doc.get("capacity", [])}


def message_of(doc: dict[str, Any], group: str) -> str:
    return next(g["message"] for g in doc["podGroups"] if g["name"] == group)


# ------------------------------------------------------------------ NodePools


def test_a_nodepool_says_its_labels_choices_taints_and_what_its_limits_leave():
    t = parse_nodepool(
        nodepool(
            "p",
            "r1",
            {"cpu": "16", "memory": "64Gi"},
            requirements=[
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a", "b"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                {"key": "gpu", "operator": "DoesNotExist"},
                {"key": "arch", "operator": "NotIn", "values": ["arm64"]},
            ],
            taints=[{"key": "dedicated", "value": "train", "effect": "NoSchedule"}],
            used={"cpu": "6"},
        )
    )
    assert t.values(KEY) == ("r1",)
    assert t.values("karpenter.sh/capacity-type") == ("on-demand",)
    assert t.values("topology.kubernetes.io/zone") == ("a", "b")
    assert t.values("gpu") == () and t.values("unsaid") is None
    assert t.excluded == {"arch": ("arm64",)}
    assert t.taints == (Taint("dedicated", "train", "NoSchedule"),)
    assert t.left("cpu") == 10_000 and t.left("memory") == 64 * 2**30 and t.left("nvidia.com/gpu") is None
    assert t.problem == ""


def test_a_nodepool_troupe_cannot_read_says_why_and_one_without_a_name_is_refused():
    bad = parse_nodepool(nodepool("p", limits={"cpu": "lots"}))
    assert bad.problem.startswith("spec.limits.cpu"), bad.problem
    odd = parse_nodepool(nodepool("q", requirements=[{"key": "k", "operator": "Near", "values": ["x"]}]))
    assert "requirements[0].operator: 'Near'" in odd.problem
    with pytest.raises(ObjectError, match="metadata.name"):
        parse_nodepool({"spec": {}})


# ------------------------------------------------------------- the decision


def test_a_gang_that_fits_nowhere_asks_for_all_its_nodes_in_one_rack(capsys, tmp_path):
    docs = [racked("n1", "r1"), nodepool("rack-r1", "r1"), nodepool("rack-r2", "r2"), *rack_gang("train", 8)]
    doc = run_json(capsys, tmp_path, docs)
    assert capacity_of(doc) == {"train": (KEY, "r1", ["rack-r1"], 8)}
    assert "autoscaling: waiting for new nodes for its 8 pods (8 cpu) in rack=r1 from NodePool rack-r1" in message_of(
        doc, "train"
    )


def test_without_nodepools_nothing_is_asked_and_the_message_is_as_before(capsys, tmp_path):
    doc = run_json(capsys, tmp_path, [racked("n1", "r1"), *rack_gang("train", 8)])
    assert "capacity" not in doc
    assert "autoscaling" not in message_of(doc, "train")


def test_limits_leave_room_for_one_gang_the_other_asks_for_nothing_and_says_why(capsys, tmp_path):
    """What was asked for one unit counts against the pools' limits for the next."""
    docs = [racked("n1", "r1", "1"), nodepool("rack-r1", "r1", {"cpu": "12"}), *rack_gang("a", 8), *rack_gang("b", 8)]
    doc = run_json(capsys, tmp_path, docs)
    assert capacity_of(doc) == {"a": (KEY, "r1", ["rack-r1"], 8)}
    assert (
        "autoscaling: no NodePool can make room for all its 8 pods (8 cpu) in one rack domain: "
        "rack=r1: limits leave 4 cpu, 8 needed" in message_of(doc, "b")
    )


def test_limits_count_what_the_pool_has_made_already(capsys, tmp_path):
    docs = [
        racked("n1", "r1", "1"),
        nodepool("rack-r1", "r1", {"cpu": "20"}, used={"cpu": "16"}),
        nodepool("rack-r2", "r2", {"cpu": "20"}),
        *rack_gang("a", 8),
    ]
    assert capacity_of(run_json(capsys, tmp_path, docs)) == {"a": (KEY, "r2", ["rack-r2"], 8)}


def test_pods_that_ask_for_a_rack_get_nodes_there_and_untolerated_taints_rule_a_pool_out(capsys, tmp_path):
    taint = [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]
    docs = [
        racked("n1", "r1", "1"),
        nodepool("rack-r1", "r1"),
        nodepool("rack-r2", "r2"),
        nodepool("rack-r3", "r3", taints=taint),
        *rack_gang("pinned", 4, nodeSelector={KEY: "r2"}),
    ]
    assert capacity_of(run_json(capsys, tmp_path, docs)) == {"pinned": (KEY, "r2", ["rack-r2"], 4)}
    docs = [racked("n1", "r1", "1"), nodepool("rack-r3", "r3", taints=taint), *rack_gang("g", 4)]
    doc = run_json(capsys, tmp_path, docs)
    assert "capacity" not in doc
    assert "no NodePool can make room for all its 4 pods (4 cpu) (none makes nodes its pods may run on)" in (
        message_of(doc, "g")
    )


def test_a_heavier_pool_is_asked_first_and_a_gang_without_topology_may_get_nodes_anywhere(capsys, tmp_path):
    heavy = nodepool("rack-r9", "r9")
    heavy["spec"]["weight"] = 10
    docs = [racked("n1", "r1", "1"), nodepool("rack-r1", "r1"), heavy, *rack_gang("g", 4)]
    assert capacity_of(run_json(capsys, tmp_path, docs)) == {"g": (KEY, "r9", ["rack-r9"], 4)}
    plain = [podgroup("free", 4)] + [pod(f"free-{i}", "free") for i in range(4)]
    doc = run_json(capsys, tmp_path, [racked("n1", "r1", "1"), nodepool("rack-r1", "r1"), *plain])
    assert capacity_of(doc) == {"free": ("", "", ["rack-r1"], 4)}
    assert "waiting for new nodes for its 4 pods (4 cpu) from NodePool rack-r1" in message_of(doc, "free")


def test_lone_pods_basic_groups_and_groups_without_an_object_are_left_to_the_autoscaler(capsys, tmp_path):
    """Each of their pods is provisionable on its own (a Kueue pod group has
    no object to own stand-ins)."""
    basic = [podgroup("b")] + [pod(f"b-{i}", "b", "4") for i in range(2)]
    kueue = [pod(f"kq-{i}", cpu="4") for i in range(2)]
    for p in kueue:
        p["metadata"]["labels"] = {"kueue.x-k8s.io/pod-group-name": "kq"}
        p["metadata"]["annotations"] = {"kueue.x-k8s.io/pod-group-total-count": "2"}
    doc = run_json(capsys, tmp_path, [node("n1", "1"), nodepool("any"), pod("lone", cpu="4"), *basic, *kueue])
    assert "capacity" not in doc


# -------------------------------------------------------------- the runtime


def scheduler() -> tuple[Scheduler, Recorder, list[Any]]:
    rec = Recorder()
    s = Scheduler(SchedulerConfiguration(), in_tree_registry(), binder=rec, writer=rec, clock=Clock(), report_delay=0)
    asked: list[Any] = []

    class Requester:
        def ask(self, plan: Any) -> None:
            asked.append(("ask", plan.unit.name, plan.domain))

        def withdraw(self, unit: GroupKey) -> None:
            asked.append(("withdraw", unit.name))

    s.capacity = Requester()
    s.start_scheduling()
    return s, rec, asked


def add_gang(s: Scheduler, name: str, n: int) -> None:
    """A rack gang's PodGroup and pods, as the watches bring them (uid = name)."""
    for body in rack_gang(name, n):
        (s.on_podgroup if body["kind"] == "PodGroup" else s.on_pod)(
            {**body, "metadata": {**body["metadata"], "uid": body["metadata"]["name"]}}
        )


def test_its_pods_say_podgroupunschedulable_and_the_request_goes_once_the_gang_binds():
    s, rec, asked = scheduler()
    reasons: dict[str, str] = {}
    original = rec.pod_unschedulable

    def record(pod, message, still_waiting=None, reason="Unschedulable"):
        reasons[pod.name] = reason
        original(pod, message, still_waiting, reason)

    rec.pod_unschedulable = record  # type: ignore[method-assign]
    s.on_nodepool(nodepool("rack-r1", "r1"))
    s.on_node(racked("n1", "r1", "1"))
    add_gang(s, "g", 4)
    drain(s)
    assert asked == [("ask", "g", "rack=r1")]
    assert set(reasons.values()) == {C.REASON_POD_GROUP_UNSCHEDULABLE} and len(reasons) == 4
    assert GroupKey("ns", "g", C.GROUP) in s.cache.capacity_asked
    # The nodes come: the gang binds, the request is withdrawn.
    s.on_node(racked("new-1", "r1", "8"))
    s.queue.activate(s.unit_of_group(GroupKey("ns", "g", C.GROUP)), skip_backoff=True)
    drain(s)
    assert len(rec.binds) == 4 and asked[-1] == ("withdraw", "g")
    assert s.cache.capacity_asked == {}


def test_a_domain_that_timed_out_is_not_asked_again_and_the_next_one_is():
    s, rec, asked = scheduler()
    s.on_nodepool(nodepool("rack-r1", "r1"))
    s.on_nodepool(nodepool("rack-r2", "r2"))
    s.on_node(racked("n1", "r1", "1"))
    key = GroupKey("ns", "g", C.GROUP)
    s.cache.capacity_failed[key] = {"rack=r1": 1e9}
    add_gang(s, "g", 4)
    drain(s)
    assert asked == [("ask", "g", "rack=r2")]
    # The group is deleted: what was asked goes with it.
    s.on_podgroup_deleted(rack_gang("g", 1)[0])
    assert asked[-1] == ("withdraw", "g") and key not in s.cache.capacity_failed


def test_limits_count_the_nodes_a_pool_made_before_its_status_says_so(capsys, tmp_path):
    """Karpenter's status.resources lags its nodes: the nodes the cache has of
    a pool count too (here 8 of its 12 cpu, and a full node: nothing fits)."""
    made = racked("made-1", "r1", "8")
    made["metadata"]["labels"]["karpenter.sh/nodepool"] = "rack-r1"
    full = pod("filler", cpu="8", nodeName="made-1")
    docs = [
        made,
        full,
        nodepool("rack-r1", "r1", {"cpu": "12"}),
        nodepool("rack-r2", "r2", {"cpu": "12"}),
        *rack_gang("a", 8),
    ]
    assert capacity_of(run_json(capsys, tmp_path, docs)) == {"a": (KEY, "r2", ["rack-r2"], 8)}


def test_the_unit_says_how_many_nodes_of_the_pools_are_in_its_domain_now(capsys, tmp_path):
    made = racked("made-1", "r1", "2")
    made["metadata"]["labels"]["karpenter.sh/nodepool"] = "rack-r1"
    docs = [made, racked("plain", "r1", "1"), nodepool("rack-r1", "r1"), *rack_gang("a", 8)]
    doc = run_json(capsys, tmp_path, docs)
    assert "in rack=r1 from NodePool rack-r1 (1 of its nodes there now, room held on them for 2)" in message_of(
        doc, "a"
    )


def test_new_nodes_are_held_for_the_unit_they_came_for():
    """As its nodes come, the unit's pods are nominated to them: a pod of no
    higher priority that arrives meanwhile does not take that room (without
    NodePools, nothing is held and it does)."""
    for pools in (True, False):
        s, rec, asked = scheduler()
        if pools:
            s.on_nodepool(nodepool("rack-r1", "r1"))
        made = racked("made-1", "r1", "2")
        made["metadata"]["labels"]["karpenter.sh/nodepool"] = "rack-r1"
        s.on_node(made)
        add_gang(s, "g", 4)
        drain(s)
        s.on_pod({**pod("late", cpu="1"), "metadata": {"name": "late", "namespace": "ns", "uid": "late"}})
        drain(s)
        if pools:
            assert sorted(rec.nominated) == ["g-0", "g-1"] and set(rec.nominated.values()) == {"made-1"}
            assert rec.binds == []
        else:
            assert rec.nominated == {} and rec.binds == [("late", "made-1")]


def test_a_node_made_for_a_unit_wakes_it_before_a_pod_that_came_later_takes_the_room():
    """The unit that asked backs off between its tries; the node made for it
    ends that at once (oldest asker first), so a pod that arrives with the
    node does not take it and leave the unit's stand-ins asking again."""
    s, rec, asked = scheduler()
    s.on_nodepool(nodepool("rack-r1", "r1"))
    s.on_node(racked("n1", "r1", "1"))
    add_gang(s, "g", 4)
    drain(s)
    assert asked == [("ask", "g", "rack=r1")]
    unit = s.queue.unit(s.unit_of_group(GroupKey("ns", "g", C.GROUP)))
    # Asked: its backoff starts over (1 s), as for a unit holding reserved room.
    assert unit is not None and unit.backoff_until > s.queue._clock() and unit.attempts == 1
    made = racked("made-1", "r1", "4")
    made["metadata"]["labels"]["karpenter.sh/nodepool"] = "rack-r1"
    other = racked("elsewhere", "r2", "2")
    other["metadata"]["labels"]["karpenter.sh/nodepool"] = "rack-r2"
    s.on_node(other)  # not in the domain asked: the unit still backs off
    assert unit.state is State.BACKOFF  # moved by NODE_ADD, but backing off still
    s.on_node(made)
    s.on_pod({**pod("late", cpu="4"), "metadata": {"name": "late", "namespace": "ns", "uid": "late"}})
    drain(s)
    assert sorted(rec.binds) == [(f"g-{i}", "made-1") for i in range(4)]
    assert asked[-1] == ("withdraw", "g")


def test_a_unit_that_starved_asks_for_nodes_and_reserves_only_where_none_can_be_made(capsys, tmp_path):
    """CapacityRequest runs before Reservation: in a cluster that can grow,
    new nodes come sooner than pods that may run for ever end. Where the
    pools' limits leave no room, Reservation holds the nodes that free first,
    and the unit says both."""
    running = [racked("n1", "r1", "4"), pod("running", cpu="4", nodeName="n1")]
    grows = run_json(capsys, tmp_path, [*running, nodepool("rack-r1", "r1"), *rack_gang("g", 4)], "--waited", "120")
    assert capacity_of(grows) == {"g": (KEY, "r1", ["rack-r1"], 4)}
    assert "reserved node" not in message_of(grows, "g")
    full = run_json(
        capsys, tmp_path, [*running, nodepool("rack-r1", "r1", {"cpu": "2"}), *rack_gang("g", 4)], "--waited", "120"
    )
    assert "capacity" not in full
    message = message_of(full, "g")
    assert "autoscaling: no NodePool can make room for all its 4 pods (4 cpu) in one rack domain" in message
    assert "reserved node(s) n1 for 4 pod(s)" in message, message


def test_a_stand_in_carries_its_pods_node_affinity_as_the_api_has_it():
    """The autoscaler must make a node the pod itself may run on: required
    and preferred node affinity are copied, as written."""
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["h100", "b200"]}]},
                    {"matchExpressions": [{"key": "spot", "operator": "DoesNotExist"}]},
                ]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 5, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}}
            ],
        }
    }
    body = pod("g-0", "g", "2", affinity=affinity)
    body["metadata"]["uid"] = "u0"
    info = parse_pod(body)
    plan = CapacityPlan(GroupKey("ns", "g", C.GROUP), (info,), KEY, "r1", ("rack-r1",), {"cpu": 2000})
    spec = stand_in(plan, info, {"uid": "owner"})["spec"]
    assert spec["affinity"] == affinity
    assert spec["nodeSelector"] == {KEY: "r1"}
    plain = parse_pod({**pod("p", "g", "1"), "metadata": {"name": "p", "namespace": "ns", "uid": "u1"}})
    assert "affinity" not in stand_in(plan, plain, {"uid": "owner"})["spec"]
