"""A small world of nodes, PodGroups, CompositePodGroups and pods, run
through troupe's real core as `troupe simulate` runs it, and an exhaustive
oracle of whether a tree fits (tests/unit/test_tree_properties.py).

The world is written as API objects, read by the simulation's loader
(uids, priority admission) and fed to `Scheduler` by the runner's own
`_Simulation` (scheduler/simulate/runner.py): its handlers in kopf's order,
binds as the cluster answers them, victims deleted at once, status written
back through the watch, a fake clock moved past every backoff between
rounds. On top of the runner, `Run` adds what the properties need: a hook
after every decision, deletions between rounds, a failover (a fresh
scheduler fed the objects as the API holds them, `status.nominatedNodeName`
included), and clocks that let reservations happen (see `Run.__init__`).

The oracle (`Oracle`) knows only cpu, memory and pod count, topology keys
and the tree's rules (docs/trees.md "The rules"): it backtracks over the
leaves, a leaf's identical pods as combinations, each CompositePodGroup in
one domain of its key within its parent's, `minGroupCount` children
feasible (a basic one: 1), a gang PodGroup `minCount` pods (a basic one: 1).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler.api.config import SchedulerConfiguration
from scheduler.core.schedule_podgroup import GroupDecision, Outcome
from scheduler.plugins import in_tree_registry
from scheduler.simulate.loader import load_text
from scheduler.simulate.runner import _Simulation

NS = "ns"
API = "scheduling.troupe.dev/v1alpha2"
LABEL = "scheduling.troupe.dev/pod-group"
SCHEDULER = "troupe-scheduler"
HOSTNAME = "kubernetes.io/hostname"
CLASSES = {"low": 100, "mid": 500, "high": 1000}
POD_UID = "simulate-pod/ns/"  # the loader's uid of pod ns/<name>

# Between rounds the runner moves its clock past podMaxBackoffSeconds and
# maxUnschedulableSeconds; these keep that step short enough that a unit
# starves (starvationSeconds) by its second cycle, so reservations happen.
PROPERTY_CONFIG: dict[str, Any] = {
    "queue": {"podInitialBackoffSeconds": 1, "podMaxBackoffSeconds": 10, "maxUnschedulableSeconds": 20},
    "profiles": [
        {
            "schedulerName": SCHEDULER,
            "pluginConfig": [{"name": "Reservation", "args": {"starvationSeconds": 15}}],
        }
    ],
}


def property_config(search_steps: int | None = None) -> SchedulerConfiguration:
    """PROPERTY_CONFIG, with the profile's podGroupScheduling.searchSteps where given."""
    raw = json.loads(json.dumps(PROPERTY_CONFIG))
    if search_steps is not None:
        raw["profiles"][0]["podGroupScheduling"] = {"searchSteps": search_steps}
    return SchedulerConfiguration.model_validate(raw)


# ------------------------------------------------------------------ the world


@dataclass(frozen=True)
class Node:
    name: str
    cpu: int  # millicores
    memory: int  # MiB
    pods: int = 8
    labels: tuple[tuple[str, str], ...] = ()

    def label(self, key: str) -> str | None:
        return dict(self.labels).get(key)


@dataclass(frozen=True)
class Pod:
    name: str
    cpu: int  # millicores
    memory: int  # MiB
    group: str | None = None  # its PodGroup (label)
    node: str | None = None  # running there (spec.nodeName)
    priority_class: str | None = None
    deadline: int | None = None  # activeDeadlineSeconds
    app: str | None = None  # label app=<app>, what anti-affinity selects
    zone_in: str | None = None  # required node affinity: zone In [zone_in]
    anti: tuple[str, str] | None = None  # required pod anti-affinity: (app, topologyKey)


@dataclass(frozen=True)
class Group:
    name: str
    min_count: int | None  # None: basic
    parent: str | None = None
    key: str | None = None  # schedulingConstraints.topology[0].key
    priority_class: str | None = None


@dataclass(frozen=True)
class Composite:
    name: str
    min_groups: int | None  # None: basic
    parent: str | None = None
    key: str | None = None
    priority_class: str | None = None


@dataclass
class World:
    nodes: list[Node]
    groups: list[Group] = field(default_factory=list)
    composites: list[Composite] = field(default_factory=list)
    pods: list[Pod] = field(default_factory=list)

    def group(self, name: str) -> Group | None:
        return next((g for g in self.groups if g.name == name), None)

    def composite(self, name: str) -> Composite | None:
        return next((c for c in self.composites if c.name == name), None)

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def pod(self, name: str) -> Pod:
        return next(p for p in self.pods if p.name == name)


def node_body(n: Node) -> dict[str, Any]:
    labels = {HOSTNAME: n.name, **dict(n.labels)}
    alloc = {"cpu": f"{n.cpu}m", "memory": f"{n.memory}Mi", "pods": str(n.pods)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": n.name, "labels": labels},
        "status": {"allocatable": alloc, "capacity": dict(alloc)},
    }


def pod_body(p: Pod) -> dict[str, Any]:
    labels: dict[str, str] = {}
    if p.group:
        labels[LABEL] = p.group
    if p.app:
        labels["app"] = p.app
    spec: dict[str, Any] = {
        "schedulerName": SCHEDULER,
        "containers": [
            {"name": "c", "image": "pause", "resources": {"requests": {"cpu": f"{p.cpu}m", "memory": f"{p.memory}Mi"}}}
        ],
    }
    if p.node:
        spec["nodeName"] = p.node
    if p.priority_class:
        spec["priorityClassName"] = p.priority_class
    if p.deadline is not None:
        spec["activeDeadlineSeconds"] = p.deadline
    affinity: dict[str, Any] = {}
    if p.zone_in:
        term = {"matchExpressions": [{"key": "zone", "operator": "In", "values": [p.zone_in]}]}
        affinity["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
    if p.anti:
        app, key = p.anti
        affinity["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}
            ]
        }
    if affinity:
        spec["affinity"] = affinity
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": p.name, "namespace": NS, "labels": labels},
        "spec": spec,
    }
    if p.node:
        body["status"] = {"phase": "Running"}
    return body


def _policy_spec(
    policy: dict[str, Any], parent: str | None, key: str | None, priority_class: str | None
) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulingPolicy": policy}
    if parent:
        spec["parentCompositePodGroupName"] = parent
    if key:
        spec["schedulingConstraints"] = {"topology": [{"key": key}]}
    if priority_class:
        spec["priorityClassName"] = priority_class
    return spec


def group_body(g: Group) -> dict[str, Any]:
    policy = {"basic": {}} if g.min_count is None else {"gang": {"minCount": g.min_count}}
    return {
        "apiVersion": API,
        "kind": "PodGroup",
        "metadata": {"name": g.name, "namespace": NS},
        "spec": _policy_spec(policy, g.parent, g.key, g.priority_class),
    }


def composite_body(c: Composite) -> dict[str, Any]:
    policy = {"basic": {}} if c.min_groups is None else {"gang": {"minGroupCount": c.min_groups}}
    return {
        "apiVersion": API,
        "kind": "CompositePodGroup",
        "metadata": {"name": c.name, "namespace": NS},
        "spec": _policy_spec(policy, c.parent, c.key, c.priority_class),
    }


def class_bodies() -> list[dict[str, Any]]:
    return [
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": n}, "value": v}
        for n, v in CLASSES.items()
    ]


def bodies(world: World) -> list[dict[str, Any]]:
    return [
        *class_bodies(),
        *(node_body(n) for n in world.nodes),
        *(composite_body(c) for c in world.composites),
        *(group_body(g) for g in world.groups),
        *(pod_body(p) for p in world.pods),
    ]


def as_input_text(docs: Iterable[Mapping[str, Any]]) -> str:
    return "\n---\n".join(json.dumps(d) for d in docs)  # JSON is YAML


# ------------------------------------------------------------------ the run


def name_of(uid: str) -> str:
    return uid.removeprefix(POD_UID)


class Run(_Simulation):
    """The runner's simulation, with a hook after each decision is applied
    (victims gone, assignments bound)."""

    def __init__(
        self,
        docs: Sequence[Mapping[str, Any]],
        config: SchedulerConfiguration,
        hook: Callable[[Run, GroupDecision], None] | None = None,
    ) -> None:
        inp = load_text(as_input_text(docs), "generated")
        super().__init__(inp, config, in_tree_registry())
        # The runner's Reservation clock moves only for `--waited`; here it
        # is the rounds' clock, so a unit that keeps failing starves and gets
        # a reservation. Wall clocks (backfill, reservation messages) are
        # fake too, so two runs of the same world say the same thing.
        for fwk in self.sched.frameworks.values():
            fwk.handle.clock = self.clock
            for plugin in fwk.post_filter:
                if hasattr(plugin, "wall"):
                    plugin.wall = self.wall
        self.sched.wall = self.wall
        self.hook = hook
        self.decisions: list[GroupDecision] = []
        self.feed(inp)

    def wall(self) -> float:
        return 1.7e9 + self.clock.now

    def _bind(self, decision: GroupDecision) -> int:
        n = super()._bind(decision)
        self.decisions.append(decision)
        if self.hook is not None:
            self.hook(self, decision)
        return n

    def round(self) -> None:
        self.one_round()
        q = self.sched.config.queue
        self.clock.now += max(q.pod_max_backoff_seconds, q.max_unschedulable_seconds) + 1.0

    # What a user reads (by pod name).

    def placed_nodes(self) -> dict[str, str]:
        return {name_of(uid): self.sched.cache.placed_node(uid) or "" for uid in self.placed}

    def nominations(self) -> dict[str, str]:
        return {name_of(uid): node for uid, (node, _) in self.sched.nominated.items()}

    def messages(self) -> dict[str, str]:
        return {name_of(uid): m for uid, m in self.recorder.pods.items()}

    def victims(self) -> dict[str, str]:
        return {name_of(uid): by for uid, by in self.preemption.by.items()}

    def state(self) -> tuple[Any, ...]:
        return (
            sorted(self.placed_nodes().items()),
            sorted(self.victims()),
            sorted(self.nominations().items()),
            sorted(self.messages().items()),
        )


def internal_errors(decisions: Iterable[GroupDecision]) -> list[str]:
    """The core catches an exception of a cycle and reports it as a
    SchedulerError "internal error: ..." (Scheduler.schedule_unit): a raise."""
    out = []
    for d in decisions:
        if d.outcome is Outcome.SCHEDULER_ERROR and "internal error" in d.message:
            out.append(d.message)
        out += [why for _, why in d.unplaced if "internal error" in why]
    return out


def run_world(
    world: World,
    config: SchedulerConfiguration,
    hook: Callable[[Run, GroupDecision], None] | None = None,
    max_rounds: int | None = None,
) -> Run:
    """The world to a fixed point: rounds until one changes nothing a user
    reads (placements, victims, nominations, messages)."""
    run = Run(bodies(world), config, hook)
    run.start()
    limit = max_rounds or 2 * len(world.pods) + 6
    before = run.state()
    for _ in range(limit):
        run.round()
        now = run.state()
        if now == before:
            break
        before = now
    return run


# -------------------------------------------------------------- tree views


@dataclass
class TreeView:
    """The structure of the world's live groups, for the invariants: who is
    whose parent, what each leaf needs, which pods are placed where."""

    world: World
    alive_groups: set[str]
    alive_composites: set[str]
    placed: Mapping[str, str]  # pod name -> node, every pod bound or assumed now

    def parent_chain(self, group: str) -> list[str] | None:
        """The CompositePodGroups above the PodGroup, nearest first; None
        where one is missing (deleted)."""
        g = self.world.group(group)
        assert g is not None
        chain: list[str] = []
        up = g.parent
        while up is not None:
            if up not in self.alive_composites or len(chain) > 8:
                return None
            chain.append(up)
            c = self.world.composite(up)
            assert c is not None
            up = c.parent
        return chain

    def leaf_ok(self, group: str) -> bool:
        g = self.world.group(group)
        assert g is not None
        have = sum(1 for p in self.world.pods if p.group == group and p.name in self.placed)
        return have >= (g.min_count or 1)

    def children(self, composite: str) -> list[tuple[str, bool]]:
        """(name, is a composite) of the live children."""
        out = [
            (c.name, True) for c in self.world.composites if c.parent == composite and c.name in self.alive_composites
        ]
        out += [(g.name, False) for g in self.world.groups if g.parent == composite and g.name in self.alive_groups]
        return out

    def composite_ok(self, composite: str, depth: int = 0) -> bool:
        c = self.world.composite(composite)
        assert c is not None
        if depth > 8:
            return False
        ok = sum(
            1
            for name, is_comp in self.children(composite)
            if (self.composite_ok(name, depth + 1) if is_comp else self.leaf_ok(name))
        )
        return ok >= (c.min_groups or 1)


def effective_priority(
    world: World, pod: Pod, groups: Collection[str] | None = None, composites: Collection[str] | None = None
) -> int:
    """The priority the fix gives a pod (issue 44): its tree root's where
    the root has one, else its PodGroup's, else its own. A tree whose root
    has none takes its highest pod's (as a PodGroup without one): for the
    pods of a unit together, that is `unit_priority`. `groups` and
    `composites`: those that still exist (a pod of a deleted PodGroup has
    its own; a leaf cut off by a deleted CompositePodGroup has no root)."""
    g = world.group(pod.group) if pod.group else None
    if g is not None and groups is not None and g.name not in groups:
        g = None
    root = None
    up = g.parent if g is not None else None
    while up is not None:
        c = world.composite(up)
        if c is None or (composites is not None and up not in composites):
            root = None  # cut off: waits for the missing CompositePodGroup, of no tree yet
            break
        root = c
        up = c.parent
    for cls in (root.priority_class if root else None, g.priority_class if g else None, pod.priority_class):
        if cls:
            return CLASSES[cls]
    return 0


def unit_priority(
    world: World, pods: Sequence[Pod], groups: Collection[str] | None = None, composites: Collection[str] | None = None
) -> int:
    return max((effective_priority(world, p, groups, composites) for p in pods), default=0)


# ------------------------------------------------------------------ oracle


class OracleBudget(Exception):
    """The oracle gave up (too many steps): the case is not judged."""


@dataclass
class OLeaf:
    name: str
    min_count: int | None  # None: basic
    key: str | None
    pods: list[tuple[str, int, int]]  # pending: (name, cpu, memory)
    placed: list[int] = field(default_factory=list)  # node indices of its pods placed before


@dataclass
class OComposite:
    name: str
    min_groups: int | None
    key: str | None
    children: list[OLeaf | OComposite]


ONode = OLeaf | OComposite


def _placed_under(n: ONode) -> list[int]:
    if isinstance(n, OLeaf):
        return list(n.placed)
    return [i for c in n.children for i in _placed_under(c)]


class Oracle:
    """Exhaustive: does the tree fit in the free room given? `free[i]` is
    node i's [cpu, memory, pods] left over by the pods that stay."""

    def __init__(
        self, free: Sequence[Sequence[int]], labels: Sequence[Mapping[str, str]], limit: int = 400_000
    ) -> None:
        self.free = [list(f) for f in free]
        self.labels = labels
        self.steps = 0
        self.limit = limit
        self.where: dict[str, int] = {}  # pod name -> node index, the current partial placement

    def fits(self, root: ONode) -> dict[str, int] | None:
        """A placement that makes `root` feasible (pod -> node index), or None."""
        every = frozenset(range(len(self.free)))
        for _ in self._place(root, every):
            return dict(self.where)
        return None

    def _tick(self) -> None:
        self.steps += 1
        if self.steps > self.limit:
            raise OracleBudget

    def _domains(self, key: str | None, allowed: frozenset[int], placed: list[int]) -> list[frozenset[int]]:
        if key is None:
            return [allowed]
        values = {self.labels[i].get(key) for i in placed}
        if None in values or len(values) > 1:
            return []  # a placed pod on a node without the label, or in two domains: a SchedulerError
        by: dict[str, set[int]] = {}
        for i in sorted(allowed):
            v = self.labels[i].get(key)
            if v is not None and (not values or v in values):
                by.setdefault(v, set()).add(i)
        return [frozenset(s) for _, s in sorted(by.items())]

    def _place(self, n: ONode, allowed: frozenset[int]) -> Iterator[None]:
        if isinstance(n, OLeaf):
            yield from self._leaf(n, allowed)
            return
        need = n.min_groups or 1
        if need > len(n.children):
            return
        for dom in self._domains(n.key, allowed, _placed_under(n)):
            for chosen in itertools.combinations(n.children, need):
                yield from self._all(list(chosen), dom)

    def _all(self, children: list[ONode], allowed: frozenset[int]) -> Iterator[None]:
        if not children:
            yield
            return
        for _ in self._place(children[0], allowed):
            yield from self._all(children[1:], allowed)

    def _leaf(self, n: OLeaf, allowed: frozenset[int]) -> Iterator[None]:
        need = max((n.min_count or 1) - len(n.placed), 0)  # a basic leaf: one pod
        if need == 0:  # placed whole before
            yield
            return
        if need > len(n.pods):
            return
        for dom in self._domains(n.key, allowed, n.placed):
            rows = sorted(dom)
            for combo in _multiset_combinations(n.pods, need):
                yield from self._assign(combo, 0, rows, -1)

    def _assign(self, pods: list[tuple[str, int, int]], i: int, rows: list[int], floor: int) -> Iterator[None]:
        if i == len(pods):
            yield
            return
        name, cpu, mem = pods[i]
        same_as_before = i > 0 and pods[i - 1][1:] == (cpu, mem)
        for row in rows:
            if same_as_before and row < floor:
                continue  # identical pods in non-decreasing node order: each placement once
            self._tick()
            f = self.free[row]
            if f[0] < cpu or f[1] < mem or f[2] < 1:
                continue
            f[0] -= cpu
            f[1] -= mem
            f[2] -= 1
            self.where[name] = row
            yield from self._assign(pods, i + 1, rows, row)
            del self.where[name]
            f[0] += cpu
            f[1] += mem
            f[2] += 1


def _multiset_combinations(pods: list[tuple[str, int, int]], k: int) -> Iterator[list[tuple[str, int, int]]]:
    """k of the pods, pods of the same (cpu, memory) taken as identical; sorted by shape."""
    shapes: dict[tuple[int, int], list[tuple[str, int, int]]] = {}
    for p in pods:
        shapes.setdefault((p[1], p[2]), []).append(p)
    kinds = sorted(shapes.items())

    def rec(i: int, left: int) -> Iterator[list[tuple[str, int, int]]]:
        if left == 0:
            yield []
            return
        if i == len(kinds):
            return
        _, members = kinds[i]
        for take in range(min(left, len(members)), -1, -1):
            for rest in rec(i + 1, left - take):
                yield members[:take] + rest

    yield from rec(0, k)


def oracle_tree(
    world: World,
    root: str,
    pending: set[str],
    placed: Mapping[str, str],
    alive_groups: set[str] | None = None,
    alive_composites: set[str] | None = None,
) -> OComposite:
    """The oracle's view of the tree under the CompositePodGroup `root`: its
    live groups, each leaf's pending pods (`pending`) and placed ones."""
    rows = {n.name: i for i, n in enumerate(world.nodes)}
    groups = alive_groups if alive_groups is not None else {g.name for g in world.groups}
    comps = alive_composites if alive_composites is not None else {c.name for c in world.composites}

    def build(name: str) -> OComposite:
        c = world.composite(name)
        assert c is not None
        children: list[OLeaf | OComposite] = [
            build(s.name) for s in world.composites if s.parent == name and s.name in comps
        ]
        for g in world.groups:
            if g.parent == name and g.name in groups:
                members = [p for p in world.pods if p.group == g.name]
                children.append(
                    OLeaf(
                        g.name,
                        g.min_count,
                        g.key,
                        [(p.name, p.cpu, p.memory) for p in members if p.name in pending],
                        [rows[placed[p.name]] for p in members if p.name in placed],
                    )
                )
        return OComposite(name, c.min_groups, c.key, children)

    return build(root)


def free_room(world: World, staying: Mapping[str, str], held: Iterable[Pod] = ()) -> list[list[int]]:
    """Each node's [cpu, memory, pods] free with the pods `staying` (name ->
    node) on it, and the `held` pods' room (on their `node`) taken."""
    free = {n.name: [n.cpu, n.memory, n.pods] for n in world.nodes}
    for name, node in staying.items():
        p = world.pod(name)
        f = free[node]
        f[0] -= p.cpu
        f[1] -= p.memory
        f[2] -= 1
    for p in held:
        if p.node is not None:
            f = free[p.node]
            f[0] -= p.cpu
            f[1] -= p.memory
            f[2] -= 1
    return [free[n.name] for n in world.nodes]


def labels_of(world: World) -> list[dict[str, str]]:
    return [dict(n.labels) for n in world.nodes]


def overcommitted(world: World, placed: Mapping[str, str]) -> list[str]:
    """Nodes whose placed pods ask more than the node has."""
    out = []
    for n, f in zip(world.nodes, free_room(world, placed)):
        if min(f) < 0:
            out.append(f"{n.name}: {f} left")
    return out


def describe(world: World) -> str:
    """The world, one object a line, for failure messages."""
    lines = [f"node {n.name} cpu={n.cpu}m mem={n.memory}Mi pods={n.pods} {dict(n.labels)}" for n in world.nodes]
    lines += [f"{c}" for c in world.composites]
    lines += [f"{g}" for g in world.groups]
    lines += [f"{p}" for p in world.pods]
    return "\n".join(lines)
