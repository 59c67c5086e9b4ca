"""The real Kueue for the integration tests: its manager (sigs.k8s.io/kueue
v0.17.0's cmd/kueue), built from its Go module by `make operators`
(hack/build-operators.sh), run as a process against a LocalCluster with its
admission webhooks reachable, and the objects a Kueue user writes.

    build = kueue_build()                      # OperatorNotBuilt (says: make operators)
    install_kueue_crds(cluster, build)
    kueue = Kueue(build, cluster, tmp_path).start()
    ...
    kueue.stop()

What its Deployment's manifests give it, made here instead (as v0.17.0's
source reads them: cmd/kueue, pkg/util/cert, config/components):

- Its webhook server's certificate: internal cert management is off
  (cert-controller waits for a kubelet to mount its Secret), so the harness
  makes a CA and a serving certificate for IP 127.0.0.1 (openssl), points
  `webhook.certDir` at them, and writes the Mutating/ValidatingWebhook
  configurations itself with `clientConfig.url: https://127.0.0.1:PORT/...`
  (the paths of the module's config/components/webhook/manifests.yaml, for
  the batch/job and pod integrations and Kueue's own kinds).
- With internal certs off, v0.17.0 always reads its metrics certificate from
  the fixed path /etc/kueue/metrics/certs/tls.{crt,key} and exits if it is
  missing (whatever `metrics.bindAddress` says): the harness writes the
  serving pair there, as the training-operator's fixed certificate path.
- No leader election, no visibility server (VisibilityOnDemand off: it needs
  delegated authn and a fixed /visibility cert path), MultiKueue off.

Kueue runs as the admin (system:masters): its RBAC is not what is tested.
The pod webhooks act only on pods labelled `kueue.x-k8s.io/queue-name`
(with `manageJobsWithoutQueueName: false` Kueue leaves the others alone),
so the cluster's other pods never depend on Kueue being up.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from operators import OperatorNotBuilt, OperatorProcess, _free_port

KUEUE_VERSION = "0.17.0"
KUEUE_MODULE = "sigs.k8s.io/kueue"
API = "kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
POD_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
POD_GROUP_COUNT = "kueue.x-k8s.io/pod-group-total-count"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
ADMISSION_GATE = "kueue.x-k8s.io/admission"
TOPOLOGY_GATE = "kueue.x-k8s.io/topology"
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")
WEBHOOK_CONFIG = "troupe-test-kueue"


def default_kueue_dir() -> Path:
    override = os.environ.get("TROUPE_KUEUE_DIR")
    if override:
        return Path(override)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "troupe" / f"kueue-v{KUEUE_VERSION}"


@dataclass(frozen=True)
class KueueBuild:
    binary: Path
    crds: tuple[Path, ...]


def kueue_build(directory: Path | None = None) -> KueueBuild:
    d = directory or default_kueue_dir()
    binary = d / "bin" / "kueue"
    crds = tuple(sorted((d / "crds").glob("*.yaml")))
    if not binary.is_file() or not os.access(binary, os.X_OK) or not crds:
        raise OperatorNotBuilt(f"Kueue v{KUEUE_VERSION} is not built in {d}: run `make operators`")
    return KueueBuild(binary, crds)


def install_kueue_crds(cluster: Any, build: KueueBuild) -> None:
    """Kueue's CRDs as the module has them (config/components/crd/bases), all of
    them: the manager exits if one it watches is missing. Server-side: the
    Workload CRD is too large for the last-applied annotation."""
    for crd in build.crds:
        cluster.kubectl("apply", "--server-side", "-f", str(crd), timeout=120)
    cluster.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s", timeout=90)


def _openssl(*args: str, cwd: Path) -> None:
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed:\n{r.stderr}")


def make_certs(directory: Path) -> bytes:
    """A CA and a serving certificate for IP 127.0.0.1 (tls.crt, tls.key) in
    `directory`; returns the CA's PEM."""
    directory.mkdir(parents=True, exist_ok=True)
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=kueue-test-ca",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             cwd=directory)  # fmt: skip
    (directory / "tls.ext").write_text(
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n"
    )
    _openssl("req", "-new", *ec, "-keyout", "tls.key", "-out", "tls.csr", "-subj", "/CN=127.0.0.1", cwd=directory)
    _openssl("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
             "-out", "tls.crt", "-extfile", "tls.ext", cwd=directory)  # fmt: skip
    return (directory / "ca.crt").read_bytes()


# The webhooks of config/components/webhook/manifests.yaml that the batch/job and
# pod integrations and Kueue's own kinds use: (name, path, group, version, resources).
MUTATING = (
    ("mjob.kb.io", "/mutate-batch-v1-job", "batch", "v1", ["jobs"]),
    ("mpod.kb.io", "/mutate--v1-pod", "", "v1", ["pods"]),
    ("mworkload.kb.io", "/mutate-kueue-x-k8s-io-v1beta2-workload", "kueue.x-k8s.io", "v1beta2", ["workloads"]),
    ("mclusterqueue.kb.io", "/mutate-kueue-x-k8s-io-v1beta2-clusterqueue", "kueue.x-k8s.io", "v1beta2",
     ["clusterqueues"]),
    ("mresourceflavor.kb.io", "/mutate-kueue-x-k8s-io-v1beta2-resourceflavor", "kueue.x-k8s.io", "v1beta2",
     ["resourceflavors"]),
)  # fmt: skip
VALIDATING = (
    ("vjob.kb.io", "/validate-batch-v1-job", "batch", "v1", ["jobs"]),
    ("vpod.kb.io", "/validate--v1-pod", "", "v1", ["pods"]),
    ("vworkload.kb.io", "/validate-kueue-x-k8s-io-v1beta2-workload", "kueue.x-k8s.io", "v1beta2",
     ["workloads", "workloads/status"]),
    ("vclusterqueue.kb.io", "/validate-kueue-x-k8s-io-v1beta2-clusterqueue", "kueue.x-k8s.io", "v1beta2",
     ["clusterqueues"]),
    ("vresourceflavor.kb.io", "/validate-kueue-x-k8s-io-v1beta2-resourceflavor", "kueue.x-k8s.io", "v1beta2",
     ["resourceflavors"]),
    ("vcohort.kb.io", "/validate-kueue-x-k8s-io-v1beta2-cohort", "kueue.x-k8s.io", "v1beta2", ["cohorts"]),
)  # fmt: skip


def webhook_configurations(port: int, ca: bytes) -> list[dict[str, Any]]:
    def hooks(table: tuple[tuple[str, str, str, str, list[str]], ...], operations: list[str]) -> list[dict[str, Any]]:
        out = []
        for name, path, group, version, resources in table:
            hook: dict[str, Any] = {
                "name": name,
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "clientConfig": {"url": f"https://127.0.0.1:{port}{path}", "caBundle": base64.b64encode(ca).decode()},
                "rules": [
                    {"apiGroups": [group], "apiVersions": [version], "operations": operations, "resources": resources}
                ],
            }
            if resources == ["pods"]:  # upstream's namespace filter, and only pods Kueue manages
                hook["namespaceSelector"] = {
                    "matchExpressions": [
                        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}
                    ]
                }
                hook["objectSelector"] = {"matchExpressions": [{"key": QUEUE_LABEL, "operator": "Exists"}]}
            out.append(hook)
        return out

    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": WEBHOOK_CONFIG},
            "webhooks": hooks(MUTATING, ["CREATE"]),
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": WEBHOOK_CONFIG},
            "webhooks": hooks(VALIDATING, ["CREATE", "UPDATE"]),
        },
    ]


class Kueue(OperatorProcess):
    """Kueue's manager: the batch/job and pod integrations,
    `manageJobsWithoutQueueName: false`, its webhooks on a free loopback port."""

    name = "kueue"

    def __init__(self, build: KueueBuild, cluster: Any, workdir: Path, extra_config: dict[str, Any] | None = None):
        super().__init__(cluster.admin_kubeconfig, Path(workdir) / "kueue.log")
        self.build = build
        self.cluster = cluster
        self.workdir = Path(workdir)
        self.extra_config = extra_config or {}
        self.webhook_port = 0

    def config(self) -> dict[str, Any]:
        return {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": "kueue-system",
            "leaderElection": {"leaderElect": False},
            "webhook": {"host": "127.0.0.1", "port": self.webhook_port, "certDir": str(self.workdir / "kueue-certs")},
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.port}"},
            "internalCertManagement": {"enable": False},
            "manageJobsWithoutQueueName": False,
            "clientConnection": {"qps": 100, "burst": 200},
            "integrations": {"frameworks": ["batch/job", "pod"]},
            "featureGates": {"VisibilityOnDemand": False, "MultiKueue": False},
            **self.extra_config,
        }

    def command(self) -> list[str]:
        path = self.workdir / "kueue-config.yaml"
        path.write_text(json.dumps(self.config(), indent=1))
        return [
            str(self.build.binary),
            f"--config={path}",
            f"--kubeconfig={self.kubeconfig}",
            "--zap-log-level=2",
        ]

    def start(self, timeout: float = 60.0) -> Kueue:
        ca = make_certs(self.workdir / "kueue-certs")
        METRICS_CERT_DIR.mkdir(parents=True, exist_ok=True)
        for name in ("tls.key", "tls.crt"):
            shutil.copyfile(self.workdir / "kueue-certs" / name, METRICS_CERT_DIR / name)
        self.webhook_port = _free_port()
        super().start(timeout)  # the port for /readyz is chosen there, before command()
        items = webhook_configurations(self.webhook_port, ca)
        self.cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
        return self

    def stop(self) -> int | None:
        for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
            self.cluster.kubectl("delete", kind, WEBHOOK_CONFIG, "--ignore-not-found", check=False)
        return super().stop()


# ------------------------------------------------------------------ objects


def resource_flavor(name: str, node_labels: dict[str, str] | None = None, topology: str | None = None) -> dict:
    spec: dict[str, Any] = {}
    if node_labels:
        spec["nodeLabels"] = node_labels
    if topology:
        spec["topologyName"] = topology
    return {"apiVersion": API, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


def cluster_queue(name: str, flavor: str, cpu: str, preemption: dict[str, Any] | None = None) -> dict:
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory"],
                "flavors": [
                    {
                        "name": flavor,
                        "resources": [{"name": "cpu", "nominalQuota": cpu}, {"name": "memory", "nominalQuota": "1Ti"}],
                    }
                ],
            }
        ],
    }
    if preemption:
        spec["preemption"] = preemption
    return {"apiVersion": API, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def local_queue(ns: str, name: str, cluster_queue_name: str) -> dict:
    return {
        "apiVersion": API,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"clusterQueue": cluster_queue_name},
    }


def topology(name: str, levels: list[str]) -> dict:
    return {
        "apiVersion": API,
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {"levels": [{"nodeLabel": label} for label in levels]},
    }


def workload_priority_class(name: str, value: int) -> dict:
    return {"apiVersion": API, "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value}
