"""Counting matching pods per topology domain for PodTopologySpread, with the
caches that make it cheap per pod: node eligibility masks (labels and taints
only), the soft constraints' per-domain counts kept current as a cycle assumes
pods, and whether a topology key is on every node."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from ...api.records import LabelSelector, PodInfo
from ...cluster.snapshot import Snapshot
from .common import (
    HONOR,
    MAX_INT32,
    NAME,
    Constraint,
    matches_required_node_affinity,
    selector_empty,
    tolerates_do_not_schedule_taints,
)


@dataclass(slots=True)
class _SoftCounts:
    dom_eff: np.ndarray
    contributing: np.ndarray
    per_domain: np.ndarray
    last: np.ndarray  # per_row as of `seen`
    seen: int


def has_all_keys(constraints: Sequence[Constraint], snapshot: Snapshot) -> np.ndarray:
    """Rows whose node carries every constraint's topology key (nodeLabelsMatchSpreadConstraints)."""
    mask = snapshot.valid.copy()
    for c in constraints:
        mask &= snapshot.domains(c.topology_key)[0] >= 0
    return mask


def inclusion_sign(c: Constraint, pod: PodInfo) -> tuple[Hashable, Hashable]:
    """What `DomainCounting.included` reads of the pod: its node affinity under
    Honor, its tolerations under Honor (equal signs, equal masks)."""
    affinity: Hashable = None
    if c.node_affinity_policy == HONOR and (pod.node_selector or pod.required_affinity is not None):
        affinity = (tuple(sorted(pod.node_selector.items())), pod.required_affinity)
    return affinity, pod.tolerations if c.node_taints_policy == HONOR else None


class DomainCounting:
    """The counting state of one PodTopologySpread instance."""

    def __init__(self) -> None:
        self._soft_serial = -1  # the snapshot state `_soft` was built for
        self._soft: dict[Hashable, _SoftCounts] = {}
        self._soft_static: dict[Hashable, tuple[np.ndarray, np.ndarray, np.ndarray, int]] = {}
        self._everywhere: dict[tuple[str, int, int], bool] = {}
        # Node eligibility masks; they read only labels and taints, so they stay
        # valid for one (static generation, row count) of the node table.
        self._mask_key: tuple[int, int] = (-1, -1)
        self._masks: dict[Hashable, np.ndarray] = {}

    def matching_per_row(self, c: Constraint, pod: PodInfo, snapshot: Snapshot) -> np.ndarray:
        """Per row, running + assumed pods that match `c` in the pod's namespace
        (upstream countPodsMatchSelector). One pass over the pods per snapshot
        and selector (snapshot.count_matching), O(1) afterwards."""
        if c.selector is None or selector_empty(c.selector):
            return np.zeros(len(snapshot), dtype=np.int64)
        selector: LabelSelector = c.selector
        ns = pod.namespace

        def predicate(p: PodInfo) -> bool:
            return p.namespace == ns and not p.deleting and selector.matches(p.labels)

        return snapshot.count_matching((NAME, selector, ns), predicate, selector)

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
            test = matches_required_node_affinity if kind == "affinity" else tolerates_do_not_schedule_taints
            mask = np.zeros(len(snapshot), dtype=bool)
            for i, node in enumerate(snapshot.nodes):
                if node is not None and snapshot.valid[i]:
                    mask[i] = test(pod, node)
            self._masks[ck] = mask
        return mask

    def included(self, c: Constraint, pod: PodInfo, snapshot: Snapshot) -> np.ndarray:
        """Upstream matchNodeInclusionPolicies over all rows. O(nodes) numpy
        (the masks themselves are cached)."""
        mask = snapshot.valid
        affinity, tolerations = inclusion_sign(c, pod)
        if affinity is not None:
            mask = mask & self._node_mask("affinity", affinity, snapshot, pod)
        if tolerations is not None:
            mask = mask & self._node_mask("taints", tolerations, snapshot, pod)
        return mask

    def domain_counts(
        self, c: Constraint, pod: PodInfo, snapshot: Snapshot, has_all: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """(matching pods per domain, domain is eligible, global minimum) for a
        DoNotSchedule constraint. Both arrays have one extra trailing slot, so
        indexing with a row's domain -1 (no label) reads 0 / False. O(nodes)."""
        dom, values = snapshot.domains(c.topology_key)
        eligible = has_all & self.included(c, pod, snapshot)
        idx = dom[eligible]
        slots = len(values) + 1
        present = np.bincount(idx, minlength=slots) > 0
        per_row = self.matching_per_row(c, pod, snapshot)
        per_domain = np.bincount(idx, weights=per_row[eligible], minlength=slots).astype(np.int64)
        num_domains = int(present.sum())
        # CriticalPaths[0].MatchNum; MaxInt32 when no domain is eligible (then
        # num_domains < minDomains >= 1 makes it 0 anyway).
        min_match = int(per_domain[present].min()) if num_domains else MAX_INT32
        if num_domains < c.min_domains:
            min_match = 0
        return per_domain, present, min_match

    def key_everywhere(self, topology_key: str, snapshot: Snapshot) -> bool:
        """Whether every node carries `topology_key` (cached until labels change)."""
        ck = (topology_key, snapshot.static_generation, len(snapshot))
        hit = self._everywhere.get(ck)
        if hit is None:
            if len(self._everywhere) > 64:
                self._everywhere.clear()
            dom = snapshot.domains(topology_key)[0]
            hit = self._everywhere[ck] = bool((dom[snapshot.valid] >= 0).all())
        return hit

    def soft_domain_counts(
        self,
        c: Constraint,
        pod: PodInfo,
        snapshot: Snapshot,
        counted: np.ndarray,
        counted_by: Hashable,
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
        inclusion = inclusion_sign(c, pod)
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
                contributing = counted & self.included(c, pod, snapshot)
                hit = self._soft_static[static] = (dom_eff, contributing, dom_eff[contributing], len(values) + 1)
            dom_eff, contributing, idx, slots = hit
            if per_row.any():
                per_domain = np.bincount(idx, weights=per_row[contributing], minlength=slots)
            else:  # no matching pod runs anywhere yet (a new group): all zero
                per_domain = np.zeros(slots, dtype=np.float64)
            entry = self._soft[ck] = _SoftCounts(
                dom_eff, contributing, per_domain, per_row.copy(), len(snapshot.changed_rows)
            )
        elif len(snapshot.changed_rows) > entry.seen:
            for r in set(snapshot.changed_rows[entry.seen :]):
                delta = per_row[r] - entry.last[r]
                if delta and entry.contributing[r]:
                    entry.per_domain[entry.dom_eff[r]] += delta
                entry.last[r] = per_row[r]
            entry.seen = len(snapshot.changed_rows)
        return entry.dom_eff, entry.per_domain
