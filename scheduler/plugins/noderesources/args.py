"""NodeResourcesFitArgs and NodeResourcesBalancedAllocationArgs: upstream's
config/v1 types, defaulted as the v1 API defaults them and validated as
ValidateNodeResourcesFitArgs / ValidateNodeResourcesBalancedAllocationArgs
(with their messages; the field path comes from the configuration loader)."""

from __future__ import annotations

import re
from typing import Final, Literal

from pydantic import Field, field_validator, model_validator

from ...api.config import ArgsModel, PluginArgs, field_errors
from ...api.resources import CPU, MEMORY

MAX_CUSTOM_PRIORITY_SCORE = 10  # upstream config.MaxCustomPriorityScore: shape scores are 0..10
MAX_UTILIZATION = 100
MAX_RESOURCE_WEIGHT = 100

LEAST_ALLOCATED: Final = "LeastAllocated"
MOST_ALLOCATED: Final = "MostAllocated"
REQUESTED_TO_CAPACITY_RATIO: Final = "RequestedToCapacityRatio"
ScoringStrategyType = Literal["LeastAllocated", "MostAllocated", "RequestedToCapacityRatio"]


_LABEL_KEY_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_KEY_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
    "character (e.g. 'MyName', or 'my.name', or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)


def label_key_errors(value: str) -> list[str]:
    """Upstream validation.IsQualifiedName (metav1validation.ValidateLabelName)."""
    parts = value.split("/")
    if len(parts) > 2:
        return [
            "a valid label key "
            + _LABEL_KEY_MSG
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    errs = []
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errs.append("prefix part must be non-empty")
        elif len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix):
            errs.append(
                "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
                "'-' or '.', and must start and end with an alphanumeric character"
            )
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part must be no more than 63 bytes")
    if not _LABEL_KEY_NAME.match(name):
        errs.append("name part " + _LABEL_KEY_MSG)
    return errs


class ResourceSpec(ArgsModel):
    """A resource the scores read and its weight (missing or 0 is 1, as the v1 API defaults it)."""

    name: str = Field(min_length=1)
    weight: int = 1

    @field_validator("weight")
    @classmethod
    def _zero_is_one(cls, weight: int) -> int:
        return weight or 1


DEFAULT_RESOURCES = (ResourceSpec(name=CPU, weight=1), ResourceSpec(name=MEMORY, weight=1))


class UtilizationShapePoint(ArgsModel):
    utilization: int = 0
    score: int = 0

    @field_validator("utilization")
    @classmethod
    def _utilization_range(cls, utilization: int) -> int:
        if not 0 <= utilization <= MAX_UTILIZATION:
            raise ValueError(f"invalid value {utilization}: not in valid range [0, {MAX_UTILIZATION}]")
        return utilization

    @field_validator("score")
    @classmethod
    def _score_range(cls, score: int) -> int:
        if not 0 <= score <= MAX_CUSTOM_PRIORITY_SCORE:
            raise ValueError(f"invalid value {score}: not in valid range [0, {MAX_CUSTOM_PRIORITY_SCORE}]")
        return score


class RequestedToCapacityRatioParam(ArgsModel):
    shape: list[UtilizationShapePoint] = Field(default_factory=list, validate_default=True)

    @field_validator("shape")
    @classmethod
    def _function_shape(cls, shape: list[UtilizationShapePoint]) -> list[UtilizationShapePoint]:
        """Upstream validateFunctionShape (the ranges are the points' own)."""
        if not shape:
            raise ValueError("at least one point must be specified")
        for i in range(1, len(shape)):
            if shape[i - 1].utilization >= shape[i].utilization:
                raise field_errors(
                    (
                        (i, "utilization"),
                        f"invalid value {shape[i].utilization}: values must be sorted in increasing order",
                    )
                )
        return shape


class ScoringStrategy(ArgsModel):
    # troupe: a missing type is LeastAllocated (upstream's v1 API rejects it).
    type: ScoringStrategyType = LEAST_ALLOCATED
    resources: list[ResourceSpec] = Field(default_factory=list, validate_default=True)
    requested_to_capacity_ratio: RequestedToCapacityRatioParam | None = Field(
        default=None, alias="requestedToCapacityRatio"
    )

    @field_validator("resources")
    @classmethod
    def _weights(cls, resources: list[ResourceSpec]) -> list[ResourceSpec]:
        """None given: cpu and memory (v1 defaulting); then upstream's validateResources."""
        bad = [
            (
                (i, "weight"),
                f"invalid value {r.weight}: resource weight of {r.name} not in valid range (0, {MAX_RESOURCE_WEIGHT}]",
            )
            for i, r in enumerate(resources)
            if not 0 < r.weight <= MAX_RESOURCE_WEIGHT
        ]
        if bad:
            raise field_errors(*bad)
        return resources or list(DEFAULT_RESOURCES)

    @model_validator(mode="after")
    def _ratio_only_with_its_type(self) -> ScoringStrategy:
        at = ("requestedToCapacityRatio",)
        if self.type == REQUESTED_TO_CAPACITY_RATIO and self.requested_to_capacity_ratio is None:
            raise field_errors((at, "must be specified when type is RequestedToCapacityRatio"))
        if self.type != REQUESTED_TO_CAPACITY_RATIO and self.requested_to_capacity_ratio is not None:
            raise field_errors((at, "must be nil when type is not RequestedToCapacityRatio"))
        return self

    @property
    def shape(self) -> list[tuple[int, int]]:
        """The RequestedToCapacityRatio shape as (utilization, score) points."""
        ratio = self.requested_to_capacity_ratio
        return [(p.utilization, p.score) for p in ratio.shape] if ratio is not None else []


PlacementScoringType = Literal["MostAllocated", "LeastAllocated"]


class PlacementScoringStrategy(ArgsModel):
    """troupe's: how NodeResourcesFit scores a placement (PlacementScore).
    MostAllocated packs (the placement left with the least free room wins, so
    large domains stay whole for large gangs); LeastAllocated spreads (the
    most free room wins). The resources and weights are scoringStrategy's."""

    type: PlacementScoringType = MOST_ALLOCATED


class NodeResourcesFitArgs(PluginArgs):
    ignored_resources: list[str] = Field(default_factory=list, alias="ignoredResources")
    ignored_resource_groups: list[str] = Field(default_factory=list, alias="ignoredResourceGroups")
    scoring_strategy: ScoringStrategy = Field(default_factory=ScoringStrategy, alias="scoringStrategy")
    placement_scoring_strategy: PlacementScoringStrategy = Field(
        default_factory=PlacementScoringStrategy, alias="placementScoringStrategy"
    )

    @field_validator("ignored_resources")
    @classmethod
    def _resource_names(cls, names: list[str]) -> list[str]:
        problems = [
            ((i,), f"invalid value {name!r}: {msg}") for i, name in enumerate(names) for msg in label_key_errors(name)
        ]
        if problems:
            raise field_errors(*problems)
        return names

    @field_validator("ignored_resource_groups")
    @classmethod
    def _group_names(cls, groups: list[str]) -> list[str]:
        problems = [
            ((i,), f"invalid value {group!r}: {msg}")
            for i, group in enumerate(groups)
            for msg in (["resource group name can't contain '/'"] if "/" in group else []) + label_key_errors(group)
        ]
        if problems:
            raise field_errors(*problems)
        return groups


class NodeResourcesBalancedAllocationArgs(PluginArgs):
    resources: list[ResourceSpec] = Field(default_factory=list, validate_default=True)

    @field_validator("resources")
    @classmethod
    def _resources(cls, resources: list[ResourceSpec]) -> list[ResourceSpec]:
        """None given: cpu and memory (v1 defaulting); no resource twice and
        every weight 1 (after 0 became 1), as upstream."""
        problems = []
        seen: set[str] = set()
        for i, r in enumerate(resources):
            if r.name in seen:
                problems.append(((i, "name"), f"duplicate value {r.name!r}"))
            seen.add(r.name)
            if r.weight != 1:
                problems.append(((i, "weight"), f"invalid value {r.weight}: must be 1"))
        if problems:
            raise field_errors(*problems)
        return resources or list(DEFAULT_RESOURCES)
