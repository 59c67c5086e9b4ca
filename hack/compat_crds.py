"""The compatible CRDs under crds/compat/: scheduler-plugins' and Volcano's
PodGroup, for clusters that replace those schedulers with troupe and have
neither installed (their operators refuse to start, or fail every reconcile,
without the kind they write).

Field-compatible with the originals (tests/crds/ holds them, and
tests/unit/test_compat_crds.py compares every field's type, format, bounds,
defaults and enum): an object either original accepts, these accept, and
the reverse. What differs is prose: each description says what troupe does
with the field. Imported by hack/gen-crds.py, which writes them.
"""

from __future__ import annotations

from typing import Any

QUANTITY = {
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "pattern": r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$",
    "x-kubernetes-int-or-string": True,
}
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"

API_VERSION = {
    "type": "string",
    "description": "APIVersion defines the versioned schema of this representation of an object.",
}
KIND = {
    "type": "string",
    "description": "Kind is a string value representing the REST resource this object represents.",
}


def int32(desc: str, **bounds: Any) -> dict[str, Any]:
    return {"type": "integer", "format": "int32", "description": desc, **bounds}


def count(desc: str, **bounds: Any) -> dict[str, Any]:
    return int32(f"The number of member pods {desc}; troupe counts them from the pods it sees.", **bounds)


def min_member(minimum: int) -> dict[str, Any]:
    return int32(
        "The least number of member pods bound at once: troupe binds at least this many in one cycle, or none.",
        minimum=minimum,
    )


MIN_RESOURCES = {
    "type": "object",
    "description": "The least room the group needs: troupe does not try the group while the cluster's free "
    "room, summed over nodes, cannot hold it, and says so.",
    "additionalProperties": QUANTITY,
}


def crd(
    group: str,
    version: str,
    short_names: list[str],
    schema: dict[str, Any],
    subresources: dict[str, Any],
    columns: list[dict[str, Any]],
) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"podgroups.{group}", "labels": {"app.kubernetes.io/part-of": "troupe"}},
        "spec": {
            "group": group,
            "names": {
                "kind": "PodGroup",
                "listKind": "PodGroupList",
                "plural": "podgroups",
                "singular": "podgroup",
                "shortNames": short_names,
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": subresources,
                    "additionalPrinterColumns": columns,
                }
            ],
        },
    }


def root(desc: str, spec: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "description": desc,
        "properties": {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
    }


# ------------------------------------------------------------ scheduler-plugins

SCHEDULER_PLUGINS = crd(
    "scheduling.x-k8s.io",
    "v1alpha1",
    ["pg", "pgs"],
    root(
        "PodGroup is a collection of pods scheduled together (scheduler-plugins' coscheduling API). "
        "Pods join it with the label scheduling.x-k8s.io/pod-group=<name> in its namespace.",
        {
            "type": "object",
            "description": "Specification of the desired behavior of the pod group.",
            "properties": {
                "minMember": min_member(minimum=1),
                "minResources": MIN_RESOURCES,
                "scheduleTimeoutSeconds": int32(
                    "How long pods placed one by one may hold room while their group fills. troupe places a "
                    "group in one cycle and never holds room for a waiting group, so this is always met."
                ),
            },
        },
        {
            "type": "object",
            "description": "What troupe observed of the group, as scheduler-plugins' PodGroup controller writes it.",
            "properties": {
                "phase": {
                    "type": "string",
                    "description": "Pending, Scheduling, Running, Finished or Failed.",
                },
                "occupiedBy": {
                    "type": "string",
                    "description": "The workload that occupies the group (not written by troupe).",
                },
                "running": count("Running"),
                "succeeded": count("that reached phase Succeeded"),
                "failed": count("that reached phase Failed"),
                "scheduleStartTime": {
                    "type": "string",
                    "format": "date-time",
                    "description": "When troupe first tried the group.",
                },
            },
        },
    ),
    {"status": {}},
    [
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase", "description": "Current phase of PodGroup."},
        {
            "name": "MinMember",
            "type": "integer",
            "jsonPath": ".spec.minMember",
            "description": "Least pods bound at once.",
        },
        {"name": "Running", "type": "integer", "jsonPath": ".status.running", "description": "Running pods."},
        {"name": "Succeeded", "type": "integer", "jsonPath": ".status.succeeded", "description": "Succeeded pods."},
        {"name": "Failed", "type": "integer", "jsonPath": ".status.failed", "description": "Failed pods."},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ],
)


# --------------------------------------------------------------------- Volcano


def network_topology(desc: str) -> dict[str, Any]:
    return {
        "type": "object",
        "description": desc + " troupe does not read it, and names it in the group's status message.",
        "properties": {
            "highestTierAllowed": {"type": "integer", "minimum": 0, "description": "The highest tier allowed."},
            "highestTierName": {"type": "string", "maxLength": 253, "description": "The highest tier's name."},
            "mode": {"type": "string", "default": "hard", "enum": ["hard", "soft"], "description": "hard or soft."},
        },
    }


LABEL_SELECTOR = {
    "type": "object",
    "description": "Which pods form the subgroup.",
    "x-kubernetes-map-type": "atomic",
    "properties": {
        "matchExpressions": {
            "type": "array",
            "x-kubernetes-list-type": "atomic",
            "items": {
                "type": "object",
                "required": ["key", "operator"],
                "properties": {
                    "key": {"type": "string"},
                    "operator": {"type": "string"},
                    "values": {"type": "array", "x-kubernetes-list-type": "atomic", "items": {"type": "string"}},
                },
            },
        },
        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}

VOLCANO = crd(
    "scheduling.volcano.sh",
    "v1beta1",
    ["pg", "podgroup-v1beta1"],
    root(
        "PodGroup is a collection of pods scheduled together (Volcano's API). Pods join it with the "
        "annotation scheduling.k8s.io/group-name=<name> in its namespace.",
        {
            "type": "object",
            "description": "Specification of the desired behavior of the pod group.",
            "properties": {
                "minMember": min_member(minimum=0),
                "minResources": MIN_RESOURCES,
                "minTaskMember": {
                    "type": "object",
                    "description": "The least number of pods of each task (annotation volcano.sh/task-spec) "
                    "in a group troupe binds.",
                    "additionalProperties": {"type": "integer", "format": "int32"},
                },
                "networkTopology": network_topology("Network-topology constraints (Volcano's HyperNodes)."),
                "priorityClassName": {
                    "type": "string",
                    "maxLength": 253,
                    "description": "The group's priority: troupe orders and preempts by it.",
                },
                "queue": {
                    "type": "string",
                    "default": "default",
                    "maxLength": 253,
                    "pattern": DNS_SUBDOMAIN,
                    "description": "Volcano's queue. troupe has no queues: any queue but `default` is named in "
                    "the group's status message.",
                },
                "subGroupPolicy": {
                    "type": "array",
                    "description": "Gangs within the group: each sub-group (the pods a policy selects, by "
                    "their matchLabelKeys values) of subGroupSize pods binds whole, and at least minSubGroups "
                    "of each policy bind with the group. troupe schedules them as a tree under the group.",
                    "items": {
                        "type": "object",
                        "properties": {
                            "labelSelector": LABEL_SELECTOR,
                            "matchLabelKeys": {
                                "type": "array",
                                "x-kubernetes-list-type": "atomic",
                                "items": {"type": "string"},
                            },
                            "minSubGroups": int32("The least subgroups.", default=0, minimum=0),
                            "name": {"type": "string", "maxLength": 253, "description": "The policy's name."},
                            "networkTopology": network_topology(
                                "The subgroups' network topology (not honoured by troupe)."
                            ),
                            "subGroupSize": int32("Pods per subgroup.", default=1, minimum=1),
                        },
                    },
                },
            },
        },
        {
            "type": "object",
            "description": "What troupe observed of the group, as Volcano's scheduler writes it. (Volcano's "
            "CRD has no status subresource: status is written with the object.)",
            "properties": {
                "conditions": {
                    "type": "array",
                    "description": "Scheduled, and Unschedulable (reason NotEnoughResources) with troupe's "
                    "message while the group waits.",
                    "items": {
                        "type": "object",
                        "properties": {
                            "lastTransitionTime": {"type": "string", "format": "date-time"},
                            "message": {"type": "string"},
                            "reason": {"type": "string"},
                            "status": {"type": "string"},
                            "transitionID": {"type": "string"},
                            "type": {"type": "string"},
                        },
                    },
                },
                "failed": count("that reached phase Failed", minimum=0),
                "phase": {
                    "type": "string",
                    "enum": ["Pending", "Running", "Unknown", "Inqueue", "Completed"],
                    "description": "Pending, Inqueue, Running, Completed or Unknown.",
                },
                "running": count("Running", minimum=0),
                "succeeded": count("that reached phase Succeeded", minimum=0),
            },
        },
    ),
    {},
    [
        {"name": "STATUS", "type": "string", "jsonPath": ".status.phase"},
        {"name": "minMember", "type": "integer", "jsonPath": ".spec.minMember"},
        {"name": "RUNNINGS", "type": "integer", "jsonPath": ".status.running"},
        {"name": "AGE", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        {"name": "QUEUE", "type": "string", "jsonPath": ".spec.queue", "priority": 1},
    ],
)

HEADER = """# troupe's compatible CRD for {what}: field for field the
# original's schema ({origin}), with descriptions of what troupe does with each field.
# Install it only where {what} itself is not installed:
#   kubectl apply -f crds/compat/{file}
"""

FILES = {
    "podgroups.scheduling.x-k8s.io.yaml": (
        SCHEDULER_PLUGINS,
        "scheduler-plugins' PodGroup",
        "sigs.k8s.io/scheduler-plugins v0.31.8, config/crd/bases",
    ),
    "podgroups.scheduling.volcano.sh.yaml": (
        VOLCANO,
        "Volcano's PodGroup",
        "volcano.sh/volcano v1.15.1, config/crd/volcano/bases",
    ),
}
