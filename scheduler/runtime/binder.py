"""Binding through the pods/binding subresource, with bounded concurrency and a client-side rate limit."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException

from ..api.records import PodInfo
from ..core.metrics import BIND_DURATION
from ..core.outputs import BindResults
from ..core.schedule_podgroup import Assignment
from ..framework.framework import Framework
from . import failpoints, outage
from .kube import NotLeading, RestClient, encode
from .ratelimit import TokenBucket

# One bind the workers take: the pod, its node, whom to tell, the Binding's annotations.
_Bind = tuple[PodInfo, str, BindResults, Mapping[str, str] | None]

log = logging.getLogger(__name__)

MAX_RETRIES_429 = 5
# An answer that never comes (a half-open connection) must not hold a bind slot
# and an assumed pod for ever: after this the bind fails and the pod is requeued.
REQUEST_TIMEOUT_SECONDS = 30.0
# A bind that fails because the API server or etcd is away is retried for this
# long (backoff doubling from 0.5 s to 5 s) before it fails for good: an API
# server restart or a short etcd outage costs no requeue.
BIND_RETRY_SECONDS = 60.0
BIND_BACKOFF_INITIAL, BIND_BACKOFF_MAX = 0.5, 5.0


class Binder:
    """The core's `Binder`: PreBind, then POST pods/{name}/binding, each pod
    reported back through `BindResults` exactly once.

    `concurrency` workers take binds from one FIFO queue (as the raw loop
    does), rather than a task per pod behind a semaphore: a gang of 5000
    would otherwise create 5000 tasks at once, and task creation was 4 % of
    troupe's CPU in shape c (py-spy)."""

    def __init__(self, rest: RestClient, bucket: TokenBucket, concurrency: int) -> None:
        self._rest = rest
        self._bucket = bucket
        self._concurrency = concurrency
        self._queue: asyncio.Queue[_Bind] | None = None
        self._workers: list[asyncio.Task[None]] = []
        self._active = 0  # binds taken by a worker and not finished
        self._tasks: set[asyncio.Task[None]] = set()  # decisions whose PreBinds run
        self._last_done = -1e9

    @property
    def in_flight(self) -> int:
        queued = self._queue.qsize() if self._queue is not None else 0
        return queued + self._active + len(self._tasks)

    def binding(self, within: float) -> bool:
        """A bind is in flight, or one finished less than `within` seconds ago
        (Events wait for binds: runtime/events.py)."""
        return bool(self.in_flight) or time.monotonic() - self._last_done < within

    def bind(
        self,
        fwk: Framework,
        assignments: Sequence[Assignment],
        results: BindResults,
        at_least: int = 0,
        annotations: Mapping[str, str] | None = None,
    ) -> None:
        """Bind the decision's pods; `annotations` go on each Binding, and the
        API server merges them into the pod as it binds it (no extra write)."""
        failpoints.hit("cycle-decided")
        if not any(fwk.needs_pre_bind(a.state) for a in assignments):
            for a in assignments:
                self.submit(a.pod, a.node, results, annotations)
            return
        self._spawn(self._pre_bind_then_bind(fwk, assignments, results, at_least, annotations), "pre-bind")

    async def _pre_bind_then_bind(
        self,
        fwk: Framework,
        assignments: Sequence[Assignment],
        results: BindResults,
        at_least: int,
        annotations: Mapping[str, str] | None,
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
            self.submit(a.pod, a.node, results, annotations)

    def submit(
        self, pod: PodInfo, node: str, results: BindResults, annotations: Mapping[str, str] | None = None
    ) -> None:
        """Bind one pod (no PreBind)."""
        if self._queue is None:  # the workers start with the first bind, inside the running loop
            self._queue = asyncio.Queue()
            self._workers = [
                asyncio.create_task(self._work(self._queue), name=f"binder {i}") for i in range(self._concurrency)
            ]
        self._queue.put_nowait((pod, node, results, annotations))

    async def _work(self, queue: asyncio.Queue[_Bind]) -> None:
        while True:
            pod, node, results, annotations = await queue.get()
            self._active += 1
            try:
                await self._bind(pod, node, results, annotations)
            except Exception as exc:  # a bug must not leave the pod assumed for ever, nor stop the worker
                log.exception("bind %s: unexpected error", pod.key)
                results.on_bind_failed(pod, node, f"Binding failed: {type(exc).__name__}: {exc}")
            finally:
                self._active -= 1
                self._last_done = time.monotonic()
                queue.task_done()

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._last_done = time.monotonic()

    async def _bind(
        self, pod: PodInfo, node: str, results: BindResults, annotations: Mapping[str, str] | None = None
    ) -> None:
        """POST the binding. A failure that says the API server (or etcd) is
        away is retried here with backoff for up to BIND_RETRY_SECONDS, the
        pod staying assumed: an outage costs no requeue, no Event and no log
        line per pod (outage.BINDS logs one for all). After that the bind
        fails as any other (the pod is unreserved and requeued)."""
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/binding"
        metadata: dict[str, Any] = {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid}
        if annotations:
            metadata["annotations"] = dict(annotations)
        body = encode(
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": metadata,
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            }
        )
        loop = asyncio.get_running_loop()
        give_up = loop.time() + BIND_RETRY_SECONDS
        delay = BIND_BACKOFF_INITIAL
        throttled = 0
        started: float | None = None
        try:
            while True:
                await self._bucket.acquire(first=True)
                if started is None:
                    started = loop.time()
                failpoints.hit("bind-start")
                try:
                    if failpoints.every("bind-500"):
                        raise ApiException(status=500, reason="Internal Server Error (failpoint bind-500)")
                    timeout = min(REQUEST_TIMEOUT_SECONDS, max(give_up - loop.time(), 1.0))
                    await self._rest.post(path, body, timeout=timeout)
                    if failpoints.every("bind-lost"):
                        raise ApiException(status=500, reason="Internal Server Error (failpoint bind-lost)")
                except ApiException as exc:
                    if not outage.is_outage(exc):
                        outage.BINDS.succeeded()  # it answered
                        if exc.status == 429 and throttled < MAX_RETRIES_429:
                            throttled += 1
                            wait = retry_after(exc)
                            log.info("bind %s: throttled by the server, retrying in %.1fs", pod.key, wait)
                            self._bucket.pause(wait)
                            continue
                        if exc.status != 409:
                            self._refused(pod, node, exc, results)
                            return
                        unread = await self._conflict(pod, node, exc, results)
                        if unread is None:
                            return
                        failure: BaseException = unread  # the pod could not be read: bind again, read again
                    else:
                        failure = exc
                except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                    failure = exc
                except NotLeading:
                    # The lease is lost and the process exits to restart clean; the
                    # pod stays assumed until then, and the next leader lists it.
                    log.debug("bind %s dropped: not leading", pod.key)
                    return
                else:
                    outage.BINDS.succeeded()
                    failpoints.hit("bind-done")
                    results.on_bound(pod, node)
                    return
                outage.BINDS.failed(failure)
                if loop.time() + delay > give_up:
                    results.on_bind_failed(
                        pod,
                        node,
                        f"Binding failed: {outage.describe(failure)} (retried for {BIND_RETRY_SECONDS:.0f}s)",
                    )
                    return
                await asyncio.sleep(delay)
                delay = min(delay * 2, BIND_BACKOFF_MAX)
        finally:
            if started is not None:
                BIND_DURATION.observe(loop.time() - started)

    def _refused(self, pod: PodInfo, node: str, exc: ApiException, results: BindResults) -> None:
        """The server answered the bind with an error that is neither an outage's nor a conflict."""
        if exc.status == 429:
            results.on_bind_failed(pod, node, "Binding failed: the API server kept answering 429 Too Many Requests")
        elif exc.status == 404:
            log.info("bind %s: the pod no longer exists (404)", pod.key)
            results.on_pod_gone(pod)
        else:
            results.on_bind_failed(pod, node, f"Binding rejected: {exc.status} {exc.reason}: {api_message(exc)}")

    async def _conflict(
        self, pod: PodInfo, node: str, exc: ApiException, results: BindResults
    ) -> ApiException | TimeoutError | aiohttp.ClientError | OSError | None:
        """A 409: the pod is already bound, or the name is another pod's now.
        Which one is read from the API (a quorum read), never assumed: bound
        to `node` is this bind's success (an earlier attempt landed, its
        answer lost), not a second placement; bound elsewhere is someone
        else's placement, which the watch brings; not bound at all means the
        conflict was about something else (etcd away, see below): never left
        assumed for a binding that does not exist. Returns an error for the
        caller to retry the bind (pod not bound, or not readable for an
        outage), else None (reported)."""
        try:
            data = await self._rest.request(
                "GET", f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}", b"", timeout=REQUEST_TIMEOUT_SECONDS
            )
        except ApiException as read_exc:
            if read_exc.status == 404:
                results.on_pod_gone(pod)
                return None
            if outage.is_outage(read_exc):
                return read_exc
            results.on_bind_failed(pod, node, f"Binding conflict ({api_message(exc)}) and the pod cannot be read")
            return None
        except (TimeoutError, aiohttp.ClientError, OSError) as read_exc:
            return read_exc
        current = json.loads(data)
        if str((current.get("metadata") or {}).get("uid") or "") != pod.uid:
            log.info("bind %s: 409, the pod was replaced by another of its name", pod.key)
            results.on_pod_gone(pod)
            return None
        bound_to = str((current.get("spec") or {}).get("nodeName") or "")
        if bound_to == node:
            log.info("bind %s: already bound to %s (409; an earlier attempt landed)", pod.key, node)
            results.on_bound(pod, node)
        elif bound_to:
            log.info("bind %s: already bound (409) to %s, not %s: the watch brings it", pod.key, bound_to, node)
            results.on_bound_elsewhere(pod, node, bound_to)
        else:
            # Not a binding: kube-apiserver wraps etcd errors of the binding's
            # update in a 409 ("... rpc error: code = Unavailable"), so this is
            # retried like the outage it usually is.
            log.debug("bind %s: 409 and the pod is not bound (%s); retrying", pod.key, api_message(exc))
            return exc
        return None


def retry_after(exc: ApiException) -> float:
    """Seconds a 429 answer asks us to wait (Retry-After, 1 s if absent)."""
    try:
        headers: Mapping[str, str] = exc.headers or {}
        return max(float(headers.get("Retry-After", 1)), 0.1)
    except ValueError:
        return 1.0


def api_message(exc: ApiException) -> str:
    """The message of the Status the API server answered with (else the raw body)."""
    try:
        return str(json.loads(exc.body or b"").get("message", exc.body))
    except (TypeError, ValueError, AttributeError):
        return str(exc.body)
