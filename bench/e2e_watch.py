"""The bind watcher: one pods watch on the run's namespace, opened before the
first pod is created, that stamps each pod with the client's monotonic clock
when an event first shows ``spec.nodeName`` set. The stamp is taken when the
chunk that carried the event arrived, before it is parsed.

Only events whose line contains ``"nodeName":"`` are parsed at all (in a pod
that string occurs only as spec.nodeName; managedFields spell it
``"f:nodeName"``), so watching 50 000 pods costs the benchmark process little.
The watch resumes from the last resourceVersion it saw; on 410 Gone it
re-lists and stamps any bound pod it had missed with the re-list's time.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time

import aiohttp

from .e2e_kube import Kube
from .e2e_workload import Shape, parse_pod_name

_RV = re.compile(rb'"resourceVersion":"(\d+)"')
_NODE = b'"nodeName":"'


class BindWatcher:
    def __init__(self, kube: Kube, ns: str, shape: Shape) -> None:
        self.kube = kube
        self.ns = ns
        self.shape = shape
        self.bound_at: list[float] = [math.nan] * shape.pods
        self.node_of: list[str | None] = [None] * shape.pods  # where each pod was bound
        self.bound = 0
        self.group_bound = [0] * shape.gangs
        self.group_done_at: list[float] = [math.nan] * shape.gangs
        self.nodes: dict[str, int] = {}  # node -> pods bound there (to check spreading / capacity)
        self.relists = 0
        self.events = 0
        self._rv = ""
        self._task: asyncio.Task[None] | None = None
        self.all_bound = asyncio.Event()
        self.error: BaseException | None = None

    @property
    def last_bound(self) -> float:
        return max((t for t in self.bound_at if t == t), default=math.nan)

    async def start(self) -> None:
        """List (to get a resourceVersion), then watch from it in the background."""
        await self._relist(stamp=time.monotonic())
        self._task = asyncio.create_task(self._run(), name=f"bind watcher {self.ns}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
            self._task = None

    def _mark(self, name: str, node: str, stamp: float) -> None:
        parsed = parse_pod_name(name)
        if parsed is None:
            return
        g, i = parsed
        if g >= self.shape.gangs or i >= self.shape.size:
            return
        k = g * self.shape.size + i
        if self.bound_at[k] == self.bound_at[k]:  # already stamped
            return
        self.bound_at[k] = stamp
        self.node_of[k] = node
        self.bound += 1
        self.nodes[node] = self.nodes.get(node, 0) + 1
        self.group_bound[g] += 1
        if self.group_bound[g] == self.shape.size:
            self.group_done_at[g] = stamp
        if self.bound == self.shape.pods:
            self.all_bound.set()

    async def _relist(self, stamp: float) -> None:
        items, rv = await self.kube.list_all(f"/api/v1/namespaces/{self.ns}/pods")
        for pod in items:
            node = (pod.get("spec") or {}).get("nodeName")
            if node:
                self._mark(pod["metadata"]["name"], node, stamp)
        self._rv = rv

    def _line(self, line: bytes, stamp: float) -> bool:
        """Handle one watch event; False on 410 Gone (re-list needed)."""
        self.events += 1
        m = _RV.search(line)
        if _NODE in line or line.startswith(b'{"type":"ERROR"'):
            ev = json.loads(line)
            obj = ev.get("object") or {}
            if ev.get("type") == "ERROR":
                if obj.get("code") == 410:
                    return False
                raise RuntimeError(f"watch error: {obj}")
            if ev.get("type") in ("ADDED", "MODIFIED"):
                node = (obj.get("spec") or {}).get("nodeName")
                if node:
                    self._mark(obj["metadata"]["name"], node, stamp)
        if m:
            self._rv = m.group(1).decode()
        return True

    async def _run(self) -> None:
        path = f"{self.kube.creds.server}/api/v1/namespaces/{self.ns}/pods"
        while True:
            params = {
                "watch": "1",
                "allowWatchBookmarks": "true",
                "resourceVersion": self._rv,
                "timeoutSeconds": "3600",
            }
            gone = False
            try:
                async with self.kube.session.get(
                    path, params=params, timeout=aiohttp.ClientTimeout(total=None, sock_read=None)
                ) as resp:
                    if resp.status == 410:
                        gone = True
                    elif resp.status != 200:
                        raise RuntimeError(f"watch {path}: HTTP {resp.status}: {(await resp.text())[:300]}")
                    else:
                        buf = b""
                        async for chunk in resp.content.iter_any():
                            stamp = time.monotonic()
                            buf += chunk
                            *lines, buf = buf.split(b"\n")
                            for line in lines:
                                if line and not self._line(line, stamp):
                                    gone = True
                                    break
                            if gone:
                                break
            except asyncio.CancelledError:
                raise
            except (TimeoutError, aiohttp.ClientError) as exc:
                self.error = exc  # reconnect below
            except Exception as exc:  # noqa: BLE001 - surfaced by the runner
                self.error = exc
                raise
            if gone:
                self.relists += 1
                await self._relist(stamp=time.monotonic())
            else:
                await asyncio.sleep(0.1)


STATUS_POLL_SECONDS = 0.25


def scheduled_condition(group: dict, type_: str) -> bool:
    """Whether a PodGroup or CompositePodGroup shows condition `type_` True."""
    conditions = (group.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == type_ and c.get("status") == "True" for c in conditions if isinstance(c, dict))


async def wait_for_status(kube: Kube, paths: list[tuple[str, str, int]], deadline: float) -> float | None:
    """Polls each (list path, condition type, how many) until that many objects
    show the condition True; the monotonic time they all did (to within
    STATUS_POLL_SECONDS), or None at `deadline`. Called once every pod is
    bound, so the polls do not compete with the run."""
    while True:
        done = True
        for path, type_, want in paths:
            items, _ = await kube.list_all(path)
            if sum(1 for g in items if scheduled_condition(g, type_)) < want:
                done = False
                break
        now = time.monotonic()
        if done:
            return now
        if now >= deadline:
            return None
        await asyncio.sleep(STATUS_POLL_SECONDS)
