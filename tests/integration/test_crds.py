"""The CRDs validate what the scheduler will read, before it ever sees it.

Every bad object is refused by the real kube-apiserver with a message that
names the offending field; the PodGroup and CompositePodGroup specs are
immutable but for a gang's size (minCount, minGroupCount, as upstream);
status goes through the status subresource; `kubectl get pg` and
`kubectl get tcpg` show the printer columns; `tpg`, `twl` and `tcpg` are
troupe's own short names.

`namespace` (conftest) is a fresh namespace per test: namespaces never finish
deleting on this control plane, so none is reused.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
API_VERSION = "scheduling.troupe.dev/v1alpha2"

Obj = dict[str, Any]


# --------------------------------------------------------------------------- helpers


def podgroup(name: str = "pg", **spec: Any) -> Obj:
    spec.setdefault("schedulingPolicy", {"gang": {"minCount": 4}})
    return {"apiVersion": API_VERSION, "kind": "PodGroup", "metadata": {"name": name}, "spec": spec}


def template(name: str = "workers", **fields: Any) -> Obj:
    fields.setdefault("schedulingPolicy", {"gang": {"minCount": 2}})
    return {"name": name, **fields}


def workload(name: str = "wl", templates: list[Obj] | None = None, **spec: Any) -> Obj:
    spec["podGroupTemplates"] = templates if templates is not None else [template()]
    return {"apiVersion": API_VERSION, "kind": "Workload", "metadata": {"name": name}, "spec": spec}


def composite(name: str = "cpg", **spec: Any) -> Obj:
    spec.setdefault("schedulingPolicy", {"gang": {"minGroupCount": 2}})
    spec.setdefault("workloadRef", {"workloadName": "w", "templateName": "replica"})
    return {"apiVersion": API_VERSION, "kind": "CompositePodGroup", "metadata": {"name": name}, "spec": spec}


def composite_template(name: str, pgs: list[Obj] | None = None, cpgs: list[Obj] | None = None, **fields: Any) -> Obj:
    fields.setdefault("schedulingPolicy", {"gang": {"minGroupCount": 1}})
    if pgs is not None:
        fields["podGroupTemplates"] = pgs
    if cpgs is not None:
        fields["compositePodGroupTemplates"] = cpgs
    return {"name": name, **fields}


def composite_workload(name: str = "wl", templates: list[Obj] | None = None, **spec: Any) -> Obj:
    spec["compositePodGroupTemplates"] = templates if templates is not None else [composite_template("r", [template()])]
    return {"apiVersion": API_VERSION, "kind": "Workload", "metadata": {"name": name}, "spec": spec}


def chain(levels: int) -> Obj:
    """`levels` composite templates, each the only child of the one above, a PodGroup template at the bottom."""
    tree = composite_template(f"c{levels}", [template("leaf")])
    for level in range(levels - 1, 0, -1):
        tree = composite_template(f"c{level}", cpgs=[tree])
    return tree


def create(cluster, ns: str, obj: Obj, *, check: bool = True):
    return cluster.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(obj), check=check)


def get(cluster, ns: str, resource: str, name: str) -> Obj:
    out = cluster.kubectl("get", "-n", ns, resource, name, "-o", "json").stdout
    return json.loads(out)


def refused(cluster, ns: str, obj: Obj, *, verb: str = "create") -> str:
    """Submit `obj`, assert the apiserver refuses it, return stderr."""
    res = cluster.kubectl(verb, "-n", ns, "-f", "-", input=json.dumps(obj), check=False)
    assert res.returncode != 0, f"accepted but should be refused:\n{yaml.safe_dump(obj)}\n{res.stdout}"
    assert "is invalid" in res.stderr, res.stderr
    return res.stderr


# --------------------------------------------------------------------------- install


def test_install_applies_cleanly_and_is_idempotent(installed):
    res = installed.kubectl("apply", "-f", str(REPO / "crds"), "-f", str(REPO / "manifests"))
    assert "podgroups.scheduling.troupe.dev" in res.stdout
    assert "workloads.scheduling.troupe.dev" in res.stdout
    assert "compositepodgroups.scheduling.troupe.dev" in res.stdout
    assert "deployment.apps/troupe-scheduler" in res.stdout
    for crd in (
        "podgroups.scheduling.troupe.dev",
        "workloads.scheduling.troupe.dev",
        "compositepodgroups.scheduling.troupe.dev",
    ):
        body = json.loads(installed.kubectl("get", "crd", crd, "-o", "json").stdout)
        conds = {c["type"]: c["status"] for c in body["status"]["conditions"]}
        assert conds.get("Established") == "True", conds
        assert conds.get("NamesAccepted") == "True", conds
        assert conds.get("NonStructuralSchema") in (None, "False"), conds
        (version,) = body["spec"]["versions"]
        assert version["name"] == "v1alpha2" and version["served"] and version["storage"]
    res = installed.kubectl("api-resources", "--api-group=scheduling.troupe.dev", "-o", "wide")
    short = {line.split()[0]: line.split()[1] for line in res.stdout.splitlines()[1:]}
    # tpg/twl/tcpg are troupe's alone; pg is also scheduler-plugins' and Volcano's (kept for existing users).
    assert short == {"podgroups": "tpg,pg", "workloads": "twl", "compositepodgroups": "tcpg"}, res.stdout


def test_manifests_objects_exist(installed):
    ns = "troupe-system"
    installed.kubectl("get", "namespace", ns)
    installed.kubectl("get", "-n", ns, "serviceaccount/troupe-scheduler")
    installed.kubectl("get", "-n", ns, "service/troupe-scheduler-metrics")
    installed.kubectl("get", "clusterrole/troupe-scheduler", "clusterrolebinding/troupe-scheduler")
    cm = json.loads(installed.kubectl("get", "-n", ns, "configmap/troupe-scheduler-config", "-o", "json").stdout)
    config = yaml.safe_load(cm["data"]["config.yaml"])
    assert config["kind"] == "SchedulerConfiguration"
    assert config["profiles"][0]["schedulerName"] == "troupe-scheduler"
    assert config["leaderElection"]["leaderElect"] is True
    installed.kubectl("get", "-n", ns, "poddisruptionbudget/troupe-scheduler")
    dep = json.loads(installed.kubectl("get", "-n", ns, "deployment/troupe-scheduler", "-o", "json").stdout)
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["image"] == "ghcr.io/troupe-dev/troupe-scheduler:0.1.0"
    assert c["args"] == ["run", "--config", "/etc/troupe/config.yaml"]
    assert pod["serviceAccountName"] == "troupe-scheduler"
    assert dep["spec"]["replicas"] == 2
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 65532


# --------------------------------------------------------------------------- valid objects

VALID_PODGROUPS: dict[str, Obj] = {
    "basic": podgroup("basic", schedulingPolicy={"basic": {}}),
    "gang": podgroup("gang", schedulingPolicy={"gang": {"minCount": 4}}),
    "topology": podgroup(
        "topology",
        schedulingConstraints={"topology": [{"key": "topology.kubernetes.io/rack"}]},
    ),
    "claims": podgroup(
        "claims",
        resourceClaims=[
            {"name": "gpus", "resourceClaimTemplateName": "gpu-template"},
            {"name": "shared", "resourceClaimName": "shared-claim"},
        ],
    ),
    "everything": podgroup(
        "everything",
        podGroupTemplateRef={"workload": {"workloadName": "trainer", "podGroupTemplateName": "workers"}},
        schedulingPolicy={"gang": {"minCount": 1}},
        schedulingConstraints={"topology": [{"key": "rack"}]},
        resourceClaims=[{"name": "c1", "resourceClaimName": "c1"}],
        priorityClassName="high-priority",
        priority=1000,
        disruptionMode="PodGroup",
    ),
}


@pytest.mark.parametrize("name", list(VALID_PODGROUPS))
def test_valid_podgroup_is_accepted(installed, namespace, name):
    obj = VALID_PODGROUPS[name]
    create(installed, namespace, obj)
    stored = get(installed, namespace, "podgroups.scheduling.troupe.dev", name)
    for field, value in obj["spec"].items():
        assert stored["spec"][field] == value, field
    # Upstream defaults disruptionMode to Pod; troupe leaves it unset (a gang is then taken whole).
    assert stored["spec"].get("disruptionMode") == obj["spec"].get("disruptionMode")


def test_valid_workload_is_accepted(installed, namespace):
    obj = workload(
        "trainer",
        controllerRef={"apiGroup": "batch", "kind": "Job", "name": "trainer"},
        templates=[
            template("driver", schedulingPolicy={"basic": {}}),
            template(
                "workers",
                schedulingPolicy={"gang": {"minCount": 8}},
                schedulingConstraints={"topology": [{"key": "topology.kubernetes.io/zone"}]},
                resourceClaims=[{"name": "gpus", "resourceClaimTemplateName": "gpu"}],
                priorityClassName="batch-high",
                priority=100,
                disruptionMode="PodGroup",
            ),
        ]
        + [template(f"t{i}") for i in range(6)],  # 8 templates: the maximum
    )
    create(installed, namespace, obj)
    stored = get(installed, namespace, "workloads.scheduling.troupe.dev", "trainer")
    assert stored["spec"] == obj["spec"]
    # A core-group controller (empty apiGroup) is fine too.
    create(installed, namespace, workload("core", controllerRef={"apiGroup": "", "kind": "Pod", "name": "p"}))


VALID_COMPOSITES: dict[str, Obj] = {
    "basic": composite("basic", schedulingPolicy={"basic": {}}),
    "gang": composite("gang"),
    "everything": composite(
        "everything",
        parentCompositePodGroupName="root.of-tree",
        schedulingPolicy={"gang": {"minGroupCount": 3}},
        schedulingConstraints={"topology": [{"key": k} for k in ("rack", "block", "zone", "region")]},
        disruptionMode={"all": {}},
        priorityClassName="high-priority",
        priority=1000,
    ),
}


@pytest.mark.parametrize("name", list(VALID_COMPOSITES))
def test_valid_composite_is_accepted(installed, namespace, name):
    obj = VALID_COMPOSITES[name]
    create(installed, namespace, obj)
    stored = get(installed, namespace, "compositepodgroups.scheduling.troupe.dev", name)
    for field, value in obj["spec"].items():
        assert stored["spec"][field] == value, field
    # As upstream, disruptionMode defaults to single.
    assert stored["spec"]["disruptionMode"] == obj["spec"].get("disruptionMode", {"single": {}})


def test_podgroup_with_a_parent_is_accepted(installed, namespace):
    create(installed, namespace, podgroup("child", parentCompositePodGroupName="replica-0"))
    stored = get(installed, namespace, "tpg", "child")
    assert stored["spec"]["parentCompositePodGroupName"] == "replica-0"


def test_valid_composite_workload_is_accepted(installed, namespace):
    """Three levels of composite templates (the most), PodGroup templates at every level below the top."""
    obj = composite_workload(
        "replicas",
        controllerRef={"apiGroup": "leaderworkerset.x-k8s.io", "kind": "LeaderWorkerSet", "name": "lws"},
        templates=[
            composite_template(
                "replica",
                [template("leader", schedulingPolicy={"basic": {}})],
                [
                    composite_template(
                        "workers",
                        [template("shard-a"), template("shard-b")],
                        [composite_template("deep", [template("leaf")])],
                        schedulingConstraints={"topology": [{"key": "rack"}]},
                        disruptionMode={"all": {}},
                    )
                ],
                schedulingPolicy={"gang": {"minGroupCount": 2}},
                schedulingConstraints={"topology": [{"key": "zone"}]},
                priorityClassName="high",
                priority=100,
            )
        ],
    )
    create(installed, namespace, obj)
    stored = get(installed, namespace, "workloads.scheduling.troupe.dev", "replicas")
    assert stored["spec"] == obj["spec"]  # nothing pruned or defaulted at any level


def test_example_manifest_from_upstream_docs_works_after_changing_api_version(installed, namespace):
    """A PodGroup / Workload pair shaped like the Kubernetes documentation's example."""
    docs = f"""
apiVersion: {API_VERSION}
kind: Workload
metadata:
  name: training-job-workload
spec:
  controllerRef:
    apiGroup: batch
    kind: Job
    name: training-job
  podGroupTemplates:
  - name: workers
    schedulingPolicy:
      gang:
        minCount: 4
---
apiVersion: {API_VERSION}
kind: PodGroup
metadata:
  name: training-job-workers-pg
spec:
  podGroupTemplateRef:
    workload:
      workloadName: training-job-workload
      podGroupTemplateName: workers
  schedulingPolicy:
    gang:
      minCount: 4
"""
    installed.kubectl("apply", "-n", namespace, "-f", "-", input=docs)
    installed.kubectl("get", "-n", namespace, "pg/training-job-workers-pg", "workload/training-job-workload")


# --------------------------------------------------------------------------- bad objects


def _pg(**spec: Any) -> Callable[[], Obj]:
    return lambda: podgroup("bad", **spec)


def _wl(templates: list[Obj] | None = None, **spec: Any) -> Callable[[], Obj]:
    return lambda: workload("bad", templates=templates, **spec)


def _pg_without_policy() -> Obj:
    obj = podgroup("bad")
    del obj["spec"]["schedulingPolicy"]
    return obj


def _pg_without_spec() -> Obj:
    obj = podgroup("bad")
    del obj["spec"]
    return obj


def _cpg(**spec: Any) -> Callable[[], Obj]:
    return lambda: composite("bad", **spec)


def _cpg_without(field: str) -> Callable[[], Obj]:
    def make() -> Obj:
        obj = composite("bad")
        del obj["spec"][field]
        return obj

    return make


def _cwl(templates: list[Obj], **spec: Any) -> Callable[[], Obj]:
    return lambda: composite_workload("bad", templates=templates, **spec)


ONE_OF_POLICY = "schedulingPolicy: exactly one of basic or gang must be set"
ONE_OF_LIST = "exactly one of podGroupTemplates or compositePodGroupTemplates must be set"
ONE_OF_CLAIM = "resourceClaims: exactly one of resourceClaimName or resourceClaimTemplateName must be set"

# (id, object factory, substrings that must all appear in kubectl's stderr)
BAD_OBJECTS: list[tuple[str, Callable[[], Obj], list[str]]] = [
    # --- schedulingPolicy
    (
        "pg-policy-both",
        _pg(schedulingPolicy={"basic": {}, "gang": {"minCount": 2}}),
        ["spec.schedulingPolicy: Invalid value", ONE_OF_POLICY],
    ),
    ("pg-policy-neither", _pg(schedulingPolicy={}), ["spec.schedulingPolicy: Invalid value", ONE_OF_POLICY]),
    ("pg-policy-missing", _pg_without_policy, ["spec.schedulingPolicy: Required value"]),
    ("pg-spec-missing", _pg_without_spec, ["spec: Required value"]),
    (
        "pg-mincount-zero",
        _pg(schedulingPolicy={"gang": {"minCount": 0}}),
        ["spec.schedulingPolicy.gang.minCount: Invalid value: 0", "greater than or equal to 1"],
    ),
    (
        "pg-mincount-negative",
        _pg(schedulingPolicy={"gang": {"minCount": -3}}),
        ["spec.schedulingPolicy.gang.minCount: Invalid value: -3", "greater than or equal to 1"],
    ),
    (
        "pg-mincount-missing",
        _pg(schedulingPolicy={"gang": {}}),
        ["spec.schedulingPolicy.gang.minCount: Required value"],
    ),
    (
        "wl-policy-both",
        _wl([template(schedulingPolicy={"basic": {}, "gang": {"minCount": 2}})]),
        ["spec.podGroupTemplates[0].schedulingPolicy: Invalid value", ONE_OF_POLICY],
    ),
    (
        "wl-policy-neither",
        _wl([template(schedulingPolicy={})]),
        ["spec.podGroupTemplates[0].schedulingPolicy: Invalid value", ONE_OF_POLICY],
    ),
    (
        "wl-mincount-zero",
        _wl([template(schedulingPolicy={"gang": {"minCount": 0}})]),
        ["spec.podGroupTemplates[0].schedulingPolicy.gang.minCount: Invalid value: 0"],
    ),
    # --- podGroupTemplates
    (
        "wl-9-templates",
        _wl([template(f"t{i}") for i in range(9)]),
        ["spec.podGroupTemplates: Too many: 9: must have at most 8 items"],
    ),
    ("wl-0-templates", _wl([]), ["spec.podGroupTemplates: Invalid value: 0", "should have at least 1 items"]),
    ("wl-templates-missing", lambda: {**workload("bad"), "spec": {}}, ["spec.podGroupTemplates: Required value"]),
    (
        "wl-duplicate-template-names",
        _wl([template("a"), template("b"), template("a")]),
        ["spec.podGroupTemplates[2]: Duplicate value", '"name":"a"'],
    ),
    (
        "wl-template-name-not-dns-label",
        _wl([template("Not_A_Label")]),
        ['spec.podGroupTemplates[0].name: Invalid value: "Not_A_Label"', "should match"],
    ),
    (
        "wl-template-name-too-long",
        _wl([template("a" * 64)]),
        ["spec.podGroupTemplates[0].name: Too long: may not be more than 63"],
    ),
    (
        "wl-template-name-missing",
        _wl([{"schedulingPolicy": {"basic": {}}}]),
        ["spec.podGroupTemplates[0].name: Required value"],
    ),
    # --- topology
    (
        "pg-5-topology",
        _pg(schedulingConstraints={"topology": [{"key": k} for k in ("node", "rack", "block", "zone", "region")]}),
        ["spec.schedulingConstraints.topology: Too many: 5: must have at most 4 items"],
    ),
    (
        "wl-5-topology",
        _wl([template(schedulingConstraints={"topology": [{"key": k} for k in ("a", "b", "c", "d", "e")]})]),
        ["spec.podGroupTemplates[0].schedulingConstraints.topology: Too many: 5"],
    ),
    (
        "pg-topology-key-missing",
        _pg(schedulingConstraints={"topology": [{}]}),
        ["spec.schedulingConstraints.topology[0].key: Required value"],
    ),
    (
        "pg-topology-key-not-label-key",
        _pg(schedulingConstraints={"topology": [{"key": "no spaces/ok"}]}),
        ["spec.schedulingConstraints.topology[0].key: Invalid value", "should match"],
    ),
    # --- resourceClaims
    (
        "pg-5-claims",
        _pg(resourceClaims=[{"name": f"c{i}", "resourceClaimName": f"c{i}"} for i in range(5)]),
        ["spec.resourceClaims: Too many: 5: must have at most 4 items"],
    ),
    (
        "wl-5-claims",
        _wl([template(resourceClaims=[{"name": f"c{i}", "resourceClaimName": f"c{i}"} for i in range(5)])]),
        ["spec.podGroupTemplates[0].resourceClaims: Too many: 5: must have at most 4 items"],
    ),
    (
        "pg-claim-both-sources",
        _pg(resourceClaims=[{"name": "c", "resourceClaimName": "x", "resourceClaimTemplateName": "y"}]),
        ["spec.resourceClaims[0]: Invalid value", ONE_OF_CLAIM],
    ),
    (
        "pg-claim-neither-source",
        _pg(resourceClaims=[{"name": "c"}]),
        ["spec.resourceClaims[0]: Invalid value", ONE_OF_CLAIM],
    ),
    (
        "wl-claim-both-sources",
        _wl([template(resourceClaims=[{"name": "c", "resourceClaimName": "x", "resourceClaimTemplateName": "y"}])]),
        ["spec.podGroupTemplates[0].resourceClaims[0]: Invalid value", ONE_OF_CLAIM],
    ),
    (
        "wl-claim-neither-source",
        _wl([template(resourceClaims=[{"name": "c"}])]),
        ["spec.podGroupTemplates[0].resourceClaims[0]: Invalid value", ONE_OF_CLAIM],
    ),
    (
        "pg-claim-duplicate-names",
        _pg(resourceClaims=[{"name": "c", "resourceClaimName": "x"}, {"name": "c", "resourceClaimName": "y"}]),
        ["spec.resourceClaims[1]: Duplicate value"],
    ),
    (
        "pg-claim-name-missing",
        _pg(resourceClaims=[{"resourceClaimName": "x"}]),
        ["spec.resourceClaims[0].name: Required value"],
    ),
    (
        "pg-claim-bad-claim-name",
        _pg(resourceClaims=[{"name": "c", "resourceClaimName": "Bad_Name"}]),
        ['spec.resourceClaims[0].resourceClaimName: Invalid value: "Bad_Name"'],
    ),
    # --- disruptionMode, priority, names
    (
        "pg-bad-disruption-mode",
        _pg(disruptionMode="Never"),
        ['spec.disruptionMode: Unsupported value: "Never"', '"Pod"', '"PodGroup"'],
    ),
    (
        "wl-bad-disruption-mode",
        _wl([template(disruptionMode="Whenever")]),
        ['spec.podGroupTemplates[0].disruptionMode: Unsupported value: "Whenever"'],
    ),
    (
        "pg-priority-too-high",
        _pg(priority=2_000_000_000),
        ["spec.priority: Invalid value: 2000000000", "less than or equal to 1000000000"],
    ),
    (
        "pg-bad-priority-class-name",
        _pg(priorityClassName="High_Priority"),
        ['spec.priorityClassName: Invalid value: "High_Priority"'],
    ),
    (
        "pg-template-ref-empty",
        _pg(podGroupTemplateRef={}),
        ["spec.podGroupTemplateRef: Invalid value", "podGroupTemplateRef: exactly one of workload must be set"],
    ),
    (
        "pg-template-ref-missing-template-name",
        _pg(podGroupTemplateRef={"workload": {"workloadName": "w"}}),
        ["spec.podGroupTemplateRef.workload.podGroupTemplateName: Required value"],
    ),
    # --- CompositePodGroup
    (
        "cpg-min-group-count-zero",
        _cpg(schedulingPolicy={"gang": {"minGroupCount": 0}}),
        ["spec.schedulingPolicy.gang.minGroupCount: Invalid value: 0", "greater than or equal to 1"],
    ),
    (
        "cpg-min-group-count-missing",
        _cpg(schedulingPolicy={"gang": {}}),
        ["spec.schedulingPolicy.gang.minGroupCount: Required value"],
    ),
    (
        "cpg-policy-both",
        _cpg(schedulingPolicy={"basic": {}, "gang": {"minGroupCount": 2}}),
        ["spec.schedulingPolicy: Invalid value", ONE_OF_POLICY],
    ),
    ("cpg-policy-neither", _cpg(schedulingPolicy={}), ["spec.schedulingPolicy: Invalid value", ONE_OF_POLICY]),
    ("cpg-policy-missing", _cpg_without("schedulingPolicy"), ["spec.schedulingPolicy: Required value"]),
    ("cpg-workload-ref-missing", _cpg_without("workloadRef"), ["spec.workloadRef: Required value"]),
    (
        "cpg-workload-ref-missing-template",
        _cpg(workloadRef={"workloadName": "w"}),
        ["spec.workloadRef.templateName: Required value"],
    ),
    (
        "cpg-workload-ref-bad-template-name",
        _cpg(workloadRef={"workloadName": "w", "templateName": "not.a.label"}),
        ['spec.workloadRef.templateName: Invalid value: "not.a.label"'],
    ),
    (
        "cpg-5-topology",
        _cpg(schedulingConstraints={"topology": [{"key": k} for k in ("node", "rack", "block", "zone", "region")]}),
        ["spec.schedulingConstraints.topology: Too many: 5: must have at most 4 items"],
    ),
    (
        "cpg-duplicate-topology-keys",
        _cpg(schedulingConstraints={"topology": [{"key": "rack"}, {"key": "rack"}]}),
        ["spec.schedulingConstraints.topology: Invalid value", "topology: each key may appear only once"],
    ),
    (
        "cpg-disruption-mode-both",
        _cpg(disruptionMode={"single": {}, "all": {}}),
        ["spec.disruptionMode: Invalid value", "disruptionMode: exactly one of single or all must be set"],
    ),
    (
        "cpg-disruption-mode-string",
        _cpg(disruptionMode="Pod"),
        ['spec.disruptionMode: Invalid value: "string": spec.disruptionMode in body must be of type object'],
    ),
    (
        "cpg-bad-parent-name",
        _cpg(parentCompositePodGroupName="Not_A_Name"),
        ['spec.parentCompositePodGroupName: Invalid value: "Not_A_Name"', "should match"],
    ),
    (
        "cpg-priority-too-high",
        _cpg(priority=2_000_000_000),
        ["spec.priority: Invalid value: 2000000000", "less than or equal to 1000000000"],
    ),
    ("pg-bad-parent-name", _pg(parentCompositePodGroupName="a/b"), ["spec.parentCompositePodGroupName: Invalid value"]),
    # --- compositePodGroupTemplates
    (
        "wl-both-template-lists",
        lambda: {
            **workload("bad"),
            "spec": {"podGroupTemplates": [template()], "compositePodGroupTemplates": [chain(1)]},
        },
        ["spec.compositePodGroupTemplates: Forbidden", ONE_OF_LIST],
    ),
    (
        "wl-depth-5",
        _cwl([chain(4)]),
        [
            "spec.compositePodGroupTemplates[0].compositePodGroupTemplates[0].compositePodGroupTemplates[0]"
            ".compositePodGroupTemplates: Invalid value",
            "maximum template hierarchy depth is 4",
        ],
    ),
    (
        "wl-composite-without-children",
        _cwl([composite_template("empty")]),
        ["spec.compositePodGroupTemplates[0]: Invalid value", "must have at least one child"],
    ),
    (
        "wl-nested-composite-without-children",
        _cwl([composite_template("r", cpgs=[composite_template("empty", pgs=[])])]),
        ["spec.compositePodGroupTemplates[0].compositePodGroupTemplates[0]: Invalid value", "at least one child"],
    ),
    (
        "wl-0-composite-templates",
        _cwl([]),
        ["spec.compositePodGroupTemplates: Invalid value: 0", "should have at least 1 items"],
    ),
    (
        "wl-9-composite-children",
        _cwl([composite_template("r", [template(f"t{i}") for i in range(9)])]),
        ["spec.compositePodGroupTemplates[0].podGroupTemplates: Too many: 9: must have at most 8 items"],
    ),
    (
        "wl-composite-min-group-count-zero",
        _cwl([composite_template("r", [template()], schedulingPolicy={"gang": {"minGroupCount": 0}})]),
        ["spec.compositePodGroupTemplates[0].schedulingPolicy.gang.minGroupCount: Invalid value: 0"],
    ),
    (
        "wl-composite-duplicate-names",
        _cwl([chain(1), chain(1)]),
        ["spec.compositePodGroupTemplates[1]: Duplicate value", '"name":"c1"'],
    ),
    ("wl-controller-ref-missing-kind", _wl(controllerRef={"name": "x"}), ["spec.controllerRef.kind: Required value"]),
    (
        "wl-controller-ref-bad-name",
        _wl(controllerRef={"kind": "Job", "name": "a/b"}),
        ['spec.controllerRef.name: Invalid value: "a/b"'],
    ),
    (
        "wl-controller-ref-dotdot",
        _wl(controllerRef={"kind": "Job", "name": ".."}),
        ["spec.controllerRef.name: Invalid value", "controllerRef.name: must be a path segment name"],
    ),
]


@pytest.mark.parametrize(("factory", "expected"), [b[1:] for b in BAD_OBJECTS], ids=[b[0] for b in BAD_OBJECTS])
def test_bad_object_is_refused_naming_the_field(installed, namespace, factory, expected):
    stderr = refused(installed, namespace, factory())
    for text in expected:
        assert text in stderr, f"{text!r} not in:\n{stderr}"


def test_bad_objects_are_refused_by_apply_too(installed, namespace):
    """`kubectl apply` (what users run) reports the same field-level message."""
    res = installed.kubectl(
        "apply",
        "-n",
        namespace,
        "-f",
        "-",
        input=json.dumps(podgroup("bad", schedulingPolicy={"basic": {}, "gang": {"minCount": 1}})),
        check=False,
    )
    assert res.returncode != 0
    assert ONE_OF_POLICY in res.stderr, res.stderr


# --------------------------------------------------------------------------- immutability

POLICY_KIND_FIXED = "schedulingPolicy: basic or gang cannot change; only gang.minCount may"
POLICY_KIND_FIXED_COMPOSITE = "schedulingPolicy: basic or gang cannot change; only gang.minGroupCount may"


def _patch(cluster, ns: str, resource: str, patch: Obj, *extra: str, check: bool = False):
    return cluster.kubectl("patch", "-n", ns, resource, "--type=merge", "-p", json.dumps(patch), *extra, check=check)


@pytest.mark.parametrize(
    ("patch", "field", "message"),
    [
        ({"spec": {"schedulingPolicy": {"gang": None, "basic": {}}}}, "schedulingPolicy", POLICY_KIND_FIXED),
        ({"spec": {"priority": 7}}, "priority", "priority is immutable"),
        ({"spec": {"disruptionMode": "PodGroup"}}, "disruptionMode", "disruptionMode is immutable"),
        (
            {"spec": {"schedulingConstraints": {"topology": [{"key": "zone"}]}}},
            "schedulingConstraints",
            "schedulingConstraints is immutable",
        ),
        (
            {"spec": {"podGroupTemplateRef": {"workload": {"workloadName": "w", "podGroupTemplateName": "t"}}}},
            "podGroupTemplateRef",
            "podGroupTemplateRef is immutable",
        ),
    ],
    ids=["policy-kind", "priority", "disruptionMode", "topology", "templateRef"],
)
def test_podgroup_spec_is_immutable_but_for_min_count(installed, namespace, patch, field, message):
    create(installed, namespace, podgroup("frozen"))
    res = _patch(installed, namespace, "pg/frozen", patch)
    assert res.returncode != 0, res.stdout
    assert f"spec.{field}: Invalid value" in res.stderr and message in res.stderr, res.stderr
    stored = get(installed, namespace, "pg", "frozen")
    assert stored["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}


def test_podgroup_min_count_may_change(installed, namespace):
    """As upstream 1.37: a gang's minCount follows its job's size, up and down;
    below 1 is still refused, naming the field."""
    create(installed, namespace, podgroup("elastic"))
    for n in (6, 2):
        _patch(
            installed, namespace, "pg/elastic", {"spec": {"schedulingPolicy": {"gang": {"minCount": n}}}}, check=True
        )
        assert get(installed, namespace, "pg", "elastic")["spec"]["schedulingPolicy"] == {"gang": {"minCount": n}}
    res = _patch(installed, namespace, "pg/elastic", {"spec": {"schedulingPolicy": {"gang": {"minCount": 0}}}})
    assert res.returncode != 0 and "spec.schedulingPolicy.gang.minCount" in res.stderr, res.stderr


def test_podgroup_parent_is_immutable(installed, namespace):
    create(installed, namespace, podgroup("child", parentCompositePodGroupName="a"))
    for patch in ({"spec": {"parentCompositePodGroupName": "b"}}, {"spec": {"parentCompositePodGroupName": None}}):
        res = _patch(installed, namespace, "tpg/child", patch)
        assert res.returncode != 0, res.stdout
        assert "spec.parentCompositePodGroupName: Invalid value" in res.stderr, res.stderr
        assert "parentCompositePodGroupName is immutable" in res.stderr, res.stderr
    create(installed, namespace, podgroup("orphan"))
    res = _patch(installed, namespace, "tpg/orphan", {"spec": {"parentCompositePodGroupName": "a"}})
    assert res.returncode != 0 and "parentCompositePodGroupName is immutable" in res.stderr, res.stderr


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"spec": {"schedulingPolicy": {"gang": None, "basic": {}}}}, "schedulingPolicy"),
        ({"spec": {"parentCompositePodGroupName": "other"}}, "parentCompositePodGroupName"),
        ({"spec": {"workloadRef": {"templateName": "other"}}}, "workloadRef"),
        ({"spec": {"disruptionMode": {"single": None, "all": {}}}}, "disruptionMode"),
        ({"spec": {"schedulingConstraints": {"topology": [{"key": "zone"}]}}}, "schedulingConstraints"),
        ({"spec": {"priority": 7}}, "priority"),
    ],
    ids=["policy-kind", "parent", "workloadRef", "disruptionMode", "topology", "priority"],
)
def test_composite_spec_is_immutable_but_for_min_group_count(installed, namespace, patch, field):
    create(installed, namespace, composite("frozen"))
    res = _patch(installed, namespace, "tcpg/frozen", patch)
    assert res.returncode != 0, res.stdout
    assert f"spec.{field}: Invalid value" in res.stderr, res.stderr
    assert (POLICY_KIND_FIXED_COMPOSITE if field == "schedulingPolicy" else f"{field} is immutable") in res.stderr
    stored = get(installed, namespace, "tcpg", "frozen")
    assert stored["spec"]["schedulingPolicy"] == {"gang": {"minGroupCount": 2}}
    # minGroupCount may change (1.38 makes it mutable upstream).
    _patch(
        installed, namespace, "tcpg/frozen", {"spec": {"schedulingPolicy": {"gang": {"minGroupCount": 3}}}}, check=True
    )
    assert get(installed, namespace, "tcpg", "frozen")["spec"]["schedulingPolicy"] == {"gang": {"minGroupCount": 3}}


def test_composite_workload_templates_are_immutable(installed, namespace):
    create(installed, namespace, composite_workload("w"))
    res = _patch(installed, namespace, "twl/w", {"spec": {"compositePodGroupTemplates": [chain(2)]}})
    assert res.returncode != 0
    assert "compositePodGroupTemplates is immutable" in res.stderr, res.stderr
    # Nor can a Workload change from one list to the other.
    res = _patch(
        installed, namespace, "twl/w", {"spec": {"compositePodGroupTemplates": None, "podGroupTemplates": [template()]}}
    )
    assert res.returncode != 0
    assert "spec.compositePodGroupTemplates: Invalid value" in res.stderr, res.stderr
    assert "compositePodGroupTemplates is immutable" in res.stderr, res.stderr


def test_podgroup_metadata_stays_mutable(installed, namespace):
    create(installed, namespace, podgroup("labels"))
    installed.kubectl("label", "-n", namespace, "pg/labels", "team=ml")
    installed.kubectl("annotate", "-n", namespace, "pg/labels", "note=ok")
    # Re-applying the identical spec is not a change.
    installed.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(podgroup("labels")))


def test_workload_templates_and_controller_ref_are_immutable(installed, namespace):
    create(installed, namespace, workload("w"))
    # A template's minCount may change (a job that grows); nothing else of it.
    grown = template("workers", schedulingPolicy={"gang": {"minCount": 3}})
    _patch(installed, namespace, "workload/w", {"spec": {"podGroupTemplates": [grown]}}, check=True)
    stored = get(installed, namespace, "workload", "w")["spec"]["podGroupTemplates"][0]
    assert stored["schedulingPolicy"] == {"gang": {"minCount": 3}}
    res = _patch(installed, namespace, "workload/w", {"spec": {"podGroupTemplates": [{**grown, "priority": 5}]}})
    assert res.returncode != 0
    assert "spec.podGroupTemplates[0].priority: Invalid value" in res.stderr, res.stderr
    assert "priority is immutable" in res.stderr, res.stderr
    res = _patch(installed, namespace, "workload/w", {"spec": {"podGroupTemplates": [template("other")]}})
    assert res.returncode != 0
    assert "spec.podGroupTemplates: Invalid value" in res.stderr, res.stderr
    assert "templates cannot be added or removed" in res.stderr, res.stderr

    # Setting a controllerRef that was not there at creation is a change too.
    res = _patch(installed, namespace, "workload/w", {"spec": {"controllerRef": {"kind": "Job", "name": "j"}}})
    assert res.returncode != 0
    assert "spec.controllerRef: Invalid value" in res.stderr and "controllerRef is immutable" in res.stderr, res.stderr

    create(installed, namespace, workload("w2", controllerRef={"kind": "Job", "name": "j"}))
    res = _patch(installed, namespace, "workload/w2", {"spec": {"controllerRef": {"name": "k"}}})
    assert res.returncode != 0
    assert "controllerRef is immutable" in res.stderr, res.stderr
    res = _patch(installed, namespace, "workload/w2", {"spec": {"controllerRef": None}})
    assert res.returncode != 0
    assert "controllerRef is immutable" in res.stderr, res.stderr


# --------------------------------------------------------------------------- status subresource


def _condition(type_: str = "PodGroupScheduled", status: str = "True", reason: str = "Scheduled") -> Obj:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": "all 4 pods are bound",
        "observedGeneration": 1,
        "lastTransitionTime": "2026-01-02T03:04:05Z",
    }


def test_status_is_written_through_the_status_subresource(installed, namespace):
    create(installed, namespace, podgroup("st", resourceClaims=[{"name": "gpus", "resourceClaimTemplateName": "gpu"}]))
    status = {
        "conditions": [_condition()],
        "resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "st-gpus-x7k2p"}],
    }
    installed.kubectl(
        "patch", "-n", namespace, "pg/st", "--subresource=status", "--type=merge", "-p", json.dumps({"status": status})
    )
    stored = get(installed, namespace, "pg", "st")
    assert stored["status"] == status
    # Writing status does not bump the spec's generation.
    assert stored["metadata"]["generation"] == 1

    # A later condition of another type merges by key (list-type map keyed by type).
    installed.kubectl(
        "patch",
        "-n",
        namespace,
        "pg/st",
        "--subresource=status",
        "--type=json",
        "-p",
        json.dumps(
            [
                {
                    "op": "add",
                    "path": "/status/conditions/-",
                    "value": _condition("DisruptionTarget", "True", "PreemptionByScheduler"),
                }
            ]
        ),
    )
    stored = get(installed, namespace, "pg", "st")
    assert [c["type"] for c in stored["status"]["conditions"]] == ["PodGroupScheduled", "DisruptionTarget"]

    # Status sent to the main resource is ignored (the subresource owns it).
    _patch(installed, namespace, "pg/st", {"status": {"conditions": None}}, check=True)
    assert len(get(installed, namespace, "pg", "st")["status"]["conditions"]) == 2


def test_composite_status_is_written_through_the_status_subresource(installed, namespace):
    create(installed, namespace, composite("st"))
    status = {"conditions": [_condition("CompositePodGroupInitiallyScheduled", "False", "Invalid")]}
    installed.kubectl(
        "patch",
        "-n",
        namespace,
        "tcpg/st",
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
    )
    stored = get(installed, namespace, "tcpg", "st")
    assert stored["status"] == status and stored["metadata"]["generation"] == 1
    # Status sent to the main resource is ignored (the subresource owns it).
    _patch(installed, namespace, "tcpg/st", {"status": {"conditions": None}}, check=True)
    assert get(installed, namespace, "tcpg", "st")["status"] == status
    res = installed.kubectl(
        "patch",
        "-n",
        namespace,
        "tcpg/st",
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"conditions": [_condition(status="Maybe")]}}),
        check=False,
    )
    assert res.returncode != 0
    assert 'status.conditions[0].status: Unsupported value: "Maybe"' in res.stderr, res.stderr


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        (_condition(status="Maybe"), 'status.conditions[0].status: Unsupported value: "Maybe"'),
        ({k: v for k, v in _condition().items() if k != "reason"}, "status.conditions[0].reason: Required value"),
        ({**_condition(), "lastTransitionTime": "yesterday"}, "status.conditions[0].lastTransitionTime: Invalid value"),
        ({**_condition(), "observedGeneration": -1}, "status.conditions[0].observedGeneration: Invalid value: -1"),
    ],
    ids=["status-enum", "reason-required", "time-format", "generation-negative"],
)
def test_bad_status_is_refused(installed, namespace, condition, expected):
    create(installed, namespace, podgroup("st"))
    res = installed.kubectl(
        "patch",
        "-n",
        namespace,
        "pg/st",
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"conditions": [condition]}}),
        check=False,
    )
    assert res.returncode != 0
    assert expected in res.stderr, res.stderr


def test_resource_claim_status_must_name_a_spec_claim(installed, namespace):
    create(installed, namespace, podgroup("st", resourceClaims=[{"name": "gpus", "resourceClaimTemplateName": "gpu"}]))
    res = installed.kubectl(
        "patch",
        "-n",
        namespace,
        "pg/st",
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"resourceClaimStatuses": [{"name": "nics"}]}}),
        check=False,
    )
    assert res.returncode != 0
    assert "status.resourceClaimStatuses: Invalid value" in res.stderr, res.stderr
    assert "each name must match an entry in spec.resourceClaims" in res.stderr, res.stderr


def test_duplicate_condition_types_are_refused(installed, namespace):
    create(installed, namespace, podgroup("st"))
    res = installed.kubectl(
        "patch",
        "-n",
        namespace,
        "pg/st",
        "--subresource=status",
        "--type=json",
        "-p",
        json.dumps([{"op": "add", "path": "/status", "value": {"conditions": [_condition(), _condition()]}}]),
        check=False,
    )
    assert res.returncode != 0
    assert "status.conditions[1]: Duplicate value" in res.stderr, res.stderr


# --------------------------------------------------------------------------- printer columns


def _table(output: str) -> tuple[list[str], dict[str, list[str]]]:
    """Split `kubectl get` output into header and rows keyed by NAME (columns are 3+ spaces apart)."""
    lines = [line for line in output.splitlines() if line.strip()]
    header = lines[0]
    starts = [i for i in range(len(header)) if header[i] != " " and (i == 0 or header[i - 1] == " ")]
    names = header.split()
    rows: dict[str, list[str]] = {}
    for line in lines[1:]:
        cells = [line[a:b].strip() for a, b in zip(starts, starts[1:] + [None])]
        rows[cells[0]] = cells
    return names, rows


def test_podgroup_printer_columns(installed, namespace):
    create(
        installed,
        namespace,
        podgroup(
            "g",
            schedulingPolicy={"gang": {"minCount": 4}},
            priority=5,
            podGroupTemplateRef={"workload": {"workloadName": "w", "podGroupTemplateName": "t"}},
        ),
    )
    create(installed, namespace, podgroup("b", schedulingPolicy={"basic": {}}))
    installed.kubectl(
        "patch",
        "-n",
        namespace,
        "pg/g",
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"conditions": [_condition(status="False", reason="Unschedulable")]}}),
    )

    header, rows = _table(installed.kubectl("get", "pg", "-n", namespace).stdout)
    assert header == ["NAME", "POLICY", "MINCOUNT", "SCHEDULED", "AGE"]
    assert rows["g"][1:4] == ['{"gang":{"minCount":4}}', "4", "Unschedulable"]
    assert rows["b"][1:4] == ['{"basic":{}}', "", ""]  # absent values print as empty cells

    header, rows = _table(installed.kubectl("get", "pg", "-n", namespace, "-o", "wide").stdout)
    assert header == ["NAME", "POLICY", "MINCOUNT", "SCHEDULED", "PARENT", "WORKLOAD", "TEMPLATE", "PRIORITY", "AGE"]
    assert rows["g"][4:8] == ["", "w", "t", "5"]


def test_composite_printer_columns(installed, namespace):
    create(installed, namespace, composite("root", priority=5))
    create(installed, namespace, composite("child", schedulingPolicy={"basic": {}}, parentCompositePodGroupName="root"))
    create(installed, namespace, podgroup("leaf", parentCompositePodGroupName="child"))
    installed.kubectl(
        "patch",
        "-n",
        namespace,
        "tcpg/root",
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(
            {"status": {"conditions": [_condition("CompositePodGroupInitiallyScheduled", "False", "Unschedulable")]}}
        ),
    )
    header, rows = _table(installed.kubectl("get", "tcpg", "-n", namespace).stdout)
    assert header == ["NAME", "POLICY", "MINGROUPS", "PARENT", "SCHEDULED", "AGE"]
    assert rows["root"][1:5] == ['{"gang":{"minGroupCount":2}}', "2", "", "Unschedulable"]
    assert rows["child"][1:5] == ['{"basic":{}}', "", "root", ""]

    header, rows = _table(installed.kubectl("get", "tcpg", "-n", namespace, "-o", "wide").stdout)
    assert header == ["NAME", "POLICY", "MINGROUPS", "PARENT", "SCHEDULED", "WORKLOAD", "TEMPLATE", "PRIORITY", "AGE"]
    assert rows["root"][5:8] == ["w", "replica", "5"]

    _, rows = _table(installed.kubectl("get", "tpg", "-n", namespace, "-o", "wide").stdout)
    assert rows["leaf"][4] == "child"


def test_workload_printer_columns(installed, namespace):
    create(
        installed,
        namespace,
        workload(
            "w",
            controllerRef={"apiGroup": "batch", "kind": "Job", "name": "train"},
            templates=[template("leader"), template("workers")],
        ),
    )
    header, rows = _table(installed.kubectl("get", "workloads", "-n", namespace).stdout)
    assert header == ["NAME", "CONTROLLER-KIND", "CONTROLLER", "FIRST-TEMPLATE", "AGE"]
    assert rows["w"][1:4] == ["Job", "train", "leader"]


def test_podgroup_list_and_short_name(installed, namespace):
    for i in range(3):
        create(installed, namespace, podgroup(f"g{i}"))
    for short in ("tpg", "pg"):
        items = json.loads(installed.kubectl("get", short, "-n", namespace, "-o", "json").stdout)["items"]
        assert sorted(i["metadata"]["name"] for i in items) == ["g0", "g1", "g2"]
        assert all(i["apiVersion"] == API_VERSION and i["kind"] == "PodGroup" for i in items)
        assert items[0]["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}
    create(installed, namespace, workload("w"))
    items = json.loads(installed.kubectl("get", "twl", "-n", namespace, "-o", "json").stdout)["items"]
    assert [(i["apiVersion"], i["kind"], i["metadata"]["name"]) for i in items] == [(API_VERSION, "Workload", "w")]


def test_kubectl_names_where_other_podgroups_are_served(native_cluster, native_namespace, tmp_path):
    """docs/install.md's claim: where the native API is served, `kubectl get podgroups`
    is scheduling.k8s.io's; `tpg` and the full name are troupe's."""
    ns = native_namespace
    create(native_cluster, ns, podgroup("mine"))
    native = {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "theirs"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
    }
    create(native_cluster, ns, native)

    def names(resource: str) -> str:
        # A fresh discovery cache: the cluster's own may predate a CRD.
        args = ("get", resource, "-n", ns, "-o", "name", f"--cache-dir={tmp_path}")
        return native_cluster.kubectl(*args).stdout.strip()

    assert names("podgroups") == "podgroup.scheduling.k8s.io/theirs"
    assert names("podgroup") == "podgroup.scheduling.k8s.io/theirs"
    for resource in ("tpg", "pg", "podgroups.scheduling.troupe.dev"):
        assert names(resource) == "podgroup.scheduling.troupe.dev/mine", resource


def test_kubectl_names_where_native_composites_are_served(native_cluster, native_namespace, tmp_path):
    """Where scheduling.k8s.io/v1alpha3 serves CompositePodGroups, `kubectl get
    compositepodgroups` is theirs; `tcpg` and the full name are troupe's."""
    ns = native_namespace
    create(native_cluster, ns, composite("mine"))
    create(native_cluster, ns, {**composite("theirs"), "apiVersion": "scheduling.k8s.io/v1alpha3"})

    def names(resource: str) -> str:
        args = ("get", resource, "-n", ns, "-o", "name", f"--cache-dir={tmp_path}")
        return native_cluster.kubectl(*args).stdout.strip()

    assert names("compositepodgroups") == "compositepodgroup.scheduling.k8s.io/theirs"
    for resource in ("tcpg", "compositepodgroups.scheduling.troupe.dev"):
        assert names(resource) == "compositepodgroup.scheduling.troupe.dev/mine", resource
