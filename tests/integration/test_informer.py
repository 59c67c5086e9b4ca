"""The Pod/Node Informer against the real API server, with the scheduler's own
ServiceAccount: paged listing, the watch (adds, updates, deletes, a Pod whose
JSON line is larger than aiohttp's 64 KiB line limit), and the Replace after a
410 Gone that drops what was deleted while no watch was open (an etcd this
young has compacted nothing, so the 410 itself is covered in
tests/unit/test_informer_unit.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes_asyncio import client
from prometheus_client import REGISTRY

from scheduler.runtime import kube
from scheduler.runtime.informer import Informer
from scheduler.runtime.kube import load_configuration


def pod(ns: str, name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "annotations": annotations or {}},
        "spec": {"schedulerName": "nobody", "containers": [{"name": "c", "image": "busybox"}]},
    }


class Cache:
    """What the informer feeds: pods by uid, plus a log of what happened."""

    def __init__(self) -> None:
        self.pods: dict[str, dict[str, Any]] = {}
        self.log: list[tuple[str, str]] = []

    def upsert(self, body: dict[str, Any]) -> None:
        self.pods[body["metadata"]["uid"]] = body
        self.log.append(("upsert", body["metadata"].get("name", "")))

    def delete(self, body: dict[str, Any]) -> None:
        gone = self.pods.pop(body["metadata"]["uid"], None)
        self.log.append(("delete", (gone or body)["metadata"].get("name", "")))

    def names(self) -> set[str]:
        return {b["metadata"]["name"] for b in self.pods.values()}


def informer(api: client.ApiClient, ns: str, cache: Cache) -> Informer:
    return Informer(
        api,
        f"/api/v1/namespaces/{ns}/pods",
        "pod",
        cache.upsert,
        cache.delete,
        cached_keys=lambda: set(cache.pods),
        key_of=lambda meta: meta["uid"],
        tombstone=lambda uid: {"metadata": {"uid": uid}},
    )


def relists() -> float:
    """troupe_watch_relists_total of the informer's kind, as /metrics shows it."""
    return REGISTRY.get_sample_value("troupe_watch_relists_total", {"kind": "pod"}) or 0.0


async def eventually(check: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


@pytest.fixture
async def api(installed):
    cfg = await load_configuration(str(installed.scheduler_kubeconfig))
    api = client.ApiClient(cfg)
    yield api
    await api.close()


def create(installed, items: list[dict[str, Any]]) -> None:
    installed.kubectl("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))


async def test_list_then_watch_adds_updates_deletes_and_large_pods(installed, namespace, api, monkeypatch):
    # Pages of 2 (the list's resourceVersion comes with the last page).
    real_list = kube.list_paged
    monkeypatch.setattr("scheduler.runtime.informer.list_paged", lambda *a, **kw: real_list(*a, **{**kw, "limit": 2}))
    create(installed, [pod(namespace, f"p{i}") for i in range(5)])
    cache = Cache()
    before = relists()
    inf = informer(api, namespace, cache)
    assert await inf.relist() == 5
    assert cache.names() == {f"p{i}" for i in range(5)} and inf.resource_version

    task = asyncio.create_task(inf.run())
    try:
        big = "x" * 150_000  # one watch line of ~150 KB
        create(installed, [pod(namespace, "big", {"troupe.test/big": big})])
        installed.kubectl("label", "pod", "p0", "-n", namespace, "touched=yes")
        installed.kubectl("delete", "pod", "p1", "-n", namespace, "--wait=false")
        await eventually(lambda: "big" in cache.names() and "p1" not in cache.names())
        big_pod = next(b for b in cache.pods.values() if b["metadata"]["name"] == "big")
        assert big_pod["metadata"]["annotations"]["troupe.test/big"] == big
        await eventually(
            lambda: any(
                b["metadata"]["name"] == "p0" and (b["metadata"].get("labels") or {}).get("touched") == "yes"
                for b in cache.pods.values()
            )
        )
        assert not task.done()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert relists() == before + 1  # the watch never needed a second listing


async def test_an_expired_watch_relists_and_drops_what_was_deleted_meanwhile(installed, namespace, api):
    create(installed, [pod(namespace, n) for n in ("stays", "goes")])
    cache = Cache()
    before = relists()
    inf = informer(api, namespace, cache)
    await inf.relist()
    assert cache.names() == {"stays", "goes"}
    # While no watch is open: one pod deleted, one created; and a ghost the
    # cache holds from nowhere (as after a missed DELETED event).
    installed.kubectl("delete", "pod", "goes", "-n", namespace, "--wait=false")
    create(installed, [pod(namespace, "new")])
    cache.pods["ghost-uid"] = {"metadata": {"uid": "ghost-uid", "name": "ghost"}}
    inf.resource_version = ""  # what a 410 Gone leaves (test_informer_unit: the ERROR event does this)

    task = asyncio.create_task(inf.run())
    try:
        await eventually(lambda: relists() == before + 2)
        assert cache.names() == {"stays", "new"}
        assert ("delete", "goes") in cache.log and ("delete", "ghost") in cache.log
        # and the watch goes on from the new listing
        create(installed, [pod(namespace, "after")])
        await eventually(lambda: "after" in cache.names())
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_handler_that_raises_does_not_stop_the_watch(installed, namespace, api):
    cache = Cache()
    seen: list[str] = []

    def upsert(body: dict[str, Any]) -> None:
        seen.append(body["metadata"]["name"])
        if body["metadata"]["name"] == "odd":
            raise RuntimeError("an object we do not understand")
        cache.upsert(body)

    inf = Informer(
        api,
        f"/api/v1/namespaces/{namespace}/pods",
        "pod",
        upsert,
        cache.delete,
        cached_keys=lambda: set(cache.pods),
        key_of=lambda meta: meta["uid"],
        tombstone=lambda uid: {"metadata": {"uid": uid}},
    )
    await inf.relist()
    task = asyncio.create_task(inf.run())
    try:
        create(installed, [pod(namespace, "odd")])
        create(installed, [pod(namespace, "fine")])
        await eventually(lambda: "fine" in cache.names())
        assert "odd" in seen and not task.done()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
