"""InterPodAffinity: required pod affinity / anti-affinity filter, preferred
(anti-)affinity score (upstream pkg/scheduler/framework/plugins/interpodaffinity:
filtering.go, scoring.go, plugin.go).

Filter, in upstream's order (a node gets the first reason that applies):

1. every required affinity term of the incoming pod must find, in the node's
   domain (the node's value of the term's topologyKey), a running pod that
   matches *all* the terms ("node(s) didn't match pod affinity rules",
   unresolvable). A node lacking any of the topology keys fails. If no pod
   matching all the terms runs on any node that has one of the keys, and the
   incoming pod matches its own terms, any node with all the keys passes (the
   first pod of a group that wants to be with itself is not stuck);
2. no running pod matching one of its required anti-affinity terms may be in
   the node's domain of that term ("node(s) didn't match pod anti-affinity
   rules"); a node lacking the key passes;
3. symmetry: no running pod whose required anti-affinity term matches the
   incoming pod may be in the node's domain of that term ("node(s) didn't
   satisfy existing pods anti-affinity rules").

Score: per domain, + weight of the incoming pod's preferred affinity terms and
- weight of its preferred anti-affinity terms for every running pod matching
them; symmetric, + / - weight of running pods' preferred terms that match the
incoming pod and `hardPodAffinityWeight` for their required affinity terms.
Scores are scaled min..max to 0..100 over the scored nodes (all equal -> 0).
Args: `hardPodAffinityWeight` (0..100, default 1),
`ignorePreferredTermsOfExistingPods` (default false). Default weight 2.

"Running pods" are the snapshot's: bound or assumed in the cache, plus the pods
placed earlier in this cycle (`snapshot.assumed`, e.g. the other pods of the
same PodGroup), so a gang with anti-affinity to itself spreads within one cycle.

Namespaces: a term with no `namespaces` and no `namespaceSelector` selects the
pod's own namespace; an empty `namespaceSelector` selects all namespaces; a
non-empty one is matched against `snapshot.namespace_labels`. A namespace that
mapping does not know (it is empty when the runtime does not know the labels)
matches no non-empty namespace selector, also for the symmetric check of
existing pods' terms (upstream treats the incoming pod's unknown namespace as
having no labels, so `DoesNotExist` selectors would match it there).

What differs from upstream, and why:
- `matchLabelKeys` / `mismatchLabelKeys` are merged into the label selector
  here (In / NotIn the owning pod's value; keys the pod lacks are skipped, a nil
  selector stays nil), as kube-apiserver does at pod creation; a selector the
  apiserver already merged gets the same requirement twice, which is harmless.
- The InterPodAffinityHostnameFastPath gate (alpha, off by default in v1.37)
  is not modelled; semantics are those of the gate off.
- No PreFilter/PreScore "Skip" and no invalid-selector errors: a pod with
  nothing to check gets an all-feasible mask / all-zero scores, and selectors
  are used as parsed (the apiserver validates them).
- Work is shared per snapshot instead of recomputed per pod: counts of running
  pods matching a (selector, namespaces) pair come from
  `snapshot.count_matching` (one pass over the running pods per distinct pair,
  then O(1) per assumed pod), and existing pods' terms are indexed once per
  snapshot by distinct term.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import Field, field_validator

from ..api.config import PluginArgs
from ..api.records import LabelSelector, PodAffinityTerm, PodInfo, Requirement
from ..cluster.snapshot import Snapshot
from ..framework import events as E
from ..framework.interface import CycleState, FilterPlugin, FilterResult, Handle, ScorePlugin

NAME = "InterPodAffinity"
REASON_AFFINITY = "node(s) didn't match pod affinity rules"
REASON_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
REASON_EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
MAX_NODE_SCORE = 100
DEFAULT_HARD_POD_AFFINITY_WEIGHT = 1
MAX_HARD_POD_AFFINITY_WEIGHT = 100
# Upstream returns UnschedulableAndUnresolvable only for the affinity reason:
# evicting pods cannot create a pod the incoming one wants to be near.
_UNRESOLVABLE = frozenset((REASON_AFFINITY,))

# Kinds of existing pods' terms in the per-snapshot index.
_REQ_ANTI, _REQ_AFF, _PREF_AFF, _PREF_ANTI = range(4)


# ------------------------------------------------------------------ terms


def _is_empty(sel: LabelSelector) -> bool:
    return not sel.match_labels and not sel.match_expressions


def merge_label_keys(term: PodAffinityTerm, labels: Mapping[str, str]) -> LabelSelector | None:
    """The term's selector with matchLabelKeys (In) and mismatchLabelKeys (NotIn)
    applied from the owning pod's labels, as kube-apiserver does."""
    sel = term.selector
    if sel is None or not (term.match_label_keys or term.mismatch_label_keys):
        return sel
    extra = [Requirement(k, "In", (labels[k],)) for k in term.match_label_keys if k in labels]
    extra += [Requirement(k, "NotIn", (labels[k],)) for k in term.mismatch_label_keys if k in labels]
    if not extra:
        return sel
    return LabelSelector(sel.match_labels, sel.match_expressions + tuple(extra))


@dataclass(frozen=True, slots=True)
class IncomingTerm:
    """A term of the pod being scheduled, namespaces resolved (upstream merges
    the namespaceSelector into the namespace set in PreFilter)."""

    selector: LabelSelector | None
    namespaces: frozenset[str] | None  # None: every namespace
    topology_key: str

    @property
    def match_key(self) -> tuple[LabelSelector | None, frozenset[str] | None]:
        # What `matches` depends on: terms differing only in topologyKey share counts.
        return (self.selector, self.namespaces)

    def matches(self, pod: PodInfo) -> bool:
        if self.selector is None:
            return False
        if self.namespaces is not None and pod.namespace not in self.namespaces:
            return False
        return self.selector.matches(pod.labels)


@dataclass(frozen=True, slots=True)
class ExistingTerm:
    """A term of a running pod, as upstream's AffinityTerm: matched against the
    incoming pod with the incoming pod's namespace labels."""

    selector: LabelSelector | None
    namespaces: frozenset[str]
    namespace_selector: LabelSelector | None
    topology_key: str

    def matches(self, pod: PodInfo, ns_labels: Mapping[str, str] | None) -> bool:
        if self.selector is None:
            return False
        if pod.namespace not in self.namespaces:
            sel = self.namespace_selector
            if sel is None:
                return False
            if not _is_empty(sel) and (ns_labels is None or not sel.matches(ns_labels)):
                return False
        return self.selector.matches(pod.labels)


def existing_term(term: PodAffinityTerm, pod: PodInfo) -> ExistingTerm:
    namespaces = frozenset(term.namespaces)
    if not term.namespaces and term.namespace_selector is None:
        namespaces = frozenset((pod.namespace,))
    return ExistingTerm(merge_label_keys(term, pod.labels), namespaces, term.namespace_selector, term.topology_key)


def _terms_with_kind(pod: PodInfo) -> Iterable[tuple[int, int, PodAffinityTerm]]:
    for t in pod.pod_anti_affinity:
        yield _REQ_ANTI, 0, t
    for t in pod.pod_affinity:
        yield _REQ_AFF, 0, t
    for w in pod.pod_affinity_preferred:
        yield _PREF_AFF, w.weight, w.term
    for w in pod.pod_anti_affinity_preferred:
        yield _PREF_ANTI, w.weight, w.term


# --------------------------------------------------------- per-snapshot index


class _Rows:
    """A growable int64 vector of rows (one entry per pod carrying a term;
    a row appears once per such pod)."""

    __slots__ = ("buf", "size")

    def __init__(self) -> None:
        self.buf = np.empty(8, dtype=np.int64)
        self.size = 0

    def append(self, row: int) -> None:
        if self.size == len(self.buf):
            self.buf = np.concatenate([self.buf, np.empty(len(self.buf), dtype=np.int64)])
        self.buf[self.size] = row
        self.size += 1

    def view(self) -> np.ndarray:
        return self.buf[: self.size]


class _SnapshotState:
    """What the plugin derives from one snapshot: existing pods' terms, by
    distinct (kind, weight, term), with the rows of the pods carrying them; and
    the incoming pods' resolved terms. Assumed pods are folded in as they appear."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.ref = weakref.ref(snapshot)
        self.serial = snapshot.serial
        # by_kind[kind][(weight, term)]: rows of the pods carrying that term.
        self.by_kind: list[dict[tuple[int, ExistingTerm], _Rows]] = [{}, {}, {}, {}]
        self.n_assumed = 0
        self.resolved: dict[Hashable, IncomingTerm] = {}
        # Cost: O(pods with affinity x their terms). Pods assumed in the cache
        # have no nodeName yet; the cache's pod index knows where they are.
        for pod in snapshot.pods_with_affinity.values():
            if pod.uid in snapshot.removed:
                continue
            node = pod.node_name or snapshot.node_of(pod.uid)
            self._add(pod, snapshot.row.get(node) if node else None)
        self.sync(snapshot)

    def _add(self, pod: PodInfo, row: int | None) -> None:
        """Index the pod's terms: O(its terms)."""
        if row is None:
            return  # on a node the snapshot does not have: upstream never sees it
        for kind, weight, term in _terms_with_kind(pod):
            index = self.by_kind[kind]
            key = (weight, existing_term(term, pod))
            rows = index.get(key)
            if rows is None:
                rows = index[key] = _Rows()
            rows.append(row)

    def sync(self, snapshot: Snapshot) -> None:
        """Fold in pods assumed since the last call: O(1) per new pod."""
        assumed = snapshot.assumed
        for row, pod in assumed[self.n_assumed :]:
            if pod.has_pod_affinity_terms:
                self._add(pod, row)
        self.n_assumed = len(assumed)


# ------------------------------------------------------------------ plugin


class InterPodAffinityArgs(PluginArgs):
    hard_pod_affinity_weight: int = Field(default=DEFAULT_HARD_POD_AFFINITY_WEIGHT, alias="hardPodAffinityWeight")
    ignore_preferred_terms_of_existing_pods: bool = Field(default=False, alias="ignorePreferredTermsOfExistingPods")

    @field_validator("hard_pod_affinity_weight")
    @classmethod
    def _weight_range(cls, weight: int) -> int:
        if not 0 <= weight <= MAX_HARD_POD_AFFINITY_WEIGHT:  # upstream ValidateInterPodAffinityArgs
            raise ValueError(f"invalid value {weight}: not in valid range [0, {MAX_HARD_POD_AFFINITY_WEIGHT}]")
        return weight


class InterPodAffinity(FilterPlugin, ScorePlugin):
    name = NAME
    events = frozenset({E.ASSIGNED_POD_ADD, E.ASSIGNED_POD_LABEL, E.ASSIGNED_POD_DELETE, E.NODE_ADD, E.NODE_LABEL})

    Args = InterPodAffinityArgs

    def __init__(self, args: InterPodAffinityArgs, handle: Handle) -> None:
        super().__init__(args, handle)
        self.hard_pod_affinity_weight = args.hard_pod_affinity_weight
        self.ignore_preferred_terms_of_existing_pods = args.ignore_preferred_terms_of_existing_pods
        self._state: _SnapshotState | None = None

    # ------------------------------------------------------------- helpers

    def _snapshot_state(self, snapshot: Snapshot) -> _SnapshotState:
        """The state of `snapshot`, built on first use (the plugin keeps only the
        latest snapshot's: one per cycle), else O(pods assumed since last call)."""
        st = self._state
        if st is None or st.ref() is not snapshot or st.serial != snapshot.serial:
            st = self._state = _SnapshotState(snapshot)
        else:
            st.sync(snapshot)
        return st

    def _resolve(self, st: _SnapshotState, term: PodAffinityTerm, pod: PodInfo, snapshot: Snapshot) -> IncomingTerm:
        """The incoming pod's term with label keys merged and namespaces resolved.
        O(namespaces) the first time per (term, namespace, label-key values) in a snapshot."""
        keyed = tuple((k, pod.labels.get(k)) for k in term.match_label_keys + term.mismatch_label_keys)
        ck = (term, pod.namespace, keyed)
        hit = st.resolved.get(ck)
        if hit is not None:
            return hit
        sel = term.namespace_selector
        namespaces: frozenset[str] | None
        if not term.namespaces and sel is None:
            namespaces = frozenset((pod.namespace,))
        elif sel is not None and _is_empty(sel):
            namespaces = None
        else:
            names = set(term.namespaces)
            if sel is not None:
                names.update(ns for ns, labels in snapshot.namespace_labels.items() if sel.matches(labels))
            namespaces = frozenset(names)
        hit = st.resolved[ck] = IncomingTerm(merge_label_keys(term, pod.labels), namespaces, term.topology_key)
        return hit

    @staticmethod
    def _count(snapshot: Snapshot, terms: Sequence[IncomingTerm]) -> np.ndarray:
        """Per row, running pods matching ALL `terms`: one pass over the running
        pods the first time per distinct (selector, namespaces) set in a snapshot."""
        if any(t.selector is None for t in terms):
            return np.zeros(len(snapshot), dtype=np.int64)  # a nil selector matches nothing
        key = (NAME, tuple(t.match_key for t in terms))
        if len(terms) == 1:
            predicate: Callable[[PodInfo], bool] = terms[0].matches
        else:
            frozen = tuple(terms)
            predicate = lambda p: all(t.matches(p) for t in frozen)  # noqa: E731
        # Every counted pod matches each term's selector: any one narrows the pass.
        return snapshot.count_matching(key, predicate, terms[0].selector)

    @staticmethod
    def _by_domain(ids: np.ndarray, n_values: int, counts: np.ndarray) -> np.ndarray:
        """Sum of per-row `counts` per domain, with one extra slot (index -1)
        that stays 0 so rows without the label can index it. O(rows)."""
        has = ids >= 0
        out = np.zeros(n_values + 1, dtype=np.int64)
        if has.any():
            out[:n_values] = np.bincount(ids[has], weights=counts[has], minlength=n_values).astype(np.int64)
        return out

    @staticmethod
    def _rows_by_domain(ids: np.ndarray, n_values: int, rows: np.ndarray) -> np.ndarray:
        """Per domain, how many entries of `rows` fall in it (extra slot -1 stays 0). O(len(rows))."""
        dom = ids[rows]
        dom = dom[dom >= 0]
        out = np.zeros(n_values + 1, dtype=np.int64)
        if len(dom):
            out[:n_values] = np.bincount(dom, minlength=n_values)
        return out

    def _ns_labels(self, snapshot: Snapshot, pod: PodInfo) -> Mapping[str, str] | None:
        return snapshot.namespace_labels.get(pod.namespace)

    # ----------------------------------------------------------------- Filter

    def filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> FilterResult:
        """Cost: O(T) count lookups (a pass over running pods for a key first
        seen in this snapshot), O(D) matches of the incoming pod against the
        distinct existing anti-affinity terms, then numpy over rows: O(T * N)
        plus the rows of the existing terms that match."""
        n = len(snapshot)
        st = self._snapshot_state(snapshot)
        existing_anti = st.by_kind[_REQ_ANTI]
        if not pod.pod_affinity and not pod.pod_anti_affinity and not existing_anti:
            return FilterResult(np.ones(n, dtype=bool), [], _UNRESOLVABLE)

        # (1) required affinity of the incoming pod.
        affinity_fail = np.zeros(n, dtype=bool)
        if pod.pod_affinity:
            terms = [self._resolve(st, t, pod, snapshot) for t in pod.pod_affinity]
            counts = self._count(snapshot, terms)
            has_all = np.ones(n, dtype=bool)
            pods_exist = np.ones(n, dtype=bool)
            map_empty = True
            for t in terms:
                ids, values = snapshot.domains(t.topology_key)
                per_domain = self._by_domain(ids, len(values), counts)
                has_all &= ids >= 0
                pods_exist &= per_domain[ids] > 0
                if per_domain.any():
                    map_empty = False
            ok = pods_exist
            if map_empty and all(t.matches(pod) for t in terms):
                ok = np.ones(n, dtype=bool)  # the first pod of a group with affinity to itself
            affinity_fail = ~(has_all & ok)

        # (2) required anti-affinity of the incoming pod.
        anti_fail = np.zeros(n, dtype=bool)
        for term in pod.pod_anti_affinity:
            t = self._resolve(st, term, pod, snapshot)
            counts = self._count(snapshot, [t])
            ids, values = snapshot.domains(t.topology_key)
            anti_fail |= self._by_domain(ids, len(values), counts)[ids] > 0

        # (3) existing pods' required anti-affinity matching the incoming pod.
        existing_fail = np.zeros(n, dtype=bool)
        if existing_anti:
            ns_labels = self._ns_labels(snapshot, pod)
            by_key: dict[str, list[np.ndarray]] = {}
            for (_, eff), rows in existing_anti.items():
                if eff.matches(pod, ns_labels):
                    by_key.setdefault(eff.topology_key, []).append(rows.view())
            for key, parts in by_key.items():
                ids, values = snapshot.domains(key)
                existing_fail |= self._rows_by_domain(ids, len(values), np.concatenate(parts))[ids] > 0

        valid = snapshot.valid
        aff_rows = affinity_fail & valid
        anti_rows = anti_fail & ~affinity_fail & valid
        existing_rows = existing_fail & ~affinity_fail & ~anti_fail & valid
        reasons = [
            (r, m)
            for r, m in (
                (REASON_AFFINITY, aff_rows),
                (REASON_ANTI_AFFINITY, anti_rows),
                (REASON_EXISTING_ANTI_AFFINITY, existing_rows),
            )
            if m.any()
        ]
        feasible = ~(affinity_fail | anti_fail | existing_fail)
        return FilterResult(feasible, reasons, _UNRESOLVABLE)

    # ------------------------------------------------------------------ Score

    def score(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, rows: np.ndarray) -> np.ndarray:
        """Raw score per row of `rows`: the sum over topology keys of the
        weights recorded for the row's domain. Cost: O(P) count lookups for the
        incoming pod's preferred terms, O(D) matches against the distinct
        existing terms, numpy O(K * N) for K topology keys plus the rows of the
        existing terms that match."""
        n = len(snapshot)
        has_constraints = bool(pod.pod_affinity_preferred or pod.pod_anti_affinity_preferred)
        if self.ignore_preferred_terms_of_existing_pods and not has_constraints:
            return np.zeros(len(rows), dtype=np.int64)
        st = self._snapshot_state(snapshot)
        if not has_constraints and not any(st.by_kind[k] for k in (_REQ_AFF, _PREF_AFF, _PREF_ANTI)):
            return np.zeros(len(rows), dtype=np.int64)  # nothing to weigh anywhere
        # Per topology key: a per-row weighted count (incoming pod's terms) and
        # (rows, weight) pairs (existing pods' terms), summed per domain below.
        dense: dict[str, np.ndarray] = {}
        sparse: dict[str, list[tuple[np.ndarray, int]]] = {}

        for sign, weighted in ((1, pod.pod_affinity_preferred), (-1, pod.pod_anti_affinity_preferred)):
            for w in weighted:
                t = self._resolve(st, w.term, pod, snapshot)
                counts = self._count(snapshot, [t])
                acc = dense.get(t.topology_key)
                if acc is None:
                    acc = dense[t.topology_key] = np.zeros(n, dtype=np.int64)
                acc += sign * w.weight * counts

        ns_labels = self._ns_labels(snapshot, pod)
        hard = self.hard_pod_affinity_weight
        for kind, sign in ((_REQ_AFF, 1), (_PREF_AFF, 1), (_PREF_ANTI, -1)):
            if kind == _REQ_AFF and hard <= 0:
                continue
            for (weight, eff), entry in st.by_kind[kind].items():
                if eff.matches(pod, ns_labels):
                    term_weight = hard if kind == _REQ_AFF else weight
                    sparse.setdefault(eff.topology_key, []).append((entry.view(), sign * term_weight))

        total = np.zeros(n, dtype=np.int64)
        for key in dense.keys() | sparse.keys():
            ids, values = snapshot.domains(key)
            nv = len(values)
            per_domain = np.zeros(nv + 1, dtype=np.int64)
            if key in dense:
                per_domain += self._by_domain(ids, nv, dense[key])
            for entry_rows, term_weight in sparse.get(key, ()):
                per_domain += term_weight * self._rows_by_domain(ids, nv, entry_rows)
            total += per_domain[ids]
        out: np.ndarray = total[rows]
        return out

    def normalize(self, scores: np.ndarray) -> np.ndarray:
        """Upstream NormalizeScore: (s - min) / (max - min) * 100, truncated; all
        equal -> 0. O(rows)."""
        scores = np.asarray(scores, dtype=np.int64)
        if len(scores) == 0:
            return scores
        lo, hi = int(scores.min()), int(scores.max())
        if hi - lo <= 0:
            return np.zeros(len(scores), dtype=np.int64)
        return (float(MAX_NODE_SCORE) * ((scores - lo).astype(np.float64) / float(hi - lo))).astype(np.int64)
