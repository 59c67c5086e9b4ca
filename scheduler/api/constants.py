"""The user-facing names of troupe: API group, kinds, label, conditions, reasons, events.

Users and their tooling depend on these strings; change them only as an API change."""

from collections.abc import Mapping
from types import MappingProxyType

GROUP = "scheduling.troupe.dev"
VERSION = "v1alpha2"
API_VERSION = f"{GROUP}/{VERSION}"
PODGROUP_PLURAL = "podgroups"
WORKLOAD_PLURAL = "workloads"

DEFAULT_SCHEDULER_NAME = "troupe-scheduler"
POD_GROUP_LABEL = f"{GROUP}/pod-group"

# PodGroup condition, as upstream scheduling.k8s.io/v1alpha2.
POD_GROUP_SCHEDULED = "PodGroupScheduled"
REASON_SCHEDULED = "Scheduled"
REASON_UNSCHEDULABLE = "Unschedulable"
REASON_SCHEDULER_ERROR = "SchedulerError"

# Preemption: the victim condition (on pods and on PodGroups) and events, as upstream.
DISRUPTION_TARGET = "DisruptionTarget"
REASON_PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"
EVENT_PREEMPTED = "Preempted"  # on a victim pod or PodGroup
EVENT_NOMINATED = "Nominated"  # on a preemptor pod: waiting for its victims on a node
EVENT_RESERVED = "Reserved"  # on a starving PodGroup (or lone pod): room held until running pods finish

# Set on each pod of a gang or tree by its Binding (profile autoscaling.protectRunning):
# Karpenter's and cluster-autoscaler's own annotations that keep a pod's node.
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
PROTECT_RUNNING: Mapping[str, str] = MappingProxyType({DO_NOT_DISRUPT: "true", SAFE_TO_EVICT: "false"})

# PodScheduled=False on a pod whose unit waits whole for new nodes asked of an
# autoscaler (or that none can make whole): not "Unschedulable", which
# autoscalers provision for pod by pod (docs/autoscaling.md).
REASON_POD_GROUP_UNSCHEDULABLE = "PodGroupUnschedulable"

# Pod condition and event reasons, as upstream kube-scheduler.
POD_SCHEDULED = "PodScheduled"
EVENT_SCHEDULED = "Scheduled"
EVENT_FAILED_SCHEDULING = "FailedScheduling"

# Events and the condition on a Job that opted in (api/jobs.py).
JOB_SCHEDULING_BLOCKED = "SchedulingBlocked"  # upstream's Job condition: its scheduling objects cannot be made
REASON_POD_GROUP_MADE = "PodGroupCanBeMade"  # SchedulingBlocked=False once the problem is gone
EVENT_INVALID_JOB_SCHEDULING = "InvalidSchedulingPolicy"  # Warning: nothing is made for it
EVENT_POD_GROUP_CREATED = "PodGroupCreated"
EVENT_POD_GROUP_DELETED = "PodGroupDeleted"
EVENT_POD_GROUP_RESIZED = "PodGroupResized"
EVENT_FAILED_POD_GROUP_CREATE = "FailedPodGroupCreate"  # Warning: the API refused; retried
