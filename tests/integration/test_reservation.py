"""Reservations on the real control plane, with the real troupe process: a
gang that needs the whole cluster starts behind a steady stream of short
pods, instead of waiting for ever.

Two nodes of 4 CPU; a stream of 1-CPU pods, two a second, each running
3 s (bench/kubelet.py's FakeKubelet starts bound pods and deletes them when
their runtime is over, as kubelets and a Job controller would); then a gang
of two 4-CPU pods. Without reservations the two nodes are never empty
together (a finished small pod's room goes to the next small pod) and the
gang never binds; bench/starvation.py measures that side by side.

`starvationSeconds` is 5 here. A gang attempt that fails backs off (up to
`podMaxBackoffSeconds`, 10 s by default), so the bound the tests hold the
gang to is starvationSeconds + the small pods' runtime + one backoff.

The other tests hold the cluster still instead of streaming: nodes filled by
pods bound up front (nobody's to preempt), which end only when the test ends
them as a kubelet would (force-deleted), so that where a reservation goes,
who takes its room and when it is let go are each one observable step.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from objects import GROUP_LABEL, bound, create, events_for, force_delete, pod, podgroup, wait_pod_unschedulable
from troupe_process import TroupeProcess, supervised
from wait import holds, wait_for

from bench.e2e_kube import Credentials, Kube
from bench.kubelet import FakeKubelet, PodStream, pod_body

pytestmark = pytest.mark.integration

STARVATION = 5.0
RUNTIME = 3.0
BACKOFF = 10.0  # podMaxBackoffSeconds, the default
NODE_CPU = 4000
# Higher than the gangs and the running pods, but never preempting: such a
# gang can only start in room that frees, so binding first proves it took the
# reserved room rather than making room of its own.
HIGH = "troupe-test-reservation-high-never-preempts"

CONFIG = f"""
profiles:
- schedulerName: troupe-scheduler
  pluginConfig:
  - name: Reservation
    args: {{starvationSeconds: {STARVATION:g}}}
"""
# The release tests measure how soon a let-go reservation's room is used:
# the waiting pod's own backoff (up to 10 s by default) must not be what is measured.
RELEASE_CONFIG = CONFIG + "queue: {podMaxBackoffSeconds: 1}\n"
LEADER_CONFIG = (
    CONFIG
    + """
leaderElection:
  leaderElect: true
  leaseDuration: 3s
  renewDeadline: 2s
  retryPeriod: 250ms
"""
)


class Cluster:
    """The fake kubelet and the pod stream, on an asyncio loop in a thread."""

    def __init__(self, kubeconfig, namespace: str, rate: float = 2.0) -> None:
        self.kube = Kube(Credentials.from_kubeconfig(kubeconfig), connections=8)
        self.kubelet = FakeKubelet(self.kube, namespace)
        self.stream = PodStream(self.kube, namespace, rate, "1", RUNTIME, "troupe-scheduler")
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.stop_kubelet = self._call(asyncio.Event)
        self.stop_stream = self._call(asyncio.Event)
        self.tasks = [
            asyncio.run_coroutine_threadsafe(self.kubelet.run(self.stop_kubelet), self.loop),
            asyncio.run_coroutine_threadsafe(self.stream.run(self.stop_stream), self.loop),
        ]

    def _call(self, fn: Callable[[], Any]) -> Any:
        async def call() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(10)

    def check(self) -> None:
        """Neither the kubelet nor the stream has failed."""
        for task in self.tasks:
            if task.done():
                task.result()  # raises what it raised

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.stop_stream.set)
        self.loop.call_soon_threadsafe(self.stop_kubelet.set)
        for task in self.tasks:
            task.result(30)
        asyncio.run_coroutine_threadsafe(self.kube.close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@contextmanager
def busy_cluster(installed, nodes, namespace: str) -> Iterator[Cluster]:
    """Two 4-CPU nodes kept busy by the stream, with its kubelet (a scheduler must run)."""
    nodes("n1", cpu="4")
    nodes("n2", cpu="4")
    cluster = Cluster(installed.admin_kubeconfig, namespace)
    try:
        wait_for(lambda: len(cluster.kubelet.running) >= 4, timeout=30, message="the stream keeps the nodes busy")
        yield cluster
        cluster.check()
    finally:
        cluster.close()


@pytest.fixture
def busy(installed, troupe, nodes, namespace) -> Iterator[Cluster]:
    with busy_cluster(installed, nodes, namespace) as cluster:
        yield cluster


def big_gang(c, ns: str, name: str, priority_class: str | None = None) -> None:
    """A gang of the whole cluster: two 4-CPU pods, running RUNTIME s."""
    pods = [
        pod_body(ns, f"{name}-{i}", "4", RUNTIME, "troupe-scheduler", (GROUP_LABEL, name), priority_class)
        for i in range(2)
    ]
    create(c, podgroup(ns, name, 2), *pods)


def gang_bound(cluster: Cluster, name: str) -> float | None:
    """When the gang's second pod was seen bound (monotonic), if it was."""
    times = [t for n, t in cluster.kubelet.bound_at.items() if n.startswith(f"{name}-")]
    return max(times) if len(times) == 2 else None


def assert_never_overcommitted(cluster: Cluster) -> None:
    assert all(cpu <= NODE_CPU for cpu in cluster.kubelet.peak_cpu_by_node.values()), cluster.kubelet.peak_cpu_by_node


def reserved_event(c, ns: str, name: str) -> dict[str, Any] | None:
    return next((e for e in events_for(c, ns, name) if e.get("reason") == "Reserved"), None)


@pytest.fixture
def troupe(installed, tmp_path) -> Iterator[TroupeProcess]:
    # Per test: the failover test must be the only one with schedulers of its own.
    yield from supervised(TroupeProcess(installed.scheduler_kubeconfig, tmp_path, config=CONFIG))


def test_a_gang_of_the_whole_cluster_starts_behind_a_stream_of_small_pods(installed, busy, namespace):
    c, ns, cluster = installed, namespace, busy
    created = time.monotonic()
    big_gang(c, ns, "big")
    event = wait_for(lambda: reserved_event(c, ns, "big"), timeout=STARVATION + BACKOFF + 10, message="Reserved")
    assert "reserved node(s) n1, n2 for 2 pod(s); waiting for" in event["note"], event
    pg = c.get_json("podgroup", "-n", ns, "big")
    cond = next(x for x in pg["status"]["conditions"] if x["type"] == "PodGroupScheduled")
    assert cond["status"] == "False" and "reserved node(s) n1, n2" in cond["message"], cond
    assert {
        p["status"].get("nominatedNodeName") for p in c.get_json("pods", "-n", ns, "-l", f"{GROUP_LABEL}=big")["items"]
    } == {"n1", "n2"}

    bound = wait_for(lambda: gang_bound(cluster, "big"), timeout=60, message="the gang bound whole")
    waited = bound - created
    print(f"gang waited {waited:.1f}s (starvationSeconds {STARVATION:g}, runtime {RUNTIME:g}, backoff {BACKOFF:g})")
    assert waited <= STARVATION + RUNTIME + BACKOFF + 2, waited

    # The gang runs, ends, and the stream is served again.
    after = cluster.stream.created
    wait_for(
        lambda: any(int(n.split("-")[1]) >= after for n in cluster.kubelet.bound_at if n.startswith("s-")),
        timeout=30,
        message="small pods bound again after the gang",
    )
    assert_never_overcommitted(cluster)


def test_a_tree_of_the_whole_cluster_starts_behind_a_stream_of_small_pods(installed, busy, namespace):
    """A leader+workers tree (troupe's own kinds: a root CompositePodGroup
    needing both groups, a 1-pod leader, a 1-pod worker gang) that needs both
    nodes: the root gets the reservation, its Event and its condition; the
    tree binds whole in the room that frees."""
    c, ns, cluster = installed, namespace, busy
    root = {
        "apiVersion": "scheduling.troupe.dev/v1alpha2",
        "kind": "CompositePodGroup",
        "metadata": {"name": "rep", "namespace": ns},
        "spec": {
            "workloadRef": {"workloadName": "rep", "templateName": "rep"},
            "schedulingPolicy": {"gang": {"minGroupCount": 2}},
        },
    }
    objects: list[dict[str, Any]] = [root]
    for role in ("leader", "workers"):
        group = podgroup(ns, f"rep-{role}", 1)
        group["spec"]["parentCompositePodGroupName"] = "rep"
        objects += [
            group,
            pod_body(ns, f"rep-{role}-0", "4", RUNTIME, "troupe-scheduler", (GROUP_LABEL, f"rep-{role}")),
        ]
    create(c, *objects)
    event = wait_for(lambda: reserved_event(c, ns, "rep"), timeout=STARVATION + BACKOFF + 10, message="Reserved")
    assert event["regarding"]["kind"] == "CompositePodGroup", event
    assert "reserved node(s) n1, n2 for 2 pod(s); waiting for" in event["note"], event
    cpg = c.get_json("compositepodgroups.scheduling.troupe.dev", "-n", ns, "rep")
    cond = next(x for x in cpg["status"]["conditions"] if x["type"] == "CompositePodGroupInitiallyScheduled")
    assert cond["status"] == "False" and "reserved node(s) n1, n2" in cond["message"], cond

    def tree_bound() -> bool:
        return all(f"rep-{role}-0" in cluster.kubelet.bound_at for role in ("leader", "workers"))

    wait_for(tree_bound, timeout=60, message="the tree bound whole")
    assert_never_overcommitted(cluster)


def running(ns: str, name: str, node_name: str, cpu: str, deadline: int | None = None) -> dict[str, Any]:
    """A pod bound to `node_name` up front (placed by someone else), running
    until the test deletes it; `deadline`: its activeDeadlineSeconds, which
    tells the Reservation plugin when it ends at the latest."""
    body = pod(ns, name, cpu=cpu, node_name=node_name)
    if deadline is not None:
        body["spec"]["activeDeadlineSeconds"] = deadline
    return body


def gang_pods(ns: str, name: str, size: int, cpu: str, priority_class: str | None = None) -> list[dict[str, Any]]:
    pods = [pod(ns, f"{name}-{i}", group=name, cpu=cpu) for i in range(size)]
    if priority_class:
        for body in pods:
            body["spec"]["priorityClassName"] = priority_class
    return pods


def nominations(c, ns: str, group: str) -> dict[str, str]:
    """The group's pods by name: their status.nominatedNodeName ("" if none)."""
    items = c.get_json("pods", "-n", ns, "-l", f"{GROUP_LABEL}={group}")["items"]
    return {p["metadata"]["name"]: p.get("status", {}).get("nominatedNodeName") or "" for p in items}


def reserved_events(c, ns: str, name: str) -> list[dict[str, Any]]:
    return [e for e in events_for(c, ns, name) if e.get("reason") == "Reserved"]


def assert_nothing_evicted(c, ns: str, troupe: TroupeProcess, running_names: set[str]) -> None:
    """No victim chosen, none marked, none deleted (the running pods the test did not end are all there)."""
    assert troupe.metric("scheduler_preemption_victims_count") == 0
    pods = c.get_json("pods", "-n", ns)["items"]
    assert running_names <= {p["metadata"]["name"] for p in pods}
    marked = [
        p["metadata"]["name"]
        for p in pods
        if any(x["type"] == "DisruptionTarget" for x in p.get("status", {}).get("conditions", []))
    ]
    assert marked == [], marked
    preempted = [e for e in c.get_json("events.v1.events.k8s.io", "-n", ns)["items"] if e.get("reason") == "Preempted"]
    assert preempted == [], preempted


def test_a_higher_priority_gang_takes_the_reserved_room_first(installed, troupe, nodes, namespace):
    """Four full 4-CPU nodes; the pods on n3 and n4 end first (by their
    activeDeadlineSeconds). The low gang (two 4-CPU pods) starves and reserves
    n3 and n4. A gang of higher priority that never preempts (two 2-CPU pods)
    arrives; n3's pod ends; the high gang binds there, in the low gang's
    reserved room. When n4's pod ends too, the low gang's reservation is
    chosen again away from n3 (n4, now empty, and another node). Nothing is
    evicted."""
    c, ns = installed, namespace
    body = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": HIGH},
        "value": 1000,
        "preemptionPolicy": "Never",
    }
    c.kubectl("apply", "-f", "-", input=json.dumps(body))
    for n in ("n1", "n2", "n3", "n4"):
        nodes(n, cpu="4")
    deadlines = {"n1": 3600, "n2": 3600, "n3": 600, "n4": 600}
    create(c, *[running(ns, f"run-{n}", n, "4", deadline) for n, deadline in deadlines.items()])
    create(c, podgroup(ns, "low", 2), *gang_pods(ns, "low", 2, "4"))
    event = wait_for(lambda: reserved_event(c, ns, "low"), timeout=STARVATION + BACKOFF + 10, message="low Reserved")
    assert event["note"].startswith("reserved node(s) n") and "for 2 pod(s)" in event["note"], event
    first = wait_for(
        lambda: sorted((n := nominations(c, ns, "low")).values()) == ["n3", "n4"] and n,
        timeout=10,
        message="low nominated to n3 and n4",
    )

    create(c, podgroup(ns, "high", 2), *gang_pods(ns, "high", 2, "2", priority_class=HIGH))
    wait_pod_unschedulable(c, ns, "high-0")  # no room yet, and it makes none
    force_delete(c, ns, "run-n3")  # n3's pod ends (its kubelet)

    # Where the high gang bound: n3, the room reserved for low.
    placed = wait_for(
        lambda: len(b := bound(c, ns, "high-")) == 2 and b, timeout=BACKOFF + 10, message="high bound whole"
    )
    assert set(placed.values()) == {"n3"}, placed
    # n4's pod ends: the low gang, woken, finds n3 taken and its reservation
    # moves off it, with an Event saying where to.
    force_delete(c, ns, "run-n4")
    moved = wait_for(
        lambda: (n := nominations(c, ns, "low")) != first and all(n.values()) and n,
        timeout=BACKOFF + 10,
        message="low's reservation chosen again",
    )
    assert "n3" not in moved.values() and "n4" in moved.values() and len(set(moved.values())) == 2, moved
    again = wait_for(lambda: len(e := reserved_events(c, ns, "low")) >= 2 and e, timeout=10, message="a new Reserved")
    note = again[-1]["note"]
    assert note.startswith("reserved node(s) ") and all(n in note for n in moved.values()) and "n3" not in note, again
    assert bound(c, ns, "low-") == {}
    assert_nothing_evicted(c, ns, troupe, {"run-n1", "run-n2"})


def test_a_reservation_survives_a_leader_failover_without_double_booking(installed, nodes, namespace, tmp_path):
    c, ns = installed, namespace
    c.kubectl("delete", "lease", "troupe-scheduler", "-n", "troupe-system", check=False)
    a = TroupeProcess(c.scheduler_kubeconfig, tmp_path, config=LEADER_CONFIG, name="a").start()
    b = TroupeProcess(c.scheduler_kubeconfig, tmp_path, config=LEADER_CONFIG, name="b").start()
    try:
        wait_for(lambda: a.metric("leader_election_master_status") == 1.0, timeout=10, message="a leads")
        with busy_cluster(c, nodes, ns) as cluster:
            failover(c, ns, cluster, a, b)
    finally:
        a.kill()
        b.kill()
        c.kubectl("delete", "lease", "troupe-scheduler", "-n", "troupe-system", check=False)
        print(f"--- a (tail)\n{a.log_tail(30)}\n--- b (tail)\n{b.log_tail(30)}")


def failover(c, ns: str, cluster: Cluster, a: TroupeProcess, b: TroupeProcess) -> None:
    """a reserves room for a gang and dies; b, leading next, binds the gang into it."""
    # No pod ends until b leads: a reserves the room but cannot bind into it,
    # so only b, from the nominated node names a left, can.
    cluster.kubelet.paused = True
    big_gang(c, ns, "big")
    wait_for(lambda: reserved_event(c, ns, "big"), timeout=STARVATION + BACKOFF + 10, message="Reserved by a")
    a.kill()
    wait_for(lambda: b.metric("leader_election_master_status") == 1.0, timeout=15, message="b leads")
    # b holds the nominated room at once (status.nominatedNodeName): the
    # stream does not take it back, and the gang binds as it drains.
    cluster.kubelet.paused = False
    resumed = time.monotonic()
    bound = wait_for(lambda: gang_bound(cluster, "big"), timeout=60, message="the gang bound by b")
    print(f"gang bound {bound - resumed:.1f}s after the room began to drain under b")
    assert bound - resumed <= RUNTIME + BACKOFF + 2
    assert (b.metric("troupe_pod_bindings_total", result="bound") or 0) >= 2
    assert_never_overcommitted(cluster)


# ---------------------------------------------------------- room let go at once


@pytest.fixture
def releasing_troupe(installed, tmp_path) -> Iterator[TroupeProcess]:
    yield from supervised(TroupeProcess(installed.scheduler_kubeconfig, tmp_path, config=RELEASE_CONFIG))


@pytest.mark.parametrize("deleted", ["podgroup", "member"])
def test_a_deleted_group_frees_its_reservation_at_once(installed, releasing_troupe, nodes, namespace, deleted):
    """Two 4-CPU nodes, each running a 3-CPU pod that never ends; the gang
    (two 4-CPU pods) starves and reserves both, so a 1-CPU pod waits although
    each node has a CPU free. Then the gang goes: its PodGroup deleted (its
    pods still there), or one of its two pods deleted (the other waits at the
    gang's gate). Its room is let go at once: the small pod binds within
    seconds, the gang's remaining pods lose their nominatedNodeName, and the
    scheduler reports no room reserved."""
    c, ns = installed, namespace
    nodes("n1", cpu="4")
    nodes("n2", cpu="4")
    create(c, running(ns, "run-n1", "n1", "3"), running(ns, "run-n2", "n2", "3"))
    create(c, podgroup(ns, "big", 2), *gang_pods(ns, "big", 2, "4"))
    wait_for(lambda: reserved_event(c, ns, "big"), timeout=STARVATION + BACKOFF + 10, message="big Reserved")
    wait_for(lambda: sorted(nominations(c, ns, "big").values()) == ["n1", "n2"], timeout=10, message="big nominated")
    create(c, pod(ns, "small", cpu="1"))
    wait_pod_unschedulable(c, ns, "small")  # the reservation holds the free CPU of both nodes
    holds(lambda: "small" not in bound(c, ns), 2, message="small waits while big's reservation stands")

    if deleted == "podgroup":
        c.kubectl("delete", "podgroup", "-n", ns, "big")
        left = ["big-0", "big-1"]
    else:
        force_delete(c, ns, "big-1")
        left = ["big-0"]
    gone = time.monotonic()
    where = wait_for(lambda: bound(c, ns, "small"), timeout=5, message="small bound on the room big held")
    print(f"small bound {time.monotonic() - gone:.1f}s after big's {deleted} was deleted")
    assert where["small"] in ("n1", "n2"), where
    wait_for(
        lambda: nominations(c, ns, "big") == dict.fromkeys(left, ""),
        timeout=5,
        message=f"{left}: nominatedNodeName cleared",
    )
    assert bound(c, ns, "big-") == {}
    assert releasing_troupe.metric("troupe_reserved_pods") == 0
    assert releasing_troupe.metric("troupe_reserved_room", resource="cpu") == 0
