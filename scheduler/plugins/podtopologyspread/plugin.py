"""The PodTopologySpread plugin: Filter (DoNotSchedule) and Score
(ScheduleAnyway) over the domain counts of counting.py; see the package's
docstring for the semantics and where troupe differs from upstream."""

from __future__ import annotations

import math

import numpy as np

from ...api.records import GroupKey, LabelSelector, PodInfo, TopologySpreadConstraint
from ...cluster.snapshot import Snapshot
from ...framework import events as E
from ...framework.interface import CycleState, FilterPlugin, FilterResult, Handle, ScorePlugin
from .args import SYSTEM_DEFAULTING, PodTopologySpreadArgs
from .common import (
    DO_NOT_SCHEDULE,
    HONOR,
    IGNORE,
    IGNORED,
    LABEL_HOSTNAME,
    MAX_NODE_SCORE,
    NAME,
    REASON,
    REASON_MISSING_LABEL,
    SCHEDULE_ANYWAY,
    Constraint,
    merge_match_label_keys,
    selector_matches,
)
from .counting import DomainCounting, has_all_keys


class PodTopologySpread(FilterPlugin, ScorePlugin):
    name = NAME
    events = frozenset(
        {
            E.ASSIGNED_POD_ADD,
            E.ASSIGNED_POD_LABEL,
            E.ASSIGNED_POD_DELETE,
            E.NODE_ADD,
            E.NODE_DELETE,
            E.NODE_LABEL,
            E.NODE_TAINT,
        }
    )

    # Depends on the pods running in each domain, so nothing is cached by the framework.
    static = False
    static_score = False

    Args = PodTopologySpreadArgs

    def __init__(self, args: PodTopologySpreadArgs, handle: Handle) -> None:
        super().__init__(args, handle)
        self.counting = DomainCounting()
        self._defaults: dict[tuple[GroupKey, str], list[Constraint]] = {}  # default constraints per (group, action)
        self.system_defaulted = args.defaulting_type == SYSTEM_DEFAULTING
        self.default_constraints = args.resolved_defaults()

    # ------------------------------------------------------------ constraints

    def constraints(self, pod: PodInfo, action: str) -> list[Constraint]:
        """Upstream getConstraints / initPreScoreState: the pod's own constraints
        for `action`, or the defaults when it has none. O(#constraints)."""
        if pod.topology_spread:
            return [self._resolve(c, c.selector, pod) for c in pod.topology_spread if c.when_unsatisfiable == action]
        group = pod.group
        if group is None:
            return []  # troupe's stand-in for "no Service/ReplicaSet/StatefulSet selects the pod"
        hit = self._defaults.get((group, action))
        if hit is None:
            if len(self._defaults) > 4096:
                self._defaults.clear()
            selector = LabelSelector(match_labels=(group.member_label,))
            # buildDefaultConstraints replaces the selector (matchLabelKeys included) by the default one.
            hit = self._defaults[(group, action)] = [
                self._resolve(c, selector, pod, merge=False)
                for c in self.default_constraints
                if c.when_unsatisfiable == action
            ]
        return hit

    @staticmethod
    def _resolve(
        c: TopologySpreadConstraint, selector: LabelSelector | None, pod: PodInfo, merge: bool = True
    ) -> Constraint:
        if merge and c.match_label_keys:
            selector = merge_match_label_keys(selector, c.match_label_keys, pod.labels)
        return Constraint(
            max_skew=c.max_skew,
            topology_key=c.topology_key,
            selector=selector,
            min_domains=c.min_domains if c.min_domains is not None else 1,
            node_affinity_policy=c.node_affinity_policy or HONOR,
            node_taints_policy=c.node_taints_policy or IGNORE,
        )

    # ----------------------------------------------------------------- Filter

    def filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> FilterResult:
        """O(constraints x nodes) numpy, plus count_matching's one pass over the
        running pods the first time a selector is seen in this snapshot."""
        n = len(snapshot)
        constraints = self.constraints(pod, DO_NOT_SCHEDULE)
        if not constraints:
            return FilterResult.all(n)  # upstream PreFilter returns Skip
        has_all = has_all_keys(constraints, snapshot)
        undecided = snapshot.valid.copy()
        missing = np.zeros(n, dtype=bool)
        skewed = np.zeros(n, dtype=bool)
        for c in constraints:
            # Upstream returns at the first constraint a node fails, in spec order.
            dom = snapshot.domains(c.topology_key)[0]
            lacks = undecided & (dom < 0)
            missing |= lacks
            undecided &= ~lacks
            per_domain, _, min_match = self.counting.domain_counts(c, pod, snapshot, has_all)
            self_match = 1 if selector_matches(c.selector, pod.labels) else 0
            skew = per_domain[dom] + self_match - min_match
            bad = undecided & (skew > c.max_skew)
            skewed |= bad
            undecided &= ~bad
        reasons: list[tuple[str, np.ndarray]] = []
        if missing.any():
            reasons.append((REASON_MISSING_LABEL, missing))
        if skewed.any():
            reasons.append((REASON, skewed))
        return FilterResult(~(missing | skewed), reasons, frozenset({REASON_MISSING_LABEL}))

    # ------------------------------------------------------------------ Score

    def score(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, rows: np.ndarray) -> np.ndarray:
        """Upstream PreScore + Score for the nodes in `rows` (the filtered nodes).
        O(constraints x nodes) numpy; IGNORED for nodes lacking a key, and for
        all nodes when the pod has no soft constraints (upstream Skip)."""
        out = np.full(len(rows), IGNORED, dtype=np.int64)
        constraints = self.constraints(pod, SCHEDULE_ANYWAY)
        if not constraints or snapshot.num_nodes == 0 or len(rows) == 0:
            return out
        # Only non-system-default rules require every key, so that nodes
        # without a zone label still get hostname spreading.
        require_all = bool(pod.topology_spread) or not self.system_defaulted
        valid = snapshot.valid
        if require_all:
            counted = has_all_keys(constraints, snapshot)
            scored_mask: np.ndarray | slice = counted[rows]
            scored = rows[scored_mask]
        else:
            counted = valid
            scored_mask, scored = slice(None), rows
        total = np.zeros(len(scored), dtype=np.float64)
        for c in constraints:
            dom, values = snapshot.domains(c.topology_key)
            per_row = self.counting.matching_per_row(c, pod, snapshot)
            everywhere = self.counting.key_everywhere(c.topology_key, snapshot)
            if not per_row.any():
                # No matching pod runs anywhere (e.g. the first cycle of a new
                # PodGroup): every count is 0, so the term is just maxSkew - 1.
                total += float(c.max_skew - 1) if everywhere else np.where(dom[scored] >= 0, float(c.max_skew - 1), 0.0)
                continue
            if c.topology_key == LABEL_HOSTNAME:
                # Per-node counts, without inclusion policies, as upstream's Score.
                weight = math.log(len(scored) + 2)
                cnt = per_row[scored]
            else:
                counted_by = tuple(k.topology_key for k in constraints) if require_all else None
                dom_eff, per_domain = self.counting.soft_domain_counts(c, pod, snapshot, counted, counted_by, per_row)
                in_scored = np.zeros(len(per_domain), dtype=bool)
                in_scored[dom_eff[scored]] = True
                weight = math.log(int(in_scored.sum()) + 2)
                cnt = per_domain[dom_eff[scored]]
            # scoreForCount, summed in constraint order like upstream (same float ops).
            term = cnt.astype(np.float64) * weight + float(c.max_skew - 1)
            total += term if everywhere else np.where(dom[scored] >= 0, term, 0.0)
        # math.Round (half away from zero); x - floor(x) is exact for x >= 0.
        rounded = np.floor(total)
        rounded += (total - rounded) >= 0.5
        out[scored_mask] = rounded.astype(np.int64)
        return out

    def normalize(self, scores: np.ndarray) -> np.ndarray:
        """Upstream NormalizeScore: reversed min-max, ignored nodes 0. O(nodes)."""
        scores = np.asarray(scores, dtype=np.int64)
        out = np.zeros(len(scores), dtype=np.int64)
        live = scores != IGNORED
        if not live.any():
            return out
        lo = int(scores[live].min())
        hi = max(int(scores[live].max()), 0)
        if hi == 0:
            out[live] = MAX_NODE_SCORE
        else:
            out[live] = MAX_NODE_SCORE * (hi + lo - scores[live]) // hi
        return out
