"""What the core asks of the world outside it, as protocols, and the no-op
implementations `simulate` and the unit tests use.

The core decides; `runtime/` carries the decisions out (binds, status patches,
Events) and reports back through `BindResults`. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from ..api.composite import CompositePodGroup
from ..api.dra import ResourceClaim
from ..api.nodepool import CapacityPlan
from ..api.podgroup import PodGroup
from ..api.records import GroupKey, NodeInfo, PodInfo

if TYPE_CHECKING:
    from ..framework.framework import Framework
    from .schedule_podgroup import Assignment


class BindResults(Protocol):
    """How a binder reports each pod back (the Scheduler implements it)."""

    def on_bound(self, pod: PodInfo, node: str) -> None: ...
    def on_bind_failed(self, pod: PodInfo, node: str, message: str) -> None: ...
    def on_pod_gone(self, pod: PodInfo) -> None: ...
    def on_bound_elsewhere(self, pod: PodInfo, node: str, bound_to: str) -> None: ...


class Binder(Protocol):
    def bind(
        self,
        fwk: Framework,
        assignments: Sequence[Assignment],
        results: BindResults,
        at_least: int = 0,
        annotations: Mapping[str, str] | None = None,
    ) -> None:
        """Bind the placements of one decision, asynchronously: PreBind for
        all of them first (a failure fails that pod), then one bind each.
        When fewer than `at_least` pass PreBind (a gang that would fall below
        minCount), none is bound. Every pod is reported through `results`
        exactly once."""
        ...


class CapacityRequester(Protocol):
    """Asks an autoscaler for new nodes for a whole unit (docs/autoscaling.md).
    Asynchronous and retried; each call is idempotent."""

    def ask(self, plan: CapacityPlan) -> None:
        """Room for `plan.pods` in its domain: what stands for the unit is
        made (or kept, where the same was asked before; replaced where the
        domain changed)."""
        ...

    def withdraw(self, unit: GroupKey) -> None:
        """The unit needs no new nodes (bound, gone, or asks another way)."""
        ...


class ClaimLifecycle(Protocol):
    """What kube-controller-manager's resource claim controller does
    upstream, for what troupe allocates (troupe runs without it).
    Asynchronous and retried; each call is idempotent."""

    def release(self, claim: ResourceClaim, uid: str) -> None:
        """Take a consumer that no longer exists out of the claim's
        `reservedFor`; a claim then reserved for no one is deallocated and
        loses its delete-protection finalizer."""
        ...

    def make_group_claims(self, group: PodGroup, entries: Sequence[tuple[str, str]]) -> None:
        """For each (spec.resourceClaims name, template name): the PodGroup's
        claim from that template (owned by it, named `<group>-<name>`,
        annotated with the name), and its `status.resourceClaimStatuses`."""
        ...

    def delete_group_claims(self, group_uid: str, claims: Sequence[ResourceClaim]) -> None:
        """The claims made for a deleted PodGroup: released, then deleted."""
        ...


class StatusWriter(Protocol):
    """Conditions, Events and nominations: best-effort, coalesced by the writer."""

    def group_condition(self, group: PodGroup, status: str, reason: str, message: str) -> None: ...
    def group_members(self, group: PodGroup) -> None:
        """A pod of the group changed: where the group's source counts its
        pods in its status (phase, running, ...), write them."""
        ...

    def pod_unschedulable(
        self,
        pod: PodInfo,
        message: str,
        still_waiting: Callable[[], bool] | None = None,
        reason: str = "Unschedulable",
    ) -> None: ...
    def pod_waiting(self, pod: PodInfo, message: str, still_waiting: Callable[[], bool] | None = None) -> None:
        """Held before its cycle (PreEnqueue), for `message`: no PodScheduled
        condition (as upstream), so no autoscaler provisions for it."""
        ...

    def pod_event(self, pod: PodInfo, type_: str, reason: str, note: str, action: str) -> None: ...
    def group_event(self, group: PodGroup, type_: str, reason: str, note: str, action: str) -> None: ...
    def node_event(self, node: NodeInfo, type_: str, reason: str, note: str, action: str) -> None:
        """An Event on a Node (e.g. a field of it troupe cannot count)."""
        ...

    def nominate(self, pod: PodInfo, node: str) -> None: ...
    def forget_pod(self, uid: str) -> None: ...
    def preempt_pod(self, victim: PodInfo, message: str) -> None:
        """A victim: DisruptionTarget=True (PreemptionByScheduler, `message`)
        on the pod, a Preempted event, then delete it (its own grace period)."""
        ...

    def group_disrupted(self, group: PodGroup, message: str) -> None:
        """A victim PodGroup: DisruptionTarget=True (PreemptionByScheduler,
        `message`) in its status and a Preempted event on it."""
        ...

    def composite_condition(self, composite: CompositePodGroup, status: str, reason: str, message: str) -> None:
        """CompositePodGroupInitiallyScheduled on a CompositePodGroup."""
        ...

    def composite_event(
        self, composite: CompositePodGroup, type_: str, reason: str, note: str, action: str
    ) -> None: ...
    def composite_disrupted(self, composite: CompositePodGroup, message: str) -> None:
        """A CompositePodGroup whose tree was preempted whole: DisruptionTarget=True."""
        ...


class NullBinder:
    """Binds nothing: the caller binds by feeding the pod back (simulate)."""

    def bind(
        self,
        fwk: Framework,
        assignments: Sequence[Assignment],
        results: BindResults,
        at_least: int = 0,
        annotations: Mapping[str, str] | None = None,
    ) -> None:
        return None


class NullWriter:
    """Writes nothing."""

    def group_condition(self, group: PodGroup, status: str, reason: str, message: str) -> None:
        return None

    def group_members(self, group: PodGroup) -> None:
        return None

    def pod_unschedulable(
        self,
        pod: PodInfo,
        message: str,
        still_waiting: Callable[[], bool] | None = None,
        reason: str = "Unschedulable",
    ) -> None:
        return None

    def pod_waiting(self, pod: PodInfo, message: str, still_waiting: Callable[[], bool] | None = None) -> None:
        return None

    def pod_event(self, pod: PodInfo, type_: str, reason: str, note: str, action: str) -> None:
        return None

    def group_event(self, group: PodGroup, type_: str, reason: str, note: str, action: str) -> None:
        return None

    def node_event(self, node: NodeInfo, type_: str, reason: str, note: str, action: str) -> None:
        return None

    def nominate(self, pod: PodInfo, node: str) -> None:
        return None

    def forget_pod(self, uid: str) -> None:
        return None

    def preempt_pod(self, victim: PodInfo, message: str) -> None:
        return None

    def group_disrupted(self, group: PodGroup, message: str) -> None:
        return None

    def composite_condition(self, composite: CompositePodGroup, status: str, reason: str, message: str) -> None:
        return None

    def composite_event(self, composite: CompositePodGroup, type_: str, reason: str, note: str, action: str) -> None:
        return None

    def composite_disrupted(self, composite: CompositePodGroup, message: str) -> None:
        return None
