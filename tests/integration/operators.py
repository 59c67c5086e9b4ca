"""Real operators for the integration tests: KubeRay's ray-operator, built from
its Go module by `make operators` (hack/build-operators.sh), run as a process
against a LocalCluster, and the CRDs it and the gang schedulers it writes for
need.

    kuberay = kuberay_build()          # OperatorNotBuilt (says: make operators) if missing
    install_operator_crds(cluster, kuberay)
    op = RayOperator(kuberay, cluster.admin_kubeconfig, tmp_path, "scheduler-plugins", ns).start()
    ...
    op.stop()

What the operator needs from a control plane with no kubelet (see the
PITFALLS): its three CRDs (RayCluster, RayJob, RayService: the manager starts
all three controllers whatever it is asked to do, and each waits for its kind)
and, for the batch scheduler it is given, the PodGroup CRD it writes
(scheduling.x-k8s.io for scheduler-plugins, from the scheduler-plugins module
KubeRay requires; scheduling.volcano.sh for volcano, vendored in tests/crds/).
It runs as the admin (system:masters): its RBAC is not what is tested.
"""

from __future__ import annotations

import os
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


def install_operator_crds(cluster, kuberay: KubeRayBuild, volcano: bool = True) -> None:
    """Apply KubeRay's CRDs, the scheduler-plugins PodGroup CRD and (``volcano``)
    Volcano's PodGroup CRD, server-side (KubeRay's exceed the last-applied
    annotation of a client-side apply), and wait until they are Established."""
    files = [*kuberay.crds, kuberay.scheduler_plugins_crd, *([VOLCANO_CRD] if volcano else [])]
    args: list[str] = []
    for f in files:
        args += ["-f", str(f)]
    cluster.kubectl("apply", "--server-side", "--force-conflicts", *args, timeout=180)
    names = ["crd/rayclusters.ray.io", "crd/rayjobs.ray.io", "crd/rayservices.ray.io", f"crd/{SCHEDULER_PLUGINS_PG}"]
    if volcano:
        names.append(f"crd/{VOLCANO_PG}")
    cluster.kubectl("wait", "--for=condition=Established", *names, "--timeout=90s", timeout=120)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RayOperator:
    """KubeRay's ray-operator as a subprocess: one batch scheduler, one watched
    namespace (so operators of several tests never reconcile each other's
    RayClusters), no leader election, no metrics server, its probe port on a
    free loopback port, console-encoded logs in ``workdir``."""

    def __init__(
        self,
        build: KubeRayBuild,
        kubeconfig: Path,
        workdir: Path,
        batch_scheduler: str,
        watch_namespace: str,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.build = build
        self.kubeconfig = Path(kubeconfig)
        self.batch_scheduler = batch_scheduler
        self.watch_namespace = watch_namespace
        self.extra_args = tuple(extra_args)
        self.log_path = Path(workdir) / f"ray-operator-{batch_scheduler}.log"
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

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

    def start(self, timeout: float = 30.0) -> RayOperator:
        """Start it and return once /readyz answers 200 (RuntimeError with the log tail otherwise)."""
        self.port = _free_port()
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig))
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
                raise RuntimeError(f"ray-operator exited with {self.proc.returncode}:\n{self.log_tail()}")
            if self._get("/readyz") == 200:
                return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"ray-operator not ready after {timeout}s:\n{self.log_tail()}")

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
