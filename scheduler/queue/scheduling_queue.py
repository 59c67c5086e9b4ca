"""The scheduling queue, as upstream's, at group granularity.

The unit of queueing is a *scheduling unit*: all pending pods of one PodGroup,
or a single pod that belongs to no group. A unit is in exactly one place:

- gated:          PreEnqueue said wait (no PodGroup yet, fewer than minCount pods, scheduling gates)
- active:         a heap ordered by priority (high first), then first-seen time
- backoff:        failed recently; returns to active when its backoff expires
- unschedulable:  tried and did not fit; waits for a cluster event that may help
                  it (one its rejecting plugins registered, framework/events.py),
                  or for `max_unschedulable` seconds (upstream's periodic flush)
- in flight:      being scheduled; pods that arrive meanwhile are kept and
                  merged into the next attempt

No pod is ever dropped: a pod leaves the queue only when it is bound, deleted,
or stops being ours.
"""

from __future__ import annotations

import asyncio
import enum
import heapq
import itertools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from ..api.records import GroupKey, PodInfo


class UnitKind(enum.StrEnum):
    GROUP = "group"  # the pending pods of one PodGroup
    POD = "pod"  # one pod that belongs to no PodGroup
    TREE = "tree"  # the pending pods of a tree's PodGroups, keyed by its root CompositePodGroup


class UnitKey(NamedTuple):
    """A scheduling unit: a PodGroup (namespace, name, source) or a lone pod
    ("", uid). A NamedTuple: hashed and compared as fast as the tuple it is."""

    kind: UnitKind
    namespace: str
    name: str  # the PodGroup's name, or the lone pod's uid
    source: str = ""  # the PodGroup's GroupKey.source

    @property
    def is_group(self) -> bool:
        return self.kind is UnitKind.GROUP

    @property
    def is_tree(self) -> bool:
        return self.kind is UnitKind.TREE

    @property
    def group_key(self) -> GroupKey | None:
        """The PodGroup's key, None for a lone pod or a tree."""
        return GroupKey(self.namespace, self.name, self.source) if self.kind is UnitKind.GROUP else None

    @property
    def tree_key(self) -> GroupKey | None:
        """The root CompositePodGroup's key (or its first missing ancestor's), for a tree."""
        return GroupKey(self.namespace, self.name, self.source) if self.kind is UnitKind.TREE else None

    def __str__(self) -> str:
        if self.kind is UnitKind.TREE:
            return f"CompositePodGroup {self.namespace}/{self.name}"
        return str(GroupKey(self.namespace, self.name, self.source)) if self.is_group else f"pod {self.name}"


def group_unit(key: GroupKey) -> UnitKey:
    return UnitKey(UnitKind.GROUP, key.namespace, key.name, key.source)


def pod_unit(uid: str) -> UnitKey:
    return UnitKey(UnitKind.POD, "", uid)


def tree_unit(key: GroupKey) -> UnitKey:
    return UnitKey(UnitKind.TREE, key.namespace, key.name, key.source)


def unit_of(pod: PodInfo) -> UnitKey:
    if pod.tree is not None:
        return tree_unit(pod.tree)
    return group_unit(pod.group) if pod.group is not None else pod_unit(pod.uid)


class State(enum.Enum):
    GATED = "gated"
    ACTIVE = "active"
    BACKOFF = "backoff"
    UNSCHEDULABLE = "unschedulable"
    IN_FLIGHT = "in-flight"


@dataclass(slots=True)
class QueuedPod:
    pod: PodInfo
    first_seen: float


@dataclass(slots=True)
class Unit:
    key: UnitKey
    pods: dict[str, QueuedPod] = field(default_factory=dict)
    state: State = State.GATED
    attempts: int = 0
    backoff_until: float = 0.0
    unschedulable_since: float = 0.0
    heap_version: int = 0
    in_flight: frozenset[str] = frozenset()  # uids handed to the current attempt
    dirty: bool = False  # the unit itself changed while in flight: retry at once
    events_in_flight: set[str] = field(default_factory=set)  # cluster events during the attempt
    # The cluster events that may help it after its last failure (None: any).
    wake_on: frozenset[str] | None = None
    # Retried after this many seconds as unschedulable even if no event helps
    # (None: after max_unschedulable only).
    retry_within: float | None = None
    # Heap order of the unit, kept up to date incrementally (units can hold
    # thousands of pods; recomputing per added pod would be quadratic).
    priority: int = 0
    first_seen: float = 0.0

    def include(self, queued: QueuedPod) -> None:
        if len(self.pods) == 1:
            self.priority, self.first_seen = queued.pod.priority, queued.first_seen
        else:
            self.priority = max(self.priority, queued.pod.priority)
            self.first_seen = min(self.first_seen, queued.first_seen)

    def recompute(self) -> None:
        self.priority = max((q.pod.priority for q in self.pods.values()), default=0)
        self.first_seen = min((q.first_seen for q in self.pods.values()), default=0.0)


@dataclass(frozen=True, slots=True)
class PoppedUnit:
    key: UnitKey
    pods: list[PodInfo]
    first_seen: dict[str, float]
    attempts: int


# Gate(unit key, pods) -> None to admit, or the message saying what the unit waits for.
# Pods come lazily: a gate that stops at the first pod it holds back costs O(1)
# per added pod while a big gang fills up, not O(pods).
Gate = Callable[[UnitKey, Iterable[PodInfo]], "str | None"]


class SchedulingQueue:
    def __init__(
        self,
        gate: Gate,
        initial_backoff: float = 1.0,
        max_backoff: float = 10.0,
        max_unschedulable: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._gate = gate
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.max_unschedulable = max_unschedulable
        self._clock = clock
        self._units: dict[UnitKey, Unit] = {}
        self._unit_of_pod: dict[str, UnitKey] = {}
        self._active: list[tuple[int, float, int, UnitKey, int]] = []
        self._backoff: list[tuple[float, int, UnitKey, int]] = []
        # Units in the unschedulable pool (lazily pruned: check unit.state), the
        # same indexed by the event that may help them (None: any event), and
        # their flush deadlines; the in-flight units. Events and pops touch only
        # these, never every unit.
        self._unschedulable: dict[UnitKey, Unit] = {}
        self._waiting_for: dict[str | None, dict[UnitKey, Unit]] = {}
        self._flush_heap: list[tuple[float, int, UnitKey, int]] = []
        self._in_flight: dict[UnitKey, Unit] = {}
        self._seq = itertools.count()
        self._wakeup = asyncio.Event()

    # ------------------------------------------------------------ inspection

    def __len__(self) -> int:
        """Pending pods (all states, in-flight included)."""
        return len(self._unit_of_pod)

    def __contains__(self, uid: object) -> bool:
        return uid in self._unit_of_pod

    def unit(self, key: UnitKey) -> Unit | None:
        return self._units.get(key)

    def units(self) -> Iterable[Unit]:
        return self._units.values()

    def counts(self) -> dict[str, int]:
        """Pending pods per state (for the scheduler_pending_pods metric)."""
        out = {s.value: 0 for s in State}
        for u in self._units.values():
            out[u.state.value] += len(u.pods)
        return out

    # ------------------------------------------------------------ transitions

    def _push_active(self, unit: Unit) -> None:
        unit.state = State.ACTIVE
        unit.heap_version = next(self._seq)
        heapq.heappush(self._active, (-unit.priority, unit.first_seen, next(self._seq), unit.key, unit.heap_version))
        self._wakeup.set()

    def _push_backoff(self, unit: Unit) -> None:
        unit.state = State.BACKOFF
        unit.heap_version = next(self._seq)
        heapq.heappush(self._backoff, (unit.backoff_until, next(self._seq), unit.key, unit.heap_version))
        self._wakeup.set()

    def _hold(self, unit: Unit) -> bool:
        """Run the gate; if it says wait, the unit becomes GATED. True if held."""
        message = self._gate(unit.key, (q.pod for q in unit.pods.values()))
        if message is None:
            return False
        unit.state = State.GATED
        unit.heap_version = next(self._seq)
        return True

    def _admit(self, unit: Unit) -> None:
        """Gated or waiting unit: run the gate, then active or backoff."""
        if self._hold(unit):
            return
        if unit.backoff_until > self._clock():
            self._push_backoff(unit)
        else:
            self._push_active(unit)

    def _backoff_duration(self, attempts: int) -> float:
        return min(self.initial_backoff * 2.0 ** max(attempts - 1, 0), self.max_backoff)

    # ---------------------------------------------------------------- events

    def add(self, pod: PodInfo) -> None:
        """A pending pod appeared (or changed). Idempotent."""
        key = unit_of(pod)
        old_key = self._unit_of_pod.get(pod.uid)
        if old_key is not None and old_key != key:
            self.delete(pod.uid)  # its group label changed
        unit = self._units.get(key)
        if unit is None:
            unit = self._units[key] = Unit(key)
        queued = unit.pods.get(pod.uid)
        if queued is not None:
            priority_changed = queued.pod.priority != pod.priority
            spec_changed = queued.pod.spec_key != pod.spec_key
            queued.pod = pod
            if priority_changed:
                unit.recompute()
                if unit.state == State.ACTIVE:
                    self._push_active(unit)
            if unit.state == State.GATED or (spec_changed and unit.state == State.UNSCHEDULABLE):
                self._admit(unit)
            elif spec_changed and unit.state == State.IN_FLIGHT:
                unit.dirty = True
            return
        queued = unit.pods[pod.uid] = QueuedPod(pod, self._clock())
        unit.include(queued)
        self._unit_of_pod[pod.uid] = key
        if unit.state == State.IN_FLIGHT:
            unit.dirty = True
        elif unit.state in (State.GATED, State.UNSCHEDULABLE):
            # More pods of the group can make it schedulable.
            self._admit(unit)
        elif unit.state == State.ACTIVE:
            self._push_active(unit)  # priority or first-seen may have changed

    def delete(self, uid: str) -> None:
        """The pod was deleted, bound elsewhere, or is no longer ours."""
        key = self._unit_of_pod.pop(uid, None)
        if key is None:
            return
        unit = self._units[key]
        gone = unit.pods.pop(uid, None)
        if gone is not None and (gone.pod.priority >= unit.priority or gone.first_seen <= unit.first_seen):
            unit.recompute()
        if not unit.pods and unit.state != State.IN_FLIGHT:
            unit.heap_version = next(self._seq)
            self._forget_unit(key)
        elif unit.state == State.GATED:
            self._admit(unit)

    def _forget_unit(self, key: UnitKey) -> None:
        """The unit has no pods left: drop it and its pool index entries."""
        del self._units[key]
        self._unschedulable.pop(key, None)
        for waiting in self._waiting_for.values():
            waiting.pop(key, None)

    def activate(self, key: UnitKey, skip_backoff: bool = False) -> None:
        """Something that concerns this unit changed (its PodGroup appeared or
        changed): re-run the gate, and retry it if it was waiting.
        `skip_backoff`: what it failed for is fixed (the Workload it named
        appeared), so a unit backing off is retried now too."""
        unit = self._units.get(key)
        if unit is None:
            return
        if skip_backoff and unit.state in (State.BACKOFF, State.UNSCHEDULABLE):
            unit.backoff_until = 0.0
            self._unschedulable.pop(key, None)
            self._admit(unit)  # the heap entry it had (backoff) is stale from here on
        elif unit.state == State.IN_FLIGHT:
            unit.dirty = True
        elif unit.state in (State.GATED, State.UNSCHEDULABLE):
            self._admit(unit)

    def regate(self, key: UnitKey) -> None:
        """The unit's gate may now say wait (e.g. its PodGroup was deleted)."""
        unit = self._units.get(key)
        if unit is None or unit.state == State.IN_FLIGHT:
            if unit is not None:
                unit.dirty = True
            return
        self._hold(unit)

    def move_for_event(self, event: str) -> int:
        """A cluster event happened (framework/events.py): retry the
        unschedulable units it may help, that is, those whose rejecting plugins
        registered it. Units in flight remember it for when their attempt
        ends. Returns how many units moved."""
        moved = 0
        for bucket in (event, None):
            for key, unit in self._waiting_for.pop(bucket, {}).items():
                if unit.state == State.UNSCHEDULABLE and self._units.get(key) is unit:
                    self._unschedulable.pop(key, None)
                    self._admit(unit)
                    moved += 1
        for unit in self._in_flight.values():
            unit.events_in_flight.add(event)
        return moved

    def _helped_in_flight(self, unit: Unit) -> bool:
        """Did an event during the attempt possibly help the unit it failed for?"""
        if not unit.events_in_flight:
            return False
        return unit.wake_on is None or not unit.wake_on.isdisjoint(unit.events_in_flight)

    def _make_unschedulable(self, unit: Unit) -> None:
        unit.backoff_until = self._clock() + self._backoff_duration(unit.attempts)
        unit.state = State.UNSCHEDULABLE
        unit.unschedulable_since = self._clock()
        unit.heap_version = next(self._seq)
        self._unschedulable[unit.key] = unit
        for event in unit.wake_on if unit.wake_on is not None else (None,):
            self._waiting_for.setdefault(event, {})[unit.key] = unit
        wait = self.max_unschedulable
        if unit.retry_within is not None:
            wait = min(wait, max(unit.retry_within, 0.0))
        heapq.heappush(
            self._flush_heap, (unit.unschedulable_since + wait, next(self._seq), unit.key, unit.heap_version)
        )
        self._wakeup.set()  # the flush deadline changed

    # -------------------------------------------------------------- popping

    def _flush(self, now: float) -> None:
        while self._backoff and self._backoff[0][0] <= now:
            _, _, key, version = heapq.heappop(self._backoff)
            unit = self._units.get(key)
            if unit is not None and unit.heap_version == version and unit.state == State.BACKOFF:
                self._push_active(unit)
        while self._flush_heap and self._flush_heap[0][0] <= now:
            _, _, key, version = heapq.heappop(self._flush_heap)
            unit = self._units.get(key)
            if unit is not None and unit.heap_version == version and unit.state == State.UNSCHEDULABLE:
                self._unschedulable.pop(key, None)
                self._admit(unit)

    def pop_nowait(self) -> PoppedUnit | None:
        self._flush(self._clock())
        while self._active:
            _, _, _, key, version = heapq.heappop(self._active)
            unit = self._units.get(key)
            if unit is None or unit.heap_version != version or unit.state != State.ACTIVE:
                continue
            unit.state = State.IN_FLIGHT
            self._in_flight[key] = unit
            unit.heap_version = next(self._seq)
            unit.dirty = False
            unit.events_in_flight = set()
            unit.in_flight = frozenset(unit.pods)
            unit.attempts += 1
            return PoppedUnit(
                key,
                [q.pod for q in unit.pods.values()],
                {uid: q.first_seen for uid, q in unit.pods.items()},
                unit.attempts,
            )
        return None

    def _next_deadline(self) -> float | None:
        # Heap tops may be stale entries: waking up early for one is harmless.
        deadlines = [self._backoff[0][0]] if self._backoff else []
        if self._flush_heap:
            deadlines.append(self._flush_heap[0][0])
        return min(deadlines) if deadlines else None

    async def pop(self) -> PoppedUnit:
        while True:
            popped = self.pop_nowait()
            if popped is not None:
                return popped
            self._wakeup.clear()
            deadline = self._next_deadline()
            timeout = None if deadline is None else max(deadline - self._clock(), 0.001)
            try:
                await asyncio.wait_for(self._wakeup.wait(), timeout)
            except TimeoutError:
                pass

    def done(
        self,
        key: UnitKey,
        placed: Iterable[str],
        unschedulable: bool,
        error: bool = False,
        wake_on: frozenset[str] | None = None,
        reset_backoff: bool = False,
        retry_within: float | None = None,
    ) -> None:
        """The attempt of `key` ended. `placed` pods leave the queue (they are
        binding); the others go back with their original first-seen times.
        `wake_on`: the cluster events that may help the pods left (None: any).
        `reset_backoff`: its backoff starts over (a unit holding reserved room
        binds as soon as the room is free, and takes no one's turn meanwhile).
        `retry_within`: retried after that many seconds even if no event helps."""
        self._in_flight.pop(key, None)
        unit = self._units.get(key)
        if unit is None:
            return
        if reset_backoff:
            unit.attempts = 1
        for uid in placed:
            if unit.pods.pop(uid, None) is not None:
                self._unit_of_pod.pop(uid, None)
            elif uid in self._unit_of_pod:
                # Re-labelled into another unit while this attempt placed it: it
                # is binding now, so it leaves the queue wherever it went.
                self.delete(uid)
        unit.recompute()
        attempted = unit.in_flight
        unit.in_flight = frozenset()
        self._in_flight.pop(key, None)
        if not unit.pods:
            self._forget_unit(key)
            return
        new_pods = any(uid not in attempted for uid in unit.pods)
        unit.wake_on = wake_on
        unit.retry_within = retry_within
        helped = self._helped_in_flight(unit)
        unit.events_in_flight = set()
        if error:
            unit.backoff_until = self._clock() + self._backoff_duration(unit.attempts)
            self._admit(unit)
        elif unschedulable and not unit.dirty and not new_pods and not helped:
            self._make_unschedulable(unit)
        elif unschedulable:
            # Something changed while it was being tried: retry after backoff.
            unit.backoff_until = self._clock() + self._backoff_duration(unit.attempts)
            self._admit(unit)
        else:
            # Success, with pods left over (they arrived meanwhile, or are the
            # extra pods of a gang that did not fit).
            unit.backoff_until = 0.0
            if new_pods or unit.dirty or helped:
                self._admit(unit)
            else:
                self._make_unschedulable(unit)

    def requeue(self, pod: PodInfo, backoff: bool = True) -> None:
        """A pod whose binding failed comes back (with backoff)."""
        self.add(pod)
        unit = self._units[unit_of(pod)]
        if backoff and unit.state == State.ACTIVE:
            unit.attempts += 1
            unit.backoff_until = self._clock() + self._backoff_duration(unit.attempts)
            self._push_backoff(unit)
