"""Jobs in a simulation: what the Job controller and troupe would make of them.

A `batch/v1` Job that opts in to troupe (api/jobs.py) becomes, as in a cluster,
its Workload (unless it names one), its PodGroup, and the pods the Job
controller would start at once: `min(parallelism, completions)` from its pod
template, named `<job>-<index>` (Indexed Jobs also get their completion-index
annotation). The Job's uid is derived from its namespace and name, so the
same file always gives the same PodGroup name. A Job that does not opt in, or
asks for something troupe cannot make, is not expanded (the caller warns).
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

from ..api.jobs import JOB_NAME_LABEL, JobIntent, parse_job

COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"


def job_uid(namespace: str, name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"simulate-job/{namespace}/{name}"))


def expand_job(body: dict[str, Any], namespace: str) -> tuple[list[dict[str, Any]], str | None]:
    """(the objects a Job stands for, why there are none). A Job that does not
    opt in gives ([], None)."""
    meta = body.get("metadata") or {}
    name = str(meta.get("name") or "")
    with_uid = {**body, "metadata": {**meta, "namespace": namespace, "uid": job_uid(namespace, name)}}
    intent = parse_job(with_uid)
    if intent is None:
        return [], None
    if intent.problem is not None:
        return [], intent.problem
    if intent.suspended:
        return [], "the Job is suspended: it has no pods and no PodGroup"
    if intent.workload_name is not None:
        return [], "a Job naming its own Workload is not simulated: list its PodGroup and Pods instead"
    return [intent.workload(), intent.podgroup(), *_pods(body, intent)], None


def _pods(body: dict[str, Any], intent: JobIntent) -> list[dict[str, Any]]:
    spec = body.get("spec") or {}
    template = spec.get("template") or {}
    indexed = spec.get("completionMode") == "Indexed"
    pods = []
    for i in range(intent.parallelism):
        meta = copy.deepcopy(template.get("metadata") or {})
        labels = {**(meta.get("labels") or {}), JOB_NAME_LABEL: intent.name}
        annotations = dict(meta.get("annotations") or {})
        if indexed:
            annotations[COMPLETION_INDEX_ANNOTATION] = str(i)
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{intent.name}-{i}",
                    "namespace": intent.namespace,
                    "labels": labels,
                    "annotations": annotations,
                    "ownerReferences": [intent.owner_reference()],
                },
                "spec": copy.deepcopy(template.get("spec") or {}),
            }
        )
    return pods
