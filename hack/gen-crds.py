"""Generates crds/*.yaml (the CRD schemas of PodGroup, Workload and CompositePodGroup) and crds/compat/*.yaml
(scheduler-plugins' and Volcano's PodGroup, from hack/compat_crds.py).

Run `python hack/gen-crds.py crds` and review the diff. With --check it writes
nothing and exits 1 if the files in the directory differ from what it would write
(`make lint` and the pre-commit hook run it that way).
"""

import argparse
import difflib
import sys
from pathlib import Path

import compat_crds
import yaml

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
LABEL_KEY = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)


def label(desc):
    return {"type": "string", "description": desc, "minLength": 1, "maxLength": 63, "pattern": DNS_LABEL}


def subdomain(desc):
    return {"type": "string", "description": desc, "minLength": 1, "maxLength": 253, "pattern": DNS_SUBDOMAIN}


def path_segment(desc, field):
    return {
        "type": "string",
        "description": desc,
        "minLength": 1,
        "maxLength": 253,
        "pattern": r"^[^/%]+$",
        "x-kubernetes-validations": [
            {
                "rule": "self != '.' && self != '..'",
                "message": f"{field}: must be a path segment name (not '.' or '..')",
            }
        ],
    }


def scheduling_policy(desc):
    return {
        "type": "object",
        "description": desc,
        "properties": {
            "basic": {
                "type": "object",
                "description": "Basic specifies that the pods in this group are scheduled using "
                "standard Kubernetes scheduling behavior. It is intentionally empty: "
                "its presence selects the basic policy.",
            },
            "gang": {
                "type": "object",
                "description": "Gang specifies that the pods in this group are scheduled with "
                "all-or-nothing semantics.",
                "required": ["minCount"],
                "properties": {
                    "minCount": {
                        "type": "integer",
                        "format": "int32",
                        "minimum": 1,
                        "description": "MinCount is the minimum number of pods that must be schedulable "
                        "or scheduled at the same time for the scheduler to admit the "
                        "entire group. It must be a positive integer. It may change after creation (a job "
                        "that grows or shrinks): pods already bound stay, and the new minimum applies to the "
                        "pods placed after.",
                    },
                },
            },
        },
        "x-kubernetes-validations": [
            {
                "rule": "has(self.basic) != has(self.gang)",
                "message": "schedulingPolicy: exactly one of basic or gang must be set",
            }
        ],
    }


def immutable_except(fields, policy, size_field):
    """Transition rules that keep each of `fields` as it was created (set or
    unset, and its value), and the policy's kind (basic or gang): only the
    gang's `size_field` (minCount, minGroupCount) may change, as upstream
    1.37 lets a PodGroup's gang.minCount change to follow a job's size.
    Each rule names its field."""
    rules = [
        {
            "rule": f"has(self.{f}) == has(oldSelf.{f}) && (!has(self.{f}) || self.{f} == oldSelf.{f})",
            "message": f"{f} is immutable",
            "fieldPath": f".{f}",
        }
        for f in fields
    ]
    rules.append(
        {
            "rule": f"has(self.{policy}.gang) == has(oldSelf.{policy}.gang)",
            "message": f"{policy}: basic or gang cannot change; only gang.{size_field} may",
            "fieldPath": f".{policy}",
        }
    )
    return rules


def scheduling_constraints(desc, whose="the pod group: all its pods"):
    return {
        "type": "object",
        "description": desc,
        "properties": {
            "topology": {
                "type": "array",
                "description": f"Topology defines the topology constraints for {whose} "
                "are placed within one domain of a key. Upstream allows one entry; troupe allows up to 4, most "
                "preferred first (e.g. rack, block, zone): the group goes into one domain of the first key "
                "that has a domain it fits, and must fit one domain of the last.",
                "maxItems": 4,
                "x-kubernetes-list-type": "atomic",
                "x-kubernetes-validations": [
                    {
                        "rule": "self.all(x, self.exists_one(y, y.key == x.key))",
                        "message": "topology: each key may appear only once",
                    }
                ],
                "items": {
                    "type": "object",
                    "description": "TopologyConstraint defines a topology constraint for a PodGroup.",
                    "required": ["key"],
                    "properties": {
                        "key": {
                            "type": "string",
                            "description": "Key is the key of the node label representing the topology "
                            "domain. All pods within the PodGroup must be colocated within "
                            "the same domain instance. Example: topology.kubernetes.io/rack.",
                            "minLength": 1,
                            "maxLength": 317,
                            "pattern": LABEL_KEY,
                            "x-kubernetes-validations": [
                                {
                                    "rule": "!self.contains('/') || self.indexOf('/') <= 253",
                                    "message": "topology.key: the prefix of a label key must be at most 253 characters",
                                }
                            ],
                        },
                    },
                },
            },
        },
    }


def resource_claims(desc):
    return {
        "type": "array",
        "description": desc,
        "maxItems": 4,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name"],
        "items": {
            "type": "object",
            "description": "PodGroupResourceClaim references exactly one ResourceClaim, either directly "
            "or by naming a ResourceClaimTemplate which is then turned into a ResourceClaim "
            "for the PodGroup.",
            "required": ["name"],
            "properties": {
                "name": label(
                    "Name uniquely identifies this resource claim inside the PodGroup. It must be a DNS label."
                ),
                "resourceClaimName": subdomain(
                    "ResourceClaimName is the name of a ResourceClaim in the same namespace as this "
                    "PodGroup; it is reserved for the PodGroup instead of its individual pods. Exactly "
                    "one of resourceClaimName and resourceClaimTemplateName must be set."
                ),
                "resourceClaimTemplateName": subdomain(
                    "ResourceClaimTemplateName is the name of a ResourceClaimTemplate in the same "
                    "namespace as this PodGroup, used to create a ResourceClaim bound to the PodGroup "
                    "(recorded in status.resourceClaimStatuses). Exactly one of resourceClaimName and "
                    "resourceClaimTemplateName must be set."
                ),
            },
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.resourceClaimName) != has(self.resourceClaimTemplateName)",
                    "message": "resourceClaims: exactly one of resourceClaimName or resourceClaimTemplateName must be set",
                }
            ],
        },
    }


def disruption_mode(desc, default=None):
    s = {"type": "string", "description": desc, "enum": ["Pod", "PodGroup"]}
    if default:
        s["default"] = default
    return s


def priority_class_name(desc):
    return subdomain(desc)


def priority(desc):
    return {"type": "integer", "format": "int32", "minimum": -2147483648, "maximum": 1000000000, "description": desc}


def composite_scheduling_policy(desc):
    return {
        "type": "object",
        "description": desc,
        "properties": {
            "basic": {
                "type": "object",
                "description": "Basic specifies that the children of this group are scheduled independently: "
                "each is placed by its own policy. It is intentionally empty: its presence selects the basic "
                "policy (which counts as minGroupCount 1).",
            },
            "gang": {
                "type": "object",
                "description": "Gang specifies that the children of this group are scheduled with "
                "all-or-nothing semantics: at least minGroupCount of them at the same time, or none.",
                "required": ["minGroupCount"],
                "properties": {
                    "minGroupCount": {
                        "type": "integer",
                        "format": "int32",
                        "minimum": 1,
                        "description": "MinGroupCount is the minimum number of child groups (PodGroups or "
                        "CompositePodGroups, each by its own rule) that must be schedulable or scheduled at "
                        "the same time for the scheduler to admit the group. It must be a positive integer.",
                    },
                },
            },
        },
        "x-kubernetes-validations": [
            {
                "rule": "has(self.basic) != has(self.gang)",
                "message": "schedulingPolicy: exactly one of basic or gang must be set",
            }
        ],
    }


def composite_disruption_mode(desc, default=None):
    s = {
        "type": "object",
        "description": desc,
        "properties": {
            "single": {
                "type": "object",
                "description": "Single: the pods under this group may be disrupted by their own groups' "
                "rules (the default).",
            },
            "all": {
                "type": "object",
                "description": "All: the running pods of the whole tree under this group are disrupted together.",
            },
        },
        "x-kubernetes-validations": [
            {
                "rule": "has(self.single) != has(self.all)",
                "message": "disruptionMode: exactly one of single or all must be set",
            }
        ],
    }
    if default:
        s["default"] = default
    return s


template = {
    "type": "object",
    "description": "PodGroupTemplate represents a template for a set of pods with a scheduling policy.",
    "required": ["name", "schedulingPolicy"],
    "properties": {
        "name": label(
            "Name is a unique identifier for the PodGroupTemplate within the Workload. "
            "It must be a DNS label. This field is immutable."
        ),
        "schedulingPolicy": scheduling_policy(
            "SchedulingPolicy defines the scheduling policy for this PodGroupTemplate. "
            "Exactly one of basic or gang must be set."
        ),
        "schedulingConstraints": scheduling_constraints(
            "SchedulingConstraints defines optional scheduling constraints (e.g. topology) for this PodGroupTemplate."
        ),
        "resourceClaims": resource_claims(
            "ResourceClaims defines which ResourceClaims may be shared among Pods in the group (at most 4). "
            "Pods consume them by defining a claim in their own spec.resourceClaims that matches the "
            "PodGroup's claim exactly. This field is immutable."
        ),
        "disruptionMode": disruption_mode(
            "DisruptionMode defines the mode in which a PodGroup created from this template can be "
            "disrupted. One of Pod, PodGroup."
        ),
        "priorityClassName": priority_class_name(
            "PriorityClassName indicates the priority that should be considered when scheduling a pod "
            "group created from this template. Without it, pod groups get the global default priority "
            "class if one exists, otherwise priority zero."
        ),
        "priority": priority(
            "Priority is the value of priority of pod groups created from this template; normally "
            "populated from priorityClassName. The higher the value, the higher the priority."
        ),
    },
}

# A Workload's tree (upstream WorkloadMaxTreeDepth = 4): CompositePodGroupTemplates
# at levels 1 to 3, PodGroupTemplates as leaves at any level. A schema cannot
# recurse, so each level is written out; below the third a
# compositePodGroupTemplates list is refused, not pruned.
MAX_COMPOSITE_LEVELS = 3


def template_list(desc, items, min_items=None):
    s = {
        "type": "array",
        "description": desc,
        "maxItems": 8,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name"],
        "items": items,
    }
    if min_items:
        s["minItems"] = min_items
    return s


too_deep = {
    "type": "array",
    "description": "CompositePodGroupTemplates may not be nested deeper: the maximum template hierarchy "
    "depth is 4 (3 levels of CompositePodGroupTemplates above the PodGroupTemplates).",
    "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    "x-kubernetes-validations": [
        {
            "rule": "size(self) == 0",
            "message": "compositePodGroupTemplates: maximum template hierarchy depth is 4",
        }
    ],
}


def composite_template(level):
    """The CompositePodGroupTemplate schema at `level` (1: in the Workload's spec)."""
    children = (
        template_list(
            "CompositePodGroupTemplates is the list of templates for child CompositePodGroups, keyed by "
            "name (at most 8).",
            composite_template(level + 1),
        )
        if level < MAX_COMPOSITE_LEVELS
        else too_deep
    )
    return {
        "type": "object",
        "description": "CompositePodGroupTemplate represents a template for a CompositePodGroup (a group of "
        "groups) with a scheduling policy; the templates of its children are nested in it.",
        "required": ["name", "schedulingPolicy"],
        "properties": {
            "name": label(
                "Name is a unique identifier for the CompositePodGroupTemplate within the Workload (names "
                "are unique across all templates of the tree). It must be a DNS label."
            ),
            "schedulingPolicy": composite_scheduling_policy(
                "SchedulingPolicy defines the scheduling policy for this template. Exactly one of basic or "
                "gang must be set."
            ),
            "schedulingConstraints": scheduling_constraints(
                "SchedulingConstraints defines optional scheduling constraints (e.g. topology) for this "
                "CompositePodGroupTemplate.",
                "the composite pod group: all pods of its tree",
            ),
            "disruptionMode": composite_disruption_mode(
                "DisruptionMode defines the mode in which a CompositePodGroup created from this template can "
                "be disrupted. Exactly one of single or all."
            ),
            "priorityClassName": priority_class_name(
                "PriorityClassName indicates the priority that should be considered when scheduling a "
                "composite pod group created from this template."
            ),
            "priority": priority(
                "Priority is the value of priority of composite pod groups created from this template; "
                "normally populated from priorityClassName."
            ),
            "podGroupTemplates": template_list(
                "PodGroupTemplates is the list of templates for child PodGroups, keyed by name (at most 8).",
                template,
            ),
            "compositePodGroupTemplates": children,
        },
        "x-kubernetes-validations": [
            {
                "rule": "(has(self.podGroupTemplates) && size(self.podGroupTemplates) > 0) || "
                "(has(self.compositePodGroupTemplates) && size(self.compositePodGroupTemplates) > 0)",
                "message": "compositePodGroupTemplates: a template must have at least one child in "
                "podGroupTemplates or compositePodGroupTemplates",
            }
        ],
    }


workload_spec = {
    "type": "object",
    "description": "Spec defines the desired behavior of a Workload. Exactly one of podGroupTemplates "
    "and compositePodGroupTemplates must be set.",
    "properties": {
        "controllerRef": {
            "type": "object",
            "description": "ControllerRef is an optional reference to the controlling object, such as a "
            "Deployment or Job, so tools can link back to the original workload "
            "definition. This field is immutable.",
            "required": ["kind", "name"],
            "properties": {
                "apiGroup": {
                    "type": "string",
                    "description": "APIGroup is the group for the resource being referenced. If empty, "
                    "the kind must be in the core API group. It must be a DNS subdomain.",
                    "maxLength": 253,
                    # empty string means the core group, so allow "" as well
                    "pattern": r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$",
                },
                "kind": path_segment(
                    "Kind is the type of resource being referenced. It must be a path segment name.",
                    "controllerRef.kind",
                ),
                "name": path_segment(
                    "Name is the name of resource being referenced. It must be a path segment name.",
                    "controllerRef.name",
                ),
            },
        },
        "podGroupTemplates": {
            "type": "array",
            "description": "PodGroupTemplates is the list of templates that make up the Workload, keyed "
            "by name. At least 1 and at most 8 templates. Templates cannot be added or removed, and of "
            "a template only schedulingPolicy.gang.minCount may change.",
            "minItems": 1,
            "maxItems": 8,
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
            "items": {
                **template,
                "x-kubernetes-validations": immutable_except(
                    ["schedulingConstraints", "resourceClaims", "disruptionMode", "priorityClassName", "priority"],
                    "schedulingPolicy",
                    "minCount",
                ),
            },
            "x-kubernetes-validations": [
                {
                    "rule": "size(self) == size(oldSelf) && self.all(t, oldSelf.exists(o, o.name == t.name))",
                    "message": "podGroupTemplates: templates cannot be added or removed",
                }
            ],
        },
        "compositePodGroupTemplates": {
            **template_list(
                "CompositePodGroupTemplates is the list of CompositePodGroup templates that make up the "
                "Workload, keyed by name: each holds the templates of its children, CompositePodGroupTemplates "
                "at most 3 levels deep and PodGroupTemplates as leaves (a tree of at most 4 levels). At least 1 "
                "and at most 8 per list; template names are unique across the tree. Mirrors "
                "scheduling.k8s.io/v1alpha3. This field is immutable.",
                composite_template(1),
                min_items=1,
            ),
            "x-kubernetes-validations": [
                {
                    "rule": "self == oldSelf",
                    "message": "compositePodGroupTemplates is immutable",
                }
            ],
        },
    },
    "x-kubernetes-validations": [
        {
            "rule": "has(self.controllerRef) == has(oldSelf.controllerRef) && "
            "(!has(self.controllerRef) || self.controllerRef == oldSelf.controllerRef)",
            "message": "controllerRef is immutable",
            "fieldPath": ".controllerRef",
        },
        # Upstream's union of the two lists: exactly one is set.
        {
            "rule": "has(self.podGroupTemplates) || has(self.compositePodGroupTemplates)",
            "message": "exactly one of podGroupTemplates or compositePodGroupTemplates must be set",
            "fieldPath": ".podGroupTemplates",
            "reason": "FieldValueRequired",
        },
        {
            "rule": "!has(self.podGroupTemplates) || !has(self.compositePodGroupTemplates)",
            "message": "exactly one of podGroupTemplates or compositePodGroupTemplates must be set",
            "fieldPath": ".compositePodGroupTemplates",
            "reason": "FieldValueForbidden",
        },
        {
            "rule": "has(self.compositePodGroupTemplates) == has(oldSelf.compositePodGroupTemplates)",
            "message": "compositePodGroupTemplates is immutable",
            "fieldPath": ".compositePodGroupTemplates",
        },
    ],
}

condition = {
    "type": "object",
    "description": "Condition contains details for one aspect of the current state of this PodGroup "
    "(standard metav1.Condition).",
    "required": ["type", "status", "lastTransitionTime", "reason", "message"],
    "properties": {
        "type": {
            "type": "string",
            "description": "Type of condition in CamelCase or in foo.example.com/CamelCase, e.g. "
            "PodGroupScheduled or DisruptionTarget.",
            "maxLength": 316,
            "pattern": r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
        },
        "status": {
            "type": "string",
            "description": "Status of the condition, one of True, False, Unknown.",
            "enum": ["True", "False", "Unknown"],
        },
        "observedGeneration": {
            "type": "integer",
            "format": "int64",
            "minimum": 0,
            "description": "ObservedGeneration is the .metadata.generation that the condition was set based upon.",
        },
        "lastTransitionTime": {
            "type": "string",
            "format": "date-time",
            "description": "LastTransitionTime is the last time the condition transitioned from one status to another.",
        },
        "reason": {
            "type": "string",
            "description": "Reason is a programmatic CamelCase identifier of the condition's last "
            "transition, e.g. Scheduled, Unschedulable, SchedulerError, "
            "PreemptionByScheduler.",
            "minLength": 1,
            "maxLength": 1024,
            "pattern": r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        },
        "message": {
            "type": "string",
            "description": "Message is a human readable message indicating details about the transition.",
            "maxLength": 32768,
        },
    },
}

podgroup_spec = {
    "type": "object",
    "description": "Spec defines the desired state of the PodGroup. Every field is immutable once "
    "the PodGroup is created except schedulingPolicy.gang.minCount, which follows the job's size.",
    "required": ["schedulingPolicy"],
    "properties": {
        "podGroupTemplateRef": {
            "type": "object",
            "description": "PodGroupTemplateRef references an optional PodGroup template within another "
            "object (e.g. a Workload) that was used to create the PodGroup. Exactly one "
            "reference must be set. This field is immutable.",
            "properties": {
                "workload": {
                    "type": "object",
                    "description": "Workload references the PodGroupTemplate within the Workload object "
                    "that was used to create the PodGroup.",
                    "required": ["workloadName", "podGroupTemplateName"],
                    "properties": {
                        "workloadName": subdomain("WorkloadName is the name of the Workload object (same namespace)."),
                        "podGroupTemplateName": label(
                            "PodGroupTemplateName is the name of the PodGroupTemplate within the Workload object."
                        ),
                    },
                },
            },
            "x-kubernetes-validations": [
                {
                    "rule": "has(self.workload)",
                    "message": "podGroupTemplateRef: exactly one of workload must be set",
                }
            ],
        },
        "parentCompositePodGroupName": subdomain(
            "ParentCompositePodGroupName is the name of the CompositePodGroup (same namespace) this PodGroup "
            "is a child of: the tree under its root is scheduled as one unit. Unset: the PodGroup is scheduled "
            "on its own. This field is immutable."
        ),
        "schedulingPolicy": scheduling_policy(
            "SchedulingPolicy defines the scheduling policy for this instance of the PodGroup, normally "
            "copied from a PodGroupTemplate. Exactly one of basic or gang must be set, and stays so; "
            "gang.minCount may change (a job that grows or shrinks)."
        ),
        "schedulingConstraints": scheduling_constraints(
            "SchedulingConstraints defines optional scheduling constraints (e.g. topology) for this "
            "PodGroup. This field is immutable."
        ),
        "resourceClaims": resource_claims(
            "ResourceClaims defines which ResourceClaims may be shared among Pods in the group (at most 4). "
            "Pods consume them by defining a claim in their own spec.resourceClaims that matches the "
            "PodGroup's claim exactly (same name, same ResourceClaim or ResourceClaimTemplate). This "
            "field is immutable."
        ),
        "disruptionMode": disruption_mode(
            "DisruptionMode defines the mode in which this PodGroup can be disrupted by preemption. "
            "Pod: its pods may be taken one at a time. PodGroup: its running pods are taken together. "
            "Unset: a gang is taken whole (a gang left below minCount is useless) and a basic group "
            "pod by pod; upstream defaults the field to Pod, troupe leaves it unset. This field is immutable.",
        ),
        "priorityClassName": priority_class_name(
            "PriorityClassName defines the priority that should be considered when scheduling this pod "
            "group; resolved like priorityClassName on a PodGroupTemplate. This field is immutable."
        ),
        "priority": priority(
            "Priority is the value of priority of this pod group; normally populated from "
            "priorityClassName. The higher the value, the higher the priority. This field is immutable."
        ),
    },
    "x-kubernetes-validations": immutable_except(
        [
            "podGroupTemplateRef",
            "parentCompositePodGroupName",
            "schedulingConstraints",
            "resourceClaims",
            "disruptionMode",
            "priorityClassName",
            "priority",
        ],
        "schedulingPolicy",
        "minCount",
    ),
}

podgroup_status = {
    "type": "object",
    "description": "Status represents the current observed state of the PodGroup.",
    "properties": {
        "conditions": {
            "type": "array",
            "description": "Conditions represent the latest observations of the PodGroup's state. Known "
            "types: PodGroupScheduled (reasons Scheduled, Unschedulable, SchedulerError) "
            "and DisruptionTarget (reason PreemptionByScheduler).",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
            "items": condition,
        },
        "resourceClaimStatuses": {
            "type": "array",
            "description": "Status of resource claims: for each spec.resourceClaims entry that references "
            "a ResourceClaimTemplate, the name of the generated ResourceClaim.",
            "maxItems": 4,
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
            "items": {
                "type": "object",
                "description": "PodGroupResourceClaimStatus stores the generated ResourceClaim name for "
                "one PodGroupResourceClaim.",
                "required": ["name"],
                "properties": {
                    "name": label("Name matches the name of an entry in spec.resourceClaims."),
                    "resourceClaimName": subdomain(
                        "ResourceClaimName is the name of the ResourceClaim generated for the PodGroup in "
                        "its namespace. If unset, generating a ResourceClaim was not necessary."
                    ),
                },
            },
        },
    },
}


def crd(plural, kind, short, list_kind, desc, spec, status, columns, rules=None):
    schema = {
        "type": "object",
        "description": desc,
        "required": ["spec"],
        "properties": {
            "apiVersion": {
                "type": "string",
                "description": "APIVersion defines the versioned schema of this representation of an object.",
            },
            "kind": {
                "type": "string",
                "description": "Kind is a string value representing the REST resource this object represents.",
            },
            "metadata": {"type": "object"},
            "spec": spec,
        },
    }
    if status:
        schema["properties"]["status"] = status
    if rules:
        schema["x-kubernetes-validations"] = rules
    names = {"kind": kind, "listKind": list_kind, "plural": plural, "singular": kind.lower()}
    if short:
        names["shortNames"] = short
    version = {
        "name": "v1alpha2",
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": schema},
        "additionalPrinterColumns": columns,
    }
    if status:
        version["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.scheduling.troupe.dev",
            "labels": {"app.kubernetes.io/name": "troupe", "app.kubernetes.io/part-of": "troupe"},
        },
        "spec": {
            "group": "scheduling.troupe.dev",
            "names": names,
            "scope": "Namespaced",
            "versions": [version],
        },
    }


# "pg" is also scheduler-plugins' and Volcano's short name (and kubectl resolves
# "podgroups" to scheduling.k8s.io's where it is served): "tpg" and "twl" are troupe's
# alone; "pg" stays so that existing commands keep working where it is not shared.
pg = crd(
    "podgroups",
    "PodGroup",
    ["tpg", "pg"],
    "PodGroupList",
    "PodGroup represents a runtime instance of pods grouped together and scheduled by troupe as a "
    "unit. Pods join a group with the label scheduling.troupe.dev/pod-group: <name>. Mirrors "
    "scheduling.k8s.io/v1alpha2 PodGroup.",
    podgroup_spec,
    podgroup_status,
    [
        {
            "name": "Policy",
            "type": "string",
            "jsonPath": ".spec.schedulingPolicy",
            "description": 'The scheduling policy: {"basic":{}} or {"gang":{"minCount":N}}.',
        },
        {
            "name": "MinCount",
            "type": "integer",
            "jsonPath": ".spec.schedulingPolicy.gang.minCount",
            "description": "Gang minCount (empty for the basic policy).",
        },
        {
            "name": "Scheduled",
            "type": "string",
            "jsonPath": '.status.conditions[?(@.type=="PodGroupScheduled")].reason',
            "description": "Reason of the PodGroupScheduled condition.",
        },
        {
            "name": "Parent",
            "type": "string",
            "priority": 1,
            "jsonPath": ".spec.parentCompositePodGroupName",
            "description": "The CompositePodGroup this group is a child of.",
        },
        {
            "name": "Workload",
            "type": "string",
            "priority": 1,
            "jsonPath": ".spec.podGroupTemplateRef.workload.workloadName",
            "description": "The Workload this group was created from.",
        },
        {
            "name": "Template",
            "type": "string",
            "priority": 1,
            "jsonPath": ".spec.podGroupTemplateRef.workload.podGroupTemplateName",
            "description": "The PodGroupTemplate this group was created from.",
        },
        {
            "name": "Priority",
            "type": "integer",
            "priority": 1,
            "jsonPath": ".spec.priority",
            "description": "Priority of the group.",
        },
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ],
    rules=[
        {
            # Upstream: each status entry must match the name of an entry in spec.resourceClaims.
            "rule": "!has(self.status) || !has(self.status.resourceClaimStatuses) || "
            "self.status.resourceClaimStatuses.all(s, has(self.spec.resourceClaims) && "
            "self.spec.resourceClaims.exists(c, c.name == s.name))",
            "message": "status.resourceClaimStatuses: each name must match an entry in spec.resourceClaims",
            "fieldPath": ".status.resourceClaimStatuses",
        }
    ],
)

wl = crd(
    "workloads",
    "Workload",
    ["twl"],
    "WorkloadList",
    "Workload expresses scheduling constraints used when managing the lifecycle of a workload "
    "(scheduling, preemption, eviction) as a set of PodGroupTemplates. Mirrors "
    "scheduling.k8s.io/v1alpha2 Workload.",
    workload_spec,
    None,
    [
        {
            "name": "Controller-Kind",
            "type": "string",
            "jsonPath": ".spec.controllerRef.kind",
            "description": "Kind of the controlling object.",
        },
        {
            "name": "Controller",
            "type": "string",
            "jsonPath": ".spec.controllerRef.name",
            "description": "Name of the controlling object.",
        },
        {
            "name": "First-Template",
            "type": "string",
            "jsonPath": ".spec.podGroupTemplates[0].name",
            "description": "Name of the first PodGroupTemplate.",
        },
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ],
)


composite_spec = {
    "type": "object",
    "description": "Spec defines the desired state of the CompositePodGroup. Every field is immutable "
    "once the CompositePodGroup is created except schedulingPolicy.gang.minGroupCount.",
    "required": ["workloadRef", "schedulingPolicy"],
    "properties": {
        "parentCompositePodGroupName": subdomain(
            "ParentCompositePodGroupName is the name of the CompositePodGroup (same namespace) this one is a "
            "child of. Unset: this CompositePodGroup is the root of its tree, the unit that is scheduled. A "
            "tree has at most 4 levels (3 of CompositePodGroups above the PodGroups)."
        ),
        "workloadRef": {
            "type": "object",
            "description": "WorkloadRef references the CompositePodGroupTemplate within the Workload object "
            "that was used to create the CompositePodGroup.",
            "required": ["workloadName", "templateName"],
            "properties": {
                "workloadName": subdomain("WorkloadName is the name of the Workload object (same namespace)."),
                "templateName": label(
                    "TemplateName is the name of the CompositePodGroupTemplate within the Workload object."
                ),
            },
        },
        "schedulingPolicy": composite_scheduling_policy(
            "SchedulingPolicy defines the scheduling policy for this CompositePodGroup: basic, or gang with "
            "the minimum number of its children (minGroupCount) placed together. Exactly one of basic or gang "
            "must be set."
        ),
        "schedulingConstraints": scheduling_constraints(
            "SchedulingConstraints defines optional scheduling constraints (e.g. topology) for this "
            "CompositePodGroup: every pod of its tree is placed within them, and each child within them too.",
            "the composite pod group: all pods of its tree",
        ),
        "disruptionMode": composite_disruption_mode(
            "DisruptionMode defines the mode in which this CompositePodGroup can be disrupted by preemption. "
            "single (the default): each child by its own rule. all: the running pods of the whole tree under "
            "it are taken together.",
            default={"single": {}},
        ),
        "priorityClassName": priority_class_name(
            "PriorityClassName defines the priority that should be considered when scheduling this composite "
            "pod group (the root's is the tree's)."
        ),
        "priority": priority(
            "Priority is the value of priority of this composite pod group; normally populated from "
            "priorityClassName. The higher the value, the higher the priority."
        ),
    },
    "x-kubernetes-validations": immutable_except(
        [
            "parentCompositePodGroupName",
            "workloadRef",
            "schedulingConstraints",
            "disruptionMode",
            "priorityClassName",
            "priority",
        ],
        "schedulingPolicy",
        "minGroupCount",
    ),
}

composite_status = {
    "type": "object",
    "description": "Status represents the current observed state of the CompositePodGroup.",
    "properties": {
        "conditions": {
            "type": "array",
            "description": "Conditions represent the latest observations of the CompositePodGroup's state. "
            "Known types: CompositePodGroupInitiallyScheduled (reasons Scheduled, Unschedulable, "
            "SchedulerError, Invalid) and DisruptionTarget (reason PreemptionByScheduler).",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
            "items": condition,
        },
    },
}

# "cpg" is upstream's natural abbreviation: "tcpg" is troupe's alone.
cpg = crd(
    "compositepodgroups",
    "CompositePodGroup",
    ["tcpg"],
    "CompositePodGroupList",
    "CompositePodGroup groups PodGroups (and other CompositePodGroups) into a tree that troupe schedules "
    "as one unit: its children name it in spec.parentCompositePodGroupName. Mirrors "
    "scheduling.k8s.io/v1alpha3 CompositePodGroup.",
    composite_spec,
    composite_status,
    [
        {
            "name": "Policy",
            "type": "string",
            "jsonPath": ".spec.schedulingPolicy",
            "description": 'The scheduling policy: {"basic":{}} or {"gang":{"minGroupCount":N}}.',
        },
        {
            "name": "MinGroups",
            "type": "integer",
            "jsonPath": ".spec.schedulingPolicy.gang.minGroupCount",
            "description": "Gang minGroupCount (empty for the basic policy).",
        },
        {
            "name": "Parent",
            "type": "string",
            "jsonPath": ".spec.parentCompositePodGroupName",
            "description": "The CompositePodGroup this one is a child of (empty for a root).",
        },
        {
            "name": "Scheduled",
            "type": "string",
            "jsonPath": '.status.conditions[?(@.type=="CompositePodGroupInitiallyScheduled")].reason',
            "description": "Reason of the CompositePodGroupInitiallyScheduled condition.",
        },
        {
            "name": "Workload",
            "type": "string",
            "priority": 1,
            "jsonPath": ".spec.workloadRef.workloadName",
            "description": "The Workload this group was created from.",
        },
        {
            "name": "Template",
            "type": "string",
            "priority": 1,
            "jsonPath": ".spec.workloadRef.templateName",
            "description": "The CompositePodGroupTemplate this group was created from.",
        },
        {
            "name": "Priority",
            "type": "integer",
            "priority": 1,
            "jsonPath": ".spec.priority",
            "description": "Priority of the group.",
        },
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ],
)


class Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data):
        return True


HEADER = """# Mirrors the upstream Go types of scheduling.k8s.io/v1alpha2 (k8s.io/api v0.36) field
# for field; only the API group differs. Trees of groups add v1alpha3's fields (k8s.io/api
# v0.37): PodGroup.spec.parentCompositePodGroupName, Workload.spec.compositePodGroupTemplates.
# Validation is OpenAPI + CEL so that a bad object is refused by the apiserver with a
# message naming the field.
"""


COMPOSITE_HEADER = """# Mirrors the upstream Go type CompositePodGroup of scheduling.k8s.io/v1alpha3 (k8s.io/api
# v0.37) field for field, in troupe's API group and version (v1alpha2, as its other kinds).
# troupe differs where its PodGroup does: up to 4 topology keys, and no preemptionPolicy.
# Validation is OpenAPI + CEL so that a bad object is refused by the apiserver with a
# message naming the field.
"""


def dump(obj) -> str:
    return "---\n" + yaml.dump(obj, Dumper=Dumper, sort_keys=False, width=100, default_flow_style=False)


def render() -> dict[str, str]:
    """File name (relative to the output directory) -> the text this script writes for it."""
    out = {
        f"{path}.scheduling.troupe.dev.yaml": header + dump(obj)
        for obj, path, header in (
            (pg, "podgroups", HEADER),
            (wl, "workloads", HEADER),
            (cpg, "compositepodgroups", COMPOSITE_HEADER),
        )
    }
    for name, (obj, what, origin) in compat_crds.FILES.items():
        out[f"compat/{name}"] = compat_crds.HEADER.format(what=what, origin=origin, file=name) + dump(obj)
    return out


def check(outdir: Path) -> int:
    stale = []
    for name, text in render().items():
        path = outdir / name
        current = path.read_text() if path.exists() else ""
        if current != text:
            stale.append(path)
            sys.stdout.writelines(
                difflib.unified_diff(
                    current.splitlines(keepends=True),
                    text.splitlines(keepends=True),
                    fromfile=str(path),
                    tofile=f"{path} (generated)",
                )
            )
    if stale:
        print(
            f"{', '.join(map(str, stale))}: out of date with hack/gen-crds.py; "
            f"run `python hack/gen-crds.py {outdir}` and commit the result",
            file=sys.stderr,
        )
        return 1
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "outdir", nargs="?", type=Path, default=Path("crds"), help="directory of the CRD YAML files (default: crds)"
    )
    ap.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 with a diff if the files are not what would be written",
    )
    args = ap.parse_args()
    if args.check:
        return check(args.outdir)
    for name, text in render().items():
        (args.outdir / name).parent.mkdir(parents=True, exist_ok=True)
        (args.outdir / name).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
