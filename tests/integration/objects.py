"""Builders and readers for the objects the integration tests create: Nodes,
PodGroups, pods, and what the scheduler wrote on them. Plain functions over a
`LocalCluster` (kubectl as the admin). The `nodes` fixture that builds on
them is in conftest.py."""

from __future__ import annotations

import json
from typing import Any

from wait import wait_for

GROUP_LABEL = "scheduling.troupe.dev/pod-group"


def node(
    name: str,
    cpu: str = "2",
    memory: str = "8Gi",
    pods: str = "110",
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": taints} if taints else {},
        "status": {
            "capacity": {"cpu": cpu, "memory": memory, "pods": pods},
            "allocatable": {"cpu": cpu, "memory": memory, "pods": pods},
        },
    }


def create(cluster, *objects: dict[str, Any]) -> None:
    cluster.kubectl("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))


def podgroup(ns: str, name: str, min_count: int | None = None) -> dict[str, Any]:
    policy = {"gang": {"minCount": min_count}} if min_count else {"basic": {}}
    return {
        "apiVersion": "scheduling.troupe.dev/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"schedulingPolicy": policy},
    }


def pod(
    ns: str,
    name: str,
    group: str | None = None,
    cpu: str = "1",
    scheduler: str = "troupe-scheduler",
    node_selector: dict[str, str] | None = None,
    tolerations: list[dict[str, str]] | None = None,
    node_name: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [
            {
                "name": "c",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": cpu, "memory": "100Mi"}},
            }
        ],
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    if tolerations:
        spec["tolerations"] = tolerations
    if node_name:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {GROUP_LABEL: group} if group else {}},
        "spec": spec,
    }


def pods_by_name(cluster, ns: str) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in cluster.get_json("pods", "-n", ns)["items"]}


def bound(cluster, ns: str, prefix: str = "") -> dict[str, str]:
    return {
        n: p["spec"]["nodeName"]
        for n, p in pods_by_name(cluster, ns).items()
        if n.startswith(prefix) and p["spec"].get("nodeName")
    }


def condition(cluster, ns: str, group: str) -> dict[str, Any] | None:
    pg = cluster.get_json("podgroup", "-n", ns, group)
    return next((c for c in pg.get("status", {}).get("conditions", []) if c["type"] == "PodGroupScheduled"), None)


def wait_condition(cluster, ns: str, group: str, status: str, reason: str, timeout: float = 30) -> dict[str, Any]:
    return wait_for(
        lambda: (c := condition(cluster, ns, group)) and c["status"] == status and c["reason"] == reason and c,
        timeout=timeout,
        message=f"PodGroup {group} condition {status}/{reason}",
    )


def pod_condition(cluster, ns: str, name: str) -> dict[str, Any] | None:
    p = cluster.get_json("pod", "-n", ns, name)
    return next((c for c in p.get("status", {}).get("conditions", []) if c["type"] == "PodScheduled"), None)


def wait_pod_unschedulable(
    cluster, ns: str, name: str, message: str | None = None, timeout: float = 30
) -> dict[str, Any]:
    """Waits for PodScheduled=False/Unschedulable (with exactly `message` if given:
    messages can change while a group fills up)."""

    def check():
        cond = pod_condition(cluster, ns, name)
        ok = cond and cond["status"] == "False" and cond.get("reason") == "Unschedulable"
        return ok and (message is None or cond["message"] == message) and cond

    return wait_for(check, timeout=timeout, message=f"pod {name} Unschedulable" + (f": {message}" if message else ""))


def wait_pod_waiting(cluster, ns: str, name: str, message: str | None = None, timeout: float = 30) -> dict[str, Any]:
    """Waits for a FailedScheduling Event that says `message` (any, if None) on a pod held
    before its cycle (a gang short of minCount, a missing group), and checks
    that the pod has no PodScheduled=False/Unschedulable condition: that is
    what autoscalers provision for. Returns the Event."""

    def check():
        return next(
            (
                e
                for e in events_for(cluster, ns, name)
                if e.get("reason") == "FailedScheduling" and message in (None, e["note"])
            ),
            None,
        )

    event = wait_for(check, timeout=timeout, message=f"pod {name} told why it waits: {message or '(any)'}")
    cond = pod_condition(cluster, ns, name)
    assert not (cond and cond.get("reason") == "Unschedulable"), cond
    return event


def events_for(cluster, ns: str, name: str) -> list[dict[str, Any]]:
    items = cluster.get_json("events.v1.events.k8s.io", "-n", ns)["items"]
    return [e for e in items if e.get("regarding", {}).get("name") == name]


def force_delete(cluster, ns: str, *names: str) -> None:
    cluster.kubectl("delete", "pods", "-n", ns, *names, "--grace-period=0", "--force")
