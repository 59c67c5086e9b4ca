"""kopf handlers: watch events in, cache and queue updates out. Nothing is written to watched objects.

Only `@kopf.index` and `@kopf.on.event` are used (PITFALLS.md: the other
handler kinds write annotations or finalizers). Upserts happen in the index
handlers, because kopf runs every index handler for the initial listing of
every watched kind *before* it runs any resource handler: so when the first
`on.event` handler runs, the cache holds the whole initial listing — the
"caches synced" moment, after which the scheduling loop may start. Index
handlers are not called for deletions; `on.event` handles those. The index
handlers return None, so kopf itself stores nothing.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import kopf

from ..api import constants as C
from .scheduler import Scheduler

log = logging.getLogger(__name__)

Body = Any


def build_registry(scheduler: Scheduler, connection: kopf.ConnectionInfo) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    async def login(**_: Any) -> kopf.ConnectionInfo:
        return connection

    def watch(resource: tuple[str, ...], upsert: Callable[[Body], None], delete: Callable[[Body], None]) -> None:
        what = "/".join(resource)

        async def index(body: Body, **_: Any) -> None:
            try:
                upsert(body)
            except Exception:  # an object we do not understand must not stop the watch
                log.exception("cannot handle %s %s", what, _name(body))
            return None

        async def event(event: dict[str, Any], body: Body, **_: Any) -> None:
            if not scheduler.synced.is_set():
                scheduler.synced.set()
            if event.get("type") == "DELETED":
                try:
                    delete(body)
                except Exception:
                    log.exception("cannot handle deletion of %s %s", what, _name(body))

        kopf.index(*resource, registry=registry, id=f"cache-{what}")(index)
        kopf.on.event(*resource, registry=registry, id=f"deletions-{what}")(event)

    watch(("v1", "pods"), scheduler.on_pod, scheduler.on_pod_deleted)
    watch(("v1", "nodes"), scheduler.on_node, scheduler.on_node_deleted)
    watch((C.GROUP, C.VERSION, C.PODGROUP_PLURAL), scheduler.on_podgroup, scheduler.on_podgroup_deleted)
    watch((C.GROUP, C.VERSION, C.WORKLOAD_PLURAL), scheduler.on_workload, scheduler.on_workload_deleted)
    watch(("v1", "namespaces"), scheduler.on_namespace, lambda body: scheduler.on_namespace(body, deleted=True))
    watch(
        ("scheduling.k8s.io", "v1", "priorityclasses"),
        scheduler.on_priority_class,
        lambda body: scheduler.on_priority_class(body, deleted=True),
    )
    return registry


def operator_settings() -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    settings.posting.enabled = False  # kopf's own Events: we post ours
    settings.scanning.disabled = True  # no RBAC for namespaces/CRDs needed
    settings.queueing.worker_limit = None  # a limit can deadlock indexing (PITFALLS.md)
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 30
    return settings


def _name(body: Body) -> str:
    meta = body.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}".lstrip("/")
