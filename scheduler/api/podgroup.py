"""pydantic models of PodGroup and Workload (scheduling.troupe.dev/v1alpha2).

They mirror upstream scheduling.k8s.io/v1alpha2. The CRD schema rejects bad
objects at admission; these models re-validate what the scheduler reads so
that an object written around the schema (an older CRD, a direct etcd write)
becomes a `SchedulerError` on the group, not a crash.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .constants import API_VERSION
from .records import GroupKey


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)


class BasicSchedulingPolicy(_Model):
    pass


class GangSchedulingPolicy(_Model):
    min_count: int = Field(alias="minCount", ge=1)


class SchedulingPolicy(_Model):
    basic: BasicSchedulingPolicy | None = None
    gang: GangSchedulingPolicy | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> SchedulingPolicy:
        if (self.basic is None) == (self.gang is None):
            raise ValueError("exactly one of basic or gang must be set")
        return self


class TopologyConstraint(_Model):
    key: str = Field(min_length=1)


# Upstream allows one topology key. troupe takes up to MAX_TOPOLOGY_LEVELS,
# most preferred first (rack, then block, then zone): the group is placed in
# one domain of the first key that has a fitting domain; the last is required.
MAX_TOPOLOGY_LEVELS = 4


class SchedulingConstraints(_Model):
    topology: list[TopologyConstraint] = Field(default_factory=list, max_length=MAX_TOPOLOGY_LEVELS)

    @model_validator(mode="after")
    def _unique_keys(self) -> SchedulingConstraints:
        keys = [t.key for t in self.topology]
        if len(set(keys)) != len(keys):
            raise ValueError("topology keys must be unique")
        return self

    @property
    def topology_keys(self) -> list[str]:
        return [t.key for t in self.topology]


class ResourceClaim(_Model):
    name: str
    resource_claim_name: str | None = Field(default=None, alias="resourceClaimName")
    resource_claim_template_name: str | None = Field(default=None, alias="resourceClaimTemplateName")

    @model_validator(mode="after")
    def _one_source(self) -> ResourceClaim:
        if (self.resource_claim_name is None) == (self.resource_claim_template_name is None):
            raise ValueError("exactly one of resourceClaimName or resourceClaimTemplateName must be set")
        return self


class WorkloadTemplateRef(_Model):
    workload_name: str = Field(alias="workloadName")
    pod_group_template_name: str = Field(alias="podGroupTemplateName")


class PodGroupTemplateRef(_Model):
    workload: WorkloadTemplateRef | None = None


DisruptionMode = Literal["Pod", "PodGroup"]
PreemptionPolicy = Literal["PreemptLowerPriority", "Never"]


class _GroupPolicy(_Model):
    """What a PodGroup asks for: the fields its spec shares with a Workload's
    podGroupTemplates[] (upstream's PodGroupSpec and PodGroupTemplate)."""

    scheduling_policy: SchedulingPolicy = Field(alias="schedulingPolicy")
    scheduling_constraints: SchedulingConstraints | None = Field(default=None, alias="schedulingConstraints")
    resource_claims: list[ResourceClaim] = Field(default_factory=list, alias="resourceClaims", max_length=4)
    disruption_mode: DisruptionMode | None = Field(default=None, alias="disruptionMode")
    priority_class_name: str | None = Field(default=None, alias="priorityClassName")
    priority: int | None = None
    # Native scheduling.k8s.io v1beta1/v1alpha3 only (troupe's CRD has no such field).
    preemption_policy: PreemptionPolicy | None = Field(default=None, alias="preemptionPolicy")


# The field each of the two has first. A mixin, listed after _GroupPolicy,
# because pydantic orders inherited fields base last to first: the field
# stays first, and validation errors keep their order.
class _TemplateRefField(_Model):
    pod_group_template_ref: PodGroupTemplateRef | None = Field(default=None, alias="podGroupTemplateRef")


class _NameField(_Model):
    name: str


class PodGroupSpec(_GroupPolicy, _TemplateRefField):
    pass


class Condition(_Model):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    observed_generation: int | None = Field(default=None, alias="observedGeneration")
    last_transition_time: str | None = Field(default=None, alias="lastTransitionTime")


class ResourceClaimStatus(_Model):
    name: str
    resource_claim_name: str | None = Field(default=None, alias="resourceClaimName")


class PodGroupStatus(_Model):
    conditions: list[Condition] = Field(default_factory=list)
    resource_claim_statuses: list[ResourceClaimStatus] = Field(default_factory=list, alias="resourceClaimStatuses")


class ObjectMeta(_Model):
    name: str
    namespace: str = "default"
    uid: str = ""
    generation: int = 0
    resource_version: str = Field(default="", alias="resourceVersion")
    creation_timestamp: str = Field(default="", alias="creationTimestamp")
    deletion_timestamp: str | None = Field(default=None, alias="deletionTimestamp")


class PodGroup(_Model):
    """troupe's PodGroup, whichever source it came from (api/sources): the
    kind's `apiVersion` says where its status goes; `problem`, set by a
    source, says what of the object troupe cannot honour (the group is then
    not scheduled: SchedulerError); `workload_ref` is for display only."""

    api_version: str = Field(default=API_VERSION, alias="apiVersion")
    metadata: ObjectMeta
    spec: PodGroupSpec
    status: PodGroupStatus = Field(default_factory=PodGroupStatus)
    problem: str | None = None
    workload_ref: str | None = None  # "<workload>/<template>" a native PodGroup names
    # What a source's PodGroup asks beyond upstream's fields (api/sources):
    # the cluster's free room it needs before it is tried (canonical units,
    # api/resources.py), and a minimum of placed pods per task (PodInfo.task).
    min_resources: dict[str, int] = Field(default_factory=dict)
    min_per_task: dict[str, int] = Field(default_factory=dict)
    # Fields of the source object troupe reads but does not honour: said in
    # every status message of the group, never silently dropped.
    ignored: tuple[str, ...] = ()
    # The source's own status fields as last read (phase, counts: api/sources).
    source_status: dict[str, Any] = Field(default_factory=dict)

    @property
    def key(self) -> GroupKey:
        return GroupKey(self.metadata.namespace, self.metadata.name, self.api_version.partition("/")[0])

    @property
    def is_gang(self) -> bool:
        return self.spec.scheduling_policy.gang is not None

    @property
    def min_count(self) -> int:
        gang = self.spec.scheduling_policy.gang
        return gang.min_count if gang else 1

    def condition(self, type_: str) -> Condition | None:
        return next((c for c in self.status.conditions if c.type == type_), None)

    def priority_in(self, classes: Mapping[str, int]) -> int | None:
        """The group's own priority: `spec.priority`, else the value of its
        `priorityClassName` (None while no such PriorityClass is known), else
        None: its pods keep their own."""
        if self.spec.priority is not None:
            return self.spec.priority
        name = self.spec.priority_class_name
        return classes.get(name) if name else None


class PodGroupTemplate(_GroupPolicy, _NameField):
    pass


class WorkloadSpec(_Model):
    pod_group_templates: list[PodGroupTemplate] = Field(alias="podGroupTemplates", min_length=1, max_length=8)


class Workload(_Model):
    api_version: str = Field(default=API_VERSION, alias="apiVersion")
    metadata: ObjectMeta
    spec: WorkloadSpec

    @property
    def key(self) -> GroupKey:
        """Keyed as PodGroups are: namespace, name, API group."""
        return GroupKey(self.metadata.namespace, self.metadata.name, self.api_version.partition("/")[0])

    def template(self, name: str) -> PodGroupTemplate | None:
        return next((t for t in self.spec.pod_group_templates if t.name == name), None)


def describe_validation_error(exc: ValidationError) -> str:
    """`spec.schedulingPolicy.gang.minCount: Input should be greater than or equal to 1`."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        parts.append(f"{loc}: {err['msg']}" if loc else err["msg"])
    return "; ".join(parts)


def parse_podgroup(body: Mapping[str, Any]) -> PodGroup:
    return PodGroup.model_validate(body)


def parse_workload(body: Mapping[str, Any]) -> Workload:
    return Workload.model_validate(body)
