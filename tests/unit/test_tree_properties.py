"""Generated worlds of trees of groups (CompositePodGroups), run through the
real core as `troupe simulate` runs it (tests/unit/tree_harness.py), to find
the next defect of issue 44 ("whole or nothing, for trees too"):

- differential: a flat gang G and the tree {root -> G} decide the same
  (placement, victims, reservation, pod messages); two gangs under a root
  of minGroupCount 2 bind both or neither;
- invariants on random trees (depth <= 4, topology keys, priorities, running
  pods, deadlines, several trees, deletions between rounds, a failover):
  whole or nothing at every level, no gang below minCount, no node
  overcommitted, victims of lower priority, useful and each needed, no two
  reservations on one room, no nomination outliving its unit's gate,
  deletion or a failover by more than one cycle, the core never raises;
- oracle: on trees small enough to enumerate, troupe with the default
  configuration places the tree if and only if an exhaustive search finds
  a placement, and what it places is valid.

Each property also runs, as explicit examples, the cases of issue 44 it
covers, so that it fails on the main of the issue whatever the search
finds (and a defect it found, once, stays found).

CI runs are derandomized (the same examples each run). For exploration:
TROUPE_PROPERTY_SEED=<int> (or `random`) draws new examples,
TROUPE_PROPERTY_EXAMPLES=<n> runs n examples per property,
TROUPE_PROPERTY_SKIP=<checks> leaves checks out to look past a known
failure (see SKIP), TROUPE_PROPERTY_GENERATED_ONLY=1 leaves the explicit
examples out. The number each property ran, and what kind of cases
they were: `pytest --hypothesis-show-statistics`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from hypothesis import HealthCheck, Phase, event, example, given, seed, settings
from hypothesis import strategies as st

from scheduler.api.config import PodGroupScheduling, SchedulerConfiguration
from scheduler.core.schedule_podgroup import GroupDecision
from scheduler.framework.interface import SEARCH_BUDGET_SPENT

from .tree_harness import (
    HOSTNAME,
    NS,
    Composite,
    Group,
    Node,
    OComposite,
    OLeaf,
    Oracle,
    OracleBudget,
    Pod,
    Run,
    TreeView,
    World,
    bodies,
    describe,
    free_room,
    internal_errors,
    labels_of,
    name_of,
    oracle_tree,
    overcommitted,
    property_config,
    run_world,
    unit_priority,
)

_F = TypeVar("_F", bound=Callable[..., Any])

SEED = os.environ.get("TROUPE_PROPERTY_SEED")
EXAMPLES = os.environ.get("TROUPE_PROPERTY_EXAMPLES")
# Checks left out, to look past a known failure for the next one: a
# comma-separated list of the differential's placement, victims,
# nominations, api, messages and the invariants' (Watch) overcommit, whole,
# priority, useful, needed, nominations, api, overlap, settled. Never set in CI.
SKIP = set(filter(None, os.environ.get("TROUPE_PROPERTY_SKIP", "").split(",")))


def on(check: str) -> bool:
    return check not in SKIP


def sized(examples: int) -> Callable[[_F], _F]:
    """Settings for a generated property: `examples` derandomized examples in
    CI; TROUPE_PROPERTY_SEED / TROUPE_PROPERTY_EXAMPLES for exploration."""
    kw: dict[str, Any] = {
        "max_examples": int(EXAMPLES) if EXAMPLES else examples,
        "deadline": None,
        "suppress_health_check": list(HealthCheck),
        "print_blob": True,
    }
    if SEED is None:
        kw.update(derandomize=True, database=None)
    if os.environ.get("TROUPE_PROPERTY_GENERATED_ONLY"):  # the cases left out, to see what the search finds
        kw["phases"] = [p for p in Phase if p is not Phase.explicit]

    def wrap(f: _F) -> _F:
        f = settings(**kw)(f)
        if SEED is not None and SEED != "random":
            f = seed(int(SEED))(f)
        return f

    return wrap


# ------------------------------------------------------------ strategies

DEFAULT_SEARCH_STEPS = PodGroupScheduling().search_steps

CPU = st.sampled_from([250, 500, 1000, 1500, 2000])
MEM = st.sampled_from([256, 512, 1024, 2048])
PRIO = st.sampled_from([None, None, "low", "mid", "high"])
DEADLINE = st.sampled_from([None, None, 100, 600])
KEYS = ["zone", "rack", "nope"]  # no node has "nope"
# The search budget (searchSteps): the default, none, and budgets small
# enough to run out in these worlds (the invariants hold whatever it is).
SEARCH_STEPS = st.sampled_from([2000, 2000, 2000, 0, 3, 6, 10, 14, 20, 30])


@st.composite
def node_list(draw: st.DrawFn, lo: int = 2, hi: int = 5) -> list[Node]:
    out = []
    for i in range(draw(st.integers(lo, hi))):
        zone = draw(st.sampled_from(["z0", "z1"]))
        rack = draw(st.sampled_from([None, "r0", "r1"]))
        labels = (("zone", zone),) + ((("rack", f"{zone}-{rack}"),) if rack else ())
        cpu = draw(st.sampled_from([1000, 2000, 3000, 4000]))
        memory = draw(st.sampled_from([1024, 2048, 4096]))
        pods = draw(st.sampled_from([8, 8, 8, 2, 3]))
        out.append(Node(f"n{i}", cpu, memory, pods, labels))
    return out


@st.composite
def running_units(
    draw: st.DrawFn, nodes: list[Node], most: int = 5, apps: bool = True, prio: st.SearchStrategy[str | None] = PRIO
) -> tuple[list[Pod], list[Group]]:
    """Lone pods and gangs running on the nodes, each placed first fit
    from a random node (skipped where it does not fit)."""
    free = {n.name: [n.cpu, n.memory, n.pods] for n in nodes}
    pods: list[Pod] = []
    groups: list[Group] = []
    for u in range(draw(st.integers(0, most))):
        size = draw(st.sampled_from([1, 1, 1, 2, 3]))
        cpu, mem = draw(CPU), draw(MEM)
        cls, deadline = draw(prio), draw(DEADLINE)
        app = draw(st.sampled_from([None, "a", "b"])) if apps else None
        start = draw(st.integers(0, len(nodes) - 1))
        order = nodes[start:] + nodes[:start]
        spots: list[str] = []
        for _ in range(size):
            where = next(
                (n.name for n in order if free[n.name][0] >= cpu and free[n.name][1] >= mem and free[n.name][2]), None
            )
            if where is None:
                break
            free[where][0] -= cpu
            free[where][1] -= mem
            free[where][2] -= 1
            spots.append(where)
        if len(spots) < size:
            for where in spots:
                free[where][0] += cpu
                free[where][1] += mem
                free[where][2] += 1
            continue
        group = f"run{u}" if size > 1 else None
        if group:
            groups.append(Group(group, size))  # a gang: taken whole
        for k, where in enumerate(spots):
            pods.append(Pod(f"run{u}-{k}", cpu, mem, group, where, cls, deadline, app))
    return pods, groups


@st.composite
def flat_gang(draw: st.DrawFn, name: str, affinity: bool = True) -> tuple[Group, list[Pod]]:
    n = draw(st.integers(1, 5))
    min_count = draw(st.integers(1, n))
    shapes = [(draw(CPU), draw(MEM))] * n if draw(st.booleans()) else [(draw(CPU), draw(MEM)) for _ in range(n)]
    pod_class, group_class = draw(PRIO), draw(PRIO)
    key = draw(st.sampled_from([None, None, None, "zone", "rack"]))
    zone_in = draw(st.sampled_from([None, None, None, "z0", "z1"])) if affinity else None
    anti = (
        draw(st.sampled_from([None, None, None, ("a", HOSTNAME), ("a", "zone"), (name, HOSTNAME)]))
        if affinity
        else None
    )
    deadline = draw(DEADLINE)
    pods = [
        Pod(f"{name}-{i}", cpu, mem, name, None, pod_class, deadline, app=name, zone_in=zone_in, anti=anti)
        for i, (cpu, mem) in enumerate(shapes)
    ]
    return Group(name, min_count, key=key, priority_class=group_class), pods


# ------------------------------------------------------------- helpers


def preemptor_names(text: str, flat: str, tree: str) -> str:
    """The one difference allowed between a flat gang's messages and its
    tree's: the preemptor's name (DefaultPreemption's "the tree" is "the
    gang" of a PodGroup)."""
    # The tree of one says which of its one child failed before the child's
    # own words (a trial's reason whose search ran out of budget).
    wrapper = "needs 1 of 1 group(s), 0 feasible: g: "
    return text.replace(tree, flat).replace("the tree ", "the gang ").replace(f"{flat}: {wrapper}", f"{flat}: ")


def api_nominations(run: Run) -> dict[str, str]:
    """status.nominatedNodeName as the scheduler last wrote it, of the pods still waiting."""
    return {
        name_of(uid): node
        for uid, node in run.recorder.nominated.items()
        if node and uid not in run.placed and uid not in run.preemption.by
    }


def outcome(run: Run, pods: Sequence[str], flat: str = "", tree: str = "") -> dict[str, Any]:
    wanted = set(pods)
    return {
        "placement": {k: v for k, v in run.placed_nodes().items() if k in wanted},
        "victims": sorted(run.victims()),
        "nominations": run.nominations(),
        "api": api_nominations(run),
        "messages": {k: preemptor_names(v, flat, tree) for k, v in run.messages().items() if k in wanted},
    }


def tag(run: Run) -> None:
    """What kind of case this was, for --hypothesis-show-statistics."""
    event(f"victims: {bool(run.preemption.by)}")
    event(f"nominated at the end: {bool(run.sched.nominated)}")
    event(f"placed: {bool(run.placed)}")


# ===================================================== 1. differential


def tree_of_one(
    nodes: list[Node], others: list[Group], running: list[Pod], g: Group, pods: list[Pod], keep: bool
) -> tuple[World, World, list[str]]:
    """The flat gang `g` and the tree {root -> g}: the root (gang,
    minGroupCount 1, no topology) has g's priorityClassName, and g keeps
    it (`keep`) or leaves it to the root; both are valid trees."""
    flat = World(nodes, [*others, g], [], [*running, *pods])
    root = Composite("root", 1, priority_class=g.priority_class)
    leaf = replace(g, parent="root", priority_class=g.priority_class if keep else None)
    tree = World(nodes, [*others, leaf], [root], [*running, *pods])
    return flat, tree, [p.name for p in pods]


@st.composite
def differential_case(draw: st.DrawFn) -> tuple[World, World, list[str]]:
    nodes = draw(node_list(2, 5))
    running, run_groups = draw(running_units(nodes))
    g, pods = draw(flat_gang("g"))
    return tree_of_one(nodes, run_groups, running, g, pods, keep=draw(st.booleans()))


def _z(zone: str, rack: str | None = None) -> tuple[tuple[str, str], ...]:
    """A node's zone and rack labels."""
    return (("zone", zone),) + ((("rack", rack),) if rack else ())


Z0 = _z("z0")
# Issue 44's cases 2, 3 and 4 (each fails on the main of the issue):
# the root's priority 1000 over a leaf with none, against a pod of 0; a pod
# whose anti-affinity (zone) only the 1-CPU pod's eviction can satisfy, a
# 4-CPU pod on the other node of the zone; a gang of 4 that one big victim
# or four small ones make room for.
ROOT_PRIORITY = tree_of_one(
    [Node("n0", 2000, 2048, 8, Z0)], [], [Pod("run", 2000, 256, node="n0")],
    Group("g", 1, priority_class="high"), [Pod("g-0", 1000, 256, "g")], keep=False,
)  # fmt: skip
USELESS_EVICTION = tree_of_one(
    [Node("n1", 4000, 4096, 8, Z0), Node("n2", 4000, 4096, 8, Z0)], [],
    [Pod("big", 4000, 256, node="n1"), Pod("small", 1000, 256, node="n2", app="a")],
    Group("g", 1, priority_class="high"), [Pod("g-0", 1000, 256, "g", anti=("a", "zone"))], keep=True,
)  # fmt: skip
FOUR_FOR_ONE = tree_of_one(
    [Node("n0", 4000, 4096, 8, Z0), Node("n1", 4000, 4096, 8, Z0)], [],
    [*(Pod(f"small{i}", 1000, 256, node="n0") for i in range(4)), Pod("big", 4000, 256, node="n1")],
    Group("g", 4, priority_class="high"), [Pod(f"g-{i}", 1000, 256, "g") for i in range(4)], keep=True,
)  # fmt: skip


# Found by the differential (fails on 201c9cb): a gang of 5 (minCount 4)
# whose pods repel each other by hostname, on 3 nodes. Its preemption trial's
# search runs out of budget: the tree said so ("with every running pod gone,
# ...; search budget spent ..."), the flat gang "4 pod(s) do not fit", which
# it did not know.
ANTI_FOUR = tree_of_one(
    [Node(f"n{i}", 1000, 1024, 8, Z0) for i in range(3)], [], [], Group("g", 4),
    [Pod(f"g-{i}", 250, 512 if i == 4 else 256, "g", app="g", anti=("g", "kubernetes.io/hostname")) for i in range(5)],
    keep=False,
)  # fmt: skip


# Found by the differential at a random seed (fails on 201c9cb): a gang
# of one pod (one rack) whose anti-affinity only run0-0's end satisfies; it
# starves and reserves. The tree's trial chose the rack as its cycle does
# (the best scored), the flat gang's the first that held it: two nodes.
RESERVED_BY_SCORE = tree_of_one(
    [Node("n0", 1000, 2048, 8, _z("z0", "z0-r0")), Node("n1", 1000, 1024, 8, _z("z0", "z0-r1")),
     Node("n2", 1000, 1024, 8, Z0)],
    [], [Pod("run0-0", 250, 256, node="n0", app="a")], Group("g", 1, key="rack"),
    [Pod("g-0", 250, 256, "g", app="g", anti=("a", "zone"))], keep=False,
)  # fmt: skip


# ANTI_FOUR in one zone (found by the differential at a random seed once
# ANTI_FOUR was fixed): no placement holds the gang, and the flat trial put
# Permit's count before what its cycle says ("no zone domain fits ...").
ANTI_FOUR_ZONE = tree_of_one(ANTI_FOUR[0].nodes, [], [], Group("g", 4, key="zone"), list(ANTI_FOUR[0].pods), keep=False)


@sized(800)
@given(differential_case())
@example(ANTI_FOUR_ZONE)
@example(RESERVED_BY_SCORE)
@example(ANTI_FOUR)
@example(ROOT_PRIORITY)
@example(USELESS_EVICTION)
@example(FOUR_FOR_ONE)
def test_a_flat_gang_and_its_tree_of_one_decide_the_same(case: tuple[World, World, list[str]]) -> None:
    flat_world, tree_world, pods = case
    config = property_config()
    flat = run_world(flat_world, config)
    tree = run_world(tree_world, config)
    assert not internal_errors(flat.decisions + tree.decisions)
    tag(flat)
    want = outcome(flat, pods)
    got = outcome(tree, pods, flat=f"PodGroup {NS}/g", tree=f"CompositePodGroup {NS}/root")
    for what in want:
        if not on(what):
            continue
        assert got[what] == want[what], (
            f"{what}: the tree {{root -> g}} differs from the flat gang g\n"
            f"flat: {want[what]}\ntree: {got[what]}\n{describe(tree_world)}"
        )


@st.composite
def two_gangs_case(draw: st.DrawFn) -> World:
    """G1 and G2 under `root` (gang, minGroupCount 2); sometimes `root` is
    itself a child of a basic `top` beside a one-pod gang z, so that `top`
    holds whatever becomes of `root` (a root that fails binds nothing
    anyway; a CompositePodGroup below a feasible one must undo itself)."""
    nodes = draw(node_list(2, 5))
    running, run_groups = draw(running_units(nodes))
    g1, pods1 = draw(flat_gang("g1"))
    g2, pods2 = draw(flat_gang("g2"))
    tree_class = draw(PRIO)
    key = draw(st.sampled_from([None, None, "zone", "rack"]))
    composites = [Composite("root", 2, key=key, priority_class=tree_class)]
    groups = [
        replace(g, parent="root", priority_class=tree_class if tree_class and draw(st.booleans()) else None)
        for g in (g1, g2)
    ]
    pods = [*pods1, *pods2]
    if draw(st.booleans()):
        composites = [Composite("top", None, priority_class=tree_class), replace(composites[0], parent="top")]
        groups.append(Group("z", 1, "top"))
        pods.append(Pod("z-0", 250, 256, "z"))
    return World(nodes, [*run_groups, *groups], composites, [*running, *pods])


# Issue 44's case 1 with two gangs (fails on the main of the issue): root
# (minGroupCount 2, one rack) under top, beside z. In either rack g1 first
# leaves g2 no room and g2 first places both; searchSteps 6 pays for those
# two tries, not for placing root again in the rack it chose, and the
# first order, not undone, bound g1 alone.
TWO_GANGS_BUDGET = World(
    [Node("n1a", 1000, 2048, 8, _z("z0", "r1")), Node("n1b", 2000, 2048, 8, _z("z0", "r1")),
     Node("n2a", 1000, 2048, 8, _z("z0", "r2")), Node("n2b", 2000, 2048, 8, _z("z0", "r2")),
     Node("o", 1000, 2048, 8, _z("z1"))],
    [Group("g1", 1, "root"), Group("g2", 1, "root"), Group("z", 1, "top")],
    [Composite("top", None), Composite("root", 2, "top", "rack")],
    [Pod("g1-0", 1000, 256, "g1"), Pod("g1-1", 1000, 256, "g1"), Pod("g2-0", 2000, 256, "g2"),
     Pod("z-0", 250, 256, "z", zone_in="z1")],
)  # fmt: skip


@sized(400)
@given(two_gangs_case(), SEARCH_STEPS)
@example(TWO_GANGS_BUDGET, 6)
def test_two_gangs_under_a_root_of_two_bind_both_or_neither(world: World, search_steps: int) -> None:
    def both_or_neither(run: Run, decision: GroupDecision) -> None:
        placed = {name_of(uid) for uid in run.placed}
        view = TreeView(
            world, {g.name for g in world.groups}, {c.name for c in world.composites}, current_placement(run)
        )
        bound = [g for g in ("g1", "g2") if any(p.group == g and p.name in placed for p in world.pods)]
        if bound:
            short = [g for g in ("g1", "g2") if not view.leaf_ok(g)]
            assert not short, f"bound {bound} while {short} is below minCount: {placed}\n{describe(world)}"

    run = run_world(world, property_config(search_steps), both_or_neither)
    assert not internal_errors(run.decisions)
    tag(run)


def current_placement(run: Run) -> dict[str, str]:
    """Every pod bound or assumed now (running before included), by name."""
    out = {}
    for uid in run.sched.cache.pods:
        node = run.sched.cache.placed_node(uid)
        if node:
            out[name_of(uid)] = node
    return out


# ====================================================== 2. invariants


@st.composite
def tree_world(draw: st.DrawFn) -> World:
    """1 to 3 trees (depth <= 4, PodGroups at the bottom) on a cluster with
    units running (lone pods and gangs, mostly of low priority, some with
    deadlines; sometimes a tree of its own root's priority), and a lone pod
    or two waiting beside the trees."""
    nodes = draw(node_list(2, 6))
    low = st.sampled_from([None, None, "low", "low", "mid", "high"])
    running, groups = draw(running_units(nodes, most=6, apps=False, prio=low))
    composites: list[Composite] = []
    pods = list(running)
    budget = [draw(st.integers(2, 10))]  # pending tree pods, all trees together

    def leaf(name: str, parent: str, root_class: str | None) -> None:
        size = min(draw(st.integers(0, 3)), budget[0])
        budget[0] -= size
        min_count = draw(st.one_of(st.none(), st.integers(1, max(size, 1))))
        key = draw(st.sampled_from([None, None, None, None, *KEYS]))
        cls = root_class if root_class and draw(st.booleans()) else None  # the root's, or none: both valid
        groups.append(Group(name, min_count, parent, key, cls))
        shape = (draw(CPU), draw(MEM))
        for i in range(size):
            cpu, mem = shape if draw(st.booleans()) else (draw(CPU), draw(MEM))
            own = draw(st.sampled_from([None, None, None, "low", "high"]))
            pods.append(Pod(f"{name}-{i}", cpu, mem, name, None, own, draw(DEADLINE)))

    def composite(name: str, parent: str | None, depth: int, root_class: str | None) -> None:
        kids = draw(st.integers(1, 3))
        for j in range(kids):
            child = f"{name}{'abc'[j]}"
            if depth < 3 and draw(st.integers(0, 2)) == 0:
                composite(child, name, depth + 1, root_class)
            else:
                leaf(child, name, root_class)
        min_groups = draw(st.one_of(st.none(), st.integers(1, kids)))
        key = draw(st.sampled_from([None, None, *KEYS]))
        cls = root_class if parent is None else (root_class if root_class and draw(st.booleans()) else None)
        composites.append(Composite(name, min_groups, parent, key, cls))

    for t in range(draw(st.integers(1, 3))):
        composite(f"t{t}", None, 1, draw(st.sampled_from([None, "low", "mid", "mid", "high"])))
    if draw(st.booleans()):  # a tree that runs already, of its root's priority
        free = {n.name: [n.cpu, n.memory, n.pods] for n in nodes}
        for p in running:
            assert p.node is not None
            free[p.node][0] -= p.cpu
            free[p.node][1] -= p.memory
            free[p.node][2] -= 1
        cpu, mem = draw(CPU), draw(MEM)
        spots = [n for n, f in free.items() if f[0] >= cpu and f[1] >= mem and f[2] >= 1][:2]
        if spots:
            composites.append(Composite("rt", len(spots), priority_class=draw(PRIO)))
            for i, where in enumerate(spots):
                groups.append(Group(f"rt{i}", 1, "rt"))
                pods.append(Pod(f"rt{i}-0", cpu, mem, f"rt{i}", where, None, draw(DEADLINE)))
    for i in range(draw(st.integers(0, 2))):
        pods.append(Pod(f"lone{i}", draw(CPU), draw(MEM), None, None, draw(PRIO), draw(DEADLINE)))
    return World(nodes, groups, composites, pods)


EVENT = st.tuples(st.integers(1, 4), st.sampled_from(["pod", "podgroup", "composite", "failover"]), st.integers(0, 99))
EVENTS = st.integers(0, 3).flatmap(lambda n: st.lists(EVENT, min_size=n, max_size=n))


@dataclass
class Watch:
    """The invariants, checked after every decision and every round of one
    world, across deletions and failovers."""

    world: World
    run: Run
    alive_groups: set[str]
    alive_composites: set[str]
    gone_pods: set[str] = field(default_factory=set)  # deleted by the test
    evicted: set[str] = field(default_factory=set)  # deleted as victims (any run)
    bound: set[str] = field(default_factory=set)  # pods bound by troupe (any run)
    round: int = 0
    confirmed: dict[str, int] = field(default_factory=dict)  # nominated pod -> last round a decision nominated it
    event_after: int = -1  # the last round after which objects were deleted or the scheduler failed over
    api: dict[str, str] = field(default_factory=dict)  # nominatedNodeName written before the last failover
    overlaps: set[tuple[str, str]] = field(default_factory=set)  # reservations on one room, at the last round's end
    log: list[str] = field(default_factory=list)
    # podGroupScheduling.searchSteps: "needed" is judged at the default
    # budget (a smaller one may stop a reprieve's trial, which no message
    # says), "settled" wherever the search is on and its unit does not say
    # its budget was spent (0 is upstream's one order: it finds what it finds).
    search_steps: int = DEFAULT_SEARCH_STEPS

    def fail(self, what: str) -> AssertionError:
        """The violation, to be raised where it is found (hypothesis tells
        failures apart by where they are raised, and shrinks each)."""
        return AssertionError(f"round {self.round}: {what}\nevents: {self.log}\n{describe(self.world)}")

    # ----------------------------------------------------- the world now

    def placement(self) -> dict[str, str]:
        return current_placement(self.run)

    def unit_prio(self, pods: Sequence[Pod]) -> int:
        """The priority of these pods taken together, as the objects stand now."""
        return unit_priority(self.world, pods, self.alive_groups, self.alive_composites)

    def unit_priority(self, unit: str) -> int:
        """A unit's priority: of all its pods still there, placed ones too
        (a tree or PodGroup that says none: its highest pod's)."""
        gone = self.gone_pods | self.evicted
        return self.unit_prio([p for p in self.world.pods if p.name not in gone and self.unit_of(p.name) == unit])

    def view(self) -> TreeView:
        return TreeView(self.world, self.alive_groups, self.alive_composites, self.placement())

    def pending(self) -> set[str]:
        placed = self.placement()
        return {p.name for p in self.world.pods if p.name not in placed and p.name not in self.evicted | self.gone_pods}

    def unit_of(self, name: str) -> str:
        """The unit a pod waits in: its tree's root, its PodGroup, or itself."""
        pod = self.world.pod(name)
        return f"pod {name}" if pod.group is None else self.unit_of_group(pod.group)

    # -------------------------------------------------- after a decision

    def decided(self, run: Run, decision: GroupDecision) -> None:
        errors = internal_errors([decision])
        if errors:  # never skipped
            raise self.fail(f"the core raised: {errors}")
        for pod, _ in decision.unplaced:
            if decision.nominations.get(pod.uid):
                self.confirmed[name_of(pod.uid)] = self.round
        self.bound |= {name_of(a.pod.uid) for a in decision.assignments}
        self.evicted |= {name_of(v.uid) for v in decision.victims}
        if on("whole"):
            self.whole_or_nothing(decision)
        over = overcommitted(self.world, self.placement())
        if over and on("overcommit"):
            raise self.fail(f"overcommitted: {over}")
        if decision.victims:
            self.victims(decision)

    def whole_or_nothing(self, decision: GroupDecision) -> None:
        view = self.view()
        for group in sorted({a.pod.group.name for a in decision.assignments if a.pod.group is not None}):
            g = self.world.group(group)
            assert g is not None
            if group not in self.alive_groups:
                raise self.fail(f"pods of PodGroup {group} bound after it was deleted (they wait for it)")
            if not view.leaf_ok(group):
                raise self.fail(f"PodGroup {group} bound below its minCount ({g.min_count})")
            chain = view.parent_chain(group)
            if chain is None:
                raise self.fail(f"PodGroup {group} bound while a CompositePodGroup above it is deleted")
            short = [c for c in chain or () if not view.composite_ok(c)]
            if short:
                raise self.fail(f"PodGroup {group} bound while {short} above it are below minGroupCount")

    def preemptor_tree(self, decision: GroupDecision, pending: set[str]) -> OLeaf | OComposite | None:
        if decision.tree is not None:
            root = decision.tree.root.name
            if root not in self.alive_composites:
                return None
            return oracle_tree(self.world, root, pending, self.placement(), self.alive_groups, self.alive_composites)
        names = [name_of(p.uid) for p, _ in decision.unplaced]
        return self.flat_unit(decision.group_key.name if decision.group_key is not None else None, names, pending)

    def victims(self, decision: GroupDecision) -> None:
        """Lower priority; useful (the preemptor fits once they are gone);
        each pod evicted on its own needed (with it back, the preemptor
        would not fit, other units' nominated room held)."""
        preemptor = [self.world.pod(name_of(p.uid)) for p, _ in decision.unplaced]
        mine = {p.name for p in preemptor}
        unit = self.unit_of(next(iter(mine)))
        wanted = self.unit_priority(unit)
        victims = [replace(self.world.pod(name_of(v.uid)), node=v.node_name) for v in decision.victims]
        event(f"preemptor: {'tree' if decision.tree is not None else 'PodGroup' if decision.group_key else 'pod'}")
        high = [(v.name, self.unit_prio([v])) for v in victims if self.unit_prio([v]) >= wanted]
        if high and on("priority"):
            raise self.fail(f"{decision.preemptor} (priority {wanted}) evicts {high} of no lower priority")
        tree = self.preemptor_tree(decision, self.pending())
        if tree is None:
            return
        placed = self.placement()
        try:
            if on("useful") and Oracle(free_room(self.world, placed), labels_of(self.world)).fits(tree) is None:
                raise self.fail(
                    f"{decision.preemptor} evicts {[v.name for v in victims]} and still does not fit: "
                    f"{decision.preemption_message}"
                )
            if self.started(unit):
                # Placed whole already, its other pods wait: they preempt
                # for themselves (as a basic group's pods), not for the
                # tree's minimum; which of their victims were needed is not
                # the oracle's question.
                return
            whole = {k.name for k in decision.victim_groups}
            held = [
                replace(self.world.pod(name), node=node)
                for name, node in self.run.nominations().items()
                if name not in mine and name in self.world_pods()
            ]
            for v in victims:
                if v.group is not None and ({v.group, *(self.view().parent_chain(v.group) or ())} & whole):
                    continue  # a whole group or tree: its pods go together
                assert v.node is not None
                staying = {**placed, v.name: v.node}
                found = Oracle(free_room(self.world, staying, held), labels_of(self.world)).fits(tree)
                if found is not None and on("needed") and self.search_steps >= DEFAULT_SEARCH_STEPS:
                    raise self.fail(
                        f"{decision.preemptor} evicts {v.name} (of {[x.name for x in victims]}), not needed: "
                        f"with it running the tree fits: {found} (nodes by index)"
                    )
        except OracleBudget:
            event("oracle gave up on a victim check")

    def world_pods(self) -> set[str]:
        return {p.name for p in self.world.pods}

    # ---------------------------------------------------- after a round

    def round_over(self) -> None:
        nominated = self.run.nominations()
        for name in nominated:
            last = self.confirmed.get(name, -1)
            late = last < self.round - 1 or (self.event_after == self.round - 1 and last < self.round)
            if late and on("nominations"):
                raise self.fail(
                    f"{name} ({self.unit_of(name)}) is still nominated to {nominated[name]}, last nominated "
                    f"by a cycle in round {last}; deletions or a failover after round {self.event_after}"
                )
        api = {**self.api, **{name_of(u): n for u, n in self.run.recorder.nominated.items()}}
        for name in self.pending():
            if api.get(name, "") != nominated.get(name, "") and on("api"):
                raise self.fail(
                    f"{name}: nominatedNodeName {api.get(name)!r}, but troupe holds {nominated.get(name)!r}"
                )
        self.one_room(nominated)

    def one_room(self, nominated: Mapping[str, str]) -> None:
        """No two units' nominations on room that cannot hold both: their
        pods and what stays on the node (what no reservation waits for, nor
        any pod with a deadline) within its allocatable."""
        may_end = {p.name for p in self.world.pods if p.deadline is not None}
        for fwk in self.run.sched.frameworks.values():
            for plugin in fwk.post_filter:
                for held in (getattr(plugin, "_held", None) or {}).values():
                    may_end |= {name_of(u) for u in getattr(held, "waiting", None) or ()}
        placed = self.placement()
        overlaps: set[tuple[str, str]] = set()
        for node in self.world.nodes:
            here = [n for n, where in nominated.items() if where == node.name]
            units = sorted({self.unit_of(n) for n in here})
            if len(units) < 2:
                continue
            stays = {n: w for n, w in placed.items() if w == node.name and n not in may_end}
            held = [replace(self.world.pod(n), node=node.name) for n in here]
            room = free_room(replace(self.world, nodes=[node]), stays, held)[0]
            if min(room) >= 0:
                continue
            prios = {u: self.unit_priority(u) for u in units}
            pair = (units[0], units[1])
            if (len(set(prios.values())) == 1 or pair in self.overlaps) and on("overlap"):
                raise self.fail(f"node {node.name}: nominated pods of {units} (priorities {prios}) overlap: {here}")
            overlaps.add(pair)
        self.overlaps = overlaps

    def settled(self) -> None:
        """Nothing changes any more: no unit waits with nothing under way
        (no nomination) while it would fit with every running pod of lower
        priority gone (other units' nominated room of no lower priority
        held): it should have preempted (issue 44, 2 and 3: a tree that
        does not preempt, or a livelock after a useless eviction)."""
        placed = self.placement()
        pending = self.pending()
        nominated = self.run.nominations()
        units: dict[str, list[str]] = {}
        for name in pending:
            units.setdefault(self.unit_of(name), []).append(name)
        for unit, names in sorted(units.items()):
            if any(n in nominated for n in names) or not unit.startswith(("tree ", "PodGroup ", "pod ")):
                continue
            if not self.search_steps or any(SEARCH_BUDGET_SPENT in self.run.messages().get(n, "") for n in names):
                continue  # not asked to search, or said it stopped searching: not known to fit
            mine = [self.world.pod(n) for n in names]
            if any(p.zone_in or p.anti for p in mine):
                continue  # the oracle knows resources and topology keys only
            if self.started(unit):
                continue  # placed in part already: what its other pods may preempt for is not this check's
            prio = self.unit_priority(unit)
            # What stays: every pod of a unit of no lower priority (a unit is evicted whole or not at all,
            # and only if it and all its pods are below); what is held: others' nominations of such units.
            staying = {n: w for n, w in placed.items() if self.unit_priority(self.unit_of(n)) >= prio}
            held = [
                replace(self.world.pod(n), node=w)
                for n, w in nominated.items()
                if self.unit_of(n) != unit and self.unit_priority(self.unit_of(n)) >= prio
            ]
            kind, _, who = unit.partition(" ")
            if kind == "tree":
                tree: OLeaf | OComposite = oracle_tree(
                    self.world, who, pending, placed, self.alive_groups, self.alive_composites
                )
            else:
                tree = self.flat_unit(who if kind == "PodGroup" else None, names, pending)
            try:
                found = Oracle(free_room(self.world, staying, held), labels_of(self.world)).fits(tree)
            except OracleBudget:
                event("oracle gave up on a waiting unit")
                continue
            if found is not None and on("settled"):
                messages = {n: self.run.messages().get(n, "") for n in names}
                raise self.fail(
                    f"{unit} (priority {prio}) waits with nothing under way, but fits with every running pod of "
                    f"lower priority gone: {found} (nodes by index); its pods say {messages}"
                )

    def started(self, unit: str) -> bool:
        """Some pod of the unit is placed (or was evicted: it ran)."""
        placed = set(self.placement()) | self.evicted
        return any(p.name in placed for p in self.world.pods if p.group and self.unit_of_group(p.group) == unit)

    def unit_of_group(self, group: str) -> str:
        if group not in self.alive_groups:
            return f"gone PodGroup {group}"
        chain = TreeView(self.world, self.alive_groups, self.alive_composites, {}).parent_chain(group)
        if chain is None:
            return f"broken tree of {group}"
        return f"tree {chain[-1]}" if chain else f"PodGroup {group}"

    def flat_unit(self, group: str | None, names: Sequence[str], pending: set[str]) -> OLeaf:
        placed = self.placement()
        rows = {n.name: i for i, n in enumerate(self.world.nodes)}
        if group is None:
            pod = self.world.pod(names[0])
            return OLeaf(pod.name, 1, None, [(pod.name, pod.cpu, pod.memory)])
        g = self.world.group(group)
        assert g is not None
        members = [p for p in self.world.pods if p.group == g.name]
        return OLeaf(
            g.name,
            g.min_count,
            g.key,
            [(p.name, p.cpu, p.memory) for p in members if p.name in pending],
            [rows[placed[p.name]] for p in members if p.name in placed],
        )

    # ------------------------------------------------------ between rounds

    def apply(self, kind: str, target: int | str) -> None:
        """Delete a pod, a PodGroup or a CompositePodGroup below a root
        (`target`: its name, or an index into those that exist), or fail over."""
        sched = self.run.sched
        if kind == "failover":
            self.failover()
            return
        if kind == "pod":
            names = sorted(self.pending() | {n for n in self.placement() if n in self.world_pods()})
        elif kind == "podgroup":
            names = sorted(self.alive_groups)
        else:
            names = sorted(c.name for c in self.world.composites if c.parent and c.name in self.alive_composites)
        if isinstance(target, str):
            names = [target] if target in names else []
        if not names:
            return
        name = names[target % len(names)] if isinstance(target, int) else target
        if kind == "pod":
            self.gone_pods.add(name)
            sched.on_pod_deleted({"metadata": {"namespace": NS, "name": name, "uid": f"simulate-pod/{NS}/{name}"}})
        elif kind == "podgroup":
            self.alive_groups.discard(name)
            sched.on_podgroup_deleted(dict(self.run.groups[next(k for k in self.run.groups if k.name == name)]))
        else:
            self.alive_composites.discard(name)
            body = self.run.composite_bodies[next(k for k in self.run.composite_bodies if k.name == name)]
            sched.on_composite_deleted(dict(body))
        self.log.append(f"after round {self.round}: delete {kind} {name}")
        self.event_after = self.round

    def failover(self) -> None:
        """A fresh scheduler fed the objects as the API holds them now."""
        old = self.run
        self.api = {**self.api, **{name_of(u): n for u, n in old.recorder.nominated.items()}}
        pods = []
        for body in old.pod_bodies.values():
            name = body["metadata"]["name"]
            if name in self.gone_pods or name in self.evicted:
                continue
            body = {**body, "status": {**(body.get("status") or {})}}
            if self.api.get(name) and not body["spec"].get("nodeName"):
                body["status"]["nominatedNodeName"] = self.api[name]
            elif name in self.api:  # cleared since an earlier failover wrote it into the body
                body["status"].pop("nominatedNodeName", None)
            pods.append(body)
        docs = [
            *bodies(replace(self.world, groups=[], composites=[], pods=[])),  # PriorityClasses, Nodes
            *(b for k, b in old.composite_bodies.items() if k.name in self.alive_composites),
            *(b for k, b in old.groups.items() if k.name in self.alive_groups),
            *pods,
        ]
        self.run = Run(docs, old.sched.config, self.decided)
        self.run.start()
        self.confirmed = {}
        self.log.append(f"after round {self.round}: failover")
        self.event_after = self.round


# Issue 44's cases 1, 2 (as victim), 5 and 6 (each fails on the main of the
# issue). 1: p (basic) over r (gang, minGroupCount 2, one rack) over a
# (basic, 3 pods), b and c (gangs of 2), and z beside r; searchSteps 14:
# the re-run of r's children in its rack finds the budget spent and, not
# undone, a's pods bind under a feasible p while r is not.
BUDGET = World(
    [Node("n1", 4000, 4096, 100, _z("z0", "r1")), Node("n2", 4000, 4096, 100, _z("z0", "r2")),
     Node("other", 4000, 4096, 100, _z("z1"))],
    [Group("a", None, "r"), Group("b", 2, "r"), Group("c", 2, "r"), Group("z", 1, "p")],
    [Composite("p", None), Composite("r", 2, "p", "rack")],
    [*(Pod(f"a-{i}", 1000, 256, "a") for i in range(3)), *(Pod(f"b-{i}", 1000, 256, "b") for i in range(2)),
     *(Pod(f"c-{i}", 1000, 256, "c") for i in range(2)), Pod("z-0", 250, 256, "z", zone_in="z1")],
)  # fmt: skip
# 2: a running tree whose root has priority 1000 (high), its leaves none,
# and a waiting pod of 500 (mid) that only its eviction would let in.
TREE_VICTIM = World(
    [Node("n0", 1000, 1024, 8, _z("z0"))],
    [Group("rt0", 1, "rt")],
    [Composite("rt", 1, priority_class="high")],
    [Pod("rt0-0", 1000, 256, "rt0", "n0"), Pod("lone0", 1000, 256, priority_class="mid")],
)  # fmt: skip
# 6: a tree of two leaves that preempts (or reserves) for both, and one of
# its pods deleted: the tree goes back to its gate, every nomination of it must go.
MEMBER_DELETED = World(
    [Node("n0", 1000, 1024, 8, _z("z0")), Node("n1", 1000, 1024, 8, _z("z0"))],
    [Group("run0", 2), Group("t0a", None, "t0"), Group("t0b", None, "t0")],
    [Composite("t0", 2, priority_class="low")],
    [Pod("run0-0", 250, 1024, "run0", "n0"), Pod("run0-1", 250, 1024, "run0", "n1"),
     Pod("t0a-0", 250, 256, "t0a"), Pod("t0b-0", 250, 256, "t0b")],
)  # fmt: skip
# 5: t0 starves and reserves n0, which frees first (a pod with a 600 s
# deadline); t1's pods end (100 s) before that room frees, so t1 may
# backfill it but not reserve it again: its reservation must go elsewhere.
TWO_RESERVATIONS = World(
    [*(Node(f"n{i}", 2000, 2048, 8, _z("z0")) for i in range(4))],  # n2, n3: room for maxReservedShare
    [Group("t0a", 2, "t0"), Group("t1a", 2, "t1")],
    [Composite("t0", 1), Composite("t1", 1)],
    [Pod("run0", 2000, 256, node="n0", priority_class="high", deadline=600),
     Pod("run1", 2000, 256, node="n1", priority_class="high", deadline=3000),
     Pod("run2", 2000, 256, node="n2", priority_class="high"), Pod("run3", 2000, 256, node="n3", priority_class="high"),
     *(Pod(f"t0a-{i}", 1000, 256, "t0a") for i in range(2)),
     *(Pod(f"t1a-{i}", 1000, 256, "t1a", deadline=100) for i in range(2))],
)  # fmt: skip


# Found by the invariants with "needed" on (fails on 201c9cb, where the
# tree search tried a few child orders only): t0 (gang, minGroupCount 3)
# over t0a -> t0aa (one rack), t0b and t0c (one zone), gangs of 2 of 3 pods
# of mixed sizes. troupe evicted run1-0 though the tree fits beside it:
# t0aa and t0b-2 on n1, t0b-0 on n2, t0c on n3 and n0; no child order finds
# that, the backtracking over the tree does.
_RACK0 = _z("z1", "z1-r0")
NOT_NEEDED = World(
    [Node("n0", 1000, 2048, 2, Z0), Node("n1", 2000, 4096, 8, _RACK0), Node("n2", 4000, 2048, 3, _RACK0),
     Node("n3", 1000, 4096, 2, Z0)],
    [Group("t0aa", 2, "t0a", priority_class="mid"), Group("t0b", 2, "t0", priority_class="mid"),
     Group("t0c", 2, "t0", "zone")],
    [Composite("t0a", None, "t0", "rack"), Composite("t0", 3, priority_class="mid")],
    [Pod("run0-0", 1000, 1024, node="n2", deadline=600), Pod("run1-0", 500, 256, node="n1", deadline=100),
     Pod("run2-0", 2000, 512, node="n2", priority_class="mid"), Pod("run3-0", 1500, 512, node="n1"),
     Pod("run4-0", 250, 2048, node="n3"),
     Pod("t0aa-0", 500, 256, "t0aa"), Pod("t0aa-1", 500, 256, "t0aa"), Pod("t0b-0", 1500, 1024, "t0b"),
     Pod("t0b-1", 2000, 512, "t0b"), Pod("t0b-2", 250, 512, "t0b"), Pod("t0c-0", 2000, 256, "t0c"),
     Pod("t0c-1", 500, 1024, "t0c"), Pod("t0c-2", 1000, 1024, "t0c")],
)  # fmt: skip


# Found by the invariants (fails on 201c9cb): units whose groups set no
# priority (their highest pod's, 100: "low") both starve on n1, behind a
# pod that never ends; the second reserved room the first held, because its
# nominated pods were compared one by one (two of priority 0), not as the
# unit of priority 100 they are. As two trees and as two flat gangs.
def _mixed_priorities(tree: bool) -> World:
    first, second = ("t0aa", "t1a") if tree else ("a", "b")
    groups = [
        Group(first, None if tree else 3, "t0a" if tree else None),
        Group(second, None if tree else 2, "t1" if tree else None),
    ]
    if tree:
        groups += [Group("t0aba", None, "t0ab"), Group("t0ac", None, "t0a")]
    composites = (
        [
            Composite("t0ab", None, "t0a"),
            Composite("t0a", None, "t0"),
            Composite("t0", None),
            Composite("t1", None, priority_class="low"),
        ]
        if tree
        else []
    )
    third = (
        Pod("t0aba-0", 250, 256, "t0aba", priority_class="low")
        if tree
        else Pod(f"{first}-2", 250, 256, first, priority_class="low")
    )
    return World(
        [Node("n0", 2000, 1024, 2, Z0), Node("n1", 1000, 2048, 8, Z0)], groups, composites,
        [Pod("run0-0", 250, 256, node="n0", priority_class="low"),
         Pod("run1-0", 250, 256, node="n0", priority_class="low"),
         Pod("run2-0", 250, 2048, node="n1", priority_class="low"),
         Pod(f"{first}-0", 250, 256, first), Pod(f"{first}-1", 250, 256, first), third,
         Pod(f"{second}-0", 250, 256, second, priority_class=None if tree else "low"),
         Pod(f"{second}-1", 250, 256, second, priority_class=None if tree else "low")],
    )  # fmt: skip


# Found by the invariants at a random seed: a failover, a deletion that
# lets the tree's reserved room go, another failover. The second scheduler
# read the nominatedNodeName the first failover had written into the pod,
# not the clearing write since (the harness's API, not troupe, was wrong).
CLEARED_BETWEEN_FAILOVERS = World(
    [Node("n0", 1000, 1024, 8, Z0), Node("n1", 1000, 1024, 8, Z0)],
    [Group("t0aaa", None, "t0aa"), Group("t0aab", None, "t0aa"), Group("t0aac", None, "t0aa"),
     Group("t0ab", None, "t0a"), Group("t0aca", None, "t0ac"), Group("t0baa", None, "t0ba"),
     Group("t1aaa", None, "t1aa")],
    [Composite("t0aa", None, "t0a"), Composite("t0ac", None, "t0a"), Composite("t0a", None, "t0"),
     Composite("t0ba", None, "t0b"), Composite("t0b", None, "t0"), Composite("t0", None),
     Composite("t1aa", None, "t1a"), Composite("t1a", None, "t1"), Composite("t1", None)],
    [Pod("t0aab-0", 250, 256, "t0aab"), Pod("t0aab-1", 250, 256, "t0aab"), Pod("t0aca-0", 1000, 256, "t0aca"),
     Pod("t1aaa-0", 250, 256, "t1aaa")],
)  # fmt: skip


@sized(700)
@given(tree_world(), EVENTS, SEARCH_STEPS)
@example(CLEARED_BETWEEN_FAILOVERS, [(3, "failover", 0), (3, "pod", 0), (3, "failover", 0)], 2000)
@example(_mixed_priorities(tree=True), [], 2000)
@example(_mixed_priorities(tree=False), [], 2000)
@example(NOT_NEEDED, [], 2000)
@example(BUDGET, [], 14)
@example(TREE_VICTIM, [], 2000)
@example(MEMBER_DELETED, [(2, "pod", "t0a-0")], 2000)
@example(TWO_RESERVATIONS, [], 2000)
def test_trees_stay_whole_and_hold_no_room_for_nobody(
    world: World, events: list[tuple[int, str, int | str]], search_steps: int
) -> None:
    watch_world(world, events, search_steps)


def watch_world(world: World, events: list[tuple[int, str, int | str]], search_steps: int) -> None:
    config = property_config(search_steps)
    watch = Watch(world, Run(bodies(world), config), {g.name for g in world.groups}, {c.name for c in world.composites})
    watch.search_steps = search_steps
    watch.run.hook = watch.decided
    watch.run.start()
    last = max((after for after, _, _ in events), default=0)
    before = None
    for k in range(1, last + 2 * len(world.pods) + 8):
        watch.round = k
        watch.run.round()
        watch.round_over()
        for after, kind, index in events:
            if after == k:
                watch.apply(kind, index)
        now = watch.run.state()
        if k > last and now == before:
            break
        before = now
    watch.settled()
    tag(watch.run)
    event(f"events: {len(events)}")


# ========================================================== 3. oracle


@st.composite
def small_tree_world(draw: st.DrawFn) -> World:
    """One tree on at most 6 nodes with at most 8 pods waiting, and lone
    pods running that stay (priority 0, as the tree's: not victims)."""
    nodes = draw(node_list(1, 6))
    running, _ = draw(running_units(nodes, most=3, apps=False, prio=st.just(None)))
    running = [replace(p, deadline=None) for p in running if p.group is None]
    groups: list[Group] = []
    composites: list[Composite] = []
    pods = list(running)
    budget = [8]

    def leaf(name: str, parent: str) -> None:
        size = min(draw(st.integers(1, 4)), budget[0])
        budget[0] -= size
        min_count = draw(st.one_of(st.none(), st.integers(1, max(size, 1))))
        key = draw(st.sampled_from([None, None, None, None, *KEYS]))
        groups.append(Group(name, min_count, parent, key))
        shape = (draw(CPU), draw(MEM))
        for i in range(size):
            cpu, mem = shape if draw(st.booleans()) else (draw(CPU), draw(MEM))
            pods.append(Pod(f"{name}-{i}", cpu, mem, name))

    def composite(name: str, parent: str | None, depth: int) -> None:
        kids = draw(st.integers(1, 3))
        for j in range(kids):
            child = f"{name}{'abc'[j]}"
            if depth < 3 and draw(st.integers(0, 2)) == 0:
                composite(child, name, depth + 1)
            else:
                leaf(child, name)
        min_groups = draw(st.one_of(st.none(), st.integers(1, kids)))
        key = draw(st.sampled_from([None, None, *KEYS]))
        composites.append(Composite(name, min_groups, parent, key))

    composite("t", None, 1)
    return World(nodes, groups, composites, pods)


def valid_placement(world: World, placed: Mapping[str, str], bound: set[str]) -> list[str]:
    """What is wrong with troupe's placement of the tree `t`, by the rules
    the oracle enumerates: room, minCount, minGroupCount at every level, one
    domain of each key."""
    problems = overcommitted(world, placed)
    groups = {g.name for g in world.groups}
    view = TreeView(world, groups, {c.name for c in world.composites}, placed)
    if not view.composite_ok("t"):
        problems.append("the root t is below its minGroupCount")
    nodes = {n.name: n for n in world.nodes}
    for g in world.groups:
        mine = [p.name for p in world.pods if p.group == g.name and p.name in bound]
        if not mine:
            continue
        if not view.leaf_ok(g.name):
            problems.append(f"{g.name} bound below minCount")
        chain = view.parent_chain(g.name) or []
        short = [c for c in chain if not view.composite_ok(c)]
        if short:
            problems.append(f"{g.name} bound under {short}, below minGroupCount")
    under: dict[str, list[str]] = {}  # each group's bound pods and its descendants'
    for g in world.groups:
        for level in [g.name, *(view.parent_chain(g.name) or [])]:
            under.setdefault(level, []).extend(p.name for p in world.pods if p.group == g.name and p.name in bound)
    keys = {g.name: g.key for g in world.groups} | {c.name: c.key for c in world.composites}
    for who, names in under.items():
        key = keys[who]
        if key and names:
            domains = {nodes[placed[n]].label(key) for n in names}
            if None in domains or len(domains) > 1:
                problems.append(f"{who}'s pods {names} are not in one {key} domain: {sorted(map(str, domains))}")
    return problems


# Found by this property (fails on the main of issue 44, and on the main
# of its fix as far as it went when this was written): one node, t (gang, minGroupCount 3) over ta
# (basic, 2 pods), tb (basic, 1 pod) and tc -> tca -> tcaa (basic, 1 pod of
# 512Mi). One pod each fits (1024Mi); in every order troupe tried, a basic
# child placed all of its pods first and left tcaa no room.
EXTRAS_FIRST = World(
    [Node("n0", 1000, 1024, 8, Z0)],
    [Group("ta", None, "t"), Group("tb", None, "t"), Group("tcaa", None, "tca")],
    [Composite("tca", None, "tc"), Composite("tc", None, "t"), Composite("t", 3)],
    [Pod("ta-0", 250, 256, "ta"), Pod("ta-1", 250, 256, "ta"), Pod("tb-0", 250, 256, "tb"),
     Pod("tcaa-0", 250, 512, "tcaa")],
)  # fmt: skip


# NOT_NEEDED without preemption: the tree renamed t, beside the pods that
# stayed running there (fails on 201c9cb: no child order places it).
NO_ORDER_FITS = World(
    NOT_NEEDED.nodes,
    [replace(g, parent="t" if g.parent == "t0" else g.parent, priority_class=None) for g in NOT_NEEDED.groups],
    [Composite("t0a", None, "t", "rack"), Composite("t", 3)],
    [p for p in NOT_NEEDED.pods if p.name in ("run1-0", "run2-0", "run4-0") or p.group],
)


@sized(2000)
@given(small_tree_world())
@example(EXTRAS_FIRST)
@example(NO_ORDER_FITS)
def test_troupe_places_a_small_tree_if_and_only_if_it_fits(world: World) -> None:
    run = run_world(world, SchedulerConfiguration())
    assert not internal_errors(run.decisions)
    running = {p.name: p.node or "" for p in world.pods if p.node}
    tree = oracle_tree(world, "t", {p.name for p in world.pods if not p.node}, {})
    try:
        found = Oracle(free_room(world, running), labels_of(world)).fits(tree)
    except OracleBudget:
        event("oracle gave up")
        return
    placed = current_placement(run)
    bound = {name_of(uid) for uid in run.placed}
    troupe = TreeView(world, {g.name for g in world.groups}, {c.name for c in world.composites}, placed).composite_ok(
        "t"
    )
    event(f"fits: {found is not None}")
    root = next((c for k, c in run.recorder.composites.items() if k.name == "t"), None)
    if found is not None:
        assert troupe, (
            f"the tree fits ({ {p: world.nodes[i].name for p, i in found.items()} }) but troupe did not place it: "
            f"{root}\n{describe(world)}"
        )
    else:
        assert not bound, f"the oracle finds no placement, troupe bound {sorted(bound)}: {root}\n{describe(world)}"
    problems = valid_placement(world, placed, bound) if bound else []
    assert not problems, f"troupe's placement {placed} is not valid: {problems}\n{describe(world)}"
