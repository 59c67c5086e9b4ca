"""Binding through the pods/binding subresource, with bounded concurrency and a client-side rate limit."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException

from ..api.records import PodInfo
from ..core.outputs import BindResults
from ..core.schedule_podgroup import Assignment
from ..framework.framework import Framework
from . import failpoints
from .kube import RestClient, encode
from .ratelimit import TokenBucket

log = logging.getLogger(__name__)

MAX_RETRIES_429 = 5
# An answer that never comes (a half-open connection) must not hold a bind slot
# and an assumed pod for ever: after this the bind fails and the pod is requeued.
REQUEST_TIMEOUT_SECONDS = 30.0


class Binder:
    """The core's `Binder`: PreBind, then POST pods/{name}/binding, each pod
    reported back through `BindResults` exactly once."""

    def __init__(self, rest: RestClient, bucket: TokenBucket, concurrency: int) -> None:
        self._rest = rest
        self._bucket = bucket
        self._sem = asyncio.Semaphore(concurrency)
        self._tasks: set[asyncio.Task[None]] = set()
        self._last_done = -1e9

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    def binding(self, within: float) -> bool:
        """A bind is in flight, or one finished less than `within` seconds ago
        (Events wait for binds: runtime/events.py)."""
        return bool(self._tasks) or time.monotonic() - self._last_done < within

    def bind(self, fwk: Framework, assignments: Sequence[Assignment], results: BindResults, at_least: int = 0) -> None:
        failpoints.hit("cycle-decided")
        if not any(fwk.needs_pre_bind(a.state) for a in assignments):
            for a in assignments:
                self.submit(a.pod, a.node, results)
            return
        self._spawn(self._pre_bind_then_bind(fwk, assignments, results, at_least), "pre-bind")

    async def _pre_bind_then_bind(
        self, fwk: Framework, assignments: Sequence[Assignment], results: BindResults, at_least: int
    ) -> None:
        """PreBind for every pod of the decision (concurrently), then the binds
        of those that passed: no pod is bound before every PreBind is done (DRA
        writes its claims there). A pod whose PreBind fails is reported as a
        failed bind (unreserved and requeued). The others bind, unless fewer
        than `at_least` passed: then a gang would be bound below minCount, so
        they fail too, and their Unreserve undoes what their PreBind wrote."""
        statuses = await asyncio.gather(
            *(fwk.run_pre_bind(a.state, a.pod, a.node) for a in assignments),
            return_exceptions=True,
        )
        passed: list[Assignment] = []
        first_failure = ""
        for a, status in zip(assignments, statuses):
            if isinstance(status, BaseException):  # a plugin's bug fails its pod, not the scheduler
                log.error("PreBind %s: %s: %s", a.pod.key, type(status).__name__, status)
                message = f"PreBind failed: {type(status).__name__}: {status}"
            elif status.ok:
                passed.append(a)
                continue
            else:
                where = f"{status.plugin}: " if status.plugin else ""
                message = f"PreBind {where}{status.message}"
            first_failure = first_failure or f"{a.pod.key}: {message}"
            results.on_bind_failed(a.pod, a.node, message)
        if len(passed) < at_least:
            why = (
                f"PreBind failed for {len(assignments) - len(passed)} pod(s) of the group, "
                f"{len(passed)} left, {at_least} needed to reach minCount ({first_failure})"
            )
            for a in passed:
                results.on_bind_failed(a.pod, a.node, why)
            return
        for a in passed:
            self.submit(a.pod, a.node, results)

    def submit(self, pod: PodInfo, node: str, results: BindResults) -> None:
        """Bind one pod (no PreBind)."""
        self._spawn(self._bind(pod, node, results), f"bind {pod.key}")

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._last_done = time.monotonic()

    async def drain(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _bind(self, pod: PodInfo, node: str, results: BindResults) -> None:
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/binding"
        body = encode(
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            }
        )
        async with self._sem:
            for _ in range(MAX_RETRIES_429 + 1):
                await self._bucket.acquire(first=True)
                failpoints.hit("bind-start")
                try:
                    await self._rest.post(path, body, timeout=REQUEST_TIMEOUT_SECONDS)
                except ApiException as exc:
                    if exc.status == 429:
                        wait = retry_after(exc)
                        log.info("bind %s: throttled by the server, retrying in %.1fs", pod.key, wait)
                        self._bucket.pause(wait)
                        continue
                    if exc.status == 409:
                        # Already bound (by an earlier attempt of ours or by someone
                        # else): the watch brings the node it is on.
                        log.info("bind %s: already bound (409)", pod.key)
                        return
                    if exc.status == 404:
                        log.info("bind %s: the pod no longer exists (404)", pod.key)
                        results.on_pod_gone(pod)
                        return
                    results.on_bind_failed(pod, node, f"Binding rejected: {exc.status} {exc.reason}: {_message(exc)}")
                    return
                except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                    results.on_bind_failed(pod, node, f"Binding failed: {type(exc).__name__}: {exc}")
                    return
                failpoints.hit("bind-done")
                results.on_bound(pod, node)
                return
            results.on_bind_failed(pod, node, "Binding failed: the API server kept answering 429 Too Many Requests")


def retry_after(exc: ApiException) -> float:
    """Seconds a 429 answer asks us to wait (Retry-After, 1 s if absent)."""
    try:
        headers: Mapping[str, str] = exc.headers or {}
        return max(float(headers.get("Retry-After", 1)), 0.1)
    except ValueError:
        return 1.0


def _message(exc: ApiException) -> str:
    import json

    try:
        return str(json.loads(exc.body or b"").get("message", exc.body))
    except (TypeError, ValueError, AttributeError):
        return str(exc.body)
