"""A profile's plugins, instantiated and wired to the extension points.

`Framework` is what the core calls at each point: the PreEnqueue gate,
PreFilter/Filter/Score for one pod (`core.schedule_one` uses `run_filters`
and `run_scores`), PostFilter, Reserve/Unreserve, Permit, PreBind, and
PlacementGenerate/PlacementScore for a group. Reused plugin results live in
`caches.PluginCaches`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np

from ..api.config import EXTENSION_POINTS, Profile, validate_args, validate_plugin_args
from ..api.records import PodInfo
from ..cluster.snapshot import Snapshot
from . import events
from .caches import PluginCaches, RowResult
from .diagnosis import Diagnosis
from .interface import (
    Code,
    CycleState,
    FilterPlugin,
    FilterResult,
    GroupContext,
    GroupPostFilterResult,
    Handle,
    PermitPlugin,
    Placement,
    PlacementAssignments,
    PlacementGeneratePlugin,
    PlacementScorePlugin,
    Plugin,
    PostFilterPlugin,
    PostFilterResult,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    ReservePlugin,
    ScorePlugin,
    Status,
)
from .registry import Registry

_Result = TypeVar("_Result")  # what a PostFilter returns: PostFilterResult or GroupPostFilterResult

# The default profile, in upstream's order (filters run in this order and a
# node rejected by one is not shown to the next, as upstream).
DEFAULT_PLUGINS: dict[str, list[tuple[str, int | None]]] = {
    "preEnqueue": [("SchedulingGates", None), ("GangScheduling", None), ("DynamicResources", None)],
    "preFilter": [("DynamicResources", None)],
    "filter": [
        ("NodeUnschedulable", None),
        ("NodeName", None),
        ("TaintToleration", None),
        ("NodeAffinity", None),
        ("NodePorts", None),
        ("NodeResourcesFit", None),
        ("PodTopologySpread", None),
        ("InterPodAffinity", None),
        ("DynamicResources", None),
    ],
    "postFilter": [("DefaultPreemption", None), ("CapacityRequest", None), ("Reservation", None)],
    "score": [
        ("TaintToleration", 3),
        ("NodeAffinity", 2),
        ("NodeResourcesFit", 1),
        ("NodeResourcesBalancedAllocation", 1),
        ("PodTopologySpread", 2),
        ("InterPodAffinity", 2),
    ],
    "reserve": [("DynamicResources", None)],
    "permit": [("GangScheduling", None)],
    "preBind": [("DynamicResources", None)],
    "placementGenerate": [("TopologyPlacementGenerator", None), ("DynamicResources", None)],
    "placementScore": [("PodGroupPodsCount", 1), ("NodeResourcesFit", 1)],
}

MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5

# The interface a plugin must implement to serve each point; every point here
# has a runner below. A configuration naming any other point is refused when
# the profile is loaded (config.EXTENSION_POINTS must stay a subset).
_POINT_TYPES: dict[str, type[Plugin]] = {
    "preEnqueue": PreEnqueuePlugin,
    "preFilter": PreFilterPlugin,
    "filter": FilterPlugin,
    "postFilter": PostFilterPlugin,
    "score": ScorePlugin,
    "reserve": ReservePlugin,
    "permit": PermitPlugin,
    "preBind": PreBindPlugin,
    "placementGenerate": PlacementGeneratePlugin,
    "placementScore": PlacementScorePlugin,
}


class ProfileError(ValueError):
    """The profile names a plugin that does not exist or cannot serve the
    point, or has args its plugin's model rejects; one line per problem."""


# A row-local score is kept for every node once this many pods with the same
# signature were scored: from then on a pod costs the rows that changed since
# the previous one (the node the previous gang member went to; the nodes other
# cycles changed), not a sampled scoring pass. Before that, one-off pods score
# only the sampled nodes.
ROW_LOCAL_SCORE_AFTER = 8


@dataclass(frozen=True, slots=True)
class WeightedScore:
    plugin: ScorePlugin
    weight: int


@dataclass(frozen=True, slots=True)
class WeightedPlacementScore:
    plugin: PlacementScorePlugin
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
        where = f"profile {profile.scheduler_name}"
        # Every pluginConfig entry, also of a plugin not enabled: its plugin must exist, its args be valid.
        configured, problems = validate_plugin_args(profile, registry.args_models())
        if problems:
            raise ProfileError("\n".join(f"{where}: {line}" for line in problems))

        def instance(name: str, point: str) -> Plugin:
            cls = registry.get(name)
            if cls is None:
                raise ProfileError(
                    f"{where}: plugins.{point}: unknown plugin {name!r} (known: {', '.join(registry.names())})"
                )
            want = _POINT_TYPES[point]
            if not issubclass(cls, want):
                raise ProfileError(f"{where}: plugin {name} does not implement {point}")
            if name not in instances:
                args = configured.get(name)
                if args is None:  # no pluginConfig entry: the model's defaults, if it has them all
                    args, missing = validate_args(cls.Args, {}, ("args",))
                    if args is None:
                        raise ProfileError(
                            "\n".join(
                                f"{where}: plugins.{point}: {name} has no pluginConfig entry: {line}"
                                for line in missing
                            )
                        )
                try:
                    instances[name] = cls(args, handle)
                except ValueError as exc:  # a rule the plugin checks beyond its model
                    raise ProfileError(f"{where}: plugin {name}: {exc}") from None
            return instances[name]

        for point in EXTENSION_POINTS:
            if point not in _POINT_TYPES:  # a point the configuration accepts but nothing runs
                raise ProfileError(f"{where}: plugins.{point}: this point is not run by troupe")
        plugins = {
            point: [(instance(n, point), w) for n, w in resolve_plugins(profile, point)] for point in EXTENSION_POINTS
        }

        # instance() checked that each plugin implements its point's interface.
        def at(point: str) -> list[Any]:
            return [p for p, _ in plugins[point]]

        def weighted(point: str) -> list[tuple[Any, int]]:
            return [(p, w or 1) for p, w in plugins[point]]

        self.pre_enqueue: list[PreEnqueuePlugin] = at("preEnqueue")
        self.pre_filter: list[PreFilterPlugin] = at("preFilter")
        self.filters: list[FilterPlugin] = at("filter")
        self.post_filter: list[PostFilterPlugin] = at("postFilter")
        self.scores = [WeightedScore(p, w) for p, w in weighted("score")]
        self.reserve: list[ReservePlugin] = at("reserve")
        self.permits: list[PermitPlugin] = at("permit")
        self.pre_bind: list[PreBindPlugin] = at("preBind")
        self.placement_generate: list[PlacementGeneratePlugin] = at("placementGenerate")
        self.placement_scores = [WeightedPlacementScore(p, w) for p, w in weighted("placementScore")]
        self.plugins = instances
        self.placement_algorithm = profile.pod_group_scheduling.algorithm == "Placement"
        self.search_steps = profile.pod_group_scheduling.search_steps
        self.protect_running = profile.autoscaling.protect_running
        self.percentage_of_nodes_to_score = profile.percentage_of_nodes_to_score or 0
        self.next_start_row = 0  # where the next pod's node sampling starts (round robin, as upstream)
        self.caches = PluginCaches()

    def wake_events(self, rejected_by: frozenset[str] | None) -> frozenset[str] | None:
        """The cluster events that may help a unit these plugins rejected
        (None: any event; also when the rejecting plugins are unknown)."""
        if not rejected_by:
            return None
        return events.union(self.plugins[name].events if name in self.plugins else None for name in rejected_by)

    # ------------------------------------------------------------- PreEnqueue

    def run_pre_enqueue(self, pod: PodInfo) -> Status:
        for plugin in self.pre_enqueue:
            status = plugin.pre_enqueue(pod)
            if not status.ok:
                return status if status.plugin else replace(status, plugin=plugin.name)
        return Status.success()

    # -------------------------------------------------------- PreFilter/Filter

    def run_pre_filters(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> Status:
        for plugin in self.pre_filter:
            status = plugin.pre_filter(state, pod, snapshot)
            if status.is_skip:
                state.skipped = state.skipped | plugin.name_set if state.skipped else plugin.name_set
                continue
            if not status.ok:
                return status if status.plugin else replace(status, plugin=plugin.name)
        return Status.success()

    def _row_local_filter(
        self, i: int, plugin: FilterPlugin, sign: Hashable, state: CycleState, pod: PodInfo, snapshot: Snapshot
    ) -> FilterResult:
        """The first pod of a signature pays the full filter; later ones (in
        this cycle or later ones) only re-check the rows that changed since."""
        ck = (i, sign)
        entry = self.caches.row_filters.get(ck)
        stale = entry.stale_rows(snapshot) if entry is not None else None
        if entry is None or stale is None:
            result = plugin.filter(state, pod, snapshot)
            entry = self.caches.row_filters.put(ck, RowResult(result.feasible.copy(), None, result=result))
            entry.synced(snapshot)
            return result
        assert entry.values is not None and entry.versions is not None and entry.result is not None
        if len(stale) == 1:  # the common case: the row the previous gang member went to
            row = int(stale[0])
            entry.values[row] = plugin.filter_row(state, pod, snapshot, row)
            entry.versions[row] = snapshot.row_version[row]
        elif len(stale):
            entry.values[stale] = plugin.filter_rows(state, pod, snapshot, stale)
            entry.versions[stale] = snapshot.row_version[stale]
        # Reasons are from the first pod: only used for a diagnosis, which
        # run_filters recomputes exactly when no node is left.
        return FilterResult(entry.values, entry.result.reasons, entry.result.unresolvable)

    def run_filters(
        self,
        state: CycleState,
        pod: PodInfo,
        snapshot: Snapshot,
        allowed: np.ndarray | None = None,
    ) -> tuple[np.ndarray, list[tuple[str, np.ndarray, FilterResult]]]:
        """Returns the feasible mask (within `allowed`, a placement's rows, if
        given) and, when no node is feasible, per plugin (its name, the
        candidates it saw, its result) for the diagnosis.

        The answer is the AND of every filter's mask, so the common case takes
        a short path: the AND of the static filters is cached per signature,
        and row-local filters are updated incrementally (signed plugins only).
        Only when nothing is feasible are the filters run again in order, each
        seeing the nodes the previous ones left, for upstream's exact reasons.
        """
        self.caches.check_static(snapshot)
        mask = self._static_mask(state, pod, snapshot)
        if allowed is not None:
            mask = mask & allowed
        if mask.any():
            skipped = state.skipped
            for i, plugin in enumerate(self.filters):
                if plugin.static or (skipped and plugin.name in skipped):
                    continue
                sign = plugin.sign_pod(pod) if plugin.row_local else None
                if sign is not None:
                    result = self._row_local_filter(i, plugin, sign, state, pod, snapshot)
                else:
                    result = plugin.filter(state, pod, snapshot)
                if result.passes_all:
                    continue
                mask = mask & result.feasible
                if not mask.any():
                    break
            else:
                return mask, []
        return self._run_filters_exact(state, pod, snapshot, allowed)

    def _static_mask(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> np.ndarray:
        """The AND of the static filters; shared by pods with the same
        signatures, unless one of them is unsigned (then computed each time)."""
        signs = tuple(p.sign_pod(pod) for p in self.filters if p.static)
        cacheable = None not in signs
        if cacheable:
            mask = self.caches.static_masks.get(signs)
            if mask is not None:
                return mask
        mask = snapshot.valid.copy()
        for i, plugin in enumerate(self.filters):
            if plugin.static:
                mask &= self._static_filter(i, plugin, state, pod, snapshot).feasible
        if cacheable:
            self.caches.static_masks.put(signs, mask)
        return mask

    def _static_filter(
        self, i: int, plugin: FilterPlugin, state: CycleState, pod: PodInfo, snapshot: Snapshot
    ) -> FilterResult:
        sign = plugin.sign_pod(pod)
        if sign is None:
            return plugin.filter(state, pod, snapshot)
        ck = (i, sign)
        result = self.caches.static_filters.get(ck)
        if result is None:
            result = self.caches.static_filters.put(ck, plugin.filter(state, pod, snapshot))
        return result

    def _run_filters_exact(
        self,
        state: CycleState,
        pod: PodInfo,
        snapshot: Snapshot,
        allowed: np.ndarray | None = None,
    ) -> tuple[np.ndarray, list[tuple[str, np.ndarray, FilterResult]]]:
        candidates = snapshot.valid.copy() if allowed is None else snapshot.valid & allowed
        trail: list[tuple[str, np.ndarray, FilterResult]] = []
        for i, plugin in enumerate(self.filters):
            if plugin.name in state.skipped:
                continue
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
            sign = plugin.sign_pod(pod) if plugin.static_score or plugin.row_local else None
            if sign is not None and plugin.static_score:
                ck = (i, sign)
                hit = self.caches.static_scores.get(ck)
                if hit is None:
                    all_rows = np.flatnonzero(snapshot.valid)
                    full = np.zeros(len(snapshot), dtype=np.int64)
                    full[all_rows] = plugin.score(state, pod, snapshot, all_rows)
                    uniform = len(all_rows) == 0 or bool(full[all_rows].min() == full[all_rows].max())
                    hit = self.caches.static_scores.put(ck, (full, uniform))
                full, uniform = hit
                if uniform:
                    # The same raw score on every node normalizes to the same
                    # score on every node: it cannot change which node wins.
                    continue
                raw = full[rows]
            elif sign is not None:
                raw = self._row_local_score(i, plugin, sign, state, pod, snapshot, rows)
            else:
                raw = plugin.score(state, pod, snapshot, rows)
                if len(raw) and raw.min() == raw.max():
                    continue  # equal everywhere: cannot change the winner
            total += np.asarray(plugin.normalize(raw), dtype=np.int64) * ws.weight
        return total

    def _row_local_score(
        self,
        i: int,
        plugin: ScorePlugin,
        sign: Hashable,
        state: CycleState,
        pod: PodInfo,
        snapshot: Snapshot,
        rows: np.ndarray,
    ) -> np.ndarray:
        """Scores of `rows`; after ROW_LOCAL_SCORE_AFTER pods of one signature,
        all rows are scored once and then only the rows that changed since."""
        ck = (i, sign)
        entry = self.caches.row_scores.get(ck)
        if entry is None:
            entry = self.caches.row_scores.put(ck, RowResult(None, None))
        entry.calls += 1
        if entry.calls < ROW_LOCAL_SCORE_AFTER:
            return plugin.score(state, pod, snapshot, rows)
        stale = entry.stale_rows(snapshot)
        if entry.values is None or stale is None:
            all_rows = np.flatnonzero(snapshot.valid)
            entry.values = np.zeros(len(snapshot), dtype=np.int64)
            entry.values[all_rows] = plugin.score(state, pod, snapshot, all_rows)
            entry.synced(snapshot)
        elif len(stale) == 1:  # the common case: the row the previous gang member went to
            row = int(stale[0])
            entry.values[row] = plugin.score_row(state, pod, snapshot, row) if snapshot.valid[row] else 0
            entry.versions[row] = snapshot.row_version[row]  # type: ignore[index]
        elif len(stale):
            live = stale[snapshot.valid[stale]]
            entry.values[stale] = 0
            if len(live):
                entry.values[live] = plugin.score(state, pod, snapshot, live)
            entry.versions[stale] = snapshot.row_version[stale]  # type: ignore[index]
        values: np.ndarray = entry.values[rows]
        return values

    # ------------------------------------------------------------- PostFilter

    def run_post_filter(
        self,
        state: CycleState,
        pod: PodInfo,
        snapshot: Snapshot,
        diagnosis: Diagnosis,
    ) -> tuple[PostFilterResult | None, Status]:
        """PostFilter for a pod that fits nowhere (`_post_filter_chain`)."""
        return self._post_filter_chain(lambda plugin: plugin.post_filter(state, pod, snapshot, diagnosis))

    def run_post_filter_group(
        self,
        state: CycleState,
        group: GroupContext,
        snapshot: Snapshot,
        diagnoses: Mapping[str, Diagnosis],
    ) -> tuple[GroupPostFilterResult | None, Status]:
        """PostFilter for the unplaced pods of a PodGroup at once (`_post_filter_chain`)."""
        return self._post_filter_chain(lambda plugin: plugin.post_filter_group(state, group, snapshot, diagnoses))

    def _post_filter_chain(
        self, run: Callable[[PostFilterPlugin], tuple[_Result | None, Status]]
    ) -> tuple[_Result | None, Status]:
        """Upstream's RunPostFilterPlugins, `run` calling each plugin: the
        first Success ends it; an Error stops it; otherwise the last
        Unschedulable (or Skip) is the answer."""
        last = Status.skip()
        for plugin in self.post_filter:
            result, status = run(plugin)
            status = status if status.plugin else replace(status, plugin=plugin.name)
            if status.ok and not status.is_skip:
                return result, status
            if status.code is Code.ERROR:
                return None, status
            if not status.is_skip:
                last = status
        return None, last

    # -------------------------------------------------------- Reserve, PreBind

    def reserves(self, state: CycleState) -> bool:
        """Whether any Reserve plugin runs for the pod of `state`."""
        if not self.reserve:
            return False
        return not state.skipped or any(p.name not in state.skipped for p in self.reserve)

    def run_reserve(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        """Reserve in order; on a failure, the plugins reserved so far (and the
        failing one) are unreserved in reverse, as upstream."""
        skipped = state.skipped
        for i, plugin in enumerate(self.reserve):
            if skipped and plugin.name in skipped:
                continue
            status = plugin.reserve(state, pod, node)
            if not status.ok:
                for done in reversed(self.reserve[: i + 1]):
                    if done.name not in skipped:
                        done.unreserve(state, pod, node)
                return status if status.plugin else replace(status, plugin=plugin.name)
        return Status.success()

    def run_unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        for plugin in reversed(self.reserve):
            if plugin.name not in state.skipped:
                plugin.unreserve(state, pod, node)

    def needs_pre_bind(self, state: CycleState) -> bool:
        """Whether any PreBind plugin runs for the pod of `state`."""
        return any(p.name not in state.skipped for p in self.pre_bind)

    async def run_pre_bind(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        for plugin in self.pre_bind:
            if plugin.name in state.skipped:
                continue
            status = await plugin.pre_bind(state, pod, node)
            if not status.ok:
                return status if status.plugin else replace(status, plugin=plugin.name)
        return Status.success()

    # ----------------------------------------------------------------- Permit

    def run_permit(self, group: GroupContext) -> Status:
        for plugin in self.permits:
            status = plugin.permit(group)
            if not status.ok:
                return status if status.plugin else replace(status, plugin=plugin.name)
        return Status.success()

    # -------------------------------------------------------------- Placement

    def run_placement_generate(
        self,
        state: CycleState,
        group: GroupContext,
        snapshot: Snapshot,
    ) -> tuple[list[Placement], Status]:
        """Each generator refines the previous one's placements (the first
        refines the whole cluster). A generator that returns Skip passes its
        parents through; an error or an empty answer ends the point."""
        placements = [Placement("", snapshot.valid.copy())]
        for plugin in self.placement_generate:
            generated, status = plugin.generate_placements(state, group, snapshot, placements)
            status = status if status.plugin else replace(status, plugin=plugin.name)
            if status.is_skip:
                continue
            if not status.ok:
                return [], status
            placements = generated
            if not placements:
                return [], Status.unschedulable("no placement was proposed", plugin=plugin.name)
        return placements, Status.success()

    def placement_score_bounds(
        self,
        state: CycleState,
        group: GroupContext,
        snapshot: Snapshot,
        placements: Sequence[Placement],
    ) -> np.ndarray | None:
        """Per placement, the most any proposal in it can score (weighted), or
        None when a scorer gives no bound or normalizes its scores."""
        total = np.zeros(len(placements), dtype=np.int64)
        for ws in self.placement_scores:
            plugin = ws.plugin
            if type(plugin).normalize_placement_scores is not PlacementScorePlugin.normalize_placement_scores:
                return None
            bounds = plugin.placement_score_bounds(state, group, snapshot, placements)
            if bounds is None:
                return None
            total += np.asarray(bounds, dtype=np.int64) * ws.weight
        return total

    def run_placement_scores(
        self,
        state: CycleState,
        group: GroupContext,
        snapshot: Snapshot,
        proposals: Sequence[PlacementAssignments],
    ) -> tuple[np.ndarray, Status]:
        """Weighted sum over plugins of each plugin's normalized scores, one per proposal."""
        total = np.zeros(len(proposals), dtype=np.int64)
        for ws in self.placement_scores:
            raw = np.zeros(len(proposals), dtype=np.int64)
            for j, proposal in enumerate(proposals):
                value, status = ws.plugin.score_placement(state, group, snapshot, proposal)
                if not status.ok:
                    return total, status if status.plugin else replace(status, plugin=ws.plugin.name)
                raw[j] = value
            total += np.asarray(ws.plugin.normalize_placement_scores(raw), dtype=np.int64) * ws.weight
        return total, Status.success()
