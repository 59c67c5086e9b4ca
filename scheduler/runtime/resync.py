"""Periodic resync: drop from the cache what the API server no longer has.

kopf lists again when a watch expires (410 Gone) but reports only what the new
listing holds, never what was deleted in the gap; client-go's reflector
handles that with Replace. Without it a PodGroup deleted in such a gap would
stay in the cache for ever, its pods scheduled against it (and a deleted
PodDisruptionBudget would go on protecting pods from preemption). So every
`interval` seconds each kopf-watched kind is listed (metadata only, paged) and
compared with the cache. Pods and Nodes come through Informers, which Replace
on every relist themselves; `resync("pod")` still works for them.

An object is dropped only if the cache held the very same object before the
list was requested and the answer does not have it. The list is a quorum
read, at least as new as the request, so such an object was deleted; anything
the watch added or changed meanwhile is left alone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable, Mapping
from typing import Any, cast

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from ..api import constants as C
from ..api.composite import COMPOSITE_PLURAL
from ..api.records import GroupKey, PodInfo
from ..core import metrics
from ..core.scheduler import Scheduler
from . import outage
from .kube import list_paged
from .ratelimit import TokenBucket

log = logging.getLogger(__name__)

METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
PAGE = 500
FIRST_PASS_SECONDS = 60.0

# kind -> (list path, key of an item's metadata as the cache keys it)
KINDS: dict[str, tuple[str, Callable[[Mapping[str, Any]], Hashable]]] = {
    "pod": ("/api/v1/pods", lambda m: m.get("uid", "")),
    "node": ("/api/v1/nodes", lambda m: m.get("name", "")),
    # troupe's own kinds; the native ones have Informers of their own (runtime/sources.py)
    "podgroup": (
        f"/apis/{C.GROUP}/{C.VERSION}/{C.PODGROUP_PLURAL}",
        lambda m: GroupKey(m.get("namespace", ""), m.get("name", ""), C.GROUP),
    ),
    "workload": (
        f"/apis/{C.GROUP}/{C.VERSION}/{C.WORKLOAD_PLURAL}",
        lambda m: GroupKey(m.get("namespace", ""), m.get("name", ""), C.GROUP),
    ),
    "compositepodgroup": (
        f"/apis/{C.GROUP}/{C.VERSION}/{COMPOSITE_PLURAL}",
        lambda m: GroupKey(m.get("namespace", ""), m.get("name", ""), C.GROUP),
    ),
    "pdb": ("/apis/policy/v1/poddisruptionbudgets", lambda m: (m.get("namespace", ""), m.get("name", ""))),
}


def cached_objects(scheduler: Scheduler, kind: str) -> dict[Hashable, object]:
    """The cache's objects of a kind, by the key KINDS gives their metadata."""
    cache = scheduler.cache
    if kind == "pod":
        pods: dict[Hashable, object] = {uid: pod for uid, pod in cache.pods.items()}
        return pods
    if kind == "node":
        table = cache.table
        nodes: dict[Hashable, object] = {}
        for name, row in table.row.items():
            if table.nodes[row] is not None:
                nodes[name] = table.nodes[row]
        return nodes
    if kind == "podgroup":
        return cached_groups(scheduler, C.GROUP)
    if kind == "pdb":
        return dict(cache.pdbs)
    if kind == "workload":
        return {k: w for k, w in cache.workloads.items() if k.source == C.GROUP}
    if kind == "compositepodgroup":
        return {k: c for k, c in cache.composites.items() if k.source == C.GROUP}
    raise KeyError(kind)


def cached_groups(scheduler: Scheduler, source: str) -> dict[Hashable, object]:
    """The cache's PodGroups of one source (GroupKey.source)."""
    return {k: g for k, g in scheduler.cache.groups.items() if k.source == source}


def stale(before: dict[Hashable, object], listed: set[Hashable], now: dict[Hashable, object]) -> list[Hashable]:
    """Keys cached before the list, absent from it, and not touched by the watch since."""
    return [key for key, obj in before.items() if key not in listed and now.get(key) is obj]


class Resync:
    def __init__(
        self,
        scheduler: Scheduler,
        api_client: client.ApiClient,
        bucket: TokenBucket,
        interval: float,
        kinds: tuple[str, ...] = tuple(KINDS),
    ) -> None:
        """`kinds`: those `run()` passes over (all of KINDS by default)."""
        self._scheduler = scheduler
        self.kinds = kinds
        self._api = api_client
        self._bucket = bucket
        self.interval = interval

    async def run(self) -> None:
        await self._scheduler.synced.wait()
        # The first pass comes early: it catches what was deleted between the
        # initial listing and kopf's (see initial_sync.py).
        await asyncio.sleep(min(self.interval, FIRST_PASS_SECONDS))
        while True:
            for kind in self.kinds:
                try:
                    await self.resync(kind)
                    outage.RESYNC.succeeded()
                except (TimeoutError, ApiException, aiohttp.ClientError, OSError, ValueError) as exc:
                    if outage.is_outage(exc):
                        outage.RESYNC.failed(f"resync of {kind}s: {outage.describe(exc)}")
                    else:
                        log.warning("resync of %ss failed (retrying in %.0fs): %s", kind, self.interval, exc)
            await asyncio.sleep(self.interval)

    async def resync(self, kind: str) -> int:
        """Compare one kind with the API; returns how many objects were dropped."""
        before = cached_objects(self._scheduler, kind)
        listed = await self._list_keys(kind)
        if listed is None:
            return 0
        dropped = stale(before, listed, cached_objects(self._scheduler, kind))
        for key in dropped:
            obj = before[key]
            log.warning(
                "resync: %s %s is gone from the API but was still cached (a missed deletion); dropping it", kind, key
            )
            self._forget(kind, key, obj)
        if dropped:
            metrics.RESYNC_DROPPED.labels(kind=kind).inc(len(dropped))
        return len(dropped)

    def _forget(self, kind: str, key: Hashable, obj: object) -> None:
        s = self._scheduler
        if kind == "pod":
            pod = cast(PodInfo, obj)
            s.forget_object("pod", pod.namespace, pod.name, pod.uid)
        elif kind == "node":
            s.forget_object("node", "", str(key))
        elif isinstance(key, GroupKey):
            s.forget_object(kind, key.namespace, key.name, source=key.source)
        else:
            ns, name = cast(tuple[str, str], key)
            s.forget_object(kind, ns, name)

    async def _list_keys(self, kind: str) -> set[Hashable] | None:
        path, key_of = KINDS[kind]
        keys: set[Hashable] = set()
        await self._bucket.acquire()
        try:
            async for item in list_paged(self._api, path, accept=METADATA_LIST, limit=PAGE):
                keys.add(key_of(item.get("metadata") or {}))
        except ApiException as exc:
            if exc.status in (404, 410):  # kind not served (no CRD: nothing cached either), or the list expired
                return None
            raise
        return keys
