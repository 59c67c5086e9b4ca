"""Preemption's I/O against the real API server, as troupe's ServiceAccount (so
the RBAC in manifests/ is what is proven): the status writer marks a victim pod
DisruptionTarget and deletes it (that incarnation only), marks a victim
PodGroup next to its PodGroupScheduled condition, and PodDisruptionBudgets
reach the cache through the initial listing, kopf's watch and the resync.

There is no kubelet here: a bound pod deleted with its grace period stays
Terminating (deletionTimestamp set) until force-deleted; an unbound one goes
at once."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import kopf
import pytest
from kubernetes_asyncio import client
from objects import create, events_for, pod, podgroup
from wait import async_wait_for

from scheduler.api import constants as C
from scheduler.api.config import SchedulerConfiguration
from scheduler.api.parse import parse_pod
from scheduler.api.podgroup import parse_podgroup
from scheduler.core.scheduler import Scheduler
from scheduler.plugins import in_tree_registry
from scheduler.runtime.handlers import build_registry, operator_settings
from scheduler.runtime.initial_sync import prime
from scheduler.runtime.kube import RestClient, connection_info, load_configuration
from scheduler.runtime.ratelimit import TokenBucket
from scheduler.runtime.resync import Resync
from scheduler.runtime.status import StatusWriter

pytestmark = pytest.mark.integration

MESSAGE = "troupe-scheduler: preempting to accommodate a higher priority pod"


@pytest.fixture
async def as_scheduler(installed) -> AsyncIterator[tuple[client.ApiClient, StatusWriter]]:
    """An ApiClient and a StatusWriter with the ServiceAccount's token, as `troupe run` builds them."""
    cfg = await load_configuration(str(installed.scheduler_kubeconfig))
    api = client.ApiClient(cfg)
    rest = RestClient(api)
    writer = StatusWriter(rest, TokenBucket(100, 100))
    yield api, writer
    await writer.close()
    await rest.close()
    await api.close()


def get(cluster, kind: str, ns: str, name: str) -> dict[str, Any] | None:
    res = cluster.kubectl("get", kind, "-n", ns, name, "-o", "json", check=False)
    return json.loads(res.stdout) if res.returncode == 0 else None


def disruption_target(obj: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == C.DISRUPTION_TARGET), None)


async def test_a_victim_pod_is_marked_then_deleted_and_only_that_incarnation(
    installed, namespace, nodes, as_scheduler, caplog
):
    _, writer = as_scheduler
    caplog.set_level(logging.WARNING)
    nodes("io-n1", cpu="4")
    create(installed, pod(namespace, "bound", node_name="io-n1"), pod(namespace, "pending"))
    bound = parse_pod(get(installed, "pod", namespace, "bound"))
    pending = parse_pod(get(installed, "pod", namespace, "pending"))

    writer.preempt_pod(bound, MESSAGE)
    writer.preempt_pod(pending, MESSAGE)
    await writer.flush()

    # The bound victim: condition written first, then deleted with its grace period.
    body = await async_wait_for(
        lambda: (b := get(installed, "pod", namespace, "bound")) and b["metadata"].get("deletionTimestamp") and b,
        timeout=10,
        message="the bound victim is Terminating",
    )
    cond = disruption_target(body)
    assert cond is not None
    assert (cond["status"], cond["reason"], cond["message"]) == ("True", "PreemptionByScheduler", MESSAGE)
    assert body["metadata"]["deletionGracePeriodSeconds"] == 30  # its own (the default), none imposed
    # The unbound one is gone at once.
    await async_wait_for(lambda: get(installed, "pod", namespace, "pending") is None, timeout=10)
    preempted = await async_wait_for(
        lambda: [e for e in events_for(installed, namespace, "bound") if e["reason"] == "Preempted"], timeout=10
    )
    assert preempted[0]["note"] == MESSAGE and preempted[0]["type"] == "Normal"

    # A pod of the same name but another uid is not the victim: neither marked nor deleted.
    installed.kubectl("delete", "pod", "-n", namespace, "bound", "--grace-period=0", "--force")
    await async_wait_for(lambda: get(installed, "pod", namespace, "bound") is None, timeout=10)
    create(installed, pod(namespace, "bound", node_name="io-n1"))
    writer.preempt_pod(bound, MESSAGE)  # the old PodInfo, the old uid
    await writer.flush()
    again = get(installed, "pod", namespace, "bound")
    assert again is not None and again["metadata"]["uid"] != bound.uid
    assert "deletionTimestamp" not in again["metadata"]
    assert disruption_target(again) is None
    # The API refused that patch (422, metadata.uid): taken as "victim gone", not as a failure.
    assert not [r for r in caplog.records if "status write failed" in r.getMessage()]


async def test_a_victim_podgroup_keeps_its_scheduled_condition(installed, namespace, as_scheduler):
    _, writer = as_scheduler
    create(installed, podgroup(namespace, "low", 2))
    stale = parse_podgroup(get(installed, "podgroup", namespace, "low"))
    # Written a moment apart, from the same (stale) cached group.
    writer.group_condition(stale, "True", C.REASON_SCHEDULED, "all bound")
    await writer.flush()
    writer.group_disrupted(stale, "preempted by PodGroup x/high")
    await writer.flush()

    pg = get(installed, "podgroup", namespace, "low")
    conds = {c["type"]: c for c in pg["status"]["conditions"]}
    assert (conds[C.POD_GROUP_SCHEDULED]["status"], conds[C.POD_GROUP_SCHEDULED]["reason"]) == ("True", "Scheduled")
    d = conds[C.DISRUPTION_TARGET]
    assert (d["status"], d["reason"], d["message"]) == ("True", "PreemptionByScheduler", "preempted by PodGroup x/high")
    preempted = await async_wait_for(
        lambda: [e for e in events_for(installed, namespace, "low") if e["reason"] == "Preempted"], timeout=10
    )
    assert preempted[0]["regarding"]["kind"] == "PodGroup"


def pdb(ns: str, name: str, selector: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"minAvailable": 1, "selector": selector},
    }


async def test_pdbs_reach_the_cache_by_listing_watch_and_resync(installed, namespace, as_scheduler, caplog):
    api, _ = as_scheduler
    caplog.set_level(logging.WARNING)
    create(installed, pdb(namespace, "listed", {"matchLabels": {"app": "web"}}))
    sched = Scheduler(SchedulerConfiguration(), in_tree_registry())

    # The initial listing, with the ServiceAccount's RBAC.
    await prime(sched, api, {})
    listed = sched.cache.pdbs[(namespace, "listed")]
    web = pod(namespace, "web")
    web["metadata"].update(uid="u", labels={"app": "web"})
    assert listed.selects(parse_pod(web))
    assert listed.disruptions_allowed == 0  # no disruption controller here: no status

    # kopf's watch: create, status update, delete.
    stop = asyncio.Event()
    operator = asyncio.create_task(
        kopf.operator(
            registry=build_registry(sched, lambda: connection_info(api.configuration)),
            settings=operator_settings(sched.config.watch),
            clusterwide=True,
            standalone=True,
            stop_flag=stop,
        )
    )
    try:
        create(installed, pdb(namespace, "watched", {}))
        await async_wait_for(lambda: (namespace, "watched") in sched.cache.pdbs, timeout=15, message="PDB created")
        installed.kubectl(
            "patch",
            "pdb",
            "-n",
            namespace,
            "watched",
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps(
                {"status": {"disruptionsAllowed": 2, "currentHealthy": 3, "desiredHealthy": 1, "expectedPods": 3}}
            ),
        )
        await async_wait_for(
            lambda: sched.cache.pdbs[(namespace, "watched")].disruptions_allowed == 2, timeout=15, message="PDB status"
        )
        installed.kubectl("delete", "pdb", "-n", namespace, "watched")
        await async_wait_for(lambda: (namespace, "watched") not in sched.cache.pdbs, timeout=15, message="PDB deleted")
    finally:
        stop.set()
        await asyncio.wait_for(operator, timeout=15)

    # Deleted while nothing watched: the resync drops it.
    installed.kubectl("delete", "pdb", "-n", namespace, "listed")
    r = Resync(sched, api, TokenBucket(100, 100), interval=3600, kinds=("pdb",))
    assert await r.resync("pdb") == 1
    assert (namespace, "listed") not in sched.cache.pdbs
    assert not [r for r in caplog.records if "cannot handle" in r.getMessage() or "Forbidden" in r.getMessage()]
