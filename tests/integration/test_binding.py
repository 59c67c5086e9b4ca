"""Binding against the real kube-apiserver when it does not simply say 201:

- 429: API Priority and Fairness (a FlowSchema for troupe's ServiceAccount's
  pods/binding creates, into a tiny Limited level that Rejects) answers 429 with
  Retry-After once the level's seats are taken. The seats are held by binding
  requests (with troupe's token) whose body never finishes arriving, so the 429s
  are certain, not a race; releasing them lets troupe's retries through.
- A refused bind (a ValidatingAdmissionPolicy denies pods/binding in the test's
  namespace): the pod goes back to the queue and is bound once the policy is gone.
"""

from __future__ import annotations

import json
import re
import socket
import ssl
import urllib.error
import urllib.request
import uuid
from email.message import Message
from urllib.parse import urlparse

from objects import bound, create, events_for, pod, pod_condition, podgroup, wait_condition
from troupe_process import TroupeProcess
from wait import wait_for

SA_NAMESPACE, SA_NAME = "troupe-system", "troupe-scheduler"
THROTTLED = re.compile(r"bind \S+: throttled by the server, retrying in \d+(\.\d+)?s")


# ------------------------------------------------------------------- helpers


def api_request(
    cluster, method: str, path: str, body: dict | None = None, as_scheduler: bool = False
) -> tuple[int, Message, str]:
    """One request to the apiserver as the admin or with troupe's token: (status, headers, body);
    the headers are looked up case-insensitively."""
    token = cluster.scheduler_token if as_scheduler else cluster.admin_token
    ctx = ssl.create_default_context(cafile=str(cluster.ca_path))
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ctx))
    req = urllib.request.Request(
        cluster.server + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with opener.open(req, timeout=10) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


def binding(ns: str, name: str, node: str = "nowhere") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "namespace": ns},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


def probe_bind(cluster, ns: str, as_scheduler: bool) -> tuple[int, Message, str]:
    """A binding of a pod that does not exist: classified, admitted and refused like any
    binding, but it can never bind anything."""
    name = "probe-no-such-pod"
    return api_request(
        cluster, "POST", f"/api/v1/namespaces/{ns}/pods/{name}/binding", binding(ns, name), as_scheduler=as_scheduler
    )


class HeldRequest:
    """A pods/binding POST with troupe's token whose body never completes: the
    apiserver admits it (it takes a seat of its priority level) and then waits for
    the rest of the body, holding the seat until the connection is closed."""

    def __init__(self, cluster, ns: str, name: str) -> None:
        url = urlparse(cluster.server)
        ctx = ssl.create_default_context(cafile=str(cluster.ca_path))
        self.sock = ctx.wrap_socket(
            socket.create_connection((url.hostname, url.port), timeout=10), server_hostname=url.hostname
        )
        head = (
            f"POST /api/v1/namespaces/{ns}/pods/{name}/binding HTTP/1.1\r\n"
            f"Host: {url.netloc}\r\n"
            f"Authorization: Bearer {cluster.scheduler_token}\r\n"
            "Content-Type: application/json\r\n"
            "Content-Length: 100000\r\n\r\n"
        )
        self.sock.sendall(head.encode() + b'{"apiVersion": "v1", "kind": "Binding", ')

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def bindings(proc: TroupeProcess, result: str = "bound") -> float:
    value = proc.metric("troupe_pod_bindings_total", result=result)
    assert value is not None, f"no /metrics from troupe:\n{proc.log_tail()}"
    return value


def delete_quietly(cluster, *objects: str) -> None:
    for obj in objects:
        cluster.kubectl("delete", obj, "--ignore-not-found", "--wait=false", check=False)


# ------------------------------------------------------------------------ 429


def apf_objects(name: str) -> list[dict]:
    return [
        {
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "PriorityLevelConfiguration",
            "metadata": {"name": name},
            "spec": {
                "type": "Limited",
                "limited": {
                    "nominalConcurrencyShares": 1,
                    "lendablePercent": 0,
                    "borrowingLimitPercent": 0,
                    "limitResponse": {"type": "Reject"},
                },
            },
        },
        {
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "FlowSchema",
            "metadata": {"name": name},
            "spec": {
                "priorityLevelConfiguration": {"name": name},
                "matchingPrecedence": 200,  # before the built-in service-accounts schema (9000)
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [
                    {
                        "subjects": [
                            {"kind": "ServiceAccount", "serviceAccount": {"name": SA_NAME, "namespace": SA_NAMESPACE}}
                        ],
                        "resourceRules": [
                            {"verbs": ["create"], "apiGroups": [""], "resources": ["pods/binding"], "namespaces": ["*"]}
                        ],
                    }
                ],
            },
        },
    ]


def test_429_from_priority_and_fairness_is_retried_and_every_pod_binds(installed, nodes, namespace, tmp_path):
    c, ns = installed, namespace
    name = f"troupe-binding-test-{uuid.uuid4().hex[:8]}"  # a fresh level: APF's Retry-After starts at 1
    held: list[HeldRequest] = []
    proc: TroupeProcess | None = None
    create(c, *apf_objects(name))
    try:
        fs_uid = c.get_json("flowschema", name)["metadata"]["uid"]
        wait_for(
            lambda: probe_bind(c, ns, as_scheduler=True)[1].get("X-Kubernetes-PF-FlowSchema-UID") == fs_uid,
            timeout=20,
            message="troupe's binding requests classified into the test FlowSchema",
        )

        def refused() -> Message | None:
            status, headers, _ = probe_bind(c, ns, as_scheduler=True)
            if status == 429:
                return headers
            if len(held) < 10:
                held.append(HeldRequest(c, ns, f"held-{len(held)}"))
            return None

        try:
            headers = wait_for(
                refused, timeout=20, interval=0.3, message="the apiserver answering 429 once the level's seats are held"
            )
            assert int(headers["Retry-After"]) >= 1, headers
            print(f"{len(held)} held request(s) fill the level; 429 with Retry-After: {headers['Retry-After']}")

            for i in range(3):
                nodes(f"node-{i}", cpu="10")
            create(c, podgroup(ns, "big", 30), *[pod(ns, f"big-{i}", group="big") for i in range(30)])
            proc = TroupeProcess(
                c.scheduler_kubeconfig,
                tmp_path,
                name="throttled",
                config=("clientConnection: {qps: 100, burst: 100, bindConcurrency: 2}\n"),
            ).start()
            wait_for(
                lambda: THROTTLED.search(proc.log_text()) or bindings(proc) > 0,
                timeout=20,
                message="troupe throttled (or reporting binds)",
            )
            assert THROTTLED.search(proc.log_text()), (
                f"troupe reported {bindings(proc)} bind(s) while every bind got 429, and never logged throttling:\n"
                + proc.log_tail()
            )
            assert bound(c, ns) == {}, "a bind got through while the level's seats were held"
        finally:
            for h in held:
                h.close()
        wait_for(lambda: len(bound(c, ns)) == 30, timeout=30, message="all 30 pods bound after the 429s")
        wait_condition(c, ns, "big", "True", "Scheduled")
        wait_for(lambda: bindings(proc) == 30, timeout=10, message="troupe counted 30 binds")
        assert bindings(proc, "failed") == 0
        assert "already bound (409)" not in proc.log_text()
    finally:
        if proc is not None:
            rc = proc.stop()
            assert rc == 0, proc.log_tail()
            assert "Traceback" not in proc.log_text(), proc.log_tail()
        delete_quietly(c, f"flowschema/{name}", f"prioritylevelconfiguration/{name}")


# ------------------------------------------------------------- a refused bind


def deny_binding_objects(name: str, ns: str, message: str) -> list[dict]:
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods/binding"],
                        }
                    ]
                },
                "validations": [{"expression": "false", "message": message}],
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}},
            },
        },
    ]


def test_a_refused_bind_returns_the_pod_to_the_queue_and_it_binds_later(installed, nodes, namespace, tmp_path):
    c, ns = installed, namespace
    name = f"troupe-deny-binding-{uuid.uuid4().hex[:8]}"
    message = "bindings refused by the test"
    policy = [f"validatingadmissionpolicybinding/{name}", f"validatingadmissionpolicy/{name}"]
    proc: TroupeProcess | None = None
    create(c, *deny_binding_objects(name, ns, message))
    try:
        try:
            wait_for(
                lambda: message in probe_bind(c, ns, as_scheduler=False)[2],
                timeout=20,
                message="the policy refusing bindings in the namespace",
            )
            nodes("node-0", cpu="4")
            create(c, podgroup(ns, "pair", 2), pod(ns, "pair-0", group="pair"), pod(ns, "pair-1", group="pair"))
            proc = TroupeProcess(
                c.scheduler_kubeconfig,
                tmp_path,
                name="refused",
                config=("queue: {podInitialBackoffSeconds: 0.5, podMaxBackoffSeconds: 1}\n"),
            ).start()
            wait_for(
                lambda: bindings(proc, "failed") >= 2 or bindings(proc) > 0,
                timeout=20,
                message="troupe's binds refused (or reported bound)",
            )
            assert bindings(proc) == 0, f"troupe reported refused binds as bound:\n{proc.log_tail()}"
            log = proc.log_text()
            for p in ("pair-0", "pair-1"):
                assert re.search(rf"bind {ns}/{p} -> node-0: Binding rejected: 422 .*{message}", log), proc.log_tail()
            assert bound(c, ns) == {}
            refused = wait_for(
                lambda: [
                    e for e in events_for(c, ns, "pair-0") if e["reason"] == "FailedScheduling" and message in e["note"]
                ],
                message="a FailedScheduling event saying why the bind failed",
            )
            assert refused[0]["action"] == "Binding", refused[0]
        finally:
            delete_quietly(c, *policy)
        # Back in the queue, retried with backoff: bound once the policy is gone.
        wait_for(lambda: len(bound(c, ns)) == 2, timeout=30, message="both pods bound after the policy is gone")
        wait_condition(c, ns, "pair", "True", "Scheduled")
        wait_for(lambda: bindings(proc) == 2, timeout=10, message="troupe counted 2 binds")
        assert "already bound (409)" not in proc.log_text()
    finally:
        delete_quietly(c, *policy)
        if proc is not None:
            rc = proc.stop()
            assert rc == 0, proc.log_tail()
            assert "Traceback" not in proc.log_text(), proc.log_tail()


def test_a_condition_write_held_until_after_the_bind_leaves_the_bound_pod_scheduled(
    installed, nodes, namespace, tmp_path
):
    # A gang of two that does not fit is told so (Unschedulable); that write
    # is held (failpoint) until both pods are bound on the node added
    # meanwhile. Sent then, it would turn the bind's PodScheduled=True back
    # to False: its resourceVersion precondition makes the API server refuse
    # it, and the pod, read again, is bound, so nothing is written.
    c, ns = installed, namespace
    nodes("n1", cpu="1")
    proc = TroupeProcess(
        c.scheduler_kubeconfig, tmp_path, name="late", env={"TROUPE_FAILPOINTS": "pod-condition-late=5000"}
    ).start()
    try:
        create(c, podgroup(ns, "pair", 2), pod(ns, "pair-0", "pair"), pod(ns, "pair-1", "pair"))
        wait_for(lambda: "failpoint pod-condition-late: holding" in proc.log_text(), timeout=30, message="write held")
        nodes("n2", cpu="4")
        wait_for(lambda: len(bound(c, ns, "pair-")) == 2, timeout=30, message="the gang bound")
        wait_for(
            lambda: f"pod {ns}/pair-0: bound or gone before its condition was written" in proc.log_text(),
            timeout=30,
            message="the held write refused and dropped",
        )
        for name in ("pair-0", "pair-1"):
            cond = pod_condition(c, ns, name)
            assert cond is not None and cond["status"] == "True", (name, cond)
    finally:
        proc.stop()
