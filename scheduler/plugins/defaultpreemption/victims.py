"""Who may be evicted for a preemptor, in units that are evicted together.

A unit is either a PodGroup's running pods, taken whole (`disruptionMode:
PodGroup`, or a gang that leaves the field unset: a gang left below minCount
is useless), or one pod: a lone pod, a pod of a `basic` group without
`disruptionMode: PodGroup`, or a pod of a group whose `disruptionMode` is `Pod`.
A pod of a tree (CompositePodGroups) below a CompositePodGroup whose
`disruptionMode` is all goes with the whole tree below the highest such one.
A unit is a candidate only if its priority and every one of its pods'
priorities are below the preemptor's: nothing of equal or higher priority is
ever taken. Pods already terminating are not candidates (their room is on
its way back).

Shrink before kill: a gang taken whole because it leaves `disruptionMode`
unset, with more pods running than its minCount, also offers the pods above
its minimum one by one: its `running - minCount` pods that its owner would
scale down first (the lowest `controller.kubernetes.io/pod-deletion-cost`,
then the newest). Each is a unit of its own, so the search takes only those
that free room the preemptor needs; the gang's whole unit contains them, and
the search gives the whole back first where the pods above the minimum are
enough. An explicit `disruptionMode: PodGroup` keeps the group together. A
tree taken whole because its root leaves `disruptionMode` unset offers, the
same way, each CompositePodGroup's running children beyond its
minGroupCount (newest first, each child whole) and each gang's pods beyond
its minCount (a Volcano PodGroup's sub-groups beyond `minSubGroups`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from ...api.composite import CompositePodGroup
from ...api.podgroup import PodGroup
from ...api.records import GroupKey, LabelSelector, PodDisruptionBudgetInfo, PodInfo
from ...cluster.cache import ClusterCache
from ...cluster.snapshot import Snapshot
from ...cluster.tree import TreeNode

Budget = PodDisruptionBudgetInfo


@dataclass(frozen=True, slots=True)
class Unit:
    """Pods evicted together."""

    name: str  # "PodGroup ns/name" or "pod ns/name", for messages
    pods: tuple[PodInfo, ...]
    priority: int
    group: GroupKey | None  # the gang PodGroup taken whole (it gets DisruptionTarget)
    rows: frozenset[int]  # the snapshot rows its pods run on
    start: str  # the earliest start (or creation) time of its pods, RFC 3339
    composite: GroupKey | None = None  # the CompositePodGroup whose tree is taken whole (DisruptionTarget)
    # A gang's pod above its minimum: that gang, and the pod's deletion cost (kept first when higher).
    above_min_of: GroupKey | None = None
    cost: int = 0

    @property
    def size(self) -> int:
        return len(self.pods)


def group_priority(group: PodGroup | None, pods: Iterable[PodInfo], classes: Mapping[str, int]) -> int:
    """A PodGroup's priority: `spec.priority`, else its `priorityClassName`'s
    value, else the highest priority among its pods (0 without any)."""
    own = group.priority_in(classes) if group is not None else None
    return own if own is not None else max((p.priority for p in pods), default=0)


def taken_whole(group: PodGroup) -> bool:
    """`disruptionMode: PodGroup`, or unset on a gang: its pods go together."""
    mode = group.spec.disruption_mode
    return mode == "PodGroup" or (mode is None and group.is_gang)


def _started(pod: PodInfo) -> str:
    return pod.start_time or pod.creation_timestamp


def victim_units(cache: ClusterCache, snapshot: Snapshot, below: int, exclude: Collection[GroupKey] = ()) -> list[Unit]:
    """Every unit running in `snapshot` whose priority is below `below`, except
    the pods of the PodGroups `exclude` (the preemptor's own)."""
    units: list[Unit] = []
    seen: set[GroupKey] = set()
    whole: dict[GroupKey, GroupKey | None] = {}  # PodGroup -> the tree above it taken whole
    for node, pods in snapshot.pods_on_node.items():
        row = snapshot.row.get(node)
        if row is None:
            continue
        for pod in pods.values():
            if pod.uid in snapshot.removed or pod.deleting or pod.terminal:
                continue
            key = pod.group
            if key is not None and key in exclude:
                continue
            top = whole.setdefault(key, cache.taken_whole_above(key)) if key is not None else None
            if top is not None:
                if top not in seen:
                    seen.add(top)
                    unit = _tree_unit(cache, snapshot, top, below)
                    if unit is not None:
                        units.append(unit)
                        units.extend(tree_surplus_units(cache, snapshot, top, unit))
                continue
            group = cache.groups.get(key) if key is not None else None
            if isinstance(group, PodGroup) and taken_whole(group):
                assert key is not None
                if key not in seen:
                    seen.add(key)
                    units.extend(_gang_units(cache, snapshot, key, group, below))
            elif pod.priority < below:
                units.append(Unit(f"pod {pod.key}", (pod,), pod.priority, None, frozenset((row,)), _started(pod)))
    return units


def _running(
    cache: ClusterCache, snapshot: Snapshot, groups: Iterable[GroupKey], below: int
) -> tuple[list[PodInfo], set[int]] | None:
    """The running pods of `groups` and their rows; None if there are none,
    or if any is not below `below` (never a pod of equal or higher priority,
    so not the unit either)."""
    members: list[PodInfo] = []
    rows: set[int] = set()
    for key in groups:
        for pod in cache.members(key):
            node = snapshot.node_of(pod.uid)
            row = snapshot.row.get(node) if node is not None else None
            if row is None or pod.deleting or pod.terminal:
                continue
            if pod.priority >= below:
                return None
            members.append(pod)
            rows.add(row)
    return (members, rows) if members else None


def _gang_units(cache: ClusterCache, snapshot: Snapshot, key: GroupKey, group: PodGroup, below: int) -> list[Unit]:
    """A gang taken whole, and (unset disruptionMode) its pods above its minimum."""
    unit = _gang_unit(cache, snapshot, key, group, below)
    if unit is None:
        return []
    if group.spec.disruption_mode is not None:
        return [unit]
    return [unit, *surplus_units(unit, group.min_count, snapshot)]


def _gang_unit(cache: ClusterCache, snapshot: Snapshot, key: GroupKey, group: PodGroup, below: int) -> Unit | None:
    running = _running(cache, snapshot, (key,), below)
    if running is None:
        return None
    members, rows = running
    priority = group_priority(group, members, cache.priority_classes)
    if priority >= below:
        return None
    start = min(_started(p) for p in members)
    return Unit(str(key), tuple(members), priority, key, frozenset(rows), start)


def surplus_units(whole: Unit, min_count: int, snapshot: Snapshot) -> list[Unit]:
    """The gang's pods above its minimum, each a unit: the `size - min_count`
    its owner would scale down first (lowest deletion cost, then newest)."""
    extra = whole.size - min_count
    if extra <= 0:
        return []
    # Stable sorts, last key first: by name, then newest first, then lowest cost.
    by_name = sorted(whole.pods, key=lambda p: p.name)
    newest_first = sorted(by_name, key=_started, reverse=True)
    first = sorted(newest_first, key=lambda p: p.deletion_cost)[:extra]
    units = []
    for pod in first:
        node = snapshot.node_of(pod.uid)
        row = snapshot.row.get(node) if node is not None else None
        if row is not None:
            units.append(
                Unit(
                    f"pod {pod.key}",
                    (pod,),
                    whole.priority,
                    None,
                    frozenset((row,)),
                    _started(pod),
                    above_min_of=whole.group,
                    cost=pod.deletion_cost,
                )
            )
    return units


def unique_pods(units: Iterable[Unit]) -> list[PodInfo]:
    """The pods of `units`, each once (a gang's whole unit contains its
    pods above the minimum, which are units of their own too)."""
    seen: dict[str, PodInfo] = {}
    for unit in units:
        for pod in unit.pods:
            seen.setdefault(pod.uid, pod)
    return list(seen.values())


def without_contained(units: Sequence[Unit]) -> list[Unit]:
    """`units` less those whose pods another, larger one of them holds (a
    gang's pod above its minimum, where the gang goes whole)."""
    sets = [frozenset(p.uid for p in u.pods) for u in units]
    return [u for i, u in enumerate(units) if not any(len(o) > len(sets[i]) and sets[i] <= o for o in sets)]


def _tree_unit(cache: ClusterCache, snapshot: Snapshot, top: GroupKey, below: int) -> Unit | None:
    """The running pods of every PodGroup under the CompositePodGroup `top`
    (`disruptionMode: all`), or None if any of them is not below `below`."""
    running = _running(cache, snapshot, cache.leaves_under(top), below)
    if running is None:
        return None
    members, rows = running
    priority = max(p.priority for p in members)
    start = min(_started(p) for p in members)
    name = f"CompositePodGroup {top.namespace}/{top.name}"
    return Unit(name, tuple(members), priority, None, frozenset(rows), start, composite=top)


def tree_surplus_units(cache: ClusterCache, snapshot: Snapshot, top: GroupKey, whole: Unit) -> list[Unit]:
    """Shrink before kill, for a tree taken whole because its root leaves
    `disruptionMode` unset: under each CompositePodGroup, its running
    children beyond its minGroupCount (the newest first), each whole; in
    each gang PodGroup, its pods beyond its minCount (as a flat gang's)."""
    root = cache.composites.get(top)
    tree = cache.tree(top)
    if not isinstance(root, CompositePodGroup) or root.spec.disruption_mode is not None or tree is None:
        return []
    running: dict[GroupKey, list[PodInfo]] = {}
    for pod in whole.pods:
        if pod.group is not None:
            running.setdefault(pod.group, []).append(pod)
    units: list[Unit] = []
    for node in tree.root.walk():
        if not node.is_leaf:
            units += _children_above_min(node, running, snapshot, whole, top)
        elif node.group is not None and node.group.is_gang:
            pods = running.get(node.key, [])
            gang = Unit(str(node.key), tuple(pods), whole.priority, node.key, whole.rows, whole.start)
            units += surplus_units(gang, node.group.min_count, snapshot)
    return units


def _children_above_min(
    node: TreeNode, running: Mapping[GroupKey, list[PodInfo]], snapshot: Snapshot, whole: Unit, top: GroupKey
) -> list[Unit]:
    """A CompositePodGroup's running children beyond its minGroupCount, each
    whole: the newest (the latest of its pods to start) first, then by name."""
    children = []
    for child in node.children:
        pods = [p for leaf in child.leaves() for p in running.get(leaf.key, ())]
        if pods:
            children.append((child, pods))
    extra = len(children) - node.min_children
    if extra <= 0:
        return []
    children.sort(key=lambda c: (max(_started(p) for p in c[1]), c[0].key.name), reverse=True)
    units = []
    for child, pods in children[:extra]:
        rows = frozenset(r for p in pods if (r := _row(snapshot, p)) is not None)
        start = min(_started(p) for p in pods)
        units.append(Unit(child.label, tuple(pods), whole.priority, None, rows, start, above_min_of=top))
    return units


def _row(snapshot: Snapshot, pod: PodInfo) -> int | None:
    node = snapshot.node_of(pod.uid)
    return snapshot.row.get(node) if node is not None else None


def budgets(cache: ClusterCache) -> list[Budget]:
    """The PodDisruptionBudgets preemption counts. As upstream's preemption,
    one with an empty selector is skipped (policy/v1 eviction would count it
    for every pod of its namespace; kube-scheduler does not)."""
    return [b for b in cache.pdbs.values() if b.selector is not None and b.selector != LabelSelector()]


def pdb_violations(pods: Iterable[PodInfo], pdbs: Sequence[Budget]) -> int:
    """How many of `pods` would be evicted past a PodDisruptionBudget's
    `disruptionsAllowed` (upstream's filterPodsWithPDBViolation, counting; a
    pod the budget already lists as disrupted is not counted again)."""
    if not pdbs:
        return 0
    allowed = [b.disruptions_allowed for b in pdbs]
    violating = 0
    for pod in pods:
        hit = False
        for i, b in enumerate(pdbs):
            if b.selects(pod) and pod.name not in b.disrupted_pods:
                allowed[i] -= 1
                hit = hit or allowed[i] < 0
        violating += hit
    return violating


def more_important_first(units: Iterable[Unit]) -> list[Unit]:
    """Upstream's reprieve order: higher priority first, then (a gang's pods
    above its minimum) the higher deletion cost, then started earlier; among
    those, larger units first (keeping one saves more pods)."""
    return sorted(units, key=lambda u: (-u.priority, -u.cost, u.start, -u.size, u.name))
