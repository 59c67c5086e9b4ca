"""The native Workload API: `scheduling.k8s.io` PodGroups, joined by a pod's
`spec.schedulingGroup.podGroupName` (same namespace), and the
CompositePodGroups above them.

Versions, as Kubernetes serves them (behind the `GenericWorkload` gate):

| version  | served by  | template link | disruptionMode | scheduled condition |
| -------- | ---------- | ------------- | -------------- | ------------------- |
| v1beta1  | 1.37, 1.38 | `workloadRef{workloadName, templateName}` | `{single: {}}` / `{all: {}}` | `PodGroupInitiallyScheduled` |
| v1alpha3 | 1.37, 1.38 | as v1beta1    | as v1beta1     | as v1beta1          |
| v1alpha2 | 1.36       | `podGroupTemplateRef.workload{workloadName, podGroupTemplateName}` | `Pod` / `PodGroup` | `PodGroupScheduled` |

CompositePodGroups: `v1alpha3` (1.37, and 1.38 beside `v1beta1`), `v1beta1`
(1.38), the same fields in both; discovery takes `v1beta1` where served.

A native PodGroup becomes troupe's `PodGroup` field for field: policy,
constraints, claims, priority, `preemptionPolicy` (v1beta1/v1alpha3),
`parentCompositePodGroupName` (v1beta1/v1alpha3: the CompositePodGroup it is
a child of), and `disruptionMode` (`single` is troupe's `Pod`, `all` its
`PodGroup`). Its conditions are read and written in troupe's vocabulary
inside and in the served version's outside (`export_conditions`). The
template link is kept for display only (`PodGroup.workload_ref`): a native
PodGroup carries its template's policy itself, so troupe does not need, or
wait for, its Workload (upstream's scheduler does not either).

CompositePodGroups (behind the `CompositePodGroup` gate) become troupe's
`CompositePodGroup` the same way; their condition
(`CompositePodGroupInitiallyScheduled`) has one name everywhere, and an
invalid tree's reason is the served version's: `CompositePodGroupError` in
`v1beta1` (1.38), troupe's `Invalid` where upstream has none (`v1alpha3`). A native
Workload's `compositePodGroupTemplates` are read as troupe's.

A PodGroup configured wrong (upstream's runtime validation: pods naming
several schedulerNames, every PodGroup of an invalid tree) says
`PodGroupError` where the served Kubernetes is 1.38 or later, and
`SchedulerError` on 1.37, which serves the same versions without that word:
the apiVersion does not say which, so the runtime reads the served version
(`Scheduler.kube_version`, GET /version) and composite.config_error_reason
names the reason. Pods say `SchedulerError` either way, as upstream's.

What troupe cannot honour is said, not dropped: a spec field it does not
know sets `problem` on the PodGroup or CompositePodGroup; the core then
reports SchedulerError instead of placing it as something it is not.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import constants as C
from ..composite import COMPOSITE_KIND, COMPOSITE_PLURAL, CompositePodGroup
from ..podgroup import PodGroup, Workload
from .base import GroupKind, PodSource, Source

GROUP = "scheduling.k8s.io"
# The versions troupe speaks, preferred first (discovery picks the first served).
VERSIONS = ("v1beta1", "v1alpha3", "v1alpha2")
PODGROUP_PLURAL = "podgroups"
WORKLOAD_PLURAL = "workloads"
INITIALLY_SCHEDULED = "PodGroupInitiallyScheduled"  # v1beta1, v1alpha3: terminal once True
COMPOSITE_VERSIONS = ("v1beta1", "v1alpha3")  # 1.38 serves v1beta1 too; 1.37 v1alpha3 only


def scheduled_condition(version: str) -> str:
    """The type of the served version's scheduled condition."""
    return C.POD_GROUP_SCHEDULED if version == "v1alpha2" else INITIALLY_SCHEDULED


_COMMON_SPEC = ("schedulingPolicy", "schedulingConstraints", "resourceClaims", "priorityClassName", "priority")
_SPEC_FIELDS = {
    "v1alpha2": frozenset((*_COMMON_SPEC, "podGroupTemplateRef", "disruptionMode")),
    "v1alpha3": frozenset(
        (*_COMMON_SPEC, "workloadRef", "disruptionMode", "preemptionPolicy", "parentCompositePodGroupName")
    ),
}
_SPEC_FIELDS["v1beta1"] = _SPEC_FIELDS["v1alpha3"]
_TEMPLATE_FIELDS = {
    "v1alpha2": frozenset((*_COMMON_SPEC, "name", "disruptionMode")),
    "v1alpha3": frozenset((*_COMMON_SPEC, "name", "disruptionMode", "preemptionPolicy")),
}
_TEMPLATE_FIELDS["v1beta1"] = _TEMPLATE_FIELDS["v1alpha3"]
# What troupe's model reads as it is (disruptionMode is translated; the
# template links of a PodGroup are for display).
_COPIED = ("name", *_COMMON_SPEC, "preemptionPolicy", "parentCompositePodGroupName")
_POLICY_FIELDS = {"schedulingPolicy": ("basic", "gang"), "schedulingPolicy.gang": ("minCount",)}

# CompositePodGroups (v1alpha3) and a Workload's compositePodGroupTemplates (v1beta1, v1alpha3).
_COMPOSITE_COMMON = ("schedulingPolicy", "schedulingConstraints", "disruptionMode", "priorityClassName", "priority")
_COMPOSITE_SPEC_FIELDS = frozenset(
    (*_COMPOSITE_COMMON, "preemptionPolicy", "parentCompositePodGroupName", "workloadRef")
)
_COMPOSITE_TEMPLATE_FIELDS = frozenset(
    (*_COMPOSITE_COMMON, "name", "preemptionPolicy", "podGroupTemplates", "compositePodGroupTemplates")
)
_COMPOSITE_COPIED = (*_COPIED, "workloadRef")
_COMPOSITE_POLICY_FIELDS = {"schedulingPolicy": ("basic", "gang"), "schedulingPolicy.gang": ("minGroupCount",)}


class _SchedulingGroupPods(PodSource):
    def pod_group(self, meta: Mapping[str, Any], spec: Mapping[str, Any]) -> str | None:
        group = spec.get("schedulingGroup")
        if not isinstance(group, Mapping):
            return None
        name = group.get("podGroupName")
        return str(name) if name else None


def _version(body: Mapping[str, Any]) -> str:
    return str(body.get("apiVersion") or "").partition("/")[2]


def _unknown(raw: Mapping[str, Any], known: frozenset[str] | tuple[str, ...], where: str) -> list[str]:
    return [f"{where}{key}" for key in raw if key not in known]


def _translate(
    raw: Mapping[str, Any],
    version: str,
    known: frozenset[str],
    where: str,
    copied: tuple[str, ...] = _COPIED,
    policy_fields: Mapping[str, tuple[str, ...]] = _POLICY_FIELDS,
) -> tuple[dict[str, Any], list[str]]:
    """A native spec or template into troupe's shape, and what of it troupe
    cannot honour (one entry per field, named by its path)."""
    out: dict[str, Any] = {}
    problems: list[str] = []
    unknown = _unknown(raw, known, where)
    if unknown:
        problems.append(f"{', '.join(unknown)}: a field troupe does not know (scheduling.k8s.io/{version})")
    policy = raw.get("schedulingPolicy")
    if isinstance(policy, Mapping):
        unknown = _unknown(policy, policy_fields["schedulingPolicy"], f"{where}schedulingPolicy.")
        gang = policy.get("gang")
        if isinstance(gang, Mapping):
            unknown += _unknown(gang, policy_fields["schedulingPolicy.gang"], f"{where}schedulingPolicy.gang.")
        if unknown:
            problems.append(f"{', '.join(unknown)}: a scheduling policy troupe does not know")
    for field in copied:
        if field in raw and field in known:
            out[field] = raw[field]
    mode = raw.get("disruptionMode")
    if mode is not None:
        if version == "v1alpha2":
            out["disruptionMode"] = mode
        elif isinstance(mode, Mapping) and set(mode) == {"single"}:
            out["disruptionMode"] = "Pod"
        elif isinstance(mode, Mapping) and set(mode) == {"all"}:
            out["disruptionMode"] = "PodGroup"
        else:
            problems.append(f"{where}disruptionMode: {mode!r} is neither {{single: {{}}}} nor {{all: {{}}}}")
    return out, problems


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _workload_ref(spec: Mapping[str, Any], version: str) -> str | None:
    """The template link, for display only: a malformed one shows as none."""
    if version == "v1alpha2":
        ref = _mapping(_mapping(spec.get("podGroupTemplateRef")).get("workload"))
        workload, template = ref.get("workloadName"), ref.get("podGroupTemplateName")
    else:
        ref = _mapping(spec.get("workloadRef"))
        workload, template = ref.get("workloadName"), ref.get("templateName")
    return f"{workload}/{template}" if workload else None


def _import_conditions(status: Mapping[str, Any], version: str) -> list[Any]:
    theirs = scheduled_condition(version)
    return [
        {**c, "type": C.POD_GROUP_SCHEDULED} if isinstance(c, Mapping) and c.get("type") == theirs else c
        for c in status.get("conditions") or ()
    ]


def parse_group(body: Mapping[str, Any]) -> PodGroup:
    """troupe's PodGroup for a native one. Raises pydantic.ValidationError
    where what troupe needs cannot be read (as for troupe's own kind)."""
    version = _version(body)
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    if version in _SPEC_FIELDS:
        out, problems = _translate(spec, version, _SPEC_FIELDS[version], "spec.")
    else:
        out, problems = _translate(spec, "v1beta1", _SPEC_FIELDS["v1beta1"], "spec.")
        problems.insert(
            0, f"scheduling.k8s.io/{version} is an API version troupe does not speak ({', '.join(VERSIONS)})"
        )
    return PodGroup.model_validate(
        {
            "apiVersion": body.get("apiVersion"),
            "metadata": body.get("metadata") or {},
            "spec": out,
            "status": {**status, "conditions": _import_conditions(status, version)},
            "problem": "; ".join(problems) or None,
            "workload_ref": _workload_ref(spec, version),
        }
    )


def parse_composite(body: Mapping[str, Any]) -> CompositePodGroup:
    """troupe's CompositePodGroup for a native one (v1beta1, v1alpha3: the same fields). Raises
    pydantic.ValidationError where what troupe needs cannot be read."""
    version = _version(body)
    spec = _mapping(body.get("spec"))
    label = version if version in COMPOSITE_VERSIONS else COMPOSITE_VERSIONS[-1]
    out, problems = _translate(
        spec, label, _COMPOSITE_SPEC_FIELDS, "spec.", _COMPOSITE_COPIED, _COMPOSITE_POLICY_FIELDS
    )
    if version not in COMPOSITE_VERSIONS:
        problems.insert(
            0,
            f"scheduling.k8s.io/{version} is an API version troupe does not speak for CompositePodGroups "
            f"({', '.join(COMPOSITE_VERSIONS)})",
        )
    return CompositePodGroup.model_validate(
        {
            "apiVersion": body.get("apiVersion"),
            "metadata": body.get("metadata") or {},
            "spec": out,
            "status": body.get("status") or {},
            "problem": "; ".join(problems) or None,
        }
    )


def _templates(raw: Mapping[str, Any], version: str, where: str) -> dict[str, Any]:
    """The template lists under `raw` (a Workload's spec or a composite
    template) in troupe's shape; a list that is absent stays absent."""
    out: dict[str, Any] = {}
    known = _TEMPLATE_FIELDS.get(version, _TEMPLATE_FIELDS["v1beta1"])
    if "podGroupTemplates" in raw:
        out["podGroupTemplates"] = [
            _translate(t, version, known, f"{where}podGroupTemplates[{i}].")[0]
            for i, t in enumerate(raw.get("podGroupTemplates") or ())
            if isinstance(t, Mapping)
        ]
    if "compositePodGroupTemplates" in raw and version != "v1alpha2":
        composites = []
        for i, t in enumerate(raw.get("compositePodGroupTemplates") or ()):
            if isinstance(t, Mapping):
                path = f"{where}compositePodGroupTemplates[{i}]."
                fields = _translate(t, version, _COMPOSITE_TEMPLATE_FIELDS, path, _COPIED, _COMPOSITE_POLICY_FIELDS)[0]
                composites.append({**fields, **_templates(t, version, path)})
        out["compositePodGroupTemplates"] = composites
    return out


def parse_workload(body: Mapping[str, Any]) -> Workload:
    """A native Workload's templates (PodGroup and CompositePodGroup ones)
    in troupe's shape. Raises pydantic.ValidationError."""
    version = _version(body)
    spec = _templates(_mapping(body.get("spec")), version, "spec.")
    if not spec:
        spec = {"podGroupTemplates": []}  # troupe's model then names what is missing
    return Workload.model_validate(
        {
            "apiVersion": body.get("apiVersion"),
            "metadata": body.get("metadata") or {},
            "spec": spec,
        }
    )


def export_conditions(api_version: str, conditions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """troupe's PodGroupScheduled under the served version's name, and an
    observedGeneration of 0 left out as the API server leaves it out
    (metav1.Condition's omitempty; a native PodGroup has no
    metadata.generation): what troupe writes is what it reads back."""
    theirs = scheduled_condition(api_version.partition("/")[2])
    out = []
    for c in conditions:
        if c.get("type") == C.POD_GROUP_SCHEDULED and theirs != C.POD_GROUP_SCHEDULED:
            c = {**c, "type": theirs}
        if "observedGeneration" in c and not c["observedGeneration"]:
            c = {k: v for k, v in c.items() if k != "observedGeneration"}
        out.append(c)
    return out


SOURCE = Source(
    name="native",
    api_group=GROUP,
    pods=_SchedulingGroupPods(),
    kinds=(
        GroupKind(GROUP, VERSIONS, "PodGroup", PODGROUP_PLURAL, parse_group, writes_status=True),
        GroupKind(GROUP, VERSIONS, "Workload", WORKLOAD_PLURAL, parse_workload, watched=False),
        GroupKind(GROUP, COMPOSITE_VERSIONS, COMPOSITE_KIND, COMPOSITE_PLURAL, parse_composite, writes_status=True),
    ),
    help=f"{GROUP} {', '.join(VERSIONS)} (the native Workload API); pods join with spec.schedulingGroup.podGroupName",
    not_served="the native Workload API needs the GenericWorkload feature gate and --runtime-config",
    export_conditions=export_conditions,
)
