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
`load_config` reports every problem of a file at once, one line each, located
from the file's top (`profiles[0].plugins.score.enabled[1].weight: ...`).

Each plugin declares the model of its args (a `PluginArgs` subclass, the
plugin's `Args`); this layer knows no plugin, so whoever holds the registry
passes the models in (`load_config(path, plugin_args=...)`,
`validate_plugin_args`) and the args' problems are located the same way
(`profiles[0].pluginConfig[1].args.scoringStrategy.type: ...`).
"""

from __future__ import annotations

import difflib
import re
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_core import InitErrorDetails, PydanticCustomError

from . import sources
from .constants import DEFAULT_SCHEDULER_NAME

EXTENSION_POINTS = (
    "preEnqueue",
    "preFilter",
    "filter",
    "postFilter",
    "score",
    "reserve",
    "permit",
    "preBind",
    "placementGenerate",
    "placementScore",
)


Loc = tuple[str | int, ...]


def format_loc(loc: Loc) -> str:
    """('profiles', 0, 'plugins') -> 'profiles[0].plugins'."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f"{'.' if out else ''}{part}"
    return out


# An error whose message names its own field(s). The message's `{at}` (and any
# other `{name}`) is a location relative to the model that raises it; pydantic
# renders it relative, load_config from the file's top.
_NAMED_ERROR = "troupe_named"


def _named_error(template: str, **where: Loc) -> PydanticCustomError:
    ctx: dict[str, Any] = {name: format_loc(loc) for name, loc in where.items()}
    ctx["troupe_template"] = template
    ctx["troupe_where"] = where
    return PydanticCustomError(_NAMED_ERROR, template, ctx)


def _number(value: float) -> str:
    return f"{value:g}"


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
    reserve: PluginSet = Field(default_factory=PluginSet)
    permit: PluginSet = Field(default_factory=PluginSet)
    pre_bind: PluginSet = Field(default_factory=PluginSet, alias="preBind")
    placement_generate: PluginSet = Field(default_factory=PluginSet, alias="placementGenerate")
    placement_score: PluginSet = Field(default_factory=PluginSet, alias="placementScore")

    def point(self, name: str) -> PluginSet:
        plugin_set: PluginSet = getattr(
            self,
            {
                "preEnqueue": "pre_enqueue",
                "preFilter": "pre_filter",
                "postFilter": "post_filter",
                "preBind": "pre_bind",
                "placementGenerate": "placement_generate",
                "placementScore": "placement_score",
            }.get(name, name),
        )
        return plugin_set


class PluginConfig(_Strict):
    name: str
    args: dict[str, Any] = Field(default_factory=dict)


class PodGroupScheduling(_Strict):
    """How a profile places a PodGroup (troupe's; upstream has no such block)."""

    # Placement: generate candidate placements (PlacementGenerate plugins, e.g.
    # one per topology domain), try the group in each, score the feasible ones
    # (PlacementScore plugins), bind into the best; a group without topology
    # constraints has the whole cluster as its one candidate. Default: the
    # default algorithm over the whole cluster only; a group with topology
    # constraints is then unschedulable (the profile cannot honour them).
    algorithm: Literal["Placement", "Default"] = "Placement"
    # When a gang whose pods differ (requests, constraints, affinity to each
    # other) does not fit in the fixed order, other orders and then a
    # backtracking search try at most this many pod placements per candidate
    # placement; a tree's cycle spends it on other child orders, then on
    # backtracking over the whole tree (docs/trees.md). 0 turns the search off.
    search_steps: int = Field(default=2000, ge=0, alias="searchSteps")


class Autoscaling(_Strict):
    """What a profile tells cluster autoscalers (docs/autoscaling.md)."""

    # Each pod of a gang (minCount > 1) or a tree is bound carrying
    # karpenter.sh/do-not-disrupt: "true" and
    # cluster-autoscaler.kubernetes.io/safe-to-evict: "false" (set by its
    # Binding, no extra write): consolidation and scale-down then leave its
    # node alone rather than evict one member and restart the whole job.
    protect_running: bool = Field(default=True, alias="protectRunning")


class Profile(_Strict):
    scheduler_name: str = Field(default=DEFAULT_SCHEDULER_NAME, alias="schedulerName", min_length=1)
    # Overrides the top-level percentageOfNodesToScore for this profile.
    percentage_of_nodes_to_score: int | None = Field(default=None, ge=0, le=100, alias="percentageOfNodesToScore")
    plugins: Plugins = Field(default_factory=Plugins)
    plugin_config: list[PluginConfig] = Field(default_factory=list, alias="pluginConfig")
    pod_group_scheduling: PodGroupScheduling = Field(default_factory=PodGroupScheduling, alias="podGroupScheduling")
    autoscaling: Autoscaling = Field(default_factory=Autoscaling)

    @model_validator(mode="after")
    def _one_config_per_plugin(self) -> Profile:
        first: dict[str, int] = {}
        for i, pc in enumerate(self.plugin_config):
            if pc.name in first:  # upstream: "repeated config for plugin X"
                raise _named_error(
                    f"{{at}}: repeated config for plugin {pc.name!r} (already configured by {{first}})",
                    at=("pluginConfig", i, "name"),
                    first=("pluginConfig", first[pc.name]),
                )
            first[pc.name] = i
        return self


class QueueConfig(_Strict):
    pod_initial_backoff_seconds: float = Field(default=1.0, gt=0, alias="podInitialBackoffSeconds")
    pod_max_backoff_seconds: float = Field(default=10.0, gt=0, alias="podMaxBackoffSeconds")
    # Upstream podMaxInUnschedulablePodsDuration: a group no event helped is retried after this.
    max_unschedulable_seconds: float = Field(default=300.0, gt=0, alias="maxUnschedulableSeconds")

    @model_validator(mode="after")
    def _ordered(self) -> QueueConfig:
        if self.pod_max_backoff_seconds < self.pod_initial_backoff_seconds:
            raise _named_error(
                f"{{at}} ({_number(self.pod_max_backoff_seconds)}) must be >= "
                f"podInitialBackoffSeconds ({_number(self.pod_initial_backoff_seconds)})",
                at=("podMaxBackoffSeconds",),
            )
        return self


class ClientConnection(_Strict):
    qps: float = Field(default=50.0, gt=0)
    burst: int = Field(default=100, ge=1)
    bind_concurrency: int = Field(default=16, ge=1, alias="bindConcurrency")


class WaitingReport(_Strict):
    """When a unit held by PreEnqueue (a gang still short of minCount) is told why it waits."""

    # A gang whose pods all arrive within this time costs no status write at all.
    delay_seconds: float = Field(default=1.0, ge=0, alias="delaySeconds")
    # While pods keep arriving, each pod is told at the latest this long after the unit was first held.
    max_delay_seconds: float = Field(default=30.0, ge=0, alias="maxDelaySeconds")


class WatchConfig(_Strict):
    """Watches of pods, nodes, PodGroups and Workloads."""

    # The API server ends each watch after this; the watch resumes from its last resourceVersion.
    timeout_seconds: int = Field(default=300, ge=1, alias="timeoutSeconds")
    # A watch connection silent this long is dead (a half-open connection): it is reopened.
    read_timeout_seconds: float = Field(default=330.0, gt=0, alias="readTimeoutSeconds")
    # A group source's API the cluster does not serve (native,
    # scheduler-plugins, Volcano) is looked for again this often, so it is
    # picked up without a restart once served.
    discovery_seconds: float = Field(default=60.0, gt=0, alias="discoverySeconds")

    @model_validator(mode="after")
    def _read_after_server(self) -> WatchConfig:
        if self.read_timeout_seconds <= self.timeout_seconds:
            raise _named_error(
                f"{{at}} ({_number(self.read_timeout_seconds)}) must be > timeoutSeconds "
                f"({self.timeout_seconds}): the server closes a quiet watch first",
                at=("readTimeoutSeconds",),
            )
        return self


_DURATION = re.compile(r"^(\d+(\.\d+)?(ms|s|m|h))+$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: object) -> float:
    """A Go duration as upstream's config has them ("15s", "1m30s", "500ms"),
    or a number of seconds; returns seconds."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and _DURATION.match(value):
        return sum(float(n) * _UNIT_SECONDS[u] for n, u in _DURATION_PART.findall(value))
    raise ValueError(f"not a duration (e.g. 15s, 500ms, 1m30s): {value!r}")


class LeaderElection(_Strict):
    """Upstream's leaderElection block (componentbaseconfig): one replica at a
    time schedules, holding a coordination.k8s.io Lease; the others keep their
    cache warm and take over when the lease expires or is released."""

    leader_elect: bool = Field(default=False, alias="leaderElect")
    lease_duration: float = Field(default=15.0, alias="leaseDuration")
    renew_deadline: float = Field(default=10.0, alias="renewDeadline")
    retry_period: float = Field(default=2.0, alias="retryPeriod")
    resource_lock: Literal["leases"] = Field(default="leases", alias="resourceLock")
    resource_name: str = Field(default="troupe-scheduler", min_length=1, alias="resourceName")
    resource_namespace: str = Field(default="troupe-system", min_length=1, alias="resourceNamespace")

    @field_validator("lease_duration", "renew_deadline", "retry_period", mode="before")
    @classmethod
    def _duration(cls, value: object) -> float:
        seconds = parse_duration(value)
        if seconds <= 0:
            raise ValueError("must be > 0")
        return seconds

    @model_validator(mode="after")
    def _ordered(self) -> LeaderElection:
        # As client-go: the leader gives up (renewDeadline) before its lease can expire.
        if self.renew_deadline >= self.lease_duration:
            raise _named_error(
                f"{{at}} ({_number(self.renew_deadline)}s) must be < leaseDuration ({_number(self.lease_duration)}s)",
                at=("renewDeadline",),
            )
        if self.retry_period >= self.renew_deadline:
            raise _named_error(
                f"{{at}} ({_number(self.retry_period)}s) must be < renewDeadline ({_number(self.renew_deadline)}s)",
                at=("retryPeriod",),
            )
        return self


# The group sources `groupSources` can name (api/sources/registry.py); the
# shipped ones, for documentation. A profile whose schedulerName an operator
# hard-codes on pods whose PodGroups it writes for another gang scheduler
# (KubeRay v1.5.0 controllers/ray/batchscheduler; the training-operator's
# --gang-scheduler-name) needs the source that reads those PodGroups on, or it
# would place the operator's gangs one pod at a time (docs/operators.md,
# examples/config-ecosystem.yaml): `Source.scheduler_names`.
GROUP_SOURCE_NAMES: tuple[str, ...] = sources.optional_names()


class SchedulerConfiguration(_Strict):
    api_version: Literal["scheduling.troupe.dev/v1alpha1"] = Field(
        default="scheduling.troupe.dev/v1alpha1", alias="apiVersion"
    )
    kind: Literal["SchedulerConfiguration"] = "SchedulerConfiguration"
    profiles: list[Profile] = Field(default_factory=lambda: [Profile()], min_length=1)
    # Upstream semantics: 0 = adaptive (50% at 0 nodes, down to 5% at 5625+), at least 100 nodes.
    percentage_of_nodes_to_score: int = Field(default=0, ge=0, le=100, alias="percentageOfNodesToScore")
    queue: QueueConfig = Field(default_factory=QueueConfig)
    client_connection: ClientConnection = Field(default_factory=ClientConnection, alias="clientConnection")
    health_bind_address: str = Field(default="0.0.0.0:10251", alias="healthBindAddress")
    # /healthz fails when work waits and no scheduling cycle ran for this long.
    stall_seconds: float = Field(default=60.0, gt=0, alias="stallSeconds")
    waiting_report: WaitingReport = Field(default_factory=WaitingReport, alias="waitingReport")
    watch: WatchConfig = Field(default_factory=WatchConfig)
    leader_election: LeaderElection = Field(default_factory=LeaderElection, alias="leaderElection")
    # The group sources read besides troupe's own PodGroups and Jobs
    # (docs/scheduling.md); a source whose API the cluster does not serve is off
    # with one log line whatever this says.
    group_sources: list[str] = Field(default_factory=lambda: list(sources.optional_names()), alias="groupSources")

    @model_validator(mode="after")
    def _known_sources(self) -> SchedulerConfiguration:
        known = sources.optional_names()
        for i, name in enumerate(self.group_sources):
            if name not in known:
                raise _named_error(
                    f"{{at}}: {name!r} is not a group source troupe reads (it reads {', '.join(map(repr, known))})",
                    at=("groupSources", i),
                )
        return self

    @model_validator(mode="after")
    def _unique_names(self) -> SchedulerConfiguration:
        for p in self.profiles:
            if p.percentage_of_nodes_to_score is None:
                p.percentage_of_nodes_to_score = self.percentage_of_nodes_to_score
        first: dict[str, int] = {}
        for i, p in enumerate(self.profiles):
            if p.scheduler_name in first:
                raise _named_error(
                    f"{{at}}: duplicate value {p.scheduler_name!r} (already the schedulerName of {{first}})",
                    at=("profiles", i, "schedulerName"),
                    first=("profiles", first[p.scheduler_name]),
                )
            first[p.scheduler_name] = i
        return self

    @model_validator(mode="after")
    def _operator_profiles_read_their_groups(self) -> SchedulerConfiguration:
        for i, p in enumerate(self.profiles):
            source = sources.scheduler_names().get(p.scheduler_name)
            if source is not None and source not in self.group_sources:
                raise _named_error(
                    f"{{at}}: {p.scheduler_name!r} is the schedulerName operators set on pods whose PodGroups "
                    f"the group source {source!r} reads, but {{sources}} leaves it out: this profile would place "
                    f"those pods one at a time, not as gangs; add {source!r} to {{sources}} or remove this profile",
                    at=("profiles", i, "schedulerName"),
                    sources=("groupSources",),
                )
        return self


# ------------------------------------------------------------ plugin args


class ArgsModel(BaseModel):
    """Base of a plugin's args model and of its parts. Types are strict, as
    upstream decodes args (no "1" for 1, no "yes" for true); unknown keys are
    errors; a null value leaves the field at its default (Go's nil); keys are
    the camelCase aliases of upstream's ...Args."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _null_is_unset(cls, data: Any) -> Any:
        if isinstance(data, dict) and None in data.values():
            fields = {key for name, info in cls.model_fields.items() for key in (name, info.alias) if key}
            data = {k: v for k, v in data.items() if v is not None or k not in fields}  # an unknown key stays an error
        return data


class PluginArgs(ArgsModel):
    """A plugin's args (`Plugin.Args`); this base takes none. The `apiVersion`
    and `kind` keys upstream allows in args are accepted and ignored."""

    @model_validator(mode="before")
    @classmethod
    def _type_meta(cls, data: Any) -> Any:
        if isinstance(data, dict) and ("apiVersion" in data or "kind" in data):
            data = {k: v for k, v in data.items() if k not in ("apiVersion", "kind")}
        return data


# Plugin name -> the model of its args (Registry.args_models()).
ArgsModels = Mapping[str, type[BaseModel]]


def field_errors(*problems: tuple[Loc, str]) -> ValidationError:
    """For a validator to raise when a rule spans several values: one error
    per (location, message), each location relative to the value the validator
    checks (its field's, or its model's), as pydantic locates its own errors."""
    return ValidationError.from_exception_data(
        "args",
        [InitErrorDetails(type=PydanticCustomError("troupe_field", msg), loc=loc, input=None) for loc, msg in problems],
    )


def validate_args(model: type[BaseModel], args: Mapping[str, Any], at: Loc) -> tuple[BaseModel | None, list[str]]:
    """`args` validated against a plugin's model: the instance, or None and
    the problems, one line each, located from `at` (where the args are)."""
    try:
        return model.model_validate(args), []
    except ValidationError as exc:
        return None, [_describe(err, model, at) for err in exc.errors()]


def validate_plugin_config(entry: PluginConfig, models: ArgsModels, at: Loc) -> tuple[BaseModel | None, list[str]]:
    """One pluginConfig entry (located at `at`): its args validated against
    its plugin's model. An entry naming no plugin of `models` is a problem: a
    typo there would otherwise leave the plugin at its defaults, silently."""
    model = models.get(entry.name)
    if model is None:
        return None, [
            f"{format_loc((*at, 'name'))}: unknown plugin {entry.name!r} (known: {', '.join(sorted(models))})"
        ]
    return validate_args(model, entry.args, (*at, "args"))


def validate_plugin_args(profile: Profile, models: ArgsModels, at: Loc = ()) -> tuple[dict[str, BaseModel], list[str]]:
    """Every pluginConfig entry of `profile`: the args by plugin name, and the
    problems located from `at` (the profile's location; () for a profile on
    its own)."""
    valid: dict[str, BaseModel] = {}
    problems: list[str] = []
    for j, entry in enumerate(profile.plugin_config):
        args, errors = validate_plugin_config(entry, models, (*at, "pluginConfig", j))
        if args is not None:
            valid[entry.name] = args
        problems += errors
    return valid, problems


def _plugin_args_problems(raw: Mapping[str, Any], models: ArgsModels) -> list[str]:
    """validate_plugin_config of every pluginConfig entry of the file that is
    valid on its own (an invalid one has its problems reported already),
    whatever else is wrong in its profile."""
    problems: list[str] = []
    profiles = raw.get("profiles")
    for i, profile in enumerate(profiles if isinstance(profiles, list) else ()):
        entries = profile.get("pluginConfig") if isinstance(profile, dict) else None
        for j, item in enumerate(entries if isinstance(entries, list) else ()):
            try:
                entry = PluginConfig.model_validate(item)
            except ValidationError:
                continue
            problems += validate_plugin_config(entry, models, ("profiles", i, "pluginConfig", j))[1]
    return problems


# -------------------------------------------------------------- loading


class ConfigError(Exception):
    """The configuration file cannot be used; the message names the field."""


def load_config(path: str | Path | None, plugin_args: ArgsModels | None = None) -> SchedulerConfiguration:
    """The file's configuration; ConfigError names the file and, per problem,
    the field. With `plugin_args` (plugin name -> its args model), every
    pluginConfig entry must name one of those plugins and its args must be
    valid for that model; the problems are reported with the file's others."""
    if path is None:
        return SchedulerConfiguration()
    try:
        with open(path, "rb") as f:  # from the file, so YAML errors say `in "F", line L, column C`
            raw = yaml.safe_load(f)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        detail = "\n".join(f"  {line}" for line in str(exc).splitlines())
        raise ConfigError(f"{path}: not valid YAML:\n{detail}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping (a SchedulerConfiguration), got {type(raw).__name__}")
    config: SchedulerConfiguration | None = None
    problems: list[str] = []
    try:
        config = SchedulerConfiguration.model_validate(raw)
    except ValidationError as exc:
        problems = [_describe(err) for err in exc.errors()]
    if plugin_args is not None:
        problems += _plugin_args_problems(raw, plugin_args)
    if problems or config is None:
        raise ConfigError(f"{path}: invalid configuration:\n" + "\n".join(f"  {line}" for line in problems))
    return config


def _describe(err: Any, root: type[BaseModel] = SchedulerConfiguration, at: Loc = ()) -> str:
    """One pydantic error of validating `root` as `location: message`, the
    location from the file's top (`at`: where the value of `root` is)."""
    rel: Loc = tuple(err["loc"])
    loc = at + rel
    kind, msg = err["type"], err["msg"]
    if kind == _NAMED_ERROR:
        text: str = err["ctx"]["troupe_template"]
        for name, where_rel in err["ctx"]["troupe_where"].items():
            text = text.replace(f"{{{name}}}", format_loc(loc + where_rel))
        return text
    where = format_loc(loc) or "(top level)"
    if kind == "extra_forbidden":
        model = _annotation_at(rel[:-1], root)
        if not _is_model(model):
            return f"{where}: unknown field"
        allowed = _keys(model)
        if not allowed:
            return f"{where}: unknown field; no fields are allowed here"
        hint = _close_match(rel[-1], allowed)
        return f"{where}: unknown field{f' (did you mean {hint}?)' if hint else ''}; allowed: {', '.join(allowed)}"
    if kind == "literal_error":
        annotation = _annotation_at(rel, root)
        values = get_args(annotation) if get_origin(annotation) is Literal else ()
        choices = ", ".join(repr(v) for v in values) if values else err.get("ctx", {}).get("expected", "?")
        return f"{where}: unsupported value {err.get('input')!r}; allowed: {choices}"
    if kind == "model_type":  # not "... or instance of Plugins"
        return f"{where}: expected a mapping, got {_yaml_type(err.get('input'))}"
    for prefix in ("Value error, ", "Assertion failed, "):
        msg = msg.removeprefix(prefix)
    return f"{where}: {msg}"


def _yaml_type(value: Any) -> str:
    for types_, name in (
        (bool, "a boolean"),
        (int, "an integer"),
        (float, "a number"),
        (str, "a string"),
        (list, "a sequence"),
        (dict, "a mapping"),
    ):
        if isinstance(value, types_):
            return name
    return "null" if value is None else type(value).__name__


def _optional(annotation: Any) -> Any:
    """X for `X | None`, else the annotation."""
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _field(model: type[BaseModel], key: str | int) -> FieldInfo | None:
    for name, info in model.model_fields.items():
        if key in (name, info.alias):
            return info
    return None


_UNKNOWN = object()


def _annotation_at(loc: Loc, root: type[BaseModel] = SchedulerConfiguration) -> Any:
    """The type `root` expects at a location (`_UNKNOWN` past the models)."""
    annotation: Any = root
    for part in loc:
        annotation = _optional(annotation)
        if isinstance(part, int) and get_origin(annotation) is list:
            annotation = get_args(annotation)[0]
        elif _is_model(annotation) and (info := _field(annotation, part)) is not None:
            annotation = info.annotation
        else:
            return _UNKNOWN
    return _optional(annotation)


def _keys(model: type[BaseModel]) -> list[str]:
    """The keys a file writes for the model's fields, in declaration order."""
    return [info.alias or name for name, info in model.model_fields.items()]


def _close_match(word: str | int, allowed: list[str]) -> str | None:
    """The allowed key a typo most likely meant (case, `_` and `-` aside)."""

    def norm(key: str) -> str:
        return key.lower().replace("_", "").replace("-", "")

    by_norm = {norm(k): k for k in allowed}
    hits = difflib.get_close_matches(norm(str(word)), list(by_norm), n=1)
    return by_norm[hits[0]] if hits else None
