"""The initial listing: every watched kind listed once, before kopf starts.

When `prime()` returns, the cache holds every node and every pod (so node
usage is complete) and every PodGroup, Workload, Namespace and PriorityClass:
the "caches synced" moment after which the scheduling loop may start. kopf
then lists again and watches; its listing replays the same objects, which the
handlers take as idempotent upserts. An object deleted between the two
listings has no DELETED event: the periodic resync drops it.

Nodes come first and pods last, as their order in `handlers.watched`, so the
room pods take is on nodes the cache already has, and a pod's PodGroup is
known when the pod arrives.
"""

from __future__ import annotations

import logging
import time

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from .handlers import watched
from .kube import list_paged
from .scheduler import Scheduler

log = logging.getLogger(__name__)


def list_path(resource: tuple[str, ...]) -> str:
    *group_version, plural = resource
    if group_version == ["v1"]:
        return f"/api/v1/{plural}"
    return "/apis/" + "/".join(group_version) + f"/{plural}"


async def prime(scheduler: Scheduler, api: client.ApiClient) -> dict[str, int]:
    """Fill the cache from one LIST per kind; returns the count per kind."""
    counts: dict[str, int] = {}
    start = time.monotonic()
    for resource, upsert, _ in watched(scheduler):
        path = list_path(resource)
        n = 0
        try:
            async for item in list_paged(api, path):
                try:
                    upsert(item)
                except Exception:  # as in the kopf handlers: one odd object must not stop the rest
                    log.exception("cannot handle %s %s", path, (item.get("metadata") or {}).get("name"))
                n += 1
        except ApiException as exc:
            if exc.status != 404:
                raise
            log.warning("%s is not served (is the CRD installed? kubectl apply -f crds/); nothing of it is cached", path)
        counts[resource[-1]] = n
    log.info(
        "initial listing in %.1fs: %s", time.monotonic() - start, ", ".join(f"{n} {kind}" for kind, n in counts.items())
    )
    return counts
