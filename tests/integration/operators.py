"""Real operators for the integration tests: KubeRay's ray-operator and
Kubeflow's training-operator, built from their Go modules by `make operators`
(hack/build-operators.sh), run as processes against a LocalCluster, and the
CRDs they and the gang schedulers they write for need.

    kuberay, training = kuberay_build(), training_operator_build()  # OperatorNotBuilt (says: make operators)
    install_operator_crds(cluster, kuberay, training)
    op = RayOperator(kuberay, cluster.admin_kubeconfig, tmp_path, "scheduler-plugins", ns).start()
    op = TrainingOperator(training, cluster, tmp_path, "troupe-scheduler", ns).start()
    ...
    op.stop()

What the operator needs from a control plane with no kubelet (see the
PITFALLS): its three CRDs (RayCluster, RayJob, RayService: the manager starts
all three controllers whatever it is asked to do, and each waits for its kind)
and, for the batch scheduler it is given, the PodGroup CRD it writes
(scheduling.x-k8s.io for scheduler-plugins, from the scheduler-plugins module
KubeRay requires; scheduling.volcano.sh for volcano, vendored in tests/crds/).
The training-operator also needs what its Deployment gives it: its webhook
server's certificate (it generates one into a Secret and waits, as for a
kubelet, until the file appears at a fixed path; the harness writes it there)
and the ValidatingWebhookConfiguration it injects the CA into (here one whose
rule matches nothing: the webhooks are not what is tested).
Each runs as the admin (system:masters): its RBAC is not what is tested.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import localcluster  # hack/, on sys.path via conftest.py
from troupe_process import stop_group

ROOT = Path(__file__).resolve().parents[2]
KUBERAY_VERSION = "1.5.0"
KUBERAY_CRD_FILES = ("ray.io_rayclusters.yaml", "ray.io_rayjobs.yaml", "ray.io_rayservices.yaml")
SCHEDULER_PLUGINS_CRD_FILE = "scheduling.x-k8s.io_podgroups.yaml"
VOLCANO_CRD = ROOT / "tests" / "crds" / "scheduling.volcano.sh_podgroups.yaml"

# What KubeRay v1.5.0 writes (controllers/ray/batchscheduler/...).
GANG_LABEL = "ray.io/gang-scheduling-enabled"  # scheduler-plugins: gang only when the RayCluster has it
SCHEDULER_PLUGINS_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
SCHEDULER_PLUGINS_SCHEDULER = "scheduler-plugins-scheduler"
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
VOLCANO_TASK_ANNOTATION = "volcano.sh/task-spec"
VOLCANO_SCHEDULER = "volcano"
SCHEDULER_PLUGINS_PG = "podgroups.scheduling.x-k8s.io"
VOLCANO_PG = "podgroups.scheduling.volcano.sh"
RAYCLUSTERS = "rayclusters.ray.io"
CLUSTER_LABEL = "ray.io/cluster"  # on every pod KubeRay makes for a RayCluster


# What the Kubeflow training-operator v1.8.1 writes with --gang-scheduler-name=<name>
# (pkg/controller.v1/common/job.go, control/podgroup_control.go).
PYTORCHJOBS = "pytorchjobs.kubeflow.org"
TRAINING_OPERATOR_VERSION = "1.8.1"
TRAINING_OPERATOR_CRD_FILES = ("kubeflow.org_pytorchjobs.yaml",)
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
# Its webhook certificate: generated into this Secret, read from this directory
# (pkg/cert/cert.go), injected into this ValidatingWebhookConfiguration.
TRAINING_WEBHOOK_SECRET = "training-operator-webhook-cert"
TRAINING_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")
TRAINING_WEBHOOK_CONFIG = "validator.training-operator.kubeflow.org"


class OperatorNotBuilt(FileNotFoundError):
    """An operator binary or CRD is missing; `make operators` builds them."""


def _cache_home() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")


def default_kuberay_dir() -> Path:
    """Where `make operators` puts ray-operator and its CRDs ($TROUPE_KUBERAY_DIR or the build cache)."""
    env = os.environ.get("TROUPE_KUBERAY_DIR", "")
    return Path(env) if env else _cache_home() / "troupe" / f"kuberay-v{KUBERAY_VERSION}"


@dataclass(frozen=True)
class KubeRayBuild:
    binary: Path
    crds: tuple[Path, ...]  # KubeRay's three CRDs
    scheduler_plugins_crd: Path


def kuberay_build(directory: Path | None = None) -> KubeRayBuild:
    """The built ray-operator and its CRDs, or OperatorNotBuilt saying how to build them."""
    d = Path(directory) if directory else default_kuberay_dir()
    binary = d / "bin" / "ray-operator"
    needed = [binary, *(d / "crds" / f for f in (*KUBERAY_CRD_FILES, SCHEDULER_PLUGINS_CRD_FILE))]
    missing = [p for p in needed if not (p.is_file() and (p != binary or os.access(p, os.X_OK)))]
    if missing:
        raise OperatorNotBuilt(
            f"KubeRay ray-operator v{KUBERAY_VERSION} is not built ({', '.join(map(str, missing))} missing): "
            f"run `make operators` (hack/build-operators.sh builds it from its Go module into the cache), "
            f"or point TROUPE_KUBERAY_DIR at a directory with bin/ray-operator and crds/"
        )
    return KubeRayBuild(
        binary=binary,
        crds=tuple(d / "crds" / f for f in KUBERAY_CRD_FILES),
        scheduler_plugins_crd=d / "crds" / SCHEDULER_PLUGINS_CRD_FILE,
    )


@dataclass(frozen=True)
class TrainingOperatorBuild:
    binary: Path
    crds: tuple[Path, ...]  # its PyTorchJob CRD


def default_training_operator_dir() -> Path:
    """Where `make operators` puts training-operator.v1 ($TROUPE_TRAINING_OPERATOR_DIR or the build cache)."""
    env = os.environ.get("TROUPE_TRAINING_OPERATOR_DIR", "")
    return Path(env) if env else _cache_home() / "troupe" / f"training-operator-v{TRAINING_OPERATOR_VERSION}"


def training_operator_build(directory: Path | None = None) -> TrainingOperatorBuild:
    """The built training-operator and its CRD, or OperatorNotBuilt saying how to build them."""
    d = Path(directory) if directory else default_training_operator_dir()
    binary = d / "bin" / "training-operator.v1"
    crds = tuple(d / "crds" / f for f in TRAINING_OPERATOR_CRD_FILES)
    missing = [p for p in (binary, *crds) if not (p.is_file() and (p != binary or os.access(p, os.X_OK)))]
    if missing:
        raise OperatorNotBuilt(
            f"Kubeflow training-operator v{TRAINING_OPERATOR_VERSION} is not built "
            f"({', '.join(map(str, missing))} missing): run `make operators` (hack/build-operators.sh builds it "
            f"from its Go module into the cache), or point TROUPE_TRAINING_OPERATOR_DIR at a directory with "
            f"bin/training-operator.v1 and crds/"
        )
    return TrainingOperatorBuild(binary=binary, crds=crds)


def install_operator_crds(
    cluster, kuberay: KubeRayBuild, training: TrainingOperatorBuild | None = None, volcano: bool = True
) -> None:
    """Apply KubeRay's CRDs, the scheduler-plugins PodGroup CRD, the training
    operator's PyTorchJob CRD and (``volcano``) Volcano's PodGroup CRD,
    server-side (KubeRay's exceed the last-applied annotation of a client-side
    apply), and wait until they are Established."""
    files = [
        *kuberay.crds,
        kuberay.scheduler_plugins_crd,
        *(training.crds if training else ()),
        *([VOLCANO_CRD] if volcano else []),
    ]
    args: list[str] = []
    for f in files:
        args += ["-f", str(f)]
    cluster.kubectl("apply", "--server-side", "--force-conflicts", *args, timeout=180)
    names = ["crd/rayclusters.ray.io", "crd/rayjobs.ray.io", "crd/rayservices.ray.io", f"crd/{SCHEDULER_PLUGINS_PG}"]
    if training:
        names.append(f"crd/{PYTORCHJOBS}")
    if volcano:
        names.append(f"crd/{VOLCANO_PG}")
    cluster.kubectl("wait", "--for=condition=Established", *names, "--timeout=90s", timeout=120)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class OperatorProcess:
    """An operator's manager as a subprocess (controller-runtime): its probe
    port on a free loopback port, its log in ``log_path``; ready when /readyz
    answers 200."""

    name = "operator"

    def __init__(self, kubeconfig: Path, log_path: Path) -> None:
        self.kubeconfig = Path(kubeconfig)
        self.log_path = log_path
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        return dict(os.environ, KUBECONFIG=str(self.kubeconfig))

    def while_starting(self) -> None:
        """Called while waiting for /readyz: what a kubelet would do meanwhile."""

    def start(self, timeout: float = 30.0) -> OperatorProcess:
        """Start it and return once /readyz answers 200 (RuntimeError with the log tail otherwise)."""
        self.port = _free_port()
        env = self.environment()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                # SIGKILLed if pytest dies, like the control plane (hack/localcluster.py)
                preexec_fn=localcluster._make_preexec(os.getpid()) if localcluster._LIBC is not None else None,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
            if self._get("/readyz") == 200:
                return self
            self.while_starting()
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{self.name} not ready after {timeout}s:\n{self.log_tail()}")

    def _get(self, path: str) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code
        except OSError:
            return 0

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> int | None:
        """SIGTERM (the manager shuts down its controllers), SIGKILL after 15 s."""
        return None if self.proc is None else stop_group(self.proc)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 60) -> str:
        text = self.log_text()
        return "\n".join(text.splitlines()[-lines:]) if text else "(no log)"


class RayOperator(OperatorProcess):
    """KubeRay's ray-operator: one batch scheduler, one watched namespace (so
    operators of several tests never reconcile each other's RayClusters), no
    leader election, no metrics server, console-encoded logs in ``workdir``."""

    name = "ray-operator"

    def __init__(
        self,
        build: KubeRayBuild,
        kubeconfig: Path,
        workdir: Path,
        batch_scheduler: str,
        watch_namespace: str,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        super().__init__(kubeconfig, Path(workdir) / f"ray-operator-{batch_scheduler}.log")
        self.build = build
        self.batch_scheduler = batch_scheduler
        self.watch_namespace = watch_namespace
        self.extra_args = tuple(extra_args)

    def command(self) -> list[str]:
        return [
            str(self.build.binary),
            f"--batch-scheduler={self.batch_scheduler}",
            f"--watch-namespace={self.watch_namespace}",
            "--enable-leader-election=false",
            "--metrics-addr=0",  # controller-runtime: "0" serves no metrics
            f"--health-probe-bind-address=127.0.0.1:{self.port}",
            "--log-stdout-encoder=console",
            *self.extra_args,
        ]


class TrainingOperator(OperatorProcess):
    """Kubeflow's training-operator: PyTorchJobs of one namespace (its cache and
    its webhook Secret there), ``--gang-scheduler-name`` as given, no leader
    election, no metrics server, the webhook server on a free port. Start it
    once at a time: its certificate directory is fixed."""

    name = "training-operator"

    def __init__(self, build: TrainingOperatorBuild, cluster, workdir: Path, gang_scheduler: str, namespace: str):
        super().__init__(cluster.admin_kubeconfig, Path(workdir) / f"training-operator-{gang_scheduler}.log")
        self.build = build
        self.cluster = cluster
        self.gang_scheduler = gang_scheduler
        self.namespace = namespace

    def command(self) -> list[str]:
        return [
            str(self.build.binary),
            f"--gang-scheduler-name={self.gang_scheduler}",
            f"--namespace={self.namespace}",
            "--enable-scheme=pytorchjob",
            "--metrics-bind-address=0",
            f"--health-probe-bind-address=127.0.0.1:{self.port}",
            f"--webhook-server-port={_free_port()}",
            "--zap-log-level=info",
        ]

    def environment(self) -> dict[str, str]:
        return dict(super().environment(), MY_POD_NAMESPACE=self.namespace)

    def start(self, timeout: float = 60.0) -> TrainingOperator:
        """What its Deployment's manifests make first: the (empty) webhook
        Secret and the webhook configuration; then start it, and put the
        certificate it generates where the Secret would be mounted."""
        shutil.rmtree(TRAINING_CERT_DIR, ignore_errors=True)
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": TRAINING_WEBHOOK_SECRET, "namespace": self.namespace},
        }
        webhook = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": TRAINING_WEBHOOK_CONFIG},
            "webhooks": [
                {
                    "name": "nothing.training-operator.troupe.test",
                    "admissionReviewVersions": ["v1"],
                    "sideEffects": "None",
                    "failurePolicy": "Ignore",
                    "clientConfig": {"url": "https://127.0.0.1:1/never"},
                    "rules": [
                        {
                            "apiGroups": ["troupe.test"],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["nothing"],
                        }
                    ],
                }
            ],
        }
        self.cluster.kubectl(
            "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [secret, webhook]})
        )
        super().start(timeout)
        return self

    def while_starting(self) -> None:
        if (TRAINING_CERT_DIR / "tls.crt").exists():
            return
        data = (self.cluster.get_json("secret", "-n", self.namespace, TRAINING_WEBHOOK_SECRET) or {}).get("data") or {}
        if data.get("tls.crt") and data.get("tls.key"):
            TRAINING_CERT_DIR.mkdir(parents=True, exist_ok=True)
            for key in ("tls.key", "tls.crt"):  # tls.crt last: its existence is what the operator waits for
                (TRAINING_CERT_DIR / key).write_bytes(base64.b64decode(data[key]))

    def stop(self) -> int | None:
        rc = super().stop()
        self.cluster.kubectl("delete", "validatingwebhookconfiguration", TRAINING_WEBHOOK_CONFIG, check=False)
        return rc


def raycluster(
    ns: str,
    name: str,
    workers: int = 3,
    cpu: str = "1",
    memory: str = "1Gi",
    labels: dict[str, str] | None = None,
    ray_version: str = "2.46.0",
) -> dict:
    """A RayCluster as KubeRay's samples write one: a head and one worker group
    of ``workers`` fixed replicas (no autoscaling), each pod's Ray container
    requesting (and limited to) ``cpu`` and ``memory``."""

    def template(container: str) -> dict:
        res = {"cpu": cpu, "memory": memory}
        return {
            "spec": {
                "containers": [
                    {
                        "name": container,
                        "image": f"rayproject/ray:{ray_version}",
                        "resources": {"requests": dict(res), "limits": dict(res)},
                    }
                ]
            }
        }

    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "namespace": ns, "labels": dict(labels or {})},
        "spec": {
            "rayVersion": ray_version,
            "headGroupSpec": {"rayStartParams": {}, "template": template("ray-head")},
            "workerGroupSpecs": [
                {
                    "groupName": "workers",
                    "replicas": workers,
                    "minReplicas": workers,
                    "maxReplicas": workers,
                    "rayStartParams": {},
                    "template": template("ray-worker"),
                }
            ],
        },
    }


def pytorchjob(ns: str, name: str, workers: int = 3, cpu: str = "1", memory: str = "1Gi") -> dict:
    """A PyTorchJob as the training-operator's examples/pytorch/simple.yaml writes one: a Master and
    ``workers`` Workers, each container requesting (and limited to) ``cpu``
    and ``memory``; the operator adds its gang PodGroup, label and scheduler."""

    def replica(replicas: int) -> dict:
        res = {"cpu": cpu, "memory": memory}
        return {
            "replicas": replicas,
            "restartPolicy": "OnFailure",
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "pytorch",
                            "image": "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727",
                            "command": ["python3", "/opt/pytorch-mnist/mnist.py", "--epochs=1"],
                            "resources": {"requests": dict(res), "limits": dict(res)},
                        }
                    ]
                }
            },
        }

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(workers)}},
    }
