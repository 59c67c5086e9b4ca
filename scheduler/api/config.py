"""The scheduler's configuration file, shaped like KubeSchedulerConfiguration.

    apiVersion: scheduling.troupe.dev/v1alpha1
    kind: SchedulerConfiguration
    profiles:
    - schedulerName: troupe-scheduler
      plugins:
        score:
          disabled: [{name: TaintToleration}]
      pluginConfig:
      - name: NodeResourcesFit
        args: {...}

Unknown fields are errors (a typo must not silently fall back to a default).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .constants import DEFAULT_SCHEDULER_NAME

CONFIG_API_VERSION = "scheduling.troupe.dev/v1alpha1"

EXTENSION_POINTS = (
    "preEnqueue",
    "preFilter",
    "filter",
    "postFilter",
    "score",
    "permit",
    "placementGenerate",
    "placementScore",
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class PluginRef(_Strict):
    name: str = Field(min_length=1)
    weight: int | None = Field(default=None, ge=1, le=100)


class PluginSet(_Strict):
    enabled: list[PluginRef] = Field(default_factory=list)
    disabled: list[PluginRef] = Field(default_factory=list)


class Plugins(_Strict):
    pre_enqueue: PluginSet = Field(default_factory=PluginSet, alias="preEnqueue")
    pre_filter: PluginSet = Field(default_factory=PluginSet, alias="preFilter")
    filter: PluginSet = Field(default_factory=PluginSet)
    post_filter: PluginSet = Field(default_factory=PluginSet, alias="postFilter")
    score: PluginSet = Field(default_factory=PluginSet)
    permit: PluginSet = Field(default_factory=PluginSet)
    placement_generate: PluginSet = Field(default_factory=PluginSet, alias="placementGenerate")
    placement_score: PluginSet = Field(default_factory=PluginSet, alias="placementScore")

    def point(self, name: str) -> PluginSet:
        return getattr(self, {
            "preEnqueue": "pre_enqueue",
            "preFilter": "pre_filter",
            "postFilter": "post_filter",
            "placementGenerate": "placement_generate",
            "placementScore": "placement_score",
        }.get(name, name))


class PluginConfig(_Strict):
    name: str
    args: dict[str, Any] = Field(default_factory=dict)


class Profile(_Strict):
    scheduler_name: str = Field(default=DEFAULT_SCHEDULER_NAME, alias="schedulerName", min_length=1)
    # Overrides the top-level percentageOfNodesToScore for this profile.
    percentage_of_nodes_to_score: int | None = Field(default=None, ge=0, le=100, alias="percentageOfNodesToScore")
    plugins: Plugins = Field(default_factory=Plugins)
    plugin_config: list[PluginConfig] = Field(default_factory=list, alias="pluginConfig")

    def args_for(self, plugin: str) -> dict[str, Any]:
        for pc in self.plugin_config:
            if pc.name == plugin:
                return pc.args
        return {}


class QueueConfig(_Strict):
    pod_initial_backoff_seconds: float = Field(default=1.0, gt=0, alias="podInitialBackoffSeconds")
    pod_max_backoff_seconds: float = Field(default=10.0, gt=0, alias="podMaxBackoffSeconds")
    # Upstream podMaxInUnschedulablePodsDuration: a group no event helped is retried after this.
    max_unschedulable_seconds: float = Field(default=300.0, gt=0, alias="maxUnschedulableSeconds")

    @model_validator(mode="after")
    def _ordered(self) -> "QueueConfig":
        if self.pod_max_backoff_seconds < self.pod_initial_backoff_seconds:
            raise ValueError("podMaxBackoffSeconds must be >= podInitialBackoffSeconds")
        return self


class ClientConnection(_Strict):
    qps: float = Field(default=50.0, gt=0)
    burst: int = Field(default=100, ge=1)
    bind_concurrency: int = Field(default=16, ge=1, alias="bindConcurrency")


class SchedulerConfiguration(_Strict):
    api_version: Literal["scheduling.troupe.dev/v1alpha1"] = Field(default=CONFIG_API_VERSION, alias="apiVersion")
    kind: Literal["SchedulerConfiguration"] = "SchedulerConfiguration"
    profiles: list[Profile] = Field(default_factory=lambda: [Profile()], min_length=1)
    # Upstream semantics: 0 = adaptive (50% at 0 nodes, down to 5% at 5625+), at least 100 nodes.
    percentage_of_nodes_to_score: int = Field(default=0, ge=0, le=100, alias="percentageOfNodesToScore")
    queue: QueueConfig = Field(default_factory=QueueConfig)
    client_connection: ClientConnection = Field(default_factory=ClientConnection, alias="clientConnection")
    health_bind_address: str = Field(default="0.0.0.0:10251", alias="healthBindAddress")

    @model_validator(mode="after")
    def _unique_names(self) -> "SchedulerConfiguration":
        for p in self.profiles:
            if p.percentage_of_nodes_to_score is None:
                p.percentage_of_nodes_to_score = self.percentage_of_nodes_to_score
        names = [p.scheduler_name for p in self.profiles]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"profiles: schedulerName must be unique, repeated: {', '.join(dupes)}")
        return self


class ConfigError(Exception):
    """The configuration file cannot be used; the message names the field."""


def load_config(path: str | Path | None) -> SchedulerConfiguration:
    if path is None:
        return SchedulerConfiguration()
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping (a SchedulerConfiguration), got {type(raw).__name__}")
    try:
        return SchedulerConfiguration.model_validate(raw)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
            msg = err["msg"]
            if err["type"] == "literal_error":
                msg += f" (got {err.get('input')!r})"
            lines.append(f"  {loc}: {msg}")
        raise ConfigError(f"{path}: invalid configuration:\n" + "\n".join(lines)) from None
