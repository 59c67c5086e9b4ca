"""Jobs that opt in to troupe: what their Workload and PodGroup should be.

A `batch/v1` Job opts in through annotations on its pod template (so every pod
the Job controller creates carries them too):

- `scheduling.troupe.dev/job-policy`: `gang` (all-or-nothing, `minCount`
  defaults to the Job's `parallelism`, or `completions` where that is
  smaller: the pods the Job runs at once) or `basic` (pod by pod, as a group);
- `scheduling.troupe.dev/min-count`: an explicit `minCount` for `gang`;
- or, instead of both, `scheduling.troupe.dev/workload: <name>`: use that
  (user-made) Workload in the Job's namespace; its only template, or the one
  `scheduling.troupe.dev/pod-group-template` names, is the policy.

troupe then creates, owned by the Job (garbage-collected with it), a Workload
(unless the Job names one) and one PodGroup made from its template, both named
`<job>-<first 8 of the Job's uid>` (a Job deleted and created again under the same name gets new
ones, never its predecessor's, which the garbage collector may still be
deleting). Pods join that PodGroup through their controller ownerReference to
the Job: no label to write. This module is the pure part: parsing a Job into
its intent, and the objects that intent asks for. upstream's Job integration
(KEP-5547) is the model: one PodGroup per Job from the Workload's only
template, `minCount` following `parallelism`, and no PodGroup while the Job is
suspended.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import constants as C
from .podgroup import PodGroupTemplate, Workload
from .records import GroupKey

JOB_POLICY_ANNOTATION = f"{C.GROUP}/job-policy"
MIN_COUNT_ANNOTATION = f"{C.GROUP}/min-count"
WORKLOAD_ANNOTATION = f"{C.GROUP}/workload"
TEMPLATE_ANNOTATION = f"{C.GROUP}/pod-group-template"
OPT_IN = (JOB_POLICY_ANNOTATION, WORKLOAD_ANNOTATION)
POLICIES = ("gang", "basic")
TEMPLATE_NAME = "workers"
# On the objects troupe makes for a Job, as the Job controller labels its pods.
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "troupe-scheduler"


def group_name(job_name: str, job_uid: str) -> str:
    """The name of the Workload and the PodGroup troupe makes for a Job."""
    return f"{job_name}-{job_uid.replace('-', '')[:8]}"


def job_owner(meta: Mapping[str, Any]) -> tuple[str, str] | None:
    """(name, uid) of the Job that controls the object with this metadata, if any."""
    for ref in meta.get("ownerReferences") or ():
        if (
            isinstance(ref, Mapping)
            and ref.get("controller")
            and ref.get("kind") == "Job"
            and ref.get("apiVersion") == "batch/v1"
            and ref.get("name")
            and ref.get("uid")
        ):
            return str(ref["name"]), str(ref["uid"])
    return None


def pod_group_of(meta: Mapping[str, Any]) -> str | None:
    """The PodGroup a pod belongs to through its Job: the pod opted in (the
    Job's template carried the annotation) and a Job controls it."""
    annotations = meta.get("annotations") or {}
    if not any(a in annotations for a in OPT_IN):
        return None
    owner = job_owner(meta)
    return group_name(*owner) if owner else None


@dataclass(frozen=True, slots=True)
class JobIntent:
    """What an opted-in Job asks for; `problem` says why nothing can be made."""

    namespace: str
    name: str
    uid: str
    policy: str  # "gang" | "basic"; "" when the Job names a Workload
    min_count: int  # for gang; 1 for basic
    floor: int  # min_count, or fewer: what the completions still to come allow
    parallelism: int
    suspended: bool
    finished: bool  # Complete or Failed: its group is left as it is
    priority_class_name: str | None
    problem: str | None = None
    scheduler_name: str = C.DEFAULT_SCHEDULER_NAME  # the pod template's spec.schedulerName
    workload_name: str | None = None  # a Workload of the user's, named by the Job
    template_name: str | None = None  # which of its templates (None: its only one)

    @property
    def group(self) -> str:
        return group_name(self.name, self.uid)

    @property
    def key(self) -> GroupKey:
        return GroupKey(self.namespace, self.group)

    def owner_reference(self) -> dict[str, Any]:
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            # no blockOwnerDeletion: it would need update on jobs/finalizers
            # where OwnerReferencesPermissionEnforcement is on
        }

    def scheduling_policy(self, min_count: int | None = None) -> dict[str, Any]:
        if self.policy != "gang":
            return {"basic": {}}
        return {"gang": {"minCount": self.min_count if min_count is None else min_count}}

    def _metadata(self) -> dict[str, Any]:
        return {
            "name": self.group,
            "namespace": self.namespace,
            "labels": {JOB_NAME_LABEL: self.name, MANAGED_BY_LABEL: MANAGED_BY},
            "ownerReferences": [self.owner_reference()],
        }

    def workload(self) -> dict[str, Any]:
        template: dict[str, Any] = {"name": TEMPLATE_NAME, "schedulingPolicy": self.scheduling_policy()}
        if self.priority_class_name:
            template["priorityClassName"] = self.priority_class_name
        return {
            "apiVersion": C.API_VERSION,
            "kind": "Workload",
            "metadata": self._metadata(),
            "spec": {
                "controllerRef": {"apiGroup": "batch", "kind": "Job", "name": self.name},
                "podGroupTemplates": [template],
            },
        }

    def podgroup(self, template: PodGroupTemplate | None = None, min_count: int | None = None) -> dict[str, Any]:
        """The PodGroup: from troupe's template (a gang of `min_count`, by
        default the template's), or from `template` of the Workload the Job
        names (`workload_name`), whose fields it copies."""
        if template is None:
            ref = {"workloadName": self.group, "podGroupTemplateName": TEMPLATE_NAME}
            spec: dict[str, Any] = {"schedulingPolicy": self.scheduling_policy(min_count)}
            if self.priority_class_name:
                spec["priorityClassName"] = self.priority_class_name
        else:
            ref = {"workloadName": self.workload_name or "", "podGroupTemplateName": template.name}
            spec = template.model_dump(by_alias=True, exclude_none=True, exclude={"name"})
            if not spec.get("resourceClaims"):
                spec.pop("resourceClaims", None)
            if self.priority_class_name and "priorityClassName" not in spec and "priority" not in spec:
                spec["priorityClassName"] = self.priority_class_name
        spec["podGroupTemplateRef"] = {"workload": ref}
        return {"apiVersion": C.API_VERSION, "kind": "PodGroup", "metadata": self._metadata(), "spec": spec}

    def template_of(self, workload: Workload) -> tuple[PodGroupTemplate | None, str | None]:
        """The template of the Workload the Job names, or why there is none."""
        where = f"Workload {self.namespace}/{self.workload_name}"
        if self.template_name is not None:
            template = workload.template(self.template_name)
            return (template, None) if template else (None, f"{where} has no podGroupTemplate {self.template_name!r}")
        templates = workload.spec.pod_group_templates
        if len(templates) != 1:
            names = ", ".join(t.name for t in templates)
            return (
                None,
                f"{where} has {len(templates)} podGroupTemplates ({names}): name one with {TEMPLATE_ANNOTATION}",
            )
        return templates[0], None


def _finished(status: Mapping[str, Any]) -> bool:
    return any(
        isinstance(c, Mapping) and c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )


def _pods_at_once(body: Mapping[str, Any], spec: Mapping[str, Any]) -> tuple[int, int]:
    """(parallelism, remaining): the pods the Job runs at once, and the
    completions still to come (at least 1).

    The Job controller never runs more pods at once than the completions
    still to come (`remaining`); Succeeded pods no longer count toward a
    gang, so a worker made again after some of its siblings succeeded could
    wait for ever for minCount live pods. `floor` is how far the controller
    may lower minCount for such a worker (runtime/jobs.py)."""
    raw_parallelism = spec.get("parallelism")
    parallelism = raw_parallelism if isinstance(raw_parallelism, int) and raw_parallelism >= 0 else 1
    remaining = parallelism
    completions = spec.get("completions")
    if isinstance(completions, int) and completions >= 0:
        parallelism = min(parallelism, completions)
        succeeded = _mapping(body.get("status")).get("succeeded")
        remaining = min(parallelism, completions - (succeeded if isinstance(succeeded, int) else 0))
    return parallelism, max(remaining, 1)


def _annotation(annotations: Mapping[str, Any], key: str) -> str | None:
    """The annotation's value, None where it is unset or blank."""
    return str(annotations.get(key) or "").strip() or None


def _workload_problem(annotations: Mapping[str, Any], raw_min: Any, workload_name: str | None) -> str | None:
    """Why the Workload the pod template names cannot be the policy, if it cannot."""
    if JOB_POLICY_ANNOTATION in annotations or raw_min is not None:
        return (
            f"the pod template names a Workload ({WORKLOAD_ANNOTATION}) and also sets "
            f"{JOB_POLICY_ANNOTATION} or {MIN_COUNT_ANNOTATION}: the Workload's template is the policy; set one"
        )
    if workload_name is None:
        return f"the pod template's annotation {WORKLOAD_ANNOTATION} is empty: it must name a Workload"
    return None


def _explicit_min_count(raw_min: Any, parallelism: int, default: int) -> tuple[int, str | None]:
    """(minCount, problem) from the min-count annotation of a gang."""
    text = str(raw_min).strip()
    if not text.isdigit() or int(text) < 1:
        return (
            default,
            f"the pod template's annotation {MIN_COUNT_ANNOTATION} is {raw_min!r}: it must be an integer >= 1",
        )
    problem = None
    if int(text) > parallelism:
        problem = (
            f"{MIN_COUNT_ANNOTATION} is {text}, more than the Job's parallelism {parallelism}: "
            "the gang could never be complete"
        )
    return int(text), problem


def _policy(annotations: Mapping[str, Any], parallelism: int, workload_name: str | None) -> tuple[str, int, str | None]:
    """(policy, minCount, problem) the pod template's annotations ask for;
    policy "" where they name a Workload, whose template is the policy."""
    raw_min = annotations.get(MIN_COUNT_ANNOTATION)
    if WORKLOAD_ANNOTATION in annotations:
        return "", 1, _workload_problem(annotations, raw_min, workload_name)
    policy = str(annotations.get(JOB_POLICY_ANNOTATION) or "").strip()
    min_count = max(parallelism, 1) if policy == "gang" else 1
    where = f"the pod template's annotation {JOB_POLICY_ANNOTATION}"
    if policy not in POLICIES:
        return policy, min_count, f"{where} is {policy!r}: it must be 'gang' or 'basic'"
    if raw_min is None:
        return policy, min_count, None
    if policy == "basic":
        return policy, min_count, f"{MIN_COUNT_ANNOTATION} is set, but {where} is 'basic': a minCount needs 'gang'"
    return (policy, *_explicit_min_count(raw_min, parallelism, min_count))


def _mapping(value: Any) -> Mapping[str, Any]:
    """A field that should be a mapping; anything else reads as empty (the API
    server's schema makes Jobs well typed; a file given to simulate may not)."""
    return value if isinstance(value, Mapping) else {}


def parse_job(body: Mapping[str, Any]) -> JobIntent | None:
    """The intent of a Job that opted in; None for any other Job. Never raises:
    a Job asking for something impossible gets an intent with `problem` set."""
    meta = _mapping(body.get("metadata"))
    spec = _mapping(body.get("spec"))
    template = _mapping(spec.get("template"))
    annotations = _mapping(_mapping(template.get("metadata")).get("annotations"))
    if not any(a in annotations for a in OPT_IN) or not meta.get("name") or not meta.get("uid"):
        return None
    parallelism, remaining = _pods_at_once(body, spec)
    workload_name = _annotation(annotations, WORKLOAD_ANNOTATION)
    template_name = _annotation(annotations, TEMPLATE_ANNOTATION)
    policy, min_count, problem = _policy(annotations, parallelism, workload_name)
    template_spec = _mapping(template.get("spec"))
    return JobIntent(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta["name"]),
        uid=str(meta["uid"]),
        policy=policy,
        min_count=min_count,
        floor=min(min_count, remaining),
        parallelism=parallelism,
        suspended=bool(spec.get("suspend")),
        finished=_finished(_mapping(body.get("status"))),
        priority_class_name=str(template_spec["priorityClassName"]) if template_spec.get("priorityClassName") else None,
        problem=problem,
        scheduler_name=str(template_spec.get("schedulerName") or "default-scheduler"),
        workload_name=workload_name,
        template_name=template_name,
    )
