"""Backtracking over a whole small tree of groups, where the tree cycle's
child orders do not place it.

The cycle places children one after another, each greedily, in a few
orders; a child placed first can still take the room (or the domain) a
later child needed in a way no order undoes. For a tree of at most
MAX_TREE_SEARCH_PODS waiting pods, this search tries every way to make the
root feasible, within the cycle's search budget (`searchSteps`, in pod
placements): each CompositePodGroup in each domain of its topology keys,
each choice of `minGroupCount` children, each leaf PodGroup in each of its
placements (domains) with each choice of the pods that make its minimum,
on each class of nodes those pods cannot tell apart. Only the minimums are
searched: the cycle places the other children and the extra pods after
(`TreeCycle._apply`), each where it fits.

The search places through the profile's PreFilter and Filter plugins, into
the cycle's snapshot (put back afterwards), and a leaf's minimum counts only
if Permit lets it through. It returns a plan; the cycle applies it with
Reserve and Permit as any placement.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from ..api.records import GroupKey, PodInfo
from ..cluster.tree import TreeNode
from ..framework.groupfit import min_resources_shortfall
from ..framework.interface import CycleState, GroupContext
from .group_search import Assignment, label_keys, node_classes, room_for
from .placement import is_whole_cluster

if TYPE_CHECKING:
    from .schedule_tree import TreeCycle

# Larger trees keep the cycle's child orders only (the search recurses once per pod).
MAX_TREE_SEARCH_PODS = 64

HOW = "backtracking over the tree"


@dataclass(frozen=True)
class LeafPlan:
    """A leaf's minimum as the search placed it: its pods on their rows (in
    the order placed), the domain it was given (`within`, where its extra
    pods go later) and its own placement's label."""

    node: TreeNode
    within: np.ndarray | None
    assignments: tuple[Assignment, ...]
    rows: tuple[int, ...]
    label: str


@dataclass(frozen=True)
class TreePlan:
    """Where the search made the root feasible: each leaf's minimum in the
    order placed, and for each CompositePodGroup on the way its domain
    (label, rows) and the children that make its minimum."""

    leaves: tuple[LeafPlan, ...]
    chosen: dict[GroupKey, tuple[str, np.ndarray | None, tuple[TreeNode, ...]]]


class _OutOfSteps(Exception):
    pass


class TreeSearch:
    def __init__(self, cycle: TreeCycle) -> None:
        self.cycle = cycle
        self.fwk, self.snapshot = cycle.fwk, cycle.snapshot
        pods = [p for leaf in cycle.tree.root.leaves() for p in cycle.pending.get(leaf.key, ())]
        keys = [k for node in cycle.tree.root.walk() for k in _topology_keys(node)]
        self.class_keys = label_keys(self.snapshot, pods, keys)
        self.leaves: list[LeafPlan] = []
        self.chosen: dict[GroupKey, tuple[str, np.ndarray | None, tuple[TreeNode, ...]]] = {}
        self.steps = 0  # placements tried
        self.spent = False  # the budget stopped it

    def run(self, within: np.ndarray | None) -> TreePlan | None:
        """A plan that makes the root feasible within `within`, or None (and
        `spent` where the budget stopped the search); the snapshot is as it
        was either way."""
        mark = self.snapshot.mark()
        try:
            for _ in self._node(self.cycle.tree.root, within):
                return TreePlan(tuple(self.leaves), dict(self.chosen))
        except _OutOfSteps:
            self.spent = True
        finally:
            self.snapshot.restore(mark)
        return None

    def _step(self) -> None:
        if self.cycle.steps_left <= 0:
            raise _OutOfSteps
        self.cycle.steps_left -= 1
        self.steps += 1

    # ------------------------------------------------------ CompositePodGroups

    def _node(self, node: TreeNode, within: np.ndarray | None) -> Iterator[None]:
        """Each way `node` is feasible within `within`, assumed into the
        snapshot while it is yielded."""
        if node.is_leaf:
            yield from self._leaf(node, within)
            return
        cycle = self.cycle
        assert node.composite is not None
        keys: list[str | None] = [*node.composite.topology_keys] or [None]
        for key in keys:
            domains, problem = cycle.domains(node, within, key)
            if problem is not None or (key is not None and (domains.allowed is None or not domains.allowed.any())):
                continue
            candidates = cycle.roomy(node, domains) if key is not None else domains.candidates
            for label, domain in cycle.nominated_first(replace(domains, candidates=candidates)):
                rows = domains.rows(domain)
                for chosen in self._children(node.children, node.min_children, rows, ()):
                    self.chosen[node.key] = (label, rows, chosen)
                    yield

    def _children(
        self, children: Sequence[TreeNode], need: int, rows: np.ndarray | None, chosen: tuple[TreeNode, ...]
    ) -> Iterator[tuple[TreeNode, ...]]:
        """Each choice of `need` of `children` (in order), each feasible in
        turn within `rows`."""
        if need == 0:
            yield chosen
            return
        if len(children) < need:
            return
        first, rest = children[0], children[1:]
        for _ in self._node(first, rows):
            yield from self._children(rest, need - 1, rows, (*chosen, first))
        yield from self._children(rest, need, rows, chosen)

    # ------------------------------------------------------------ PodGroups

    def _leaf(self, node: TreeNode, within: np.ndarray | None) -> Iterator[None]:
        cycle, group = self.cycle, node.group
        if group is None or group.problem or cycle.leaf_problem(group):
            return
        need = cycle.leaf_minimum(node)
        if need == 0:  # placed whole before: nothing to choose
            self.leaves.append(LeafPlan(node, within, (), (), ""))
            yield
            self.leaves.pop()
            return
        pods = _alike_together(cycle.pending.get(node.key, ()))
        placed = tuple(cycle.placed.get(node.key, ()))
        if need > len(pods):
            return
        if not placed and min_resources_shortfall(self.snapshot, group, group.min_count):
            return
        ctx = GroupContext(
            node.key, pods, group.min_count, group.is_gang, len(placed), group=group,
            placed_nodes=placed, within=within, in_tree=True,
        )  # fmt: skip
        for label, rows in self._placements(ctx):
            if not self._room_for(pods, need, rows):
                continue
            found: list[tuple[Assignment, int]] = []
            for _ in self._pods(ctx, 0, need, rows, found, -1):
                self.leaves.append(
                    LeafPlan(node, within, tuple(a for a, _ in found), tuple(r for _, r in found), label)
                )
                yield
                self.leaves.pop()

    def _placements(self, ctx: GroupContext) -> list[tuple[str, np.ndarray | None]]:
        """Where the leaf may go, as its own cycle would try it: its
        placements (one per domain of its topology keys, most preferred
        first) within the domain it was given, or that domain."""
        fwk = self.fwk
        if not fwk.placement_algorithm:
            return [] if ctx.topology_keys else [("", ctx.within)]
        placements, status = fwk.run_placement_generate(CycleState(), ctx, self.snapshot)
        if not status.ok:
            return []
        if is_whole_cluster(placements):
            return [] if ctx.topology_keys else [("", ctx.within)]
        out: list[tuple[str, np.ndarray | None]] = []
        for p in sorted(placements, key=lambda p: p.rank):
            nodes = p.nodes if ctx.within is None else p.nodes & ctx.within
            if not p.pruned and nodes.any():
                out.append((p.label, nodes))
        return out

    def _room_for(self, pods: Sequence[PodInfo], need: int, rows: np.ndarray | None) -> bool:
        snapshot = self.snapshot
        mask = rows if rows is not None else snapshot.valid
        return room_for(snapshot, mask, [snapshot.request_vector(p)[0] for p in pods], need)

    def _pods(
        self,
        ctx: GroupContext,
        i: int,
        need: int,
        rows: np.ndarray | None,
        found: list[tuple[Assignment, int]],
        floor: int,
    ) -> Iterator[None]:
        """Each choice of `need` of the leaf's pods from the i-th on, each on
        a node that passes Filter, and that Permit lets through. Alike pods
        (next to each other) are taken first to last, on rows in order, so
        that no choice is tried twice."""
        if len(found) == need:
            if self._permit(ctx, found):
                yield
            return
        pods = ctx.pods
        if len(pods) - i < need - len(found):
            return
        pod, snapshot, fwk = pods[i], self.snapshot, self.fwk
        state = CycleState()
        if fwk.run_pre_filters(state, pod, snapshot).ok:
            feasible, _ = fwk.run_filters(state, pod, snapshot, rows)
            candidates = np.flatnonzero(feasible)
            if floor >= 0:
                candidates = candidates[candidates >= floor]
            vec = snapshot.request_vector(pod)[0]
            for row in node_classes(snapshot, candidates, vec, self.class_keys):
                self._step()
                mark = snapshot.mark()
                snapshot.assume(row, vec, (pod.nonzero_cpu, pod.nonzero_memory), pod)
                found.append((Assignment(pod, snapshot.names[row], state), row))
                alike = i + 1 < len(pods) and pods[i + 1].spec_key == pod.spec_key
                yield from self._pods(ctx, i + 1, need, rows, found, row if alike else -1)
                found.pop()
                snapshot.restore(mark)  # as it was when `state` was computed: it stays valid
        # Leave this pod out, and the alike ones after it (taking one of them instead is the same choice).
        j = i + 1
        while j < len(pods) and pods[j].spec_key == pod.spec_key:
            j += 1
        yield from self._pods(ctx, j, need, rows, found, -1)

    def _permit(self, ctx: GroupContext, found: Sequence[tuple[Assignment, int]]) -> bool:
        placed = tuple(a.pod for a, _ in found)
        return self.fwk.run_permit(replace(ctx, placed_now=len(placed), placed_pods=placed)).ok


def _topology_keys(node: TreeNode) -> list[str]:
    if node.composite is not None:
        return list(node.composite.topology_keys)
    constraints = node.group.spec.scheduling_constraints if node.group is not None else None
    return constraints.topology_keys if constraints is not None else []


def _alike_together(pods: Sequence[PodInfo]) -> list[PodInfo]:
    """The pods with alike pods next to each other, in the order each kind
    first appears (the cycle's order otherwise)."""
    first: dict[object, int] = {}
    for i, pod in enumerate(pods):
        first.setdefault(pod.spec_key, i)
    return sorted(pods, key=lambda p: first[p.spec_key])
