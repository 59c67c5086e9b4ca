"""PodTopologySpreadArgs: `defaultingType` and `defaultConstraints`,
validated as upstream's ValidatePodTopologySpreadArgs (with its messages;
the field path comes from the configuration loader)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from ...api.config import ArgsModel, PluginArgs, field_errors
from ...api.records import TopologySpreadConstraint
from .common import LABEL_HOSTNAME, LABEL_ZONE, SCHEDULE_ANYWAY

SYSTEM_DEFAULTING = "System"

SYSTEM_DEFAULT_CONSTRAINTS: tuple[TopologySpreadConstraint, ...] = (
    TopologySpreadConstraint(
        max_skew=3, topology_key=LABEL_HOSTNAME, when_unsatisfiable=SCHEDULE_ANYWAY, selector=None
    ),
    TopologySpreadConstraint(max_skew=5, topology_key=LABEL_ZONE, when_unsatisfiable=SCHEDULE_ANYWAY, selector=None),
)


class DefaultConstraint(ArgsModel):
    """A v1 TopologySpreadConstraint without a selector: the selector is
    deduced for each pod (its PodGroup in troupe)."""

    max_skew: int = Field(alias="maxSkew")
    topology_key: str = Field(alias="topologyKey")
    when_unsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"] = Field(alias="whenUnsatisfiable")
    label_selector: dict[str, Any] | None = Field(default=None, alias="labelSelector")
    min_domains: int | None = Field(default=None, alias="minDomains")
    node_affinity_policy: Literal["Honor", "Ignore"] = Field(default="Honor", alias="nodeAffinityPolicy")
    node_taints_policy: Literal["Honor", "Ignore"] = Field(default="Ignore", alias="nodeTaintsPolicy")
    match_label_keys: list[str] = Field(default_factory=list, alias="matchLabelKeys")

    @field_validator("max_skew")
    @classmethod
    def _max_skew(cls, max_skew: int) -> int:
        if max_skew <= 0:
            raise ValueError(f"invalid value {max_skew}: not in valid range (0, inf)")
        return max_skew

    @field_validator("topology_key")
    @classmethod
    def _topology_key(cls, key: str) -> str:
        if not key:
            raise ValueError("can not be empty")
        return key

    @field_validator("label_selector")
    @classmethod
    def _no_selector(cls, selector: dict[str, Any] | None) -> None:
        if selector is not None:
            raise ValueError("constraint must not define a selector, as they deduced for each pod")
        return None

    def constraint(self) -> TopologySpreadConstraint:
        return TopologySpreadConstraint(
            max_skew=self.max_skew,
            topology_key=self.topology_key,
            when_unsatisfiable=self.when_unsatisfiable,
            selector=None,
            min_domains=self.min_domains,
            node_affinity_policy=self.node_affinity_policy,
            node_taints_policy=self.node_taints_policy,
            match_label_keys=tuple(self.match_label_keys),
        )


class PodTopologySpreadArgs(PluginArgs):
    default_constraints: list[DefaultConstraint] = Field(default_factory=list, alias="defaultConstraints")
    defaulting_type: Literal["System", "List"] = Field(default="System", alias="defaultingType")

    @field_validator("default_constraints")
    @classmethod
    def _not_repeated(cls, constraints: list[DefaultConstraint]) -> list[DefaultConstraint]:
        """Upstream validateConstraintNotRepeat: one constraint per (topologyKey, whenUnsatisfiable)."""
        seen: set[tuple[str, str]] = set()
        problems = []
        for i, c in enumerate(constraints):
            pair = (c.topology_key, c.when_unsatisfiable)
            if pair in seen:
                problems.append(((i,), f"duplicate value '{{{pair[0]}, {pair[1]}}}'"))
            seen.add(pair)
        if problems:
            raise field_errors(*problems)
        return constraints

    @model_validator(mode="after")
    def _system_has_no_constraints(self) -> PodTopologySpreadArgs:
        if self.defaulting_type == SYSTEM_DEFAULTING and self.default_constraints:
            raise field_errors((("defaultingType",), "invalid value 'System': when .defaultConstraints are not empty"))
        return self

    def resolved_defaults(self) -> tuple[TopologySpreadConstraint, ...]:
        """The constraints for pods without their own: upstream's system
        defaults under System, `defaultConstraints` under List."""
        if self.defaulting_type == SYSTEM_DEFAULTING:
            return SYSTEM_DEFAULT_CONSTRAINTS
        return tuple(c.constraint() for c in self.default_constraints)
