"""Reservation (PostFilter): room held for a unit that starves, so that a
gang needing many nodes at once is not kept out for ever by a stream of
small pods, each of which takes the room the previous one left.

Slurm's backfill, in a scheduler that cannot know when pods end: a unit (a
PodGroup or a lone pod) that has been unschedulable for `starvationSeconds`,
and that preemption could not help, is given the placement that frees
soonest by what troupe can see, and its pods are nominated there. The
scheduler holds nominated room as it holds a preemptor's: units of no higher
priority may not use it (a higher-priority one may, and the reservation is
then chosen again). The reserved pods bind, whole, when the pods in their way
have finished.

What "frees soonest" means here, node by node: pods being deleted end first,
then pods whose `activeDeadlineSeconds` (counted from their `startTime`, as
the kubelet counts it) ends soonest, then pods with no deadline, which
troupe assumes may run for ever (so fewest of those). Nodes are ranked by
that, the shortest prefix of the ranking in which the unit fits with every
running pod there gone is found (doubling, then bisection), and the pods
that can stay are reprieved one by one: the rest are the pods in the way.

A reservation is kept while the unit still fits on its nodes once the pods
in the way are gone, and for at most `maxReservationSeconds`; then it is
chosen again, its old nodes ranked last (a node whose pods never end must not
hold a gang for ever). Devices held by running pods (DRA) are not counted as
freeing, since troupe cannot yet tell which allocations a finished pod
releases: a unit whose claims need them gets no reservation, and says so.

Reservations beyond the first held at once stop where the room they hold
would exceed `maxReservedShare` of the cluster's allocatable CPU or memory,
so that the cluster stays usable; the first is always allowed (a gang may
need the whole cluster).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
from pydantic import Field

from ..api.config import PluginArgs
from ..api.records import GroupKey, PodInfo
from ..api.resources import CPU, MEMORY
from ..cluster.snapshot import Snapshot
from ..framework.diagnosis import Diagnosis
from ..framework.interface import (
    SEARCH_BUDGET_SPENT,
    CycleState,
    GroupContext,
    GroupPostFilterResult,
    Handle,
    PostFilterPlugin,
    PostFilterResult,
    Status,
)
from ..framework.interface import (
    Reservation as Reserved,
)

# At most this many pods on the reserved nodes are tried one by one to see
# whether the unit fits without waiting for them; the rest are waited for.
REPRIEVE_LIMIT = 64
PRUNE_EVERY_SECONDS = 1.0


class ReservationArgs(PluginArgs):
    # How long a unit is unschedulable, preemption unable to help, before it
    # gets a reservation; 0 turns reservations off.
    starvation_seconds: float = Field(default=60.0, ge=0, alias="starvationSeconds")
    # How long a reservation may wait for its room before it is chosen again.
    max_reservation_seconds: float = Field(default=600.0, gt=0, alias="maxReservationSeconds")
    # The share of the cluster's CPU or memory that reservations may hold at
    # once (the first reservation is always allowed).
    max_reserved_share: float = Field(default=0.5, gt=0, le=1, alias="maxReservedShare")


@dataclass(slots=True)
class _Held:
    """A reservation this plugin made: its nodes, pods and room, and when."""

    nodes: frozenset[str]
    uids: frozenset[str]
    cpu: int
    memory: int
    chosen_at: float  # monotonic
    # The running pods it waits for, and when its nodes free (wall clock);
    # None for a reservation adopted after a restart (not known).
    waiting: frozenset[str] | None = None
    free_at: dict[str, float | None] | None = None


# Where a unit's pods go within a mask of rows, as its cycle would place them
# (`Handle.place`: a pod's, a PodGroup's, or a tree's own cycle); why not,
# into the list, where it cannot.
Place = Callable[[Snapshot, list[PodInfo], np.ndarray, "list[str] | None"], list[tuple[PodInfo, int]]]


@dataclass(slots=True)
class _Choice:
    placed: list[tuple[PodInfo, int]]
    in_the_way: list[PodInfo]


def ends_at(pod: PodInfo, now: float) -> float | None:
    """When a running pod ends at the latest (wall clock), or None if it may
    run for ever. A pod being deleted ends now; one not started yet (no
    `startTime`) is counted from now."""
    if pod.deleting or pod.terminal:
        return now
    if pod.active_deadline_seconds is None:
        return None
    start = now
    if pod.start_time:
        try:
            start = datetime.fromisoformat(pod.start_time.replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    return max(start + pod.active_deadline_seconds, now)


def latest_end(pods: Sequence[PodInfo], now: float) -> float | None:
    """When all of `pods` have ended at the latest; None if any may run for ever."""
    latest = now
    for pod in pods:
        end = ends_at(pod, now)
        if end is None:
            return None
        latest = max(latest, end)
    return latest


class Reservation(PostFilterPlugin):
    name = "Reservation"
    Args = ReservationArgs

    def __init__(self, args: ReservationArgs, handle: Handle) -> None:
        super().__init__(args, handle)
        self.args: ReservationArgs = args
        self.wall: Callable[[], float] = time.time
        self._since: dict[str, tuple[float, frozenset[str]]] = {}  # unit -> (unschedulable since, its pods)
        self._held: dict[str, _Held] = {}
        self._pruned_at = 0.0

    # ----------------------------------------------------------- PostFilter

    def post_filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, diagnosis: Diagnosis
    ) -> tuple[PostFilterResult | None, Status]:
        result, status = self._reserve(state, f"pod {pod.uid}", [pod], 1, self._placer(None), snapshot)
        if result is None:
            return None, status
        return (
            PostFilterResult(
                result.nominations.get(pod.uid, ""), message=result.message, reservation=result.reservation
            ),
            status,
        )

    def post_filter_group(
        self, state: CycleState, group: GroupContext, snapshot: Snapshot, diagnoses: Mapping[str, Diagnosis]
    ) -> tuple[GroupPostFilterResult | None, Status]:
        pods = list(group.pods)
        if not group.is_gang:  # a basic group's pods are independent: room for the first
            pods = pods[:1]
        # A tree (group.tree) is reserved for as a PodGroup: its trial is its own cycle.
        # Its own running pods (a gang that grows) are never waited for: they end with it.
        own = frozenset(group.members)
        return self._reserve(state, group.unit_name, pods, group.need, self._placer(group), snapshot, own)

    def _placer(self, group: GroupContext | None) -> Place:
        def placer(
            snapshot: Snapshot, pods: list[PodInfo], mask: np.ndarray, reasons: list[str] | None
        ) -> list[tuple[PodInfo, int]]:
            place = self.handle.place
            assert place is not None  # _reserve does nothing without it
            return place(snapshot, pods, mask, group, reasons)

        return placer

    # ------------------------------------------------------------- the work

    def _reserve(
        self,
        state: CycleState,
        key: str,
        pods: list[PodInfo],
        need: int,
        place: Place,
        snapshot: Snapshot,
        own: frozenset[GroupKey] = frozenset(),
    ) -> tuple[GroupPostFilterResult | None, Status]:
        if self.args.starvation_seconds <= 0 or self.handle.place is None or not pods:
            return None, Status.skip(self.name)
        now = self.handle.clock()
        self._prune(now)
        uids = frozenset(p.uid for p in pods)
        since, _ = self._since.setdefault(key, (now, uids))
        held = self._held.get(key)
        if held is None:
            held = self._adopt(key, pods, snapshot, now)  # nominated before a restart or failover
        if held is None and now - since < self.args.starvation_seconds:
            # Tried again when it has starved, even if nothing in the cluster
            # changes meanwhile (running pods that never end send no event).
            state.retry_within = self.args.starvation_seconds - (now - since)
            return None, Status.skip(self.name)

        avoid: frozenset[str] = frozenset()
        if held is not None:
            if now - held.chosen_at < self.args.max_reservation_seconds:
                choice = self._on(held, pods, need, place, snapshot, own)
                if choice is not None:
                    return self._result(key, choice, snapshot, held.chosen_at), Status.success()
            else:
                avoid = held.nodes  # waited too long: rank its nodes last
            self._held.pop(key, None)  # one adopted after a restart (_adopt) was never stored

        choice = self._choose(pods, need, place, snapshot, avoid, own)
        if choice is None:
            kept = any(snapshot.node_of(p.uid) for k in own for p in self.handle.cache.members(k))
            why = f"{need} pod(s) do not fit even with every {'other ' if kept else ''}running pod gone"
            reasons: list[str] = []
            self._fit(np.flatnonzero(snapshot.valid).tolist(), pods, need, place, snapshot, own, reasons)
            if reasons and SEARCH_BUDGET_SPENT in reasons[0]:  # not known not to fit
                why = f"with every running pod gone, {reasons[0]}"
            elif reasons:  # its pods fit, but its own cycle would still not bind it
                why = f"the group could not bind even with every running pod gone: {reasons[0]}"
            return None, Status.unschedulable(f"no room can be reserved: {why}", plugin=self.name)
        refused = self._over_share(key, choice, snapshot)
        if refused:
            return None, Status.unschedulable(refused, plugin=self.name)
        return self._result(key, choice, snapshot, now), Status.success()

    def _result(self, key: str, choice: _Choice, snapshot: Snapshot, chosen_at: float) -> GroupPostFilterResult:
        now = self.wall()
        nominations = {pod.uid: snapshot.names[row] for pod, row in choice.placed}
        rows = sorted({row for _, row in choice.placed})
        by_row: dict[int, list[PodInfo]] = {row: [] for row in rows}
        for pod in choice.in_the_way:
            by_row.setdefault(snapshot.row[snapshot.node_of(pod.uid) or ""], []).append(pod)
        free_at = {snapshot.names[row]: latest_end(by_row.get(row, []), now) for row in rows}
        cpu = sum(p.requests.get(CPU, 0) for p, _ in choice.placed)
        memory = sum(p.requests.get(MEMORY, 0) for p, _ in choice.placed)
        previous = self._held.get(key)
        waiting = frozenset(p.uid for p in choice.in_the_way)
        if previous is not None and previous.waiting is not None and previous.chosen_at == chosen_at:
            waiting |= previous.waiting  # kept: what it waited for at first still counts as expected
            free_at = previous.free_at or free_at
        self._held[key] = _Held(frozenset(free_at), frozenset(nominations), cpu, memory, chosen_at, waiting, free_at)
        names = [snapshot.names[row] for row in rows]
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        message = f"reserved node(s) {shown} for {len(choice.placed)} pod(s)"
        if choice.in_the_way:
            message += f"; waiting for {len(choice.in_the_way)} running pod(s) to finish"
            known = [t for t in free_at.values() if t is not None]
            if len(known) == len(free_at):
                message += f" (all by their activeDeadlineSeconds, in {max(known) - now:.0f}s)"
        return GroupPostFilterResult(nominations, message=message, reservation=Reserved(free_at))

    def _adopt(self, key: str, pods: list[PodInfo], snapshot: Snapshot, now: float) -> _Held | None:
        """The nodes the scheduler holds for the pods though this plugin made
        no reservation for them (status.nominatedNodeName, adopted after a
        restart or failover): a reservation made before, kept (and not waited
        for again) while it still fits. Not a nomination the scheduler has let
        go (the pod may still show it until the clearing write lands)."""
        held = self.handle.nominated
        nodes = frozenset(held[p.uid][0] for p in pods if p.uid in held)
        if not nodes or any(n not in snapshot.row for n in nodes):
            return None
        self._since[key] = (now - self.args.starvation_seconds, frozenset(p.uid for p in pods))
        return _Held(nodes, frozenset(p.uid for p in pods), 0, 0, now)

    def _on(
        self, held: _Held, pods: list[PodInfo], need: int, place: Place, snapshot: Snapshot, own: frozenset[GroupKey]
    ) -> _Choice | None:
        """The reservation, still good: its nodes exist, the unit fits on them
        once their running pods are gone, and nothing it must wait for now
        came after it (a pod of higher priority took the room) unless it ends
        before the room frees anyway (backfill)."""
        nodes = held.nodes
        rows = [snapshot.row[n] for n in nodes if n in snapshot.row and snapshot.valid[snapshot.row[n]]]
        if len(rows) < len(nodes):
            return None  # a node is gone
        choice = self._fit(rows, pods, need, place, snapshot, own)
        if choice is None or held.waiting is None or held.free_at is None:
            return choice
        now = self.wall()
        for pod in choice.in_the_way:
            if pod.uid in held.waiting:
                continue
            end, free = ends_at(pod, now), held.free_at.get(snapshot.node_of(pod.uid) or "")
            if end is None or free is None or end > free:
                return None
        return choice

    def _choose(
        self,
        pods: list[PodInfo],
        need: int,
        place: Place,
        snapshot: Snapshot,
        avoid: frozenset[str],
        own: frozenset[GroupKey],
    ) -> _Choice | None:
        now = self.wall()

        def cost(row: int) -> tuple[int, int, float, int, int]:
            running = snapshot.pods_on_row(row)
            unknown = sum(1 for p in running if ends_at(p, now) is None)
            latest = max((t for p in running if (t := ends_at(p, now)) is not None), default=now)
            return (snapshot.names[row] in avoid, unknown, latest, len(running), row)

        order = sorted(np.flatnonzero(snapshot.valid).tolist(), key=cost)
        n = len(order)
        if n == 0:
            return None
        lo, m = 0, min(max(need, 1), n)
        found = self._fit(order[:m], pods, need, place, snapshot, own)
        while found is None:
            if m == n:
                return None
            lo, m = m, min(2 * m, n)
            found = self._fit(order[:m], pods, need, place, snapshot, own)
        hi = m
        while hi - lo > 1:
            mid = (lo + hi) // 2
            trial = self._fit(order[:mid], pods, need, place, snapshot, own)
            if trial is not None:
                hi, found = mid, trial
            else:
                lo = mid
        return found

    def _fit(
        self,
        rows: Sequence[int],
        pods: list[PodInfo],
        need: int,
        place: Place,
        snapshot: Snapshot,
        own: frozenset[GroupKey] = frozenset(),
        reasons: list[str] | None = None,
    ) -> _Choice | None:
        """Where the unit goes within `rows` with their running pods gone, and
        which of those pods it must wait for (the others are reprieved).
        Only where its cycle would bind it there (`place` says why not, into
        `reasons`): room is never held for a group that could not use it.
        The unit's own running pods (`own`: its PodGroups) stay."""
        mask = np.zeros(len(snapshot), dtype=bool)
        mask[list(rows)] = True
        running = [
            p
            for row in rows
            for p in snapshot.pods_on_row(row)
            if snapshot.node_of(p.uid) is not None and (p.group is None or p.group not in own)
        ]

        def without(gone: Sequence[PodInfo], reasons: list[str] | None = None) -> list[tuple[PodInfo, int]]:
            mark = snapshot.mark()
            try:
                for pod in gone:
                    snapshot.remove_pod(pod)
                return place(snapshot, pods, mask, reasons)
            finally:
                snapshot.restore(mark)

        placed = without(running, reasons)
        if len(placed) < need:
            return None
        used = {row for _, row in placed}
        in_the_way = [p for p in running if snapshot.row.get(snapshot.node_of(p.uid) or "") in used]
        if len(in_the_way) < len(running):
            trial = without(in_the_way)
            if len(trial) >= need:
                placed = trial
            else:
                in_the_way = running
        # Reprieve: the pods that end last (or never) first, so that what is
        # waited for is what ends soonest.
        now = self.wall()
        order = sorted(in_the_way, key=lambda p: -(ends_at(p, now) or float("inf")))
        for pod in order[:REPRIEVE_LIMIT]:
            rest = [p for p in in_the_way if p.uid != pod.uid]
            trial = without(rest)
            if len(trial) >= need:
                in_the_way, placed = rest, trial
        return _Choice(placed, in_the_way)

    def _over_share(self, key: str, choice: _Choice, snapshot: Snapshot) -> str:
        others = [h for k, h in self._held.items() if k != key]
        if not others:
            return ""
        total = snapshot.alloc_total()
        for resource, mine in (
            (CPU, sum(p.requests.get(CPU, 0) for p, _ in choice.placed)),
            (MEMORY, sum(p.requests.get(MEMORY, 0) for p, _ in choice.placed)),
        ):
            col = snapshot.column.get(resource)
            if col is None or not total[col]:
                continue
            held = sum(h.cpu if resource == CPU else h.memory for h in others)
            if held + mine > self.args.max_reserved_share * total[col]:
                return (
                    f"not reserved yet: {len(others)} earlier reservation(s) hold {held / total[col]:.0%} of the "
                    f"cluster's {resource}, and this one would pass maxReservedShare "
                    f"({self.args.max_reserved_share:.0%})"
                )
        return ""

    def _prune(self, now: float) -> None:
        """Forget reservations whose pods are no longer all nominated (the
        scheduler lets a unit's room go when it is bound, deleted, loses a pod
        or waits at its gate): they hold nothing, and must not count toward
        `maxReservedShare`. Now and then, forget units none of whose pods is
        still pending (bound, or gone)."""
        nominated = self.handle.nominated
        for key in [k for k, h in self._held.items() if not all(uid in nominated for uid in h.uids)]:
            del self._held[key]
        if now - self._pruned_at < PRUNE_EVERY_SECONDS:
            return
        self._pruned_at = now
        pods = self.handle.cache.pods

        def pending(uids: frozenset[str]) -> bool:
            return any((p := pods.get(uid)) is not None and not p.node_name and not p.terminal for uid in uids)

        for key in [k for k, (_, uids) in self._since.items() if not pending(uids)]:
            del self._since[key]
