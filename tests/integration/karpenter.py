"""The real Karpenter and kwok for the integration tests: Karpenter's
controller with its kwok cloud provider (sigs.k8s.io/karpenter v1.15.0's
main package `kwok`, built as `karpenter-kwok`) and kwok's controller
(sigs.k8s.io/kwok v0.8.0's cmd/kwok), both built from their Go modules by
`make operators` (hack/build-operators.sh), run as processes against a
LocalCluster, and the objects a Karpenter user writes.

    karpenter, kwok = karpenter_build(), kwok_build()   # OperatorNotBuilt (says: make operators)
    install_karpenter_crds(cluster, karpenter)
    kw = Kwok(kwok, cluster, tmp_path).start()
    kp = Karpenter(karpenter, cluster, tmp_path).start()
    apply(cluster, kwok_nodeclass("default"), nodepool("pool", {"rack": "r1"}, []))
    mark_unschedulable(cluster, ns, "p")        # what Karpenter provisions for
    node = wait_for(lambda: karpenter_nodes(cluster, "pool"), ...)
    bind(cluster, ns, "p", node[0]["metadata"]["name"])
    ...
    kp.stop(); kw.stop()

What the kwok chart (kwok/charts in the Karpenter module) and kwok's
kustomize/kwok manifests would give them, made here instead (as the
v1.15.0 and v0.8.0 sources read them):

- Karpenter reads its settings from environment variables (pkg/operator/
  options/options.go; kwok/options/options.go adds INSTANCE_TYPES_FILE_PATH)
  and its client config from KUBECONFIG (controller-runtime's GetConfig: it
  parses its own flag set, so there is no --kubeconfig). The harness sets
  DISABLE_LEADER_ELECTION=true, HEALTH_PROBE_PORT and METRICS_PORT (free
  ports; both bind every interface), BATCH_IDLE_DURATION=1s and
  BATCH_MAX_DURATION=3s (defaults 1s/10s: a provisioning decision within
  ~1-3 s of the last pending pod), FEATURE_GATES (defaults: every alpha gate
  off, ReservedCapacity on), and INSTANCE_TYPES_FILE_PATH. It runs as the
  admin (system:masters): its RBAC is not what is tested. No webhooks, no
  SYSTEM_NAMESPACE or CLUSTER_NAME (the kwok provider reads neither);
  LOG_LEVEL=debug (a few lines per provisioning pass). Ready when /readyz answers
  200: that includes a check that the NodePool and NodeClaim kinds are served.
- What it provisions for (pkg/utils/pod/scheduling.go IsProvisionable): pods
  with PodScheduled=False reason exactly Unschedulable, no nodeName, no
  nominatedNodeName, not a DaemonSet's or mirror pod, whatever their
  schedulerName; a pod with another reason or no condition gets nothing. It
  reconsiders pending pods every 10 s. It writes no nominatedNodeName: it
  nominates with an Event (reason Nominated) only. Its simulation places the
  pending pods on every node of the cluster first, its own or not, Ready or
  not: a plain Node a test makes (hack/localcluster: no kubelet) that fits
  the pod means no NodeClaim. Taint such nodes, or keep the pods off them.
- Instance types: the provider embeds 144 generated ones
  (kwok/cloudprovider/instance_types.json: families c, m, s; 1-256 cpu;
  amd64/arm64; linux/windows; spot and on-demand in test-zone-a..d). The
  harness writes a small list instead (`instance_types()`: by default
  c-2x-amd64-linux, c-4x-amd64-linux, c-8x-amd64-linux with 2 GiB per cpu and
  110 pods, on-demand only, in test-zone-a..c, priced by cpu) so a test knows
  which node it gets: the cheapest type whose allocatable (capacity minus
  100m cpu and 10Mi memory kube-reserved, kwok/cloudprovider/helpers.go) holds
  the pending pods, in a zone picked at random among the cheapest offerings
  unless the NodePool or the pods require one.
- What a NodeClaim becomes (kwok/cloudprovider/cloudprovider.go): Create
  writes a Node named kwok-<nodeclaim>-<random>-<n> (after the
  KWOKNodeClass's nodeRegistrationDelay), providerID kwok://<node name>,
  tainted karpenter.sh/unregistered:NoExecute (Karpenter removes it when it
  registers the NodeClaim and labels the node karpenter.sh/registered, then
  karpenter.sh/initialized once the node is Ready). Its labels: the
  NodePool template's, karpenter.sh/nodepool, the requirements with a single
  value, node.kubernetes.io/instance-type, kubernetes.io/arch, kubernetes.io/
  os, topology.kubernetes.io/zone, karpenter.sh/capacity-type,
  karpenter.kwok.sh/instance-{size,family,cpu,memory}, kwok-partition=a,
  eks-node-viewer/instance-price, kwok.x-k8s.io/node=fake (also an
  annotation), and kubernetes.io/hostname = the NodeClaim's name (not the
  Node's). Its status.capacity is the NodeClaim's resource requests (the
  pods' it was made for), its allocatable the instance type's.
- Nothing makes that Node Ready: there is no kubelet. `Kwok` runs kwok's
  controller to play the kubelet for exactly those nodes
  (--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake, as kwok's
  own kustomize/kwok/kwok.yaml; the plain Nodes other tests create are left
  alone: no conditions, no Lease) with the Stages of kwok's kustomize/stage/fast (kwok, started
  outside kwokctl, has none built in and refuses to start without one):
  node-initialize (Ready, phase Running, addresses), node-heartbeat-with-lease
  (conditions refreshed every 10-20 min) and the node Lease in
  kube-node-lease renewed every --node-lease-duration-seconds/4 = 10 s (what a
  node lifecycle controller reads; LocalCluster's kube-controller-manager runs
  none, so nothing here would mark a silent node NotReady anyway), pod-ready
  (a pod bound to such a node becomes Running and Ready) and pod-delete (a
  pod being deleted there goes, as the kubelet would finish it: Karpenter's
  drain evicts, no kubelet ends the pods). pod-complete (Job pods Succeed at
  once) is there but not used unless asked for. kwok's own server (/readyz)
  listens on a free loopback port; its ~/.kwok is a directory in the workdir.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from operators import OperatorNotBuilt, OperatorProcess, _cache_home, _free_port

KARPENTER_VERSION = "1.15.0"
KWOK_VERSION = "0.8.0"
NODEPOOL_API = "karpenter.sh/v1"
KWOK_NODECLASS_API = "karpenter.kwok.sh/v1alpha1"
KARPENTER_CRD_FILES = (
    "karpenter.sh_nodepools.yaml",
    "karpenter.sh_nodeclaims.yaml",
    "karpenter.sh_nodeoverlays.yaml",
    "karpenter.kwok.sh_kwoknodeclasses.yaml",
    "autoscaling.x-k8s.io_capacitybuffers.yaml",
)
KARPENTER_CRDS = (
    "nodepools.karpenter.sh",
    "nodeclaims.karpenter.sh",
    "nodeoverlays.karpenter.sh",
    "kwoknodeclasses.karpenter.kwok.sh",
    "capacitybuffers.autoscaling.x-k8s.io",
)
KWOK_STAGES = ("node-initialize", "node-heartbeat-with-lease", "pod-ready", "pod-complete", "pod-delete")
DEFAULT_KWOK_STAGES = ("node-initialize", "node-heartbeat-with-lease", "pod-ready", "pod-delete")

# What Karpenter and its kwok provider write on nodes (pkg/apis/v1/labels.go,
# pkg/apis/v1/taints.go, kwok/apis/v1alpha1/labels.go).
NODEPOOL_LABEL = "karpenter.sh/nodepool"
REGISTERED_LABEL = "karpenter.sh/registered"
INITIALIZED_LABEL = "karpenter.sh/initialized"
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
UNREGISTERED_TAINT = "karpenter.sh/unregistered"
DISRUPTED_TAINT = "karpenter.sh/disrupted"
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
KWOK_NODE_KEY, KWOK_NODE_VALUE = "kwok.x-k8s.io/node", "fake"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
ZONE_LABEL = "topology.kubernetes.io/zone"
INSTANCE_CPU_LABEL = "karpenter.kwok.sh/instance-cpu"
ZONES = ("test-zone-a", "test-zone-b", "test-zone-c")
NODE_LEASE_SECONDS = 40  # kwok's kustomize/kwok/kwok.yaml (a kubelet's default too)


@dataclass(frozen=True)
class KarpenterBuild:
    binary: Path
    crds: tuple[Path, ...]


@dataclass(frozen=True)
class KwokBuild:
    binary: Path
    stages: dict[str, Path]  # stage name -> its YAML


def default_karpenter_dir() -> Path:
    env = os.environ.get("TROUPE_KARPENTER_DIR", "")
    return Path(env) if env else _cache_home() / "troupe" / f"karpenter-v{KARPENTER_VERSION}"


def default_kwok_dir() -> Path:
    env = os.environ.get("TROUPE_KWOK_DIR", "")
    return Path(env) if env else _cache_home() / "troupe" / f"kwok-v{KWOK_VERSION}"


def _missing(binary: Path, files: list[Path]) -> list[Path]:
    ok_binary = binary.is_file() and os.access(binary, os.X_OK)
    return ([] if ok_binary else [binary]) + [f for f in files if not f.is_file()]


def karpenter_build(directory: Path | None = None) -> KarpenterBuild:
    """The built karpenter-kwok and its CRDs, or OperatorNotBuilt saying how to build them."""
    d = Path(directory) if directory else default_karpenter_dir()
    binary = d / "bin" / "karpenter-kwok"
    crds = [d / "crds" / f for f in KARPENTER_CRD_FILES]
    missing = _missing(binary, crds)
    if missing:
        raise OperatorNotBuilt(
            f"Karpenter v{KARPENTER_VERSION} (kwok provider) is not built ({', '.join(map(str, missing))} missing): "
            f"run `make operators` (hack/build-operators.sh builds it from its Go module into the cache), "
            f"or point TROUPE_KARPENTER_DIR at a directory with bin/karpenter-kwok and crds/"
        )
    return KarpenterBuild(binary, tuple(crds))


def kwok_build(directory: Path | None = None) -> KwokBuild:
    """The built kwok and its stages, or OperatorNotBuilt saying how to build them."""
    d = Path(directory) if directory else default_kwok_dir()
    binary = d / "bin" / "kwok"
    stages = {name: d / "stages" / f"{name}.yaml" for name in KWOK_STAGES}
    missing = _missing(binary, list(stages.values()))
    if missing:
        raise OperatorNotBuilt(
            f"kwok v{KWOK_VERSION} is not built ({', '.join(map(str, missing))} missing): run `make operators` "
            f"(hack/build-operators.sh builds it from its Go module into the cache), or point TROUPE_KWOK_DIR at a "
            f"directory with bin/kwok and stages/"
        )
    return KwokBuild(binary, stages)


def install_karpenter_crds(cluster: Any, build: KarpenterBuild) -> None:
    """karpenter.sh's NodePool, NodeClaim and NodeOverlay as the kwok chart
    ships them, the KWOKNodeClass and CapacityBuffer CRDs; server-side, then
    Established."""
    args: list[str] = []
    for crd in build.crds:
        args += ["-f", str(crd)]
    cluster.kubectl("apply", "--server-side", "--force-conflicts", *args, timeout=120)
    names = [f"crd/{n}" for n in KARPENTER_CRDS]
    cluster.kubectl("wait", "--for=condition=Established", *names, "--timeout=60s", timeout=90)


def instance_types(
    cpus: tuple[int, ...] = (2, 4, 8),
    zones: tuple[str, ...] = ZONES,
    capacity_types: tuple[str, ...] = ("on-demand",),
    memory_gib_per_cpu: int = 2,
    pods: int = 110,
) -> list[dict[str, Any]]:
    """Instance types in the provider's JSON format (kwok/cloudprovider/helpers.go
    InstanceTypeOptions): `c-<n>x-amd64-linux`, n cpu, n*memory_gib_per_cpu GiB,
    one offering per zone and capacity type, 0.025 $/h per cpu on-demand and
    70% of that on spot. The provider derives the karpenter.kwok.sh/instance-*
    labels from them: family "c", size and cpu "<n>", memory "<m>Gi"."""
    out = []
    for n in cpus:
        offerings = [
            {
                "Price": round(0.025 * n * (1.0 if ct == "on-demand" else 0.7), 6),
                "Available": True,
                "Requirements": [
                    {"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": [ct]},
                    {"key": ZONE_LABEL, "operator": "In", "values": [zone]},
                ],
            }
            for zone in zones
            for ct in capacity_types
        ]
        out.append(
            {
                "name": f"c-{n}x-amd64-linux",
                "offerings": offerings,
                "architecture": "amd64",
                "operatingSystems": ["linux"],
                "resources": {
                    "cpu": str(n),
                    "memory": f"{n * memory_gib_per_cpu}Gi",
                    "ephemeral-storage": "20Gi",
                    "pods": str(pods),
                },
            }
        )
    return out


class Karpenter(OperatorProcess):
    """Karpenter's controller with the kwok cloud provider: no leader
    election, short batch windows, the instance types of `instance_types()`
    (or those given), its log in ``workdir``."""

    name = "karpenter"

    def __init__(
        self,
        build: KarpenterBuild,
        cluster: Any,
        workdir: Path,
        types: list[dict[str, Any]] | None = None,
        feature_gates: dict[str, bool] | None = None,
        batch_idle: str = "1s",
        batch_max: str = "3s",
        log_level: str = "debug",
        extra_env: dict[str, str] | None = None,
    ) -> None:
        super().__init__(cluster.admin_kubeconfig, Path(workdir) / "karpenter.log")
        self.build = build
        self.cluster = cluster
        self.workdir = Path(workdir)
        self.types = types if types is not None else instance_types()
        self.feature_gates = dict(feature_gates or {})
        self.batch_idle = batch_idle
        self.batch_max = batch_max
        self.log_level = log_level
        self.extra_env = dict(extra_env or {})
        self.metrics_port = 0
        self.instance_types_path = self.workdir / "karpenter-instance-types.json"

    def command(self) -> list[str]:
        return [str(self.build.binary)]

    def environment(self) -> dict[str, str]:
        gates = ",".join(f"{k}={str(v).lower()}" for k, v in self.feature_gates.items())
        env = {
            **super().environment(),  # KUBECONFIG
            "DISABLE_LEADER_ELECTION": "true",
            "HEALTH_PROBE_PORT": str(self.port),
            "METRICS_PORT": str(self.metrics_port),
            "BATCH_IDLE_DURATION": self.batch_idle,
            "BATCH_MAX_DURATION": self.batch_max,
            "INSTANCE_TYPES_FILE_PATH": str(self.instance_types_path),
            "LOG_LEVEL": self.log_level,
            **({"FEATURE_GATES": gates} if gates else {}),
            **self.extra_env,
        }
        return env

    def start(self, timeout: float = 60.0) -> Karpenter:
        self.instance_types_path.write_text(json.dumps(self.types, indent=1))
        self.metrics_port = _free_port()
        super().start(timeout)
        return self


class Kwok(OperatorProcess):
    """kwok's controller as the kubelet of the nodes Karpenter's kwok provider
    makes (annotation kwok.x-k8s.io/node=fake), with kwok's fast stages."""

    name = "kwok"

    def __init__(
        self,
        build: KwokBuild,
        cluster: Any,
        workdir: Path,
        stages: tuple[str, ...] = DEFAULT_KWOK_STAGES,
        node_lease_seconds: int = NODE_LEASE_SECONDS,
    ) -> None:
        super().__init__(cluster.admin_kubeconfig, Path(workdir) / "kwok.log")
        self.build = build
        self.cluster = cluster
        self.workdir = Path(workdir)
        unknown = set(stages) - set(build.stages)
        if unknown:
            raise ValueError(f"unknown kwok stages {sorted(unknown)} (known: {sorted(build.stages)})")
        self.stages = tuple(stages)
        self.node_lease_seconds = node_lease_seconds

    def command(self) -> list[str]:
        # Flags, not a KwokConfiguration file: a file's options get no defaults
        # (kwok then refuses a play-stage parallelism of 0); without one kwok
        # defaults them (pkg/config/vars.go GetKwokConfiguration).
        return [
            str(self.build.binary),
            f"--kubeconfig={self.kubeconfig}",
            *(f"--config={self.build.stages[s]}" for s in self.stages),
            f"--manage-nodes-with-annotation-selector={KWOK_NODE_KEY}={KWOK_NODE_VALUE}",
            f"--node-lease-duration-seconds={self.node_lease_seconds}",
            "--cidr=10.244.0.0/16",  # the pod IPs it hands out (LocalCluster's service range is 10.0.0.0/24)
            "--node-ip=10.243.0.1",
            f"--server-address=127.0.0.1:{self.port}",  # its /readyz
        ]

    def environment(self) -> dict[str, str]:
        # KWOK_WORKDIR: its ~/.kwok (a kwok.yaml there would be loaded first)
        return dict(super().environment(), KWOK_WORKDIR=str(self.workdir / "kwok-home"))


# ------------------------------------------------------------------ objects


def kwok_nodeclass(name: str = "default", registration_delay: str | None = None) -> dict[str, Any]:
    """A KWOKNodeClass (its status defaults to Ready=True in the CRD)."""
    spec: dict[str, Any] = {}
    if registration_delay:
        spec["nodeRegistrationDelay"] = registration_delay
    return {"apiVersion": KWOK_NODECLASS_API, "kind": "KWOKNodeClass", "metadata": {"name": name}, "spec": spec}


def requirement(key: str, operator: str, *values: str) -> dict[str, Any]:
    req: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        req["values"] = list(values)
    return req


def nodepool(
    name: str,
    labels: dict[str, str] | None = None,
    requirements: list[dict[str, Any]] | None = None,
    limits: dict[str, str] | None = None,
    consolidation_policy: str = "WhenEmpty",
    consolidate_after: str = "Never",
    nodeclass: str = "default",
    taints: list[dict[str, str]] | None = None,
    startup_taints: list[dict[str, str]] | None = None,
    budgets: list[dict[str, Any]] | None = None,
    expire_after: str = "Never",
    weight: int | None = None,
) -> dict[str, Any]:
    """A karpenter.sh/v1 NodePool of KWOKNodeClass ``nodeclass``: template
    labels ``labels`` (on every node it makes), ``requirements`` (node
    selector requirements, e.g. `requirement(ZONE_LABEL, "In", "test-zone-a")`),
    ``limits`` (e.g. {"cpu": "16"}), the disruption settings as given (the
    CRD's defaults are WhenEmptyOrUnderutilized / 0s / 10% of nodes; here
    WhenEmpty / Never unless asked), expireAfter Never (default 720h)."""
    tmpl_spec: dict[str, Any] = {
        "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": nodeclass},
        "requirements": list(requirements or []),
        "expireAfter": expire_after,
    }
    if taints:
        tmpl_spec["taints"] = taints
    if startup_taints:
        tmpl_spec["startupTaints"] = startup_taints
    disruption: dict[str, Any] = {"consolidationPolicy": consolidation_policy, "consolidateAfter": consolidate_after}
    if budgets is not None:
        disruption["budgets"] = budgets
    spec: dict[str, Any] = {
        "template": {"metadata": {"labels": dict(labels or {})}, "spec": tmpl_spec},
        "disruption": disruption,
    }
    if limits:
        spec["limits"] = dict(limits)
    if weight is not None:
        spec["weight"] = weight
    return {"apiVersion": NODEPOOL_API, "kind": "NodePool", "metadata": {"name": name}, "spec": spec}


def apply(cluster: Any, *objects: dict[str, Any]) -> None:
    """``kubectl apply`` the objects (as the admin)."""
    cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))


# ------------------------------------------------------------------ readers


def nodeclaims(cluster: Any, nodepool_name: str | None = None) -> list[dict[str, Any]]:
    args = ["-l", f"{NODEPOOL_LABEL}={nodepool_name}"] if nodepool_name else []
    return list(cluster.get_json("nodeclaims.karpenter.sh", *args)["items"])


def karpenter_nodes(cluster: Any, nodepool_name: str | None = None) -> list[dict[str, Any]]:
    """The Nodes Karpenter made (label karpenter.sh/nodepool), of one NodePool if given."""
    selector = f"{NODEPOOL_LABEL}={nodepool_name}" if nodepool_name else NODEPOOL_LABEL
    return list(cluster.get_json("nodes", "-l", selector)["items"])


def node_condition(node: dict[str, Any], kind: str = "Ready") -> dict[str, Any] | None:
    return next((c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


def node_ready(node: dict[str, Any]) -> bool:
    cond = node_condition(node)
    return cond is not None and cond.get("status") == "True"


def node_lease(cluster: Any, node_name: str) -> dict[str, Any]:
    return dict(cluster.get_json("lease", "-n", "kube-node-lease", node_name))


def mark_unschedulable(cluster: Any, ns: str, name: str, message: str = "0/0 nodes are available") -> None:
    """What kube-scheduler (or troupe) writes on a pod it cannot place: the
    condition Karpenter provisions for (PodScheduled=False, reason Unschedulable)."""
    patch = {
        "status": {
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}]
        }
    }
    cluster.kubectl("patch", "pod", "-n", ns, name, "--subresource=status", "--type=strategic", "-p", json.dumps(patch))


def bind(cluster: Any, ns: str, name: str, node_name: str) -> None:
    """POST pods/binding, as a scheduler binds."""
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "namespace": ns},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
    }
    cluster.kubectl(
        "create", "--raw", f"/api/v1/namespaces/{ns}/pods/{name}/binding", "-f", "-", input=json.dumps(binding)
    )
