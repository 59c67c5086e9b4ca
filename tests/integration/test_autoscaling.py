"""Gangs and trees in an autoscaled cluster, with the real Karpenter v1.15.0
(kwok cloud provider) and kwok v0.8.0 (tests/integration/karpenter.py) and
the real troupe process (docs/autoscaling.md):

- a gang short of members asks for nothing; whole, it gets its nodes, all
  at once, and binds whole, each pod protected from consolidation;
- a gang that needs one rack gets every new node in one rack;
- NodePool limits that leave room for one of two gangs: one gets its nodes,
  no node is made for a part of the other, which waits whole and says why;
- capacity that never comes: the unit says why in bounded time, the
  request is withdrawn, nothing is left behind;
- a leader+workers tree is provisioned and bound as one.

The cluster has no nodes but Karpenter's: a plain Node would take part in
Karpenter's own simulation (the harness's finding).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from karpenter import Karpenter, apply, karpenter_nodes, nodeclaims
from karpenter import nodepool as make_nodepool
from objects import GROUP_LABEL, bound, condition, create, pod, pod_condition, podgroup, wait_condition
from troupe_process import TroupeProcess, supervised
from wait import WaitTimeout, holds, wait_for

pytestmark = pytest.mark.integration

RACK = "rack"
STANDS_IN_FOR = "scheduling.troupe.dev/stands-in-for"
CONFIG = """
apiVersion: scheduling.troupe.dev/v1alpha1
kind: SchedulerConfiguration
profiles:
- schedulerName: troupe-scheduler
  pluginConfig:
  - name: CapacityRequest
    args: {timeoutSeconds: 20}
"""


@pytest.fixture(scope="module")
def troupe(karpenter_cluster, karpenter, tmp_path_factory):
    proc = TroupeProcess(karpenter_cluster.scheduler_kubeconfig, tmp_path_factory.mktemp("troupe"), config=CONFIG)
    yield from supervised(proc)


@pytest.fixture
def pools(karpenter_cluster, troupe) -> Iterator[Any]:
    """pools(*nodepools): applies them and waits until troupe has read them;
    afterwards every pod, NodePool and node is gone."""
    c = karpenter_cluster
    names: list[str] = []

    def make(*bodies: dict[str, Any]) -> None:
        apply(c, *bodies)
        for body in bodies:
            name = body["metadata"]["name"]
            names.append(name)
            wait_for(
                lambda name=name: f"NodePool {name}: troupe may ask" in troupe.log_path.read_text(),
                timeout=30,
                message=f"troupe read NodePool {name}",
            )

    yield make
    for name in names:
        c.kubectl("delete", "nodepool", name, "--wait=false", check=False)
    wait_for(lambda: not nodeclaims(c), timeout=120, message="every NodeClaim gone")


def gang(ns: str, name: str, n: int, cpu: str = "1", rack: bool = False, count: int | None = None) -> list[dict]:
    group = podgroup(ns, name, n)
    if rack:
        group["spec"]["schedulingConstraints"] = {"topology": [{"key": RACK}]}
    return [group] + [pod(ns, f"{name}-{i}", cpu=cpu, group=name) for i in range(count if count is not None else n)]


def stand_ins(c, ns: str) -> list[dict[str, Any]]:
    return list(c.get_json("pods", "-n", ns, "-l", STANDS_IN_FOR)["items"])


def explain(karpenter: Karpenter, troupe: TroupeProcess) -> str:
    return f"\n--- karpenter ---\n{karpenter.log_tail(25)}\n--- troupe ---\n{troupe.log_tail(25)}"


def test_a_gang_gets_no_nodes_until_whole_then_all_at_once_and_binds_protected(
    karpenter_cluster, karpenter, troupe, pools, namespace_in
):
    c = karpenter_cluster
    ns = namespace_in(c)
    pools(make_nodepool("anywhere"))
    create(c, *gang(ns, "train", 8, count=4))
    # 4 of 8: nothing to provision for (no Unschedulable pod, no stand-in).
    holds(lambda: not nodeclaims(c) and not stand_ins(c, ns), seconds=30, message="no NodeClaim for half a gang")
    for name in ("train-0", "train-3"):
        cond = pod_condition(c, ns, name)
        assert not (cond and cond.get("reason") == "Unschedulable"), cond
    t0 = time.monotonic()
    create(c, *[pod(ns, f"train-{i}", cpu="1", group="train") for i in range(4, 8)])
    try:
        placed = wait_for(lambda: len(b := bound(c, ns, "train")) == 8 and b, timeout=90, message="8 bound")
    except WaitTimeout as e:
        raise AssertionError(f"{e}{explain(karpenter, troupe)}") from e
    elapsed = time.monotonic() - t0
    made = {n["metadata"]["name"] for n in karpenter_nodes(c, "anywhere")}
    assert set(placed.values()) <= made, (placed, made)
    wait_for(lambda: not stand_ins(c, ns), timeout=30, message="stand-ins withdrawn")
    for p in c.get_json("pods", "-n", ns, "-l", f"{GROUP_LABEL}=train")["items"]:
        assert p["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true", p["metadata"]
    wait_condition(c, ns, "train", "True", "Scheduled")
    print(f"autoscaling: 8 pods bound on {len(made)} new nodes {elapsed:.1f}s after the gang was whole")


def test_a_gang_that_needs_one_rack_gets_every_new_node_in_one_rack(
    karpenter_cluster, karpenter, troupe, pools, namespace_in
):
    c = karpenter_cluster
    ns = namespace_in(c)
    pools(*(make_nodepool(f"rack-{r}", {RACK: r}) for r in ("r1", "r2", "r3")))
    create(c, *gang(ns, "racked", 6, rack=True))
    try:
        placed = wait_for(lambda: len(b := bound(c, ns, "racked")) == 6 and b, timeout=90, message="6 bound")
    except WaitTimeout as e:
        raise AssertionError(f"{e}{explain(karpenter, troupe)}") from e
    nodes = {n["metadata"]["name"]: n["metadata"]["labels"][RACK] for n in karpenter_nodes(c)}
    assert len(set(nodes.values())) == 1, nodes  # every node made, in one rack
    assert {nodes[n] for n in placed.values()} == set(nodes.values())


def test_limits_that_leave_room_for_one_gang_make_no_node_for_a_part_of_the_other(
    karpenter_cluster, karpenter, troupe, pools, namespace_in
):
    c = karpenter_cluster
    ns = namespace_in(c)
    pools(make_nodepool("small", {RACK: "r1"}, limits={"cpu": "12"}))
    create(c, *gang(ns, "first", 8, rack=True))
    wait_for(lambda: len(bound(c, ns, "first")) == 8, timeout=90, message="the first gang bound")
    claims = {x["metadata"]["name"] for x in nodeclaims(c)}
    create(c, *gang(ns, "second", 8, rack=True))
    why = wait_condition(c, ns, "second", "False", "Unschedulable")
    wait_for(
        lambda: "no NodePool can make room for all its 8 pods" in (condition(c, ns, "second") or {}).get("message", ""),
        timeout=30,
        message="the second gang says no NodePool can make room for it whole",
    )
    holds(
        lambda: {x["metadata"]["name"] for x in nodeclaims(c)} == claims and not bound(c, ns, "second"),
        seconds=20,
        message="no node made for a part of the second gang",
    )
    cond = pod_condition(c, ns, "second-0")
    assert cond and cond["reason"] == "PodGroupUnschedulable", (cond, why)


def test_capacity_that_never_comes_is_withdrawn_and_the_unit_says_why(
    karpenter_cluster, karpenter, troupe, pools, namespace_in
):
    c = karpenter_cluster
    ns = namespace_in(c)
    never = make_nodepool(
        "never", {RACK: "r9"}, requirements=[{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                              "values": ["no-such-type"]}]
    )  # fmt: skip
    pools(never)
    create(c, *gang(ns, "waits", 2, rack=True))
    wait_for(lambda: len(stand_ins(c, ns)) == 2, timeout=30, message="2 stand-ins made")
    t0 = time.monotonic()
    wait_for(
        lambda: "rack=r9: asked before, did not come in time" in (condition(c, ns, "waits") or {}).get("message", ""),
        timeout=60,
        message="the gang says its capacity did not come",
    )
    assert time.monotonic() - t0 < 45
    holds(lambda: not stand_ins(c, ns) and not nodeclaims(c), seconds=10, message="nothing left behind")
    assert not bound(c, ns)


def test_a_leader_and_workers_tree_is_provisioned_and_bound_as_one(
    karpenter_cluster, karpenter, troupe, pools, namespace_in
):
    c = karpenter_cluster
    ns = namespace_in(c)
    pools(make_nodepool("tree-pool"))
    api = "scheduling.troupe.dev/v1alpha2"
    root = {
        "apiVersion": api,
        "kind": "CompositePodGroup",
        "metadata": {"name": "llm", "namespace": ns},
        "spec": {
            "workloadRef": {"workloadName": "llm", "templateName": "llm"},
            "schedulingPolicy": {"gang": {"minGroupCount": 2}},
        },
    }
    leader, workers = podgroup(ns, "llm-leader", 1), podgroup(ns, "llm-workers", 3)
    for g in (leader, workers):
        g["spec"]["parentCompositePodGroupName"] = "llm"
    create(c, root, leader, workers)
    create(c, pod(ns, "llm-leader", cpu="2", group="llm-leader"))
    create(c, *[pod(ns, f"llm-workers-{i}", cpu="1", group="llm-workers") for i in range(3)])
    try:
        wait_for(lambda: len(bound(c, ns, "llm")) == 4, timeout=90, message="the tree bound whole")
    except WaitTimeout as e:
        raise AssertionError(f"{e}{explain(karpenter, troupe)}") from e
    wait_for(lambda: not stand_ins(c, ns), timeout=30, message="stand-ins withdrawn")
    print("tree bound:", json.dumps(bound(c, ns, "llm")))


def test_consolidation_moves_a_lone_pod_and_leaves_a_running_gang_whole(
    karpenter_cluster, karpenter, troupe, pools, namespace_in
):
    """WhenEmptyOrUnderutilized after 0 s. A lone pod (a Job's: its controller
    makes it again) gets a 2-cpu node of its own; then a gang of two 1-cpu
    pods gets a 4-cpu node, with room for the lone pod. Karpenter moves the
    lone pod there and deletes its node, and takes no pod of the gang, whose
    pods troupe bound with karpenter.sh/do-not-disrupt."""
    c = karpenter_cluster
    ns = namespace_in(c)
    pools(make_nodepool("consolidating", consolidation_policy="WhenEmptyOrUnderutilized", consolidate_after="0s"))
    lone = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "lone", "namespace": ns},
        "spec": {
            "backoffLimit": 100,
            "template": {
                "spec": {
                    "schedulerName": "troupe-scheduler",
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "c", "image": "registry.k8s.io/pause:3.10",
                         "resources": {"requests": {"cpu": "1", "memory": "100Mi"}}}
                    ],
                }
            },
        },
    }  # fmt: skip
    create(c, lone)

    def lone_pods() -> dict[str, str]:
        items = c.get_json("pods", "-n", ns, "-l", "batch.kubernetes.io/job-name=lone")["items"]
        return {p["metadata"]["uid"]: p["spec"]["nodeName"] for p in items if p["spec"].get("nodeName")}

    first = wait_for(lambda: lone_pods(), timeout=90, message="the lone pod bound")
    create(c, *gang(ns, "steady", 2))
    gang_pods = wait_for(lambda: len(b := bound(c, ns, "steady")) == 2 and b, timeout=90, message="the gang bound")
    uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in c.get_json("pods", "-n", ns)["items"]}

    def gang_whole() -> bool:
        now = {p["metadata"]["name"]: p for p in c.get_json("pods", "-n", ns, "-l", f"{GROUP_LABEL}=steady")["items"]}
        return all(
            name in now
            and now[name]["metadata"]["uid"] == uids[name]
            and now[name]["spec"].get("nodeName") == node
            and not now[name]["metadata"].get("deletionTimestamp")
            for name, node in gang_pods.items()
        )

    holds(gang_whole, seconds=60, interval=1.0, message="the gang keeps every pod where it runs")
    try:
        moved = wait_for(lambda: set(lone_pods()) - set(first) and lone_pods(), timeout=90, message="lone pod moved")
    except WaitTimeout as e:
        raise AssertionError(f"{e}{explain(karpenter, troupe)}") from e
    assert gang_whole()
    print(f"consolidation: lone pod {first} -> {moved}; gang {gang_pods} kept")


OTHER = """
apiVersion: scheduling.troupe.dev/v1alpha1
kind: SchedulerConfiguration
profiles:
- schedulerName: troupe-restarted
  pluginConfig:
  - name: CapacityRequest
    args: {timeoutSeconds: 600}
"""


def test_stand_ins_are_adopted_after_a_restart_and_go_with_their_group(
    karpenter_cluster, karpenter, troupe, pools, namespace_in, tmp_path
):
    """A troupe (a profile of its own: the module's troupe leaves its pods
    alone) asks for nodes that never come, and stops; the one that starts
    next keeps the same stand-ins (the unit asks for the same again) rather
    than making new ones. Deleting the group deletes them, troupe or not."""
    c = karpenter_cluster
    ns = namespace_in(c)
    never = make_nodepool(
        "never-2", {RACK: "r8"}, requirements=[{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                                "values": ["no-such-type"]}]
    )  # fmt: skip
    pools(never)
    bodies = gang(ns, "kept", 2, rack=True)
    for body in bodies[1:]:
        body["spec"]["schedulerName"] = "troupe-restarted"
    first = TroupeProcess(c.scheduler_kubeconfig, tmp_path, config=OTHER, name="first").start()
    try:
        create(c, *bodies)
        made = wait_for(lambda: len(s := stand_ins(c, ns)) == 2 and s, timeout=30, message="2 stand-ins made")
    finally:
        assert first.stop() == 0
    names = {s["metadata"]["name"] for s in made}
    owner = made[0]["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "PodGroup" and owner["name"] == "kept" and owner["controller"] is True, owner
    second = TroupeProcess(c.scheduler_kubeconfig, tmp_path, config=OTHER, name="second").start()
    try:
        wait_for(lambda: "adopted the stand-ins of" in second.log_path.read_text(), timeout=30, message="adopted")
        holds(
            lambda: {s["metadata"]["name"] for s in stand_ins(c, ns)} == names,
            seconds=40,  # beyond the 30 s an adopted request no unit asks for again is kept
            message="the same stand-ins kept",
        )
    finally:
        assert second.stop() == 0
    c.kubectl("delete", "podgroup", "-n", ns, "kept")
    wait_for(lambda: not stand_ins(c, ns), timeout=60, message="the stand-ins gone with their group")
