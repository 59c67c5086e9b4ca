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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..api.podgroup import PodGroup
from ..api.quantity import format_units
from ..api.records import GroupKey, PodInfo
from ..api.resources import PODS
from ..cluster.snapshot import Snapshot
from ..cluster.tree import Tree, TreeNode
from ..framework.framework import Framework
from ..framework.interface import SEARCH_BUDGET_SPENT, GroupContext, TreeUnit
from .group_search import Assignment, SearchBudget, Trial, unreserve
from .schedule_podgroup import (
    PREEMPTION_SEARCH_ORDERS,
    GroupDecision,
    Outcome,
    decide_found,
    post_filter,
    schedule_group,
)
from .tree_search import HOW as SEARCH_HOW
from .tree_search import MAX_TREE_SEARCH_PODS, LeafPlan, TreePlan, TreeSearch


@dataclass
class TreeResult:
    """Each group's outcome in the tree: the leaves' decisions and each
    CompositePodGroup's (outcome, message)."""

    root: GroupKey
    leaves: dict[GroupKey, GroupDecision] = field(default_factory=dict)
    composites: dict[GroupKey, tuple[Outcome, str]] = field(default_factory=dict)
    invalid: bool = False  # laid out wrong (a cycle, too many levels): reason Invalid
    config_error: bool = False  # configured wrong (pods of several schedulerNames too): GroupDecision's


@dataclass
class _Node:
    """What placing one node of the tree came to."""

    outcome: Outcome
    message: str
    leaves: dict[GroupKey, GroupDecision] = field(default_factory=dict)
    composites: dict[GroupKey, tuple[Outcome, str]] = field(default_factory=dict)
    placed: int = 0  # pods placed now in the subtree
    failed: set[GroupKey] = field(default_factory=set)  # the children that were not feasible

    @property
    def feasible(self) -> bool:
        return self.outcome is Outcome.SCHEDULED

    def assignments(self) -> list[Assignment]:
        return [a for d in self.leaves.values() for a in d.assignments]


# A domain tried: its label, its rows, what placing there came to.
_Tried = tuple[str, "np.ndarray | None", _Node]


@dataclass
class _Domains:
    """Where a CompositePodGroup may go under one topology key: each
    candidate domain's label and id, in id order. A domain's rows are made
    only when it is tried (`rows`): the first tried is mostly kept, so the
    others' would be made for nothing."""

    candidates: list[tuple[str, int]]
    allowed: np.ndarray | None  # the rows they may use (no key: `within`, the one candidate's)
    ids: np.ndarray | None = None  # row -> domain id of the key (None: no key)

    def rows(self, domain: int) -> np.ndarray | None:
        if self.ids is None or self.allowed is None:
            return self.allowed
        rows: np.ndarray = self.allowed & (self.ids == domain)
        return rows


class TreeCycle:
    def __init__(
        self,
        fwk: Framework,
        snapshot: Snapshot,
        tree: Tree,
        pending: Mapping[GroupKey, Sequence[PodInfo]],
        placed: Mapping[GroupKey, Sequence[str]],
        backfill_only: Sequence[tuple[int, PodInfo]] = (),
    ) -> None:
        self.fwk = fwk
        self.snapshot = snapshot
        self.tree = tree
        self.pending = pending  # each leaf's pods to place, in order
        self.placed = placed  # the nodes of each leaf's pods bound or assumed before
        # Others' reserved room this tree may only backfill (GroupContext's): held again before PostFilter.
        self.backfill_only = tuple(backfill_only)
        # Rows nominated to the tree's own pods (its preemption's or reservation's room): their
        # domains are tried first, as upstream tries a pod's nominated node first, so the room
        # held for the tree is where it goes once free, whatever the search budget reaches.
        self.nominated: frozenset[int] = frozenset()
        # Pod placements other child orders may still take: each cycle (a trial too) starts with its own.
        self.budget = fwk.search_steps
        self.steps_left = self.budget
        self.spent = 0  # times the budget stopped a search for other child orders
        # Each leaf's own search budget (None: its cycle's default, as a PodGroup cycle's).
        self.leaf_budget: Callable[[int], SearchBudget | None] = lambda _pods: None
        self.post_filter = False  # run PostFilter (preemption, reservation) when the tree does not fit
        # "Each child's minimum first": leaves place only what their rule needs, and what is
        # left of them (pods, the domain they were given) waits here to be placed after.
        self.minimum_only = False
        self._extras: dict[GroupKey, tuple[PodGroup, list[PodInfo], np.ndarray | None]] = {}
        self._needs: dict[GroupKey, np.ndarray] = {}  # _min_need's, per node of the tree
        # What else keeps a leaf from being placed (a Workload template it names that does not exist).
        self.leaf_problem: Callable[[PodGroup], str | None] = lambda _group: None

    def run(self) -> GroupDecision:
        root = self.tree.root
        result = self._place_whole(None)
        if result.feasible and (result.placed or not any(self.pending.values())):
            return self._decision(result)
        # Not feasible, or it holds but none of its waiting pods fit (a late
        # child of a placed root): PostFilter, as upstream (the root is then
        # unschedulable).
        result = self._fail(root, result) if not result.feasible else self._nothing_new(result)
        decision = self._decision(result)
        if self.post_filter:
            self._post_filter(decision)
        return decision

    def trial(self, within: np.ndarray | None = None, reasons: list[str] | None = None) -> list[Assignment] | None:
        """Would the tree hold in the snapshot as it is now (within `within`)?
        Its assignments, or None and why into `reasons`; the snapshot and
        every reservation are put back. A trial has a budget of its own, and
        its leaves search as a PodGroup's trial does (PostFilter asks many)."""
        mark = self.snapshot.mark()
        saved = self.steps_left, self.leaf_budget
        self.steps_left = self.budget
        steps = self.fwk.search_steps
        self.leaf_budget = lambda pods: SearchBudget(min(steps, PREEMPTION_SEARCH_ORDERS * pods))
        try:
            result = self._place_whole(within)
            found = result.assignments() if result.feasible and result.placed else None
            if found is None and reasons is not None:
                reasons.append(f"{self.tree.root.label}: {result.message or 'none of its waiting pods fit'}")
            self._undo(result)
            return found
        finally:
            self.snapshot.restore(mark)
            self.steps_left, self.leaf_budget = saved

    # ---------------------------------------------------------- PostFilter

    def _post_filter(self, decision: GroupDecision) -> None:
        """The tree does not fit: the PodGroup's PostFilter chain (preemption,
        then a reservation), with the whole tree as the unit and its own
        cycle as the trial (a flat gang is a tree of one). The root's
        condition ends as its pods' messages do."""
        pods = [p for leaf in self.pending.values() for p in leaf]
        if not pods:
            return
        root = self.tree.root
        unit = TreeUnit(
            f"CompositePodGroup {root.key.namespace}/{root.key.name}",
            frozenset(leaf.key for leaf in root.leaves()),
            self._never(),
            self._tried,
        )
        fewest = min(self._fewest(root), len(pods))
        ctx = GroupContext(root.key, pods, fewest, True, 0, backfill_only=self.backfill_only, tree=unit)
        post_filter(self.fwk, self.snapshot, ctx, root.key, Trial(), decision)
        if decision.tree is not None:
            outcome, _ = decision.tree.composites[root.key]
            decision.tree.composites[root.key] = (outcome, decision.message)

    def _tried(
        self, snapshot: Snapshot, allowed: np.ndarray | None, reasons: list[str] | None
    ) -> list[tuple[PodInfo, int]]:
        """The tree's trial as PostFilter asks it (TreeUnit.place). As a
        PodGroup's trial, it says why only where room is not the reason: the
        search stopped on its budget (a gang's says so for Permit and
        minResources), so a tree and the gang of one it may be are told alike."""
        assert snapshot is self.snapshot
        why: list[str] = []
        found = self.trial(allowed, why) or []
        if reasons is not None:
            reasons.extend(r for r in why if SEARCH_BUDGET_SPENT in r)
        return [(a.pod, snapshot.row[a.node]) for a in found]

    def _never(self) -> str:
        """A group of the tree with `preemptionPolicy: Never` (native kinds)
        keeps the whole tree from preempting, as upstream's root policy."""
        for node in self.tree.root.walk():
            obj = node.composite if node.composite is not None else node.group
            if obj is not None and obj.spec.preemption_policy == "Never":
                return f"{node.label} has preemptionPolicy Never"
        return ""

    def _fewest(self, node: TreeNode) -> int:
        """The fewest waiting pods whose placing makes `node` feasible (a
        large number where none can)."""
        impossible = 1 << 30
        if not node.is_leaf:
            kids = sorted(self._fewest(c) for c in node.children)
            need = node.min_children
            return sum(kids[:need]) if len(kids) >= need else impossible
        if node.group is None:
            return impossible
        want = self.leaf_minimum(node)
        return want if want <= len(self.pending.get(node.key, ())) else impossible

    def leaf_minimum(self, node: TreeNode) -> int:
        """The pods a leaf must place now for its rule: the rest of minCount
        (a gang), one if none is placed yet (basic)."""
        assert node.group is not None
        have = len(self.placed.get(node.key, ()))
        return max(node.group.min_count - have, 0) if node.group.is_gang else (0 if have else 1)

    # ------------------------------------------------------- the whole tree

    def _place_whole(self, within: np.ndarray | None) -> _Node:
        """The root within `within`. Where the child orders do not make it
        feasible and the tree is small, the backtracking search over every
        way to place its minimums (tree_search), while the budget lasts."""
        root = self.tree.root
        result = self._place(root, within)
        waiting = sum(len(pods) for pods in self.pending.values())
        if (
            result.feasible
            or result.outcome is Outcome.SCHEDULER_ERROR
            or not 0 < waiting <= MAX_TREE_SEARCH_PODS
            or not self.budget  # searchSteps 0: upstream's one order, nothing else
        ):
            return result
        search = TreeSearch(self)  # with what the orders left (none: it stops at its first step)
        plan = search.run(within)
        if plan is None:
            if search.spent:  # not known not to fit: said, after what the orders said of the budget
                self.spent += 1
                if SEARCH_BUDGET_SPENT in result.message:
                    result.message += f"; {SEARCH_HOW} not finished"
                else:
                    result.message += (
                        f"; {SEARCH_BUDGET_SPENT} after {self.budget - self.steps_left} steps "
                        f"(podGroupScheduling.searchSteps {self.budget}), {SEARCH_HOW} not finished"
                    )
                result.composites[root.key] = (result.outcome, result.message)
            return result
        mark = self.snapshot.mark()
        found = self._apply(plan)
        if found.feasible:
            return found
        self._undo(found)  # a Reserve or Permit the search does not run said no
        self.snapshot.restore(mark)
        return result

    def _apply(self, plan: TreePlan) -> _Node:
        """The search's plan, placed: every leaf's minimum where the search
        put it (Reserve, Permit), in the order it put them; then, in each
        CompositePodGroup's domain, the children beyond its minimum in order
        (each where it fits); then the leaves' pods beyond their minimum."""
        decisions = {leaf.node.key: self._apply_leaf(leaf) for leaf in plan.leaves}
        chosen = {key: (label, rows, {c.key for c in kids}) for key, (label, rows, kids) in plan.chosen.items()}

        def place(node: TreeNode, _within: np.ndarray | None) -> _Node:
            """`node` as planned (it is in the plan: its domain is the plan's)."""
            if node.is_leaf:
                decision = decisions[node.key]
                return _Node(decision.outcome, decision.message, {node.key: decision}, placed=len(decision.assignments))
            label, rows, keys = chosen[node.key]
            out = self._in_order(
                node, node.children, rows, label, lambda c, r: place(c, r) if c.key in keys else self._place(c, r)
            )
            if out.feasible:
                out.message += f" (search: {SEARCH_HOW})"
                out.composites[node.key] = (out.outcome, out.message)
            return out

        found = place(self.tree.root, None)
        if not found.feasible:
            return found
        minimums = found.placed
        for leaf in plan.leaves:
            taken = {a.pod.uid for a in leaf.assignments}
            rest = [p for p in self.pending.get(leaf.node.key, ()) if p.uid not in taken]
            if rest and leaf.node.group is not None:
                self._place_extras(found, leaf.node.key, leaf.node.group, rest, leaf.within)
        if found.placed > minimums:
            found.message += f"; {found.placed - minimums} more pod(s) placed after the minimums"
            found.composites[self.tree.root.key] = (found.outcome, found.message)
        return found

    def _apply_leaf(self, leaf: LeafPlan) -> GroupDecision:
        node, group = leaf.node, leaf.node.group
        assert group is not None
        if not leaf.assignments:
            return self._nothing_to_place(node)
        found = Trial(list(leaf.assignments), list(leaf.rows), how=SEARCH_HOW)
        pods = self.pending.get(node.key, ())
        placed = self.placed.get(node.key, ())
        return decide_found(self.fwk, self.snapshot, node.key, group, pods, found, placed, leaf.within, leaf.label)

    # ------------------------------------------------------------- nodes

    def _place(self, node: TreeNode, within: np.ndarray | None) -> _Node:
        """`node` placed within `within`. Whatever way a CompositePodGroup
        fails (the budget included), nothing under it stays placed: its pods
        are let go, the snapshot put back, and its leaves told why (a leaf's
        own cycle puts its snapshot back itself)."""
        if node.is_leaf:
            return self._leaf(node, within)
        mark, spent = self.snapshot.mark(), self.spent
        result = self._composite(node, within)
        if not result.feasible:
            self._undo(result)
            self.snapshot.restore(mark)
            if self.spent > spent and SEARCH_BUDGET_SPENT not in result.message:
                # A domain or child the budget did not reach: its reason is the budget.
                result.message += f"; {self._spent_text()}"
                result.composites[node.key] = (result.outcome, result.message)
            result = self._fail(node, result)
        return result

    def _leaf(self, node: TreeNode, within: np.ndarray | None) -> _Node:
        group, key = node.group, node.key
        pods = list(self.pending.get(key, ()))
        if group is None:
            message = f"{node.label} is invalid or missing"
            decision = GroupDecision(key, Outcome.SCHEDULER_ERROR, message, unplaced=[(p, message) for p in pods])
            return _Node(Outcome.SCHEDULER_ERROR, message, {key: decision})
        nodes_before = list(self.placed.get(key, ()))
        problem = group.problem or self.leaf_problem(group)
        if problem:
            decision = GroupDecision(key, Outcome.SCHEDULER_ERROR, problem, unplaced=[(p, problem) for p in pods])
            return _Node(Outcome.SCHEDULER_ERROR, problem, {key: decision})
        if self.minimum_only:
            k = self.leaf_minimum(node)
            if len(pods) > k:
                self._extras[key] = (group, pods[k:], within)
                pods = pods[:k]
        if not pods:  # nothing to place: feasible if placed whole before (a late joiner's sibling)
            decision = self._nothing_to_place(node)
            return _Node(decision.outcome, decision.message, {key: decision})
        decision = schedule_group(
            self.fwk,
            self.snapshot,
            key,
            group,
            pods,
            len(nodes_before),
            nodes_before,
            within=within,
            in_tree=True,
            budget=self.leaf_budget(len(pods)),
        )
        if not decision.scheduled:
            decision.assignments = []  # the cycle put the snapshot back: nothing of it stays
        return _Node(decision.outcome, decision.message, {key: decision}, placed=len(decision.assignments))

    def _nothing_to_place(self, node: TreeNode) -> GroupDecision:
        """A leaf with no pod to place now: feasible if placed whole before."""
        assert node.group is not None
        have, need = len(self.placed.get(node.key, ())), node.group.min_count
        ok = have >= need
        message = f"{have} pod(s) placed before" if ok else f"needs {need} pods, {have} exist"
        outcome = Outcome.SCHEDULED if ok else Outcome.UNSCHEDULABLE
        return GroupDecision(node.key, outcome, message, placed_before=have, min_count=need)

    def _composite(self, node: TreeNode, within: np.ndarray | None) -> _Node:
        """In one domain of its first topology key that holds it (troupe's
        kind takes up to 4 keys, most preferred first, as its PodGroup; the
        last one is required), or within its parent's domain without one."""
        assert node.composite is not None
        keys: list[str | None] = list(node.composite.topology_keys) or [None]
        first: list[_Tried] | None = None
        for level, key in enumerate(keys):
            domains, problem = self.domains(node, within, key)
            if problem is not None:
                if level == len(keys) - 1:
                    return self._error(node, problem)
                continue
            kept, tried = self._at_level(node, within, key, domains)
            if kept is not None:
                return kept
            first = tried if first is None else first
        # nothing of it stays placed: its leaves are told why (the most preferred level's reasons)
        return self._fail(node, self._no_domain(node, first or []))

    def _at_level(
        self, node: TreeNode, within: np.ndarray | None, key: str | None, domains: _Domains
    ) -> tuple[_Node | None, list[_Tried]]:
        """The domains of one topology key: the placement kept (in the
        snapshot), or None and what was tried, for why not."""
        if key is not None and (domains.allowed is None or not domains.allowed.any()):
            where = " in the domain it was given" if within is not None else ""
            return None, [("", within, _Node(Outcome.UNSCHEDULABLE, f"no node{where} has the label {key}"))]
        if key is not None:
            domains.candidates = self.roomy(node, domains)
        if not domains.candidates:
            return None, [("", within, _Node(Outcome.UNSCHEDULABLE, self._no_room(node, key)))]
        if len(domains.candidates) == 1:  # one candidate: placed once, not tried and placed again
            label, domain = domains.candidates[0]
            rows = domains.rows(domain)
            mark = self.snapshot.mark()
            result = self._children(node, rows, label)
            if result.feasible:
                return result, []
            self._undo(result)
            self.snapshot.restore(mark)
            return None, [(label, rows, result)]
        tried, kept, budgets = self._try_domains(node, domains)
        if kept is not None:
            return kept, []
        feasible = [(i, t) for i, t in enumerate(tried) if t[2].feasible]
        if not feasible:
            return None, tried
        i, (label, rows, _) = max(feasible, key=lambda f: (f[1][2].placed, -f[0]))
        # Again, now kept in the snapshot: with the budget it had when tried,
        # the same search finds the same placement (and the budget is not
        # given back for it). _place undoes it should it not hold after all.
        left = self.steps_left
        self.steps_left = budgets[i]
        again = self._children(node, rows, label)
        self.steps_left = min(self.steps_left, left)
        return again, []

    def _try_domains(self, node: TreeNode, domains: _Domains) -> tuple[list[_Tried], _Node | None, list[int]]:
        """Each domain tried in turn, the snapshot put back after each; the
        first where every waiting pod of the subtree is placed ends the
        search and is kept as placed (the second value): no other domain can
        place more, and ties go to the first. Third: the search budget left
        before each domain was tried."""
        everyone = sum(len(self.pending.get(leaf.key, ())) for leaf in node.leaves())
        tried: list[_Tried] = []
        budgets: list[int] = []
        for label, domain in self.nominated_first(domains):
            rows = domains.rows(domain)
            mark = self.snapshot.mark()
            budgets.append(self.steps_left)
            result = self._children(node, rows, label)
            if result.feasible and result.placed >= everyone:
                return tried, result, budgets
            self._undo(result)
            self.snapshot.restore(mark)
            tried.append((label, rows, result))
        return tried, None, budgets

    def nominated_first(self, domains: _Domains) -> list[tuple[str, int]]:
        """The candidates, those holding a row nominated to the tree first."""
        if not self.nominated or domains.ids is None:
            return domains.candidates
        ids = domains.ids
        held = {int(ids[row]) for row in self.nominated}
        return sorted(domains.candidates, key=lambda c: c[1] not in held)

    def roomy(self, node: TreeNode, domains: _Domains) -> list[tuple[str, int]]:
        """The candidate domains whose free room could hold the least the
        subtree must place (a bound: full racks are not tried pod by pod).
        Each domain's room is summed in one pass over the rows, by domain id
        (no row mask per domain)."""
        need = self._min_need(node)
        if not need.any() or not domains.candidates or domains.ids is None or domains.allowed is None:
            return domains.candidates
        snapshot = self.snapshot
        count = max(i for _, i in domains.candidates) + 1
        # Rows not allowed go to bin `count`, dropped; a domain without an allowed row has no room.
        of = np.where(domains.allowed, domains.ids, count)
        fits = np.ones(count, dtype=bool)
        for col in np.flatnonzero(need > 0):  # room >= need holds anyway where the need is 0
            free = np.maximum(snapshot.alloc[:, col] - snapshot.req[:, col], 0)
            fits &= np.bincount(of, weights=free, minlength=count + 1)[:count] >= need[col]
        return [(label, i) for label, i in domains.candidates if fits[i]]

    def _min_need(self, node: TreeNode) -> np.ndarray:
        """At least what `node`'s waiting pods must take for it to be
        feasible, per resource: a leaf's smallest pods up to its minimum, a
        composite's `minGroupCount` smallest children's (each resource on its
        own, so it is a bound, not a placement)."""
        cached = self._needs.get(node.key)
        if cached is not None:
            return cached
        width = len(self.snapshot.resources)
        if node.is_leaf:
            pods = self.pending.get(node.key, ())
            k = self.leaf_minimum(node) if pods and node.group is not None else 0
            vecs = np.array([self.snapshot.request_vector(p)[0] for p in pods], dtype=np.int64).reshape(-1, width)
            need = np.sort(vecs, axis=0)[:k].sum(axis=0) if k else np.zeros(width, dtype=np.int64)
        else:
            kids = np.array([self._min_need(c) for c in node.children], dtype=np.int64).reshape(-1, width)
            need = np.sort(kids, axis=0)[: node.min_children].sum(axis=0)
        self._needs[node.key] = need
        return need

    def _no_room(self, node: TreeNode, key: str | None) -> str:
        need = self._min_need(node)
        shown = ", ".join(
            f"{name} {format_units(name, int(need[col]))}"
            for name, col in self.snapshot.column.items()
            if need[col] and name != PODS
        )
        return f"no {key} domain has the free room the subtree needs at the least ({shown or 'pods'})"

    def _children(self, node: TreeNode, rows: np.ndarray | None, label: str) -> _Node:
        """The children within `rows`, in upstream's order; where that order
        falls short of minGroupCount, other orders while the search budget
        lasts (`searchSteps`, in pod placements, shared by the whole cycle):
        the children that failed first, then the largest first. A child
        placed first can take the room a later one needed; upstream tries
        the one order only."""
        mark = self.snapshot.mark()
        first = self._in_order(node, node.children, rows, label)
        if first.feasible or len(node.children) < 2:
            return first
        cost = sum(len(self.pending.get(leaf.key, ())) for leaf in node.leaves())
        others = self._other_orders(node, first)
        tries = [(how, order, False) for how, order in others]
        if not self.minimum_only:  # (inside one, every child's minimum goes first already)
            orders = [("", list(node.children)), *others]
            tries += [(f"each child's minimum first{', ' + how if how else ''}", order, True) for how, order in orders]
        for how, order, minimum in tries:
            if self.steps_left < cost:
                self._spent(node, first)
                break
            self.steps_left -= cost
            self._undo(first)
            self.snapshot.restore(mark)
            if minimum:
                found = self._minimum_first(node, order, rows, label)
            else:
                found = self._in_order(node, order, rows, label)
            if found.feasible:
                found.message += f" (search: {how})"
                found.composites[node.key] = (found.outcome, found.message)
                return found
            self._undo(found)
            self.snapshot.restore(mark)
        return first

    def _minimum_first(self, node: TreeNode, order: list[TreeNode], rows: np.ndarray | None, label: str) -> _Node:
        """The children in `order`, each placing only what its rule needs (a
        gang's minCount, a basic group's first pod), then, where that holds,
        the rest of their pods: a child's extra pods do not take the room a
        later child's minimum needed."""
        self.minimum_only, self._extras = True, {}
        try:
            found = self._in_order(node, order, rows, label)
        finally:
            extras, self.minimum_only, self._extras = self._extras, False, {}
        if found.feasible:
            minimums = found.placed
            for key, (group, pods, within) in extras.items():
                self._place_extras(found, key, group, pods, within)
            if found.placed > minimums:  # the counts above were the minimums'
                found.message += f"; {found.placed - minimums} more pod(s) placed after the minimums"
                found.composites[node.key] = (found.outcome, found.message)
        return found

    def _place_extras(
        self, found: _Node, key: GroupKey, group: PodGroup, pods: list[PodInfo], within: np.ndarray | None
    ) -> None:
        """A leaf's pods beyond its minimum, where its minimum was placed: as
        a group already at minCount places more (each that fits), inside its
        domain; those that do not fit wait, saying why."""
        decision = found.leaves.get(key)
        if decision is None:
            return
        if not decision.scheduled:
            why = decision.unplaced[0][1] if decision.unplaced else decision.message
            decision.unplaced.extend((p, why) for p in pods)
            return
        nodes = [*self.placed.get(key, ()), *(a.node for a in decision.assignments)]
        budget = self.leaf_budget(len(pods))
        more = schedule_group(
            self.fwk, self.snapshot, key, group, pods, len(nodes), nodes, within=within, in_tree=True, budget=budget
        )
        if more.scheduled:
            decision.assignments.extend(more.assignments)
            found.placed += len(more.assignments)
            decision.message = more.message
        decision.unplaced = list(more.unplaced)

    def _spent(self, node: TreeNode, first: _Node) -> None:
        """The budget stopped the search for other child orders: said so, as
        the reason the tree waits, not that it cannot fit (searchSteps: 0
        asks for upstream's one order, and says nothing of it)."""
        if not self.budget:
            return
        self.spent += 1
        first.message += f"; {self._spent_text()}"
        first.composites[node.key] = (first.outcome, first.message)

    def _spent_text(self) -> str:
        return (
            f"{SEARCH_BUDGET_SPENT} after {self.budget - self.steps_left} steps "
            f"(podGroupScheduling.searchSteps {self.budget}), other child orders not tried"
        )

    def _undo(self, result: _Node) -> None:
        """What `result` reserved is let go (the snapshot is restored by the
        caller); its decisions keep their outcome, not their assignments."""
        unreserve(self.fwk, result.assignments())
        for decision in result.leaves.values():
            decision.assignments = []

    def _other_orders(self, node: TreeNode, failed: _Node) -> list[tuple[str, list[TreeNode]]]:
        """Other orders of `node`'s children worth a try, each once."""
        bad = [c for c in node.children if c.key in failed.failed]
        orders = [("the children that failed first", bad + [c for c in node.children if c not in bad])]
        size = {c.key: self._asks(c) for c in node.children}
        orders.append(("the largest children first", sorted(node.children, key=lambda c: -size[c.key])))
        seen = [[c.key for c in node.children]]
        out = []
        for how, order in orders:
            keys = [c.key for c in order]
            if keys not in seen:
                seen.append(keys)
                out.append((how, order))
        return out

    def _asks(self, node: TreeNode) -> float:
        """The cpu (or, without any, the pods) the child's waiting pods ask for."""
        pods = [p for leaf in node.leaves() for p in self.pending.get(leaf.key, ())]
        cpu = sum(p.requests.get("cpu", 0) for p in pods)
        return float(cpu) if cpu else float(len(pods))

    def _in_order(
        self,
        node: TreeNode,
        children: Sequence[TreeNode],
        rows: np.ndarray | None,
        label: str,
        place: Callable[[TreeNode, np.ndarray | None], _Node] | None = None,
    ) -> _Node:
        """`children` in this order within `rows` (each by `place`, default
        `_place`); stops once minGroupCount cannot be reached any more."""
        place = place or self._place
        need, total = node.min_children, len(children)
        out = _Node(Outcome.SCHEDULED, "")
        ok, failed = 0, []
        for i, child in enumerate(children):
            result = place(child, rows)
            out.leaves.update(result.leaves)
            out.composites.update(result.composites)
            if result.feasible:
                ok += 1
                out.placed += result.placed
            else:
                failed.append((child, result))
                out.failed.add(child.key)
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

    def domains(self, node: TreeNode, within: np.ndarray | None, key: str | None) -> tuple[_Domains, str | None]:
        """Where the CompositePodGroup may go: one candidate per domain of
        `key` within `within` (nodes without the label dropped), or `within`
        itself without a key; only the domain its subtree's placed pods are
        in, where it has some."""
        if key is None:
            return _Domains([("", -1)], within), None
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
                    return _Domains([], None), f"a pod of {leaf.label} runs on node {name}, which has no label {key}"
                taken.add(int(ids[row]))
        if len(taken) > 1:
            shown = ", ".join(sorted(names[i] for i in taken))
            return _Domains([], None), f"pods of {node.label} already run in more than one {key} domain: {shown}"
        values = sorted(taken) if taken else np.flatnonzero(np.bincount(ids[allowed])).tolist()
        return _Domains([(f"{key}={names[i]}", i) for i in values], allowed, ids), None

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

    def _no_domain(self, node: TreeNode, tried: Sequence[_Tried]) -> _Node:
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
        # As a PodGroup's: no preemption or reservation where every group that
        # failed failed for a reason none can remove (a selector no node matches).
        failed = [d for d in result.leaves.values() if not d.scheduled and d.unplaced]
        unresolvable = not result.feasible and bool(failed) and all(d.unresolvable for d in failed)
        return GroupDecision(None, outcome, message, assignments, unplaced, unresolvable=unresolvable, tree=tree)


def schedule_tree(
    fwk: Framework,
    snapshot: Snapshot,
    tree: Tree,
    pending: Mapping[GroupKey, Sequence[PodInfo]],
    placed: Mapping[GroupKey, Sequence[str]],
    post_filter: bool = False,
    leaf_problem: Callable[[PodGroup], str | None] | None = None,
    backfill_only: Sequence[tuple[int, PodInfo]] = (),
    nominated: frozenset[int] = frozenset(),
) -> GroupDecision:
    """One cycle for the whole tree (module docstring); `post_filter`: run
    the profile's PostFilter plugins when it does not fit; `leaf_problem`,
    `backfill_only`, `nominated`: TreeCycle's."""
    cycle = TreeCycle(fwk, snapshot, tree, pending, placed, backfill_only)
    cycle.post_filter = post_filter
    cycle.nominated = nominated
    if leaf_problem is not None:
        cycle.leaf_problem = leaf_problem
    return cycle.run()


def tree_error(
    tree: Tree, pods: Sequence[PodInfo], message: str, invalid: bool = False, config_error: bool = False
) -> GroupDecision:
    """The tree cannot be scheduled as it is: every pod, PodGroup and
    CompositePodGroup of it says why (SchedulerError; Invalid on the
    CompositePodGroups of a tree laid out wrong). `config_error` (implied by
    `invalid`, as upstream writes its PodGroupError below each
    CompositePodGroupError): the tree is configured wrong, its PodGroups' decisions say so."""
    config_error = config_error or invalid
    result = TreeResult(tree.key, invalid=invalid, config_error=config_error)
    by_leaf: dict[GroupKey, list[PodInfo]] = {}
    for pod in pods:
        if pod.group is not None:
            by_leaf.setdefault(pod.group, []).append(pod)
    # Every PodGroup its pods name, those below where the tree could be
    # built too (a tree too deep stops at its last level): each says why.
    for key in [leaf.key for leaf in tree.root.leaves()] + sorted(by_leaf):
        if key not in result.leaves:
            members = by_leaf.get(key, [])
            unplaced = [(p, message) for p in members]
            result.leaves[key] = GroupDecision(
                key, Outcome.SCHEDULER_ERROR, message, unplaced=unplaced, config_error=config_error
            )
    for node in tree.root.composites():
        result.composites[node.key] = (Outcome.SCHEDULER_ERROR, message)
    result.composites[tree.key] = (Outcome.SCHEDULER_ERROR, message)
    where = f"CompositePodGroup {tree.key.namespace}/{tree.key.name}"
    unplaced = [(p, f"{where}: {message}") for p in pods]
    return GroupDecision(
        None, Outcome.SCHEDULER_ERROR, message, unplaced=unplaced, tree=result, config_error=config_error
    )
