"""Watch events in, cache and queue updates out. The handlers write nothing to
the objects they watch (what troupe writes, and where: docs/architecture.md
"What troupe writes, and where").

Pods, Nodes, PodGroups and CompositePodGroups, the kinds with the volume,
come through troupe's own list+watch (`informer.py`: kopf spent about 1 ms of
troupe's CPU per PodGroup event, measured with cProfile at 5000 nodes, a
PodGroup created and its status written per gang); the low-volume kinds (Workloads, Namespaces,
PriorityClasses, PodDisruptionBudgets, DRA objects) through kopf handlers.

For kopf, only `@kopf.on.event` is used: the other handler kinds write
annotations or finalizers to the objects they watch. Not `@kopf.index` either: kopf makes every
object's worker wait until every indexed object of every kind is indexed, and
each indexed object wakes all the waiting workers, so the initial listing
costs O(N^2) in the number of objects (measured: 139 s for 5000 Nodes, 10
million wake-ups). Instead `initial_sync.prime()` lists everything once
before kopf starts (that is the "caches synced" moment), and kopf's own
listing then replays the same objects as idempotent upserts.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import kopf
from kubernetes_asyncio import client

from ..api import constants as C
from ..api.composite import COMPOSITE_KIND, COMPOSITE_PLURAL, CompositePodGroup
from ..api.config import WatchConfig
from ..api.podgroup import PodGroup
from ..api.records import GroupKey
from ..core.scheduler import Scheduler
from .informer import Informer
from .jobs import JobController
from .resync import KINDS, cached_objects

log = logging.getLogger(__name__)

Body = Any

Resource = tuple[str, ...]  # (group, version, plural) or ("v1", plural)
NODES: Resource = ("v1", "nodes")
PODS: Resource = ("v1", "pods")
PDBS: Resource = ("policy", "v1", "poddisruptionbudgets")
DEVICE_CLASSES: Resource = ("resource.k8s.io", "v1", "deviceclasses")
RESOURCE_SLICES: Resource = ("resource.k8s.io", "v1", "resourceslices")
RESOURCE_CLAIMS: Resource = ("resource.k8s.io", "v1", "resourceclaims")
# Served from Kubernetes 1.37 (DRADeviceTaintRules GA); not served before: nothing to apply.
DEVICE_TAINT_RULES: Resource = ("resource.k8s.io", "v1", "devicetaintrules")
PODGROUPS: Resource = (C.GROUP, C.VERSION, C.PODGROUP_PLURAL)
COMPOSITES: Resource = (C.GROUP, C.VERSION, COMPOSITE_PLURAL)
# The kinds an Informer serves instead of kopf: those with an object per pod,
# per node or per group (a CompositePodGroup per replica of a job), where
# kopf's cost per event shows (measured: about 4% of troupe's CPU on 500
# leader+workers replicas when kopf served CompositePodGroups).
INFORMED: tuple[Resource, ...] = (NODES, PODGROUPS, COMPOSITES, PODS)


# (group/version, plural) of every kind troupe watches, with its handlers, in
# the order of the initial listing: nodes first and pods last, so the room pods
# take is on nodes the cache has and a pod's PodGroup is known when it arrives.
def watched(scheduler: Scheduler) -> list[tuple[Resource, Callable[[Body], None], Callable[[Body], None]]]:
    return [
        (NODES, scheduler.on_node, scheduler.on_node_deleted),
        (("v1", "namespaces"), scheduler.on_namespace, lambda body: scheduler.on_namespace(body, deleted=True)),
        (
            ("scheduling.k8s.io", "v1", "priorityclasses"),
            scheduler.on_priority_class,
            lambda body: scheduler.on_priority_class(body, deleted=True),
        ),
        (PDBS, scheduler.on_pdb, scheduler.on_pdb_deleted),
        (DEVICE_CLASSES, scheduler.on_device_class, lambda body: scheduler.on_device_class(body, deleted=True)),
        (RESOURCE_SLICES, scheduler.on_resource_slice, lambda body: scheduler.on_resource_slice(body, deleted=True)),
        (
            DEVICE_TAINT_RULES,
            scheduler.on_device_taint_rule,
            lambda body: scheduler.on_device_taint_rule(body, deleted=True),
        ),
        (RESOURCE_CLAIMS, scheduler.on_resource_claim, lambda body: scheduler.on_resource_claim(body, deleted=True)),
        ((C.GROUP, C.VERSION, C.WORKLOAD_PLURAL), scheduler.on_workload, scheduler.on_workload_deleted),
        (COMPOSITES, scheduler.on_composite, scheduler.on_composite_deleted),
        (PODGROUPS, scheduler.on_podgroup, scheduler.on_podgroup_deleted),
        (PODS, scheduler.on_pod, scheduler.on_pod_deleted),
    ]


def list_path(resource: Resource) -> str:
    *group_version, plural = resource
    if group_version == ["v1"]:
        return f"/api/v1/{plural}"
    return "/apis/" + "/".join(group_version) + f"/{plural}"


def informer_for(scheduler: Scheduler, api: client.ApiClient, resource: Resource) -> Informer:
    """The Informer of a kind in INFORMED: its path, keys and cached objects
    as the resync has them (`resync.KINDS`, `resync.cached_objects`)."""
    kind = {PODS: "pod", NODES: "node", PODGROUPS: "podgroup", COMPOSITES: "compositepodgroup"}[resource]
    if kind == "podgroup":
        return group_informer(scheduler, api, KINDS[kind][0], C.GROUP)
    if kind == "compositepodgroup":
        return group_informer(scheduler, api, KINDS[kind][0], C.GROUP, COMPOSITE_KIND)
    path, key_of = KINDS[kind]
    upsert, delete = {
        "pod": (scheduler.on_pod, scheduler.on_pod_deleted),
        "node": (scheduler.on_node, scheduler.on_node_deleted),
    }[kind]

    def tombstone(key: Any) -> Body:
        """The body the delete handler gets for an object gone between two listings."""
        return {"metadata": {"uid": key}} if kind == "pod" else {"metadata": {"name": key}}

    return Informer(
        api,
        path,
        kind,
        upsert,
        delete,
        cached_keys=lambda: set(cached_objects(scheduler, kind)),
        key_of=key_of,
        tombstone=tombstone,
        timeout=scheduler.config.watch.timeout_seconds,
        read_timeout=scheduler.config.watch.read_timeout_seconds,
    )


def group_informer(
    scheduler: Scheduler, api: client.ApiClient, path: str, source: str, kind: str = "PodGroup"
) -> Informer:
    """The Informer of one source's PodGroups (`path` lists them; their keys
    carry `source`, the kind's API group), or of its CompositePodGroups."""
    composite = kind == COMPOSITE_KIND
    table = scheduler.cache.composites if composite else scheduler.cache.groups

    def key_of(meta: Body) -> GroupKey:
        return GroupKey(str(meta.get("namespace") or ""), str(meta.get("name") or ""), source)

    def tombstone(key: Any) -> Body:
        """The body the delete handler gets for a group gone between two listings."""
        group = table.get(key)  # its uid: claims made for it go with it
        uid = group.metadata.uid if isinstance(group, PodGroup | CompositePodGroup) else ""
        return {"apiVersion": source, "metadata": {"namespace": key.namespace, "name": key.name, "uid": uid}}

    return Informer(
        api,
        path,
        "compositepodgroup" if composite else "podgroup",
        scheduler.on_composite if composite else scheduler.on_podgroup,
        scheduler.on_composite_deleted if composite else scheduler.on_podgroup_deleted,
        cached_keys=lambda: {k for k in table if k.source == source},
        key_of=key_of,
        tombstone=tombstone,
        timeout=scheduler.config.watch.timeout_seconds,
        read_timeout=scheduler.config.watch.read_timeout_seconds,
    )


JOBS: Resource = ("batch", "v1", "jobs")


def build_registry(
    scheduler: Scheduler,
    connection: Callable[[], Awaitable[kopf.ConnectionInfo]],
    jobs: JobController | None = None,
) -> kopf.OperatorRegistry:
    """kopf's handlers: the low-volume kinds into the scheduler's cache, and
    Jobs into the Job integration (`jobs`, when on). `connection` gives the
    credentials as they are now: kopf logs in again after a 401, and a
    ServiceAccount token is rotated under it."""
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    async def login(**_: Any) -> kopf.ConnectionInfo:
        return await connection()

    def watch(resource: tuple[str, ...], upsert: Callable[[Body], None], delete: Callable[[Body], None]) -> None:
        what = "/".join(resource)

        async def event(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
            deleted = event.get("type") == "DELETED"
            try:
                (delete if deleted else upsert)(body)
            except Exception:  # an object we do not understand must not stop the watch
                log.exception("cannot handle %s %s", what, _name(body))

        kopf.on.event(*resource, registry=registry, id=f"cache-{what}")(event)

    for resource, upsert, delete in watched(scheduler):
        if resource not in INFORMED:
            watch(resource, upsert, delete)
    if jobs is not None:
        watch(JOBS, jobs.on_job, jobs.on_job_deleted)
    return registry


class NoDiffBase(kopf.DiffBaseStorage):
    """kopf builds a diff base ("essence") for every event: a deep copy of the
    whole body, status included. Only change handlers read it and troupe has
    none, so it is not built (it was about a tenth of the live loop's time)."""

    def build(self, *, body: Any, extra_fields: Any = None) -> Any:
        return {}

    def fetch(self, *, body: Any) -> Any:
        return None

    def store(self, *, body: Any, patch: Any, essence: Any) -> None:
        return None


def operator_settings(watch: WatchConfig) -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    settings.posting.enabled = False  # kopf's own Events: we post ours
    settings.scanning.disabled = True  # no RBAC for namespaces/CRDs needed
    settings.persistence.diffbase_storage = NoDiffBase()
    settings.queueing.worker_limit = (
        None  # kopf runs one worker per object; a limit below the object count can deadlock it
    )
    settings.watching.server_timeout = watch.timeout_seconds
    settings.watching.client_timeout = watch.read_timeout_seconds
    settings.watching.connect_timeout = 30
    # kopf gives a request up after 8 retries (54 s) and a watch whose listing
    # keeps getting 5xx (etcd away) then dies with the operator: retry for ever.
    settings.networking.error_backoffs = KopfBackoffs()
    return settings


class KopfBackoffs:
    """kopf's default backoffs, then 15 s for ever. Iterable but not Sized, so
    kopf never escalates; a new iterator per request."""

    def __iter__(self) -> Iterator[float]:
        yield from (1, 1, 2, 3, 5, 8, 13)
        yield from itertools.repeat(15.0)


def _name(body: Body) -> str:
    meta = body.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}".lstrip("/")
