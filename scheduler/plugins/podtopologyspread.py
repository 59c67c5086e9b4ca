"""PodTopologySpread: spread matching pods evenly over topology domains
(upstream pkg/scheduler/framework/plugins/podtopologyspread: common.go,
filtering.go, scoring.go, plugin.go, v1.37).

Filter (`whenUnsatisfiable: DoNotSchedule`): per constraint, the pods matching
its selector *in the incoming pod's namespace* (terminating pods excluded) are
counted per domain of `topologyKey`, over the eligible nodes only: nodes that
carry every constraint's key, pass the pod's nodeSelector / required node
affinity when `nodeAffinityPolicy: Honor` (the default) and whose
NoSchedule/NoExecute taints the pod tolerates when `nodeTaintsPolicy: Honor`
(default Ignore). A node is feasible when
`count(its domain) + selfMatch - globalMin <= maxSkew`, where globalMin is 0
while fewer eligible domains exist than `minDomains` (default 1). A node
without a key is rejected as unresolvable ("... (missing required label)");
for each node the first failing constraint, in spec order, names the reason.

Score (`ScheduleAnyway`): upstream's preScore/score/normalize: per constraint
`count * log(#domains among the scored nodes + 2) + (maxSkew - 1)` (hostname
constraints count per node and weigh by the number of scored nodes), rounded,
then reversed so the node with the fewest matching pods gets 100. Scored nodes
that lack a key get 0 (upstream's IgnoredNodes), except under System
defaulting, where a missing key is the value "" (nodes without a zone form a
zone of their own, as upstream).

`matchLabelKeys`: the incoming pod's values for those keys are ANDed into the
selector, as upstream's scheduler does. The apiserver may already have merged
them into `labelSelector` (MatchLabelKeysInPodTopologySpreadSelectorMerge);
the merge is idempotent (requirements are a deduplicated AND), so merging
twice changes nothing. A missing (null) selector matches nothing and stays so.

Upstream quirks kept on purpose: an empty selector (`{}`) counts no existing
pod but does match the incoming pod (labels.Everything().Empty()); a node's
own domain count is read even when the node itself is not eligible.

What differs from upstream, and why:

- Default constraints (args `defaultConstraints`, `defaultingType: System |
  List`, default System) apply only to pods without constraints of their own,
  as upstream, but their selector is NOT derived from the Services,
  ReplicationControllers, ReplicaSets and StatefulSets selecting the pod:
  troupe does not watch those objects. The selector is the pod's PodGroup
  instead, `scheduling.troupe.dev/pod-group=<group>` (same namespace), and a
  pod in no group gets no default constraints (upstream: a pod no controller
  selects gets none either). System defaults are upstream's: hostname maxSkew
  3 and topology.kubernetes.io/zone maxSkew 5, both ScheduleAnyway.
- Pods placed earlier in the same group cycle (`snapshot.assumed`) count like
  running pods, which is how a gang spreads within one cycle.
- No PreFilter/AddPod/RemovePod: counts are computed in Filter from the
  snapshot's per-row match counts (`snapshot.count_matching`), which the
  cycle keeps current on assume; preemption is not implemented yet.
- A selector the apiserver would have rejected (it validates pod specs) is
  not re-validated here: an unknown operator simply matches nothing.
- No queueing hints (EventsToRegister): troupe's queue requeues on its own
  cluster events.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Hashable, Mapping, Sequence

import numpy as np

from ..api.constants import POD_GROUP_LABEL
from ..api.records import LabelSelector, NodeInfo, PodInfo, Requirement, TopologySpreadConstraint
from ..cluster.snapshot import Snapshot
from ..framework.interface import CycleState, FilterPlugin, FilterResult, Handle, ScorePlugin
from ..framework import events as E

REASON = "node(s) didn't match pod topology spread constraints"
REASON_MISSING_LABEL = REASON + " (missing required label)"

DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
HONOR = "Honor"
IGNORE = "Ignore"
SYSTEM_DEFAULTING = "System"
LIST_DEFAULTING = "List"

LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_ZONE = "topology.kubernetes.io/zone"

MAX_NODE_SCORE = 100
MAX_INT32 = 2**31 - 1
# A raw score for a node the plugin does not score (upstream's invalidScore and
# IgnoredNodes): normalize turns it into 0. Real raw scores are never negative.
IGNORED = -1

SYSTEM_DEFAULT_CONSTRAINTS: tuple[TopologySpreadConstraint, ...] = (
    TopologySpreadConstraint(max_skew=3, topology_key=LABEL_HOSTNAME, when_unsatisfiable=SCHEDULE_ANYWAY, selector=None),
    TopologySpreadConstraint(max_skew=5, topology_key=LABEL_ZONE, when_unsatisfiable=SCHEDULE_ANYWAY, selector=None),
)


@dataclass(frozen=True, slots=True)
class Constraint:
    """Upstream's internal topologySpreadConstraint: the selector resolved
    (matchLabelKeys merged, defaults' selector filled in), defaults applied."""

    max_skew: int
    topology_key: str
    selector: LabelSelector | None  # None: labels.Nothing()
    min_domains: int = 1
    node_affinity_policy: str = HONOR
    node_taints_policy: str = IGNORE


@dataclass(frozen=True, slots=True)
class DomainCounts:
    """Upstream's preFilterState for one constraint, as plain values (for
    tests and debugging): matching pods per eligible domain, and the global
    minimum used for the skew (0 while there are fewer domains than minDomains)."""

    constraint: Constraint
    counts: dict[str, int]
    min_match: int


# ------------------------------------------------------------- selectors


def selector_matches(selector: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    return selector is not None and selector.matches(labels)


def selector_empty(selector: LabelSelector | None) -> bool:
    """labels.Selector.Empty(): `{}` is empty (matches everything); null is not."""
    return selector is not None and not selector.match_labels and not selector.match_expressions


def _canonical(match_labels: Sequence[tuple[str, str]], expressions: Sequence[Requirement]) -> LabelSelector:
    # Requirements are ANDed: sorting and deduplicating keeps the meaning and
    # makes a selector merged twice equal (same count_matching key) to one merged once.
    reqs = sorted(set(expressions), key=lambda r: (r.key, r.operator, r.values))
    return LabelSelector(tuple(sorted(set(match_labels))), tuple(reqs))


def merge_match_label_keys(selector: LabelSelector | None, keys: Sequence[str], pod_labels: Mapping[str, str]) -> LabelSelector | None:
    """Upstream mergeLabelSetWithSelector: AND `key=<pod's value>` for each key
    the pod has. A null selector stays null (Nothing has no requirements)."""
    if selector is None:
        return None
    extra = [(k, pod_labels[k]) for k in keys if k in pod_labels]
    if not extra:
        return selector
    return _canonical(list(selector.match_labels) + extra, selector.match_expressions)


# ------------------------------------------------------------ plugin args


def _parse_default_constraints(raw: Any) -> tuple[TopologySpreadConstraint, ...]:
    """PodTopologySpreadArgs.defaultConstraints, validated as upstream's
    ValidatePodTopologySpreadArgs (no labelSelector, no repeated key/action)."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ValueError("defaultConstraints: must be a list")
    out: list[TopologySpreadConstraint] = []
    errors: list[str] = []
    seen: set[tuple[str, str]] = set()
    for i, c in enumerate(raw):
        p = f"defaultConstraints[{i}]"
        if not isinstance(c, Mapping):
            errors.append(f"{p}: must be an object")
            continue
        try:
            max_skew = int(c.get("maxSkew") or 0)
        except (TypeError, ValueError):
            max_skew = 0
        if max_skew <= 0:
            errors.append(f"{p}.maxSkew: Invalid value: {c.get('maxSkew')!r}: not in valid range (0, inf)")
        key = str(c.get("topologyKey") or "")
        if not key:
            errors.append(f"{p}.topologyKey: Required value: can not be empty")
        action = str(c.get("whenUnsatisfiable") or "")
        if not action:
            errors.append(f"{p}.whenUnsatisfiable: Required value: can not be empty")
        elif action not in (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY):
            errors.append(f'{p}.whenUnsatisfiable: Unsupported value: "{action}": supported values: "DoNotSchedule", "ScheduleAnyway"')
        if c.get("labelSelector") is not None:
            errors.append(f"{p}.labelSelector: Forbidden: constraint must not define a selector, as they deduced for each pod")
        if (key, action) in seen:
            errors.append(f"defaultConstraints[{i}]: Duplicate value: \"{{{key}, {action}}}\"")
        seen.add((key, action))
        min_domains = c.get("minDomains")
        out.append(TopologySpreadConstraint(
            max_skew=max_skew,
            topology_key=key,
            when_unsatisfiable=action,
            selector=None,
            min_domains=int(min_domains) if min_domains is not None else None,
            node_affinity_policy=str(c.get("nodeAffinityPolicy") or HONOR),
            node_taints_policy=str(c.get("nodeTaintsPolicy") or IGNORE),
            match_label_keys=tuple(str(k) for k in c.get("matchLabelKeys") or ()),
        ))
    if errors:
        raise ValueError("; ".join(errors))
    return tuple(out)


# ------------------------------------------------------- node eligibility


def _matches_required_node_affinity(pod: PodInfo, node: NodeInfo) -> bool:
    """Upstream nodeaffinity.GetRequiredNodeAffinity(pod).Match(node): the
    nodeSelector and the required terms (ORed), not the NodeAffinity plugin's
    scheduler-enforced addedAffinity."""
    labels = node.labels
    for k, v in pod.node_selector.items():
        if labels.get(k) != v:
            return False
    if pod.required_affinity is not None:
        return any(t.matches(labels, node.name) for t in pod.required_affinity)
    return True


def _tolerates_do_not_schedule_taints(pod: PodInfo, node: NodeInfo) -> bool:
    """Upstream FindMatchingUntoleratedTaint with DoNotScheduleTaintsFilterFunc."""
    for taint in node.taints:
        if taint.effect in ("NoSchedule", "NoExecute") and not any(t.tolerates(taint) for t in pod.tolerations):
            return False
    return True


@dataclass(slots=True)
class _SoftCounts:
    dom_eff: np.ndarray
    contributing: np.ndarray
    per_domain: np.ndarray
    last: np.ndarray  # per_row as of `seen`
    seen: int


class PodTopologySpread(FilterPlugin, ScorePlugin):
    name = "PodTopologySpread"
    events = frozenset({E.ASSIGNED_POD_ADD, E.ASSIGNED_POD_LABEL, E.ASSIGNED_POD_DELETE, E.NODE_ADD, E.NODE_DELETE, E.NODE_LABEL, E.NODE_TAINT})

    # Depends on the pods running in each domain, so nothing is cached by the framework.
    static = False
    static_score = False

    def __init__(self, args: Mapping[str, Any], handle: Handle) -> None:
        super().__init__(args, handle)
        self._soft_serial = -1  # the snapshot state `_soft` was built for
        self._soft: dict[Hashable, _SoftCounts] = {}
        self._soft_static: dict[Hashable, tuple[np.ndarray, np.ndarray, np.ndarray, int]] = {}
        self._defaults: dict[tuple[str, str], list[Constraint]] = {}
        self._everywhere: dict[tuple[str, int, int], bool] = {}  # default constraints per (group, action)
        defaulting = args.get("defaultingType") or SYSTEM_DEFAULTING
        if defaulting not in (SYSTEM_DEFAULTING, LIST_DEFAULTING):
            raise ValueError(f'defaultingType: Unsupported value: "{defaulting}": supported values: "List", "System"')
        constraints = _parse_default_constraints(args.get("defaultConstraints"))
        if defaulting == SYSTEM_DEFAULTING and constraints:
            raise ValueError('defaultingType: Invalid value: "System": when .defaultConstraints are not empty')
        self.system_defaulted = defaulting == SYSTEM_DEFAULTING
        self.default_constraints = SYSTEM_DEFAULT_CONSTRAINTS if self.system_defaulted else constraints
        # Node eligibility masks; they read only labels and taints, so they stay
        # valid for one (static generation, row count) of the node table.
        self._mask_key: tuple[int, int] = (-1, -1)
        self._masks: dict[Hashable, np.ndarray] = {}

    # ------------------------------------------------------------ constraints

    def constraints(self, pod: PodInfo, action: str) -> list[Constraint]:
        """Upstream getConstraints / initPreScoreState: the pod's own constraints
        for `action`, or the defaults when it has none. O(#constraints)."""
        if pod.topology_spread:
            return [self._resolve(c, c.selector, pod) for c in pod.topology_spread if c.when_unsatisfiable == action]
        group = pod.group_name
        if group is None:
            return []  # troupe's stand-in for "no Service/ReplicaSet/StatefulSet selects the pod"
        hit = self._defaults.get((group, action))
        if hit is None:
            if len(self._defaults) > 4096:
                self._defaults.clear()
            selector = LabelSelector(match_labels=((POD_GROUP_LABEL, group),))
            # buildDefaultConstraints replaces the selector (matchLabelKeys included) by the default one.
            hit = self._defaults[(group, action)] = [
                self._resolve(c, selector, pod, merge=False) for c in self.default_constraints if c.when_unsatisfiable == action
            ]
        return hit

    @staticmethod
    def _resolve(c: TopologySpreadConstraint, selector: LabelSelector | None, pod: PodInfo, merge: bool = True) -> Constraint:
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

    # ------------------------------------------------------------- counting

    def _matching_per_row(self, c: Constraint, pod: PodInfo, snapshot: Snapshot) -> np.ndarray:
        """Per row, running + assumed pods that match `c` in the pod's namespace
        (upstream countPodsMatchSelector). One pass over the pods per snapshot
        and selector (snapshot.count_matching), O(1) afterwards."""
        if c.selector is None or selector_empty(c.selector):
            return np.zeros(len(snapshot), dtype=np.int64)
        selector: LabelSelector = c.selector
        ns = pod.namespace

        def predicate(p: PodInfo) -> bool:
            return p.namespace == ns and not p.deleting and selector.matches(p.labels)

        return snapshot.count_matching((self.name, selector, ns), predicate, selector)

    def _node_mask(self, kind: str, signature: Hashable, snapshot: Snapshot, pod: PodInfo) -> np.ndarray:
        """Eligibility of every row for a pod spec; a per-node Python pass, but
        only once per (signature, static generation): it reads labels/taints only."""
        key = (snapshot.static_generation, len(snapshot))
        if key != self._mask_key or len(self._masks) > 1024:
            self._mask_key = key
            self._masks.clear()
        ck = (kind, signature)
        mask = self._masks.get(ck)
        if mask is None:
            test = _matches_required_node_affinity if kind == "affinity" else _tolerates_do_not_schedule_taints
            mask = np.zeros(len(snapshot), dtype=bool)
            for i, node in enumerate(snapshot.nodes):
                if node is not None and snapshot.valid[i]:
                    mask[i] = test(pod, node)
            self._masks[ck] = mask
        return mask

    @staticmethod
    def _inclusion_sign(c: Constraint, pod: PodInfo) -> tuple[Hashable, Hashable]:
        """What `_included` reads of the pod: its node affinity under Honor,
        its tolerations under Honor (equal signs, equal masks)."""
        affinity: Hashable = None
        if c.node_affinity_policy == HONOR and (pod.node_selector or pod.required_affinity is not None):
            affinity = (tuple(sorted(pod.node_selector.items())), pod.required_affinity)
        return affinity, pod.tolerations if c.node_taints_policy == HONOR else None

    def _included(self, c: Constraint, pod: PodInfo, snapshot: Snapshot) -> np.ndarray:
        """Upstream matchNodeInclusionPolicies over all rows. O(nodes) numpy
        (the masks themselves are cached)."""
        mask = snapshot.valid
        affinity, tolerations = self._inclusion_sign(c, pod)
        if affinity is not None:
            mask = mask & self._node_mask("affinity", affinity, snapshot, pod)
        if tolerations is not None:
            mask = mask & self._node_mask("taints", tolerations, snapshot, pod)
        return mask

    @staticmethod
    def _has_all_keys(constraints: Sequence[Constraint], snapshot: Snapshot) -> np.ndarray:
        """Rows whose node carries every constraint's topology key (nodeLabelsMatchSpreadConstraints)."""
        mask = snapshot.valid.copy()
        for c in constraints:
            mask &= snapshot.domains(c.topology_key)[0] >= 0
        return mask

    def _domain_counts(self, c: Constraint, pod: PodInfo, snapshot: Snapshot, has_all: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """(matching pods per domain, domain is eligible, global minimum) for a
        DoNotSchedule constraint. Both arrays have one extra trailing slot, so
        indexing with a row's domain -1 (no label) reads 0 / False. O(nodes)."""
        dom, values = snapshot.domains(c.topology_key)
        eligible = has_all & self._included(c, pod, snapshot)
        idx = dom[eligible]
        slots = len(values) + 1
        present = np.bincount(idx, minlength=slots) > 0
        per_row = self._matching_per_row(c, pod, snapshot)
        per_domain = np.bincount(idx, weights=per_row[eligible], minlength=slots).astype(np.int64)
        num_domains = int(present.sum())
        # CriticalPaths[0].MatchNum; MaxInt32 when no domain is eligible (then
        # num_domains < minDomains >= 1 makes it 0 anyway).
        min_match = int(per_domain[present].min()) if num_domains else MAX_INT32
        if num_domains < c.min_domains:
            min_match = 0
        return per_domain, present, min_match

    def pre_filter_state(self, pod: PodInfo, snapshot: Snapshot) -> list[DomainCounts]:
        """Upstream's preFilterState (TpValueToMatchNum and the global minimum),
        for tests and debugging. The filter uses the arrays directly."""
        constraints = self.constraints(pod, DO_NOT_SCHEDULE)
        has_all = self._has_all_keys(constraints, snapshot)
        out = []
        for c in constraints:
            per_domain, present, min_match = self._domain_counts(c, pod, snapshot, has_all)
            values = snapshot.domains(c.topology_key)[1]
            counts = {values[d]: int(per_domain[d]) for d in np.flatnonzero(present)}
            out.append(DomainCounts(c, counts, min_match))
        return out

    # ----------------------------------------------------------------- Filter

    def filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> FilterResult:
        """O(constraints x nodes) numpy, plus count_matching's one pass over the
        running pods the first time a selector is seen in this snapshot."""
        n = len(snapshot)
        constraints = self.constraints(pod, DO_NOT_SCHEDULE)
        if not constraints:
            return FilterResult.all(n)  # upstream PreFilter returns Skip
        has_all = self._has_all_keys(constraints, snapshot)
        undecided = snapshot.valid.copy()
        missing = np.zeros(n, dtype=bool)
        skewed = np.zeros(n, dtype=bool)
        for c in constraints:
            # Upstream returns at the first constraint a node fails, in spec order.
            dom = snapshot.domains(c.topology_key)[0]
            lacks = undecided & (dom < 0)
            missing |= lacks
            undecided &= ~lacks
            per_domain, _, min_match = self._domain_counts(c, pod, snapshot, has_all)
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
            counted = self._has_all_keys(constraints, snapshot)
            scored_mask: np.ndarray | slice = counted[rows]
            scored = rows[scored_mask]
        else:
            counted = valid
            scored_mask, scored = slice(None), rows
        total = np.zeros(len(scored), dtype=np.float64)
        for c in constraints:
            dom, values = snapshot.domains(c.topology_key)
            per_row = self._matching_per_row(c, pod, snapshot)
            everywhere = self._key_everywhere(c.topology_key, snapshot)
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
                dom_eff, per_domain = self._soft_domain_counts(c, pod, snapshot, counted, counted_by, per_row)
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

    def _key_everywhere(self, topology_key: str, snapshot: Snapshot) -> bool:
        """Whether every node carries `topology_key` (cached until labels change)."""
        ck = (topology_key, snapshot.static_generation, len(snapshot))
        hit = self._everywhere.get(ck)
        if hit is None:
            if len(self._everywhere) > 64:
                self._everywhere.clear()
            dom = snapshot.domains(topology_key)[0]
            hit = self._everywhere[ck] = bool((dom[snapshot.valid] >= 0).all())
        return hit

    def _soft_domain_counts(
        self, c: Constraint, pod: PodInfo, snapshot: Snapshot, counted: np.ndarray, counted_by: Hashable,
        per_row: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(row -> effective domain, matching pods per domain) for a soft
        constraint; `counted_by` names the rows `counted` (the topology keys
        every counted node must carry, None: all nodes). The first pod of a signature in a snapshot pays O(nodes);
        later ones only add what the pods assumed since changed (O(1) per pod
        of a gang), since `per_row` is kept current by the snapshot."""
        if self._soft_serial != snapshot.serial:
            self._soft_serial = snapshot.serial
            self._soft.clear()
        inclusion = self._inclusion_sign(c, pod)
        ck = (c, pod.namespace, inclusion, counted_by)
        entry = self._soft.get(ck)
        if entry is None:
            # Row -> domain and the contributing rows depend on node labels and
            # taints only: shared by every group and cycle until they change.
            static = (c.topology_key, inclusion, counted_by, snapshot.static_generation, len(snapshot))
            hit = self._soft_static.get(static)
            if hit is None:
                if len(self._soft_static) > 256:
                    self._soft_static.clear()
                dom, values = snapshot.domains(c.topology_key)
                # A missing label reads as value "" (only possible without require_all).
                empty = values.index("") if "" in values else len(values)
                dom_eff = np.where(dom >= 0, dom, empty)
                contributing = counted & self._included(c, pod, snapshot)
                hit = self._soft_static[static] = (dom_eff, contributing, dom_eff[contributing], len(values) + 1)
            dom_eff, contributing, idx, slots = hit
            if per_row.any():
                per_domain = np.bincount(idx, weights=per_row[contributing], minlength=slots)
            else:  # no matching pod runs anywhere yet (a new group): all zero
                per_domain = np.zeros(slots, dtype=np.float64)
            entry = self._soft[ck] = _SoftCounts(dom_eff, contributing, per_domain, per_row.copy(), len(snapshot.changed_rows))
        elif len(snapshot.changed_rows) > entry.seen:
            for r in set(snapshot.changed_rows[entry.seen:]):
                delta = per_row[r] - entry.last[r]
                if delta and entry.contributing[r]:
                    entry.per_domain[entry.dom_eff[r]] += delta
                entry.last[r] = per_row[r]
            entry.seen = len(snapshot.changed_rows)
        return entry.dom_eff, entry.per_domain

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
