"""troupe-scheduler's RBAC grants exactly what the scheduler does, and no more.

Checked twice: by impersonation from the admin identity (`--as`, allowed for
system:masters) and with the ServiceAccount's real token (`as_scheduler=True`,
`kubectl auth can-i` without `--as`), plus a few real requests with the token.
"""

from __future__ import annotations

import json
import uuid

import pytest

from scheduler.api.sources import registry

pytestmark = pytest.mark.integration

SA = "system:serviceaccount:troupe-system:troupe-scheduler"
SYSTEM_NS = "troupe-system"
OTHER_NS = "default"
GROUP = "scheduling.troupe.dev"

# (verb, resource, subresource, namespace); namespace None means --all-namespaces
# (cluster-wide for namespaced resources, the only scope for cluster-scoped ones).
Check = tuple[str, str, str | None, str | None]

GRANTED: list[Check] = [
    *[(v, "pods", None, ns) for v in ("get", "list", "watch") for ns in (None, OTHER_NS)],
    ("delete", "pods", None, OTHER_NS),  # preemption victims
    # the pods that stand in for a unit waiting for new nodes (docs/autoscaling.md)
    ("create", "pods", None, OTHER_NS),
    ("deletecollection", "pods", None, OTHER_NS),
    # (NodePools, get and list: this cluster serves no such kind; troupe reading
    # them with this role is test_autoscaling.py's `pools` fixture)
    *[(v, "poddisruptionbudgets.policy", None, ns) for v in ("get", "list", "watch") for ns in (None, OTHER_NS)],
    ("create", "pods", "binding", None),
    ("create", "pods", "binding", OTHER_NS),
    ("patch", "pods", "status", OTHER_NS),
    *[(v, "nodes", None, None) for v in ("get", "list", "watch")],
    *[(v, "namespaces", None, None) for v in ("get", "list", "watch")],
    *[
        (v, f"{r}.{GROUP}", None, ns)
        for r in ("podgroups", "workloads")
        for v in ("get", "list", "watch")
        for ns in (None, OTHER_NS)
    ],
    *[(v, f"podgroups.{GROUP}", "status", OTHER_NS) for v in ("get", "patch", "update")],
    # The Job integration: a Workload and a PodGroup per opted-in Job (minCount patched, deleted on suspend)
    *[(v, f"{r}.{GROUP}", None, OTHER_NS) for r in ("podgroups", "workloads") for v in ("create", "delete", "patch")],
    *[(v, "jobs.batch", None, ns) for v in ("get", "list", "watch") for ns in (None, OTHER_NS)],
    ("patch", "jobs.batch", "status", OTHER_NS),  # SchedulingBlocked
    *[(v, "events.events.k8s.io", None, ns) for v in ("create", "patch") for ns in (None, OTHER_NS)],
    *[(v, "events", None, ns) for v in ("create", "patch") for ns in (None, OTHER_NS)],
    *[(v, "priorityclasses.scheduling.k8s.io", None, None) for v in ("get", "list", "watch")],
    *[(v, "leases.coordination.k8s.io", None, SYSTEM_NS) for v in ("get", "create", "update")],
    # DynamicResources: claims read and written (finalizer, allocation, reservedFor); devices read
    *[(v, "resourceclaims.resource.k8s.io", None, ns) for v in ("get", "list", "watch") for ns in (None, OTHER_NS)],
    *[(v, "resourceclaims.resource.k8s.io", None, OTHER_NS) for v in ("patch", "update", "create", "delete")],
    ("get", "resourceclaimtemplates.resource.k8s.io", None, OTHER_NS),
    *[(v, "resourceclaims.resource.k8s.io", "status", OTHER_NS) for v in ("get", "patch", "update")],
    *[(v, "resourceclaims.resource.k8s.io", "binding", OTHER_NS) for v in ("patch", "update")],
    *[
        (v, f"{r}.resource.k8s.io", None, None)
        for r in ("resourceslices", "deviceclasses", "devicetaintrules")
        for v in ("get", "list", "watch")
    ],
]

DENIED: list[Check] = [
    # secrets, anywhere
    *[(v, "secrets", None, ns) for v in ("get", "list", "watch") for ns in (None, SYSTEM_NS, OTHER_NS)],
    # pods: never rewritten by the scheduler (created and deleted by label: stand-ins only)
    *[(v, "pods", None, OTHER_NS) for v in ("update", "patch")],
    # PodDisruptionBudgets are only read
    *[(v, "poddisruptionbudgets.policy", None, OTHER_NS) for v in ("create", "update", "patch", "delete")],
    ("update", "pods", "status", OTHER_NS),
    ("create", "pods", "eviction", OTHER_NS),
    ("create", "pods", "exec", OTHER_NS),
    # nodes are read-only
    *[(v, "nodes", None, None) for v in ("create", "update", "patch", "delete")],
    ("patch", "nodes", "status", None),
    *[(v, "namespaces", None, None) for v in ("create", "update", "patch", "delete")],
    # groups are made, resized (patch) and deleted one by one for Jobs, never replaced or deleted in bulk
    *[(v, f"podgroups.{GROUP}", None, OTHER_NS) for v in ("update", "deletecollection")],
    *[(v, f"workloads.{GROUP}", None, OTHER_NS) for v in ("update", "deletecollection")],
    # Jobs are only read: never created, changed or deleted (their status only patched, one condition)
    *[(v, "jobs.batch", None, OTHER_NS) for v in ("create", "update", "patch", "delete")],
    ("update", "jobs.batch", "status", OTHER_NS),
    ("update", f"workloads.{GROUP}", "status", OTHER_NS),
    # config maps: not cluster-wide, not in other namespaces
    *[(v, "configmaps", None, ns) for v in ("get", "list", "watch", "create", "update") for ns in (None, OTHER_NS)],
    # leases only in troupe-system, and never deleted
    *[(v, "leases.coordination.k8s.io", None, OTHER_NS) for v in ("get", "create", "update")],
    ("delete", "leases.coordination.k8s.io", None, SYSTEM_NS),
    # events are written, never deleted
    ("delete", "events", None, OTHER_NS),
    ("delete", "events.events.k8s.io", None, OTHER_NS),
    # DRA: templates only read, claims never deleted in bulk; devices and classes are the driver's
    *[(v, "resourceclaimtemplates.resource.k8s.io", None, OTHER_NS) for v in ("list", "create", "update", "delete")],
    ("deletecollection", "resourceclaims.resource.k8s.io", None, OTHER_NS),
    *[
        (v, f"{r}.resource.k8s.io", None, None)
        for r in ("resourceslices", "deviceclasses", "devicetaintrules")
        for v in ("create", "update", "patch", "delete")
    ],
    # no writes to priority classes, no RBAC escalation, no CRD changes
    *[(v, "priorityclasses.scheduling.k8s.io", None, None) for v in ("create", "update", "delete")],
    ("create", "clusterrolebindings.rbac.authorization.k8s.io", None, None),
    ("create", "rolebindings.rbac.authorization.k8s.io", None, SYSTEM_NS),
    ("escalate", "clusterroles.rbac.authorization.k8s.io", None, None),
    ("impersonate", "serviceaccounts", None, SYSTEM_NS),
    ("create", "serviceaccounts", "token", SYSTEM_NS),
    ("update", "customresourcedefinitions.apiextensions.k8s.io", None, None),
    ("*", "*", None, None),
]


def _source_checks(api_groups: set[str]) -> list[Check]:
    """What the group sources of `api_groups` need, from their registry
    (api/sources: GroupKind.rbac): reads cluster-wide and in a namespace,
    writes in a namespace."""
    checks: list[Check] = []
    for source in registry.SOURCES:
        for kind in source.kinds:
            for group, resource, verbs in kind.rbac():
                if group not in api_groups:
                    continue
                plural, _, sub = resource.partition("/")
                for verb in verbs:
                    spaces = (None, OTHER_NS) if verb in ("get", "list", "watch") else (OTHER_NS,)
                    checks += [(verb, f"{plural}.{group}", sub or None, ns) for ns in spaces]
    return checks


# The native Workload API, checked where it is served (`native_cluster`;
# kubectl warns about a resource the server does not have).
NATIVE_GRANTED: list[Check] = _source_checks({"scheduling.k8s.io"})
# The PodGroups of scheduler-plugins and Volcano (RBAC needs no CRD installed).
ECOSYSTEM = ("podgroups.scheduling.x-k8s.io", "podgroups.scheduling.volcano.sh")
ECOSYSTEM_GRANTED: list[Check] = _source_checks({"scheduling.x-k8s.io", "scheduling.volcano.sh"})
ECOSYSTEM_DENIED: list[Check] = [
    *[(v, r, None, OTHER_NS) for r in ECOSYSTEM for v in ("create", "update", "delete")],
    ("patch", "podgroups.scheduling.x-k8s.io", None, OTHER_NS),
    # Volcano's CRD has no status subresource: its status is patched on the object
    ("patch", "podgroups.scheduling.volcano.sh", "status", OTHER_NS),
    *[("update", r, "status", OTHER_NS) for r in ECOSYSTEM],
]
NATIVE_DENIED: list[Check] = [
    # PodGroups are only read (their status patched); Workloads not at all
    *[(v, "podgroups.scheduling.k8s.io", None, OTHER_NS) for v in ("create", "update", "patch", "delete")],
    ("update", "podgroups.scheduling.k8s.io", "status", OTHER_NS),
    *[(v, "workloads.scheduling.k8s.io", None, OTHER_NS) for v in ("get", "list", "create", "delete")],
]


def _args(check: Check) -> list[str]:
    verb, resource, sub, ns = check
    args = ["auth", "can-i", verb, resource]
    if sub:
        args.append(f"--subresource={sub}")
    args += ["-n", ns] if ns else ["--all-namespaces"]
    return args


def _can_i(cluster, check: Check, *, real_token: bool) -> bool:
    args = _args(check)
    if real_token:
        res = cluster.kubectl(*args, check=False, as_scheduler=True)
    else:
        res = cluster.kubectl(*args, f"--as={SA}", check=False)
    answer = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else ""
    assert answer in ("yes", "no"), f"kubectl {' '.join(args)}: rc={res.returncode}\n{res.stdout}\n{res.stderr}"
    assert (res.returncode == 0) == (answer == "yes"), res
    # A misspelt resource would answer "no" and pass silently; kubectl warns about it.
    assert "Warning" not in res.stderr, res.stderr
    return answer == "yes"


def _id(check: Check) -> str:
    verb, resource, sub, ns = check
    return f"{verb}-{resource}{'/' + sub if sub else ''}@{ns or 'all'}"


@pytest.mark.parametrize("real_token", [False, True], ids=["impersonated", "token"])
@pytest.mark.parametrize("check", GRANTED, ids=[_id(c) for c in GRANTED])
def test_needed_permission_is_granted(installed, check, real_token):
    assert _can_i(installed, check, real_token=real_token), f"{SA} must be allowed to {_id(check)}"


@pytest.mark.parametrize("real_token", [False, True], ids=["impersonated", "token"])
@pytest.mark.parametrize("check", NATIVE_GRANTED, ids=[_id(c) for c in NATIVE_GRANTED])
def test_needed_native_permission_is_granted(native_cluster, check, real_token):
    assert _can_i(native_cluster, check, real_token=real_token), f"{SA} must be allowed to {_id(check)}"


@pytest.mark.parametrize("real_token", [False, True], ids=["impersonated", "token"])
@pytest.mark.parametrize("check", NATIVE_DENIED, ids=[_id(c) for c in NATIVE_DENIED])
def test_other_native_permission_is_denied(native_cluster, check, real_token):
    assert not _can_i(native_cluster, check, real_token=real_token), f"{SA} must not be allowed to {_id(check)}"


@pytest.mark.parametrize("check", ECOSYSTEM_GRANTED, ids=[_id(c) for c in ECOSYSTEM_GRANTED])
def test_needed_ecosystem_permission_is_granted(operator_cluster, check):
    assert _can_i(operator_cluster, check, real_token=True), f"{SA} must be allowed to {_id(check)}"


@pytest.mark.parametrize("check", ECOSYSTEM_DENIED, ids=[_id(c) for c in ECOSYSTEM_DENIED])
def test_other_ecosystem_permission_is_denied(operator_cluster, check):
    assert not _can_i(operator_cluster, check, real_token=True), f"{SA} must not be allowed to {_id(check)}"


@pytest.mark.parametrize("real_token", [False, True], ids=["impersonated", "token"])
@pytest.mark.parametrize("check", DENIED, ids=[_id(c) for c in DENIED])
def test_other_permission_is_denied(installed, check, real_token):
    assert not _can_i(installed, check, real_token=real_token), f"{SA} must not be allowed to {_id(check)}"


def test_scheduler_kubeconfig_is_the_service_account(installed):
    res = installed.kubectl("auth", "whoami", "-o", "json", as_scheduler=True)
    user = json.loads(res.stdout)["status"]["userInfo"]
    assert user["username"] == SA
    assert "system:serviceaccounts:troupe-system" in user.get("groups", [])


# --------------------------------------------------------------------------- real requests with the token


def _podgroup(name: str) -> str:
    return json.dumps(
        {
            "apiVersion": f"{GROUP}/v1alpha2",
            "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
        }
    )


def test_scheduler_reads_groups_writes_their_status_and_makes_whole_ones(installed, namespace):
    installed.kubectl("create", "-n", namespace, "-f", "-", input=_podgroup("g"))

    res = installed.kubectl("get", "pg", "-A", "-o", "name", as_scheduler=True)
    assert "podgroup.scheduling.troupe.dev/g" in res.stdout

    status = {
        "status": {
            "conditions": [
                {
                    "type": "PodGroupScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/0 nodes are available",
                    "observedGeneration": 1,
                    "lastTransitionTime": "2026-01-02T03:04:05Z",
                }
            ]
        }
    }
    installed.kubectl(
        "patch",
        "-n",
        namespace,
        "pg/g",
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(status),
        as_scheduler=True,
    )
    got = json.loads(installed.kubectl("get", "-n", namespace, "pg/g", "-o", "json").stdout)
    assert got["status"]["conditions"][0]["reason"] == "Unschedulable"

    # Groups are made, resized (a Job's minCount, by patch) and deleted for
    # Jobs; never replaced whole (update).
    installed.kubectl(
        "patch",
        "-n",
        namespace,
        "pg/g",
        "--type=merge",
        "-p",
        '{"spec":{"schedulingPolicy":{"gang":{"minCount":3}}}}',
        as_scheduler=True,
    )
    got = json.loads(installed.kubectl("get", "-n", namespace, "pg/g", "-o", "json").stdout)
    got["metadata"]["labels"] = {"x": "y"}
    res = installed.kubectl(
        "replace", "-n", namespace, "-f", "-", input=json.dumps(got), check=False, as_scheduler=True
    )
    assert res.returncode != 0 and "Forbidden" in res.stderr, res.stderr
    installed.kubectl("create", "-n", namespace, "-f", "-", input=_podgroup("mine"), as_scheduler=True)
    installed.kubectl("delete", "-n", namespace, "pg/mine", as_scheduler=True)


def test_scheduler_token_cannot_read_secrets_or_configmaps(installed, namespace):
    installed.kubectl("create", "secret", "generic", "s", "-n", namespace, "--from-literal=k=v")
    installed.kubectl("create", "configmap", "c", "-n", namespace, "--from-literal=k=v")
    for args in (
        ("get", "secret", "s", "-n", namespace),
        ("get", "secrets", "-A"),
        ("get", "configmap", "c", "-n", namespace),
        ("get", "configmaps", "-A"),
    ):
        res = installed.kubectl(*args, check=False, as_scheduler=True)
        assert res.returncode != 0 and "Forbidden" in res.stderr, (args, res.stderr)


def test_scheduler_token_lists_pods_and_nodes_but_cannot_change_nodes(installed):
    installed.kubectl("get", "pods", "-A", as_scheduler=True)
    installed.kubectl("get", "nodes", as_scheduler=True)
    installed.kubectl("get", "priorityclasses", as_scheduler=True)
    node = f"rbac-node-{uuid.uuid4().hex[:8]}"
    installed.kubectl(
        "create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
    )
    res = installed.kubectl("label", "node", node, "stolen=yes", check=False, as_scheduler=True)
    assert res.returncode != 0 and "Forbidden" in res.stderr, res.stderr
    res = installed.kubectl("delete", "node", node, check=False, as_scheduler=True)
    assert res.returncode != 0 and "Forbidden" in res.stderr, res.stderr
    installed.kubectl("delete", "node", node)
