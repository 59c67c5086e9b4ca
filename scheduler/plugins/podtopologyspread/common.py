"""What PodTopologySpread's Filter and Score share (upstream podtopologyspread
common.go): reasons and constants, the resolved constraint, selectors, and the
node inclusion policies."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ...api.records import LabelSelector, NodeInfo, PodInfo, Requirement

NAME = "PodTopologySpread"
REASON = "node(s) didn't match pod topology spread constraints"
REASON_MISSING_LABEL = REASON + " (missing required label)"

DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
HONOR = "Honor"
IGNORE = "Ignore"

LABEL_HOSTNAME = "kubernetes.io/hostname"
LABEL_ZONE = "topology.kubernetes.io/zone"

MAX_NODE_SCORE = 100
MAX_INT32 = 2**31 - 1
# A raw score for a node the plugin does not score (upstream's invalidScore and
# IgnoredNodes): normalize turns it into 0. Real raw scores are never negative.
IGNORED = -1


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


def merge_match_label_keys(
    selector: LabelSelector | None, keys: Sequence[str], pod_labels: Mapping[str, str]
) -> LabelSelector | None:
    """Upstream mergeLabelSetWithSelector: AND `key=<pod's value>` for each key
    the pod has. A null selector stays null (Nothing has no requirements)."""
    if selector is None:
        return None
    extra = [(k, pod_labels[k]) for k in keys if k in pod_labels]
    if not extra:
        return selector
    return _canonical(list(selector.match_labels) + extra, selector.match_expressions)


# ------------------------------------------------------- node eligibility


def matches_required_node_affinity(pod: PodInfo, node: NodeInfo) -> bool:
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


def tolerates_do_not_schedule_taints(pod: PodInfo, node: NodeInfo) -> bool:
    """Upstream FindMatchingUntoleratedTaint with DoNotScheduleTaintsFilterFunc."""
    for taint in node.taints:
        if taint.effect in ("NoSchedule", "NoExecute") and not any(t.tolerates(taint) for t in pod.tolerations):
            return False
    return True
