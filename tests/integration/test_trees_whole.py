"""Issue 44 on the real kube-apiserver with the real troupe process, troupe's
own kinds: cases 1 (a tree is never bound in part), 2 (the root's priority is
the tree's), 3 (no eviction that cannot help, beside a flat gang and a lone
pod), 4 (no victim the tree does not need, found by searching the whole
tree) and 6 (nominated room let go whenever the tree goes back to its gate).
The unit tests of the same cases, through `troupe simulate`, are
tests/unit/test_tree_whole.py.

The scenes are tests/integration/test_trees.py's (`own`: a fresh namespace
and troupe's own kinds); `troupe_own` is overridden here to add a profile
with a small search budget (case 1). Victims are deleted with their grace
period: 0 where the test plays the kubelet (`wait_removed` force-deletes what
still terminates), 30 where they must stay Terminating (case 6).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from test_trees import POLL, TIMEOUT, Scene, node, own, pod_scheduled, wait_removed  # noqa: F401 (own: a fixture)
from troupe_process import TroupeProcess, supervised
from wait import wait_for

SMALL_BUDGET = "troupe-small-budget"  # a profile whose search budget is 14 pod placements
CONFIG = f"""\
apiVersion: scheduling.troupe.dev/v1alpha1
kind: SchedulerConfiguration
profiles:
- schedulerName: troupe-scheduler
- schedulerName: {SMALL_BUDGET}
  podGroupScheduling: {{searchSteps: 14}}
"""
P1000, P500, P0 = "whole-p1000", "whole-p500", "whole-p0"
COMPOSITE_SCHEDULED = "CompositePodGroupInitiallyScheduled"
BUDGET_SPENT = "search budget spent"


@pytest.fixture(scope="module")
def troupe_own(installed, tmp_path_factory):
    """test_trees.py's, with the small-budget profile beside the default one."""
    workdir = tmp_path_factory.mktemp("troupe-whole")
    yield from supervised(TroupeProcess(installed.scheduler_kubeconfig, workdir, config=CONFIG))


@pytest.fixture(scope="module")
def classes(installed) -> None:
    for name, value in ((P1000, 1000), (P500, 500), (P0, 0)):
        body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}}
        body |= {"value": value, "preemptionPolicy": "PreemptLowerPriority"}
        installed.kubectl("apply", "-f", "-", input=json.dumps(body))


@pytest.fixture
def s(own, classes) -> Scene:
    return own


# ------------------------------------------------------------------ helpers


def at(s: Scene, name: str) -> str:
    """This test's node `name`: named after its namespace, so that no pod of
    an earlier test (force-deleted, maybe not gone yet) is counted on it."""
    return f"{s.ns}-{name}"


def with_class(body: dict[str, Any], name: str) -> dict[str, Any]:
    body["spec"]["priorityClassName"] = name
    return body


def lone(s: Scene, name: str, cpu: str, cls: str) -> dict[str, Any]:
    """A pod of no group that troupe places."""
    body = with_class(s.pod(name, cpu=cpu), cls)
    body["spec"]["schedulerName"] = "troupe-scheduler"
    return body


def running(s: Scene, name: str, on: str, cpu: str, cls: str = P0, grace: int = 0) -> dict[str, Any]:
    """A pod of no group bound to `on`; `grace`: its terminationGracePeriodSeconds
    (no kubelet: with more than 0 it stays Terminating once deleted)."""
    body = with_class(s.pod(name, cpu=cpu, on=on), cls)
    body["spec"]["terminationGracePeriodSeconds"] = grace
    return body


def holds(check: Callable[[], str | None], seconds: float) -> None:
    """`check` finds nothing wrong (None) throughout `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        wrong = check()
        assert wrong is None, wrong
        if time.monotonic() >= deadline:
            return
        time.sleep(POLL)


def terminating_or_gone(s: Scene, names: Iterable[str]) -> set[str]:
    pods = s.pods()
    return {n for n in names if n not in pods or pods[n]["metadata"].get("deletionTimestamp")}


def nominated(s: Scene, names: Iterable[str]) -> dict[str, str]:
    pods = s.pods()
    return {n: (pods[n].get("status") or {}).get("nominatedNodeName") or "" for n in names}


# ============================================ 1. a tree is never bound in part


def test_a_tree_whose_search_budget_runs_out_binds_nothing_of_it(s):
    """Profile troupe-small-budget (searchSteps 14). Nodes n1 (rack r1), n2
    (rack r2), other (role=other), 4 CPU each. p (basic) over r (gang,
    minGroupCount 2, topology rack) and z (1 pod, nodeSelector role=other);
    r over a (basic, 3 pods), b and c (gangs of 2), 1 CPU a pod. In a rack,
    upstream's order (a, b, c) places a only; "the children that failed
    first" places b and c, for 7 steps: both racks use the 14, and placing r
    again in r1 finds none left. Today r ends Unschedulable while a is
    Scheduled and its 3 pods are bound (z's too). After: r is placed whole,
    or nothing of it is bound and it says the budget was spent. The objects
    come leaves first, p last, so that the tree is tried once, whole."""
    s.nodes(
        node(at(s, "n1"), cpu="4", labels={"rack": "r1"}),
        node(at(s, "n2"), cpu="4", labels={"rack": "r2"}),
        node(at(s, "other"), cpu="4", labels={"role": "other"}),
    )
    pods = []
    for group, count in (("a", 3), ("b", 2), ("c", 2), ("z", 1)):
        for i in range(count):
            body = s.pod(f"{group}-pod-{i}", group)
            body["spec"]["schedulerName"] = SMALL_BUDGET
            if group == "z":
                body["spec"]["nodeSelector"] = {"role": "other"}
            pods.append(body)
    s.create(*pods)
    s.create(s.pg("a", None, "r"), s.pg("b", 2, "r"), s.pg("c", 2, "r"), s.pg("z", 1, "p"))
    s.create(s.cpg("r", 2, "p", key="rack"))
    s.create(s.cpg("p"))
    s.wait_scheduled(["z-pod-0"])  # p is feasible through z
    tree = [p["metadata"]["name"] for p in pods if not p["metadata"]["name"].startswith("z-")]

    def r_decided() -> dict[str, Any] | None:
        c = s.condition(s.kinds.cpg_api, "compositepodgroups", "r", COMPOSITE_SCHEDULED)
        return c if c and not c["message"].startswith("waiting") else None

    wait_for(r_decided, timeout=TIMEOUT, interval=POLL, message="r's condition from its cycle")
    time.sleep(3.0)  # the binds and status writes of that cycle land
    cond = r_decided()
    assert cond is not None
    bound = sorted(set(tree) & set(s.bound()))
    if cond["status"] != "True":
        assert bound == [], f"bound {bound} while r is {cond['reason']}: {cond['message']}"
        assert BUDGET_SPENT in cond["message"], cond["message"]
    else:  # placed whole: in one rack
        where = s.bound()
        assert len({s.node_labels[where[p]].get("rack") for p in bound}) == 1, {p: where[p] for p in bound}


# ========================================== 2. one priority per tree: the root's


def test_a_tree_with_root_priority_1000_is_not_evicted_for_a_priority_500_pod(s):
    """n1 (4 CPU) runs the tree: root (priorityClassName whole-p1000) over a
    (gang of 2 pods of 2 CPU, no priority of its own, nor its pods). A lone
    pod mid (whole-p500, 4 CPU) comes. Today a is taken whole for it."""
    s.nodes(node(at(s, "n1"), cpu="4"))
    s.create(with_class(s.cpg("root", 1), P1000), s.pg("a", 2, "root"))
    s.create(s.pod("a-pod-0", "a", "2", on=at(s, "n1")), s.pod("a-pod-1", "a", "2", on=at(s, "n1")))
    s.create(lone(s, "mid", "4", P500))
    wait_for(lambda: pod_scheduled(s.pods()["mid"]), timeout=TIMEOUT, interval=POLL, message="mid tried")

    def tree_stays() -> str | None:
        gone = terminating_or_gone(s, ["a-pod-0", "a-pod-1"])
        if gone or "mid" in s.bound():
            return f"evicted {sorted(gone)} for mid (p500); mid on {s.bound().get('mid')}"
        return None

    holds(tree_stays, 5.0)


def test_a_tree_with_root_priority_1000_preempts_priority_0_pods(s):
    """n1 (4 CPU) runs low-0 and low-1 (2 CPU, whole-p0). The tree: root
    (whole-p1000) over a (gang of 2 pods of 2 CPU, no priority). Today it
    does not preempt (its pods are 0, as the victims) and waits for ever."""
    s.nodes(node(at(s, "n1"), cpu="4"))
    s.create(running(s, "low-0", at(s, "n1"), "2"), running(s, "low-1", at(s, "n1"), "2"))
    s.create(with_class(s.cpg("root", 1), P1000), s.pg("a", 2, "root"))
    s.create(s.pod("a-pod-0", "a", "2"), s.pod("a-pod-1", "a", "2"))
    wait_removed(s, ["low-0", "low-1"])
    assert s.wait_scheduled(["a-pod-0", "a-pod-1"]) == dict.fromkeys(["a-pod-0", "a-pod-1"], at(s, "n1"))
    s.wait_composite("root", "True", "Scheduled")


# ============================================= 3. no eviction that cannot help


@pytest.mark.parametrize("kind", ["tree", "flat-gang", "lone-pod"])
def test_the_eviction_is_the_one_that_lets_the_pod_bind(s, kind):
    """n1 (8 CPU) and n2 (4 CPU), zone z1 both; n1 runs big (4 CPU), n2 small
    (1 CPU, app=blocker), both whole-p0. a-pod-0 (2 CPU, whole-p1000) has a
    required anti-affinity to app=blocker by zone: only evicting small lets
    it bind. Today the tree evicts big (its trial lands on the emptier n1)
    and stays Unschedulable for ever; the flat gang and the lone pod evict
    small and bind."""
    s.nodes(node(at(s, "n1"), cpu="8", labels={"zone": "z1"}), node(at(s, "n2"), cpu="4", labels={"zone": "z1"}))
    small = running(s, "small", at(s, "n2"), "1")
    small["metadata"]["labels"]["app"] = "blocker"
    s.create(running(s, "big", at(s, "n1"), "4"), small)
    if kind == "tree":
        s.create(s.cpg("root", 1), s.pg("a", 1, "root"))
    elif kind == "flat-gang":
        s.create(s.pg("a", 1))
    mine = with_class(s.pod("a-pod-0", "a" if kind != "lone-pod" else None, "2"), P1000)
    mine["spec"]["schedulerName"] = "troupe-scheduler"
    term = {"labelSelector": {"matchLabels": {"app": "blocker"}}, "topologyKey": "zone"}
    mine["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    s.create(mine)
    first = wait_for(
        lambda: terminating_or_gone(s, ["big", "small"]), timeout=TIMEOUT, interval=POLL, message="a victim"
    )
    assert first == {"small"}
    wait_removed(s, ["small"])
    assert s.wait_scheduled(["a-pod-0"])["a-pod-0"] in (at(s, "n1"), at(s, "n2"))
    assert s.bound().get("big") == at(s, "n1")


# ================================ 4. no more victims than the tree needs


def sized(body: dict[str, Any], memory: str, pods: int | None = None) -> dict[str, Any]:
    """A node with `memory` (and `pods`) allocatable, or a pod that asks `memory`."""
    if body["kind"] == "Node":
        room = body["status"]["allocatable"] | {"memory": memory}
        if pods is not None:
            room["pods"] = str(pods)
        body["status"] = {"capacity": room, "allocatable": room}
    else:
        body["spec"]["containers"][0]["resources"]["requests"]["memory"] = memory
    return body


def test_a_tree_no_child_order_places_evicts_only_what_it_needs(s):
    """tests/unit/test_tree_properties.py's NOT_NEEDED. t0 (gang of its 3
    children, whole-p500) over t0a -> t0aa (rack), t0b and t0c (zone), gangs
    of 2 of 3 pods of mixed sizes; 4 nodes, 5 running pods (run2-0 of
    whole-p500, the others whole-p0). Placing the tree beside run1-0 takes a
    search over every child at once; before it, the tree evicted run0-0,
    run1-0 and run3-0. Now run1-0 keeps running, and the tree binds whole."""
    z0, r0 = {"zone": "z0"}, {"zone": "z1", "rack": "z1-r0"}
    s.nodes(
        sized(node(at(s, "n0"), "1", z0), "2Gi", 2),
        sized(node(at(s, "n1"), "2", r0), "4Gi", 8),
        sized(node(at(s, "n2"), "4", r0), "2Gi", 3),
        sized(node(at(s, "n3"), "1", z0), "4Gi", 2),
    )
    for name, on, cpu, memory, cls in (
        ("run0-0", "n2", "1", "1Gi", P0), ("run1-0", "n1", "500m", "256Mi", P0),
        ("run2-0", "n2", "2", "512Mi", P500), ("run3-0", "n1", "1500m", "512Mi", P0),
        ("run4-0", "n3", "250m", "2Gi", P0),
    ):  # fmt: skip
        s.create(sized(running(s, name, at(s, on), cpu, cls), memory))
    mine = {
        "t0aa": [("500m", "256Mi"), ("500m", "256Mi")],
        "t0b": [("1500m", "1Gi"), ("2", "512Mi"), ("250m", "512Mi")],
        "t0c": [("2", "256Mi"), ("500m", "1Gi"), ("1", "1Gi")],
    }
    s.create(*(with_class(sized(s.pod(f"{g}-{i}", g, cpu), memory), P500)
               for g, sizes in mine.items() for i, (cpu, memory) in enumerate(sizes)))  # fmt: skip
    s.create(with_class(s.pg("t0aa", 2, "t0a"), P500), with_class(s.pg("t0b", 2, "t0"), P500))
    s.create(s.pg("t0c", 2, "t0", key="zone"), s.cpg("t0a", None, "t0", key="rack"))
    s.create(with_class(s.cpg("t0", 3), P500))

    def placed_whole() -> dict[str, str] | None:
        bound = s.bound()
        counts = [sum(f"{g}-{i}" in bound for i in range(len(sizes))) for g, sizes in mine.items()]
        wait_removed(s, sorted(terminating_or_gone(s, ["run0-0", "run1-0", "run3-0", "run4-0"])))
        return bound if min(counts) >= 2 else None

    wait_for(placed_whole, timeout=TIMEOUT, interval=POLL, message="the tree bound whole")
    s.wait_composite("t0", "True", "Scheduled")
    assert "run1-0" not in terminating_or_gone(s, ["run1-0"]), "run1-0 evicted, though the tree fits beside it"
    assert s.bound().get("run1-0") == at(s, "n1")


# ====================== 6. no room held for a tree back at its gate


def preempting_tree(s: Scene, nested: bool = False) -> list[str]:
    """Nodes a, b, c (4 CPU) each run a 4-CPU whole-p0 pod that stays
    Terminating once deleted (grace 30, no kubelet). The tree rep (gang 2,
    whole-p1000 as its groups and pods) over leader (1 pod) and workers (gang
    of 2), or, `nested`, rep over mid (gang 1) over leader, and workers: 3
    pods of 4 CPU that preempt all three and are nominated. Returns the
    tree's pods."""
    s.nodes(*(node(at(s, n), cpu="4") for n in "abc"))
    s.create(*(running(s, f"{n}0", at(s, n), "4", grace=30) for n in "abc"))
    groups = [s.cpg("rep", 2)]
    if nested:
        groups.append(s.cpg("mid", 1, "rep"))
    groups += [s.pg("leader", 1, "mid" if nested else "rep"), s.pg("workers", 2, "rep")]
    s.create(*(with_class(g, P1000) for g in groups))
    mine = ["leader-0", "workers-0", "workers-1"]
    s.create(*(with_class(s.pod(n, n.partition("-")[0], "4"), P1000) for n in mine))

    def waiting_for_victims() -> dict[str, str] | None:
        held = nominated(s, mine)
        victims = terminating_or_gone(s, ["a0", "b0", "c0"])
        return held if all(held.values()) and len(victims) == 3 else None

    held = wait_for(waiting_for_victims, timeout=TIMEOUT, interval=POLL, message="the tree nominated, victims going")
    assert sorted(held.values()) == [at(s, n) for n in "abc"]
    return mine


def wait_all_cleared(s: Scene, names: list[str]) -> None:
    def cleared() -> bool:
        return not any(nominated(s, names).values())

    try:
        wait_for(cleared, timeout=15, interval=POLL, message=f"nominatedNodeName cleared on {names}")
    except AssertionError as e:
        raise AssertionError(f"{e}\nnow: {nominated(s, names)}") from None


def test_a_member_deleted_below_min_count_lets_all_the_trees_room_go(s):
    """workers-1 deleted: workers (gang of 2) has 1 pod and the tree waits at
    its gate. Today only workers-0 loses its nomination; leader-0 keeps its."""
    mine = preempting_tree(s)
    s.cluster.kubectl("delete", "pod", "-n", s.ns, "workers-1", "--wait=false")
    wait_all_cleared(s, [p for p in mine if p != "workers-1"])


def test_a_gated_pod_joining_lets_all_the_trees_room_go(s):
    """A pod with a scheduling gate joins workers: the tree waits at its
    gate. Today every nomination stays."""
    mine = preempting_tree(s)
    gated = with_class(s.pod("workers-2", "workers", "4"), P1000)
    gated["spec"]["schedulingGates"] = [{"name": "example.com/hold"}]
    s.create(gated)
    wait_all_cleared(s, mine)


def test_deleting_an_intermediate_composite_lets_all_the_trees_room_go(s):
    """rep over mid (over leader) and workers; mid deleted: leader waits for
    mid and rep (1 child of 2) waits at its gate. Today only leader-0 loses
    its nomination; workers-0 and workers-1 keep theirs."""
    mine = preempting_tree(s, nested=True)
    s.cluster.kubectl("delete", "compositepodgroups.scheduling.troupe.dev", "-n", s.ns, "mid", "--wait=false")
    wait_all_cleared(s, mine)
