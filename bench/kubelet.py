"""Stand-ins for what a cluster does around a scheduler, on a real API
server without nodes: `FakeKubelet` starts bound pods and ends them when
their runtime is over, and `PodStream` submits short pods at a steady rate.
Used by the starvation benchmark (bench/starvation.py) and its integration
test (tests/integration/test_reservation.py).

A pod's runtime is its annotation `bench.troupe.dev/runtime-seconds`, else
its `activeDeadlineSeconds` (the kubelet ends it then), else forever. A pod
that starts gets `phase: Running` and `startTime` (what a scheduler reads to
know when an `activeDeadlineSeconds` ends); one that ends is deleted at once,
as a Job's finished pod is cleaned up.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .e2e_kube import ApiError, Kube

RUNTIME_ANNOTATION = "bench.troupe.dev/runtime-seconds"
MERGE_PATCH = "application/merge-patch+json"


def cpu_millis(pod: dict[str, Any]) -> int:
    total = 0
    for c in pod["spec"].get("containers") or []:
        value = str(((c.get("resources") or {}).get("requests") or {}).get("cpu") or "0")
        total += int(value[:-1]) if value.endswith("m") else int(float(value) * 1000)
    return total


def runtime_of(pod: dict[str, Any]) -> float | None:
    value = (pod["metadata"].get("annotations") or {}).get(RUNTIME_ANNOTATION)
    if value is not None:
        return float(value)
    deadline = pod["spec"].get("activeDeadlineSeconds")
    return float(deadline) if deadline else None


@dataclass
class _Running:
    name: str
    node: str
    started: float  # monotonic
    runtime: float | None
    cpu: int


@dataclass
class FakeKubelet:
    """Every node's kubelet for the pods of `namespace`, polling every `poll` s."""

    kube: Kube
    namespace: str
    poll: float = 0.2
    running: dict[str, _Running] = field(default_factory=dict)
    bound_at: dict[str, float] = field(default_factory=dict)  # pod name -> when it was first seen bound
    ended: int = 0
    busy_cpu_seconds: float = 0.0  # running pods' CPU requests integrated over time (cores x s)
    peak_cpu_by_node: dict[str, int] = field(default_factory=dict)  # the most CPU ever running at once, per node
    paused: bool = False  # while set, no pod ends (a test holds the cluster still); overdue pods end on resume

    async def run(self, stop: asyncio.Event) -> None:
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        last = time.monotonic()
        while not stop.is_set():
            items, _ = await self.kube.list_all(path)
            now = time.monotonic()
            self.busy_cpu_seconds += sum(r.cpu for r in self.running.values()) / 1000 * (now - last)
            last = now
            seen = set()
            for pod in items:
                meta, spec = pod["metadata"], pod["spec"]
                uid, node = meta["uid"], spec.get("nodeName")
                seen.add(uid)
                if not node or meta.get("deletionTimestamp"):
                    continue
                self.bound_at.setdefault(meta["name"], now)
                if uid not in self.running:
                    self.running[uid] = _Running(meta["name"], node, now, runtime_of(pod), cpu_millis(pod))
                    await self._start(meta["name"])
            for uid in [u for u in self.running if u not in seen]:
                del self.running[uid]  # deleted by someone else
            by_node: dict[str, int] = {}
            for r in self.running.values():
                by_node[r.node] = by_node.get(r.node, 0) + r.cpu
            for node, cpu in by_node.items():
                self.peak_cpu_by_node[node] = max(self.peak_cpu_by_node.get(node, 0), cpu)
            done = [
                u
                for u, r in self.running.items()
                if not self.paused and r.runtime is not None and now - r.started >= r.runtime
            ]
            await asyncio.gather(*(self._end(self.running.pop(u).name) for u in done))
            self.ended += len(done)
            try:
                await asyncio.wait_for(stop.wait(), self.poll)
            except TimeoutError:
                pass

    async def _start(self, name: str) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {"status": {"phase": "Running", "startTime": now}}
        path = f"/api/v1/namespaces/{self.namespace}/pods/{name}/status"
        try:
            await self.kube.request("PATCH", path, body, content_type=MERGE_PATCH, decode=False)
        except ApiError as exc:
            if exc.status != 404:
                raise

    async def _end(self, name: str) -> None:
        path = f"/api/v1/namespaces/{self.namespace}/pods/{name}"
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
        await self.kube.request("DELETE", path, body, ok=(404,), decode=False)


def pod_body(
    namespace: str,
    name: str,
    cpu: str,
    runtime: float,
    scheduler: str,
    group: tuple[str, str] | None = None,
    priority_class: str | None = None,
    deadline: int | None = None,
) -> dict[str, Any]:
    """A pod that runs `runtime` seconds; `group`: (label key, group name)."""
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": cpu}}}],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "annotations": {RUNTIME_ANNOTATION: str(runtime)}}
    if group is not None:
        meta["labels"] = {group[0]: group[1]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


@dataclass
class PodStream:
    """Short pods at `rate` per second (named `<prefix>-<n>`), until stopped."""

    kube: Kube
    namespace: str
    rate: float
    cpu: str
    runtime: float
    scheduler: str
    prefix: str = "s"
    deadline: int | None = None  # activeDeadlineSeconds for each, if any
    created: int = 0

    async def run(self, stop: asyncio.Event) -> None:
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        interval = 1.0 / self.rate
        next_at = time.monotonic()
        while not stop.is_set():
            body = pod_body(
                self.namespace,
                f"{self.prefix}-{self.created}",
                self.cpu,
                self.runtime,
                self.scheduler,
                deadline=self.deadline,
            )
            await self.kube.request("POST", path, body, decode=False)
            self.created += 1
            next_at += interval
            try:
                await asyncio.wait_for(stop.wait(), max(next_at - time.monotonic(), 0))
            except TimeoutError:
                pass
