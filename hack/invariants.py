"""Invariants of gang scheduling, checked from the outside while faults happen.

An `Observer` polls the API (kubectl, as the admin) in a thread and checks,
at every observation:

- no pod is bound twice: once a pod (by uid) is seen on a node, it is never
  seen on another node, nor unbound again;
- no gang is bound below minCount: a gang seen with some but fewer than
  minCount pods bound must reach minCount within `partial_grace` seconds
  (the binds of one decision are separate API calls, so an observation can
  fall between two of them, and binds in flight at an outage are retried
  through it; a gang that stays partial was placed partially);
- no node is overcommitted: the requests (cpu, memory, pods) of the pods
  bound to a node fit its allocatable.

`final_check()` waits for every expected pod to be bound. Used by
tests/integration/test_outage.py, test_leader_failover_repeated.py and
bench/soak.py. Polling failures (the API server is away) are counted, not
raised.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from scheduler.api.quantity import parse_quantity

GROUP_LABEL = "scheduling.troupe.dev/pod-group"


@dataclass
class Gang:
    namespace: str
    name: str
    min_count: int
    # A fault touched the gang (one of its pods or nodes deleted): being
    # partial until then is expected, not a violation.
    disrupted_until: float = 0.0
    partial_since: float | None = None
    reported: bool = False


@dataclass
class Observer:
    cluster: Any  # hack/localcluster.LocalCluster
    partial_grace: float = 75.0
    interval: float = 0.5
    violations: list[str] = field(default_factory=list)
    observations: int = 0
    poll_failures: int = 0
    max_partial_seconds: float = 0.0

    def __post_init__(self) -> None:
        self.gangs: dict[tuple[str, str], Gang] = {}
        self.first_node: dict[str, tuple[str, str]] = {}  # uid -> (pod key, node)
        self.bound_uids: set[str] = set()
        # Pods seen bound, then unbound in a later list: uid -> (pod key, node, when).
        self.unbound_again: dict[str, tuple[str, str, str]] = {}
        self.stale_reads = 0  # of those, seen on their node again: the API's older view
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_pods: list[dict[str, Any]] = []

    # ----------------------------------------------------------- bookkeeping

    def expect_gang(self, namespace: str, name: str, min_count: int) -> None:
        with self._lock:
            self.gangs[(namespace, name)] = Gang(namespace, name, min_count)

    def forget_gang(self, namespace: str, name: str) -> None:
        """The gang was deleted on purpose (finished work)."""
        with self._lock:
            self.gangs.pop((namespace, name), None)

    def disrupt(self, namespace: str, name: str, seconds: float = 90.0) -> None:
        """A fault removed some of the gang's pods: allow it to be partial for a while."""
        with self._lock:
            gang = self.gangs.get((namespace, name))
            if gang is not None:
                gang.disrupted_until = time.monotonic() + seconds
                gang.partial_since = None

    def violation(self, text: str) -> None:
        with self._lock:
            self.violations.append(f"{time.strftime('%H:%M:%S')} {text}")

    # --------------------------------------------------------------- polling

    def start(self) -> Observer:
        self._thread = threading.Thread(target=self._run, name="invariants", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        with self._lock:
            present = {p["metadata"]["uid"] for p in self.last_pods}
            for uid, (key, node, when) in self.unbound_again.items():
                if uid in present:  # one deleted since cannot be told apart; it is bound nowhere now
                    self.violations.append(
                        f"{when} pod {key} was bound to {node}, then unbound, and not seen bound again"
                    )
            self.unbound_again.clear()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.poll()

    def poll(self) -> bool:
        """One observation; False if the API could not be read."""
        try:
            pods = self.cluster.get_json("pods", "-A", "-l", GROUP_LABEL, "--request-timeout=10s")["items"]
            nodes = self.cluster.get_json("nodes", "--request-timeout=10s")["items"]
        except Exception:  # noqa: BLE001 - the API server may be away: not an observation
            with self._lock:
                self.poll_failures += 1
            return False
        self.check(pods, nodes, time.monotonic())
        return True

    def check(self, pods: Iterable[dict[str, Any]], nodes: Iterable[dict[str, Any]], now: float) -> None:
        """The invariants over one consistent-enough view (pods listed before nodes)."""
        pods = list(pods)
        with self._lock:
            self.observations += 1
            self.last_pods = pods
            bound_by_gang: dict[tuple[str, str], int] = {}
            used: dict[str, dict[str, Decimal]] = {}
            for p in pods:
                meta, spec = p["metadata"], p["spec"]
                uid, key = meta["uid"], f"{meta['namespace']}/{meta['name']}"
                node = spec.get("nodeName") or ""
                seen = self.first_node.get(uid)
                if seen is not None and node and seen[1] != node:
                    self.violations.append(
                        f"{time.strftime('%H:%M:%S')} pod {key} (uid {uid[:8]}) was bound to {seen[1]}, now {node}"
                    )
                elif seen is not None and not node:
                    # nodeName cannot be unset: either the API served an older
                    # list (seen right after an etcd restart) or the bind was
                    # lost. A violation only if it is not seen on its node again.
                    self.unbound_again.setdefault(uid, (key, seen[1], time.strftime("%H:%M:%S")))
                elif node and self.unbound_again.pop(uid, None) is not None:
                    self.stale_reads += 1
                if node:
                    self.first_node.setdefault(uid, (key, node))
                    self.bound_uids.add(uid)
                    if not meta.get("deletionTimestamp"):
                        group = (meta.get("labels") or {}).get(GROUP_LABEL, "")
                        gkey = (meta["namespace"], group)
                        bound_by_gang[gkey] = bound_by_gang.get(gkey, 0) + 1
                    terminal = (p.get("status") or {}).get("phase") in ("Succeeded", "Failed")
                    if not terminal:
                        u = used.setdefault(node, {"cpu": Decimal(0), "memory": Decimal(0), "pods": Decimal(0)})
                        for c in spec.get("containers") or []:
                            req = (c.get("resources") or {}).get("requests") or {}
                            for r in ("cpu", "memory"):
                                if r in req:
                                    u[r] += parse_quantity(str(req[r]))
                        u["pods"] += 1
            for n in nodes:
                name = n["metadata"]["name"]
                alloc = (n.get("status") or {}).get("allocatable") or {}
                for r, amount in used.get(name, {}).items():
                    if r in alloc and amount > parse_quantity(str(alloc[r])):
                        self.violations.append(
                            f"{time.strftime('%H:%M:%S')} node {name} overcommitted: {r} {amount} > {alloc[r]}"
                        )
            for gkey, gang in self.gangs.items():
                bound = bound_by_gang.get(gkey, 0)
                partial = 0 < bound < gang.min_count and now >= gang.disrupted_until
                if not partial:
                    gang.partial_since = None
                    continue
                if gang.partial_since is None:
                    gang.partial_since = now
                lasted = now - gang.partial_since
                self.max_partial_seconds = max(self.max_partial_seconds, lasted)
                if lasted > self.partial_grace and not gang.reported:
                    gang.reported = True
                    self.violations.append(
                        f"{time.strftime('%H:%M:%S')} gang {gkey[0]}/{gkey[1]} has {bound} of minCount "
                        f"{gang.min_count} pods bound for {lasted:.0f}s"
                    )

    # ------------------------------------------------------------- the end

    def unbound(self) -> list[str]:
        """Pods of expected gangs that exist and have no node (in the last observation)."""
        with self._lock:
            return [
                f"{p['metadata']['namespace']}/{p['metadata']['name']}"
                for p in self.last_pods
                if not p["spec"].get("nodeName")
                and not p["metadata"].get("deletionTimestamp")
                and (p["metadata"]["namespace"], (p["metadata"].get("labels") or {}).get(GROUP_LABEL, "")) in self.gangs
            ]

    def binding_backlog(self, at_least: int) -> bool:
        """The last observation shows binding under way (a pod of an expected
        gang bound) with at least `at_least` of their pods still unbound."""
        left = self.unbound()
        with self._lock:
            expected = [
                p
                for p in self.last_pods
                if (p["metadata"]["namespace"], (p["metadata"].get("labels") or {}).get(GROUP_LABEL, "")) in self.gangs
            ]
        return len(left) >= at_least and len(expected) > len(left)

    def final_check(self, timeout: float = 120.0, expected_pods: int | None = None) -> list[str]:
        """Wait until every pod of the expected gangs is bound (and, if given,
        at least `expected_pods` exist); the pods still unbound at the deadline."""
        deadline = time.monotonic() + timeout
        left: list[str] = ["(no observation)"]
        while time.monotonic() < deadline:
            if self.poll():
                left = self.unbound()
                with self._lock:
                    count = len(self.last_pods)
                if not left and (expected_pods is None or count >= expected_pods):
                    return []
                if expected_pods is not None and count < expected_pods:
                    left = left or [f"only {count} of {expected_pods} pods exist"]
            time.sleep(self.interval)
        return left


# ------------------------------------------------------------------ workload


def gang_objects(namespace: str, name: str, size: int, cpu: str = "100m", memory: str = "64Mi") -> list[dict[str, Any]]:
    """A PodGroup with gang minCount `size` and its `size` pods."""
    pg = {
        "apiVersion": "scheduling.troupe.dev/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"schedulingPolicy": {"gang": {"minCount": size}}},
    }
    return [pg] + [gang_pod(namespace, name, i, cpu, memory) for i in range(size)]


def gang_pod(namespace: str, group: str, index: int, cpu: str = "100m", memory: str = "64Mi") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{group}-{index}", "namespace": namespace, "labels": {GROUP_LABEL: group}},
        "spec": {
            "schedulerName": "troupe-scheduler",
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "c",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": cpu, "memory": memory}},
                }
            ],
        },
    }


def apply_until_done(cluster: Any, objects: list[dict[str, Any]], timeout: float = 120.0) -> int:
    """`kubectl apply` the objects, again and again while the API server is
    away (apply creates what is missing and leaves the rest: a retry after a
    half-done attempt is safe). Returns the number of failed attempts;
    raises TimeoutError at the deadline."""
    import json

    body = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    deadline = time.monotonic() + timeout
    failures = 0
    while True:
        try:
            r = cluster.kubectl("apply", "--request-timeout=10s", "-f", "-", input=body, check=False, timeout=30)
            if r.returncode == 0:
                return failures
            why = r.stderr.strip()[-500:]
        except subprocess.TimeoutExpired:
            why = "kubectl timed out"
        failures += 1
        if time.monotonic() > deadline:
            raise TimeoutError(f"kubectl apply kept failing: {why}")
        time.sleep(0.5)
