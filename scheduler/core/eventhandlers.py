"""Cluster events into cache and queue updates (upstream eventhandlers.go).

The watch (runtime) and the simulation call these with API bodies; the binder
reports through `on_bound` / `on_bind_failed` / `on_pod_gone`. Each handler
is O(1) in cluster size (Workload events, which are rare, scan the groups).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from pydantic import ValidationError

from ..api import constants as C
from ..api import subgroups
from ..api.composite import CompositePodGroup
from ..api.dra import (
    group_claim_name,
    parse_device_class,
    parse_device_taint_rule,
    parse_resource_claim,
    parse_resource_slice,
)
from ..api.nodepool import parse_nodepool
from ..api.parse import parse_node, parse_pdb, parse_pod
from ..api.podgroup import PodGroup, describe_validation_error
from ..api.quantity import EVENT_OUT_OF_RANGE
from ..api.records import GroupKey, ObjectError, PodInfo
from ..api.sources import GroupSource, implied_group, is_implied, parse_composite, parse_group, parse_workload
from ..cluster import tree as trees
from ..cluster.cache import ClusterCache, InvalidObject
from ..cluster.tree import parent_of
from ..framework import events as E
from ..framework.framework import Framework
from ..queue.scheduling_queue import SchedulingQueue, State, UnitKey, group_unit, tree_unit, unit_of
from . import metrics
from .outputs import CapacityRequester, ClaimLifecycle, StatusWriter
from .reporting import WaitingReporter
from .schedule_podgroup import Assignment

log = logging.getLogger(__name__)
_T = TypeVar("_T")

# Deleted pods remembered, for claims whose reservation arrives after the deletion.
GONE_PODS_KEPT = 10_000


class EventHandlers:
    """The event half of `Scheduler` (a mixin: it shares the Scheduler's state)."""

    cache: ClusterCache
    queue: SchedulingQueue
    frameworks: dict[str, Framework]
    writer: StatusWriter
    reporter: WaitingReporter
    _reserved: dict[str, tuple[Framework, Assignment]]  # pods reserved and not yet bound
    nominated: dict[str, tuple[str, PodInfo]]  # preemptors waiting for victims: uid -> (node, pod)
    reserved: dict[str, tuple[float | None, float]]  # nominated to a reservation: uid -> (free at, since)
    claim_lifecycle: ClaimLifecycle | None  # the runtime's; None in a simulation
    capacity: CapacityRequester | None  # the runtime's: asks autoscalers for nodes
    gone_pods: OrderedDict[str, None]  # uids of pods recently deleted, oldest first
    claim_waiters: dict[tuple[str, str], set[str]]  # claim -> pending pods that name it
    synced: Any  # asyncio.Event: the initial listing is in the cache
    sources: tuple[GroupSource, ...]  # the group sources on, in rule order (api/sources)

    def drop_nomination(self, uid: str) -> None:
        """The pod is bound, gone or no longer nominated: its held room is free."""
        self.nominated.pop(uid, None)
        self.reserved.pop(uid, None)

    def release_room(self, unit: UnitKey) -> None:
        """The unit (a lone pod's, a PodGroup's or a whole tree's) is deleted,
        lost a pod or waits at its gate: the room nominated to its pods (a
        preemption's or a reservation's) is let go at once, and their
        nominatedNodeName cleared, so that nothing is held for a unit that
        cannot use it. A tree's room goes whole: it is placed anew as one."""
        if not self.nominated:
            return
        released = False
        for nominee, (_, pod) in list(self.nominated.items()):
            if unit_of(pod) == unit:
                self.drop_nomination(nominee)
                released = True
                current = self.cache.pods.get(nominee)
                if current is not None:
                    self.writer.nominate(current, "")
        if released:
            self._cluster_event(E.ASSIGNED_POD_DELETE)  # room freed, as if its pods had run there and gone

    def with_group_priority(self, pod: PodInfo) -> PodInfo:
        """The pod with its unit's priority: its tree root's, where the root
        has one (a tree has one priority, its root's, as upstream), else its
        PodGroup's, where that has one; else its own."""
        return pod.with_group_priority(self._unit_priority(pod))

    def _unit_priority(self, pod: PodInfo) -> int | None:
        classes = self.cache.priority_classes
        root = self.cache.composites.get(pod.tree) if pod.tree is not None else None
        if isinstance(root, CompositePodGroup):
            found = root.priority_in(classes)
            if found is not None:
                return found
        group = self.cache.groups.get(pod.group) if pod.group is not None else None
        return _priority_of(group, classes)

    def _tree_priority_changed(self, key: GroupKey) -> None:
        """The priority of the tree the CompositePodGroup `key` heads may have
        changed: every pod under it takes it again."""
        for leaf in self.cache.leaves_under(key):
            self._group_priority_changed(leaf)

    def _group_priority_changed(self, key: GroupKey) -> None:
        """The group's priority may have changed (the group or its
        PriorityClass changed, or it is gone): its pods take it everywhere
        (queue order, nominated room, preemption as preemptor and victim)."""
        for pod in list(self.cache.members(key)):
            updated = self.with_group_priority(pod)
            if updated is not pod:
                self._replace_pod(updated)

    def _replace_pod(self, updated: PodInfo) -> None:
        """A pod record re-derived from its groups (its priority, its tree)
        takes the old one's place: in the cache, the nominations, the queue
        (which moves it to its unit)."""
        self.cache.upsert_pod(updated)
        held = self.nominated.get(updated.uid)
        if held is not None:
            self.nominated[updated.uid] = (held[0], updated)
        if self.is_pending(updated):
            self.queue.add(updated)

    def unit_of_group(self, key: GroupKey) -> UnitKey:
        """The unit the pods of the PodGroup `key` wait in: its tree's, where it has one."""
        top, _ = self.cache.top_of(key)
        return tree_unit(top) if top is not None else group_unit(key)

    def unit_of_asker(self, key: GroupKey) -> UnitKey:
        """The unit of the group or tree root `key` that asked for capacity."""
        return tree_unit(key) if key in self.cache.composites else self.unit_of_group(key)

    def _retree(self, keys: Iterable[GroupKey]) -> None:
        """The trees of these PodGroups may have changed (a parent named,
        made or deleted): their pods move to the unit of their tree now."""
        for key in keys:
            top, _ = self.cache.top_of(key)
            for pod in list(self.cache.members(key)):
                updated = pod.with_tree(top)
                updated = self.with_group_priority(updated)  # a tree's root gives its priority
                if updated is pod:
                    continue
                self._replace_pod(updated)
                if self.is_pending(updated):
                    self.reporter.report_if_gated(unit_of(updated), updated)

    def is_ours(self, pod: PodInfo) -> bool:
        return pod.scheduler_name in self.frameworks

    def is_pending(self, pod: PodInfo) -> bool:
        """Ours, unbound, alive, and not being bound right now: a pod assumed
        onto a node stays out of the queue until the watch confirms the binding
        (or the bind fails and it is requeued), whatever other updates arrive."""
        return (
            self.is_ours(pod)
            and not pod.node_name
            and not pod.terminal
            and not pod.deleting
            and pod.uid not in self.cache.assumed
        )

    def still_waiting(self, uid: str) -> Callable[[], bool]:
        """For the status writer: is the pod still unplaced when its condition is written?"""

        def check() -> bool:
            pod = self.cache.pods.get(uid)
            return pod is not None and self.is_pending(pod)

        return check

    def _unreserve(self, uid: str) -> None:
        """A reserved pod will not be bound (bind failed, pod deleted): Unreserve it."""
        held = self._reserved.pop(uid, None)
        if held is not None:
            fwk, a = held
            fwk.run_unreserve(a.state, a.pod, a.node)

    def _reserved_done(self, uid: str) -> None:
        """A reserved pod is bound: what its plugins hold is the cluster's now."""
        self._reserved.pop(uid, None)

    # ------------------------------------------------------------------- pods

    def on_pod(self, body: Mapping[str, Any]) -> None:
        try:
            pod = parse_pod(body, self.sources, self._tree_of)
        except ObjectError as exc:
            meta = body.get("metadata") or {}
            log.warning("ignoring pod %s/%s: %s", meta.get("namespace"), meta.get("name"), exc)
            return
        pod = self._in_sub_group(pod)
        if pod.group is not None:
            self._imply_group(pod)
            pod = self.with_group_priority(pod)
        old = self.cache.upsert_pod(pod)
        if pod.problem and (old is None or old.problem != pod.problem):
            # One line per change (its cycle says it on the pod): counted as
            # if it asked none of that, and not scheduled (core/scheduler.py).
            log.warning("pod %s: %s", pod.key, pod.problem)
        for event in E.pod_update_events(old, pod):
            self._cluster_event(event)
        if self.is_pending(pod):
            self._enqueue(pod, old)
        else:
            self.queue.delete(pod.uid)
            self.reporter.forget_pod(pod.uid)
            self.drop_nomination(pod.uid)
        if pod.terminal and not (old is not None and old.terminal):
            self._release_claims(pod.uid)  # a finished pod holds no devices
        if pod.group is not None:
            self._member_updated(pod, pod.group, old)
        if old is not None and old.group is not None and old.group != pod.group:
            self._drop_empty_sub_group(old.group)  # its labels moved it to another sub-group

    def _tree_of(self, group: GroupKey) -> GroupKey | None:
        return self.cache.top_of(group)[0]

    def _enqueue(self, pod: PodInfo, old: PodInfo | None) -> None:
        """A pending pod into the queue (and, gated, said why it waits)."""
        if (
            pod.nominated_node_name
            and pod.uid not in self.nominated
            and (old is None or old.nominated_node_name != pod.nominated_node_name)
        ):
            # Nominated by an earlier leader (a preemptor's or a reservation's
            # room): held again, as upstream's nominator does after a restart.
            # Only when the API's value is new: an update that still shows a
            # nomination this process has just let go is not one.
            self.nominated[pod.uid] = (pod.nominated_node_name, pod)
        for claim_key in _claim_keys(pod):  # DynamicResources' PreEnqueue may hold it for one
            self.claim_waiters.setdefault(claim_key, set()).add(pod.uid)
        self.queue.add(pod)
        self.reporter.report_if_gated(unit_of(pod), pod)

    def _member_updated(self, pod: PodInfo, group: GroupKey, old: PodInfo | None) -> None:
        """A pod of `group` added or updated: the gang is judged again when its
        membership changed, and the source's counts written when they may have."""
        if old is None or old.group != group or old.terminal != pod.terminal:
            # Membership changed: the gang (or its tree) may now have minCount pods.
            key = self.unit_of_group(group)
            self.queue.activate(key)
            self.reporter.report_if_gated(key)
        if old is None or old.phase != pod.phase or old.node_name != pod.node_name or old.group != group:
            self._members_changed(group)

    def _imply_group(self, pod: PodInfo, gone: bool = False) -> None:
        """A source with no group object (Kueue): the group is what its pods
        declare together (`declared_size`: Kueue's rule, whatever order the
        events come in), made with its first pod and kept while a pod of it
        exists. `pod` has just changed (`gone`: been deleted) and the cache
        does not show it yet. A change requeues the group's unit: no other
        event says that its size or its problem changed."""
        key = pod.group
        assert key is not None
        if not is_implied(key):
            return  # the source has group objects of its own
        current = self.cache.groups.get(key)
        if isinstance(current, PodGroup) and not gone and self._declares_nothing_new(pod, current):
            return
        made = self._implied_group(pod, key, current, gone)
        if made is None:
            return
        if isinstance(current, PodGroup) and (current.min_count, current.problem) == (made.min_count, made.problem):
            return
        self.cache.upsert_group(key, made)
        if current is not None:
            # Waiting (gated, unschedulable, backing off after the problem) for
            # this size or this fix: judged again now, as for a Workload that appears.
            unit = group_unit(key)
            self.queue.activate(unit, skip_backoff=True)
            self.reporter.report_if_gated(unit)

    def _declares_nothing_new(self, pod: PodInfo, current: PodGroup) -> bool:
        """Whether the updated `pod` leaves its implied group as it is, known
        without reading the other pods."""
        old = self.cache.pods.get(pod.uid)
        says = (pod.phase == "Failed", pod.group_size)  # what declared_size reads of a pod
        if old is not None and old.group == pod.group and (old.phase == "Failed", old.group_size) == says:
            return True  # what this pod declares is in the group already
        # One more pod that agrees: O(1) per pod while a large group arrives.
        return old is None and not current.problem and says == (False, current.min_count)

    def _implied_group(
        self, pod: PodInfo, key: GroupKey, current: PodGroup | InvalidObject | None, gone: bool
    ) -> PodGroup | None:
        """The group its pods declare once `pod` has changed (or is gone);
        None when no pod is left (on_pod_deleted drops the group) or they
        declare none."""
        members = [p for p in self.cache.members(key) if p.uid != pod.uid]
        if not gone:
            members.append(pod)
        if not members:
            return None
        created = current.metadata.creation_timestamp if isinstance(current, PodGroup) else pod.creation_timestamp
        return implied_group(key, members, created)

    def _members_changed(self, key: GroupKey) -> None:
        group = self.cache.groups.get(key)
        if isinstance(group, PodGroup) and group.made_from is not None:
            group = self.cache.groups.get(group.made_from)  # a sub-group's pods count in its PodGroup
        if isinstance(group, PodGroup):
            self.writer.group_members(group)

    def on_pod_deleted(self, body: Mapping[str, Any]) -> None:
        uid = str((body.get("metadata") or {}).get("uid") or "")
        held_room = bool(self.cache.placed_node(uid))  # bound, or assumed while binding
        self._unreserve(uid)
        self.drop_nomination(uid)
        old = self.cache.remove_pod(uid)
        for claim_key in _claim_keys(old) if old is not None else ():
            waiting = self.claim_waiters.get(claim_key)
            if waiting is not None:
                waiting.discard(uid)
                if not waiting:
                    del self.claim_waiters[claim_key]
        self.queue.delete(uid)
        self.reporter.forget_pod(uid)
        self.writer.forget_pod(uid)
        self.gone_pods[uid] = None
        if len(self.gone_pods) > GONE_PODS_KEPT:
            self.gone_pods.popitem(last=False)
        self._release_claims(uid)
        if old is None:
            return
        if held_room and not old.terminal:
            self._cluster_event(E.ASSIGNED_POD_DELETE)
        if old.group is not None:
            self._imply_group(old, gone=True)  # the size the pods left declare (Kueue)
            self.release_room(unit_of(old))  # a gang (or a tree) that lost a pod is placed anew
            key = self.unit_of_group(old.group)
            self.queue.regate(key)
            self.reporter.report_if_gated(key)
            self._members_changed(old.group)
            if is_implied(old.group) and not any(True for _ in self.cache.members(old.group)):
                self.cache.remove_group(old.group)  # the last pod of a group made of its pods
            self._drop_empty_sub_group(old.group)

    # ------------------------------------------------------------------ nodes

    def on_node(self, body: Mapping[str, Any]) -> None:
        try:
            node = parse_node(body)
        except ObjectError as exc:
            log.warning("ignoring node %s: %s", (body.get("metadata") or {}).get("name"), exc)
            return
        old = self.cache.node(node.name)
        if old == node:
            return  # a heartbeat: nothing the scheduler reads changed
        if node.problem and (old is None or old.problem != node.problem):  # once per change
            note = f"{node.problem}; troupe takes it as absent: no pod that asks for it is placed on this node"
            log.warning("node %s: %s", node.name, note)
            self.writer.node_event(node, "Warning", EVENT_OUT_OF_RANGE, note, "Scheduling")
        self.cache.upsert_node(node)
        for event in [E.NODE_ADD] if old is None else E.node_update_events(old, node):
            self._cluster_event(event)
        if self.cache.capacity_asked:
            self._wake_askers(node.labels)

    def _wake_askers(self, labels: Mapping[str, str]) -> None:
        """A node asked of an autoscaler came or changed (registered, became
        Ready, lost its startup taint): the units it was asked for are tried
        now, backoff or not, oldest first (the queue's order), so they hold
        room on it before a unit that came later takes it. Otherwise a unit
        backing off finds the nodes made for it taken, its stand-ins still
        pending, and the autoscaler making nodes for it again."""
        for unit, plan in self.cache.capacity_asked.items():
            if plan.made_for(labels):
                self.queue.activate(self.unit_of_asker(unit), skip_backoff=True)

    def on_node_deleted(self, body: Mapping[str, Any]) -> None:
        name = str((body.get("metadata") or {}).get("name") or "")
        if self.cache.node(name) is not None:
            self.cache.remove_node(name)
            self._cluster_event(E.NODE_DELETE)

    def _cluster_event(self, event: str) -> None:
        moved = self.queue.move_for_event(event)
        if moved:
            metrics.QUEUE_INCOMING.labels(event=event).inc(moved)

    # --------------------------------------------------- PodGroups, Workloads

    def on_podgroup(self, body: Mapping[str, Any]) -> None:
        """A PodGroup of any source (api/sources: chosen by its apiVersion)."""
        key = group_key_of(body)
        old = self.cache.groups.get(key)
        try:
            group: PodGroup | InvalidObject = parse_group(body)
        except ValidationError as exc:
            group = InvalidObject(describe_validation_error(exc))
            if not (isinstance(old, InvalidObject) and old.message == group.message):  # once, not per event
                log.warning("%s is invalid: %s", key, group.message)
        if isinstance(group, PodGroup) and group.problem and not (isinstance(old, PodGroup) and old.problem):
            log.warning("%s is not scheduled: %s", key, group.problem)
        self.cache.upsert_group(key, group)
        if subgroups.tree_shape(old) != subgroups.tree_shape(group):
            self._remake_sub_groups(key)
        if _priority_of(old, self.cache.priority_classes) != _priority_of(group, self.cache.priority_classes):
            self._group_priority_changed(key)
        if parent_of(old) != parent_of(group):
            self._retree([key])
        if isinstance(group, PodGroup) and self.synced.is_set():
            self._make_group_claims(group)
        if isinstance(old, PodGroup) and isinstance(group, PodGroup) and old.spec == group.spec:
            return  # only our own status write came back
        unit = self.unit_of_group(key)
        self.queue.activate(unit)
        self.reporter.report_if_gated(unit)

    def on_podgroup_deleted(self, body: Mapping[str, Any]) -> None:
        key = group_key_of(body)
        old = self.cache.groups.get(key)
        was = self.unit_of_group(key)
        self.cache.remove_group(key)
        if subgroups.tree_shape(old) is not None:
            self._remake_sub_groups(key)  # its pods wait for it again, outside the tree it made
        if _priority_of(old, self.cache.priority_classes) is not None:
            self._group_priority_changed(key)  # its pods have their own again
        if parent_of(old) is not None:
            self._retree([key])  # its pods wait for it outside the tree
        for unit in {was, group_unit(key)}:
            self.release_room(unit)
            self.queue.regate(unit)
            self.reporter.report_if_gated(unit)
        self.forget_capacity(key)
        uid = str((body.get("metadata") or {}).get("uid") or "")
        if uid:
            made = list(self.cache.dra.owned_by(uid).values())
            if made and self.claim_lifecycle is not None:
                self.claim_lifecycle.delete_group_claims(uid, made)  # made from its templates: they go with it
            if self.claim_lifecycle is not None:
                for claim in self.cache.dra.reserved_for(uid):
                    if claim not in made:
                        self.claim_lifecycle.release(claim, uid)

    # ------------------------------------- Volcano sub-groups (api/subgroups.py)

    def _in_sub_group(self, pod: PodInfo) -> PodInfo:
        """A pod of a PodGroup with sub-groups, in its sub-group: the
        PodGroup troupe makes of it (with its first pod) in the tree under
        the PodGroup. Other pods as they are."""
        group = self.cache.groups.get(pod.group) if pod.group is not None else None
        if not isinstance(group, PodGroup) or subgroups.tree_shape(group) is None:
            return pod
        key, made = subgroups.leaf_key(group, pod.labels)
        if key not in self.cache.groups:
            self.cache.upsert_group(key, made)
        return pod.in_group(key, group.key)

    def _drop_empty_sub_group(self, key: GroupKey) -> None:
        """A sub-group troupe made goes with its last pod."""
        group = self.cache.groups.get(key)
        if (
            isinstance(group, PodGroup)
            and group.made_from is not None
            and not any(True for _ in self.cache.members(key))
        ):
            self.cache.remove_group(key)

    def _remake_sub_groups(self, key: GroupKey) -> None:
        """The PodGroup `key` was made, changed what its tree is made of, or
        was deleted: the tree troupe made of it is made again (or dropped),
        and every pod of it moves to its sub-group there (or back to the
        PodGroup it names). Rare: a scan of its pods is fine."""
        pods = [p for k in (key, *self.cache.made_leaves(key)) for p in self.cache.members(k)]
        for unit in (group_unit(key), tree_unit(key)):
            self.release_room(unit)  # room held for the unit as it was
        for leaf in self.cache.made_leaves(key):
            self.cache.remove_group(leaf)
        for made in [k for k in (key, *self.cache.child_composites.get(key, ())) if k in self.cache.composites]:
            composite = self.cache.composites[made]
            if isinstance(composite, CompositePodGroup) and composite.made_from == key:
                self.cache.remove_composite(made)
        group = self.cache.groups.get(key)
        if isinstance(group, PodGroup) and subgroups.tree_shape(group) is not None:
            for composite in subgroups.skeleton(group):
                self.cache.upsert_composite(composite.key, composite)
        for pod in pods:
            updated = self.with_group_priority(self._in_sub_group(pod.in_group(key, None)))
            if updated is not pod:
                self._replace_pod(updated)
        for unit in (group_unit(key), tree_unit(key)):
            self.queue.activate(unit)
            self.reporter.report_if_gated(unit)

    def on_composite(self, body: Mapping[str, Any]) -> None:
        """A CompositePodGroup of any source (api/sources)."""
        key = group_key_of(body)
        old = self.cache.composites.get(key)
        try:
            composite: CompositePodGroup | InvalidObject = parse_composite(body)
        except ValidationError as exc:
            composite = InvalidObject(describe_validation_error(exc))
            if not (isinstance(old, InvalidObject) and old.message == composite.message):
                log.warning("CompositePodGroup %s is invalid: %s", key, composite.message)
        self.cache.upsert_composite(key, composite)
        if old is None or parent_of(old) != parent_of(composite):
            self._retree(self.cache.leaves_under(key))  # with the priority of the root they are under now
        elif _priority_of(old, self.cache.priority_classes) != _priority_of(composite, self.cache.priority_classes):
            self._tree_priority_changed(key)
        if (
            isinstance(old, CompositePodGroup)
            and isinstance(composite, CompositePodGroup)
            and old.spec == composite.spec
        ):
            return  # only our own status write came back
        self._tree_changed(key)

    def on_composite_deleted(self, body: Mapping[str, Any]) -> None:
        key = group_key_of(body)
        leaves = self.cache.leaves_under(key)
        top, _ = trees.top_of(self.cache.composites, key)
        if top == key:
            self.forget_capacity(key)
        self.release_room(tree_unit(top))  # the whole tree it was part of waits again, not only below it
        self.cache.remove_composite(key)
        self._retree(leaves)  # they wait for it again: their unit is now this (missing) key
        self._tree_changed(key)

    def _tree_changed(self, key: GroupKey) -> None:
        """The tree the CompositePodGroup `key` is part of is judged again:
        its gate (it may be complete or ready now), then a cycle."""
        top, _ = trees.top_of(self.cache.composites, key)
        unit = tree_unit(top)
        self.queue.activate(unit)
        self.reporter.report_if_gated(unit)

    def on_group_problem(self, key: GroupKey, problem: str | None) -> None:
        """A PodGroup that pods name will not be made (`problem`: e.g. its
        opted-in Job asks for one troupe cannot make), or that is over (None):
        its waiting pods say so (GangScheduling's gate)."""
        if problem is None:
            if self.cache.group_problems.pop(key, None) is None:
                return
        elif self.cache.group_problems.get(key) == problem:
            return
        else:
            self.cache.group_problems[key] = problem
        unit = self.unit_of_group(key)
        self.queue.regate(unit)
        self.reporter.report_if_gated(unit)

    def on_group_resizing(self, key: GroupKey, min_count: int | None) -> None:
        """troupe is raising the gang `key`'s minCount to `min_count` (its Job
        was scaled; the patch is on its way), or None: not any more. Until
        the PodGroup shows it, its pods wait (GangScheduling's gate), so the
        pods added for the new size are placed as one increment instead of
        one by one under the old minimum."""
        group = self.cache.groups.get(key)
        if min_count is not None and not (
            isinstance(group, PodGroup) and group.is_gang and group.min_count < min_count
        ):
            min_count = None  # not a gang, or not a rise: nothing to hold back
        unit = self.unit_of_group(key)
        if min_count is None:
            if self.cache.resizing.pop(key, None) is None:
                return
            self.queue.activate(unit)  # its pods may go now
        else:
            self.cache.resizing[key] = min_count
            self.queue.regate(unit)
        self.reporter.report_if_gated(unit)

    def on_source_problem(self, source: str, problem: str | None) -> None:
        """No PodGroup of `source` (a GroupKey.source) can be read here (its API
        is not served: `problem`), or now can (None): pods that name one say so."""
        if self.cache.source_problems.get(source) == problem:
            return
        if problem is None:
            self.cache.source_problems.pop(source, None)
        else:
            self.cache.source_problems[source] = problem
        for unit in list(self.queue.units()):
            if unit.key.is_group and unit.key.source == source:
                self.queue.regate(unit.key)
                self.reporter.report_if_gated(unit.key)

    def on_workload(self, body: Mapping[str, Any]) -> None:
        key = group_key_of(body)
        try:
            self.cache.upsert_workload(key, parse_workload(body))
        except ValidationError as exc:
            self.cache.upsert_workload(key, InvalidObject(describe_validation_error(exc)))
        self._activate_groups_of_workload(key)

    def on_workload_deleted(self, body: Mapping[str, Any]) -> None:
        key = group_key_of(body)
        self.cache.remove_workload(key)
        self._activate_groups_of_workload(key)

    def _activate_groups_of_workload(self, key: GroupKey) -> None:
        """PodGroups naming this Workload are judged again (Workload events are rare: a scan is fine)."""
        for group_key, group in list(self.cache.groups.items()):
            if (
                not isinstance(group, PodGroup)
                or group_key.namespace != key.namespace
                or group_key.source != key.source
            ):
                continue
            ref = group.spec.pod_group_template_ref
            if ref is not None and ref.workload is not None and ref.workload.workload_name == key.name:
                self.queue.activate(group_unit(group_key), skip_backoff=True)

    # --------------------------------------------- Namespaces, PriorityClasses

    def on_nodepool(self, body: Mapping[str, Any], deleted: bool = False) -> None:
        """A Karpenter NodePool (api/nodepool.py): what new capacity may be
        asked of. A change may help any unit that waits: all are tried again
        (NodePools change seldom)."""
        name = str((body.get("metadata") or {}).get("name") or "")
        old = self.cache.node_templates.get(name)
        if deleted:
            self.cache.node_templates.pop(name, None)
        else:
            try:
                template = parse_nodepool(body)
            except ObjectError as exc:
                log.warning("NodePool %s: %s; not asked for nodes", name or "(no name)", exc)
                return
            if template.problem and (old is None or old.problem != template.problem):
                log.warning("NodePool %s: %s; not asked for nodes", name, template.problem)
            self.cache.node_templates[name] = template
            if old is None:
                log.info("NodePool %s: troupe may ask it for nodes (labels %s)", name, dict(template.labels))
            if (
                old is not None
                and (old.limits, old.labels, old.choices)
                == (
                    template.limits,
                    template.labels,
                    template.choices,
                )
                and old.used == template.used
                and old.taints == template.taints
            ):
                return
        for unit in list(self.queue.units()):
            if unit.state == State.UNSCHEDULABLE:
                self.queue.activate(unit.key)

    def forget_capacity(self, unit: GroupKey) -> None:
        """The unit is gone: what was asked for it goes too (its stand-ins
        are owned by its group, and withdrawn here at once)."""
        self.cache.capacity_failed.pop(unit, None)
        self.cache.capacity_asked.pop(unit, None)
        if self.capacity is not None:
            self.capacity.withdraw(unit)  # (also what was adopted for it at a failover)

    def on_namespace(self, body: Mapping[str, Any], deleted: bool = False) -> None:
        meta = body.get("metadata") or {}
        name = str(meta.get("name") or "")
        if deleted:
            self.cache.namespace_labels.pop(name, None)
        else:
            self.cache.namespace_labels[name] = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}

    def on_priority_class(self, body: Mapping[str, Any], deleted: bool = False) -> None:
        name = str((body.get("metadata") or {}).get("name") or "")
        before = self.cache.priority_classes.get(name)
        if deleted:
            self.cache.priority_classes.pop(name, None)
        else:
            try:
                self.cache.priority_classes[name] = int(body.get("value") or 0)
            except (TypeError, ValueError):
                log.warning("ignoring PriorityClass %s: value is not an integer", name)
        if self.cache.priority_classes.get(name) != before:
            # PodGroups that name the class (rare objects: a scan is fine).
            for key, group in list(self.cache.groups.items()):
                if isinstance(group, PodGroup) and group.spec.priority_class_name == name:
                    self._group_priority_changed(key)
            for key, composite in list(self.cache.composites.items()):  # a tree's root gives its priority
                if isinstance(composite, CompositePodGroup) and composite.spec.priority_class_name == name:
                    self._tree_priority_changed(key)

    # ------------------------------------------------ PodDisruptionBudgets

    def on_pdb(self, body: Mapping[str, Any]) -> None:
        """Cached for preemption only: a PDB changes no pod's fit, so nothing is requeued."""
        key = _object_key(body)
        try:
            pdb = parse_pdb(body)
        except ObjectError as exc:
            # The API validates PDBs, so this is rare; drop what the cache held
            # rather than weigh victims against an older version of it.
            log.warning("ignoring PodDisruptionBudget %s/%s: %s", *key, exc)
            self.cache.pdbs.pop(key, None)
            return
        old = self.cache.pdbs.get(key)
        self.cache.pdbs[key] = pdb
        if old is None or old.disruptions_allowed != pdb.disruptions_allowed:
            # Few objects that change rarely; what preemption will weigh is worth a line.
            log.info("PodDisruptionBudget %s/%s: %d disruption(s) allowed", *key, pdb.disruptions_allowed)

    def on_pdb_deleted(self, body: Mapping[str, Any]) -> None:
        self.cache.pdbs.pop(_object_key(body), None)

    # ------------------------------------------------------------------- DRA

    def on_device_class(self, body: Mapping[str, Any], deleted: bool = False) -> None:
        self._cluster_dra_object(
            "DeviceClass", body, deleted, parse_device_class, self.cache.dra.upsert_class, self.cache.dra.remove_class
        )
        self._cluster_event(E.DEVICE_CLASS_CHANGE)

    def on_resource_slice(self, body: Mapping[str, Any], deleted: bool = False) -> None:
        self._cluster_dra_object(
            "ResourceSlice",
            body,
            deleted,
            parse_resource_slice,
            self.cache.dra.upsert_slice,
            self.cache.dra.remove_slice,
        )
        self._cluster_event(E.RESOURCE_SLICE_CHANGE)

    def on_device_taint_rule(self, body: Mapping[str, Any], deleted: bool = False) -> None:
        """A DeviceTaintRule: its taint is on the devices it picks, as if
        their slices said so (a taint removed may let a claim be allocated)."""
        dra = self.cache.dra
        self._cluster_dra_object(
            "DeviceTaintRule", body, deleted, parse_device_taint_rule, dra.upsert_taint_rule, dra.remove_taint_rule
        )
        self._cluster_event(E.RESOURCE_SLICE_CHANGE)

    @staticmethod
    def _cluster_dra_object(
        kind: str,
        body: Mapping[str, Any],
        deleted: bool,
        parse: Callable[[Mapping[str, Any]], _T],
        upsert: Callable[[_T], None],
        remove: Callable[[str], None],
    ) -> None:
        """A cluster-scoped DRA object into the store by name; one troupe
        cannot read is dropped (with a line saying why), not kept as it was."""
        name = _object_key(body)[1]
        if deleted:
            remove(name)
            return
        try:
            upsert(parse(body))
        except ObjectError as exc:
            log.warning("ignoring %s %s: %s", kind, name, exc)
            remove(name)

    def on_resource_claim(self, body: Mapping[str, Any], deleted: bool = False) -> None:
        key = _object_key(body)
        if deleted:
            self.cache.dra.remove_claim(key)
        else:
            try:
                claim = parse_resource_claim(body)
            except ObjectError as exc:
                log.warning("ignoring ResourceClaim %s/%s: %s", *key, exc)
                self.cache.dra.remove_claim(key)
            else:
                self.cache.dra.upsert_claim(claim)
                if self.synced.is_set():
                    self._release_orphans(claim)
                # Pods held at PreEnqueue until this claim existed: let them in.
                for uid in self.claim_waiters.pop(key, ()):
                    pod = self.cache.pods.get(uid)
                    if pod is not None and self.is_pending(pod):
                        self.queue.activate(unit_of(pod))
                        self.reporter.report_if_gated(unit_of(pod))
        self._cluster_event(E.RESOURCE_CLAIM_CHANGE)

    def _release_claims(self, uid: str) -> None:
        """A consumer is gone or finished: its claims let it go."""
        if self.claim_lifecycle is None:
            return
        for claim in self.cache.dra.reserved_for(uid):
            self.claim_lifecycle.release(claim, uid)

    def _release_orphans(self, claim: Any, unknown_too: bool = False) -> None:
        """Pods in `reservedFor` that finished, or that were deleted (a
        reservation can reach the cache after its pod's deletion did), are
        released. `unknown_too`: also pods the cache does not know, which
        after the initial listing means deleted while troupe was down (a
        watch event could otherwise be a new pod not seen yet)."""
        if self.claim_lifecycle is None:
            return
        for ref in claim.reserved_for:
            if ref.resource == "podgroups" and ref.api_group:
                group = self.cache.groups.get(GroupKey(claim.namespace, ref.name, ref.api_group))
                here = isinstance(group, PodGroup) and group.metadata.uid == ref.uid
                if unknown_too and not here:
                    self.claim_lifecycle.release(claim, ref.uid)
                continue
            if ref.resource != "pods" or ref.api_group:
                continue
            pod = self.cache.pods.get(ref.uid)
            if (pod is not None and pod.terminal) or ref.uid in self.gone_pods or (pod is None and unknown_too):
                self.claim_lifecycle.release(claim, ref.uid)

    def sweep_claims(self) -> None:
        """After the initial listing: release what pods gone meanwhile held,
        and make the PodGroup claims still missing."""
        for claim in list(self.cache.dra.claims.values()):
            self._release_orphans(claim, unknown_too=True)
        for group in list(self.cache.groups.values()):
            if isinstance(group, PodGroup):
                self._make_group_claims(group)

    def sweep_nominations(self) -> None:
        """On taking the lead: the room held is what the API shows, less what
        this replica let go while it could not write (a standby, or a leader
        that lost its lease, cannot clear a nomination: a group deleted or a
        unit gated meanwhile). Nominations this replica adopted are brought to
        the API's last word (a leader may have moved or cleared them since),
        and those it let go are cleared in the API, so that no later leader
        adopts them."""
        for uid, (node, _) in list(self.nominated.items()):
            pod = self.cache.pods.get(uid)
            if pod is None or not self.is_pending(pod) or not pod.nominated_node_name:
                self.drop_nomination(uid)
            elif pod.nominated_node_name != node:
                self.nominated[uid] = (pod.nominated_node_name, pod)
        for pod in list(self.cache.pods.values()):
            if pod.nominated_node_name and pod.uid not in self.nominated and self.is_pending(pod):
                self.writer.nominate(pod, "")

    def sweep_group_status(self) -> None:
        """After the initial listing: a PodGroup whose pods were bound but
        whose PodGroupScheduled=True was not written yet (status writes wait
        for binds, and the process may have stopped in between) gets it now:
        no cycle will run for it, nothing is left to place."""
        for key, group in list(self.cache.groups.items()):
            if not isinstance(group, PodGroup) or group.metadata.deletion_timestamp or group.made_from is not None:
                continue
            current = group.condition(C.POD_GROUP_SCHEDULED)
            if current is not None and current.status == "True":
                continue
            members = [p for k in (key, *self.cache.made_leaves(key)) for p in self.cache.members(k)]
            bound = sum(1 for p in members if p.node_name and not p.terminal and not p.deleting)
            if bound >= group.min_count:
                self.writer.group_condition(group, "True", C.REASON_SCHEDULED, f"{bound} pod(s) placed")

    def _make_group_claims(self, group: PodGroup) -> None:
        """The claims a PodGroup's `resourceClaimTemplateName` entries ask for,
        and their names in its status, where either is missing."""
        if self.claim_lifecycle is None or group.metadata.deletion_timestamp:
            return
        templates = [(c.name, c.resource_claim_template_name) for c in group.spec.resource_claims]
        if not any(t for _, t in templates):
            return
        made = self.cache.dra.owned_by(group.metadata.uid)
        recorded = {s.name: s.resource_claim_name for s in group.status.resource_claim_statuses}
        todo = [
            (name, template)
            for name, template in templates
            if template and (name not in made or recorded.get(name) != made[name].name)
        ]
        if todo:
            self.claim_lifecycle.make_group_claims(group, todo)

    # ------------------------------------------------------ the binder's word

    def on_bound(self, pod: PodInfo, node: str) -> None:
        metrics.POD_BINDINGS.labels(result="bound").inc()
        self._reserved_done(pod.uid)
        self.reporter.forget_pod(pod.uid)
        self.writer.forget_pod(pod.uid)
        self.writer.pod_event(
            pod, "Normal", C.EVENT_SCHEDULED, f"Successfully assigned {pod.namespace}/{pod.name} to {node}", "Binding"
        )

    def on_bind_failed(self, pod: PodInfo, node: str, message: str) -> None:
        metrics.POD_BINDINGS.labels(result="failed").inc()
        log.warning("bind %s -> %s: %s", pod.key, node, message)
        self._unreserve(pod.uid)
        self.cache.forget(pod.uid)
        current = self.cache.pods.get(pod.uid)
        if current is not None and self.is_pending(current):
            self.queue.requeue(current)
        if current is not None:
            self.writer.pod_event(current, "Warning", C.EVENT_FAILED_SCHEDULING, message, "Binding")
        self._cluster_event(E.ASSIGNED_POD_DELETE)  # the room it held is free again

    def on_bound_elsewhere(self, pod: PodInfo, node: str, bound_to: str) -> None:
        """Someone else bound the pod (409 to our bind): what its Reserve
        plugins hold for `node` is released at once, and the room it was
        assumed into moves to where it is, until the watch says so too."""
        metrics.POD_BINDINGS.labels(result="conflict").inc()
        self._unreserve(pod.uid)
        self.cache.forget(pod.uid)
        self.cache.assume(pod.uid, bound_to)  # a no-op if the watch already shows it bound
        self.reporter.forget_pod(pod.uid)
        self.writer.forget_pod(pod.uid)
        self._cluster_event(E.ASSIGNED_POD_DELETE)  # the room on `node` is free again

    def on_pod_gone(self, pod: PodInfo) -> None:
        """The API says the pod does not exist (its bind got 404): forget it as if
        its DELETED event had arrived (the watch may have missed it)."""
        metrics.POD_BINDINGS.labels(result="gone").inc()
        self.forget_object("pod", pod.namespace, pod.name, pod.uid)

    def forget_object(self, kind: str, namespace: str, name: str, uid: str = "", source: str = "") -> None:
        """Drop an object the API no longer has, through the same path as its
        DELETED event. `source`: a PodGroup's or Workload's GroupKey.source."""
        body: dict[str, Any] = {"metadata": {"namespace": namespace, "name": name, "uid": uid}}
        if source:
            body["apiVersion"] = source  # group_key_of reads the API group only
        {
            "pod": self.on_pod_deleted,
            "node": self.on_node_deleted,
            "podgroup": self.on_podgroup_deleted,
            "workload": self.on_workload_deleted,
            "compositepodgroup": self.on_composite_deleted,
            "pdb": self.on_pdb_deleted,
        }[kind](body)


def _claim_keys(pod: PodInfo) -> list[tuple[str, str]]:
    """The claims a pod names: by name, or for a template entry its PodGroup's
    claim (troupe names it `<group>-<entry>`)."""
    keys = []
    for ref in pod.resource_claims:
        if ref.claim_name:
            keys.append((pod.namespace, ref.claim_name))
        elif ref.template_name and pod.group is not None:
            keys.append((pod.namespace, group_claim_name(pod.group.name, ref.name)))
    return keys


def _priority_of(group: PodGroup | CompositePodGroup | InvalidObject | None, classes: Mapping[str, int]) -> int | None:
    return group.priority_in(classes) if isinstance(group, PodGroup | CompositePodGroup) else None


def _object_key(body: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, name) of a namespaced object body."""
    meta = body.get("metadata") or {}
    return (str(meta.get("namespace") or "default"), str(meta.get("name") or ""))


def group_key_of(body: Mapping[str, Any]) -> GroupKey:
    """The key of a PodGroup or Workload body: its kind's API group (from
    `apiVersion`; troupe's own where a tombstone carries none) is part of it."""
    namespace, name = _object_key(body)
    return GroupKey(namespace, name, str(body.get("apiVersion") or "").partition("/")[0] or C.GROUP)
