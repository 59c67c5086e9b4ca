"""Asking autoscalers for a whole unit's nodes, in one domain: pods that
stand in for the unit (docs/autoscaling.md).

Why stand-in pods: Karpenter and cluster-autoscaler both provision for a
pod with PodScheduled=False/Unschedulable and no nominatedNodeName
(Karpenter `pkg/utils/pod/scheduling.go` IsProvisionable; cluster-autoscaler
`utils/kubernetes/listers.go` unschedulable pods), and both honour its
nodeSelector and tolerations. So for a unit that fits nowhere troupe makes
one stand-in per waiting pod, with the pod's requests, nodeSelector,
tolerations and node affinity, pinned to the chosen domain (`key: value`
in its nodeSelector), and says they are unschedulable; the unit's own pods say
PodGroupUnschedulable meanwhile, which no autoscaler acts on. Neither an
alpha feature (CapacityBuffers are behind a Karpenter feature gate in
v1.15.0) nor cloud-specific objects (NodeClaims) are needed.

A stand-in is never bound: its schedulerName is one no scheduler serves. It
is owned by the unit's group (deleting the group deletes it: the garbage
collector), labelled with the owner's uid, and deleted when the unit binds,
asks elsewhere, is gone, or its nodes did not come within the timeout (the
domain is then not asked again for a while, and the unit tries the next).
A scheduler that starts (or takes the lease) adopts the stand-ins it finds:
those whose unit is bound or gone are deleted at once (no garbage collector
may be running), the others when their unit does not ask for the same again
within 30 s.

NodePools are read by polling (a list every few seconds): few objects,
often absent, and their status (the capacity they have made) changes as
nodes come, which the limits check needs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import orjson
from kubernetes_asyncio.client.exceptions import ApiException

from ..api import constants as C
from ..api import nodepool
from ..api.composite import CompositePodGroup
from ..api.nodepool import CapacityPlan
from ..api.podgroup import PodGroup
from ..api.records import GroupKey, PodInfo
from ..core.scheduler import Scheduler
from .apitime import now_rfc3339
from .binder import REQUEST_TIMEOUT_SECONDS
from .kube import NotLeading, RestClient, encode
from .status import STRATEGIC_MERGE_PATCH

log = logging.getLogger(__name__)

STANDS_IN_FOR = f"{C.GROUP}/stands-in-for"  # label: the owning group's uid
UNIT_ANNOTATION = f"{C.GROUP}/unit"  # "PodGroup ns/name": for people
DOMAIN_ANNOTATION = f"{C.GROUP}/capacity-domain"  # "rack=r2"
STAND_IN_SCHEDULER = "troupe-capacity"  # no scheduler serves it: never bound
STAND_IN_IMAGE = "registry.k8s.io/pause:3.10"  # never pulled: the pod never runs
POLL_SECONDS = 5.0
ADOPT_GRACE_SECONDS = 30.0  # an adopted stand-in no unit asks for again by then goes
FAILED_FOR = 3  # a domain whose nodes did not come is not asked again for this many timeouts


@dataclass
class _Asked:
    plan: CapacityPlan | None  # None: adopted at start, not asked again yet
    namespace: str
    owner_uid: str
    domain: str
    since: float  # when first asked in this domain (monotonic)


class CapacityRequests:
    """The Scheduler's CapacityRequester (core/outputs.py), and the loop that
    reads NodePools, times requests out and sweeps stand-ins no unit needs."""

    def __init__(
        self,
        rest: RestClient,
        scheduler: Scheduler,
        clock: Callable[[], float] = time.monotonic,
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        self._rest = rest
        self._scheduler = scheduler
        self._clock = clock
        self._poll = poll_seconds
        self._asked: dict[GroupKey, _Asked] = {}
        self._work: asyncio.Queue[tuple[str, GroupKey, Any]] = asyncio.Queue()
        self._pools: dict[str, str] = {}  # NodePool name -> resourceVersion, as last read

    # ----------------------------------------------------- CapacityRequester

    def ask(self, plan: CapacityPlan) -> None:
        asked = self._asked.get(plan.unit)
        if asked is not None and asked.domain == plan.domain and _same_pods(asked.plan, plan):
            asked.plan = plan
            return  # asked already (or adopted: made before a restart) for the same pods
        owner = self._owner(plan.unit)
        if owner is None:
            log.info("%s: no object to own stand-ins; no capacity asked", plan.unit)
            return
        since = asked.since if asked is not None and asked.domain == plan.domain else self._clock()
        if asked is not None:
            self._work.put_nowait(("delete", plan.unit, asked))
        self._asked[plan.unit] = _Asked(plan, plan.unit.namespace, owner["uid"], plan.domain, since)
        self._work.put_nowait(("create", plan.unit, (plan, owner)))

    def withdraw(self, unit: GroupKey) -> None:
        asked = self._asked.pop(unit, None)
        if asked is not None:
            self._work.put_nowait(("delete", unit, asked))

    # ------------------------------------------------------------------ loop

    async def run(self) -> None:
        """Carry out asks and withdrawals in order; poll NodePools; time out."""
        worker = asyncio.create_task(self._worker(), name="capacity requests")
        try:
            while True:
                try:
                    await self.poll_nodepools()
                    self._time_out()
                except Exception:  # a bug must not stop troupe: next round
                    log.exception("capacity requests: round failed")
                await asyncio.sleep(self._poll)
        finally:
            worker.cancel()

    async def adopt(self) -> None:
        """The stand-ins found at start (made by a scheduler before this
        one): kept while their unit asks for the same again, swept after."""
        try:
            raw = await self._rest.request(
                "GET", f"/api/v1/pods?labelSelector={quote(STANDS_IN_FOR)}", b"", timeout=REQUEST_TIMEOUT_SECONDS
            )
        except ApiException as exc:
            log.warning("cannot list stand-in pods: %s %s", exc.status, exc.reason)
            return
        for item in orjson.loads(raw).get("items") or ():
            meta = item.get("metadata") or {}
            owner: dict[str, Any] = next(iter(meta.get("ownerReferences") or ()), {})
            unit = _unit_of(str((meta.get("annotations") or {}).get(UNIT_ANNOTATION) or ""))
            if unit is None or not owner.get("uid") or unit in self._asked:
                continue
            domain = str((meta.get("annotations") or {}).get(DOMAIN_ANNOTATION) or "")
            asked = _Asked(None, str(meta.get("namespace") or ""), owner["uid"], domain, self._clock())
            self._asked[unit] = asked
            if self._scheduler.unit_waits(unit):
                log.info("adopted the stand-ins of %s (%s)", unit, domain)
            else:  # bound or gone meanwhile (no garbage collector may be running)
                log.info("the stand-ins of %s (%s) are no longer needed: deleted", unit, domain)
                self.withdraw(unit)

    async def poll_nodepools(self) -> None:
        """Read every NodePool into the scheduler (absent kind: none)."""
        try:
            raw = await self._rest.request(
                "GET", f"/apis/{nodepool.API_VERSION}/{nodepool.PLURAL}", b"", timeout=REQUEST_TIMEOUT_SECONDS
            )
            items = orjson.loads(raw).get("items") or []
        except ApiException as exc:
            if exc.status not in (403, 404):
                log.warning("cannot list NodePools: %s %s", exc.status, exc.reason)
                return
            items = []  # not served here (or not allowed): no autoscaling asked
        except (TimeoutError, OSError) as exc:
            log.warning("cannot list NodePools: %s", exc)
            return
        seen: dict[str, str] = {}
        for item in items:
            meta = item.get("metadata") or {}
            name, version = str(meta.get("name") or ""), str(meta.get("resourceVersion") or "")
            seen[name] = version
            if self._pools.get(name) != version:
                self._scheduler.on_nodepool(item)
        for name in set(self._pools) - set(seen):
            self._scheduler.on_nodepool({"metadata": {"name": name}}, deleted=True)
        self._pools = seen

    def _time_out(self) -> None:
        now = self._clock()
        cache = self._scheduler.cache
        for unit, asked in list(self._asked.items()):
            if asked.plan is None:  # adopted: kept while its unit waits and asks again in time
                if now - asked.since > ADOPT_GRACE_SECONDS or not self._scheduler.unit_waits(unit):
                    self.withdraw(unit)
                continue
            timeout = asked.plan.timeout
            if now - asked.since < timeout:
                continue
            log.info("%s: no nodes came in %s within %.0fs; withdrawn", unit, asked.domain, timeout)
            cache.capacity_failed.setdefault(unit, {})[asked.domain] = now + FAILED_FOR * timeout
            cache.capacity_asked.pop(unit, None)
            self.withdraw(unit)
            self._scheduler.retry_unit(unit)

    async def _worker(self) -> None:
        while True:
            op, unit, arg = await self._work.get()
            try:
                if op == "create":
                    plan: CapacityPlan = arg[0]
                    owner: dict[str, Any] = arg[1]
                    current = self._asked.get(unit)
                    if current is not None and current.plan is plan:  # not withdrawn meanwhile
                        await self._create(plan, owner)
                else:
                    await self._delete(arg)
            except NotLeading:
                pass
            except (TimeoutError, ApiException, OSError) as exc:
                log.warning("%s: capacity %s failed: %s", unit, op, exc)
            except Exception:  # a bug must not stop the worker
                log.exception("%s: capacity %s failed", unit, op)

    # ----------------------------------------------------------- API writes

    async def _create(self, plan: CapacityPlan, owner: dict[str, Any]) -> None:
        message = (
            f"stands in for {_label(plan.unit)}: room for its {len(plan.pods)} pods, {plan.domain} "
            f"(NodePool {', '.join(plan.pools)}); troupe deletes it when the unit binds"
        )
        for pod in plan.pods:
            body = stand_in(plan, pod, owner)
            raw = await self._rest.post(
                f"/api/v1/namespaces/{plan.unit.namespace}/pods", encode(body), timeout=REQUEST_TIMEOUT_SECONDS
            )
            name = str((orjson.loads(raw).get("metadata") or {}).get("name") or "")
            condition = {
                "type": C.POD_SCHEDULED,
                "status": "False",
                "reason": C.REASON_UNSCHEDULABLE,
                "message": message,
                "lastProbeTime": None,
                "lastTransitionTime": now_rfc3339(),
            }
            await self._rest.patch(
                f"/api/v1/namespaces/{plan.unit.namespace}/pods/{name}/status",
                encode({"status": {"conditions": [condition]}}),
                STRATEGIC_MERGE_PATCH,
                timeout=REQUEST_TIMEOUT_SECONDS,
            )
        log.info("%s: asked for nodes for %d pods, %s (%s)", plan.unit, len(plan.pods), plan.domain, message)

    async def _delete(self, asked: _Asked) -> None:
        selector = quote(f"{STANDS_IN_FOR}={asked.owner_uid}")
        try:
            await self._rest.delete(
                f"/api/v1/namespaces/{asked.namespace}/pods?labelSelector={selector}",
                timeout=REQUEST_TIMEOUT_SECONDS,
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    def _owner(self, unit: GroupKey) -> dict[str, Any] | None:
        """The ownerReference of the unit's object (its group, or its tree's root)."""
        cache = self._scheduler.cache
        group = cache.groups.get(unit)
        obj: PodGroup | CompositePodGroup | None = group if isinstance(group, PodGroup) else None
        if obj is None:
            composite = cache.composites.get(unit)
            obj = composite if isinstance(composite, CompositePodGroup) else None
        if obj is None or not obj.metadata.uid:
            return None
        kind = "CompositePodGroup" if isinstance(obj, CompositePodGroup) else "PodGroup"
        return {
            "apiVersion": obj.api_version,
            "kind": kind,
            "name": unit.name,
            "uid": obj.metadata.uid,
            "controller": True,
            "blockOwnerDeletion": False,
        }


def stand_in(plan: CapacityPlan, pod: PodInfo, owner: dict[str, Any]) -> dict[str, Any]:
    """The pod that asks for `pod`'s room in the plan's domain."""
    selector = dict(pod.node_selector)
    if plan.key:
        selector[plan.key] = plan.value
    # troupe's units: millicores, bytes, counts (api/resources.py)
    requests = {r: (f"{v}m" if r == "cpu" else str(v)) for r, v in sorted(pod.requests.items()) if r != "pods"}
    tolerations = [
        {k: v for k, v in (("key", t.key), ("operator", t.operator), ("value", t.value), ("effect", t.effect)) if v}
        for t in pod.tolerations
    ]
    prefix = f"{plan.unit.name[:40]}-capacity-"
    spec: dict[str, Any] = {
        "schedulerName": STAND_IN_SCHEDULER,
        "nodeSelector": selector,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 0,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65535, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
                "name": "stand-in",
                "image": STAND_IN_IMAGE,
                "resources": {"requests": requests},
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            }
        ],
    }
    if tolerations:
        spec["tolerations"] = tolerations
    affinity = _node_affinity(pod)
    if affinity:
        spec["affinity"] = {"nodeAffinity": affinity}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": prefix,
            "namespace": plan.unit.namespace,
            "labels": {STANDS_IN_FOR: owner["uid"]},
            "annotations": {UNIT_ANNOTATION: _label(plan.unit), DOMAIN_ANNOTATION: plan.domain},
            "ownerReferences": [owner],
        },
        "spec": spec,
    }


def _node_affinity(pod: PodInfo) -> dict[str, Any]:
    """The pod's node affinity, as the API has it: the autoscaler then makes
    a node the pod itself may run on (its required terms) and that it
    prefers (its preferred ones). Pod (anti-)affinity is not copied: it names
    the pods' own labels, which the stand-ins do not carry."""
    out: dict[str, Any] = {}
    if pod.required_affinity is not None:
        terms = [t.to_api() for t in pod.required_affinity]
        out["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": terms}
    if pod.preferred_affinity:
        out["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": p.weight, "preference": p.term.to_api()} for p in pod.preferred_affinity
        ]
    return out


def _same_pods(asked: CapacityPlan | None, plan: CapacityPlan) -> bool:
    """An adopted request (None) is taken as the same."""
    return asked is None or {p.uid for p in asked.pods} == {p.uid for p in plan.pods}


def _label(unit: GroupKey) -> str:
    """The unit in the stand-ins' annotation: "<API group> <namespace>/<name>"."""
    return f"{unit.source} {unit.namespace}/{unit.name}"


def _unit_of(label: str) -> GroupKey | None:
    source, _, rest = label.partition(" ")
    namespace, _, name = rest.partition("/")
    if not (source and namespace and name):
        return None
    return GroupKey(namespace, name, source)
