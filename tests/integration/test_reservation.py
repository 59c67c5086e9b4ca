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
from objects import GROUP_LABEL, create, events_for, podgroup
from troupe_process import TroupeProcess, supervised
from wait import wait_for

from bench.e2e_kube import Credentials, Kube
from bench.kubelet import FakeKubelet, PodStream, pod_body

pytestmark = pytest.mark.integration

STARVATION = 5.0
RUNTIME = 3.0
BACKOFF = 10.0  # podMaxBackoffSeconds, the default
NODE_CPU = 4000
HIGH = "troupe-test-reservation-high"

CONFIG = f"""
profiles:
- schedulerName: troupe-scheduler
  pluginConfig:
  - name: Reservation
    args: {{starvationSeconds: {STARVATION:g}}}
"""
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


def test_a_higher_priority_gang_takes_the_reserved_room_first(installed, busy, namespace):
    c, ns, cluster = installed, namespace, busy
    body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": HIGH}, "value": 1000}
    c.kubectl("apply", "-f", "-", input=json.dumps(body))
    big_gang(c, ns, "low")
    wait_for(lambda: reserved_event(c, ns, "low"), timeout=STARVATION + BACKOFF + 10, message="low Reserved")
    big_gang(c, ns, "high", priority_class=HIGH)
    high = wait_for(lambda: gang_bound(cluster, "high"), timeout=30, message="high bound whole")
    low = wait_for(lambda: gang_bound(cluster, "low"), timeout=60, message="low bound whole, after high")
    assert high < low, (high, low)
    assert_never_overcommitted(cluster)


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
