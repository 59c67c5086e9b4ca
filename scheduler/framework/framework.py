"""A profile's plugins, instantiated and wired to the extension points.

`Framework` is what the rest of the scheduler calls: run the PreEnqueue gate,
find a node for one pod (`algorithm.schedule_pod` uses `run_filters` and
`run_scores`), and Permit a group's placements.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Hashable

import numpy as np

from ..api.config import EXTENSION_POINTS, Profile
from ..api.objects import PodInfo
from ..cluster.snapshot import Snapshot
from .interface import (
    CycleState,
    FilterPlugin,
    FilterResult,
    GroupContext,
    Handle,
    PermitPlugin,
    Plugin,
    PostFilterPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    ScorePlugin,
    Status,
)
from . import events
from .registry import Registry

# The default profile, in upstream's order (filters run in this order and a
# node rejected by one is not shown to the next, as upstream).
DEFAULT_PLUGINS: dict[str, list[tuple[str, int | None]]] = {
    "preEnqueue": [("SchedulingGates", None), ("GangScheduling", None)],
    "preFilter": [],
    "filter": [
        ("NodeUnschedulable", None),
        ("NodeName", None),
        ("TaintToleration", None),
        ("NodeAffinity", None),
        ("NodePorts", None),
        ("NodeResourcesFit", None),
        ("PodTopologySpread", None),
        ("InterPodAffinity", None),
    ],
    "postFilter": [],
    "score": [
        ("TaintToleration", 3),
        ("NodeAffinity", 2),
        ("NodeResourcesFit", 1),
        ("NodeResourcesBalancedAllocation", 1),
        ("PodTopologySpread", 2),
        ("InterPodAffinity", 2),
    ],
    "permit": [("GangScheduling", None)],
    "placementGenerate": [],
    "placementScore": [],
}

MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5

_POINT_TYPES: dict[str, type[Plugin]] = {
    "preEnqueue": PreEnqueuePlugin,
    "preFilter": PreFilterPlugin,
    "filter": FilterPlugin,
    "postFilter": PostFilterPlugin,
    "score": ScorePlugin,
    "permit": PermitPlugin,
}


class ProfileError(ValueError):
    """The profile names a plugin that does not exist or cannot serve the point."""


# A row-local score is kept for every node once this many pods with the same
# signature were scored: from then on a pod costs the rows that changed since
# the previous one (the node the previous gang member went to; the nodes other
# cycles changed), not a sampled scoring pass. Before that, one-off pods score
# only the sampled nodes.
ROW_LOCAL_SCORE_AFTER = 8
ROW_LOCAL_CACHE_ENTRIES = 256


@dataclass(slots=True)
class _RowCache:
    """A row-local result for every row, valid for the rows whose version
    (NodeTable.row_version) is still `versions[row]`."""

    values: np.ndarray | None
    versions: np.ndarray | None
    columns: int = 0
    calls: int = 0
    result: FilterResult | None = None
    serial: int = 0  # the snapshot `versions` was last brought up to date in
    seen: int = 0  # ... and how many of its assumed_rows it had seen then


@dataclass(frozen=True, slots=True)
class WeightedScore:
    plugin: ScorePlugin
    weight: int


def resolve_plugins(profile: Profile, point: str) -> list[tuple[str, int | None]]:
    """Upstream merge rules: defaults minus `disabled` (`*` disables all), then
    `enabled` appended (or, for a default already there, its weight replaced)."""
    chosen = profile.plugins.point(point)
    disabled = {p.name for p in chosen.disabled}
    result = [] if "*" in disabled else [(n, w) for n, w in DEFAULT_PLUGINS[point] if n not in disabled]
    for ref in chosen.enabled:
        for i, (name, _) in enumerate(result):
            if name == ref.name:
                result[i] = (name, ref.weight if ref.weight is not None else result[i][1])
                break
        else:
            result.append((ref.name, ref.weight))
    return result


class Framework:
    def __init__(self, profile: Profile, registry: Registry, handle: Handle) -> None:
        self.profile = profile
        self.scheduler_name = profile.scheduler_name
        self.handle = handle
        instances: dict[str, Plugin] = {}

        def instance(name: str, point: str) -> Plugin:
            cls = registry.get(name)
            if cls is None:
                raise ProfileError(
                    f"profile {profile.scheduler_name}: plugins.{point}: unknown plugin {name!r} "
                    f"(known: {', '.join(registry.names())})"
                )
            want = _POINT_TYPES.get(point)
            if want is not None and not issubclass(cls, want):
                raise ProfileError(f"profile {profile.scheduler_name}: plugin {name} does not implement {point}")
            if name not in instances:
                try:
                    instances[name] = cls(profile.args_for(name), handle)
                except (ValueError, TypeError, KeyError) as exc:
                    raise ProfileError(f"profile {profile.scheduler_name}: pluginConfig {name}: {exc}") from None
            return instances[name]

        plugins = {point: [(instance(n, point), w) for n, w in resolve_plugins(profile, point)] for point in EXTENSION_POINTS}
        self.pre_enqueue: list[PreEnqueuePlugin] = [p for p, _ in plugins["preEnqueue"]]  # type: ignore[misc]
        self.pre_filter: list[PreFilterPlugin] = [p for p, _ in plugins["preFilter"]]  # type: ignore[misc]
        self.filters: list[FilterPlugin] = [p for p, _ in plugins["filter"]]  # type: ignore[misc]
        self.post_filter: list[PostFilterPlugin] = [p for p, _ in plugins["postFilter"]]  # type: ignore[misc]
        self.scores = [WeightedScore(p, w or 1) for p, w in plugins["score"]]  # type: ignore[arg-type]
        self.permits: list[PermitPlugin] = [p for p, _ in plugins["permit"]]  # type: ignore[misc]
        self.plugins = instances
        self.percentage_of_nodes_to_score = profile.percentage_of_nodes_to_score or 0
        self.next_start_row = 0  # where the next pod's node sampling starts (round robin, as upstream)
        # Results of static filters/scores, valid for one (static generation, row count).
        self._static_key: tuple[int, int] = (-1, -1)
        self._static_filters: dict[tuple[int, Hashable], FilterResult] = {}
        self._static_scores: dict[tuple[int, Hashable], np.ndarray] = {}
        self._static_uniform: dict[tuple[int, Hashable], bool] = {}
        # Row-local results, kept across cycles (see _row_local_*).
        self._row_filters: dict[tuple[int, Hashable], _RowCache] = {}
        self._row_scores: dict[tuple[int, Hashable], _RowCache] = {}

    def wake_events(self, rejected_by: frozenset[str] | None) -> frozenset[str] | None:
        """The cluster events that may help a unit these plugins rejected
        (None: any event; also when the rejecting plugins are unknown)."""
        if not rejected_by:
            return None
        return events.union(
            self.plugins[name].events if name in self.plugins else None for name in rejected_by
        )

    # ------------------------------------------------------------- PreEnqueue

    def run_pre_enqueue(self, pod: PodInfo) -> Status:
        for plugin in self.pre_enqueue:
            status = plugin.pre_enqueue(pod)
            if not status.ok:
                return status
        return Status.success()

    # -------------------------------------------------------- PreFilter/Filter

    def run_pre_filters(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> Status:
        for plugin in self.pre_filter:
            status = plugin.pre_filter(state, pod, snapshot)
            if not status.ok:
                return status if status.plugin else replace(status, plugin=plugin.name)
        return Status.success()

    def _check_static(self, snapshot: Snapshot) -> None:
        key = (snapshot.static_generation, len(snapshot))
        if key != self._static_key or len(self._static_filters) + len(self._static_scores) > 4096:
            self._static_key = key
            self._static_filters.clear()
            self._static_scores.clear()
            self._static_uniform.clear()

    @staticmethod
    def _stale_rows(entry: _RowCache, snapshot: Snapshot) -> np.ndarray | None:
        """Rows whose result must be recomputed; None when the whole array must be
        (the table grew, shrank or gained a resource column). Within one
        snapshot only the rows assumed since the last call can have changed;
        a new snapshot is compared row by row."""
        if entry.versions is None or len(entry.versions) != len(snapshot) or entry.columns != len(snapshot.resources):
            return None
        if entry.serial == snapshot.serial:
            stale = np.array(sorted(set(snapshot.assumed_rows[entry.seen:])), dtype=np.int64)
        else:
            stale = np.flatnonzero(snapshot.row_version != entry.versions)
        entry.serial, entry.seen = snapshot.serial, len(snapshot.assumed_rows)
        return stale

    @staticmethod
    def _synced(entry: _RowCache, snapshot: Snapshot) -> None:
        entry.versions = snapshot.row_version.copy()
        entry.columns = len(snapshot.resources)
        entry.serial, entry.seen = snapshot.serial, len(snapshot.assumed_rows)

    def _row_local_filter(self, i: int, plugin: FilterPlugin, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> FilterResult:
        """The first pod of a signature pays the full filter; later ones (in
        this cycle or later ones) only re-check the rows that changed since."""
        ck = (i, plugin.sign_pod(pod))
        entry = self._row_filters.get(ck)
        stale = self._stale_rows(entry, snapshot) if entry is not None else None
        if entry is None or stale is None:
            if len(self._row_filters) > ROW_LOCAL_CACHE_ENTRIES:
                self._row_filters.clear()
            result = plugin.filter(state, pod, snapshot)
            entry = self._row_filters[ck] = _RowCache(result.feasible.copy(), None, result=result)
            self._synced(entry, snapshot)
            return result
        assert entry.values is not None and entry.versions is not None and entry.result is not None
        if len(stale):
            entry.values[stale] = plugin.filter_rows(state, pod, snapshot, stale)
            entry.versions[stale] = snapshot.row_version[stale]
        # Reasons are from the first pod: only used for a diagnosis, which
        # run_filters recomputes exactly when no node is left.
        return FilterResult(entry.values, entry.result.reasons, entry.result.unresolvable)

    def run_filters(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> tuple[np.ndarray, list[tuple[str, np.ndarray, FilterResult]]]:
        """Returns the feasible mask and, when no node is feasible, per plugin
        (its name, the candidates it saw, its result) for the diagnosis.

        The answer is the AND of every filter's mask, so the common case takes
        a short path: the AND of the static filters is cached per signature,
        and row-local filters are updated incrementally. Only when nothing is
        feasible are the filters run again in order, each seeing the nodes the
        previous ones left, for upstream's exact reasons.
        """
        self._check_static(snapshot)
        mask = self._static_mask(state, pod, snapshot)
        if mask.any():
            for i, plugin in enumerate(self.filters):
                if plugin.static:
                    continue
                if plugin.row_local:
                    result = self._row_local_filter(i, plugin, state, pod, snapshot)
                else:
                    result = plugin.filter(state, pod, snapshot)
                mask = mask & result.feasible
                if not mask.any():
                    break
            else:
                return mask, []
        return self._run_filters_exact(state, pod, snapshot)

    def _static_mask(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> np.ndarray:
        key = ("static-and",) + tuple(p.sign_pod(pod) for p in self.filters if p.static)
        mask = self._static_filters.get(key)  # type: ignore[call-overload]
        if mask is None:
            mask = snapshot.valid.copy()
            for i, plugin in enumerate(self.filters):
                if plugin.static:
                    mask &= self._static_filter(i, plugin, state, pod, snapshot).feasible
            self._static_filters[key] = mask  # type: ignore[index]
        return mask  # type: ignore[return-value]

    def _static_filter(self, i: int, plugin: FilterPlugin, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> FilterResult:
        ck = (i, plugin.sign_pod(pod))
        result = self._static_filters.get(ck)
        if result is None:
            result = self._static_filters[ck] = plugin.filter(state, pod, snapshot)
        return result

    def _run_filters_exact(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> tuple[np.ndarray, list[tuple[str, np.ndarray, FilterResult]]]:
        candidates = snapshot.valid.copy()
        trail: list[tuple[str, np.ndarray, FilterResult]] = []
        for i, plugin in enumerate(self.filters):
            if plugin.static:
                result = self._static_filter(i, plugin, state, pod, snapshot)
            else:
                result = plugin.filter(state, pod, snapshot)
            trail.append((plugin.name, candidates, result))
            candidates = candidates & result.feasible
            if not candidates.any():
                break
        return candidates, trail

    # ------------------------------------------------------------------ Score

    def num_nodes_to_score(self, num_all_nodes: int) -> int:
        """Upstream numFeasibleNodesToFind: how many feasible nodes are scored."""
        if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
            return num_all_nodes
        percentage = self.percentage_of_nodes_to_score
        if percentage == 0:
            percentage = max(50 - num_all_nodes // 125, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
        return max(num_all_nodes * percentage // 100, MIN_FEASIBLE_NODES_TO_FIND)

    def run_scores(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, rows: np.ndarray) -> np.ndarray:
        """Weighted sum of normalized scores over `rows`. Only the argmax is
        used, so a term that is equal on every node may be left out."""
        total = np.zeros(len(rows), dtype=np.int64)
        for i, ws in enumerate(self.scores):
            plugin = ws.plugin
            if plugin.static_score:
                ck = (i, plugin.sign_pod(pod))
                full = self._static_scores.get(ck)
                if full is None:
                    all_rows = np.flatnonzero(snapshot.valid)
                    full = np.zeros(len(snapshot), dtype=np.int64)
                    full[all_rows] = plugin.score(state, pod, snapshot, all_rows)
                    self._static_scores[ck] = full
                    self._static_uniform[ck] = len(all_rows) == 0 or bool(full[all_rows].min() == full[all_rows].max())
                if self._static_uniform[ck]:
                    # The same raw score on every node normalizes to the same
                    # score on every node: it cannot change which node wins.
                    continue
                raw = full[rows]
            elif plugin.row_local:
                raw = self._row_local_score(i, plugin, state, pod, snapshot, rows)
            else:
                raw = plugin.score(state, pod, snapshot, rows)
                if len(raw) and raw.min() == raw.max():
                    continue  # equal everywhere: cannot change the winner
            total += np.asarray(plugin.normalize(raw), dtype=np.int64) * ws.weight
        return total

    def _row_local_score(self, i: int, plugin: ScorePlugin, state: CycleState, pod: PodInfo, snapshot: Snapshot, rows: np.ndarray) -> np.ndarray:
        """Scores of `rows`; after ROW_LOCAL_SCORE_AFTER pods of one signature,
        all rows are scored once and then only the rows that changed since."""
        ck = (i, plugin.sign_pod(pod))
        entry = self._row_scores.get(ck)
        if entry is None:
            if len(self._row_scores) > ROW_LOCAL_CACHE_ENTRIES:
                self._row_scores.clear()
            entry = self._row_scores[ck] = _RowCache(None, None)
        entry.calls += 1
        if entry.calls < ROW_LOCAL_SCORE_AFTER:
            return plugin.score(state, pod, snapshot, rows)
        stale = self._stale_rows(entry, snapshot)
        if entry.values is None or stale is None:
            all_rows = np.flatnonzero(snapshot.valid)
            entry.values = np.zeros(len(snapshot), dtype=np.int64)
            entry.values[all_rows] = plugin.score(state, pod, snapshot, all_rows)
            self._synced(entry, snapshot)
        elif len(stale):
            live = stale[snapshot.valid[stale]]
            entry.values[stale] = 0
            if len(live):
                entry.values[live] = plugin.score(state, pod, snapshot, live)
            entry.versions[stale] = snapshot.row_version[stale]  # type: ignore[index]
        return entry.values[rows]

    # ----------------------------------------------------------------- Permit

    def run_permit(self, group: GroupContext) -> Status:
        for plugin in self.permits:
            status = plugin.permit(group)
            if not status.ok:
                return status if status.plugin else replace(status, plugin=plugin.name)
        return Status.success()
