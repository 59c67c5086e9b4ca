"""The periodic resync against the real API server, with the scheduler's own
ServiceAccount (so RBAC covers its lists): cached objects the API no longer
has are dropped, everything else is left alone, across pages."""

from __future__ import annotations

import json
import uuid

from kubernetes_asyncio import client

from scheduler.api.config import SchedulerConfiguration
from scheduler.core.scheduler import Scheduler
from scheduler.plugins import in_tree_registry
from scheduler.runtime import resync as resync_mod
from scheduler.runtime.kube import load_configuration
from scheduler.runtime.ratelimit import TokenBucket
from scheduler.runtime.resync import Resync

LABEL = "scheduling.troupe.dev/pod-group"


def pod_body(ns: str, name: str, uid: str = "", node: str = "") -> dict:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {LABEL: "g"}},
        "spec": {"schedulerName": "troupe-scheduler", "containers": [{"name": "c", "image": "busybox"}]},
    }
    if uid:
        body["metadata"]["uid"] = uid
    if node:
        body["spec"]["nodeName"] = node
    return body


async def test_resync_drops_what_the_api_lost_and_keeps_the_rest(installed, namespace, monkeypatch):
    monkeypatch.setattr(resync_mod, "PAGE", 2)  # several pages even for a few objects
    items = [pod_body(namespace, f"real-{i}") for i in range(5)]
    installed.kubectl("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    listed = installed.get_json("pods", "-n", namespace)["items"]

    sched = Scheduler(SchedulerConfiguration(), in_tree_registry())
    sched.on_node(
        {"metadata": {"name": "ghost-node", "uid": "n1"}, "status": {"allocatable": {"cpu": "4", "pods": "10"}}}
    )
    for body in listed:
        sched.on_pod(body)
    ghost_uid = str(uuid.uuid4())
    sched.on_pod(pod_body(namespace, "ghost", uid=ghost_uid, node="ghost-node"))  # deleted during a watch gap
    sched.on_podgroup(
        {
            "metadata": {"name": "ghost-group", "namespace": namespace, "uid": "pg1"},
            "spec": {"schedulingPolicy": {"basic": {}}},
        }
    )
    sched.synced.set()

    cfg = await load_configuration(str(installed.scheduler_kubeconfig))
    api = client.ApiClient(cfg)
    try:
        r = Resync(sched, api, TokenBucket(100, 100), interval=3600)
        assert await r.resync("pod") == 1
        assert await r.resync("node") == 1
        assert await r.resync("podgroup") == 1
        assert await r.resync("workload") == 0
        assert await r.resync("pod") == 0  # nothing more to drop
    finally:
        await api.close()

    assert ghost_uid not in sched.cache.pods
    assert {p["metadata"]["uid"] for p in listed} <= set(sched.cache.pods)
    assert sched.cache.node("ghost-node") is None
    assert (namespace, "ghost-group") not in sched.cache.groups
    # The real pods are still queued (they wait for PodGroup g); the ghost is not.
    assert ghost_uid not in sched.queue and all(p["metadata"]["uid"] in sched.queue for p in listed)


async def test_a_refused_list_drops_nothing(installed, namespace):
    import pytest
    from kubernetes_asyncio.client.exceptions import ApiException

    sched = Scheduler(SchedulerConfiguration(), in_tree_registry())
    sched.on_pod(pod_body(namespace, "kept", uid=str(uuid.uuid4())))
    cfg = await load_configuration(str(installed.scheduler_kubeconfig))
    cfg.api_key = {"BearerToken": "not-a-valid-token"}
    cfg.api_key_prefix = {"BearerToken": "Bearer"}
    api = client.ApiClient(cfg)
    try:
        with pytest.raises(ApiException) as err:
            await Resync(sched, api, TokenBucket(100, 100), interval=3600).resync("pod")
        assert err.value.status == 401
    finally:
        await api.close()
    assert len(sched.cache.pods) == 1


def test_an_object_the_watch_touched_during_the_list_is_kept():
    a, b, c = object(), object(), object()
    before = {"a": a, "b": b, "c": c}
    # a: still listed. b: absent and unchanged (deleted). c: absent, but the
    # watch replaced it meanwhile (re-created): kept.
    assert resync_mod.stale(before, {"a"}, {"a": a, "b": b, "c": object()}) == ["b"]
