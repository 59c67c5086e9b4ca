"""DynamicResources (upstream's name): devices from ResourceClaims
(`resource.k8s.io/v1`, structured parameters) for the pods that reference
them in `spec.resourceClaims`.

- PreFilter: the pod's claims exist and are not being deleted; which of
  them still need an allocation.
- Filter: a node passes when every claim already allocated is reachable
  from it (`allocation.nodeSelector`) and the pending ones can all be
  allocated from the devices it reaches (the allocator, selectors in CEL).
- Reserve: allocate on the chosen node and assume the result in the cache,
  so the next pod of the cycle sees those devices taken; Unreserve drops it.
- PreBind: write each claim as kube-scheduler does (finalizer, then
  `status.allocation` and a `reservedFor` entry for the pod), before any pod
  of the decision is bound.

Pods without claims pass every point untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Container, Sequence
from typing import Any

import numpy as np

from ...api.config import PluginArgs
from ...api.dra import (
    Allocation,
    AllocationResult,
    ConsumerRef,
    Device,
    NodeSelector,
    ResourceClaim,
)
from ...api.podgroup import PodGroup
from ...api.records import NodeInfo, PodInfo
from ...cluster.dra import DraStore
from ...cluster.snapshot import Snapshot
from ...framework import events as E
from ...framework.interface import (
    CycleState,
    FilterPlugin,
    FilterResult,
    GroupContext,
    Handle,
    Placement,
    PlacementGeneratePlugin,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    ReservePlugin,
    Status,
)
from .allocator import CounterBook, allocate
from .cel import SelectorError
from .counting import DeviceMatcher, NodeCounts, Without, freed_by_trial, selector_rows

log = logging.getLogger(__name__)

STATE_KEY = "DynamicResources"
NOT_AVAILABLE = "resourceclaim not available on the node"
CANNOT_ALLOCATE = "cannot allocate all claims"


class _PodClaims:
    """What PreFilter found for one pod: its claims, which are pending, and
    which are its PodGroup's (reserved for the group, not the pod)."""

    def __init__(
        self,
        claims: list[ResourceClaim],
        pending: list[ResourceClaim],
        group: ConsumerRef | None = None,
        group_claims: frozenset[tuple[str, str]] = frozenset(),
    ) -> None:
        self.claims = claims
        self.pending = pending
        self.group = group
        self.group_claims = group_claims
        self.assumed: list[tuple[ResourceClaim, Allocation]] = []  # by Reserve
        self.written: list[ResourceClaim] = []  # reserved for the pod by its PreBind


class DynamicResources(
    PreEnqueuePlugin, PreFilterPlugin, FilterPlugin, ReservePlugin, PreBindPlugin, PlacementGeneratePlugin
):
    name = "DynamicResources"
    events = frozenset(
        {E.NODE_ADD, E.NODE_LABEL, E.RESOURCE_CLAIM_CHANGE, E.RESOURCE_SLICE_CHANGE, E.DEVICE_CLASS_CHANGE}
    )

    def __init__(self, args: PluginArgs, handle: Handle) -> None:
        super().__init__(args, handle)
        self._matcher = DeviceMatcher(self.store)
        self._counting = NodeCounts(self.store, self._matcher)
        self._skip = Status.skip(self.name)
        self._locks: dict[tuple[str, str], list[Any]] = {}  # claim -> [asyncio.Lock, users]

    @property
    def store(self) -> DraStore:
        return self.handle.cache.dra

    # ------------------------------------------------------------ PreEnqueue

    def pre_enqueue(self, pod: PodInfo) -> Status:
        """A pod whose claims do not all exist waits out of the queue (the
        claim's creation lets it in), as upstream's PreEnqueue."""
        if not pod.resource_claims:
            return Status.success()
        _, _, made = self._group_claims(pod)
        names = self._claim_names(pod, made)
        if isinstance(names, Status):
            return names
        for name in names:
            if (pod.namespace, name) not in self.store.claims:
                return Status.unschedulable(
                    f"waiting for resourceclaim {pod.namespace}/{name} to be created", plugin=self.name
                )
        return Status.success()

    def _claim_names(self, pod: PodInfo, made: dict[tuple[str, str], str]) -> list[str] | Status:
        """The ResourceClaim each of the pod's `resourceClaims` entries is: by
        name, or for its PodGroup's template entry the claim made for the group;
        or why a claim has no name yet."""
        names = []
        for ref in pod.resource_claims:
            name = ref.claim_name
            if not name and ref.template_name and (ref.name, ref.template_name) in made:
                name = made[(ref.name, ref.template_name)]  # the group's, shared
                if not name:
                    return Status.unschedulable(
                        f"waiting for the claim {ref.name} of {pod.group} (template {ref.template_name}) to be created",
                        plugin=self.name,
                    )
            if not name:
                return Status.unschedulable(
                    f"resourceClaims[{ref.name}]: waiting for the claim from template {ref.template_name} to be "
                    "created (per-pod claims are created by kube-controller-manager's resource claim controller)",
                    plugin=self.name,
                )
            names.append(name)
        return names

    # ------------------------------------------------------------- PreFilter

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> Status:
        if not pod.resource_claims:
            return self._skip  # not run at Filter, Reserve or PreBind for this pod
        claims: list[ResourceClaim] = []
        pending: list[ResourceClaim] = []
        group, group_claims, made = self._group_claims(pod)
        names = self._claim_names(pod, made)
        if isinstance(names, Status):
            return names
        for claim_name in names:
            key = (pod.namespace, claim_name)
            claim = self.store.claims.get(key)
            if claim is None:
                return Status.unschedulable(f"resourceclaim {pod.namespace}/{claim_name} not found", plugin=self.name)
            if claim.deleting:
                return Status.unschedulable(
                    f"claim {pod.namespace}/{claim_name} is being deleted", plugin=self.name, resolvable=False
                )
            claims.append(claim)
            if self.store.allocation(key) is None and claim not in pending:
                pending.append(claim)
        state[STATE_KEY] = _PodClaims(claims, pending, group, group_claims)
        return Status.success()

    def _group_claims(
        self, pod: PodInfo
    ) -> tuple[ConsumerRef | None, frozenset[tuple[str, str]], dict[tuple[str, str], str]]:
        """The pod's PodGroup as a consumer; the claims it lists in
        `spec.resourceClaims` (shared by its pods, reserved for it); and its
        template entries, (name, template) -> the claim made from it ("" not yet)."""
        if pod.group is None:
            return None, frozenset(), {}
        group = self.handle.cache.groups.get(pod.group)
        if not isinstance(group, PodGroup) or not group.spec.resource_claims:
            return None, frozenset(), {}
        names = {c.resource_claim_name for c in group.spec.resource_claims if c.resource_claim_name}
        made: dict[tuple[str, str], str] = {}
        if any(c.resource_claim_template_name for c in group.spec.resource_claims):
            owned = self.store.owned_by(group.metadata.uid)
            for c in group.spec.resource_claims:
                if c.resource_claim_template_name:
                    claim = owned.get(c.name)
                    made[(c.name, c.resource_claim_template_name)] = claim.name if claim is not None else ""
                    if claim is not None:
                        names.add(claim.name)
        ref = ConsumerRef("podgroups", group.metadata.name, group.metadata.uid or "", api_group=group.key.source)
        return ref, frozenset((pod.namespace, n) for n in names), made

    # ---------------------------------------------------------------- Filter

    def filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> FilterResult:
        n = len(snapshot)
        found: _PodClaims | None = state.get(STATE_KEY)
        if found is None:
            return FilterResult.all(n)
        feasible = snapshot.valid.copy()
        reasons: list[tuple[str, np.ndarray]] = []

        def reject(why: str, rows: np.ndarray) -> None:
            mask = np.zeros(n, dtype=bool)
            mask[rows] = True
            feasible[rows] = False
            reasons.append((why, mask))

        # Claims already allocated: only where their allocation is reachable.
        for claim in found.claims:
            allocation = None if claim in found.pending else self.store.allocation(claim.key)
            if allocation is not None and allocation.node_selector is not None:
                reachable = selector_rows(allocation.node_selector, snapshot)
                reject(NOT_AVAILABLE, np.flatnonzero(feasible & ~reachable))
        if not found.pending or not feasible.any():
            return FilterResult(feasible, reasons)
        freed = freed_by_trial(self.store, snapshot)
        counted = self._counting.free_counts(found.pending, snapshot, freed)
        if counted is not None:
            free, need = counted
            reject(CANNOT_ALLOCATE, np.flatnonzero(feasible & (free < need)))
            return FilterResult(feasible, reasons)
        # The general case: the allocator, node by node.
        local = self.store.nodes_with_devices()
        failed: dict[str, list[int]] = {}
        for row in np.flatnonzero(feasible).tolist():
            node = snapshot.nodes[row]
            assert node is not None
            if local is not None and node.name not in local:
                failed.setdefault(CANNOT_ALLOCATE, []).append(row)
                continue
            outcome, _ = self._allocate(found.pending, node.name, node.labels, freed)
            if outcome is None:
                failed.setdefault(CANNOT_ALLOCATE, []).append(row)
            elif isinstance(outcome, str):
                failed.setdefault(outcome, []).append(row)
        for why, rows in failed.items():
            reject(why, np.array(rows, dtype=np.int64))
        return FilterResult(feasible, reasons)

    def _allocate(
        self,
        claims: list[ResourceClaim],
        node_name: str,
        labels: Any,
        freed: frozenset[tuple[str, str, str]] = frozenset(),
    ) -> tuple[list[Allocation] | str | None, str]:
        """Allocations for `claims` on this node; None when they do not fit
        (with the allocator's reason), a string for a selector error."""
        devices = self.store.devices_for(node_name, labels)
        in_use: Container[tuple[str, str, str]] = self.store.in_use()
        if freed:
            in_use = Without(in_use, freed)
        counters = None
        if self.store.partitioned:
            counters = CounterBook(self.store.counter_sets, self.store.partitioned_devices, in_use)
        outcome = allocate(claims, devices, in_use, self._matcher, counters=counters)
        if outcome.results is None:
            if outcome.reason.startswith("selector "):
                return outcome.reason, outcome.reason
            return None, outcome.reason
        by_key = {d.key: d for d in devices}
        return [self._allocation(c, r, node_name, by_key) for c, r in zip(claims, outcome.results)], ""

    def _allocation(
        self, claim: ResourceClaim, results: list[AllocationResult], node_name: str, by_key: dict[Any, Device]
    ) -> Allocation:
        config: list[dict[str, Any]] = []
        used_classes: dict[str, list[str]] = {}
        for slot in claim.requests:
            for request in slot.alternatives:
                if any(r.request == request.name for r in results):
                    used_classes.setdefault(request.device_class, []).append(request.name)
        for class_name, requests in used_classes.items():
            cls = self.store.classes.get(class_name)
            for cfg in cls.config if cls is not None else ():
                config.append({**cfg.to_api("FromClass"), "requests": requests})
        config.extend(cfg.to_api("FromClaim") for cfg in claim.config)
        # Node-local devices pin the claim to this node; devices of a slice
        # for many nodes, to that slice's nodes (the first such slice: an
        # approximation where slices select different nodes).
        selector: NodeSelector | None = None
        for r in results:
            s = self.store.slice_of((r.driver, r.pool, r.device))
            if s is None:
                continue
            if s.node_name:
                selector = NodeSelector.for_node(node_name)
                break
            if s.node_selector is not None and selector is None:
                selector = s.node_selector
        return Allocation(tuple(results), tuple(config), selector)

    # ------------------------------------------------------ PlacementGenerate

    def generate_placements(
        self, state: CycleState, group: GroupContext, snapshot: Snapshot, parents: Sequence[Placement]
    ) -> tuple[list[Placement], Status]:
        """A group claim not allocated yet: one candidate per place its
        allocation could land (a node for node-local devices, the nodes of a
        shared slice), so the whole group is tried in each, instead of the
        first pod's node deciding for all of them (upstream allocates at the
        first pod's Reserve)."""
        claims = self._pending_group_claims(group)
        if not claims:
            return [], self._skip
        homes = self._homes(claims, snapshot, parents)
        if homes is None:
            return [], self._skip
        out: list[Placement] = []
        for parent in parents:
            for name, mask in homes.values():
                nodes = parent.nodes & mask
                if nodes.any():
                    whole = parent.parent is None and not parent.name
                    out.append(Placement(name, nodes, None if whole else parent, parent.rank, parent.kind))
        if not out:
            names = ", ".join(f"{c.namespace}/{c.name}" for c in claims)
            return [], Status.unschedulable(f"{CANNOT_ALLOCATE}: no node can allocate group claim(s) {names}")
        return out, Status.success()

    def _homes(
        self, claims: list[ResourceClaim], snapshot: Snapshot, parents: Sequence[Placement]
    ) -> dict[NodeSelector, tuple[str, np.ndarray]] | None:
        """Where the group claims' allocation could land, by the node selector
        it would carry: (candidate name, its rows). Tried on each node the
        parents reach; None where the allocation would narrow nothing."""
        homes: dict[NodeSelector, tuple[str, np.ndarray]] = {}
        reachable = np.zeros(len(snapshot), dtype=bool)
        for parent in parents:
            reachable |= parent.nodes
        local = self.store.nodes_with_devices()
        for row in np.flatnonzero(reachable).tolist():
            node = snapshot.nodes[row]
            if node is None or (local is not None and node.name not in local):
                continue
            allocations = self._allocation_on(claims, node)
            if allocations is None:
                continue
            selector = allocations[0].node_selector if len(allocations) == 1 else None
            if selector is None:  # reachable from every node (allNodes), or several claims: no narrowing
                return None
            if selector in homes:
                continue
            name = node.name if selector.node_names() == {node.name} else _pool_names(allocations[0])
            homes[selector] = (name, selector_rows(selector, snapshot))
        return homes

    def _allocation_on(self, claims: list[ResourceClaim], node: NodeInfo) -> list[Allocation] | None:
        """The claims' allocations on this node; None where they do not fit or a selector fails."""
        try:
            outcome, _ = self._allocate(claims, node.name, node.labels)
        except SelectorError:
            return None
        return None if outcome is None or isinstance(outcome, str) else outcome

    def _pending_group_claims(self, group: GroupContext) -> list[ResourceClaim]:
        """The claims of the PodGroup (by name, or made from its templates)
        that no allocation holds yet."""
        pg = group.group
        if pg is None or not pg.spec.resource_claims:
            return []
        ns = pg.metadata.namespace
        names = [c.resource_claim_name for c in pg.spec.resource_claims if c.resource_claim_name]
        if any(c.resource_claim_template_name for c in pg.spec.resource_claims):
            names += [c.name for c in self.store.owned_by(pg.metadata.uid).values()]
        out = []
        for name in names:
            claim = self.store.claims.get((ns, name))
            if claim is not None and not claim.deleting and self.store.allocation(claim.key) is None:
                out.append(claim)
        return out

    # --------------------------------------------------------------- Reserve

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        found: _PodClaims | None = state.get(STATE_KEY)
        if found is None:
            return Status.success()
        info = self.handle.cache.node(node)
        labels = info.labels if info is not None else {}
        # Claims allocated since Filter (by an earlier pod of this cycle, e.g. a
        # group claim) or before: the node must reach them. A trial placed
        # without Reserve (the search, placement trials) may not have known.
        for claim in found.claims:
            allocation = self.store.allocation(claim.key)
            selector = allocation.node_selector if allocation is not None else None
            if selector is not None and not selector.matches(node, labels):
                return Status.unschedulable(NOT_AVAILABLE, plugin=self.name)
        pending = [c for c in found.pending if self.store.allocation(c.key) is None]
        if not pending:
            return Status.success()
        try:
            outcome, why = self._allocate(pending, node, labels)
        except SelectorError as exc:
            return Status.unschedulable(str(exc), plugin=self.name)
        if outcome is None or isinstance(outcome, str):
            return Status.unschedulable(CANNOT_ALLOCATE + (f": {why}" if why else ""), plugin=self.name)
        for claim, allocation in zip(pending, outcome):
            self.store.assume(claim.key, allocation)
            found.assumed.append((claim, allocation))
        return Status.success()

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        found: _PodClaims | None = state.get(STATE_KEY)
        if found is None:
            return
        for claim, _ in found.assumed:
            self.store.forget(claim.key)
        found.assumed.clear()
        # PreBind wrote, then the bind (or the gang) failed: undo the pod's
        # reservations, so its devices are not held for a pod that waits.
        if found.written and self.handle.claim_writer is not None:
            for claim in found.written:
                self.handle.claim_writer.release(claim, pod.uid)
        found.written.clear()

    # --------------------------------------------------------------- PreBind

    async def pre_bind(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        found: _PodClaims | None = state.get(STATE_KEY)
        if found is None:
            return Status.success()
        writer = self.handle.claim_writer
        if writer is None:
            return Status.error("no claim writer: DynamicResources needs the API", plugin=self.name)
        for claim in found.claims:
            consumer = ConsumerRef("pods", pod.name, pod.uid)
            if claim.key in found.group_claims and found.group is not None:
                consumer = found.group
            # One write at a time per claim: a group claim is shared by the
            # group's pods, whose PreBinds run together; each write must see
            # the resourceVersion the previous one left.
            async with self._claim_lock(claim.key):
                current = self.store.claims.get(claim.key, claim)
                if current.allocation is not None and any(r.uid == consumer.uid for r in current.reserved_for):
                    continue
                allocation = self.store.assumed.get(claim.key) if current.allocation is None else None
                if current.allocation is None and allocation is None:
                    return Status.error(f"claim {claim.namespace}/{claim.name} lost its allocation", plugin=self.name)
                written = await writer.write_claim(current, allocation, consumer)
                self.store.upsert_claim(written)
                if consumer.resource == "pods":
                    found.written.append(written)
        return Status.success()

    @contextlib.asynccontextmanager
    async def _claim_lock(self, key: tuple[str, str]) -> AsyncIterator[None]:
        entry = self._locks.setdefault(key, [asyncio.Lock(), 0])
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                del self._locks[key]


def _pool_names(allocation: Allocation) -> str:
    return ",".join(sorted({r.pool for r in allocation.results}))
