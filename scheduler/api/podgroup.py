"""pydantic models of PodGroup and Workload (scheduling.troupe.dev/v1alpha2).

They mirror upstream scheduling.k8s.io/v1alpha2. The CRD schema rejects bad
objects at admission; these models re-validate what the scheduler reads so
that an object written around the schema (an older CRD, a direct etcd write)
becomes a `SchedulerError` on the group, not a crash.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from .constants import API_VERSION
from .records import GroupKey
from .subgroup_policy import SubGroupPolicy


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
    # The CompositePodGroup this group is a child of (same namespace, same
    # API group; api/composite.py); None: the group is not part of a tree.
    parent_composite_pod_group_name: str | None = Field(default=None, alias="parentCompositePodGroupName", min_length=1)


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

    def key(self, api_version: str, name: str = "") -> GroupKey:
        """How a group kind's object is keyed: namespace, name and API group;
        with `name`, the key of that object beside it (its parent)."""
        return GroupKey(self.namespace, name or self.name, api_version.partition("/")[0])


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
    # Volcano's subGroupPolicy: the group is scheduled as a tree of gangs
    # troupe makes of it (api/subgroups.py).
    sub_groups: tuple[SubGroupPolicy, ...] = ()
    # A group troupe made, with no API object of its own (a Volcano
    # sub-group): the key of the PodGroup it was made from, which takes its
    # status.
    made_from: GroupKey | None = None

    @property
    def key(self) -> GroupKey:
        return self.metadata.key(self.api_version)

    @property
    def parent_key(self) -> GroupKey | None:
        """The CompositePodGroup this group is a child of (same namespace and API group)."""
        parent = self.spec.parent_composite_pod_group_name
        return self.metadata.key(self.api_version, parent) if parent else None

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


# A Workload's tree of templates (upstream scheduling.k8s.io v1alpha3/v1beta1
# WorkloadMaxTreeDepth): CompositePodGroupTemplates at most 3 levels deep,
# PodGroupTemplates as leaves at any of levels 1 to 4.
MAX_TEMPLATE_DEPTH = 4
MAX_TEMPLATES = 8  # per list (upstream WorkloadMaxPodGroupTemplates)


class GangCompositeSchedulingPolicy(_Model):
    min_group_count: int = Field(alias="minGroupCount", ge=1)


class CompositeSchedulingPolicy(_Model):
    """A CompositePodGroup's policy: `basic: {}` or `gang: {minGroupCount}`
    (the number of its children, a basic child counting as one, that must be
    feasible together)."""

    basic: BasicSchedulingPolicy | None = None
    gang: GangCompositeSchedulingPolicy | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> CompositeSchedulingPolicy:
        if (self.basic is None) == (self.gang is None):
            raise ValueError("exactly one of basic or gang must be set")
        return self


def composite_disruption_mode(value: Any) -> Any:
    """The v1alpha3 wire form of a CompositePodGroup's disruptionMode
    (`{single: {}}` / `{all: {}}`) as troupe's (`Pod` / `PodGroup`); troupe's
    own form passes as it is."""
    if isinstance(value, Mapping):
        if set(value) == {"single"}:
            return "Pod"
        if set(value) == {"all"}:
            return "PodGroup"
        raise ValueError("exactly one of single or all must be set")
    if value not in ("Pod", "PodGroup"):
        raise ValueError("must be {single: {}} or {all: {}}")
    return value


CompositeDisruptionMode = Annotated[DisruptionMode, BeforeValidator(composite_disruption_mode)]


class _CompositePolicy(_Model):
    """What a CompositePodGroup asks for: the fields its spec shares with a
    Workload's compositePodGroupTemplates[]."""

    scheduling_policy: CompositeSchedulingPolicy = Field(alias="schedulingPolicy")
    scheduling_constraints: SchedulingConstraints | None = Field(default=None, alias="schedulingConstraints")
    disruption_mode: CompositeDisruptionMode | None = Field(default=None, alias="disruptionMode")
    priority_class_name: str | None = Field(default=None, alias="priorityClassName")
    priority: int | None = None
    preemption_policy: PreemptionPolicy | None = Field(default=None, alias="preemptionPolicy")


class CompositePodGroupTemplate(_CompositePolicy, _NameField):
    """A template for CompositePodGroups; its children are nested in it
    (upstream has no references between templates)."""

    pod_group_templates: list[PodGroupTemplate] = Field(
        default_factory=list, alias="podGroupTemplates", max_length=MAX_TEMPLATES
    )
    composite_pod_group_templates: list[CompositePodGroupTemplate] = Field(
        default_factory=list, alias="compositePodGroupTemplates", max_length=MAX_TEMPLATES
    )

    @model_validator(mode="after")
    def _has_a_child(self) -> CompositePodGroupTemplate:
        if not self.pod_group_templates and not self.composite_pod_group_templates:
            raise ValueError("must have at least one child in podGroupTemplates or compositePodGroupTemplates")
        return self


def _walk(
    templates: list[CompositePodGroupTemplate], where: str, depth: int
) -> Iterator[tuple[str, int, PodGroupTemplate | CompositePodGroupTemplate]]:
    """Every template under `templates` with its path and level (1: top)."""
    for i, composite in enumerate(templates):
        path = f"{where}compositePodGroupTemplates[{i}]"
        yield path, depth, composite
        for j, leaf in enumerate(composite.pod_group_templates):
            yield f"{path}.podGroupTemplates[{j}]", depth + 1, leaf
        yield from _walk(composite.composite_pod_group_templates, f"{path}.", depth + 1)


class WorkloadSpec(_Model):
    # Exactly one of the two (upstream's union); an absent list is empty.
    pod_group_templates: list[PodGroupTemplate] = Field(
        default_factory=list, alias="podGroupTemplates", min_length=1, max_length=MAX_TEMPLATES
    )
    composite_pod_group_templates: list[CompositePodGroupTemplate] = Field(
        default_factory=list, alias="compositePodGroupTemplates", min_length=1, max_length=MAX_TEMPLATES
    )

    @model_validator(mode="after")
    def _one_tree(self) -> WorkloadSpec:
        if bool(self.pod_group_templates) == bool(self.composite_pod_group_templates):
            raise ValueError("exactly one of podGroupTemplates or compositePodGroupTemplates must be set")
        seen: dict[str, str] = {}
        for path, depth, t in self.templates():
            if isinstance(t, CompositePodGroupTemplate) and depth >= MAX_TEMPLATE_DEPTH:
                raise ValueError(f"{path}: maximum template hierarchy depth is {MAX_TEMPLATE_DEPTH}")
            if t.name in seen:
                raise ValueError(
                    f"{path}.name: duplicate template name {t.name!r} (also {seen[t.name]}): "
                    "template names must be unique across the Workload"
                )
            seen[t.name] = path
        return self

    def templates(self) -> Iterator[tuple[str, int, PodGroupTemplate | CompositePodGroupTemplate]]:
        """Every template of the tree, parents before children, with its path
        (`compositePodGroupTemplates[0].podGroupTemplates[1]`) and level (1: top)."""
        for i, leaf in enumerate(self.pod_group_templates):
            yield f"podGroupTemplates[{i}]", 1, leaf
        yield from _walk(self.composite_pod_group_templates, "", 1)


class Workload(_Model):
    api_version: str = Field(default=API_VERSION, alias="apiVersion")
    metadata: ObjectMeta
    spec: WorkloadSpec

    @property
    def key(self) -> GroupKey:
        """Keyed as PodGroups are: namespace, name, API group."""
        return self.metadata.key(self.api_version)

    def template(self, name: str) -> PodGroupTemplate | None:
        """The PodGroupTemplate `name`, at any level of the tree."""
        found = (t for _, _, t in self.spec.templates() if isinstance(t, PodGroupTemplate) and t.name == name)
        return next(found, None)

    def composite_template(self, name: str) -> CompositePodGroupTemplate | None:
        """The CompositePodGroupTemplate `name`, at any level of the tree."""
        found = (t for _, _, t in self.spec.templates() if isinstance(t, CompositePodGroupTemplate) and t.name == name)
        return next(found, None)


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
