"""CapacityRequest (troupe's; upstream has none): new nodes for a whole unit,
in one domain, from the autoscaler's NodePools (docs/autoscaling.md).

A PostFilter, after preemption found nothing and before Reservation (where
nodes can be made, they come sooner than running pods end; where none can,
Reservation still may hold room): a gang or a tree that fits nowhere now
asks for room for all its waiting pods in the domain its topology
constraint needs (its most preferred key that some NodePool can make nodes
for), from the NodePools that make nodes there, whose limits leave room
for all of it (less what other units were given and do not have yet).
The runtime asks by pods that stand in for the unit (runtime/capacity.py);
the unit's own pods then do not look provisionable.

Where no pool can make room for all of it, nothing is asked, the unit
says why (`CycleState.capacity_refused`, whatever Reservation does) and its
pods are not provisionable either: an autoscaler must not make nodes for a
part of a gang that will not bind. A domain whose capacity did not come in
time is not asked again for a while (the runtime records it); the next one
is.

Lone pods and `basic` groups are left to the autoscaler as they are: each
pod is provisionable on its own; so are the pods of a group with no object
to own stand-ins (Kueue's plain pod groups).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from pydantic import Field

from ..api.config import PluginArgs
from ..api.nodepool import NODEPOOL_LABEL, CapacityPlan, NodeTemplate
from ..api.quantity import format_units
from ..api.records import NodeInfo, PodInfo
from ..api.sources import has_object
from ..cluster.snapshot import Snapshot
from ..framework.diagnosis import Diagnosis
from ..framework.interface import (
    CycleState,
    GroupContext,
    GroupPostFilterResult,
    Handle,
    PostFilterPlugin,
    Status,
)

# Taint effects that keep a pod off a node it does not tolerate.
_REPELLING = ("NoSchedule", "NoExecute")


class CapacityRequestArgs(PluginArgs):
    # How long the nodes asked for a unit may take to come (all of them ready
    # and the unit bound); then the stand-ins go and the next domain is asked
    # (that one is not asked again for 3 times this long).
    timeout_seconds: float = Field(default=600.0, gt=0, alias="timeoutSeconds")


class CapacityRequest(PostFilterPlugin):
    name = "CapacityRequest"
    Args = CapacityRequestArgs

    def __init__(self, args: CapacityRequestArgs, handle: Handle) -> None:
        super().__init__(args, handle)
        self.args: CapacityRequestArgs = args

    def post_filter_group(
        self, state: CycleState, group: GroupContext, snapshot: Snapshot, diagnoses: Mapping[str, Diagnosis]
    ) -> tuple[GroupPostFilterResult | None, Status]:
        cache = self.handle.cache
        if not cache.node_templates or not (group.is_gang or group.tree is not None):
            return None, Status.skip(self.name)
        if group.tree is None and (group.group is None or not has_object(group.group.api_version)):
            return None, Status.skip(self.name)  # no object to own its stand-ins (Kueue's pod groups)
        pods = tuple(p for p in group.pods if not p.node_name)
        if not pods:
            return None, Status.skip(self.name)
        keys = self._keys(group)
        plan, why = self._plan(group, pods, keys, _made(snapshot))
        if plan.pools:
            where = f" in {plan.domain}" if plan.key else ""
            rows = _rows_there(snapshot, plan)
            nominations = _hold(snapshot, rows, pods)
            message = (
                f"waiting for new nodes for its {len(pods)} pods ({_amounts(plan.requests)}){where} "
                f"from NodePool {', '.join(plan.pools)} ({len(rows)} of its nodes there now, "
                f"room held on them for {len(nominations)})"
            )
        else:
            # Nothing to ask: the PostFilters after it (Reservation) may still help.
            message = f"no NodePool can make room for all its {len(pods)} pods ({_amounts(plan.requests)}) {why}"
            state.capacity_refused = (plan, message)
            return None, Status.skip(self.name)
        return GroupPostFilterResult(nominations, message=message, capacity=plan), Status.success()

    def _keys(self, group: GroupContext) -> list[str]:
        if group.tree is not None:
            root = self.handle.cache.composites.get(group.key)
            return list(getattr(root, "topology_keys", []) or [])
        return group.topology_keys

    def _plan(
        self, group: GroupContext, pods: tuple[PodInfo, ...], keys: list[str], made: Mapping[str, Mapping[str, int]]
    ) -> tuple[CapacityPlan, str]:
        """The domain to ask in and its pools, or an empty plan and why none."""
        cache = self.handle.cache
        requests = _sum(pods)
        failed = {d for d, until in cache.capacity_failed.get(group.key, {}).items() if until > self.handle.clock()}
        usable = [t for t in cache.node_templates.values() if not t.problem and _fits_pods(t, pods)]
        if not usable:
            return CapacityPlan(group.key, pods, requests=requests), "(none makes nodes its pods may run on)"
        reasons: list[str] = []
        for key in keys or [""]:
            for value, pools in _domains(usable, key):
                domain = f"{key}={value}" if key else "anywhere"
                if any(p.node_selector.get(key, value) != value for p in pods):
                    continue  # its pods ask for another value of the key
                if domain in failed:
                    reasons.append(f"{domain}: asked before, did not come in time")
                    continue
                short = self._short(group, pools, requests, made)
                if short:
                    reasons.append(f"{domain}: {short}")
                    continue
                names = tuple(sorted(t.name for t in pools))
                return CapacityPlan(group.key, pods, key, value, names, requests, self.args.timeout_seconds), ""
        where = f"in one {keys[0]} domain" if keys else "anywhere"
        return CapacityPlan(group.key, pods, requests=requests), f"{where}: " + ("; ".join(reasons) or "no pool says")

    def _short(
        self,
        group: GroupContext,
        pools: Sequence[NodeTemplate],
        requests: Mapping[str, int],
        made: Mapping[str, Mapping[str, int]],
    ) -> str:
        """What the pools' limits leave short of `requests` ("" when nothing):
        less what each pool has made (its status, or the nodes of it the cache
        has, whichever is more: the status lags), less what was asked of them
        for other units and not yet made."""
        names = {t.name for t in pools}
        asked: dict[str, int] = {}
        for unit, plan in self.handle.cache.capacity_asked.items():
            if unit != group.key and names & set(plan.pools):
                for r, v in plan.requests.items():
                    asked[r] = asked.get(r, 0) + v
        short = []
        for resource, need in sorted(requests.items()):
            if any(resource not in t.limits for t in pools):
                continue  # a pool without a limit on it
            left = sum(
                t.limits[resource] - max(t.used.get(resource, 0), made.get(t.name, {}).get(resource, 0)) for t in pools
            )
            left -= asked.get(resource, 0)
            if left < need:
                short.append(
                    f"limits leave {format_units(resource, max(left, 0))} {resource}, {format_units(resource, need)} needed"
                )
        return ", ".join(short)


def _made(snapshot: Snapshot) -> dict[str, dict[str, int]]:
    """Per NodePool, the allocatable of the nodes it made that the cache has."""
    ids, values = snapshot.domains(NODEPOOL_LABEL)
    out: dict[str, dict[str, int]] = {}
    for d, pool in enumerate(values):
        rows = ids == d
        if not rows.any():
            continue
        totals = snapshot.alloc[rows].sum(axis=0)
        out[pool] = {r: int(totals[i]) for r, i in snapshot.column.items() if i < totals.shape[0]}
    return out


def _rows_there(snapshot: Snapshot, plan: CapacityPlan) -> list[int]:
    """The rows of the nodes of the plan's pools, in its domain."""
    ids, values = snapshot.domains(NODEPOOL_LABEL)
    mask = np.isin(ids, [i for i, v in enumerate(values) if v in plan.pools])
    if plan.key:
        key_ids, key_values = snapshot.domains(plan.key)
        mask &= key_ids == (key_values.index(plan.value) if plan.value in key_values else -2)
    return [int(r) for r in np.flatnonzero(mask)]


def _hold(snapshot: Snapshot, rows: list[int], pods: Sequence[PodInfo]) -> dict[str, str]:
    """Room on the unit's new nodes, as they come, for as many of its pods as
    fit there (largest first): their nominations, which hold that room
    against other units of no higher priority until the unit binds whole.
    Only what the node can take now counts (taints it does not tolerate, a
    cordon, the unregistered taint of a node just made, rule it out)."""
    usable = [r for r in rows if _admits(snapshot.nodes[r], pods)]
    if not usable:
        return {}
    free = snapshot.alloc[usable] - snapshot.req[usable]
    held: dict[str, str] = {}
    for pod in sorted(pods, key=lambda p: -p.requests.get("cpu", 0)):
        vec = snapshot.request_vector(pod)[0]
        fits = np.flatnonzero((free >= vec).all(axis=1))
        if fits.size:
            i = int(fits[0])
            free[i] -= vec
            held[pod.uid] = snapshot.names[usable[i]]
    return held


def _admits(node: NodeInfo | None, pods: Sequence[PodInfo]) -> bool:
    if node is None or node.unschedulable:
        return False
    return all(
        t.effect not in _REPELLING or all(any(x.tolerates(t) for x in p.tolerations) for p in pods) for t in node.taints
    )


def _sum(pods: Sequence[PodInfo]) -> dict[str, int]:
    total: dict[str, int] = {}
    for p in pods:
        for r, v in p.requests.items():
            total[r] = total.get(r, 0) + v
    return total


def _amounts(requests: Mapping[str, int]) -> str:
    shown = [f"{format_units(r, v)} {r}" for r, v in sorted(requests.items()) if v and r != "pods"]
    return ", ".join(shown) or "no requests"


def _fits_pods(template: NodeTemplate, pods: Sequence[PodInfo]) -> bool:
    """Every pod may run on the pool's nodes, as far as the pool says: its
    nodeSelector agrees with the pool's labels and choices, and it tolerates
    the pool's taints. (Required node affinity the autoscaler checks itself.)"""
    for p in pods:
        for key, value in p.node_selector.items():
            values = template.values(key)
            if values is not None and value not in values:
                return False
            if value in template.excluded.get(key, ()):
                return False
        for taint in template.taints:
            if taint.effect in _REPELLING and not any(t.tolerates(taint) for t in p.tolerations):
                return False
    return True


def _domains(pools: Sequence[NodeTemplate], key: str) -> list[tuple[str, list[NodeTemplate]]]:
    """Each value of `key` some pool names, with the pools that make nodes
    there, the heaviest pools' values first, then by value; for no key, one
    domain of every pool."""
    if not key:
        return [("", list(pools))]
    by_value: dict[str, list[NodeTemplate]] = {}
    for t in pools:
        for value in t.values(key) or ():
            by_value.setdefault(value, []).append(t)
    return sorted(by_value.items(), key=lambda item: (-max(t.weight for t in item[1]), item[0]))
