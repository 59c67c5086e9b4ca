"""Extension points, as kube-scheduler's framework names them, over a columnar snapshot.

A Filter plugin answers for all candidate nodes at once: a boolean mask of the
nodes it accepts and, for the nodes it rejects, the reasons (each reason with
the mask of rows it applies to, so the scheduler can print upstream's
"0/5 nodes are available: 3 Insufficient cpu, ..."). Plugins that look at one
node at a time derive from `NodeFilterPlugin` and get the vectorization for
free. A Score plugin returns one number per feasible node.

Group-level points (Permit, PlacementGenerate, PlacementScore) see the whole
PodGroup of the cycle.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Hashable, Mapping, Sequence

import numpy as np

from ..api.objects import NodeInfo, PodInfo
from ..cluster.snapshot import Snapshot

if TYPE_CHECKING:
    from ..cluster.cache import ClusterCache


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

    @classmethod
    def success(cls) -> "Status":
        return _SUCCESS

    @classmethod
    def unschedulable(cls, *reasons: str, plugin: str = "", resolvable: bool = True) -> "Status":
        code = Code.UNSCHEDULABLE if resolvable else Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        return cls(code, tuple(reasons), plugin)

    @classmethod
    def error(cls, reason: str, plugin: str = "") -> "Status":
        return cls(Code.ERROR, (reason,), plugin)


_SUCCESS = Status()


@dataclass(slots=True)
class FilterResult:
    """`feasible[i]` is True if the plugin accepts row i. For rejected rows,
    `reasons` maps a reason to the rows it applies to (a row may have several)."""

    feasible: np.ndarray
    reasons: list[tuple[str, np.ndarray]] = field(default_factory=list)
    unresolvable: frozenset[str] = frozenset()

    @classmethod
    def all(cls, n: int) -> "FilterResult":
        return cls(np.ones(n, dtype=bool))


class CycleState(dict[str, Any]):
    """Scratch space of one pod's scheduling attempt (plugins key it by their name)."""


class Handle:
    """What plugins may reach outside their arguments: the cache, read-only."""

    def __init__(self, cache: "ClusterCache") -> None:
        self.cache = cache


class Plugin:
    name: ClassVar[str] = ""
    # The cluster events (framework/events.py) that can make a pod this plugin
    # rejected schedulable, as upstream's EventsToRegister. None: any event.
    events: ClassVar[frozenset[str] | None] = None

    def __init__(self, args: Mapping[str, Any], handle: Handle) -> None:
        self.args = dict(args)
        self.handle = handle


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

    def sign_pod(self, pod: PodInfo) -> Hashable:
        return pod.spec_key

    def filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> FilterResult:
        raise NotImplementedError

    def filter_rows(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, rows: np.ndarray) -> np.ndarray:
        """Feasibility of just `rows` (row-local filters override this cheaply)."""
        return self.filter(state, pod, snapshot).feasible[rows]


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

    def sign_pod(self, pod: PodInfo) -> Hashable:
        return pod.spec_key

    def score(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, rows: np.ndarray) -> np.ndarray:
        """One score per row in `rows` (the feasible nodes), higher is better."""
        raise NotImplementedError

    def normalize(self, scores: np.ndarray) -> np.ndarray:
        """Maps raw scores to 0..100. Must map equal raw scores to equal results:
        the framework leaves out a score that is equal on every node."""
        return scores


@dataclass(slots=True)
class GroupContext:
    """What group-level plugins see: the group of this cycle and how it stands."""

    key: tuple[str, str]
    pods: Sequence[PodInfo]
    min_count: int
    is_gang: bool
    placed_before: int  # pods of the group already bound or assumed before this cycle
    placed_now: int = 0  # pods placed in this cycle so far


class PermitPlugin(Plugin):
    def permit(self, group: GroupContext) -> Status:
        raise NotImplementedError


class PostFilterPlugin(Plugin):
    """Runs when a pod fits nowhere (preemption lives here; none in tree yet)."""

    def post_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, diagnosis: Any) -> Status:
        raise NotImplementedError


class PlacementGeneratePlugin(Plugin):
    """Proposes candidate node subsets (topology domains) for a whole group."""

    def generate(self, group: GroupContext, snapshot: Snapshot) -> list[np.ndarray]:
        raise NotImplementedError


class PlacementScorePlugin(Plugin):
    """Scores a complete placement of a group; the highest wins."""

    def score_placement(self, group: GroupContext, snapshot: Snapshot, rows: np.ndarray) -> float:
        raise NotImplementedError
