"""Cluster events, as upstream's ClusterEvent (resource/action).

A plugin lists in `events` the events that can make a pod it rejected
schedulable (upstream's EventsToRegister). When a unit comes back
unschedulable, the queue remembers the events its rejecting plugins listed,
and only those events move it out of the unschedulable pool; the periodic
flush moves it anyway after `maxUnschedulableSeconds`. A plugin that lists
nothing (`events = None`, the default for third-party plugins) is woken by
every event, which is always safe.

Events the gate handles (more pods of a group, a PodGroup created or its
minCount changed) do not go through here: they re-run PreEnqueue for that
one unit.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..api.records import NodeInfo, PodInfo

NODE_ADD = "Node/Add"
NODE_DELETE = "Node/Delete"
NODE_ALLOCATABLE = "Node/UpdateNodeAllocatable"  # some allocatable resource grew
NODE_LABEL = "Node/UpdateNodeLabel"
NODE_TAINT = "Node/UpdateNodeTaint"  # taints or spec.unschedulable changed

ASSIGNED_POD_ADD = "AssignedPod/Add"  # a pod was bound (or created bound)
ASSIGNED_POD_DELETE = "AssignedPod/Delete"  # a bound pod was deleted or finished: its room is free
ASSIGNED_POD_LABEL = "AssignedPod/UpdatePodLabel"
ASSIGNED_POD_SCALE_DOWN = "AssignedPod/UpdatePodScaleDown"  # a bound pod's requests shrank

# DRA objects (any change: claims allocated or released, devices published, classes edited).
RESOURCE_CLAIM_CHANGE = "ResourceClaim/Change"
RESOURCE_SLICE_CHANGE = "ResourceSlice/Change"
DEVICE_CLASS_CHANGE = "DeviceClass/Change"

ALL = frozenset(
    {
        RESOURCE_CLAIM_CHANGE,
        RESOURCE_SLICE_CHANGE,
        DEVICE_CLASS_CHANGE,
        NODE_ADD,
        NODE_DELETE,
        NODE_ALLOCATABLE,
        NODE_LABEL,
        NODE_TAINT,
        ASSIGNED_POD_ADD,
        ASSIGNED_POD_DELETE,
        ASSIGNED_POD_LABEL,
        ASSIGNED_POD_SCALE_DOWN,
    }
)


def node_update_events(old: NodeInfo, new: NodeInfo) -> list[str]:
    """What a Node update changed, as far as scheduling can tell. A shrinking
    node can help no pending pod, so it is no event (upstream's hints answer
    QueueSkip for it); heartbeats change nothing here at all."""
    events = []
    if any(v > old.allocatable.get(k, 0) for k, v in new.allocatable.items()):
        events.append(NODE_ALLOCATABLE)
    if old.labels != new.labels:
        events.append(NODE_LABEL)
    if old.taints != new.taints or old.unschedulable != new.unschedulable:
        events.append(NODE_TAINT)
    return events


def _occupies(pod: PodInfo | None) -> bool:
    return pod is not None and bool(pod.node_name) and not pod.terminal


def pod_update_events(old: PodInfo | None, new: PodInfo) -> list[str]:
    """What a pod add/update means for other pods (its own pending state is the queue's business)."""
    was, now = _occupies(old), _occupies(new)
    if not was and now:
        return [ASSIGNED_POD_ADD]
    if was and not now:
        return [ASSIGNED_POD_DELETE]
    if not (was and now):
        return []
    assert old is not None
    events = []
    if old.labels != new.labels:
        events.append(ASSIGNED_POD_LABEL)
    if any(v < old.requests.get(k, 0) for k, v in new.requests.items()) or set(old.requests) - set(new.requests):
        events.append(ASSIGNED_POD_SCALE_DOWN)
    return events


def union(plugin_events: Iterable[frozenset[str] | None]) -> frozenset[str] | None:
    """The events that may help a unit its plugins rejected; None means any event."""
    out: set[str] = set()
    for events in plugin_events:
        if events is None:
            return None
        out |= events
    return frozenset(out)
