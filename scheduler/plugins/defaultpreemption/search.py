"""Finding victims: which units to evict so that a pod, or a whole gang, fits.

Every question "would it fit without these?" is answered by the scheduler's
own algorithm (`place`, the Handle's trial hook) on the cycle's snapshot,
with the victims removed and the snapshot restored afterwards, so Filter
plugins, gang order and node affinity all count as they do in a real cycle.

For one pod (upstream's DefaultPreemption): per candidate node, remove every
lower-priority unit on it, check the pod fits there, then reprieve units
(PDB-violating first, then the more important) while it still fits; choose
the node by upstream's order.

For a gang, "remove everything below, then reprieve one unit at a time over
the whole cluster" keeps whatever the reprieve order happens to reach last,
which can be many more pods than needed. Here nodes are ranked by what
freeing them costs (PDB violations, then the highest victim priority, then
victim pods), the shortest prefix of that ranking in which the gang fits is
found (doubling, then bisection), and only the units on the nodes the gang
then uses are candidates for the reprieve. `remove_all_then_reprieve` is the
simple method, kept as the reference for tests and the benchmark.

With few candidate units (`EXACT_UNITS` or fewer) every subset is tried in
the preference order instead, so the choice is the best one.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from ...api.records import PodInfo
from ...cluster.snapshot import Snapshot
from ...framework.interface import GroupContext, PlaceFn
from .victims import Budget, Unit, more_important_first, pdb_violations, unique_pods, without_contained

_T = TypeVar("_T")

EXACT_UNITS = 10  # up to 2**10 subsets, ranked without trials; most are never tried


@dataclass(slots=True)
class Choice:
    """Victims that make room, and where the preemptor's pods then go."""

    victims: list[Unit]
    placed: list[tuple[PodInfo, int]]
    trials: int = 0  # how many times the algorithm was run

    @property
    def pods(self) -> list[PodInfo]:
        return unique_pods(self.victims)

    def key(self, pdbs: Sequence[Budget]) -> tuple[int, int, int, int]:
        """The preference order for a gang: no PDB violation, then the lowest
        highest victim priority, then the fewest pods, then the fewest groups."""
        pods = self.pods
        return (
            pdb_violations(pods, pdbs),
            max((u.priority for u in self.victims), default=-(2**31)),
            len(pods),
            sum(1 for u in self.victims if u.group is not None),
        )


class _Trials:
    """Runs `place` with units removed, restoring the snapshot each time."""

    def __init__(
        self, snapshot: Snapshot, place: PlaceFn, pods: Sequence[PodInfo], group: GroupContext | None = None
    ) -> None:
        self.snapshot, self.place, self.pods, self.group = snapshot, place, pods, group
        self.count = 0

    def without(self, units: Iterable[Unit], allowed: np.ndarray | None) -> list[tuple[PodInfo, int]]:
        self.count += 1
        return without(self.snapshot, units, lambda: self.place(self.snapshot, self.pods, allowed, self.group))


def without(snapshot: Snapshot, units: Iterable[Unit], ask: Callable[[], _T]) -> _T:
    """`ask` answered on `snapshot` with every pod of `units` removed (the
    snapshot restored afterwards)."""
    mark = snapshot.mark()
    try:
        for pod in unique_pods(units):
            snapshot.remove_pod(pod)
        return ask()
    finally:
        snapshot.restore(mark)


def _by_row(units: Iterable[Unit]) -> dict[int, list[Unit]]:
    """Row -> the units with a pod on it."""
    by_row: dict[int, list[Unit]] = {}
    for unit in units:
        for row in unit.rows:
            by_row.setdefault(row, []).append(unit)
    return by_row


def _reprieve_order(units: Iterable[Unit], pdbs: Sequence[Budget]) -> list[Unit]:
    """PDB-violating units first (keep them if at all possible), then the more important."""
    ordered = more_important_first(units)
    return sorted(ordered, key=lambda u: pdb_violations(u.pods, pdbs) == 0)


def _reprieve(
    trials: _Trials,
    victims: list[Unit],
    placed: list[tuple[PodInfo, int]],
    needed: int,
    allowed: np.ndarray | None,
    pdbs: Sequence[Budget],
) -> Choice:
    # A unit another victim contains (a gang's pod above its minimum, beside
    # the whole gang) is always given back here: without it, the same pods go.
    for unit in _reprieve_order(victims, pdbs):
        rest = [u for u in victims if u is not unit]
        trial = trials.without(rest, allowed)
        if len(trial) >= needed:
            victims, placed = rest, trial
    return Choice(victims, placed, trials.count)


def remove_all_then_reprieve(
    snapshot: Snapshot,
    place: PlaceFn,
    pods: Sequence[PodInfo],
    needed: int,
    units: Sequence[Unit],
    pdbs: Sequence[Budget] = (),
) -> Choice | None:
    """The simple method: every candidate out, then each one back (in the
    reprieve order) if the pods still fit without it."""
    trials = _Trials(snapshot, place, pods)
    placed = trials.without(units, None)
    if len(placed) < needed:
        return None
    return _reprieve(trials, list(units), placed, needed, None, pdbs)


def exact_group(
    snapshot: Snapshot,
    place: PlaceFn,
    pods: Sequence[PodInfo],
    needed: int,
    units: Sequence[Unit],
    pdbs: Sequence[Budget] = (),
    group: GroupContext | None = None,
) -> Choice | None:
    """Every subset of `units`, best first under `Choice.key`: the first that fits."""
    trials = _Trials(snapshot, place, pods, group)
    if len(trials.without(units, None)) < needed:
        return None  # not even with all of them gone
    subsets = [Choice(list(c), []) for size in range(1, len(units) + 1) for c in itertools.combinations(units, size)]
    subsets.sort(key=lambda c: c.key(pdbs))
    for choice in subsets:
        placed = trials.without(choice.victims, None)
        if len(placed) >= needed:
            return Choice(without_contained(choice.victims), placed, trials.count)
    return None


def search_group(
    snapshot: Snapshot,
    place: PlaceFn,
    pods: Sequence[PodInfo],
    needed: int,
    units: Sequence[Unit],
    pdbs: Sequence[Budget] = (),
    exact_units: int = EXACT_UNITS,
    group: GroupContext | None = None,
) -> Choice | None:
    """Victims for `needed` of `pods` (a gang's pending pods) to fit at once;
    None if none do. With `group`, the pods are placed as its cycle would
    (within its placements, e.g. one topology domain)."""
    if len(units) <= exact_units:
        return exact_group(snapshot, place, pods, needed, units, pdbs, group)
    trials = _Trials(snapshot, place, pods, group)
    by_row = _by_row(units)
    violating = {id(u): pdb_violations(u.pods, pdbs) > 0 for u in units}

    def cost(row: int) -> tuple[int, int, int]:
        here = by_row.get(row)
        if not here:
            return (0, -(2**31), 0)
        return (sum(violating[id(u)] for u in here), max(u.priority for u in here), sum(u.size for u in here))

    order = sorted(np.flatnonzero(snapshot.valid).tolist(), key=lambda r: (cost(r), r))
    n = len(order)
    if n == 0 or not units:
        return None

    def attempt(m: int) -> tuple[list[tuple[PodInfo, int]], list[Unit], np.ndarray]:
        mask = np.zeros(len(snapshot), dtype=bool)
        mask[order[:m]] = True
        touching = list({id(u): u for r in order[:m] for u in by_row.get(r, ())}.values())
        return trials.without(touching, mask), touching, mask

    # The shortest prefix of the ranking that holds the gang: double, then bisect.
    lo, m = 0, min(max(needed, 1), n)
    while True:
        placed, touching, mask = attempt(m)
        if len(placed) >= needed:
            break
        if m == n:
            return None
        lo, m = m, min(2 * m, n)
    hi = m
    while hi - lo > 1:
        mid = (lo + hi) // 2
        trial = attempt(mid)
        if len(trial[0]) >= needed:
            hi, (placed, touching, mask) = mid, trial
        else:
            lo = mid

    # Only the units on the nodes the gang uses can be needed.
    used = {row for _, row in placed}
    victims = [u for u in touching if u.rows & used]
    if len(victims) < len(touching):
        trial_placed = trials.without(victims, mask)
        if len(trial_placed) >= needed:
            placed = trial_placed
        else:
            victims = touching
    # Reprieve over the whole cluster: a unit is spared if the gang fits
    # anywhere without it, not only within the prefix.
    return _reprieve(trials, victims, placed, needed, None, pdbs)


@dataclass(slots=True)
class NodeCandidate:
    """A node where one pod fits once `victims` are gone (upstream's candidate)."""

    row: int
    victims: list[Unit]

    def key(self, pdbs: Sequence[Budget]) -> tuple[int, int, int, int]:
        """Upstream's pickOneNodeForPreemption, in order: fewest PDB
        violations, lowest highest victim priority, smallest priority sum,
        fewest victims (the latest start breaks the remaining ties, in `best`)."""
        pods = unique_pods(self.victims)
        return (
            pdb_violations(pods, pdbs),
            max((u.priority for u in self.victims), default=-(2**31)),
            sum(p.priority for p in pods),
            len(pods),
        )

    def latest_start(self) -> str:
        """The earliest start among the highest-priority victims: upstream
        prefers the node where that is latest (evict what ran shortest)."""
        top = max(u.priority for u in self.victims)
        return min(u.start for u in self.victims if u.priority == top)


def search_pod(
    snapshot: Snapshot,
    place: PlaceFn,
    pod: PodInfo,
    units: Sequence[Unit],
    rows: Iterable[int],
    limit: int,
    pdbs: Sequence[Budget] = (),
) -> list[NodeCandidate]:
    """Candidates for one pod among `rows` (in the order given), at most `limit`."""
    trials = _Trials(snapshot, place, [pod])
    by_row = _by_row(units)
    found: list[NodeCandidate] = []
    for row in rows:
        here = by_row.get(row)
        if not here:
            continue  # nothing to evict here, and the pod did not fit as it is
        mask = np.zeros(len(snapshot), dtype=bool)
        mask[row] = True
        placed = trials.without(here, mask)
        if not placed:
            continue
        choice = _reprieve(trials, list(here), placed, 1, mask, pdbs)
        found.append(NodeCandidate(row, choice.victims))
        if len(found) >= limit:
            break
    return found


def best(candidates: Sequence[NodeCandidate], pdbs: Sequence[Budget]) -> NodeCandidate:
    keyed = [(c.key(pdbs), c) for c in candidates]
    top = min(k for k, _ in keyed)
    tied = [c for k, c in keyed if k == top]
    return max(tied, key=lambda c: (c.latest_start(), -c.row))
