"""Binding through the pods/binding subresource, with bounded concurrency and a client-side rate limit."""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException

from ..api.objects import PodInfo
from . import failpoints
from .kube import RestClient, encode
from .ratelimit import TokenBucket

log = logging.getLogger(__name__)

MAX_RETRIES_429 = 5
# An answer that never comes (a half-open connection) must not hold a bind slot
# and an assumed pod for ever: after this the bind fails and the pod is requeued.
REQUEST_TIMEOUT_SECONDS = 30.0


class Binder:
    def __init__(
        self,
        rest: RestClient,
        bucket: TokenBucket,
        concurrency: int,
        on_bound: Callable[[PodInfo, str], None],
        on_failed: Callable[[PodInfo, str, str], None],
        on_gone: Callable[[PodInfo], None] | None = None,
    ) -> None:
        """`on_gone`: the pod no longer exists (404), e.g. deleted while a
        missed watch event still kept it in the cache; without it a 404 is a
        failure like any other."""
        self._rest = rest
        self._bucket = bucket
        self._sem = asyncio.Semaphore(concurrency)
        self._on_bound = on_bound
        self._on_failed = on_failed
        self._on_gone = on_gone
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    def submit(self, pod: PodInfo, node: str) -> None:
        task = asyncio.create_task(self._bind(pod, node), name=f"bind {pod.key}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _bind(self, pod: PodInfo, node: str) -> None:
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/binding"
        body = encode({
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        })
        async with self._sem:
            for _ in range(MAX_RETRIES_429 + 1):
                await self._bucket.acquire()
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
                    if exc.status == 404 and self._on_gone is not None:
                        log.info("bind %s: the pod no longer exists (404)", pod.key)
                        self._on_gone(pod)
                        return
                    self._on_failed(pod, node, f"Binding rejected: {exc.status} {exc.reason}: {_message(exc)}")
                    return
                except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                    self._on_failed(pod, node, f"Binding failed: {type(exc).__name__}: {exc}")
                    return
                failpoints.hit("bind-done")
                self._on_bound(pod, node)
                return
            self._on_failed(pod, node, "Binding failed: the API server kept answering 429 Too Many Requests")


def retry_after(exc: ApiException) -> float:
    """Seconds a 429 answer asks us to wait (Retry-After, 1 s if absent)."""
    try:
        return max(float((exc.headers or {}).get("Retry-After", 1)), 0.1)
    except ValueError:
        return 1.0


def _message(exc: ApiException) -> str:
    import json

    try:
        return str(json.loads(exc.body).get("message", exc.body))
    except (TypeError, ValueError):
        return str(exc.body)
