"""Integration fixtures: a real etcd + kube-apiserver for the whole session.

- `cluster`: a started hack/localcluster.LocalCluster (session scope, stopped at
  the end however the tests went). TROUPE_KEEP_CLUSTER=1 keeps its workdir
  (etcd data, logs, kubeconfigs); on failures the logs are copied and the path
  is printed.
- `installed`: `cluster` after `kubectl apply -f crds/ -f manifests/`, with every
  CRD Established.
- `namespace`: a fresh namespace per test; its pods are force-deleted afterwards
  (there is no kubelet: the namespace controller's graceful deletes alone
  would leave bound pods Terminating and still counted on their nodes).
- `native_cluster`: another session control plane, v1.37.2 serving the upstream
  native Workload API (scheduling.k8s.io v1beta1 + v1alpha3, every PodGroup
  field's gate on, kube-controller-manager with WorkloadWithJob: every Job it
  starts gets a native Workload and PodGroup), installed like `installed`.
  Started on first use only.
- `native_cluster_136`: kube-apiserver v1.36.3 serving scheduling.k8s.io/v1alpha2
  (kubectl and etcd as above, no kube-controller-manager), installed likewise.
- `native_cluster_138`: kube-apiserver v1.38.0-beta.0 (built with Go 1.27)
  serving CompositePodGroups at v1beta1, likewise.
- `operator_cluster`: another session control plane (v1.37.2, like `cluster`)
  for the real operators of tests/integration/operators.py, installed like
  `installed` plus KubeRay's CRDs, the PyTorchJob CRD, the scheduler-plugins PodGroup CRD
  (scheduling.x-k8s.io) and Volcano's (tests/crds/), all before any scheduler
  starts. Started on first use only.
- `namespace_in(cluster)`: a fresh namespace in any of them, cleaned like
  `namespace`; `native_namespace` / `native_namespace_136` are shorthands.
  (The gates and runtime-config: hack/localcluster.WORKLOAD_API.)

Missing control-plane binaries make every test here fail (not skip) with a
message saying to run `make controlplane`; a missing operator build makes the
tests that use `operator_cluster` fail with one saying to run `make operators`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
INTEGRATION_DIR = Path(__file__).resolve().parent
for p in (ROOT, ROOT / "hack", INTEGRATION_DIR):  # ROOT: bench/ (its fake kubelet)
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import localcluster  # noqa: E402
from karpenter import (  # noqa: E402
    Karpenter,
    Kwok,
    apply,
    install_karpenter_crds,
    karpenter_build,
    kwok_build,
    kwok_nodeclass,
)
from kueue import install_kueue_crds, kueue_build  # noqa: E402
from localcluster import ControlPlaneNotBuilt, LocalCluster  # noqa: E402
from objects import create, node  # noqa: E402
from operators import OperatorNotBuilt, install_operator_crds, kuberay_build, training_operator_build  # noqa: E402


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if INTEGRATION_DIR in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session", autouse=True)
def controlplane_binaries() -> dict[str, Path]:
    """Paths of the control-plane binaries; fails every integration test if one is missing."""
    try:
        k8s, etcd = localcluster.default_k8s_bin_dir(), localcluster.default_etcd_bin_dir()
        return {
            "kube-apiserver": localcluster.find_binary(k8s, "kube-apiserver"),
            "kube-controller-manager": localcluster.find_binary(k8s, "kube-controller-manager"),
            "kube-scheduler": localcluster.find_binary(k8s, "kube-scheduler"),
            "kubectl": localcluster.find_binary(k8s, "kubectl"),
            "etcd": localcluster.find_binary(etcd, "etcd"),
        }
    except ControlPlaneNotBuilt as e:
        pytest.fail(str(e), pytrace=False)


def _running_cluster(request: pytest.FixtureRequest, label: str, **kwargs: Any) -> Iterator[LocalCluster]:
    """Start a LocalCluster(**kwargs), yield it, stop it however the tests went.
    TROUPE_KEEP_CLUSTER=1 keeps its workdir; after failures its logs are copied
    out and the path is printed (with ``label`` saying which control plane)."""
    keep = os.environ.get("TROUPE_KEEP_CLUSTER", "") not in ("", "0")
    try:
        c = LocalCluster(keep=keep, **kwargs)
    except ControlPlaneNotBuilt as e:
        pytest.fail(str(e), pytrace=False)
    c.start(timeout=90)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    try:
        yield c
    finally:
        failed = request.session.testsfailed
        c.keep = True  # stop() would remove the logs before they are copied
        c.stop()
        msg = None
        if keep:
            msg = f"{label} workdir kept: {c.workdir}"
        else:
            if failed:
                saved = Path(tempfile.mkdtemp(prefix="troupe-integration-logs-"))
                try:
                    shutil.copytree(c.workdir / "logs", saved, dirs_exist_ok=True)
                except OSError:
                    pass
                msg = f"{failed} test(s) failed; {label} logs saved in {saved}"
            shutil.rmtree(c.workdir, ignore_errors=True)
        if msg and reporter is not None:
            # After the summary: session teardown runs inside the last test's
            # capture, which shows the line only if that test failed.
            request.config.add_cleanup(lambda: reporter.write_line(msg))


def install(cluster: LocalCluster) -> LocalCluster:
    """``kubectl apply -f crds/ -f manifests/`` and wait until every CRD is Established."""
    for d in ("crds", "manifests"):
        if not any((ROOT / d).glob("*.y*ml")):
            pytest.fail(f"{d}/ has no YAML files to apply", pytrace=False)
    cluster.kubectl("apply", "-f", str(ROOT / "crds"), "-f", str(ROOT / "manifests"), timeout=120)
    cluster.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s", timeout=90)
    return cluster


@contextlib.contextmanager
def fresh_namespace(cluster: LocalCluster) -> Iterator[str]:
    """A new namespace in ``cluster``; afterwards its pods are force-deleted
    (no kubelet finishes graceful deletes) and the namespace is deleted."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    cluster.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        cluster.kubectl(
            "delete", "pods", "--all", "-n", name, "--grace-period=0", "--force", "--wait=false", check=False
        )
        cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest, controlplane_binaries) -> LocalCluster:
    yield from _running_cluster(request, "control plane")


@pytest.fixture(scope="session")
def installed(cluster: LocalCluster) -> LocalCluster:
    """The cluster with troupe's CRDs and manifests applied, exactly as a user does."""
    return install(cluster)


@pytest.fixture(scope="session")
def native_cluster(request: pytest.FixtureRequest, controlplane_binaries) -> LocalCluster:
    """v1.37.2 with the native Workload API (scheduling.k8s.io v1beta1 preferred,
    v1alpha3) and kube-controller-manager's Job controller making native
    Workloads/PodGroups (WorkloadWithJob); crds/ and manifests/ applied."""
    for c in _running_cluster(request, "native Workload API control plane (v1.37.2)", workload_api=True):
        yield install(c)


@pytest.fixture(scope="session")
def native_cluster_136(request: pytest.FixtureRequest, controlplane_binaries) -> LocalCluster:
    """kube-apiserver v1.36.3 serving scheduling.k8s.io/v1alpha2 (no
    kube-controller-manager: namespaces never finish deleting, nothing is
    garbage-collected); crds/ and manifests/ applied."""
    label = f"native Workload API control plane (kube-apiserver v{localcluster.K8S_136_VERSION})"
    for c in _running_cluster(
        request, label, workload_api=True, k8s_version=localcluster.K8S_136_VERSION, controller_manager=False
    ):
        yield install(c)


@pytest.fixture(scope="session")
def native_cluster_138(request: pytest.FixtureRequest, controlplane_binaries) -> LocalCluster:
    """kube-apiserver v1.38.0-beta.0 serving scheduling.k8s.io v1beta1 (and
    v1alpha3), CompositePodGroups at v1beta1, the 1.38 gates on (no
    kube-controller-manager); crds/ and manifests/ applied."""
    label = f"native Workload API control plane (kube-apiserver v{localcluster.K8S_138_VERSION})"
    for c in _running_cluster(
        request, label, workload_api=True, k8s_version=localcluster.K8S_138_VERSION, controller_manager=False
    ):
        yield install(c)


@pytest.fixture(scope="session")
def operator_cluster(request: pytest.FixtureRequest, controlplane_binaries) -> LocalCluster:
    """v1.37.2 with crds/ and manifests/ applied, plus the CRDs of the operators
    that tests/integration/operators.py runs (KubeRay's, the training
    operator's PyTorchJob, scheduler-plugins' PodGroup, Volcano's PodGroup),
    Established before any scheduler starts."""
    try:
        kuberay, training = kuberay_build(), training_operator_build()
    except OperatorNotBuilt as e:
        pytest.fail(str(e), pytrace=False)
    for c in _running_cluster(request, "operator control plane"):
        install(c)
        install_operator_crds(c, kuberay, training)
        yield c


@pytest.fixture(scope="session")
def kueue_cluster(request: pytest.FixtureRequest, controlplane_binaries) -> LocalCluster:
    """v1.37.2 with the native Workload API (as `native_cluster`: a Job with
    `spec.scheduling` gets its native Workload and PodGroup), crds/ and
    manifests/ applied, and Kueue's CRDs (from the module `make operators`
    built it from), Established. A control plane of its own: Kueue's
    admission webhooks are registered on it while Kueue runs."""
    try:
        build = kueue_build()
    except OperatorNotBuilt as e:
        pytest.fail(str(e), pytrace=False)
    for c in _running_cluster(request, "Kueue control plane (native Workload API)", workload_api=True):
        install(c)
        install_kueue_crds(c, build)
        yield c


@pytest.fixture(scope="session")
def karpenter_cluster(request: pytest.FixtureRequest, controlplane_binaries) -> LocalCluster:
    """v1.37.2 with crds/ and manifests/ applied, and Karpenter's CRDs (NodePool,
    NodeClaim, NodeOverlay, KWOKNodeClass, CapacityBuffer, from the module `make
    operators` built it from), Established. A control plane of its own: the
    nodes Karpenter makes (and kwok keeps Ready) would be seen by every other
    test's scheduler. Karpenter and kwok themselves are started by the tests
    (tests/integration/karpenter.py)."""
    try:
        build = karpenter_build()
    except OperatorNotBuilt as e:
        pytest.fail(str(e), pytrace=False)
    for c in _running_cluster(request, "Karpenter control plane"):
        install(c)
        install_karpenter_crds(c, build)
        yield c


@pytest.fixture(scope="module")
def kwok(karpenter_cluster, tmp_path_factory) -> Iterator[Kwok]:
    """kwok keeping the nodes Karpenter makes Ready (one per test module)."""
    k = Kwok(kwok_build(), karpenter_cluster, tmp_path_factory.mktemp("kwok")).start()
    try:
        yield k
    finally:
        k.stop()


@pytest.fixture(scope="module")
def karpenter(karpenter_cluster, kwok, tmp_path_factory) -> Iterator[Karpenter]:
    """Karpenter (kwok provider) and the KWOKNodeClass `default` its NodePools name."""
    apply(karpenter_cluster, kwok_nodeclass("default"))
    k = Karpenter(karpenter_build(), karpenter_cluster, tmp_path_factory.mktemp("karpenter")).start()
    try:
        yield k
    finally:
        k.stop()


@pytest.fixture(scope="session")
def compat_cluster(request: pytest.FixtureRequest, controlplane_binaries) -> LocalCluster:
    """v1.37.2 with crds/, manifests/ and crds/compat/ (troupe's own copies of
    scheduler-plugins' and Volcano's PodGroup CRDs), as a cluster that has
    neither scheduler would be set up."""
    for c in _running_cluster(request, "compat control plane"):
        install(c)
        c.kubectl("apply", "-f", str(ROOT / "crds" / "compat"), timeout=120)
        c.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s", timeout=90)
        yield c


@pytest.fixture
def nodes(installed: LocalCluster):
    """`nodes(name, cpu=..., ...)` creates a Node; every node is removed before and after the test."""

    def make(name: str, **kw: Any) -> str:
        create(installed, node(name, **kw))
        return name

    installed.kubectl("delete", "nodes", "--all", "--wait=false", check=False)
    yield make
    installed.kubectl("delete", "nodes", "--all", "--wait=false", check=False)


@pytest.fixture
def namespace(cluster: LocalCluster) -> str:
    with fresh_namespace(cluster) as name:
        yield name


@pytest.fixture
def namespace_in() -> Callable[[LocalCluster], str]:
    """``namespace_in(cluster)``: a fresh namespace in that cluster, cleaned up after the test."""
    with contextlib.ExitStack() as stack:
        yield lambda c: stack.enter_context(fresh_namespace(c))


@pytest.fixture
def native_namespace(native_cluster: LocalCluster, namespace_in) -> str:
    return namespace_in(native_cluster)


@pytest.fixture
def native_namespace_136(native_cluster_136: LocalCluster, namespace_in) -> str:
    return namespace_in(native_cluster_136)


@pytest.fixture
def native_namespace_138(native_cluster_138: LocalCluster, namespace_in) -> str:
    return namespace_in(native_cluster_138)
