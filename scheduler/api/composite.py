"""pydantic model of CompositePodGroup: a group of groups.

troupe's own kind (`scheduling.troupe.dev/v1alpha2`) mirrors upstream
`scheduling.k8s.io/v1alpha3` CompositePodGroup field for field; the native
one is translated into it by api/sources/native.py. A tree's leaves are
PodGroups naming their parent in `spec.parentCompositePodGroupName` (same
namespace, same API group); a CompositePodGroup names its own parent the
same way, and one without a parent is a root: the unit troupe schedules.

`disruptionMode` is kept in troupe's vocabulary (`Pod` / `PodGroup`, as
api/podgroup.DisruptionMode): the wire form `{single: {}}` / `{all: {}}` of
both kinds is translated on parse. troupe's kind takes up to 4 topology keys
per level, as its PodGroup does (upstream: 1).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from .constants import GROUP, REASON_SCHEDULER_ERROR, VERSION
from .podgroup import CompositeSchedulingPolicy as CompositeSchedulingPolicy
from .podgroup import Condition, ObjectMeta, PodGroupStatus, _CompositePolicy, _Model
from .podgroup import GangCompositeSchedulingPolicy as GangCompositeSchedulingPolicy
from .records import GroupKey

COMPOSITE_KIND = "CompositePodGroup"
COMPOSITE_PLURAL = "compositepodgroups"
COMPOSITE_API_VERSION = f"{GROUP}/{VERSION}"

# The CompositePodGroup's condition (upstream v1alpha3 names it in its doc
# comment only; troupe's kind and the native one use the same word), and the
# reason, beside Scheduled / Unschedulable / SchedulerError, for a tree laid
# out wrong (a cycle, too many levels, children of several Workloads).
COMPOSITE_SCHEDULED = "CompositePodGroupInitiallyScheduled"
REASON_INVALID = "Invalid"
# Where the served API names that reason itself (Kubernetes 1.38's v1beta1), its name.
INVALID_REASONS = {"scheduling.k8s.io/v1beta1": "CompositePodGroupError"}
# A PodGroup's reason for a group configured wrong (upstream's runtime
# validation: pods of several schedulerNames, a tree's priorities or
# Workloads that disagree), where the served API names one: its name, and the
# first Kubernetes that does. 1.37 serves the same versions without it
# (SchedulerError there), so the apiVersion alone does not say.
CONFIG_ERROR_REASONS = {
    "scheduling.k8s.io/v1beta1": ("PodGroupError", (1, 38)),
    "scheduling.k8s.io/v1alpha3": ("PodGroupError", (1, 38)),
}


def config_error_reason(api_version: str, kube_version: tuple[int, int] | None) -> str:
    """The scheduled condition's reason for a PodGroup configured wrong, in
    the words of its API version as the served Kubernetes (major, minor)
    has them; SchedulerError where they have none or the version is not
    known (`troupe simulate`)."""
    named = CONFIG_ERROR_REASONS.get(api_version)
    if named is None or kube_version is None or kube_version < named[1]:
        return REASON_SCHEDULER_ERROR
    return named[0]


class CompositeWorkloadRef(_Model):
    """The Workload template a CompositePodGroup was made from (upstream's
    WorkloadReference). Upstream's scheduler does not read it."""

    workload_name: str = Field(alias="workloadName", min_length=1)
    template_name: str = Field(alias="templateName", min_length=1)


class _TreeFields(_Model):
    # Listed after _CompositePolicy so that they come first (see podgroup.py).
    parent_composite_pod_group_name: str | None = Field(default=None, alias="parentCompositePodGroupName", min_length=1)
    workload_ref: CompositeWorkloadRef | None = Field(default=None, alias="workloadRef")


class CompositePodGroupSpec(_CompositePolicy, _TreeFields):
    pass


class CompositePodGroup(_Model):
    """troupe's CompositePodGroup, of its own kind or the native one: the
    kind's `apiVersion` says where its status goes; `problem`, set by a
    source, says what of the object troupe cannot honour (its tree is then
    not scheduled: SchedulerError)."""

    api_version: str = Field(default=COMPOSITE_API_VERSION, alias="apiVersion")
    metadata: ObjectMeta
    spec: CompositePodGroupSpec
    status: PodGroupStatus = Field(default_factory=PodGroupStatus)
    problem: str | None = None
    # A CompositePodGroup troupe made, with no API object of its own (of a
    # Volcano PodGroup's subGroupPolicy, api/subgroups.py): the key of that
    # PodGroup, which takes the status of the tree's root.
    made_from: GroupKey | None = None

    @property
    def config_error_reason(self) -> str:
        """The reason for a tree configured wrong other than by its layout
        (pods of several schedulerNames): the served API's word where it has
        one (1.38's CompositePodGroupError, as upstream), else SchedulerError."""
        return INVALID_REASONS.get(self.api_version, REASON_SCHEDULER_ERROR)

    @property
    def invalid_reason(self) -> str:
        """The CompositePodGroupInitiallyScheduled reason for a tree laid out
        wrong, in the words of the object's API version."""
        return INVALID_REASONS.get(self.api_version, REASON_INVALID)

    @property
    def key(self) -> GroupKey:
        """Keyed as PodGroups are: namespace, name, API group."""
        return self.metadata.key(self.api_version)

    @property
    def parent_key(self) -> GroupKey | None:
        """The CompositePodGroup above this one (same namespace and API group); None for a root."""
        parent = self.spec.parent_composite_pod_group_name
        return self.metadata.key(self.api_version, parent) if parent else None

    @property
    def is_gang(self) -> bool:
        return self.spec.scheduling_policy.gang is not None

    @property
    def min_group_count(self) -> int:
        """How many children must be feasible together (a basic composite: 1)."""
        gang = self.spec.scheduling_policy.gang
        return gang.min_group_count if gang else 1

    @property
    def topology_keys(self) -> list[str]:
        constraints = self.spec.scheduling_constraints
        return constraints.topology_keys if constraints is not None else []

    def condition(self, type_: str) -> Condition | None:
        return next((c for c in self.status.conditions if c.type == type_), None)

    def priority_in(self, classes: Mapping[str, int]) -> int | None:
        """`spec.priority`, else the value of its `priorityClassName` (None
        while no such PriorityClass is known), else None."""
        if self.spec.priority is not None:
            return self.spec.priority
        name = self.spec.priority_class_name
        return classes.get(name) if name else None


def parse_composite(body: Mapping[str, Any]) -> CompositePodGroup:
    """troupe's own kind. Raises pydantic.ValidationError."""
    return CompositePodGroup.model_validate(body)
