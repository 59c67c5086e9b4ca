"""Trees of groups (CompositePodGroups), as the cache holds them.

A PodGroup or CompositePodGroup may name a parent CompositePodGroup
(`parentCompositePodGroupName`, same namespace, same API group). The root of
such a tree is the scheduling unit: one cycle, one snapshot, all or nothing
at the root. Pods still belong to leaf PodGroups.

`top_of` says which unit a group's pods wait in: the root, or, while an
ancestor is missing, the missing ancestor (its pods then wait, saying so).
`build` makes the tree of a root from the cache, in the order upstream tries
children (creation time, then name), and says what makes it invalid: a
cycle, more than `MAX_DEPTH` levels, an ancestor troupe cannot read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..api.composite import CompositePodGroup
from ..api.podgroup import PodGroup
from ..api.records import GroupKey

if TYPE_CHECKING:
    from .cache import InvalidObject

# Levels of a tree, the leaf PodGroups included (upstream: 3 levels of
# CompositePodGroups above the PodGroups).
MAX_DEPTH = 4


@dataclass
class TreeNode:
    """A CompositePodGroup (`composite`) or a leaf PodGroup (`group`)."""

    key: GroupKey
    composite: CompositePodGroup | None = None
    group: PodGroup | None = None
    children: list[TreeNode] = field(default_factory=list)
    depth: int = 1  # the root is 1

    @property
    def is_leaf(self) -> bool:
        return self.composite is None

    @property
    def label(self) -> str:
        made = self.composite is not None and self.composite.made_from is not None  # a Volcano PodGroup's part
        kind = "CompositePodGroup" if self.composite is not None and not made else "PodGroup"
        return f"{kind} {self.key.namespace}/{self.key.name}"

    @property
    def min_children(self) -> int:
        """minGroupCount of a gang composite; 1 for a basic one."""
        assert self.composite is not None
        return self.composite.min_group_count

    def walk(self) -> Iterator[TreeNode]:
        yield self
        for child in self.children:
            yield from child.walk()

    def leaves(self) -> Iterator[TreeNode]:
        return (n for n in self.walk() if n.is_leaf)

    def composites(self) -> Iterator[TreeNode]:
        return (n for n in self.walk() if not n.is_leaf)


@dataclass
class Tree:
    root: TreeNode
    problem: str | None = None  # why the tree cannot be scheduled as it is (Invalid)

    @property
    def key(self) -> GroupKey:
        return self.root.key


if TYPE_CHECKING:
    Groups = dict[GroupKey, PodGroup | InvalidObject]
    Composites = dict[GroupKey, CompositePodGroup | InvalidObject]


def parent_of(obj: PodGroup | CompositePodGroup | InvalidObject | None) -> GroupKey | None:
    if isinstance(obj, PodGroup | CompositePodGroup):
        return obj.parent_key
    return None


def top_of(composites: Composites, parent: GroupKey) -> tuple[GroupKey, str | None]:
    """The key of the unit a group whose parent is `parent` waits in: the
    tree's root, or the first missing ancestor; with the problem that makes
    the chain unusable (a cycle, too many levels), None if none."""
    seen: list[GroupKey] = []
    key = parent
    while True:
        if key in seen:
            cycle = " -> ".join(f"{k.namespace}/{k.name}" for k in [*seen[seen.index(key) :], key])
            return min(seen[seen.index(key) :]), f"cycle of parentCompositePodGroupName: {cycle}"
        seen.append(key)
        if len(seen) > MAX_DEPTH - 1:
            return key, (
                f"more than {MAX_DEPTH} levels: {len(seen)} CompositePodGroups above a PodGroup "
                f"(at most {MAX_DEPTH - 1})"
            )
        found = composites.get(key)
        up = parent_of(found)
        if found is None or up is None:
            return key, None
        key = up


def build(
    root: GroupKey,
    groups: Groups,
    composites: Composites,
    child_groups: dict[GroupKey, set[GroupKey]],
    child_composites: dict[GroupKey, set[GroupKey]],
) -> Tree:
    """The tree under the CompositePodGroup `root` (which must be cached),
    children in upstream's order: creation time, then name."""
    found = composites[root]

    problems: list[str] = []

    def node(key: GroupKey, depth: int, on_path: frozenset[GroupKey]) -> TreeNode:
        obj = composites.get(key)
        out = TreeNode(key, composite=obj if isinstance(obj, CompositePodGroup) else None, depth=depth)
        if obj is not None and not isinstance(obj, CompositePodGroup):
            problems.append(f"CompositePodGroup {key.namespace}/{key.name} is invalid: {obj.message}")
        elif obj is not None and obj.problem:
            problems.append(f"CompositePodGroup {key.namespace}/{key.name}: {obj.problem}")
        if out.composite is None:  # invalid: the tree's problem says so
            return out
        if depth >= MAX_DEPTH and (child_groups.get(key) or child_composites.get(key)):
            problems.append(
                f"more than {MAX_DEPTH} levels: CompositePodGroup {key.namespace}/{key.name} is at level {depth}"
            )
            return out
        for sub in sorted(child_composites.get(key, ())):
            if sub in on_path:
                problems.append(f"cycle of parentCompositePodGroupName at {sub.namespace}/{sub.name}")
                continue
            out.children.append(node(sub, depth + 1, on_path | {sub}))
        for leaf in sorted(child_groups.get(key, ())):
            group = groups.get(leaf)
            out.children.append(TreeNode(leaf, group=group if isinstance(group, PodGroup) else None, depth=depth + 1))
        # upstream orders all children together by creation time, then name
        out.children.sort(key=lambda n: (_created_of(n), n.key.name))
        return out

    tree = Tree(node(root, 1, frozenset({root})))
    if not isinstance(found, CompositePodGroup):
        tree.problem = f"CompositePodGroup {root.namespace}/{root.name} is invalid: {found.message}"
    elif problems:
        tree.problem = "; ".join(problems)
    return tree


def _created_of(n: TreeNode) -> str:
    obj = n.composite if n.composite is not None else n.group
    return obj.metadata.creation_timestamp if obj is not None else ""


def readiness(
    root: GroupKey,
    groups: Groups,
    composites: Composites,
    child_groups: dict[GroupKey, set[GroupKey]],
    child_composites: dict[GroupKey, set[GroupKey]],
    live: Callable[[GroupKey], int],
) -> str | None:
    """None when the tree under `root` is ready to be tried, else why not
    (upstream's GangScheduling PreEnqueue): a PodGroup is ready with
    `minCount` live pods (a basic one with one), a CompositePodGroup with
    `minGroupCount` ready children (a basic one with one)."""

    def why_not(key: GroupKey, depth: int) -> str | None:
        found = composites.get(key)
        if not isinstance(found, CompositePodGroup) or depth > MAX_DEPTH:
            return None  # invalid or too deep: the cycle says so
        subs, leaves = child_composites.get(key, ()), child_groups.get(key, ())
        # Called for every pod that arrives while a tree fills up: counted
        # first, and the reason (the first child not ready, composites first,
        # each kind by key) only made when the tree is not ready.
        waiting: list[tuple[GroupKey, str]] = []
        for sub in subs:
            why = why_not(sub, depth + 1)
            if why is not None:
                waiting.append((sub, why))
        short: list[tuple[GroupKey, int, int]] = []
        for leaf in leaves:
            group = groups.get(leaf)
            if isinstance(group, PodGroup) and not group.problem:  # else the cycle says what is wrong with it
                have = live(leaf)
                if have < group.min_count:
                    short.append((leaf, group.min_count, have))
        ready = len(subs) + len(leaves) - len(waiting) - len(short)
        need = found.min_group_count
        if ready >= need:
            return None
        if waiting:
            sub, why = min(waiting)
            first = f"{sub.name}: {why}"
        elif short:
            leaf, want, have = min(short)
            first = f"{leaf.name}: minCount is {want}, {have} exist"
        else:
            first = ""
        total = len(subs) + len(leaves)
        # Fewer children than minGroupCount (one deleted, or not made yet): said as such.
        counted = (
            f"needs {need} of {total} group(s) ready"
            if total >= need
            else f"needs {need} group(s) ready, {total} exist"
        )
        return f"{counted}, {ready} ready" + (f": {first}" if first else "")

    return why_not(root, 1)


def mixed(tree: Tree, classes: Mapping[str, int]) -> str | None:
    """What of the tree's groups disagrees with its root, upstream's runtime
    checks and Workload validation: a priority other than the root's, or
    CompositePodGroups of several Workloads. None where nothing does."""
    root = tree.root.composite
    if root is None:
        return None
    want = root.priority_in(classes)
    workloads: set[str] = set()
    for node in tree.root.walk():
        obj = node.composite if node.composite is not None else node.group
        if obj is None:
            continue
        have = obj.priority_in(classes)
        if have is not None and have != want:
            shown = "none" if want is None else str(want)
            return f"{node.label} has priority {have}, its root {shown}: a tree has one priority"
        ref = node.composite.spec.workload_ref if node.composite is not None else None
        if ref is not None:
            workloads.add(ref.workload_name)
    if len(workloads) > 1:
        return f"its CompositePodGroups name several Workloads ({', '.join(sorted(workloads))})"
    return None
