"""The initial listing: every watched kind listed once, before any watch starts.

When `prime()` returns, the cache holds every node and every pod (so node
usage is complete) and every PodGroup, Workload, Namespace, PriorityClass and
PodDisruptionBudget: the "caches synced" moment after which the scheduling
loop may start. Pods, Nodes and PodGroups are listed by their Informers, which then
watch from the listing's resourceVersion. kopf lists the other kinds again and
watches them; its listing replays the same objects, which the handlers take as
idempotent upserts. An object of those kinds deleted between the two listings has no
DELETED event: the periodic resync drops it.

The order is that of `handlers.watched`: nodes first, pods last.
"""

from __future__ import annotations

import logging
import time

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from ..core.scheduler import Scheduler
from .handlers import DEVICE_TAINT_RULES, Resource, list_path, watched
from .informer import Informer
from .kube import list_paged

log = logging.getLogger(__name__)

# What a kind not served means, where it is not a missing CRD of troupe's.
NOT_SERVED = {
    DEVICE_TAINT_RULES: "Kubernetes before 1.37: no DeviceTaintRules, only the taints slices carry apply",
}


async def prime(scheduler: Scheduler, api: client.ApiClient, informers: dict[Resource, Informer]) -> dict[str, int]:
    """Fill the cache from one LIST per kind; returns the count per kind."""
    counts: dict[str, int] = {}
    start = time.monotonic()
    for resource, upsert, _ in watched(scheduler):
        path = list_path(resource)
        n = 0
        try:
            if resource in informers:
                n = await informers[resource].relist()
            else:
                async for item in list_paged(api, path):
                    try:
                        upsert(item)
                    except Exception:  # as in the handlers: one odd object must not stop the rest
                        log.exception("cannot handle %s %s", path, (item.get("metadata") or {}).get("name"))
                    n += 1
        except ApiException as exc:
            if exc.status != 404:
                raise
            advice = NOT_SERVED.get(resource, "is the CRD installed? kubectl apply -f crds/")
            log.warning("%s is not served (%s); nothing of it is cached", path, advice)
        counts[resource[-1]] = n
    log.info(
        "initial listing in %.1fs: %s", time.monotonic() - start, ", ".join(f"{n} {kind}" for kind, n in counts.items())
    )
    return counts
