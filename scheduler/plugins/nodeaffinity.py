"""NodeAffinity: spec.nodeSelector and required node affinity filter; preferred
node affinity scores (upstream pkg/scheduler/framework/plugins/nodeaffinity).

`addedAffinity` in the plugin args (a v1 NodeAffinity) applies to every pod
of the profile, as upstream's NodeAffinityArgs."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from ..api.config import ArgsModel, PluginArgs
from ..api.records import NodeInfo, NodeSelectorTerm, PodInfo, PreferredTerm, Requirement
from ..cluster.snapshot import Snapshot
from ..framework import events as E
from ..framework.interface import CycleState, Handle, NodeFilterPlugin, ScorePlugin

REASON = "node(s) didn't match Pod's node affinity/selector"
REASON_ENFORCED = "node(s) didn't match scheduler-enforced node affinity"
MAX_NODE_SCORE = 100


class NodeSelectorRequirementSpec(ArgsModel):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[str] = Field(default_factory=list)


class NodeSelectorTermSpec(ArgsModel):
    match_expressions: list[NodeSelectorRequirementSpec] = Field(default_factory=list, alias="matchExpressions")
    match_fields: list[NodeSelectorRequirementSpec] = Field(default_factory=list, alias="matchFields")

    def term(self) -> NodeSelectorTerm:
        def requirements(specs: list[NodeSelectorRequirementSpec]) -> tuple[Requirement, ...]:
            return tuple(Requirement(r.key, r.operator, tuple(r.values)) for r in specs)

        return NodeSelectorTerm(requirements(self.match_expressions), requirements(self.match_fields))


class NodeSelectorSpec(ArgsModel):
    node_selector_terms: list[NodeSelectorTermSpec] = Field(default_factory=list, alias="nodeSelectorTerms")


class PreferredSchedulingTermSpec(ArgsModel):
    weight: int = 0
    preference: NodeSelectorTermSpec = Field(default_factory=NodeSelectorTermSpec)


class NodeAffinitySpec(ArgsModel):
    required: NodeSelectorSpec | None = Field(default=None, alias="requiredDuringSchedulingIgnoredDuringExecution")
    preferred: list[PreferredSchedulingTermSpec] = Field(
        default_factory=list, alias="preferredDuringSchedulingIgnoredDuringExecution"
    )


class NodeAffinityArgs(PluginArgs):
    added_affinity: NodeAffinitySpec | None = Field(default=None, alias="addedAffinity")


class NodeAffinity(NodeFilterPlugin, ScorePlugin):
    name = "NodeAffinity"
    events = frozenset({E.NODE_ADD, E.NODE_LABEL})
    unresolvable = True  # preemption cannot make a node match

    Args = NodeAffinityArgs

    def __init__(self, args: NodeAffinityArgs, handle: Handle) -> None:
        super().__init__(args, handle)
        added = args.added_affinity or NodeAffinitySpec()
        self.added_required: tuple[NodeSelectorTerm, ...] | None = (
            tuple(t.term() for t in added.required.node_selector_terms) if added.required is not None else None
        )
        self.added_preferred = tuple(PreferredTerm(p.weight, p.preference.term()) for p in added.preferred)

    static_score = True

    def sign_pod(self, pod: PodInfo) -> object:
        return (tuple(sorted(pod.node_selector.items())), pod.required_affinity, pod.preferred_affinity)

    def filter_node(self, pod: PodInfo, node: NodeInfo) -> str | None:
        labels = node.labels
        if self.added_required is not None and not any(t.matches(labels, node.name) for t in self.added_required):
            return REASON_ENFORCED
        for k, v in pod.node_selector.items():
            if labels.get(k) != v:
                return REASON
        # Terms are ORed; a present but empty list matches nothing.
        if pod.required_affinity is not None and not any(t.matches(labels, node.name) for t in pod.required_affinity):
            return REASON
        return None

    def score(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, rows: np.ndarray) -> np.ndarray:
        terms = self.added_preferred + pod.preferred_affinity
        out = np.zeros(len(rows), dtype=np.int64)
        if not terms:
            return out
        for i, row in enumerate(rows):
            node = snapshot.nodes[row]
            if node is not None:
                out[i] = sum(p.weight for p in terms if p.weight and p.term.matches(node.labels, node.name))
        return out

    def normalize(self, scores: np.ndarray) -> np.ndarray:
        top = int(scores.max()) if len(scores) else 0
        if top == 0:
            return scores
        return scores * MAX_NODE_SCORE // top
