"""DRA across a troupe restart: devices held by a pod deleted while troupe was
down are released when it starts again (no kube-controller-manager runs
here to do it), and the freed device is allocated again."""

from __future__ import annotations

import pytest
from objects import bound, create
from test_dra import claim, claims, devices, gpu_pod  # noqa: F401 (devices is a fixture)
from troupe_process import TroupeProcess
from wait import wait_for

pytestmark = pytest.mark.integration


def test_a_pod_deleted_while_troupe_is_down_releases_its_claim_at_restart(
    installed, nodes, devices, namespace, tmp_path
):
    c, ns = installed, namespace
    nodes("node-0", cpu="8")
    devices("node-0", 1)
    create(c, claim(ns, "first"), gpu_pod(ns, "first", "first"))
    before = TroupeProcess(c.scheduler_kubeconfig, tmp_path, name="before").start()
    try:
        wait_for(lambda: bound(c, ns) == {"first": "node-0"}, timeout=30, message="the first pod bound")
        wait_for(
            lambda: claims(c, ns)["first"].get("status", {}).get("reservedFor"),
            timeout=10,
            message="claim first reserved",
        )
    finally:
        before.kill()
    c.kubectl("delete", "pod", "first", "-n", ns, "--grace-period=0", "--force")
    create(c, claim(ns, "second"), gpu_pod(ns, "second", "second"))
    after = TroupeProcess(c.scheduler_kubeconfig, tmp_path, name="after").start()
    try:
        wait_for(
            lambda: not claims(c, ns)["first"].get("status", {}).get("allocation"),
            timeout=30,
            message="the deleted pod's claim released at start",
        )
        wait_for(lambda: bound(c, ns) == {"second": "node-0"}, timeout=30, message="the second pod bound")
        result = claims(c, ns)["second"]["status"]["allocation"]["devices"]["results"][0]
        assert (result["pool"], result["device"]) == ("node-0", "gpu-0")
    finally:
        rc = after.stop()
        assert rc == 0, after.log_tail()
