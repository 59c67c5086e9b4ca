#!/usr/bin/env python3
"""A throwaway Kubernetes control plane (etcd + kube-apiserver +
kube-controller-manager) on loopback.

Used by the integration tests and the demo; also a CLI::

    python hack/localcluster.py up [--workdir DIR] [--workload-api] [--k8s-version 1.36.3]

What you get, and what you do not:

* etcd and kube-apiserver on free 127.0.0.1 ports (kept across
  ``restart_apiserver()`` / ``restart_etcd()``, which keep the PKI, tokens,
  kubeconfigs and etcd data), state in a temporary
  directory (removed by ``stop()`` unless ``keep=True``; a ``workdir`` you pass
  is kept by default and reused on the next start).
* TLS with a CA generated here (``ca.crt``); kubeconfigs embed the CA.
* Two token identities: the admin (group ``system:masters``) and the
  scheduler, authenticated exactly as its ServiceAccount token would be
  (user ``system:serviceaccount:troupe-system:troupe-scheduler``), so the RBAC
  in ``manifests/`` applies unchanged. Authorization is ``Node,RBAC``.
* kube-controller-manager (unless ``controller_manager=False``) with only the
  Job, garbage-collector and namespace controllers: Jobs make pods, owned
  objects go with their owner, deleted namespaces are emptied and go away.
  No other controller runs (no pod GC, node lifecycle, ServiceAccount or
  ResourceClaim controller), and no kubelet: nodes are plain objects (create
  them with ``status.capacity``/``allocatable``), bound pods go away only with
  ``--grace-period=0 --force`` (so a namespace with bound pods stays
  Terminating until they are force-deleted). Without the controller manager
  namespaces never finish deleting and nothing garbage-collects.
* Admission plugins disabled (everything else, e.g. ``Priority``, stays on):
  ``ServiceAccount`` (no token controller), ``TaintNodesByCondition`` (it
  taints every new Node ``node.kubernetes.io/not-ready:NoSchedule`` and only
  the node lifecycle controller removes that), ``PodGroupProtection`` (its
  finalizer is removed only by the controller, if the native Workload API is
  switched on via ``workload_api`` or ``extra_apiserver_args``).
* ``workload_api=True``: the upstream native Workload API (``scheduling.k8s.io``
  Workloads and PodGroups, pods' ``spec.schedulingGroup``) is served, with the
  feature gates and ``--runtime-config`` of that kube-apiserver version
  (``WORKLOAD_API``): on 1.37 v1beta1 (preferred) and v1alpha3, every PodGroup
  field (topology constraints, resource claims, disruption mode, priority,
  preemption policy), and kube-controller-manager's Job controller makes a
  Workload and a PodGroup for every Job it starts (``WorkloadWithJob``); on
  1.36 v1alpha2 (``k8s_version="1.36.3"``). Off by default: the default cluster
  does not serve the native API.
* ``k8s_version``: the kube-apiserver release, ``K8S_VERSION`` (1.37.2, the
  default) or ``K8S_136_VERSION`` (1.36.3: only its kube-apiserver is built, by
  ``make controlplane`` too; kubectl and etcd stay the 1.37.2/3.6.16 ones, and
  no kube-controller-manager runs: a 1.37 one must not talk to an older
  kube-apiserver). ``apiserver_path`` points at another kube-apiserver binary.

Processes run in their own session, get SIGKILL when the Python process dies
(``PR_SET_PDEATHSIG``, for clusters started from the main thread), and are
stopped by an ``atexit`` hook.
"""

from __future__ import annotations

import argparse
import atexit
import base64
import ctypes
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

K8S_VERSION = "1.37.2"
# Only kube-apiserver is built for this release (hack/k8s-1.36): it serves
# scheduling.k8s.io/v1alpha2, the Workload API version 1.37 dropped.
K8S_136_VERSION = "1.36.3"
# kube-apiserver and kube-scheduler of the next release's beta (hack/k8s-1.38,
# built with Go 1.27): CompositePodGroups at scheduling.k8s.io/v1beta1.
K8S_138_VERSION = "1.38.0-beta.0"
K8S_VERSIONS = (K8S_VERSION, K8S_136_VERSION, K8S_138_VERSION)
ETCD_VERSION = "3.6.16"

SCHEDULER_NAMESPACE = "troupe-system"
SCHEDULER_SERVICE_ACCOUNT = "troupe-scheduler"
SCHEDULER_USER = f"system:serviceaccount:{SCHEDULER_NAMESPACE}:{SCHEDULER_SERVICE_ACCOUNT}"
SCHEDULER_GROUPS = (
    "system:serviceaccounts",
    f"system:serviceaccounts:{SCHEDULER_NAMESPACE}",
    "system:authenticated",
)
ADMIN_USER = "troupe-admin"
ADMIN_GROUPS = ("system:masters", "system:authenticated")

SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
DISABLED_ADMISSION_PLUGINS = ("ServiceAccount", "TaintNodesByCondition", "PodGroupProtection")
# Canonical names (1.37 also takes the old aliases job/garbagecollector/namespace).
# Not podgc: it would delete pods bound to the hand-made nodes tests remove.
CONTROLLERS = ("job-controller", "garbage-collector-controller", "namespace-controller")
# Per kube-apiserver minor version: naming a plugin that version does not know
# makes it refuse to start. (1.36 has the same three; it also has
# PodGroupWorkloadExists, which stays on: a v1alpha2 PodGroup's
# podGroupTemplateRef must name an existing Workload and template.)
DISABLED_ADMISSION_PLUGINS_BY_MINOR = {
    "1.38": DISABLED_ADMISSION_PLUGINS,
    "1.37": DISABLED_ADMISSION_PLUGINS,
    "1.36": DISABLED_ADMISSION_PLUGINS,
}


class WorkloadAPI:
    """What turns the native Workload API on for one kube-apiserver minor version."""

    def __init__(
        self,
        versions: tuple[str, ...],
        feature_gates: tuple[str, ...],
        controller_manager_gates: tuple[str, ...] = (),
    ) -> None:
        self.versions = versions  # scheduling.k8s.io versions served, preferred first
        self.feature_gates = feature_gates
        self.runtime_config = tuple(f"scheduling.k8s.io/{v}=true" for v in versions)
        self.controller_manager_gates = controller_manager_gates

    def __repr__(self) -> str:
        return f"WorkloadAPI(versions={self.versions}, feature_gates={self.feature_gates})"


# Read off pkg/features/kube_features.go, pkg/registry/scheduling/*/strategy.go,
# pkg/api/pod/util.go and plugin/pkg/admission/priority of each release:
# a field whose gate is off is dropped on create (or forbidden by declarative
# validation), without an error in some cases, so every gate a field needs is on.
WORKLOAD_API = {
    # GenericWorkload (beta, off by default): serves workloads/podgroups and keeps
    # pods' spec.schedulingGroup. TopologyAwareWorkloadScheduling:
    # schedulingConstraints.topology. DRAWorkloadResourceClaims: resourceClaims.
    # PodGroupPreemptionPolicy: preemptionPolicy (defaulted to
    # PreemptLowerPriority, then the Priority admission plugin refuses a value
    # other than the PriorityClass's: a Never class needs it spelled out, and the
    # Job controller cannot make the PodGroup of a Job whose pods use one).
    # CompositePodGroup:
    # parentCompositePodGroupName and v1alpha3 compositepodgroups.
    # WorkloadWithJob: Job spec.scheduling (kube-apiserver) and the Job
    # controller's Workload/PodGroup (kube-controller-manager). disruptionMode,
    # priorityClassName and priority need only GenericWorkload.
    "1.37": WorkloadAPI(
        versions=("v1beta1", "v1alpha3"),
        feature_gates=(
            "GenericWorkload",
            "TopologyAwareWorkloadScheduling",
            "DRAWorkloadResourceClaims",
            "PodGroupPreemptionPolicy",
            "CompositePodGroup",
            "WorkloadWithJob",
        ),
        controller_manager_gates=("GenericWorkload", "WorkloadWithJob"),
    ),
    # 1.38 (v1.38.0-beta.0): CompositePodGroup and TopologyAwareWorkloadScheduling
    # are beta (still off by default) and compositepodgroups are served at v1beta1
    # too; PodGroups' preemptionPolicy needs no gate of its own any more.
    # (Only kube-apiserver and kube-scheduler are built: no Job controller.)
    "1.38": WorkloadAPI(
        versions=("v1beta1", "v1alpha3"),
        feature_gates=(
            "GenericWorkload",
            "TopologyAwareWorkloadScheduling",
            "DRAWorkloadResourceClaims",
            "CompositePodGroup",
        ),
    ),
    # GenericWorkload (alpha): workloads/podgroups, pods' spec.schedulingGroup.
    # WorkloadAwarePreemption (needs GangScheduling): disruptionMode,
    # priorityClassName and priority. TopologyAwareWorkloadScheduling,
    # DRAWorkloadResourceClaims as in 1.37. (1.36 Jobs have no spec.scheduling.)
    "1.36": WorkloadAPI(
        versions=("v1alpha2",),
        feature_gates=(
            "GenericWorkload",
            "GangScheduling",
            "WorkloadAwarePreemption",
            "TopologyAwareWorkloadScheduling",
            "DRAWorkloadResourceClaims",
        ),
    ),
}


def minor_of(version: str) -> str:
    """``"1.37.2"`` -> ``"1.37"``."""
    return ".".join(version.lstrip("v").split(".")[:2])


class ControlPlaneNotBuilt(FileNotFoundError):
    """A control-plane binary is missing; `make controlplane` builds them."""


class ClusterStartError(RuntimeError):
    """A component did not become ready; the message has the log tail."""


class KubectlError(subprocess.CalledProcessError):
    """A kubectl call failed; str() includes the command, stdout and stderr."""

    def __str__(self) -> str:
        cmd = " ".join(self.cmd[3:]) if isinstance(self.cmd, list) else self.cmd
        return (
            f"kubectl {cmd} exited with {self.returncode}\n"
            f"--- stderr ---\n{(self.stderr or '').strip()}\n"
            f"--- stdout ---\n{(self.stdout or '').strip()}"
        )


def _cache_home() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")


# The environment variable that overrides each version's binary directory.
_K8S_BIN_DIR_ENV = {
    K8S_VERSION: "TROUPE_K8S_BIN_DIR",
    K8S_136_VERSION: "TROUPE_K8S_136_BIN_DIR",
    K8S_138_VERSION: "TROUPE_K8S_138_BIN_DIR",
}


def default_k8s_bin_dir(version: str = K8S_VERSION) -> Path:
    """Where `make controlplane` puts the binaries of Kubernetes ``version``
    ($TROUPE_K8S_BIN_DIR, $TROUPE_K8S_136_BIN_DIR or the build cache)."""
    env = os.environ.get(_K8S_BIN_DIR_ENV.get(version, ""), "")
    return Path(env) if env else _cache_home() / "troupe" / f"k8s-v{version}" / "bin"


def default_etcd_bin_dir() -> Path:
    env = os.environ.get("TROUPE_ETCD_BIN_DIR")
    return Path(env) if env else _cache_home() / "troupe" / f"etcd-v{ETCD_VERSION}" / "bin"


def find_binary(directory: Path, name: str) -> Path:
    """The executable ``directory/name``, or ControlPlaneNotBuilt saying how to build it."""
    path = Path(directory) / name
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise ControlPlaneNotBuilt(
            f"{name} not found at {path}: run `make controlplane` to build the control plane "
            f"(Kubernetes v{K8S_VERSION}, etcd v{ETCD_VERSION}, kube-apiserver v{K8S_136_VERSION}, kube-apiserver "
            f"and kube-scheduler v{K8S_138_VERSION}), or point TROUPE_K8S_BIN_DIR / TROUPE_K8S_136_BIN_DIR / "
            "TROUPE_K8S_138_BIN_DIR / TROUPE_ETCD_BIN_DIR at directories that contain it"
        )
    return path


# --- child processes die with us ------------------------------------------------

_PR_SET_PDEATHSIG = 1
try:
    _LIBC = ctypes.CDLL(None, use_errno=True)  # loaded before any fork
    _LIBC.prctl  # noqa: B018 - probe
except (OSError, AttributeError):  # not Linux
    _LIBC = None


def _make_preexec(parent_pid: int):
    def preexec() -> None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


_LIVE: set[LocalCluster] = set()
_LIVE_LOCK = threading.Lock()


@atexit.register
def _stop_all() -> None:
    with _LIVE_LOCK:
        clusters = list(_LIVE)
    for c in clusters:
        try:
            c.stop()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


# --- helpers ----------------------------------------------------------------------


_WORKDIR_PREFIX = "troupe-cluster-"


def _sweep_stale_workdirs() -> None:
    """Remove temp workdirs of earlier clusters whose owning process is gone
    (a SIGKILLed test run cannot clean up; etcd preallocates 64 MB of WAL)."""
    for d in Path(tempfile.gettempdir()).glob(_WORKDIR_PREFIX + "*"):
        try:
            pid = int((d / "owner.pid").read_text())
        except (OSError, ValueError):
            continue
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
        except PermissionError:
            pass


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, lines: int = 40) -> str:
    try:
        data = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {path})"
    return "\n".join(data[-lines:])


def _binary_version(path: Path) -> str:
    """``kube-apiserver --version`` of ``path``: ``"1.37.2"``."""
    r = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=30)
    for word in (r.stdout + r.stderr).split():
        if word.startswith("v") and word[1:2].isdigit():
            return word[1:]
    raise ControlPlaneNotBuilt(f"{path} --version did not report a version: {(r.stdout + r.stderr).strip()!r}")


def _openssl(*args: str, cwd: Path) -> None:
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if r.returncode:
        raise ClusterStartError(f"openssl {' '.join(args)} failed:\n{r.stderr}")


def _kubeconfig(server: str, ca_pem: bytes, user: str, token: str) -> str:
    ca = base64.b64encode(ca_pem).decode()
    return (
        "apiVersion: v1\n"
        "kind: Config\n"
        "clusters:\n"
        "- name: troupe-local\n"
        "  cluster:\n"
        f"    server: {server}\n"
        f"    certificate-authority-data: {ca}\n"
        "users:\n"
        f"- name: {user}\n"
        "  user:\n"
        f"    token: {token}\n"
        "contexts:\n"
        f"- name: {user}@troupe-local\n"
        "  context:\n"
        "    cluster: troupe-local\n"
        f"    user: {user}\n"
        f"current-context: {user}@troupe-local\n"
    )


class LocalCluster:
    """etcd + kube-apiserver (+ kube-controller-manager) on loopback; see the module docstring."""

    def __init__(
        self,
        k8s_bin_dir: Path | None = None,
        etcd_bin_dir: Path | None = None,
        workdir: Path | None = None,
        extra_apiserver_args: Sequence[str] = (),
        *,
        keep: bool | None = None,
        durable: bool = False,
        controller_manager: bool | None = None,
        workload_api: bool = False,
        k8s_version: str | None = None,
        apiserver_path: Path | None = None,
    ) -> None:
        """``durable``: etcd fsyncs its log (no ``--unsafe-no-fsync``). Needed
        where etcd is SIGKILLed (``restart_etcd(graceful=False)``): without
        fsync, etcd may lose writes it had acknowledged, which a real etcd
        never does.

        ``controller_manager=False``: no kube-controller-manager (its informers
        and GC graph cost CPU and API requests that benchmarks should not pay).
        The default is on with a v``K8S_VERSION`` kube-apiserver, off with an
        older one (True there is a ValueError: kube-controller-manager must not
        be newer than kube-apiserver).

        ``workload_api``: serve the native Workload API (``WORKLOAD_API`` of
        the kube-apiserver's minor version: feature gates and runtime-config on
        kube-apiserver, the Job controller's gates on kube-controller-manager).

        ``k8s_version``: the kube-apiserver release (one of ``K8S_VERSIONS``;
        default ``K8S_VERSION``), taken from ``default_k8s_bin_dir(k8s_version)``;
        kubectl, kube-controller-manager and etcd stay the ``k8s_bin_dir`` /
        ``etcd_bin_dir`` ones. ``apiserver_path``: that kube-apiserver binary
        instead (its version is asked with ``--version`` unless ``k8s_version``
        says it)."""
        k8s_bin_dir = Path(k8s_bin_dir) if k8s_bin_dir else default_k8s_bin_dir()
        etcd_bin_dir = Path(etcd_bin_dir) if etcd_bin_dir else default_etcd_bin_dir()
        if apiserver_path is not None:
            self.apiserver_path = Path(apiserver_path)
            if not (self.apiserver_path.is_file() and os.access(self.apiserver_path, os.X_OK)):
                raise ControlPlaneNotBuilt(f"kube-apiserver not found at {self.apiserver_path}")
            k8s_version = k8s_version or _binary_version(self.apiserver_path)
        else:
            k8s_version = k8s_version or K8S_VERSION
            if k8s_version == K8S_VERSION:
                self.apiserver_path = find_binary(k8s_bin_dir, "kube-apiserver")
            else:
                self.apiserver_path = find_binary(default_k8s_bin_dir(k8s_version), "kube-apiserver")
        self.k8s_version = k8s_version.lstrip("v")
        minor = minor_of(self.k8s_version)
        if minor not in DISABLED_ADMISSION_PLUGINS_BY_MINOR:
            known = ", ".join(sorted(DISABLED_ADMISSION_PLUGINS_BY_MINOR))
            raise ValueError(f"kube-apiserver v{self.k8s_version}: unsupported version (known: {known})")
        self.disabled_admission_plugins = DISABLED_ADMISSION_PLUGINS_BY_MINOR[minor]
        self.workload_api = WORKLOAD_API[minor] if workload_api else None
        same_minor = minor == minor_of(K8S_VERSION)
        if controller_manager is None:
            controller_manager = same_minor
        elif controller_manager and not same_minor:
            raise ValueError(
                f"kube-controller-manager v{K8S_VERSION} against kube-apiserver v{self.k8s_version}: "
                "a controller manager newer than its apiserver is unsupported; pass controller_manager=False"
            )
        self.kubectl_path = find_binary(k8s_bin_dir, "kubectl")
        self.etcd_path = find_binary(etcd_bin_dir, "etcd")
        self.controller_manager = controller_manager
        self.controller_manager_path = (
            find_binary(k8s_bin_dir, "kube-controller-manager") if controller_manager else None
        )
        self.k8s_bin_dir = k8s_bin_dir
        self.etcd_bin_dir = etcd_bin_dir
        self.extra_apiserver_args = list(extra_apiserver_args)
        self.durable = durable
        self._own_workdir = workdir is None
        self.keep = (not self._own_workdir) if keep is None else keep
        if workdir is None:
            _sweep_stale_workdirs()
            self.workdir = Path(tempfile.mkdtemp(prefix=_WORKDIR_PREFIX))
            (self.workdir / "owner.pid").write_text(str(os.getpid()))
        else:
            self.workdir = Path(workdir).resolve()
        self.logs_dir = self.workdir / "logs"
        self.pki_dir = self.workdir / "pki"
        self.ca_path = self.pki_dir / "ca.crt"
        self.admin_kubeconfig = self.workdir / "admin.kubeconfig"
        self.scheduler_kubeconfig = self.workdir / "scheduler.kubeconfig"
        self.apiserver_log = self.logs_dir / "kube-apiserver.log"
        self.etcd_log = self.logs_dir / "etcd.log"
        self.controller_manager_log = self.logs_dir / "kube-controller-manager.log"
        self.server = ""
        self.etcd_url = ""
        self.admin_token = ""
        self.scheduler_token = ""
        self.startup_seconds: float | None = None
        self._etcd: subprocess.Popen | None = None
        self._apiserver: subprocess.Popen | None = None
        self._controller_manager: subprocess.Popen | None = None
        self._stopped = False
        # Ports picked on the first start and kept across restarts, so the
        # kubeconfigs (server URL) and the apiserver's --etcd-servers stay valid.
        self._apiserver_port = 0
        self._etcd_ports: tuple[int, int] | None = None
        self._controller_manager_port = 0  # a fresh one per start: no kubeconfig points at it

    # -- lifecycle ---------------------------------------------------------------

    def start(self, timeout: float = 60) -> LocalCluster:
        """Start etcd, kube-apiserver and (unless disabled) kube-controller-manager;
        return once kube-apiserver's /readyz is ok, the bootstrap objects
        (default namespace, RBAC roles, system priority classes) exist and
        kube-controller-manager reports its controllers healthy. Raises
        ClusterStartError with the log tail otherwise."""
        if self._apiserver is not None:
            return self
        t0 = time.monotonic()
        deadline = t0 + timeout
        self._stopped = False
        for d in (self.workdir, self.logs_dir, self.pki_dir):
            d.mkdir(parents=True, exist_ok=True)
        with _LIVE_LOCK:
            _LIVE.add(self)
        try:
            self._write_pki()
            self._write_tokens()
            self._start_etcd(deadline)
            self._start_apiserver(deadline)
            self._write_kubeconfigs()
            self._wait_bootstrapped(deadline)
            if self.controller_manager:
                self._start_controller_manager(deadline)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def stop(self) -> None:
        """Kill kube-controller-manager, kube-apiserver and etcd (their process
        groups, in that order) and remove the workdir unless ``keep``. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        for attr in ("_controller_manager", "_apiserver", "_etcd"):
            proc = getattr(self, attr)
            if proc is not None:
                self._kill(proc)
                setattr(self, attr, None)
        with _LIVE_LOCK:
            _LIVE.discard(self)
        if not self.keep:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def restart_apiserver(self, down: float = 0, timeout: float = 60, graceful: bool = True) -> float:
        """Stop kube-apiserver (SIGTERM, or SIGKILL with ``graceful=False``), stay
        down ``down`` seconds, start it again on the same port with the same
        PKI, tokens and etcd, and wait for /readyz. kube-controller-manager
        keeps running and reconnects. Returns the seconds it was unreachable
        (stop to ready)."""
        if self._apiserver is None:
            raise RuntimeError("kube-apiserver is not running")
        t0 = time.monotonic()
        self._kill(self._apiserver, grace=5.0 if graceful else 0.0)
        self._apiserver = None
        time.sleep(down)
        self._start_apiserver(time.monotonic() + timeout)
        return time.monotonic() - t0

    def restart_etcd(self, down: float = 0, timeout: float = 60, graceful: bool = True) -> float:
        """Stop etcd (SIGTERM, or SIGKILL with ``graceful=False``), stay down
        ``down`` seconds, start it again on the same ports with the same data
        dir, and wait until it is healthy and kube-apiserver's /readyz is ok
        again. Returns the seconds etcd was away (stop to apiserver ready)."""
        if self._etcd is None:
            raise RuntimeError("etcd is not running")
        t0 = time.monotonic()
        self._kill(self._etcd, grace=5.0 if graceful else 0.0)
        self._etcd = None
        time.sleep(down)
        deadline = time.monotonic() + timeout
        self._start_etcd(deadline)
        self.wait_ready(deadline - time.monotonic())
        return time.monotonic() - t0

    def wait_ready(self, timeout: float = 60) -> None:
        """Wait until kube-apiserver answers /readyz with 200 (ClusterStartError otherwise)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._get("/readyz")[0] == 200:
                return
            time.sleep(0.1)
        raise ClusterStartError(
            f"kube-apiserver not ready after {timeout:.0f}s; last /readyz: {self._last_readyz}\n"
            f"tail of {self.apiserver_log}:\n{_tail(self.apiserver_log)}"
        )

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        extra = f", k8s_version={self.k8s_version!r}" if self.k8s_version != K8S_VERSION else ""
        extra += ", workload_api=True" if self.workload_api is not None else ""
        return f"LocalCluster(server={self.server!r}, workdir={str(self.workdir)!r}{extra})"

    # -- kubectl -----------------------------------------------------------------

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        as_scheduler: bool = False,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        """Run the built kubectl as the admin (or the scheduler identity)."""
        kubeconfig = self.scheduler_kubeconfig if as_scheduler else self.admin_kubeconfig
        cmd = [
            str(self.kubectl_path),
            f"--kubeconfig={kubeconfig}",
            f"--cache-dir={self.workdir / 'kubectl-cache'}",
            *args,
        ]
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        r = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout, env=env)
        if check and r.returncode != 0:
            raise KubectlError(r.returncode, cmd, r.stdout, r.stderr)
        return r

    def apply_yaml(self, text: str) -> None:
        """``kubectl apply -f -`` as the admin."""
        self.kubectl("apply", "-f", "-", input=text)

    def get_json(self, *args: str, as_scheduler: bool = False) -> dict:
        """``kubectl get ARGS -o json``, parsed."""
        return json.loads(self.kubectl("get", *args, "-o", "json", as_scheduler=as_scheduler).stdout)

    # -- internals ---------------------------------------------------------------

    def _popen(self, cmd: list[str], log: Path) -> subprocess.Popen:
        logf = open(log, "ab")  # noqa: SIM115 - the child writes to it; closed after Popen
        try:
            preexec = None
            if _LIBC is not None and threading.current_thread() is threading.main_thread():
                # PDEATHSIG fires when the forking *thread* exits, so only from the main thread.
                preexec = _make_preexec(os.getpid())
            return subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                start_new_session=True,
                preexec_fn=preexec,
            )
        finally:
            logf.close()

    @staticmethod
    def _kill(proc: subprocess.Popen, grace: float = 5.0) -> None:
        def signal_group(sig: int) -> None:
            try:
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

        if proc.poll() is None and grace > 0:  # grace 0: SIGKILL at once (a crash)
            signal_group(signal.SIGTERM)
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                pass
        signal_group(signal.SIGKILL)  # also anything left in the group
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            pass

    def _write_pki(self) -> None:
        p = self.pki_dir
        if not (p / "ca.crt").exists() or not (p / "ca.key").exists():
            _openssl(
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "3650",
                "-subj",
                "/CN=troupe-localcluster-ca",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
                "-addext",
                "subjectKeyIdentifier=hash",
                cwd=p,
            )
            for f in ("apiserver.crt", "apiserver.key"):
                (p / f).unlink(missing_ok=True)
        if not (p / "apiserver.crt").exists() or not (p / "apiserver.key").exists():
            (p / "apiserver.ext").write_text(
                "basicConstraints=CA:FALSE\n"
                "keyUsage=critical,digitalSignature,keyEncipherment\n"
                "extendedKeyUsage=serverAuth\n"
                "subjectKeyIdentifier=hash\n"
                "authorityKeyIdentifier=keyid,issuer\n"
                "subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,"
                "DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\n"
            )
            _openssl(
                "req",
                "-new",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                "apiserver.key",
                "-out",
                "apiserver.csr",
                "-subj",
                "/CN=kube-apiserver",
                cwd=p,
            )
            _openssl(
                "x509",
                "-req",
                "-in",
                "apiserver.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "3650",
                "-out",
                "apiserver.crt",
                "-extfile",
                "apiserver.ext",
                cwd=p,
            )
        if not (p / "sa.key").exists():
            _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "sa.key", cwd=p)

    def _write_tokens(self) -> None:
        path = self.pki_dir / "tokens.csv"
        tokens: dict[str, str] = {}
        if path.exists():
            for line in path.read_text().splitlines():
                parts = line.split(",", 3)
                if len(parts) >= 2:
                    tokens[parts[1]] = parts[0]
        self.admin_token = tokens.get(ADMIN_USER) or secrets.token_hex(24)
        self.scheduler_token = tokens.get(SCHEDULER_USER) or secrets.token_hex(24)
        path.write_text(
            f'{self.admin_token},{ADMIN_USER},{ADMIN_USER},"{",".join(ADMIN_GROUPS)}"\n'
            f'{self.scheduler_token},{SCHEDULER_USER},troupe-scheduler-uid,"{",".join(SCHEDULER_GROUPS)}"\n'
        )
        path.chmod(0o600)

    def _start_etcd(self, deadline: float, attempts: int = 3) -> None:
        for attempt in range(attempts):
            client, peer = self._etcd_ports or (_free_port(), _free_port())
            self.etcd_url = f"http://127.0.0.1:{client}"
            cmd = [
                str(self.etcd_path),
                "--name=troupe",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=troupe=http://127.0.0.1:{peer}",
                "--log-level=warn",
            ]
            if not self.durable:
                cmd.append("--unsafe-no-fsync")  # throwaway data; fsync dominates write latency otherwise
            self._etcd = self._popen(cmd, self.etcd_log)
            while time.monotonic() < deadline:
                if self._etcd.poll() is not None:
                    break
                try:
                    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
                        f"{self.etcd_url}/health", timeout=2
                    ) as r:
                        if json.load(r).get("health") == "true":
                            self._etcd_ports = (client, peer)
                            return
                except (OSError, ValueError):
                    pass
                time.sleep(0.05)
            log = _tail(self.etcd_log)
            self._kill(self._etcd)
            self._etcd = None
            if "address already in use" in log and attempt + 1 < attempts and time.monotonic() < deadline:
                time.sleep(0.5)  # a kept port may still be held by the old process for a moment
                continue
            raise ClusterStartError(f"etcd did not become healthy; tail of {self.etcd_log}:\n{log}")

    def _apiserver_cmd(self, port: int) -> list[str]:
        p = self.pki_dir
        extra = list(self.extra_apiserver_args)
        workload: list[str] = []
        if self.workload_api is not None:
            # One --feature-gates and one --runtime-config: the Workload API's,
            # merged with any in extra_apiserver_args (which win).
            gates = dict.fromkeys(self.workload_api.feature_gates, "true")
            runtime = {kv.split("=", 1)[0]: kv for kv in self.workload_api.runtime_config}
            rest = []
            for arg in extra:
                for flag, into in (("--feature-gates=", gates), ("--runtime-config=", runtime)):
                    if arg.startswith(flag):
                        for kv in filter(None, arg[len(flag) :].split(",")):
                            k, _, v = kv.partition("=")
                            into[k] = v if into is gates else kv
                        break
                else:
                    rest.append(arg)
            extra = rest
            workload = [
                "--feature-gates=" + ",".join(f"{k}={v}" for k, v in gates.items()),
                "--runtime-config=" + ",".join(runtime.values()),
            ]
        return [
            str(self.apiserver_path),
            f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            f"--tls-cert-file={p / 'apiserver.crt'}",
            f"--tls-private-key-file={p / 'apiserver.key'}",
            f"--token-auth-file={p / 'tokens.csv'}",
            "--authorization-mode=Node,RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={p / 'sa.key'}",
            f"--service-account-signing-key-file={p / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            f"--disable-admission-plugins={','.join(self.disabled_admission_plugins)}",
            "--allow-privileged=true",
            # the lease reconciler refuses a loopback advertise address (and nothing in-cluster needs it)
            "--endpoint-reconciler-type=none",
            "--profiling=false",
            *workload,
            *extra,
        ]

    def _start_apiserver(self, deadline: float, attempts: int = 3) -> None:
        for attempt in range(attempts):
            port = self._apiserver_port or _free_port()
            self.server = f"https://127.0.0.1:{port}"
            offset = self.apiserver_log.stat().st_size if self.apiserver_log.exists() else 0
            self._apiserver = self._popen(self._apiserver_cmd(port), self.apiserver_log)
            while time.monotonic() < deadline:
                if self._apiserver.poll() is not None:
                    break
                status, _ = self._get("/readyz")
                if status == 200:
                    self._apiserver_port = port
                    return
                time.sleep(0.1)
            rc = self._apiserver.poll()
            exited = rc is not None
            log = self.apiserver_log.read_bytes()[offset:].decode(errors="replace")
            self._kill(self._apiserver)
            self._apiserver = None
            if exited and "address already in use" in log and attempt + 1 < attempts:
                time.sleep(0.5)  # a kept port may still be held by the old process for a moment
                continue
            what = f"exited with code {rc}" if exited else "was not ready in time"
            raise ClusterStartError(
                f"kube-apiserver {what} ({self.server}); last /readyz: {self._last_readyz}\n"
                f"tail of {self.apiserver_log}:\n" + "\n".join(log.splitlines()[-40:])
            )

    def _controller_manager_cmd(self, port: int) -> list[str]:
        return [
            str(self.controller_manager_path),
            # system:masters: the GC and namespace controllers delete every kind,
            # CRDs' included; per-controller identities would need the
            # ServiceAccount token controller and admission plugin.
            f"--kubeconfig={self.admin_kubeconfig}",
            f"--controllers={','.join(CONTROLLERS)}",
            "--leader-elect=false",  # a single instance: no Lease to wait for after a restart
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",  # serves /healthz, our readiness signal
            f"--cert-dir={self.workdir / 'controller-manager-certs'}",  # self-signed serving cert
            "--profiling=false",
            *(
                ["--feature-gates=" + ",".join(f"{g}=true" for g in self.workload_api.controller_manager_gates)]
                if self.workload_api is not None and self.workload_api.controller_manager_gates
                else []
            ),
        ]

    def _start_controller_manager(self, deadline: float, attempts: int = 3) -> None:
        for attempt in range(attempts):
            port = _free_port()
            offset = self.controller_manager_log.stat().st_size if self.controller_manager_log.exists() else 0
            self._controller_manager = self._popen(self._controller_manager_cmd(port), self.controller_manager_log)
            last = "(none)"
            while time.monotonic() < deadline:
                if self._controller_manager.poll() is not None:
                    break
                # A controller's check is registered once it is built (the informers
                # start right after): plain /healthz is 200 before that.
                status, body = self._get_controller_manager(port, "/healthz?verbose")
                last = f"{status} {body[-500:]}" if status else "(not reachable)"
                if status == 200 and all(f"[+]{c} ok" in body for c in CONTROLLERS):
                    self._controller_manager_port = port
                    return
                time.sleep(0.1)
            rc = self._controller_manager.poll()
            exited = rc is not None
            log = self.controller_manager_log.read_bytes()[offset:].decode(errors="replace")
            self._kill(self._controller_manager)
            self._controller_manager = None
            if exited and "address already in use" in log and attempt + 1 < attempts:
                time.sleep(0.5)  # the free port was taken in between
                continue
            what = f"exited with code {rc}" if exited else "was not healthy in time"
            raise ClusterStartError(
                f"kube-controller-manager {what} (port {port}); last /healthz: {last}\n"
                f"tail of {self.controller_manager_log}:\n" + "\n".join(log.splitlines()[-40:])
            )

    def controller_manager_healthy(self) -> bool:
        """kube-controller-manager is running and its /healthz is ok (False when disabled)."""
        proc = self._controller_manager
        if proc is None or proc.poll() is not None:
            return False
        return self._get_controller_manager(self._controller_manager_port, "/healthz")[0] == 200

    @staticmethod
    def _get_controller_manager(port: int, path: str) -> tuple[int, str]:
        """GET on kube-controller-manager's port; (status, body), status 0 when not reachable.
        Anonymous (/healthz is always allowed) and unverified (a self-signed cert)."""
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ctx))
        try:
            with opener.open(f"https://127.0.0.1:{port}{path}", timeout=5) as r:
                return r.status, r.read().decode(errors="replace")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")
        except (OSError, ssl.SSLError):
            return 0, ""

    _last_readyz = "(none)"

    def _get(self, path: str) -> tuple[int, str]:
        """GET as the admin; (status, body), status 0 when not reachable."""
        ctx = ssl.create_default_context(cafile=str(self.ca_path))
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ctx))
        req = urllib.request.Request(self.server + path, headers={"Authorization": f"Bearer {self.admin_token}"})
        try:
            with opener.open(req, timeout=5) as r:
                body = r.read().decode(errors="replace")
                if path.startswith("/readyz"):
                    self._last_readyz = f"{r.status} {body[:200]}"
                return r.status, body
        except urllib.error.HTTPError as e:
            body = e.read().decode(errors="replace")
            if path.startswith("/readyz"):
                self._last_readyz = f"{e.code} {body[-2000:]}"
            return e.code, body
        except (OSError, ssl.SSLError) as e:
            if path.startswith("/readyz"):
                self._last_readyz = repr(e)
            return 0, ""

    def _write_kubeconfigs(self) -> None:
        ca = self.ca_path.read_bytes()
        for path, user, token in (
            (self.admin_kubeconfig, ADMIN_USER, self.admin_token),
            (self.scheduler_kubeconfig, "troupe-scheduler", self.scheduler_token),
        ):
            path.write_text(_kubeconfig(self.server, ca, user, token))
            path.chmod(0o600)

    def _wait_bootstrapped(self, deadline: float) -> None:
        checks = [
            "/api/v1/namespaces/default",
            "/apis/rbac.authorization.k8s.io/v1/clusterroles/cluster-admin",
            "/apis/rbac.authorization.k8s.io/v1/clusterroles/system:basic-user",
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/system:discovery",
            "/apis/scheduling.k8s.io/v1/priorityclasses/system-node-critical",
        ]
        last: dict[str, int] = {}
        while checks and time.monotonic() < deadline:
            if self._apiserver is None or self._apiserver.poll() is not None:
                break
            status, _ = self._get(checks[0])
            last[checks[0]] = status
            if status == 200:
                checks.pop(0)
            else:
                time.sleep(0.1)
        if checks:
            raise ClusterStartError(
                f"kube-apiserver is up but not bootstrapped ({checks[0]}: {last.get(checks[0])}); "
                f"tail of {self.apiserver_log}:\n{_tail(self.apiserver_log)}"
            )


# --- CLI --------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="localcluster.py",
        description="Run a throwaway Kubernetes control plane (etcd, kube-apiserver and "
        f"kube-controller-manager v{K8S_VERSION}) on loopback, with no kubelet. "
        "Binaries come from `make controlplane`.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser(
        "up",
        help="start the control plane and wait until Ctrl-C",
        description="Start etcd, kube-apiserver and kube-controller-manager (Job, garbage-collector "
        "and namespace controllers), print the kubeconfig paths, wait until "
        "Ctrl-C (or SIGTERM), then stop them. Without --workdir the state lives in a temp "
        "dir that is removed on exit; with --workdir it is kept and reused next time.",
    )
    up.add_argument("--workdir", type=Path, help="state directory (kept; reused when it exists)")
    up.add_argument("--k8s-bin-dir", type=Path, help="default: $TROUPE_K8S_BIN_DIR or the build cache")
    up.add_argument("--etcd-bin-dir", type=Path, help="default: $TROUPE_ETCD_BIN_DIR or the build cache")
    up.add_argument(
        "--apiserver-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra kube-apiserver flag, e.g. --apiserver-arg=--v=4 (repeatable)",
    )
    up.add_argument("--no-controller-manager", action="store_true", help="run etcd and kube-apiserver only")
    up.add_argument(
        "--workload-api",
        action="store_true",
        help="serve the native scheduling.k8s.io Workload API (1.37: v1beta1 and v1alpha3, Jobs get "
        "Workloads and PodGroups; 1.36: v1alpha2)",
    )
    up.add_argument(
        "--k8s-version",
        choices=K8S_VERSIONS,
        help=f"kube-apiserver release (default {K8S_VERSION}; {K8S_136_VERSION} runs without kube-controller-manager)",
    )
    up.add_argument("--apiserver-path", type=Path, help="this kube-apiserver binary instead of the built one")
    up.add_argument("--timeout", type=float, default=60, help="seconds to wait for readiness (60)")
    args = parser.parse_args(argv)

    try:
        cluster = LocalCluster(
            args.k8s_bin_dir,
            args.etcd_bin_dir,
            args.workdir,
            args.apiserver_arg,
            controller_manager=False if args.no_controller_manager else None,
            workload_api=args.workload_api,
            k8s_version=args.k8s_version,
            apiserver_path=args.apiserver_path,
        )
    except (ControlPlaneNotBuilt, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        cluster.start(timeout=args.timeout)
    except ClusterStartError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"control plane ready in {cluster.startup_seconds:.1f}s at {cluster.server}")
    print(f"  kube-apiserver:       v{cluster.k8s_version} ({cluster.apiserver_path})")
    if cluster.workload_api is not None:
        api = cluster.workload_api
        print(
            f"  Workload API:         scheduling.k8s.io {', '.join(api.versions)}; gates {','.join(api.feature_gates)}"
        )
    print(f"  admin kubeconfig:     {cluster.admin_kubeconfig}")
    print(f"  scheduler kubeconfig: {cluster.scheduler_kubeconfig}  ({SCHEDULER_USER})")
    print(f"  kubectl:              {cluster.kubectl_path}")
    print(f"  logs:                 {cluster.logs_dir}")
    print()
    print(f"  export KUBECONFIG={cluster.admin_kubeconfig}")
    print(f"  export PATH={cluster.k8s_bin_dir}:$PATH")
    print()
    print("Ctrl-C stops it" + ("" if cluster.keep else " and removes the workdir") + ".", flush=True)
    try:
        while not stop.wait(1):
            if cluster._apiserver is None or cluster._apiserver.poll() is not None:
                print(f"kube-apiserver exited; tail of its log:\n{_tail(cluster.apiserver_log)}", file=sys.stderr)
                return 1
            if cluster._etcd is None or cluster._etcd.poll() is not None:
                print(f"etcd exited; tail of its log:\n{_tail(cluster.etcd_log)}", file=sys.stderr)
                return 1
            kcm = cluster._controller_manager
            if cluster.controller_manager and (kcm is None or kcm.poll() is not None):
                log = _tail(cluster.controller_manager_log)
                print(f"kube-controller-manager exited; tail of its log:\n{log}", file=sys.stderr)
                return 1
    finally:
        print("stopping", flush=True)
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
