"""Extension points, as kube-scheduler's framework names them, over a columnar snapshot.

A Filter plugin answers for all candidate nodes at once: a boolean mask of the
nodes it accepts and, for the nodes it rejects, the reasons (each reason with
the mask of rows it applies to, so the scheduler can print upstream's
"0/5 nodes are available: 3 Insufficient cpu, ..."). Plugins that look at one
node at a time derive from `NodeFilterPlugin` and get the vectorization for
free. A Score plugin returns one number per feasible node.

Group-level points (Permit, PlacementGenerate, PlacementScore, the group
PostFilter) see the whole PodGroup of the cycle. Reserve/Unreserve keep a
plugin's in-memory state in step with the cycle's placements; PreBind (async,
the one point that may call the API) runs in the binding path before a pod is
bound.

Caching is opt-in (upstream's SignPlugin rule): a Filter or Score plugin's
answer is reused across pods only if the plugin signs the pod (`sign_pod`
returns what its answer depends on, not None); one unsigned static filter
turns the shared static pass off for that pod.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np
from pydantic import BaseModel

from ..api.config import PluginArgs
from ..api.dra import Allocation, ConsumerRef, ResourceClaim
from ..api.nodepool import CapacityPlan
from ..api.podgroup import PodGroup
from ..api.records import GroupKey, NodeInfo, PodInfo
from ..cluster.snapshot import Snapshot

if TYPE_CHECKING:
    from ..cluster.cache import ClusterCache
    from .diagnosis import Diagnosis


class Code(enum.Enum):
    SUCCESS = "Success"
    ERROR = "Error"
    UNSCHEDULABLE = "Unschedulable"
    # Preemption cannot help (e.g. a node selector no node matches).
    UNSCHEDULABLE_AND_UNRESOLVABLE = "UnschedulableAndUnresolvable"
    SKIP = "Skip"


@dataclass(frozen=True, slots=True)
class Status:
    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()
    plugin: str = ""

    @property
    def ok(self) -> bool:
        return self.code in (Code.SUCCESS, Code.SKIP)

    @property
    def message(self) -> str:
        return ", ".join(self.reasons)

    @property
    def is_skip(self) -> bool:
        return self.code is Code.SKIP

    @classmethod
    def success(cls) -> Status:
        return _SUCCESS

    @classmethod
    def skip(cls, plugin: str = "") -> Status:
        return cls(Code.SKIP, (), plugin)

    @classmethod
    def unschedulable(cls, *reasons: str, plugin: str = "", resolvable: bool = True) -> Status:
        code = Code.UNSCHEDULABLE if resolvable else Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        return cls(code, tuple(reasons), plugin)

    @classmethod
    def error(cls, reason: str, plugin: str = "") -> Status:
        return cls(Code.ERROR, (reason,), plugin)


_SUCCESS = Status()


@dataclass(slots=True)
class FilterResult:
    """`feasible[i]` is True if the plugin accepts row i. For rejected rows,
    `reasons` maps a reason to the rows it applies to (a row may have several)."""

    feasible: np.ndarray
    reasons: list[tuple[str, np.ndarray]] = field(default_factory=list)
    unresolvable: frozenset[str] = frozenset()
    passes_all: bool = False  # every row accepted (the framework need not AND it in)

    @classmethod
    def all(cls, n: int) -> FilterResult:
        return cls(np.ones(n, dtype=bool), passes_all=True)


class CycleState(dict[str, Any]):
    """Scratch space of one pod's scheduling attempt (plugins key it by their name)."""

    # Plugins whose PreFilter answered Skip for this pod: the framework does
    # not run them at Filter, Reserve/Unreserve or PreBind for it (upstream
    # skips Filter; troupe skips the rest too, so a plugin for a few pods,
    # e.g. DynamicResources, costs the others nothing).
    skipped: frozenset[str] = frozenset()
    # Set by a plugin that rejects now but will answer otherwise after this
    # many seconds without any cluster event (Reservation: when the group
    # has waited long enough to reserve room). The queue retries it by then.
    retry_within: float | None = None
    # Set by CapacityRequest when no NodePool can make room for the whole
    # unit: that plan (no pools) and why, said on the unit whatever the
    # PostFilters after it (Reservation) do, and its pods not provisionable.
    capacity_refused: tuple[CapacityPlan, str] | None = None


class PlaceFn(Protocol):
    """Places `pods` (in order) by the scheduler's algorithm in `snapshot`,
    within the rows `allowed` (a mask; None: all), and returns (pod, row) for
    those placed; the snapshot is left as it was. With `group`, as the
    group's cycle would: within its placements (e.g. one topology domain),
    and nothing unless the cycle would bind them (its minResources and
    Permit; why not is appended to `reasons`). PostFilters ask it "would
    these fit?"."""

    def __call__(
        self,
        snapshot: Snapshot,
        pods: Sequence[PodInfo],
        allowed: np.ndarray | None,
        group: GroupContext | None = None,
        reasons: list[str] | None = None,
    ) -> list[tuple[PodInfo, int]]: ...


class ClaimWriter(Protocol):
    """Writes a ResourceClaim as kube-scheduler does (runtime's; None in a
    simulation): the delete-protection finalizer, then `allocation` (if
    given, the claim has none yet) and `consumer` in `reservedFor`, under
    the claim's resourceVersion. Raises on any failure (a conflict too)."""

    async def write_claim(
        self, claim: ResourceClaim, allocation: Allocation | None, consumer: ConsumerRef
    ) -> ResourceClaim:
        """The claim as the API returned it after the writes."""
        ...

    def release(self, claim: ResourceClaim, uid: str) -> None:
        """Undo a write (in the background): `uid` out of reservedFor, and a
        claim left reserved for no one deallocated."""
        ...


class Handle:
    """What plugins may reach outside their arguments: the cache, read-only,
    the scheduler's clock, `place`, the scheduler's own algorithm for trials
    (set by core; None in a Framework built without a Scheduler), and
    `claim_writer` (set by the runtime)."""

    def __init__(self, cache: ClusterCache, clock: Callable[[], float] = time.monotonic) -> None:
        self.cache = cache
        self.clock = clock  # the scheduler's monotonic clock (a fake one in tests and simulate)
        self.place: PlaceFn | None = None
        self.claim_writer: ClaimWriter | None = None
        # The scheduler's nominated pods: uid -> (node, pod). Room is held for
        # them; a PostFilter's own record of that room lives only while they do.
        self.nominated: Mapping[str, tuple[str, PodInfo]] = {}


class Plugin:
    name: ClassVar[str] = ""
    # The model of the plugin's pluginConfig args (a PluginArgs subclass with
    # upstream's camelCase keys; the default takes none). The framework
    # validates the configuration against it, and the constructor gets the
    # instance: `Plugin(Plugin.Args.model_validate(raw), handle)`.
    Args: ClassVar[type[BaseModel]] = PluginArgs
    # The cluster events (framework/events.py) that can make a pod this plugin
    # rejected schedulable, as upstream's EventsToRegister. None: any event.
    events: ClassVar[frozenset[str] | None] = None

    def __init__(self, args: BaseModel, handle: Handle) -> None:
        if not isinstance(args, self.Args):  # e.g. a raw mapping: validate it first
            raise TypeError(
                f"{type(self).__name__}: args must be a {self.Args.__qualname__}, got {type(args).__name__}"
            )
        self.args = args
        self.handle = handle
        self.name_set = frozenset((self.name,))


class PreEnqueuePlugin(Plugin):
    def pre_enqueue(self, pod: PodInfo) -> Status:
        raise NotImplementedError


class PreFilterPlugin(Plugin):
    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> Status:
        raise NotImplementedError


class FilterPlugin(Plugin):
    # A static filter reads only the pod's spec and the nodes' labels, taints and
    # flags, never their usage: its answer is reused for every pod with the same
    # `sign_pod()` as long as the node table's static generation is unchanged.
    static: ClassVar[bool] = False
    # A row-local filter's answer for a node depends only on the pod's signature
    # and that node's own usage: within a cycle, after a pod is assumed on a
    # node, only that node's answer can change (`filter_rows` recomputes it).
    row_local: ClassVar[bool] = False

    def sign_pod(self, pod: PodInfo) -> Hashable | None:
        """What this plugin's answer depends on in the pod (equal signatures,
        equal answers), or None: not signed, never reused (the default)."""
        return None

    def filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> FilterResult:
        raise NotImplementedError

    def filter_rows(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, rows: np.ndarray) -> np.ndarray:
        """Feasibility of just `rows` (row-local filters override this cheaply)."""
        feasible: np.ndarray = self.filter(state, pod, snapshot).feasible[rows]
        return feasible

    def filter_row(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, row: int) -> bool:
        """Feasibility of one row: what a row-local filter recomputes after a
        gang member is assumed there. Must equal `filter_rows` on [row]; a
        plugin may override it with plain arithmetic (a handful of numpy calls
        on one row cost more than the answer)."""
        return bool(self.filter_rows(state, pod, snapshot, np.array([row], dtype=np.int64))[0])


class NodeFilterPlugin(FilterPlugin):
    """A filter written per node: return None to accept, or the rejection reason."""

    static = True
    # Every rejection is one preemption cannot fix (upstream's
    # UnschedulableAndUnresolvable); override unresolvable_reasons to pick some.
    unresolvable: ClassVar[bool] = False

    def filter_node(self, pod: PodInfo, node: NodeInfo) -> str | None:
        raise NotImplementedError

    def filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> FilterResult:
        n = len(snapshot)
        feasible = np.ones(n, dtype=bool)
        by_reason: dict[str, list[int]] = {}
        for i, node in enumerate(snapshot.nodes):
            if node is None:
                continue
            reason = self.filter_node(pod, node)
            if reason is not None:
                feasible[i] = False
                by_reason.setdefault(reason, []).append(i)
        reasons = []
        for reason, rows in by_reason.items():
            mask = np.zeros(n, dtype=bool)
            mask[rows] = True
            reasons.append((reason, mask))
        return FilterResult(feasible, reasons, self.unresolvable_reasons(by_reason))

    def unresolvable_reasons(self, reasons: Mapping[str, Any]) -> frozenset[str]:
        return frozenset(reasons) if self.unresolvable else frozenset()


class ScorePlugin(Plugin):
    # Like FilterPlugin.static: the raw score depends only on the pod's signature
    # and the nodes' labels and taints, so it is computed once for all nodes.
    static_score: ClassVar[bool] = False
    # A row-local score for a node depends only on the pod's signature and that
    # node's own usage (see FilterPlugin.row_local).
    row_local: ClassVar[bool] = False

    def sign_pod(self, pod: PodInfo) -> Hashable | None:
        """As FilterPlugin.sign_pod: None (the default) means never reused."""
        return None

    def score(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, rows: np.ndarray) -> np.ndarray:
        """One score per row in `rows` (the feasible nodes), higher is better."""
        raise NotImplementedError

    def score_row(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, row: int) -> int:
        """The raw score of one row (as FilterPlugin.filter_row): must equal
        `score` on [row]."""
        return int(self.score(state, pod, snapshot, np.array([row], dtype=np.int64))[0])

    def normalize(self, scores: np.ndarray) -> np.ndarray:
        """Maps raw scores to 0..100. Must map equal raw scores to equal results:
        the framework leaves out a score that is equal on every node."""
        return scores


# How a search that stopped on its budget (podGroupScheduling.searchSteps)
# begins to say so: it waits for the budget, not for room, and a PostFilter
# whose trial stopped so must not say the unit cannot fit.
SEARCH_BUDGET_SPENT = "search budget spent"


# A tree's own cycle as a trial (core/schedule_tree.py TreeCycle.trial):
# within the rows `allowed` (None: all), every pod it would bind as (pod,
# row), or nothing and why into `reasons`; the snapshot left as it was.
TreePlaceFn = Callable[[Snapshot, "np.ndarray | None", "list[str] | None"], "list[tuple[PodInfo, int]]"]


@dataclass(frozen=True, slots=True)
class TreeUnit:
    """A tree of groups (CompositePodGroups) as the unit PostFilter works
    for: the same preemption and reservation as a PodGroup's (a flat gang is
    a tree of one), with the tree's own cycle as the trial."""

    label: str  # "CompositePodGroup ns/name" (the root's), for messages and as the preemptor's key
    members: frozenset[GroupKey]  # its PodGroups: never its own victims
    never: str  # why it may not preempt ("" where it may): a group of it says preemptionPolicy Never
    place: TreePlaceFn


@dataclass(slots=True)
class GroupContext:
    """What group-level plugins see: the group of this cycle and how it stands."""

    key: GroupKey
    pods: Sequence[PodInfo]
    min_count: int
    is_gang: bool
    placed_before: int  # pods of the group already bound or assumed before this cycle
    placed_now: int = 0  # pods placed in this cycle so far
    group: PodGroup | None = None  # None for a pod that belongs to no PodGroup
    placed_nodes: tuple[str, ...] = ()  # the nodes of the pods counted in placed_before
    placed_pods: tuple[PodInfo, ...] = ()  # the pods placed in this cycle (for Permit)
    # Room nominated to other units' pods (row, pod) that this unit may use
    # only to backfill (its pods end before that room frees): not held in the
    # snapshot it is placed in, held again before PostFilter, which must not
    # plan on it (no reservation on top of a reservation).
    backfill_only: tuple[tuple[int, PodInfo], ...] = ()
    # A leaf PodGroup of a tree (CompositePodGroups): placed within `within`
    # (its ancestors' chosen domain, a mask over the snapshot's rows; None:
    # anywhere), and PostFilter runs for the whole tree, not for the leaf.
    within: np.ndarray | None = None
    in_tree: bool = False
    # The unit is a whole tree (PostFilter only): `key` is its root, `pods`
    # every pod waiting in it, `min_count` the fewest of them that make the
    # root feasible, and `group` None.
    tree: TreeUnit | None = None

    @property
    def unit_name(self) -> str:
        """The unit, in messages and as a PostFilter's key: "PodGroup ns/name" or "CompositePodGroup ns/name"."""
        return self.tree.label if self.tree is not None else str(self.key)

    @property
    def members(self) -> frozenset[GroupKey]:
        """The unit's own PodGroups (never its victims)."""
        return self.tree.members if self.tree is not None else frozenset((self.key,))

    @property
    def need(self) -> int:
        """Pods this cycle must place: the rest of minCount for a gang, else 1."""
        return max(self.min_count - self.placed_before, 1) if self.is_gang else 1

    @property
    def topology_keys(self) -> list[str]:
        """The group's topology constraint keys, most preferred first."""
        constraints = self.group.spec.scheduling_constraints if self.group is not None else None
        return constraints.topology_keys if constraints is not None else []


class PermitPlugin(Plugin):
    def permit(self, group: GroupContext) -> Status:
        raise NotImplementedError


# ----------------------------------------------------------------- PostFilter


@dataclass(frozen=True, slots=True)
class Reservation:
    """Room a PostFilter holds for a starving unit until running pods finish
    (no victims: nothing is evicted). The nominations carry where; this says
    until when, so that backfill can use the room meanwhile."""

    # Reserved node -> the latest end (wall clock, seconds) of the running
    # pods in the way there, as their activeDeadlineSeconds tell; None when
    # any of them has no deadline (their end is unknown).
    free_at: Mapping[str, float | None]


@dataclass(frozen=True, slots=True)
class PostFilterResult:
    """What a PostFilter achieved for one pod: the node it may run on once
    victims are gone (upstream's NominatingInfo), "" for none, and the
    victims to evict for it (`victim_groups`: PodGroups taken whole)."""

    nominated_node: str = ""
    victims: tuple[PodInfo, ...] = ()
    victim_groups: tuple[GroupKey, ...] = ()
    message: str = ""  # what the preemptor is told (e.g. waiting for N victims)
    reservation: Reservation | None = None  # nominated to reserved room, not to victims' room


@dataclass(frozen=True, slots=True)
class GroupPostFilterResult:
    """For a whole group: pod uid -> nominated node, and the victims."""

    nominations: Mapping[str, str] = field(default_factory=dict)
    victims: tuple[PodInfo, ...] = ()
    victim_groups: tuple[GroupKey, ...] = ()
    message: str = ""
    reservation: Reservation | None = None
    capacity: CapacityPlan | None = None  # new nodes asked for the unit (nothing evicted, nothing held)


class PostFilterPlugin(Plugin):
    """Runs when a pod fits nowhere (`post_filter`, with the diagnosis: node ->
    status) or when pods of a PodGroup stay unplaced after its cycle
    (`post_filter_group`, with each unplaced pod's diagnosis). Preemption
    lives here. A Success status with a result ends the point; Unschedulable
    or Skip lets the next plugin try."""

    def post_filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, diagnosis: Diagnosis
    ) -> tuple[PostFilterResult | None, Status]:
        return None, Status.skip(self.name)

    def post_filter_group(
        self, state: CycleState, group: GroupContext, snapshot: Snapshot, diagnoses: Mapping[str, Diagnosis]
    ) -> tuple[GroupPostFilterResult | None, Status]:
        return None, Status.skip(self.name)


# ------------------------------------------------------------ Reserve, PreBind


class ReservePlugin(Plugin):
    """`reserve` when a pod is placed in a cycle (in the snapshot); `unreserve`
    when that placement is dropped: the group is rejected after it, the pod's
    PreBind or bind fails, or it is deleted before it is bound. Unreserve must
    be idempotent and must not fail."""

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        raise NotImplementedError

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        raise NotImplementedError


class PreBindPlugin(Plugin):
    """Runs in the binding path, before the pod's bind, for every pod of a
    decision before any of them is bound; may write to the API through the
    handle's client. A failure fails that pod's binding (it is unreserved and
    requeued)."""

    async def pre_bind(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        raise NotImplementedError


# ------------------------------------------------------------------ Placement


@dataclass(slots=True, eq=False)  # not frozen: generators make many of them per cycle; treat as read-only
class Placement:
    """A candidate set of nodes for a whole group (e.g. one topology domain).
    `nodes` is a mask over the snapshot's rows; `parent` the placement it
    refines (generators run in order, each refining the previous one's).

    `rank`: lower is preferred; the placements of the best rank that has a
    feasible one are scored, the others are not tried (upstream's proposed
    "prioritized placement"). `kind` names what the placement is a domain of
    (a topology key), for messages. `pruned`: why the generator already knows
    the group cannot fit (e.g. too little free cpu): it is not tried, only
    reported."""

    name: str
    nodes: np.ndarray
    parent: Placement | None = None
    rank: int = 0
    kind: str = ""
    pruned: str = ""
    # Free room (allocatable - requested, at least 0 per node) summed over the
    # nodes, per snapshot resource column, if the generator computed it.
    free_room: np.ndarray | None = field(default=None, compare=False)

    def room(self, snapshot: Snapshot) -> np.ndarray:
        """`free_room`, computed if the generator left it out."""
        if self.free_room is not None:
            return self.free_room
        rows = np.flatnonzero(self.nodes)
        summed: np.ndarray = (snapshot.alloc[rows] - snapshot.req[rows]).clip(min=0).sum(axis=0)
        return summed

    @property
    def path(self) -> str:
        """`zone-a/rack-3`: the names from the outermost parent down."""
        return self.name if self.parent is None or not self.parent.name else f"{self.parent.path}/{self.name}"

    @property
    def label(self) -> str:
        """How messages name it: `topology.kubernetes.io/zone=zone-a`, or the path."""
        return f"{self.kind}={self.path}" if self.kind else (self.path or "the cluster")


@dataclass(frozen=True, slots=True)
class PlacementAssignments:
    """A feasible proposal: the placement and where each pod of the cycle goes
    in it (rows of the snapshot), as upstream's PodGroupAssignments."""

    placement: Placement
    assignments: Sequence[tuple[PodInfo, int]]


class PlacementGeneratePlugin(Plugin):
    """Proposes candidate placements for a whole group, each within one of
    `parents` (the whole cluster for the first generator)."""

    def generate_placements(
        self, state: CycleState, group: GroupContext, snapshot: Snapshot, parents: Sequence[Placement]
    ) -> tuple[list[Placement], Status]:
        raise NotImplementedError


# Placement scores run 0..MAX_PLACEMENT_SCORE, finer than node scores (0..100):
# in a large cluster, candidate domains may differ by one small gang's room.
MAX_PLACEMENT_SCORE = 1_000_000


class PlacementScorePlugin(Plugin):
    """Scores a feasible placement with its proposed assignments; higher is
    better, 0..MAX_PLACEMENT_SCORE. `normalize_placement_scores` maps one
    plugin's scores over all feasible placements into that range before
    weighting (identity by default).

    `placement_score_bounds` (optional) answers before the group is tried,
    one number per placement: no proposal in it can score more than this. When every scorer
    gives a bound and none overrides the normalization, the core tries
    placements best bound first and stops once no untried one can beat the
    best found: the same choice as trying all of them, at a fraction of the
    cost. None: no bound (all feasible placements are tried)."""

    def score_placement(
        self, state: CycleState, group: GroupContext, snapshot: Snapshot, proposal: PlacementAssignments
    ) -> tuple[int, Status]:
        raise NotImplementedError

    def normalize_placement_scores(self, scores: np.ndarray) -> np.ndarray:
        return scores

    def placement_score_bounds(
        self, state: CycleState, group: GroupContext, snapshot: Snapshot, placements: Sequence[Placement]
    ) -> np.ndarray | None:
        return None
