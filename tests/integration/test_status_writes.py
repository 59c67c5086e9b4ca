"""Status writes on the real API server (issue 34, items 5 and 6).

Writes per decision, for every group source: a gang that cannot fit (two
4-CPU pods, nodes of 2 CPU) is tried again and again by cluster events that
do not change the decision (a bound pod of another scheduler created and
deleted on a node), then once by one that does (a third node: "0/3 nodes
are available"), and tried again. Counted for each stage:

- the PATCH requests the API server received for the group's kind (its own
  `apiserver_request_total`): a patch that changes nothing (the same status
  again) costs a request but shows on no watch, so this is the count that
  matters;
- the changes of the group object a `kubectl get --watch` sees;
- the patches troupe says it sent (`troupe_group_status_writes_total`).

Each must be one per changed decision. scheduler-plugins' PodGroup has no
conditions: troupe's message is not on it, so only its first report
(scheduleStartTime, phase, counts) is written. A Kueue group has no object:
its pods' PodScheduled conditions are counted instead (one per pod).

The pods are created, and seen by troupe, before their group object, so that
no write of the group's member counts (scheduler-plugins, Volcano) falls in
the counts: the first decision writes the counts with the conditions, and the
pods do not change afterwards.

nominatedNodeName: written with the pod's uid, so a pod deleted and created
again under the same name never receives the nomination decided for the
pod it replaced.
"""

from __future__ import annotations

import itertools
import logging
import re
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes_asyncio import client
from objects import create, events_for, force_delete, node, pod, podgroup
from test_native import NATIVE_PG, native_podgroup, worker
from test_sources import (
    KUEUE_COUNT,
    KUEUE_LABEL,
    SP_LABEL,
    SP_PG,
    VOLCANO_ANNOTATION,
    VOLCANO_PG,
    member,
    volcano_podgroup,
)
from troupe_process import TroupeProcess, supervised
from wait import WaitTimeout, wait_for

from scheduler.api.parse import parse_pod
from scheduler.runtime.kube import RestClient, load_configuration
from scheduler.runtime.ratelimit import TokenBucket
from scheduler.runtime.status import StatusWriter

# Short backoffs: each nudge is followed by an attempt within a second.
CONFIG = "queue: {podInitialBackoffSeconds: 0.2, podMaxBackoffSeconds: 0.5}\n"
REPEATS = 3  # attempts with the same decision, after each decision
WRITES = "troupe_group_status_writes_total"
DECISIONS = "troupe_podgroup_decisions_total"
TROUPE_PG = "podgroups.scheduling.troupe.dev"
VOLCANO_GROUP = "scheduling.volcano.sh"


@pytest.fixture(scope="module")
def troupe(compat_cluster, tmp_path_factory) -> Iterator[TroupeProcess]:
    yield from supervised(
        TroupeProcess(compat_cluster.scheduler_kubeconfig, tmp_path_factory.mktemp("troupe-writes"), config=CONFIG)
    )


@pytest.fixture(scope="module")
def troupe_native(native_cluster, tmp_path_factory) -> Iterator[TroupeProcess]:
    yield from supervised(
        TroupeProcess(
            native_cluster.scheduler_kubeconfig, tmp_path_factory.mktemp("troupe-writes-native"), config=CONFIG
        )
    )


@pytest.fixture
def ns(compat_cluster, namespace_in) -> str:
    return namespace_in(compat_cluster)


class Watch:
    """`kubectl get RESOURCE -n NS --watch`: every event on the kind in the
    namespace, as (type, name, resourceVersion), collected in the background."""

    def __init__(self, cluster, resource: str, ns: str) -> None:
        template = '{.type} {.object.metadata.name} {.object.metadata.resourceVersion}{"\\n"}'
        self.proc = subprocess.Popen(
            [
                str(cluster.kubectl_path),
                f"--kubeconfig={cluster.admin_kubeconfig}",
                "get",
                resource,
                "-n",
                ns,
                "--watch",
                "--output-watch-events",
                "-o",
                f"jsonpath={template}",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        self.events: list[tuple[str, str, str]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            parts = line.split()
            if len(parts) == 3:
                self.events.append((parts[0], parts[1], parts[2]))

    def modified(self, name: str) -> int:
        """Changes of `name` since it was created (or first listed)."""
        return sum(1 for kind, n, _ in list(self.events) if kind == "MODIFIED" and n == name)

    def added(self, name: str) -> bool:
        return any(kind == "ADDED" and n == name for kind, n, _ in list(self.events))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


@dataclass
class Source:
    """A group source as the test drives it: the group object (None: Kueue),
    its pods, the kind to watch, and whether troupe's decision shows on it."""

    name: str
    resource: str
    group: dict[str, Any] | None
    pods: list[dict[str, Any]]
    sentinel: dict[str, Any]  # an object of the watched kind troupe has nothing to do with
    shows_decisions: bool = True
    counted: list[str] = field(default_factory=lambda: ["g"])  # the objects whose writes count

    @property
    def api_group(self) -> str:
        return str((self.group or {}).get("apiVersion") or "kueue.x-k8s.io/").partition("/")[0]


def source(name: str, ns: str) -> Source:
    big = {"cpu": "4"}

    def named(body: dict[str, Any], new_name: str) -> dict[str, Any]:
        return {**body, "metadata": {**body["metadata"], "name": new_name}}

    if name == "troupe":
        group = podgroup(ns, "g", 2)
        pods = [pod(ns, f"g-{i}", group="g", **big) for i in range(2)]
        return Source(name, TROUPE_PG, group, pods, named(group, "sentinel"))
    if name == "scheduler-plugins":
        group = {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": ns},
            "spec": {"minMember": 2},
        }
        pods = [member(ns, f"g-{i}", labels={SP_LABEL: "g"}, **big) for i in range(2)]
        return Source(name, SP_PG, group, pods, named(group, "sentinel"), shows_decisions=False)
    if name.startswith("volcano"):
        spec: dict[str, Any] = {"minMember": 2}
        if name == "volcano/queue":  # a field troupe does not honour: named in every message on the object
            spec["queue"] = "gpu-team"
        group = volcano_podgroup(ns, "g", spec)
        pods = [member(ns, f"g-{i}", annotations={VOLCANO_ANNOTATION: "g"}, **big) for i in range(2)]
        return Source(name, VOLCANO_PG, group, pods, named(group, "sentinel"))
    if name == "kueue":
        pods = [
            member(ns, f"g-{i}", labels={KUEUE_LABEL: "g"}, annotations={KUEUE_COUNT: "2"}, **big) for i in range(2)
        ]
        sentinel = pod(ns, "sentinel", scheduler="other-scheduler")
        return Source(name, "pods", None, pods, sentinel, counted=["g-0", "g-1"])
    if name == "native":
        group = native_podgroup(ns, "g", schedulingPolicy={"gang": {"minCount": 2}})
        pods = [worker(ns, f"g-{i}", "g", cpu="4") for i in range(2)]
        return Source(name, NATIVE_PG, group, pods, named(group, "sentinel"))
    raise AssertionError(name)


def shown(c, s: Source, ns: str, nodes: int) -> bool:
    """The object(s) say "0/<nodes> nodes are available" (where they show the decision)."""
    want = f"0/{nodes} nodes are available"
    if s.group is None:
        pods = [c.get_json("pod", "-n", ns, n) for n in s.counted]
        return all(
            any(want in x.get("message", "") for x in (p.get("status") or {}).get("conditions") or ()) for p in pods
        )
    obj = c.get_json(s.resource, "-n", ns, "g")
    status = obj.get("status") or {}
    if not s.shows_decisions:
        return bool(status.get("scheduleStartTime"))
    return any(want in x.get("message", "") for x in status.get("conditions") or ())


def decisions(troupe: TroupeProcess) -> float:
    value = troupe.metric(DECISIONS)
    assert value is not None, "troupe does not answer /metrics"
    return value


_nudges = itertools.count()


def retry_unchanged(c, troupe: TroupeProcess, ns: str, times: int) -> None:
    """`times` more attempts of the gang, each woken by a bound pod of another
    scheduler deleted from a node (it frees 100m: the 4-CPU pods still fit
    nowhere, for the same reasons)."""
    for _ in range(times):
        before = decisions(troupe)
        for _ in range(5):
            name = f"nudge-{next(_nudges)}"
            create(c, pod(ns, name, cpu="100m", scheduler="other-scheduler", node_name="n1"))
            force_delete(c, ns, name)
            try:
                wait_for(lambda b=before: decisions(troupe) > b, timeout=5, message="an attempt")
                break
            except WaitTimeout:
                continue  # deleted before troupe saw it bound: nothing was freed for it
        else:
            raise AssertionError("the gang is not tried again")


_SAMPLE = re.compile(r"^apiserver_request_total\{(.*)\}\s+(\S+)$")


def patches_received(c, group: str, resource: str, subresource: str) -> float:
    """PATCH requests the API server answered for a resource (its own
    `apiserver_request_total`, every response code), whoever sent them: a
    patch that changes nothing costs a request but makes no event."""
    total = 0.0
    for line in c.kubectl("get", "--raw", "/metrics").stdout.splitlines():
        m = _SAMPLE.match(line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        if (labels.get("verb"), labels.get("group"), labels.get("resource"), labels.get("subresource")) == (
            "PATCH",
            group,
            resource,
            subresource,
        ):
            total += float(m.group(2))
    return total


def counts(c, troupe: TroupeProcess, s: Source, watch: Watch) -> tuple[int, float, float]:
    """(changes of the counted objects, PATCHes of their kind the API server
    received, status patches troupe says it sent for groups of the source)."""
    if s.group is None:  # Kueue: its pods' conditions
        received = patches_received(c, "", "pods", "status")
    else:  # Volcano's kind has no status subresource: its status is patched on the object
        received = patches_received(c, s.api_group, "podgroups", "" if s.api_group == VOLCANO_GROUP else "status")
    sent = troupe.metric(WRITES, source=s.api_group)
    assert sent is not None
    return sum(watch.modified(n) for n in s.counted), received, sent


def delta(after: tuple[int, float, float], before: tuple[int, float, float]) -> tuple[int, int, int]:
    return (after[0] - before[0], int(after[1] - before[1]), int(after[2] - before[2]))


def measure(c, troupe: TroupeProcess, ns: str, name: str) -> dict[str, tuple[int, int, int]]:
    """Drives one source: the first decision then REPEATS unchanged attempts;
    a changed decision then REPEATS unchanged attempts. Returns what was
    counted for each stage: (changes of the objects, PATCHes the API server
    received, patches troupe sent)."""
    s = source(name, ns)
    c.kubectl("delete", "nodes", "--all", "--wait=false", check=False)
    create(c, node("n1", cpu="2"), node("n2", cpu="2"))
    watch = Watch(c, s.resource, ns)
    try:
        # The watch is running once it reports an object created after it started.
        create(c, s.sentinel)
        wait_for(lambda: watch.added("sentinel"), timeout=10, message="the watch started")
        start = counts(c, troupe, s, watch)
        create(c, *s.pods)
        if s.group is not None:
            # troupe has seen every pod (it says they wait for their group,
            # in an Event: no condition on a held pod) before the group
            # comes: no pod event changes its counts later.
            names = [p["metadata"]["name"] for p in s.pods]
            wait_for(lambda: all(events_for(c, ns, n) for n in names), timeout=30, message="the pods seen")
            create(c, s.group)
        wait_for(lambda: shown(c, s, ns, 2), timeout=30, message=f"{name}: the first decision shown")
        retry_unchanged(c, troupe, ns, REPEATS)
        first = counts(c, troupe, s, watch)

        create(c, node("n3", cpu="2"))  # a changed decision: "0/3 nodes are available"
        if s.shows_decisions:
            wait_for(lambda: shown(c, s, ns, 3), timeout=30, message=f"{name}: the changed decision shown")
        retry_unchanged(c, troupe, ns, REPEATS)
        changed = counts(c, troupe, s, watch)
        return {"first decision": delta(first, start), "changed decision": delta(changed, first)}
    finally:
        watch.close()
        c.kubectl("delete", "nodes", "--all", "--wait=false", check=False)


def expected(s: Source) -> dict[str, tuple[int, int, int]]:
    """One write per counted object per changed decision, where the object
    shows it: as many changes as PATCHes received; troupe's group patches:
    the same, none for Kueue (no group object)."""
    n = len(s.counted)
    shows = n if s.shows_decisions else 0
    group = 1 if s.group is not None else 0
    return {"first decision": (n, n, n * group), "changed decision": (shows, shows, shows * group)}


@pytest.mark.parametrize("name", ["troupe", "scheduler-plugins", "volcano", "volcano/queue", "kueue"])
def test_one_status_write_per_changed_decision(compat_cluster, troupe, ns, name):
    result = measure(compat_cluster, troupe, ns, name)
    print(f"{name}: (object changes, PATCHes received, patches sent) {result}")
    assert result == expected(source(name, ns)), result


def test_one_status_write_per_changed_decision_native(native_cluster, troupe_native, namespace_in):
    """A native scheduling.k8s.io/v1beta1 PodGroup (PodGroupInitiallyScheduled)."""
    ns = namespace_in(native_cluster)
    result = measure(native_cluster, troupe_native, ns, "native")
    print(f"native: (object changes, PATCHes received, patches sent) {result}")
    assert result == expected(source("native", ns)), result


# ------------------------------------------------------------ nominations


async def test_a_nomination_for_a_replaced_pod_is_not_written_on_its_successor(compat_cluster, ns, caplog):
    """The StatusWriter as `troupe run` builds it (the ServiceAccount's token):
    a nomination lands on the pod it was decided for; one decided for a pod
    that was deleted and created again under its name is refused by the API
    (422 on metadata.uid), quietly, and the new pod is left without one."""
    c = compat_cluster
    caplog.set_level(logging.WARNING)
    cfg = await load_configuration(str(c.scheduler_kubeconfig))
    api = client.ApiClient(cfg)
    rest = RestClient(api)
    writer = StatusWriter(rest, TokenBucket(100, 100))
    try:
        # Another scheduler's pod: troupe (if running) leaves it alone.
        create(c, pod(ns, "preemptor", scheduler="other-scheduler"))
        old = parse_pod(c.get_json("pod", "-n", ns, "preemptor"))
        writer.nominate(old, "n1")
        await writer.flush()
        assert c.get_json("pod", "-n", ns, "preemptor")["status"].get("nominatedNodeName") == "n1"

        force_delete(c, ns, "preemptor")
        create(c, pod(ns, "preemptor", scheduler="other-scheduler"))
        writer.nominate(old, "n2")  # decided for the pod that is gone
        await writer.flush()
        new = c.get_json("pod", "-n", ns, "preemptor")
        assert new["metadata"]["uid"] != old.uid
        assert not new["status"].get("nominatedNodeName"), new["status"]
        assert not [r for r in caplog.records if "status write failed" in r.getMessage()]
    finally:
        await writer.close()
        await rest.close()
        await api.close()
