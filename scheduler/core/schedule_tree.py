"""The cycle of a tree of groups (CompositePodGroups): one snapshot, all or
nothing at the root.

As upstream's (schedule_one_podgroup.go), a CompositePodGroup is placed in
one domain of its topology key within its parent's domain (no key: the
parent's); within it, its children are placed in order (creation time, then
name), each assumed before the next is tried; it is feasible when at least
`minGroupCount` children are (a basic one: at least one; a basic child
counts as one group; a child already placed whole counts as feasible). Of
its feasible domains the one that places the most pods wins (ties: the
first). A leaf PodGroup is placed by the PodGroup cycle (`schedule_group`)
within its ancestors' domain. Nothing binds unless the root is feasible, and
a child's pods bind only if the child and every ancestor are.

Beyond upstream, each CompositePodGroup's outcome is kept with a message
that names which child failed and why, for its status.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..api.records import GroupKey, PodInfo
from ..cluster.snapshot import Snapshot
from ..cluster.tree import Tree, TreeNode
from ..framework.framework import Framework
from .group_search import Assignment, unreserve
from .schedule_podgroup import GroupDecision, Outcome, schedule_group


@dataclass
class TreeResult:
    """Each group's outcome in the tree: the leaves' decisions and each
    CompositePodGroup's (outcome, message)."""

    root: GroupKey
    leaves: dict[GroupKey, GroupDecision] = field(default_factory=dict)
    composites: dict[GroupKey, tuple[Outcome, str]] = field(default_factory=dict)
    invalid: bool = False  # laid out wrong (a cycle, too many levels): reason Invalid


@dataclass
class _Node:
    """What placing one node of the tree came to."""

    outcome: Outcome
    message: str
    leaves: dict[GroupKey, GroupDecision] = field(default_factory=dict)
    composites: dict[GroupKey, tuple[Outcome, str]] = field(default_factory=dict)
    placed: int = 0  # pods placed now in the subtree

    @property
    def feasible(self) -> bool:
        return self.outcome is Outcome.SCHEDULED

    def assignments(self) -> list[Assignment]:
        return [a for d in self.leaves.values() for a in d.assignments]


class TreeCycle:
    def __init__(
        self,
        fwk: Framework,
        snapshot: Snapshot,
        tree: Tree,
        pending: Mapping[GroupKey, Sequence[PodInfo]],
        placed: Mapping[GroupKey, Sequence[str]],
    ) -> None:
        self.fwk = fwk
        self.snapshot = snapshot
        self.tree = tree
        self.pending = pending  # each leaf's pods to place, in order
        self.placed = placed  # the nodes of each leaf's pods bound or assumed before

    def run(self) -> GroupDecision:
        root = self.tree.root
        result = self._place(root, None)
        if not result.feasible:
            result = self._fail(root, result)
        elif not result.placed and any(self.pending.values()):
            result = self._nothing_new(result)
        return self._decision(result)

    # ------------------------------------------------------------- nodes

    def _place(self, node: TreeNode, within: np.ndarray | None) -> _Node:
        return self._leaf(node, within) if node.is_leaf else self._composite(node, within)

    def _leaf(self, node: TreeNode, within: np.ndarray | None) -> _Node:
        group, key = node.group, node.key
        pods = list(self.pending.get(key, ()))
        if group is None:
            message = f"{node.label} is invalid or missing"
            decision = GroupDecision(key, Outcome.SCHEDULER_ERROR, message, unplaced=[(p, message) for p in pods])
            return _Node(Outcome.SCHEDULER_ERROR, message, {key: decision})
        nodes_before = list(self.placed.get(key, ()))
        if group.problem:
            decision = GroupDecision(
                key, Outcome.SCHEDULER_ERROR, group.problem, unplaced=[(p, group.problem) for p in pods]
            )
            return _Node(Outcome.SCHEDULER_ERROR, group.problem, {key: decision})
        if not pods:  # nothing to place: feasible if placed whole before (a late joiner's sibling)
            have, need = len(nodes_before), group.min_count
            ok = have >= need
            message = f"{have} pod(s) placed before" if ok else f"needs {need} pods, {have} exist"
            outcome = Outcome.SCHEDULED if ok else Outcome.UNSCHEDULABLE
            decision = GroupDecision(key, outcome, message, placed_before=have, min_count=need)
            return _Node(outcome, message, {key: decision})
        decision = schedule_group(
            self.fwk, self.snapshot, key, group, pods, len(nodes_before), nodes_before, within=within, in_tree=True
        )
        if not decision.scheduled:
            decision.assignments = []  # the cycle put the snapshot back: nothing of it stays
        return _Node(decision.outcome, decision.message, {key: decision}, placed=len(decision.assignments))

    def _composite(self, node: TreeNode, within: np.ndarray | None) -> _Node:
        domains, problem = self._domains(node, within)
        if problem is not None:
            return self._error(node, problem)
        tried: list[tuple[str, np.ndarray | None, _Node]] = []
        for label, rows in domains:
            mark = self.snapshot.mark()
            result = self._children(node, rows, label)
            unreserve(self.fwk, result.assignments())
            self.snapshot.restore(mark)
            tried.append((label, rows, result))
        feasible = [(i, t) for i, t in enumerate(tried) if t[2].feasible]
        if not feasible:  # nothing of it stays placed: its leaves are told why
            return self._fail(node, self._no_domain(node, tried))
        _, (label, rows, _) = max(feasible, key=lambda f: (f[1][2].placed, -f[0]))
        return self._children(node, rows, label)  # again, now kept in the snapshot

    def _children(self, node: TreeNode, rows: np.ndarray | None, label: str) -> _Node:
        """The children in order within `rows`; stops once minGroupCount
        cannot be reached any more."""
        need, total = node.min_children, len(node.children)
        out = _Node(Outcome.SCHEDULED, "")
        ok, failed = 0, []
        for i, child in enumerate(node.children):
            result = self._place(child, rows)
            out.leaves.update(result.leaves)
            out.composites.update(result.composites)
            if result.feasible:
                ok += 1
                out.placed += result.placed
            else:
                failed.append((child, result))
            if ok + (total - i - 1) < need:
                break
        if ok < need:
            first, why = failed[0] if failed else (None, None)
            reason = f": {first.key.name}: {why.message}" if first is not None and why is not None else ""
            out.outcome = Outcome.UNSCHEDULABLE
            if failed and all(r.outcome is Outcome.SCHEDULER_ERROR for _, r in failed):
                out.outcome = Outcome.SCHEDULER_ERROR
            out.message = f"needs {need} of {total} group(s), {ok} feasible{reason}"
        else:
            where = f" in {label}" if label else ""
            out.message = f"{ok} of {total} group(s) feasible{where}, {out.placed} pod(s) placed"
        out.composites[node.key] = (out.outcome, out.message)
        return out

    def _domains(
        self, node: TreeNode, within: np.ndarray | None
    ) -> tuple[list[tuple[str, np.ndarray | None]], str | None]:
        """Where the CompositePodGroup may go: one candidate per domain of its
        topology key within `within` (nodes without the label dropped), or
        `within` itself; only the domain its subtree's placed pods are in,
        where it has some."""
        assert node.composite is not None
        keys = node.composite.topology_keys
        if not keys:
            return [("", within)], None
        key = keys[0]
        ids, names = self.snapshot.domains(key)
        base = within if within is not None else self.snapshot.valid
        allowed = base & (ids >= 0)
        taken: set[int] = set()
        for leaf in node.leaves():
            for name in self.placed.get(leaf.key, ()):
                row = self.snapshot.row.get(name)
                if row is None:
                    continue
                if ids[row] < 0:
                    return [], f"a pod of {leaf.label} runs on node {name}, which has no label {key}"
                taken.add(int(ids[row]))
        if len(taken) > 1:
            shown = ", ".join(sorted(names[i] for i in taken))
            return [], f"pods of {node.label} already run in more than one {key} domain: {shown}"
        values = sorted(taken) if taken else sorted({int(i) for i in np.unique(ids[allowed])})
        return [(f"{key}={names[i]}", allowed & (ids == i)) for i in values], None

    # ------------------------------------------------------------ failure

    def _error(self, node: TreeNode, message: str) -> _Node:
        out = _Node(Outcome.SCHEDULER_ERROR, message)
        for leaf in node.leaves():
            pods = self.pending.get(leaf.key, ())
            out.leaves[leaf.key] = GroupDecision(
                leaf.key, Outcome.SCHEDULER_ERROR, message, unplaced=[(p, message) for p in pods]
            )
        for sub in node.composites():
            out.composites[sub.key] = (Outcome.SCHEDULER_ERROR, message)
        return out

    def _no_domain(self, node: TreeNode, tried: Sequence[tuple[str, np.ndarray | None, _Node]]) -> _Node:
        """No domain holds the composite: the first tried says why (with the
        others' count), as upstream's `0/N placements are available`."""
        if not tried:
            keys = node.composite.topology_keys if node.composite is not None else []
            message = f"no node has the label {keys[0]}" if keys else "no nodes"
            return _Node(Outcome.UNSCHEDULABLE, message)
        label, _, first = tried[0]
        if len(tried) == 1:
            return first
        message = f"0/{len(tried)} domains fit; {label}: {first.message}"
        first.message = message
        first.composites[node.key] = (first.outcome, message)
        return first

    def _fail(self, node: TreeNode, result: _Node) -> _Node:
        """`node` is not feasible: no pod under it binds. A leaf that was
        feasible on its own is told why its ancestor was not."""
        out = _Node(result.outcome, result.message, composites=dict(result.composites))
        out.composites.setdefault(node.key, (result.outcome, result.message))
        for leaf in node.leaves():
            decision = result.leaves.get(leaf.key)
            pods = self.pending.get(leaf.key, ())
            if decision is not None and not decision.scheduled:
                out.leaves[leaf.key] = decision
                continue
            why = f"{node.label}: {result.message}"
            out.leaves[leaf.key] = GroupDecision(leaf.key, result.outcome, why, unplaced=[(p, why) for p in pods])
        for sub in node.composites():
            outcome, _ = out.composites.get(sub.key, (Outcome.SCHEDULED, ""))
            if outcome is Outcome.SCHEDULED:
                out.composites[sub.key] = (result.outcome, f"{node.label}: {result.message}")
        return out

    def _nothing_new(self, result: _Node) -> _Node:
        """The root holds, but none of the pods waiting in it fit (upstream:
        the root is then unschedulable; its condition stays as it was)."""
        result.outcome = Outcome.UNSCHEDULABLE
        return result

    # ------------------------------------------------------------ decision

    def _decision(self, result: _Node) -> GroupDecision:
        """One decision for the unit: every leaf's assignments (the root
        holds) or none, every unplaced pod with its own group's reason."""
        tree = TreeResult(self.tree.key, result.leaves, result.composites)
        tree.composites.setdefault(self.tree.key, (result.outcome, result.message))
        assignments = [a for d in result.leaves.values() for a in d.assignments] if result.feasible else []
        unplaced = [(pod, f"{key}: {why}") for key, d in result.leaves.items() for pod, why in d.unplaced]
        outcome, message = tree.composites[self.tree.key]
        if assignments and outcome is not Outcome.SCHEDULED:
            outcome = Outcome.SCHEDULED
        return GroupDecision(
            None,
            outcome,
            message,
            assignments,
            unplaced,
            tree=tree,
        )


def schedule_tree(
    fwk: Framework,
    snapshot: Snapshot,
    tree: Tree,
    pending: Mapping[GroupKey, Sequence[PodInfo]],
    placed: Mapping[GroupKey, Sequence[str]],
) -> GroupDecision:
    """One cycle for the whole tree (module docstring)."""
    return TreeCycle(fwk, snapshot, tree, pending, placed).run()


def tree_error(tree: Tree, pods: Sequence[PodInfo], message: str, invalid: bool = False) -> GroupDecision:
    """The tree cannot be scheduled as it is: every pod, PodGroup and
    CompositePodGroup of it says why (SchedulerError; Invalid on the
    CompositePodGroups of a tree laid out wrong)."""
    result = TreeResult(tree.key, invalid=invalid)
    by_leaf: dict[GroupKey, list[PodInfo]] = {}
    for pod in pods:
        if pod.group is not None:
            by_leaf.setdefault(pod.group, []).append(pod)
    for leaf in tree.root.leaves():
        members = by_leaf.get(leaf.key, [])
        result.leaves[leaf.key] = GroupDecision(
            leaf.key, Outcome.SCHEDULER_ERROR, message, unplaced=[(p, message) for p in members]
        )
    for node in tree.root.composites():
        result.composites[node.key] = (Outcome.SCHEDULER_ERROR, message)
    result.composites[tree.key] = (Outcome.SCHEDULER_ERROR, message)
    where = f"CompositePodGroup {tree.key.namespace}/{tree.key.name}"
    return GroupDecision(
        None, Outcome.SCHEDULER_ERROR, message, unplaced=[(p, f"{where}: {message}") for p in pods], tree=result
    )
