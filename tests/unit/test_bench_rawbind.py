"""The benchmark's raw bind loop (bench/e2e_rawbind.py), the peer troupe is
divided by: which pods it takes, where it puts them (a replica inside one
rack), and the group conditions it writes once a replica is bound (the ones
troupe writes on that kind), without an API server."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # bench/ is not an installed package
    sys.path.insert(0, str(ROOT))

from bench.e2e_rawbind import RawBinder  # noqa: E402
from bench.e2e_workload import RAW_SCHEDULER_NAME, flavor, pod_name  # noqa: E402


class FakeKube:
    """Records the requests; every one succeeds."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any, str]] = []

    async def request(self, method: str, path: str, body: Any = None, *args: Any, **kwargs: Any) -> None:
        self.calls.append((method, path, body, kwargs.get("content_type", "application/json")))


def binder(kube: FakeKube, domain_size: int = 0) -> RawBinder:
    return RawBinder(kube, "ns", RAW_SCHEDULER_NAME, 1000, 1000, 1, domain_size)  # type: ignore[arg-type]


def pod(name: str, uid: str, node: str = "", scheduler: str = RAW_SCHEDULER_NAME, deleting: bool = False) -> dict:
    meta: dict[str, Any] = {"name": name, "uid": uid}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-06T00:00:00Z"
    return {"metadata": meta, "spec": {"schedulerName": scheduler, "nodeName": node}}


def test_it_takes_each_pending_pod_of_its_scheduler_once():
    b = binder(FakeKube())
    b.offer(pod("a", "u1"))
    b.offer(pod("a", "u1"))  # the same pod again (a MODIFIED event)
    b.offer(pod("b", "u2", node="n0"))  # bound already
    b.offer(pod("c", "u3", scheduler="default-scheduler"))
    b.offer(pod("d", "u4", deleting=True))
    assert b.queue.qsize() == 1 and b.queue.get_nowait() == ("a", "u1")


def test_a_replica_goes_round_robin_over_the_nodes_of_one_rack():
    b = binder(FakeKube(), domain_size=2)
    b.nodes = [f"n{i}" for i in range(6)]  # three racks of two
    assert [b.pick(pod_name(1, i)) for i in range(3)] == ["n2", "n3", "n2"]
    # Replica 4 is in rack 4 % 3 = 1 too; the rack's round robin goes on where replica 1 left it.
    assert [b.pick(pod_name(4, i)) for i in range(2)] == ["n3", "n2"]
    assert b.pick(pod_name(0, 0)) == "n0"
    assert b.pick("not-a-bench-pod") == "n0"  # no replica: round robin over every node


async def written(b: RawBinder) -> None:
    await asyncio.gather(*list(b.status_tasks))


async def test_a_tree_replica_gets_its_three_conditions_once_all_its_pods_are_bound():
    kube = FakeKube()
    b = binder(kube)
    b.group_size, b.tree = 8, True  # native objects: v1beta1 PodGroups, v1alpha3 CompositePodGroups
    for i in range(7):
        b.group_bound(pod_name(3, i))
    await written(b)
    assert kube.calls == []  # not before the replica's last pod
    b.group_bound(pod_name(3, 7))
    await written(b)
    got = sorted((path, body["status"]["conditions"][0]["type"], ct) for _, path, body, ct in kube.calls)
    merge = "application/merge-patch+json"
    assert got == [
        (
            "/apis/scheduling.k8s.io/v1alpha3/namespaces/ns/compositepodgroups/g00003/status",
            "CompositePodGroupInitiallyScheduled",
            merge,
        ),
        (
            "/apis/scheduling.k8s.io/v1beta1/namespaces/ns/podgroups/g00003-leader/status",
            "PodGroupInitiallyScheduled",
            merge,
        ),
        (
            "/apis/scheduling.k8s.io/v1beta1/namespaces/ns/podgroups/g00003-workers/status",
            "PodGroupInitiallyScheduled",
            merge,
        ),
    ]
    assert all(c[0] == "PATCH" for c in kube.calls) and b.status_writes == 3


async def test_on_troupes_kinds_a_gang_gets_podgroupscheduled():
    kube = FakeKube()
    b = binder(kube)
    b.group_size, b.podgroup_api = 3, flavor("raw-troupe").podgroup_api
    for i in range(3):
        b.group_bound(pod_name(0, i))
    await written(b)
    [(_, path, body, _)] = kube.calls
    assert path == f"/apis/{b.podgroup_api}/namespaces/ns/podgroups/g00000/status"
    assert body["status"]["conditions"][0]["type"] == "PodGroupScheduled"
