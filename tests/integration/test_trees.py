"""Trees of groups (CompositePodGroups, issue 36) end to end: the real troupe
process against a real kube-apiserver.

- On 1.37.2 with the native Workload API (`native_cluster`: GenericWorkload,
  TopologyAwareWorkloadScheduling, CompositePodGroup and PodGroupPreemptionPolicy
  on, scheduling.k8s.io v1beta1 + v1alpha3 served): every case of upstream's
  test/integration/scheduler/podgroup/cpg_test.go (TestCPGScheduling) and the
  12 placement cases of topology_aware_scheduling/cpg_tas_test.go
  (TestCPGTopologyAwareScheduling), each named after upstream's, with
  v1alpha3 CompositePodGroups, v1beta1 PodGroups and pods that name them in
  `spec.schedulingGroup`; and the 13 cases of
  TestCPGTopologyAwareSchedulingWorkloadAwarePreemption (priorities from
  PriorityClasses, see there).
- On a cluster without those gates (`installed`): the same trees on troupe's
  own kinds (scheduling.troupe.dev/v1alpha2 CompositePodGroup, PodGroup with
  parentCompositePodGroupName, pods with the pod-group label) for a subset:
  MinGroupCount, Hierarchical, the nested zone/rack case, and the issue's two
  leader+workers replicas with room for one; and a tree with
  `disruptionMode: {all: {}}` preempted whole.
- What upstream does not do: CompositePodGroupInitiallyScheduled on the
  composites, each leaf PodGroup's own condition, and pods of a tree whose
  parent is missing saying which.

Upstream's objects carry `priority: 100` without a PriorityClass (its test
apiserver runs without the Priority admission plugin); here the plugin is on,
so priorities are left out: every pod, PodGroup and CompositePodGroup gets 0.
Upstream's wrappers are kept where they matter, e.g. the swapped
`workloadRef` of cpg_test.go's PodGroups (templateName "workload-cpg…",
workloadName "gang-t1") and no Workload at all in the placement cases: troupe,
like upstream, must not depend on them. Pods bound beforehand as members of a
group name troupe's scheduler (upstream: every pod of a tree has one
schedulerName). Waits are upstream's: 30 s.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from conftest import fresh_namespace
from objects import GROUP_LABEL, create, wait_pod_waiting
from troupe_process import TroupeProcess, supervised
from wait import wait_for

SCHEDULER = "troupe-scheduler"
TIMEOUT = 30.0  # upstream's wait.ForeverTestTimeout
POLL = 0.2
COMPOSITE_SCHEDULED = "CompositePodGroupInitiallyScheduled"


# ------------------------------------------------------------------ kinds


@dataclass(frozen=True)
class Kinds:
    """The CompositePodGroup and PodGroup kinds a test speaks."""

    native: bool
    cpg_api: str
    pg_api: str
    pg_condition: str  # the leaf PodGroup's scheduled condition


NATIVE = Kinds(True, "scheduling.k8s.io/v1alpha3", "scheduling.k8s.io/v1beta1", "PodGroupInitiallyScheduled")
OWN = Kinds(False, "scheduling.troupe.dev/v1alpha2", "scheduling.troupe.dev/v1alpha2", "PodGroupScheduled")


def node(
    name: str,
    cpu: str = "2",
    labels: dict[str, str] | None = None,
    taints: Sequence[str] = (),
) -> dict[str, Any]:
    """Upstream's makeNode: 2 CPU, 32 pods; `taints` are keys (NoSchedule)."""
    room = {"cpu": cpu, "memory": "8Gi", "pods": "32"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": [{"key": t, "effect": "NoSchedule"} for t in taints]} if taints else {},
        "status": {"capacity": room, "allocatable": room},
    }


def rz(name: str, rack: str, zone: str) -> dict[str, Any]:
    """cpg_tas_test.go's makeNode(name, rack, zone)."""
    return node(name, labels={"rack": rack, "zone": zone})


# ------------------------------------------------------------------ scene


@dataclass
class Scene:
    """One test's namespace in one cluster, and the objects it makes there."""

    cluster: Any
    ns: str
    kinds: Kinds
    node_labels: dict[str, dict[str, str]] = field(default_factory=dict)

    # -- building

    def nodes(self, *bodies: dict[str, Any]) -> None:
        """This test's nodes (every other node removed first)."""
        self.cluster.kubectl("delete", "nodes", "--all", "--wait=false", check=False)
        self.node_labels = {b["metadata"]["name"]: b["metadata"]["labels"] for b in bodies}
        create(self.cluster, *bodies)

    def create(self, *objects: dict[str, Any]) -> None:
        """Created in order (children are tried in creation order, then name)."""
        create(self.cluster, *objects)

    def cpg(
        self,
        name: str,
        min_groups: int | None = None,
        parent: str | None = None,
        key: str | None = None,
        ref: tuple[str, str] = ("cpg", "workload"),
    ) -> dict[str, Any]:
        """A CompositePodGroup: gang with `min_groups`, else basic. `ref` is
        (workloadName, templateName), cpg_tas_test.go's by default."""
        spec: dict[str, Any] = {
            "workloadRef": {"workloadName": ref[0], "templateName": ref[1]},
            "schedulingPolicy": {"basic": {}} if min_groups is None else {"gang": {"minGroupCount": min_groups}},
        }
        if parent:
            spec["parentCompositePodGroupName"] = parent
        if key:
            spec["schedulingConstraints"] = {"topology": [{"key": key}]}
        meta = {"name": name, "namespace": self.ns}
        return {"apiVersion": self.kinds.cpg_api, "kind": "CompositePodGroup", "metadata": meta, "spec": spec}

    def pg(
        self,
        name: str,
        min_count: int | None = None,
        parent: str | None = None,
        key: str | None = None,
        ref: tuple[str, str] = ("workload", "pg"),
    ) -> dict[str, Any]:
        """A PodGroup: gang with `min_count`, else basic. On the native API a
        PodGroup with a parent needs `workloadRef` (`ref`: workloadName,
        templateName; upstream's PodGroupWrapper.WorkloadRef(template,
        workload) swaps them, kept as it is); troupe's kind has none."""
        spec: dict[str, Any] = {
            "schedulingPolicy": {"basic": {}} if min_count is None else {"gang": {"minCount": min_count}}
        }
        if parent:
            spec["parentCompositePodGroupName"] = parent
            if self.kinds.native:
                spec["workloadRef"] = {"workloadName": ref[0], "templateName": ref[1]}
        if key:
            spec["schedulingConstraints"] = {"topology": [{"key": key}]}
        meta = {"name": name, "namespace": self.ns}
        return {"apiVersion": self.kinds.pg_api, "kind": "PodGroup", "metadata": meta, "spec": spec}

    def pod(
        self,
        name: str,
        group: str | None = None,
        cpu: str = "1",
        on: str | None = None,
        tolerate: str | None = None,
        prefer: str | None = None,
    ) -> dict[str, Any]:
        """A pod of `group` (none: a plain pod); `on`: bound there already (as
        upstream's makeAssigned*Pod); `tolerate` a taint key; `prefer` a node
        (preferred node affinity, weight 100)."""
        spec: dict[str, Any] = {
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": cpu}}}
            ],
        }
        labels: dict[str, str] = {}
        if group is not None:
            spec["schedulerName"] = SCHEDULER
            if self.kinds.native:
                spec["schedulingGroup"] = {"podGroupName": group}
            else:
                labels[GROUP_LABEL] = group
        if on:
            spec["nodeName"] = on
        if tolerate:
            spec["tolerations"] = [{"key": tolerate}]
        if prefer:
            term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [prefer]}]}
            spec["affinity"] = {
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": term}]
                }
            }
        meta = {"name": name, "namespace": self.ns, "labels": labels}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}

    def pods_of(self, group: str, *cpus: str) -> list[dict[str, Any]]:
        """cpg_test.go's makeTestPods: `<group>-pod-<i>`, one per CPU request."""
        return [self.pod(f"{group}-pod-{i}", group, cpu) for i, cpu in enumerate(cpus)]

    # -- reading (straight from the API server: cheaper than kubectl on 2 cores)

    def get(self, path: str) -> dict[str, Any]:
        status, body = self.cluster._get(path)
        if status != 200:
            raise LookupError(f"GET {path}: {status} {body[:300]}")
        return json.loads(body)

    def pods(self) -> dict[str, dict[str, Any]]:
        items = self.get(f"/api/v1/namespaces/{self.ns}/pods")["items"]
        return {p["metadata"]["name"]: p for p in items}

    def bound(self) -> dict[str, str]:
        return {n: p["spec"]["nodeName"] for n, p in self.pods().items() if p["spec"].get("nodeName")}

    def condition(self, api: str, plural: str, name: str, type_: str) -> dict[str, Any] | None:
        obj = self.get(f"/apis/{api}/namespaces/{self.ns}/{plural}/{name}")
        return next((c for c in (obj.get("status") or {}).get("conditions") or () if c["type"] == type_), None)

    # -- waiting, with upstream's step meanings

    def wait_scheduled(self, names: Iterable[str]) -> dict[str, str]:
        """WaitForPodsScheduled: every one has spec.nodeName. Returns name -> node."""
        want = set(names)

        def check() -> dict[str, str] | None:
            bound = self.bound()
            return {n: bound[n] for n in want} if want <= set(bound) else None

        return wait_for(check, timeout=TIMEOUT, interval=POLL, message=f"pods scheduled: {sorted(want)}")

    def wait_unschedulable(self, names: Iterable[str]) -> dict[str, dict[str, Any]]:
        """WaitForPodsUnschedulable: PodScheduled=False/Unschedulable, no node."""
        return self._wait_pods(names, lambda c: c["reason"] == "Unschedulable", "Unschedulable")

    def wait_scheduling_error(self, names: Iterable[str]) -> dict[str, dict[str, Any]]:
        """WaitForPodsSchedulingError: PodScheduled=False with a reason other than Unschedulable."""
        return self._wait_pods(names, lambda c: c.get("reason") != "Unschedulable", "a scheduling error")

    def _wait_pods(self, names: Iterable[str], ok: Any, what: str) -> dict[str, dict[str, Any]]:
        want = set(names)

        def check() -> dict[str, dict[str, Any]] | None:
            pods = self.pods()
            out = {}
            for n in want:
                p = pods.get(n)
                if p is None or p["spec"].get("nodeName"):
                    return None
                cond = pod_scheduled(p)
                if cond is None or cond["status"] != "False" or not ok(cond):
                    return None
                out[n] = cond
            return out

        def observed() -> Any:
            pods = self.pods()
            return {n: (pods[n]["spec"].get("nodeName"), pod_scheduled(pods[n])) for n in want if n in pods}

        try:
            return wait_for(check, timeout=TIMEOUT, interval=POLL, message=f"pods {what}: {sorted(want)}")
        except AssertionError as e:
            raise AssertionError(f"{e}\nnow: {observed()}") from None

    def wait_composite(self, name: str, status: str, reason: str, *says: str) -> dict[str, Any]:
        """CompositePodGroupInitiallyScheduled = status/reason on a
        CompositePodGroup, its message containing each of `says` (a root's
        message changes from why it waits to what its cycle found)."""
        return self._wait_condition(
            self.kinds.cpg_api, "compositepodgroups", name, COMPOSITE_SCHEDULED, status, reason, says
        )

    def wait_group(self, name: str, status: str, reason: str, *says: str) -> dict[str, Any]:
        """The leaf PodGroup's own scheduled condition = status/reason, its message containing each of `says`."""
        return self._wait_condition(self.kinds.pg_api, "podgroups", name, self.kinds.pg_condition, status, reason, says)

    def _wait_condition(
        self, api: str, plural: str, name: str, type_: str, status: str, reason: str, says: Sequence[str]
    ) -> dict[str, Any]:
        last: list[dict[str, Any] | None] = [None]

        def check() -> dict[str, Any] | None:
            c = last[0] = self.condition(api, plural, name, type_)
            ok = c and (c["status"], c["reason"]) == (status, reason) and all(w in c["message"] for w in says)
            return c if ok else None

        what = f"{plural} {name}: {type_}={status}/{reason}" + (f" saying {list(says)}" if says else "")
        try:
            return wait_for(check, timeout=TIMEOUT, interval=POLL, message=what)
        except AssertionError as e:
            raise AssertionError(f"{e}\nnow: {last[0]}") from None

    # -- verifying, with upstream's step meanings

    def assert_on(self, placed: dict[str, str], names: Iterable[str], nodes: set[str]) -> None:
        """VerifyAssignments: every one of `names` is on one of `nodes`."""
        where = {n: placed[n] for n in names}
        assert set(where.values()) <= nodes, f"expected on {sorted(nodes)}: {where}"

    def assert_one_domain(self, placed: dict[str, str], names: Iterable[str], key: str) -> None:
        """VerifyAssignedInOneDomain: the nodes of `names` share one non-empty value of label `key`."""
        values = {n: self.node_labels[placed[n]].get(key, "") for n in names}
        assert len(set(values.values())) == 1 and "" not in values.values(), f"not in one {key}: {values}"


def pod_scheduled(pod: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in (pod.get("status") or {}).get("conditions") or () if c["type"] == "PodScheduled"), None)


def names(*groups: tuple[str, int]) -> list[str]:
    """The makeTestPods names of (group, count) pairs."""
    return [f"{g}-pod-{i}" for g, n in groups for i in range(n)]


def workload(ns: str, name: str, *templates: dict[str, Any]) -> dict[str, Any]:
    """A v1beta1 Workload made of CompositePodGroup templates (cpg_test.go creates one per case)."""
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"compositePodGroupTemplates": list(templates)},
    }


def cpg_t(name: str, min_groups: int | None, *children: dict[str, Any]) -> dict[str, Any]:
    """A CompositePodGroupTemplate; children are PodGroupTemplates (pg_t) or CompositePodGroupTemplates."""
    out: dict[str, Any] = {
        "name": name,
        "schedulingPolicy": {"basic": {}} if min_groups is None else {"gang": {"minGroupCount": min_groups}},
    }
    pgs = [c for c in children if "_pg" in c]
    cpgs = [c for c in children if "_pg" not in c]
    if pgs:
        out["podGroupTemplates"] = [{k: v for k, v in c.items() if k != "_pg"} for c in pgs]
    if cpgs:
        out["compositePodGroupTemplates"] = cpgs
    return out


def pg_t(name: str, min_count: int | None) -> dict[str, Any]:
    policy = {"basic": {}} if min_count is None else {"gang": {"minCount": min_count}}
    return {"_pg": True, "name": name, "schedulingPolicy": policy}


# ------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def troupe_native(native_cluster, tmp_path_factory):
    yield from supervised(TroupeProcess(native_cluster.scheduler_kubeconfig, tmp_path_factory.mktemp("troupe")))


@pytest.fixture(scope="module")
def troupe_own(installed, tmp_path_factory):
    yield from supervised(TroupeProcess(installed.scheduler_kubeconfig, tmp_path_factory.mktemp("troupe-own")))


def _scene(cluster: Any, kinds: Kinds) -> Iterator[Scene]:
    with fresh_namespace(cluster) as ns:
        yield Scene(cluster, ns, kinds)
    cluster.kubectl("delete", "nodes", "--all", "--wait=false", check=False)


@pytest.fixture
def native(native_cluster, troupe_native) -> Iterator[Scene]:
    """A fresh namespace on the native 1.37 cluster; its nodes are removed after."""
    yield from _scene(native_cluster, NATIVE)


@pytest.fixture
def own(installed, troupe_own) -> Iterator[Scene]:
    """A fresh namespace on the cluster without the native API (troupe's own kinds)."""
    yield from _scene(installed, OWN)


@pytest.fixture(params=["native", "own"])
def scene(request) -> Scene:
    """Both: the native kinds on 1.37 with the gates, troupe's own kinds without."""
    return request.getfixturevalue(request.param)


# ============================================== cpg_test.go: TestCPGScheduling


def test_cpg_hierarchical_scheduling(scene):
    """TestCPGHierarchicalScheduling: readiness and feasibility propagate
    across 3 levels of mixed gang and basic policies. pg6 fits but its parent
    cpg-sub3 needs 2 groups and pg7 does not fit."""
    s = scene
    s.nodes(node("node1", cpu="20"))
    if s.kinds.native:
        s.create(
            workload(
                s.ns,
                "workload-cpg",
                cpg_t(
                    "root-t",
                    2,
                    cpg_t("sub1-3-t", 2, pg_t("gang-t1", 3)),
                    cpg_t("sub2-t", None, pg_t("basic-t", None), pg_t("gang-t2", 3)),
                ),
            )
        )
    wl = "workload-cpg"
    s.create(
        s.cpg("cpg-root", 2, ref=(wl, "root-t")),
        s.cpg("cpg-sub1", 2, "cpg-root", ref=(wl, "sub1-3-t")),
        s.cpg("cpg-sub2", None, "cpg-root", ref=(wl, "sub2-t")),
        s.cpg("cpg-sub3", 2, "cpg-root", ref=(wl, "sub1-3-t")),
        s.pg("pg1", 3, "cpg-sub1", ref=("gang-t1", wl)),
        s.pg("pg2", 3, "cpg-sub1", ref=("gang-t1", wl)),
        s.pg("pg3", 3, "cpg-sub1", ref=("gang-t1", wl)),
        s.pg("pg4", None, "cpg-sub2", ref=("basic-t", wl)),
        s.pg("pg5", 3, "cpg-sub2", ref=("gang-t2", wl)),
        s.pg("pg6", 3, "cpg-sub3", ref=("gang-t1", wl)),
        s.pg("pg7", 3, "cpg-sub3", ref=("gang-t1", wl)),
    )
    s.create(
        *s.pods_of("pg1", "1", "1", "1"),
        *s.pods_of("pg2", "1", "1", "1"),
        *s.pods_of("pg3", "100", "100", "100"),
        *s.pods_of("pg4", "1", "1", "1"),
        *s.pods_of("pg5", "1", "1", "1"),
        *s.pods_of("pg6", "1", "1", "1"),
        *s.pods_of("pg7", "100", "100", "100"),
    )
    s.wait_scheduled(names(("pg1", 3), ("pg2", 3), ("pg4", 3), ("pg5", 3)))
    failing = names(("pg3", 3), ("pg6", 3), ("pg7", 3))
    s.wait_unschedulable(failing)
    assert not set(failing) & set(s.bound()), s.bound()

    # Status (beyond upstream): each composite and each leaf says what became of it.
    s.wait_composite("cpg-root", "True", "Scheduled")
    s.wait_composite("cpg-sub1", "True", "Scheduled")
    s.wait_composite("cpg-sub2", "True", "Scheduled")
    s.wait_composite("cpg-sub3", "False", "Unschedulable", "needs 2 of 2 group(s), 1 feasible", "pg7")  # which failed
    for g in ("pg1", "pg2", "pg4", "pg5"):
        s.wait_group(g, "True", "Scheduled")
    s.wait_group("pg3", "False", "Unschedulable")
    s.wait_group("pg6", "False", "Unschedulable", "cpg-sub3")  # fits, but its parent does not
    s.wait_group("pg7", "False", "Unschedulable")


def test_cpg_min_group_count(scene):
    """TestCPGMinGroupCount: a gang root (minGroupCount 2) binds the 2 of its
    3 children that fit; the third stays unschedulable."""
    s = scene
    s.nodes(node("node1", cpu="20"))
    wl = "workload-cpg-min"
    if s.kinds.native:
        s.create(workload(s.ns, wl, cpg_t("root-t", 2, pg_t("gang-t", 3))))
    s.create(
        s.cpg("cpg-root", 2, ref=(wl, "root-t")),
        *(s.pg(g, 3, "cpg-root", ref=("gang-t", wl)) for g in ("pg1", "pg2", "pg3")),
    )
    s.create(*s.pods_of("pg1", "1", "1", "1"), *s.pods_of("pg2", "1", "1", "1"), *s.pods_of("pg3", "100", "1", "1"))
    s.wait_scheduled(names(("pg1", 3), ("pg2", 3)))
    s.wait_unschedulable(names(("pg3", 3)))
    assert sorted(s.bound()) == names(("pg1", 3), ("pg2", 3))

    root = s.wait_composite("cpg-root", "True", "Scheduled")
    assert root["message"], root
    s.wait_group("pg1", "True", "Scheduled")
    s.wait_group("pg2", "True", "Scheduled")
    s.wait_group("pg3", "False", "Unschedulable", "needs 3 pods")


def test_cpg_basic_with_gang_children(native):
    """TestCPGBasicWithGangChildren: a basic root lets its ready gang children
    schedule independently."""
    s = native
    s.nodes(node("node1", cpu="20"))
    wl = "workload-cpg-basic"
    s.create(workload(s.ns, wl, cpg_t("root-t", None, pg_t("gang-t", 3))))
    s.create(
        s.cpg("cpg-root", None, ref=(wl, "root-t")),
        *(s.pg(g, 3, "cpg-root", ref=("gang-t", wl)) for g in ("pg1", "pg2")),
    )
    s.create(*s.pods_of("pg1", "1", "1", "1"), *s.pods_of("pg2", "100", "1", "1"))
    s.wait_scheduled(names(("pg1", 3)))
    s.wait_unschedulable(names(("pg2", 3)))
    assert sorted(s.bound()) == names(("pg1", 3))


def test_cpg_basic_with_basic_children(native):
    """TestCPGBasicWithBasicChildren: no gang anywhere, every pod binds."""
    s = native
    s.nodes(node("node1", cpu="20"))
    wl = "workload-cpg-basic-basic"
    s.create(workload(s.ns, wl, cpg_t("root-t", None, pg_t("basic-t", None))))
    s.create(
        s.cpg("cpg-root", None, ref=(wl, "root-t")),
        *(s.pg(g, None, "cpg-root", ref=("basic-t", wl)) for g in ("pg1", "pg2")),
    )
    s.create(*s.pods_of("pg1", "1", "1"), *s.pods_of("pg2", "1", "1"))
    s.wait_scheduled(names(("pg1", 2), ("pg2", 2)))
    s.wait_composite("cpg-root", "True", "Scheduled")


def test_cpg_gang_with_basic_children(native):
    """TestCPGGangWithBasicChildren: a gang root (minGroupCount 2) over basic
    children on an 8-CPU node: the two that fit bind, the third does not."""
    s = native
    s.nodes(node("node1", cpu="8"))
    wl = "workload-cpg-gang-basic"
    s.create(workload(s.ns, wl, cpg_t("root-t", 2, pg_t("basic-t", None))))
    s.create(
        s.cpg("cpg-root", 2, ref=(wl, "root-t")),
        *(s.pg(g, None, "cpg-root", ref=("basic-t", wl)) for g in ("pg1", "pg2", "pg3")),
    )
    s.create(*s.pods_of("pg1", "1", "1", "1"), *s.pods_of("pg2", "1", "1", "1"), *s.pods_of("pg3", "10", "10", "10"))
    s.wait_scheduled(names(("pg1", 3), ("pg2", 3)))
    s.wait_unschedulable(names(("pg3", 3)))
    assert sorted(s.bound()) == names(("pg1", 3), ("pg2", 3))


def test_cpg_basic_with_unschedulable_basic_children(native):
    """TestCPGBasicWithUnschedulableBasicChildren: a basic root is not
    "always fine": with no child feasible nothing binds. Its condition names
    the child that failed."""
    s = native
    s.nodes(node("node1", cpu="20"))
    wl = "workload-cpg-basic-unschedulable"
    s.create(workload(s.ns, wl, cpg_t("root-t", None, pg_t("basic-t", None))))
    s.create(
        s.cpg("cpg-root", None, ref=(wl, "root-t")),
        *(s.pg(g, None, "cpg-root", ref=("basic-t", wl)) for g in ("pg1", "pg2")),
    )
    s.create(*s.pods_of("pg1", "50", "50"), *s.pods_of("pg2", "50", "50"))
    s.wait_unschedulable(names(("pg1", 2), ("pg2", 2)))
    assert s.bound() == {}

    s.wait_composite(
        "cpg-root", "False", "Unschedulable", "needs 1 of 2 group(s), 0 feasible", "pg1", "Insufficient cpu"
    )
    for g in ("pg1", "pg2"):
        s.wait_group(g, "False", "Unschedulable")


def test_cpg_dynamic_child_addition(native):
    """TestCPGDynamicChildAddition: children added to a placed tree join it.
    Stage 1: cpg-root (basic) {pg1}: pg1 binds. Stage 2: + pg2: binds. Stage
    3: + cpg-sub (gang, minGroupCount 2) {sub-pg1}: unschedulable (1 of 2).
    Stage 4: + sub-pg2 under cpg-sub: sub-pg1 and sub-pg2 bind."""
    s = native
    s.nodes(node("node1", cpu="20"))
    wl = "workload-cpg-dynamic"
    s.create(
        workload(s.ns, wl, cpg_t("root-t", None, pg_t("basic-t", None), cpg_t("sub-cpg-t", 2, pg_t("sub-pg-t", None))))
    )
    s.create(s.cpg("cpg-root", None, ref=(wl, "root-t")), s.pg("pg1", None, "cpg-root", ref=("basic-t", wl)))
    # Stage 1
    s.create(*s.pods_of("pg1", "1", "1"))
    s.wait_scheduled(names(("pg1", 2)))
    # Stage 2
    s.create(s.pg("pg2", None, "cpg-root", ref=("basic-t", wl)))
    s.create(*s.pods_of("pg2", "1", "1"))
    s.wait_scheduled(names(("pg2", 2)))
    s.wait_composite("cpg-root", "True", "Scheduled")
    # Stage 3
    s.create(s.cpg("cpg-sub", 2, "cpg-root", ref=(wl, "sub-cpg-t")))
    s.create(s.pg("sub-pg1", None, "cpg-sub", ref=("sub-pg-t", wl)))
    s.create(*s.pods_of("sub-pg1", "1", "1"))
    s.wait_unschedulable(names(("sub-pg1", 2)))
    s.wait_composite("cpg-sub", "False", "Unschedulable")
    s.wait_composite("cpg-root", "True", "Scheduled")  # once True, stays True
    # Stage 4
    s.create(s.pg("sub-pg2", None, "cpg-sub", ref=("sub-pg-t", wl)))
    s.create(*s.pods_of("sub-pg2", "1", "1"))
    s.wait_scheduled(names(("sub-pg1", 2), ("sub-pg2", 2)))
    s.wait_composite("cpg-sub", "True", "Scheduled")


# ============ cpg_tas_test.go: TestCPGTopologyAwareScheduling (placement cases)

R1, R2 = {"node1-z1-r1", "node2-z1-r1"}, {"node3-z1-r2", "node4-z1-r2"}


def test_cpg_tas_parent_has_topology_children_do_not(native):
    """parent CPG has topology constraints, children do not; schedules on a
    single rack."""
    s = native
    s.nodes(
        rz("node1-z1-r1", "rack-1", "zone-1"),
        rz("node2-z1-r1", "rack-1", "zone-1"),
        rz("node3-z1-r2", "rack-2", "zone-1"),
        rz("node4-z1-r2", "rack-2", "zone-1"),
    )
    s.create(s.pod("existing", on="node4-z1-r2", cpu="2"))
    s.create(s.cpg("cpg-root", 2, key="rack"), s.pg("pg1", 2, "cpg-root"), s.pg("pg2", 2, "cpg-root"))
    s.create(s.pod("p1", "pg1"), s.pod("p2", "pg1"), s.pod("p3", "pg2"), s.pod("p4", "pg2"))
    placed = s.wait_scheduled(["p1", "p2", "p3", "p4"])
    s.assert_on(placed, ["p1", "p2", "p3", "p4"], R1)


def test_cpg_tas_parent_has_topology_preexisting_pod_in_hierarchy_determines_topology(native):
    """parent CPG has topology constraints, children do not; preexisting pod
    belonging to the hierarchy determines the topology."""
    s = native
    s.nodes(
        rz("node1-z1-r1", "rack-1", "zone-1"),
        rz("node2-z1-r1", "rack-1", "zone-1"),
        rz("node3-z1-r2", "rack-2", "zone-1"),
        rz("node4-z1-r2", "rack-2", "zone-1"),
    )
    s.create(s.pod("existing", "pg1", on="node4-z1-r2"))
    s.create(s.cpg("cpg-root", 2, key="rack"), s.pg("pg1", 2, "cpg-root"), s.pg("pg2", 2, "cpg-root"))
    s.create(s.pod("p1", "pg1"), s.pod("p2", "pg2"), s.pod("p3", "pg2"))
    placed = s.wait_scheduled(["p1", "p2", "p3"])
    s.assert_on(placed, ["p1", "p2", "p3"], R2)


def test_cpg_tas_parent_has_topology_remains_pending_when_no_rack_fits_all_children(native):
    """parent CPG has topology constraints, children do not; remains pending
    when no single rack can fit all children."""
    s = native
    s.nodes(rz("node1-z1-r1", "rack-1", "zone-1"), rz("node2-z1-r2", "rack-2", "zone-1"))
    s.create(s.pod("existing1", on="node1-z1-r1"), s.pod("existing2", on="node2-z1-r2"))
    s.create(s.cpg("cpg-root", 2, key="rack"), s.pg("pg1", None, "cpg-root"), s.pg("pg2", None, "cpg-root"))
    s.create(s.pod("p1", "pg1"), s.pod("p2", "pg2"))
    s.wait_unschedulable(["p1", "p2"])
    s.wait_composite("cpg-root", "False", "Unschedulable", "rack")


def test_cpg_tas_parent_and_children_have_topology_zone_and_rack(scene):
    """parent CPG and child PGs both have topology constraints (multi-level
    constraints: zone and rack): the root in one zone, each child in one rack
    of it."""
    s = scene
    s.nodes(
        rz("node1-z1-r1", "rack-1", "zone-1"),
        rz("node2-z1-r2", "rack-2", "zone-1"),
        rz("node3-z2-r1", "rack-1", "zone-2"),
        rz("node4-z2-r1", "rack-1", "zone-2"),
    )
    s.create(s.pod("existing-z2", on="node3-z2-r1"))
    s.create(s.cpg("cpg-root", 2, key="zone"), s.pg("pg1", 2, "cpg-root", "rack"), s.pg("pg2", 2, "cpg-root", "rack"))
    s.create(s.pod("p1", "pg1"), s.pod("p2", "pg1"), s.pod("p3", "pg2"), s.pod("p4", "pg2"))
    placed = s.wait_scheduled(["p1", "p2", "p3", "p4"])
    s.assert_on(placed, ["p1", "p2", "p3", "p4"], {"node1-z1-r1", "node2-z1-r2"})
    s.assert_one_domain(placed, ["p1", "p2"], "rack")
    s.assert_one_domain(placed, ["p3", "p4"], "rack")
    s.wait_composite("cpg-root", "True", "Scheduled")


def test_cpg_tas_only_one_child_has_topology_other_uses_parents(native):
    """parent CPG and only one child PG has topology constraints; the other
    child uses parent's topology. zone-2 cannot hold both children (pg2's
    pods prefer node4 there), so everything goes to zone-1, pg1 on the
    tainted node1 it tolerates."""
    s = native
    s.nodes(
        node("node1-z1-r1", labels={"rack": "rack-1", "zone": "zone-1"}, taints=["taint"]),
        rz("node2-z1-r2", "rack-2", "zone-1"),
        rz("node3-z1-r3", "rack-3", "zone-1"),
        rz("node4-z2-r1", "rack-1", "zone-2"),
        rz("node5-z2-r2", "rack-2", "zone-2"),
    )
    s.create(s.pod("existing-z2", on="node5-z2-r2"))
    s.create(s.pod("existing-z1-r2", on="node2-z1-r2"), s.pod("existing-z1-r3", on="node3-z1-r3"))
    s.create(s.cpg("cpg-root", 2, key="zone"), s.pg("pg1", 2, "cpg-root", "rack"), s.pg("pg2", 2, "cpg-root"))
    s.create(
        s.pod("p1", "pg1", tolerate="taint"),
        s.pod("p2", "pg1", tolerate="taint"),
        s.pod("p3", "pg2", prefer="node4-z2-r1"),
        s.pod("p4", "pg2", prefer="node4-z2-r1"),
    )
    placed = s.wait_scheduled(["p1", "p2", "p3", "p4"])
    s.assert_one_domain(placed, ["p1", "p2", "p3", "p4"], "zone")
    s.assert_one_domain(placed, ["p1", "p2"], "rack")


def test_cpg_tas_preexisting_group_pods_constrain_domains(native):
    """parent CPG and all child PGs have topology constraints, preexisting pod
    group pods constrain the available topology domains."""
    s = native
    s.nodes(
        rz("node1-z1-r1", "rack-1", "zone-1"),
        rz("node2-z1-r2", "rack-2", "zone-1"),
        rz("node3-z1-r2", "rack-2", "zone-1"),
        rz("node4-z2-r1", "rack-1", "zone-2"),
        rz("node5-z2-r1", "rack-1", "zone-2"),
    )
    s.create(s.cpg("cpg-root", 2, key="zone"), s.pg("pg1", 2, "cpg-root", "rack"), s.pg("pg2", 2, "cpg-root", "rack"))
    s.create(s.pod("existing-z1", "pg1", on="node1-z1-r1"))
    s.create(s.pod("p1", "pg1"), s.pod("p2", "pg2"), s.pod("p3", "pg2"))
    placed = s.wait_scheduled(["p1", "p2", "p3"])
    s.assert_on(placed, ["p1"], {"node1-z1-r1"})
    s.assert_on(placed, ["p2", "p3"], {"node2-z1-r2", "node3-z1-r2"})


def test_cpg_tas_preexisting_group_pods_in_conflicting_domains_fail(native):
    """parent CPG has topology constraints, preexisting pod group pods are in
    conflicting domains across pod groups, fails to schedule any pod: a
    scheduling error (PodScheduled=False, reason not Unschedulable), and each
    leaf PodGroup says SchedulerError."""
    s = native
    s.nodes(
        rz("node1-z1-r1", "rack-1", "zone-1"),
        rz("node2-z1-r1", "rack-1", "zone-1"),
        rz("node3-z2-r1", "rack-1", "zone-2"),
        rz("node4-z2-r1", "rack-1", "zone-2"),
    )
    s.create(s.cpg("cpg-root", 2, key="zone"), s.pg("pg1", 2, "cpg-root", "rack"), s.pg("pg2", 2, "cpg-root", "rack"))
    s.create(s.pod("existing-z1", "pg1", on="node1-z1-r1"), s.pod("existing-z2", "pg2", on="node3-z2-r1"))
    s.create(s.pod("p1", "pg1"), s.pod("p2", "pg2"))
    # troupe's own statuses first (they say why); then upstream's pod-level expectation.
    for g in ("pg1", "pg2"):
        s.wait_group(g, "False", "SchedulerError")
    s.wait_composite("cpg-root", "False", "SchedulerError", "more than one zone domain")
    assert not {"p1", "p2"} & set(s.bound()), s.bound()
    s.wait_scheduling_error(["p1", "p2"])


def test_cpg_tas_three_levels_all_with_topology(native):
    """3-level CPG hierarchy: all levels have topology constraints (root=zone,
    sub=block, leaf=rack)."""
    s = native
    zbr = {"zone": "zone-1", "block": "block-1", "rack": "rack-1"}
    s.nodes(
        node("node1-z1-g1-r1", labels=zbr),
        node("node2-z1-g1-r2", labels={**zbr, "rack": "rack-2"}),
        node("node3-z1-g2-r1", labels={**zbr, "block": "block-2"}),
        node("node4-z1-g2-r2", labels={**zbr, "block": "block-2", "rack": "rack-2"}),
        node("node5-z2-g1-r1", labels={**zbr, "zone": "zone-2"}),
        node("node6-z2-g1-r1", labels={**zbr, "zone": "zone-2"}),
    )
    s.create(
        s.cpg("cpg-root", 2, key="zone"),
        s.cpg("cpg-sub1", 2, "cpg-root", "block"),
        s.cpg("cpg-sub2", 2, "cpg-root", "block"),
        s.pg("pg1", 2, "cpg-sub1", "rack"),
        s.pg("pg2", 2, "cpg-sub1", "rack"),
        s.pg("pg3", 2, "cpg-sub2", "rack"),
        s.pg("pg4", 2, "cpg-sub2", "rack"),
    )
    pods = [f"p{i}" for i in range(1, 9)]
    s.create(*(s.pod(p, f"pg{(i // 2) + 1}") for i, p in enumerate(pods)))
    placed = s.wait_scheduled(pods)
    s.assert_one_domain(placed, pods, "zone")
    s.assert_one_domain(placed, pods[:4], "block")
    s.assert_one_domain(placed, pods[4:], "block")
    for i in range(0, 8, 2):
        s.assert_one_domain(placed, pods[i : i + 2], "rack")


def test_cpg_tas_three_levels_mid_level_without_topology(native):
    """3-level CPG hierarchy: mid-level without topology constraints
    (root=zone, sub=none, leaf=rack)."""
    s = native
    s.nodes(
        rz("node1-z1-r1", "rack-1", "zone-1"),
        rz("node2-z1-r2", "rack-2", "zone-1"),
        rz("node3-z2-r1", "rack-1", "zone-2"),
    )
    s.create(
        s.cpg("cpg-root", 2, key="zone"),
        s.cpg("cpg-sub1", None, "cpg-root"),
        s.cpg("cpg-sub2", None, "cpg-root"),
        s.pg("pg1", 2, "cpg-sub1", "rack"),
        s.pg("pg2", 2, "cpg-sub2", "rack"),
    )
    s.create(s.pod("p1", "pg1"), s.pod("p2", "pg1"), s.pod("p3", "pg2"), s.pod("p4", "pg2"))
    pods = ["p1", "p2", "p3", "p4"]
    placed = s.wait_scheduled(pods)
    s.assert_one_domain(placed, pods, "zone")
    s.assert_one_domain(placed, ["p1", "p2"], "rack")
    s.assert_one_domain(placed, ["p3", "p4"], "rack")


def test_cpg_tas_three_levels_top_level_without_topology(native):
    """3-level CPG hierarchy: top level without topology constraint
    (root=none, sub=zone, leaf=rack)."""
    s = native
    s.nodes(
        rz("node1-z1-r1", "rack-1", "zone-1"),
        rz("node2-z1-r2", "rack-2", "zone-1"),
        rz("node3-z2-r3", "rack-3", "zone-2"),
        rz("node4-z2-r4", "rack-4", "zone-2"),
        rz("node5-z2-r5", "rack-5", "zone-2"),
    )
    s.create(
        s.cpg("cpg-root", None),
        s.cpg("cpg-sub1", 2, "cpg-root", "zone"),
        s.cpg("cpg-sub2", 2, "cpg-root", "zone"),
        s.pg("pg1", 2, "cpg-sub1", "rack"),
        s.pg("pg2", 2, "cpg-sub1", "rack"),
        s.pg("pg3", 2, "cpg-sub2", "rack"),
        s.pg("pg4", 2, "cpg-sub2", "rack"),
    )
    pods = [f"p{i}" for i in range(1, 9)]
    s.create(*(s.pod(p, f"pg{(i // 2) + 1}") for i, p in enumerate(pods)))
    placed = s.wait_scheduled(pods)
    s.assert_one_domain(placed, pods[:4], "zone")
    s.assert_one_domain(placed, pods[4:], "zone")
    for i in range(0, 8, 2):
        s.assert_one_domain(placed, pods[i : i + 2], "rack")


def test_cpg_tas_three_levels_bottom_level_without_topology(native):
    """3-level CPG hierarchy: bottom level without topology constraint
    (root=zone, sub=rack, leaf=none)."""
    s = native
    s.nodes(
        rz("node1-z1-r1", "rack-1", "zone-1"),
        rz("node2-z1-r1", "rack-1", "zone-1"),
        rz("node3-z1-r2", "rack-2", "zone-1"),
        rz("node4-z1-r2", "rack-2", "zone-1"),
        rz("node5-z2-r3", "rack-3", "zone-2"),
        rz("node6-z2-r3", "rack-3", "zone-2"),
    )
    s.create(
        s.cpg("cpg-root", 2, key="zone"),
        s.cpg("cpg-sub1", 2, "cpg-root", "rack"),
        s.cpg("cpg-sub2", 2, "cpg-root", "rack"),
        s.pg("pg1", 2, "cpg-sub1"),
        s.pg("pg2", 2, "cpg-sub1"),
        s.pg("pg3", 2, "cpg-sub2"),
        s.pg("pg4", 2, "cpg-sub2"),
    )
    pods = [f"p{i}" for i in range(1, 9)]
    s.create(*(s.pod(p, f"pg{(i // 2) + 1}") for i, p in enumerate(pods)))
    placed = s.wait_scheduled(pods)
    s.assert_one_domain(placed, pods, "zone")
    s.assert_one_domain(placed, pods[:4], "rack")
    s.assert_one_domain(placed, pods[4:], "rack")


def test_cpg_tas_three_levels_preexisting_leaf_pod_determines_topology(native):
    """3-level CPG hierarchy: preexisting pod in leaf PodGroup determines
    topology for intermediate and root CPGs."""
    s = native
    s.nodes(
        rz("node1-z1-r1", "rack-1", "zone-1"),
        rz("node2-z1-r1", "rack-1", "zone-1"),
        rz("node3-z1-r2", "rack-2", "zone-1"),
        rz("node4-z1-r2", "rack-2", "zone-1"),
        rz("node5-z2-r1", "rack-1", "zone-2"),
        rz("node6-z2-r1", "rack-1", "zone-2"),
        rz("node7-z2-r2", "rack-2", "zone-2"),
        rz("node8-z2-r2", "rack-2", "zone-2"),
    )
    s.create(
        s.cpg("cpg-root", 2, key="zone"),
        s.cpg("cpg-sub1", 2, "cpg-root", "rack"),
        s.cpg("cpg-sub2", 2, "cpg-root", "rack"),
        s.pg("pg1", 2, "cpg-sub1"),
        s.pg("pg2", 2, "cpg-sub1"),
        s.pg("pg3", 2, "cpg-sub2"),
        s.pg("pg4", 2, "cpg-sub2"),
    )
    s.create(s.pod("existing-pg1", "pg1", on="node5-z2-r1"))
    groups = {"p1": "pg1", "p2": "pg2", "p3": "pg2", "p4": "pg3", "p5": "pg3", "p6": "pg4", "p7": "pg4"}
    s.create(*(s.pod(p, g) for p, g in groups.items()))
    placed = s.wait_scheduled(groups)
    s.assert_on(placed, groups, {"node5-z2-r1", "node6-z2-r1", "node7-z2-r2", "node8-z2-r2"})
    s.assert_on(placed, ["p1", "p2", "p3"], {"node5-z2-r1", "node6-z2-r1"})
    s.assert_on(placed, ["p4", "p5", "p6", "p7"], {"node7-z2-r2", "node8-z2-r2"})


# ====================================================== troupe's own, beyond


def test_two_leader_worker_replicas_room_for_one_own_kinds(own):
    """The issue's case on troupe's own kinds, on a cluster without the
    gates: two replicas, each a root gang (minGroupCount 2) over a 1-pod
    leader group and a 4-pod worker gang, room for one. One replica binds
    whole, the other nothing, and its root says why. (The native version is
    tests/integration/test_native.py.)"""
    s = own
    s.nodes(node("n1", cpu="5"))
    for r in ("a", "b"):
        s.create(
            s.cpg(f"replica-{r}", 2, ref=("lws", "replica")),
            s.pg(f"{r}-leader", 1, f"replica-{r}"),
            s.pg(f"{r}-workers", 4, f"replica-{r}"),
        )
        s.create(s.pod(f"{r}-leader-0", f"{r}-leader"), *(s.pod(f"{r}-workers-{i}", f"{r}-workers") for i in range(4)))
    placed = wait_for(lambda: len(b := s.bound()) == 5 and b, timeout=TIMEOUT, interval=POLL, message="one replica")
    replicas = {n.split("-")[0] for n in placed}
    assert replicas in ({"a"}, {"b"}), placed
    won = replicas.pop()
    lost = "b" if won == "a" else "a"
    s.wait_composite(f"replica-{won}", "True", "Scheduled")
    s.wait_composite(f"replica-{lost}", "False", "Unschedulable", "needs 2 of 2 group(s)", f"{lost}-leader")
    s.wait_group(f"{won}-workers", "True", "Scheduled")
    s.wait_group(f"{lost}-leader", "False", "Unschedulable")
    s.wait_unschedulable([f"{lost}-leader-0", *(f"{lost}-workers-{i}" for i in range(4))])
    assert len(s.bound()) == 5  # never a part of the second replica


def test_a_missing_parent_waits_and_says_which(scene):
    """A PodGroup whose parent CompositePodGroup does not exist yet: its pods
    wait and say which; once the parent is created the tree is placed."""
    s = scene
    s.nodes(node("n1", cpu="4"))
    s.create(s.pg("pg1", 2, "later"))
    s.create(s.pod("p1", "pg1"), s.pod("p2", "pg1"))
    want = f"waiting for CompositePodGroup {s.ns}/later to be created"
    for name in ("p1", "p2"):  # held, as upstream's PreEnqueue holds: no condition, said in an Event
        wait_pod_waiting(s.cluster, s.ns, name, want, timeout=TIMEOUT)
    assert s.bound() == {}
    s.create(s.cpg("later", None))
    s.wait_scheduled(["p1", "p2"])
    s.wait_composite("later", "True", "Scheduled")
    s.wait_group("pg1", "True", "Scheduled")


# ====== cpg_tas_test.go: TestCPGTopologyAwareSchedulingWorkloadAwarePreemption

# Upstream's priorities 10 ("low") and 100 (every pod, PodGroup and
# CompositePodGroup of a tree, and every pre-bound "existing" pod) as
# PriorityClasses: the Priority admission plugin is on here. The groups name
# the class too: left without one, admission sets their `spec.priority` to 0,
# and a group's priority is its pods' (troupe; upstream refuses pods whose
# priority is not their root's), so the tree would have priority 0.
LOW, HIGH = "cpg-low", "cpg-high"


def _priority_classes(cluster: Any) -> None:
    for name, value in ((LOW, 10), (HIGH, 100)):
        body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}}
        body |= {"value": value, "preemptionPolicy": "PreemptLowerPriority"}
        cluster.kubectl("apply", "-f", "-", input=json.dumps(body))


@pytest.fixture(scope="module")
def classes_native(native_cluster) -> None:
    _priority_classes(native_cluster)


@pytest.fixture(scope="module")
def classes_own(installed) -> None:
    _priority_classes(installed)


@pytest.fixture
def pre(native, classes_native) -> Scene:
    """`native`, with the two PriorityClasses."""
    return native


def low(s: Scene, name: str, on: str, cpu: str = "2") -> dict[str, Any]:
    """makeAssignedPodWithPriority(name, node, cpu, 10): a bound victim, no group."""
    body = s.pod(name, on=on, cpu=cpu)
    body["spec"]["priorityClassName"] = LOW
    return body


def high(body: dict[str, Any]) -> dict[str, Any]:
    """The pod or group with upstream's priority 100 (the tree's, and the pre-bound 'existing' pods')."""
    body["spec"]["priorityClassName"] = HIGH
    return body


def hi(s: Scene, name: str, group: str | None = None, **kw: Any) -> dict[str, Any]:
    return high(s.pod(name, group, **kw))


def tree(s: Scene, *groups: dict[str, Any]) -> None:
    """The tree's CompositePodGroups and PodGroups, with the tree's priority class."""
    s.create(*map(high, groups))


def wait_removed(s: Scene, victims: Iterable[str]) -> None:
    """WaitForPodsRemoved. troupe deletes a victim with its grace period (0
    here, as upstream's): it is gone at once; one still terminating is
    force-deleted as a kubelet would once it stopped."""
    want = set(victims)

    def gone() -> bool:
        pods = s.pods()
        ending = [n for n in want & set(pods) if pods[n]["metadata"].get("deletionTimestamp")]
        if ending:
            s.cluster.kubectl("delete", "pods", "-n", s.ns, *ending, "--grace-period=0", "--force", "--wait=false")
        return not want & set(pods)

    try:
        wait_for(gone, timeout=TIMEOUT, interval=POLL, message=f"pods removed: {sorted(want)}")
    except AssertionError as e:
        now = {n: (p["spec"].get("nodeName"), pod_scheduled(p)) for n, p in s.pods().items()}
        raise AssertionError(f"{e}\nnow: {now}") from None


RACKS_1_2 = (
    rz("node1-z1-r1", "rack-1", "zone-1"),
    rz("node2-z1-r1", "rack-1", "zone-1"),
    rz("node3-z1-r2", "rack-2", "zone-1"),
    rz("node4-z1-r2", "rack-2", "zone-1"),
)


def _rack_tree_after_preempting(s: Scene) -> None:
    """Cases 1 and 2: rack-1 holds two low pods, rack-2 one higher one; the
    tree (a rack) needs a whole rack: both low pods go, the tree is on rack-1."""
    s.nodes(*RACKS_1_2)
    s.create(low(s, "low1", "node1-z1-r1"), low(s, "low2", "node2-z1-r1"), hi(s, "existing", on="node4-z1-r2", cpu="2"))
    tree(s, s.cpg("cpg-root", 2, key="rack"), s.pg("pg1", 2, "cpg-root"), s.pg("pg2", 2, "cpg-root"))
    s.create(hi(s, "p1", "pg1"), hi(s, "p2", "pg1"), hi(s, "p3", "pg2"), hi(s, "p4", "pg2"))
    wait_removed(s, ["low1", "low2"])
    placed = s.wait_scheduled(["p1", "p2", "p3", "p4"])
    s.assert_on(placed, ["p1", "p2", "p3", "p4"], R1)
    assert "existing" in s.pods()


def test_cpg_tas_preemption_parent_has_topology_children_do_not(pre):
    """parent CPG has topology constraints, children do not; schedules on a
    single rack after preempting lower priority pods."""
    _rack_tree_after_preempting(pre)


def test_cpg_tas_preemption_parent_has_topology_then_cannot_schedule_additional_pods(pre):
    """parent CPG has topology constraints, children do not; schedules on a
    single rack after preempting lower priority pods, then cannot schedule
    additional pods: rack-2 has 2 free CPU, but the tree is pinned to rack-1
    and nothing of lower priority is left there."""
    s = pre
    _rack_tree_after_preempting(s)
    s.create(hi(s, "p5", "pg1"))
    s.wait_unschedulable(["p5"])
    assert "p5" not in s.bound()


def test_cpg_tas_preemption_preexisting_pod_in_hierarchy_determines_topology(pre):
    """parent CPG has topology constraints, children do not; preexisting pod
    belonging to the hierarchy determines topology and lower priority pods
    are preempted (rack-1 is free, but the tree is already on rack-2)."""
    s = pre
    s.nodes(*RACKS_1_2)
    s.create(hi(s, "existing", "pg1", on="node4-z1-r2"))
    s.create(low(s, "low1-z1-r2", "node3-z1-r2"), low(s, "low2-z1-r2", "node4-z1-r2", cpu="1"))
    tree(s, s.cpg("cpg-root", 2, key="rack"), s.pg("pg1", 2, "cpg-root"), s.pg("pg2", 2, "cpg-root"))
    s.create(hi(s, "p1", "pg1"), hi(s, "p2", "pg2"), hi(s, "p3", "pg2"))
    wait_removed(s, ["low1-z1-r2", "low2-z1-r2"])
    placed = s.wait_scheduled(["p1", "p2", "p3"])
    s.assert_on(placed, ["p1", "p2", "p3"], R2)


def test_cpg_tas_preemption_basic_children_schedule_on_a_rack_after_preempting(pre):
    """parent CPG has topology constraints, children do not; schedules on a
    rack after preempting lower priority pods (basic children)."""
    s = pre
    s.nodes(rz("node1-z1-r1", "rack-1", "zone-1"), rz("node2-z1-r2", "rack-2", "zone-1"))
    s.create(low(s, "low1", "node1-z1-r1"), hi(s, "existing2", on="node2-z1-r2", cpu="2"))
    tree(s, s.cpg("cpg-root", 2, key="rack"), s.pg("pg1", None, "cpg-root"), s.pg("pg2", None, "cpg-root"))
    s.create(hi(s, "p1", "pg1"), hi(s, "p2", "pg2"))
    wait_removed(s, ["low1"])
    placed = s.wait_scheduled(["p1", "p2"])
    s.assert_on(placed, ["p1", "p2"], {"node1-z1-r1"})


def test_cpg_tas_preemption_parent_and_children_have_topology_zone_and_rack(pre):
    """parent CPG and child PGs both have topology constraints (multi-level
    constraints: zone and rack) with preemption: zone-2's one rack has 3 free
    CPU, so zone-1 once both its low pods are gone."""
    s = pre
    s.nodes(
        rz("node1-z1-r1", "rack-1", "zone-1"),
        rz("node2-z1-r2", "rack-2", "zone-1"),
        rz("node3-z2-r1", "rack-1", "zone-2"),
        rz("node4-z2-r1", "rack-1", "zone-2"),
    )
    s.create(low(s, "low-z1-r1", "node1-z1-r1"), low(s, "low-z1-r2", "node2-z1-r2"))
    s.create(hi(s, "existing-z2", on="node3-z2-r1"))
    tree(s, s.cpg("cpg-root", 2, key="zone"), s.pg("pg1", 2, "cpg-root", "rack"), s.pg("pg2", 2, "cpg-root", "rack"))
    s.create(hi(s, "p1", "pg1"), hi(s, "p2", "pg1"), hi(s, "p3", "pg2"), hi(s, "p4", "pg2"))
    wait_removed(s, ["low-z1-r1", "low-z1-r2"])
    placed = s.wait_scheduled(["p1", "p2", "p3", "p4"])
    s.assert_on(placed, ["p1", "p2", "p3", "p4"], {"node1-z1-r1", "node2-z1-r2"})
    s.assert_one_domain(placed, ["p1", "p2"], "rack")
    s.assert_one_domain(placed, ["p3", "p4"], "rack")


def test_cpg_tas_preemption_does_not_help_for_subsequent(pre):
    """parent CPG and child PGs both have topology constraints (zone and
    rack), preemption does not help for subsequent: pg1 and pg2 fit zone-1
    without preempting; pg3 added later preempts rack-3's low pod; pg4 added
    after that stays unschedulable (zone-2 could hold it after preempting,
    but the root is pinned to zone-1)."""
    s = pre
    s.nodes(
        rz("node1-z1-r1", "rack-1", "zone-1"),
        rz("node2-z1-r2", "rack-2", "zone-1"),
        rz("node3-z1-r3", "rack-3", "zone-1"),
        rz("node4-z2-r1", "rack-1", "zone-2"),
        rz("node5-z2-r1", "rack-1", "zone-2"),
    )
    s.create(low(s, "low-z1-r3", "node3-z1-r3"), low(s, "low-z2-r1", "node4-z2-r1"))
    tree(s, s.cpg("cpg-root", 2, key="zone"), s.pg("pg1", 2, "cpg-root", "rack"), s.pg("pg2", 2, "cpg-root", "rack"))
    s.create(hi(s, "p1", "pg1"), hi(s, "p2", "pg1"), hi(s, "p3", "pg2"), hi(s, "p4", "pg2"))
    placed = s.wait_scheduled(["p1", "p2", "p3", "p4"])
    s.assert_one_domain(placed, ["p1", "p2"], "rack")
    s.assert_one_domain(placed, ["p3", "p4"], "rack")
    assert {"low-z1-r3", "low-z2-r1"} <= set(s.pods())  # no preemption for these

    tree(s, s.pg("pg3", 2, "cpg-root", "rack"))
    s.create(hi(s, "p5", "pg3"), hi(s, "p6", "pg3"))
    wait_removed(s, ["low-z1-r3"])
    placed = s.wait_scheduled(["p5", "p6"])
    s.assert_one_domain(placed, ["p5", "p6"], "rack")

    tree(s, s.pg("pg4", 2, "cpg-root", "rack"))
    s.create(hi(s, "p7", "pg4"), hi(s, "p8", "pg4"))
    s.wait_unschedulable(["p7", "p8"])
    assert not {"p7", "p8"} & set(s.bound())
    assert "low-z2-r1" in s.pods()  # zone-2's low pod is not taken for a tree pinned to zone-1


def test_cpg_tas_preemption_only_one_child_has_topology_other_uses_parents(pre):
    """parent CPG and only one child PG has topology constraints; the other
    child uses parent's topology with preemption: pg1 (tolerating the taint)
    needs the tainted node1's rack, whose low pod goes."""
    s = pre
    s.nodes(
        node("node1-z1-r1", labels={"rack": "rack-1", "zone": "zone-1"}, taints=["taint"]),
        rz("node2-z1-r2", "rack-2", "zone-1"),
        rz("node3-z1-r3", "rack-3", "zone-1"),
        rz("node4-z2-r1", "rack-1", "zone-2"),
        rz("node5-z2-r2", "rack-2", "zone-2"),
    )
    s.create(hi(s, "existing-z2", on="node5-z2-r2"))
    s.create(hi(s, "existing-z1-r2", on="node2-z1-r2"), hi(s, "existing-z1-r3", on="node3-z1-r3"))
    s.create(low(s, "low-z1-r1", "node1-z1-r1"))
    tree(s, s.cpg("cpg-root", 2, key="zone"), s.pg("pg1", 2, "cpg-root", "rack"), s.pg("pg2", 2, "cpg-root"))
    s.create(
        hi(s, "p1", "pg1", tolerate="taint"),
        hi(s, "p2", "pg1", tolerate="taint"),
        hi(s, "p3", "pg2", prefer="node4-z2-r1"),
        hi(s, "p4", "pg2", prefer="node4-z2-r1"),
    )
    wait_removed(s, ["low-z1-r1"])
    placed = s.wait_scheduled(["p1", "p2", "p3", "p4"])
    s.assert_one_domain(placed, ["p1", "p2", "p3", "p4"], "zone")
    s.assert_one_domain(placed, ["p1", "p2"], "rack")


def test_cpg_tas_preemption_preexisting_group_pods_constrain_domains(pre):
    """parent CPG and all child PGs have topology constraints, preexisting pod
    group pods constrain available topology domains with preemption.

    Upstream removes both low pods: it reprieves a victim only against the
    assignments of its one run without victims, where pg2 may have landed on
    node2. troupe tries each victim set with the tree's own cycle (the
    gang's victim search, plugins/defaultpreemption): pg2 fits node3 (rack-2, free) alone, so
    low-z1-r2 on node2 is spared; only low-z1-r1, in the way of p1 on node1,
    goes."""
    s = pre
    s.nodes(
        rz("node1-z1-r1", "rack-1", "zone-1"),
        rz("node2-z1-r2", "rack-2", "zone-1"),
        rz("node3-z1-r2", "rack-2", "zone-1"),
        rz("node4-z2-r1", "rack-1", "zone-2"),
        rz("node5-z2-r1", "rack-1", "zone-2"),
    )
    tree(s, s.cpg("cpg-root", 2, key="zone"), s.pg("pg1", 2, "cpg-root", "rack"), s.pg("pg2", 2, "cpg-root", "rack"))
    s.create(hi(s, "existing-z1", "pg1", on="node1-z1-r1"))
    s.create(low(s, "low-z1-r1", "node1-z1-r1", cpu="1"), low(s, "low-z1-r2", "node2-z1-r2"))
    s.create(hi(s, "p1", "pg1"), hi(s, "p2", "pg2"), hi(s, "p3", "pg2"))
    wait_removed(s, ["low-z1-r1"])
    placed = s.wait_scheduled(["p1", "p2", "p3"])
    s.assert_on(placed, ["p1"], {"node1-z1-r1"})
    s.assert_on(placed, ["p2", "p3"], {"node2-z1-r2", "node3-z1-r2"})
    assert "low-z1-r2" in s.pods()  # upstream: removed (see above)
    s.assert_on(placed, ["p2", "p3"], {"node3-z1-r2"})


def _zbr(name: str, zone: str, block: str, rack: str) -> dict[str, Any]:
    return node(name, labels={"zone": zone, "block": block, "rack": rack})


def test_cpg_tas_preemption_three_levels_all_with_topology(pre):
    """3-level CPG hierarchy: all levels have topology constraints (root=zone,
    sub=block, leaf=rack) with preemption: zone-2 has 4 CPU for 8 pods, so
    zone-1, once its 4 low pods are gone."""
    s = pre
    s.nodes(
        _zbr("node1-z1-g1-r1", "zone-1", "block-1", "rack-1"),
        _zbr("node2-z1-g1-r2", "zone-1", "block-1", "rack-2"),
        _zbr("node3-z1-g2-r1", "zone-1", "block-2", "rack-1"),
        _zbr("node4-z1-g2-r2", "zone-1", "block-2", "rack-2"),
        _zbr("node5-z2-g1-r1", "zone-2", "block-1", "rack-1"),
        _zbr("node6-z2-g1-r1", "zone-2", "block-1", "rack-1"),
    )
    lows = {
        f"low-{i}": n for i, n in enumerate(("node1-z1-g1-r1", "node2-z1-g1-r2", "node3-z1-g2-r1", "node4-z1-g2-r2"))
    }
    s.create(*(low(s, v, n) for v, n in lows.items()))
    tree(
        s,
        s.cpg("cpg-root", 2, key="zone"),
        s.cpg("cpg-sub1", 2, "cpg-root", "block"),
        s.cpg("cpg-sub2", 2, "cpg-root", "block"),
        s.pg("pg1", 2, "cpg-sub1", "rack"),
        s.pg("pg2", 2, "cpg-sub1", "rack"),
        s.pg("pg3", 2, "cpg-sub2", "rack"),
        s.pg("pg4", 2, "cpg-sub2", "rack"),
    )
    pods = [f"p{i}" for i in range(1, 9)]
    s.create(*(hi(s, p, f"pg{(i // 2) + 1}") for i, p in enumerate(pods)))
    wait_removed(s, lows)
    placed = s.wait_scheduled(pods)
    s.assert_one_domain(placed, pods, "zone")
    s.assert_one_domain(placed, pods[:4], "block")
    s.assert_one_domain(placed, pods[4:], "block")
    for i in range(0, 8, 2):
        s.assert_one_domain(placed, pods[i : i + 2], "rack")


def test_cpg_tas_preemption_three_levels_mid_level_without_topology(pre):
    """3-level CPG hierarchy: mid-level without topology constraints
    (root=zone, sub=none, leaf=rack) with preemption."""
    s = pre
    s.nodes(
        rz("node1-z1-r1", "rack-1", "zone-1"),
        rz("node2-z1-r2", "rack-2", "zone-1"),
        rz("node3-z2-r1", "rack-1", "zone-2"),
    )
    s.create(low(s, "low-z1-r1", "node1-z1-r1"), low(s, "low-z1-r2", "node2-z1-r2"))
    tree(
        s,
        s.cpg("cpg-root", 2, key="zone"),
        s.cpg("cpg-sub1", None, "cpg-root"),
        s.cpg("cpg-sub2", None, "cpg-root"),
        s.pg("pg1", 2, "cpg-sub1", "rack"),
        s.pg("pg2", 2, "cpg-sub2", "rack"),
    )
    pods = ["p1", "p2", "p3", "p4"]
    s.create(hi(s, "p1", "pg1"), hi(s, "p2", "pg1"), hi(s, "p3", "pg2"), hi(s, "p4", "pg2"))
    wait_removed(s, ["low-z1-r1", "low-z1-r2"])
    placed = s.wait_scheduled(pods)
    s.assert_one_domain(placed, pods, "zone")
    s.assert_one_domain(placed, ["p1", "p2"], "rack")
    s.assert_one_domain(placed, ["p3", "p4"], "rack")


def test_cpg_tas_preemption_three_levels_top_level_without_topology(pre):
    """3-level CPG hierarchy: top level without topology constraint
    (root=none, sub=zone, leaf=rack) with preemption: 4 nodes, each full of
    a low pod; every one goes."""
    s = pre
    s.nodes(
        rz("node1-z1-r1", "rack-1", "zone-1"),
        rz("node2-z1-r2", "rack-2", "zone-1"),
        rz("node3-z2-r3", "rack-3", "zone-2"),
        rz("node4-z2-r4", "rack-4", "zone-2"),
    )
    lows = {f"low-{i}": n for i, n in enumerate(("node1-z1-r1", "node2-z1-r2", "node3-z2-r3", "node4-z2-r4"))}
    s.create(*(low(s, v, n) for v, n in lows.items()))
    tree(
        s,
        s.cpg("cpg-root", None),
        s.cpg("cpg-sub1", 2, "cpg-root", "zone"),
        s.cpg("cpg-sub2", 2, "cpg-root", "zone"),
        s.pg("pg1", 2, "cpg-sub1", "rack"),
        s.pg("pg2", 2, "cpg-sub1", "rack"),
        s.pg("pg3", 2, "cpg-sub2", "rack"),
        s.pg("pg4", 2, "cpg-sub2", "rack"),
    )
    pods = [f"p{i}" for i in range(1, 9)]
    s.create(*(hi(s, p, f"pg{(i // 2) + 1}") for i, p in enumerate(pods)))
    wait_removed(s, lows)
    placed = s.wait_scheduled(pods)
    s.assert_one_domain(placed, pods[:4], "zone")
    s.assert_one_domain(placed, pods[4:], "zone")
    for i in range(0, 8, 2):
        s.assert_one_domain(placed, pods[i : i + 2], "rack")


def test_cpg_tas_preemption_three_levels_bottom_level_without_topology(pre):
    """3-level CPG hierarchy: bottom level without topology constraint
    (root=zone, sub=rack, leaf=none) with preemption: zone-2 has 4 CPU for 8
    pods, so zone-1, once its 4 low pods are gone. (Upstream's step name says
    "Basic"; its root is a gang of 2, as here.)"""
    s = pre
    s.nodes(
        rz("node1-z1-r1", "rack-1", "zone-1"),
        rz("node2-z1-r1", "rack-1", "zone-1"),
        rz("node3-z1-r2", "rack-2", "zone-1"),
        rz("node4-z1-r2", "rack-2", "zone-1"),
        rz("node5-z2-r3", "rack-3", "zone-2"),
        rz("node6-z2-r3", "rack-3", "zone-2"),
    )
    lows = {f"low-{i}": n for i, n in enumerate(("node1-z1-r1", "node2-z1-r1", "node3-z1-r2", "node4-z1-r2"))}
    s.create(*(low(s, v, n) for v, n in lows.items()))
    tree(
        s,
        s.cpg("cpg-root", 2, key="zone"),
        s.cpg("cpg-sub1", 2, "cpg-root", "rack"),
        s.cpg("cpg-sub2", 2, "cpg-root", "rack"),
        s.pg("pg1", 2, "cpg-sub1"),
        s.pg("pg2", 2, "cpg-sub1"),
        s.pg("pg3", 2, "cpg-sub2"),
        s.pg("pg4", 2, "cpg-sub2"),
    )
    pods = [f"p{i}" for i in range(1, 9)]
    s.create(*(hi(s, p, f"pg{(i // 2) + 1}") for i, p in enumerate(pods)))
    wait_removed(s, lows)
    placed = s.wait_scheduled(pods)
    s.assert_one_domain(placed, pods, "zone")
    s.assert_one_domain(placed, pods[:4], "rack")
    s.assert_one_domain(placed, pods[4:], "rack")


def test_cpg_tas_preemption_three_levels_preexisting_leaf_pod_determines_topology(pre):
    """3-level CPG hierarchy: preexisting pod in leaf PodGroup determines
    topology for intermediate and root CPGs with preemption: the tree stays
    in zone-2 (where pg1's pod runs) and takes the low pods there, although
    zone-1 is free."""
    s = pre
    s.nodes(
        rz("node1-z1-r1", "rack-1", "zone-1"),
        rz("node2-z1-r1", "rack-1", "zone-1"),
        rz("node3-z1-r2", "rack-2", "zone-1"),
        rz("node4-z1-r2", "rack-2", "zone-1"),
        rz("node5-z2-r1", "rack-1", "zone-2"),
        rz("node6-z2-r1", "rack-1", "zone-2"),
        rz("node7-z2-r2", "rack-2", "zone-2"),
        rz("node8-z2-r2", "rack-2", "zone-2"),
    )
    tree(
        s,
        s.cpg("cpg-root", 2, key="zone"),
        s.cpg("cpg-sub1", 2, "cpg-root", "rack"),
        s.cpg("cpg-sub2", 2, "cpg-root", "rack"),
        s.pg("pg1", 2, "cpg-sub1"),
        s.pg("pg2", 2, "cpg-sub1"),
        s.pg("pg3", 2, "cpg-sub2"),
        s.pg("pg4", 2, "cpg-sub2"),
    )
    s.create(hi(s, "existing-pg1", "pg1", on="node5-z2-r1"))
    s.create(low(s, "low-z2-r1", "node6-z2-r1"), low(s, "low-z2-r2", "node7-z2-r2"))
    groups = {"p1": "pg1", "p2": "pg2", "p3": "pg2", "p4": "pg3", "p5": "pg3", "p6": "pg4", "p7": "pg4"}
    s.create(*(hi(s, p, g) for p, g in groups.items()))
    wait_removed(s, ["low-z2-r1", "low-z2-r2"])
    placed = s.wait_scheduled(groups)
    s.assert_on(placed, groups, {"node5-z2-r1", "node6-z2-r1", "node7-z2-r2", "node8-z2-r2"})
    s.assert_on(placed, ["p1", "p2", "p3"], {"node5-z2-r1", "node6-z2-r1"})
    s.assert_on(placed, ["p4", "p5", "p6", "p7"], {"node7-z2-r2", "node8-z2-r2"})


# ============================== preemption of a tree, troupe's own kinds


@pytest.fixture
def pre_own(own, classes_own) -> Scene:
    """`own`, with the two PriorityClasses."""
    return own


def test_a_tree_with_disruption_mode_all_is_preempted_whole_own_kinds(pre_own):
    """A low-priority tree below a CompositePodGroup with `disruptionMode:
    {all: {}}`, its two basic PodGroups running on two nodes; a
    high-priority gang that needs one node's room. One node's pods would
    make the room, but the tree goes whole: all four pods are evicted
    (DisruptionTarget), not half, and the CompositePodGroup says
    DisruptionTarget=True/PreemptionByScheduler. (troupe's groups here carry
    no priority: the pods' PriorityClasses are the groups'.)"""
    s = pre_own
    s.nodes(node("node-a"), node("node-b"))
    root = s.cpg("low-tree", None, ref=("lws", "replica"))
    root["spec"]["disruptionMode"] = {"all": {}}
    s.create(root, s.pg("low-a", None, "low-tree"), s.pg("low-b", None, "low-tree"))
    victims = []
    for g, n in (("low-a", "node-a"), ("low-b", "node-b")):
        for i in range(2):
            body = s.pod(f"{g}-{i}", g, on=n)
            body["spec"]["priorityClassName"] = LOW
            body["spec"]["terminationGracePeriodSeconds"] = 30  # stays Terminating: no kubelet here
            victims.append(body)
    s.create(*victims)
    s.create(s.pg("high", 2), hi(s, "high-0", "high"), hi(s, "high-1", "high"))

    def all_terminating() -> dict[str, dict[str, Any]] | None:
        pods = s.pods()
        ending = {n: p for n, p in pods.items() if n.startswith("low-") and p["metadata"].get("deletionTimestamp")}
        return ending if len(ending) == 4 else None

    ending = wait_for(all_terminating, timeout=TIMEOUT, interval=POLL, message="the 4 pods of the tree terminating")
    for name, body in ending.items():
        cond = next((c for c in body["status"].get("conditions") or () if c["type"] == "DisruptionTarget"), None)
        assert cond is not None and (cond["status"], cond["reason"]) == ("True", "PreemptionByScheduler"), (name, cond)
    cond = wait_for(
        lambda: s.condition(OWN.cpg_api, "compositepodgroups", "low-tree", "DisruptionTarget"),
        timeout=TIMEOUT,
        interval=POLL,
        message="DisruptionTarget on low-tree",
    )
    assert (cond["status"], cond["reason"]) == ("True", "PreemptionByScheduler"), cond
    assert not {"high-0", "high-1"} & set(s.bound())  # nothing binds before the victims are gone

    wait_removed(s, list(ending))
    s.wait_scheduled(["high-0", "high-1"])
