"""One PodGroup status write per changed decision, for every group source.

The StatusWriter skips a write that would change nothing. Each source keeps
troupe's condition in its own vocabulary (api/sources), and what it keeps is
read back through the watch: the comparison must hold after that round trip.
Here the API server is modelled as far as it matters for that: a merge patch
applied to the stored object, the CRD's schema pruning what it does not
declare, and `metadata.generation` bumped by every change where the CRD has
no status subresource (Volcano's). The objects are re-read with the sources'
own parsers, as the watch does."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest
from kubernetes_asyncio import client

from scheduler.api import constants as C
from scheduler.api import sources
from scheduler.api.podgroup import PodGroup
from scheduler.api.records import GroupKey
from scheduler.api.sources import MemberCounts
from scheduler.core import metrics
from scheduler.runtime.kube import RestClient
from scheduler.runtime.ratelimit import TokenBucket
from scheduler.runtime.status import StatusWriter

from .builders import make_pod
from .test_status_writer import FakeAPI, api  # noqa: F401 (api is a fixture)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386, as the API server applies application/merge-patch+json."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


class Stored:
    """A group object as the API server stores it."""

    def __init__(
        self,
        body: dict[str, Any],
        status_subresource: bool,
        condition_fields: frozenset[str],
        omitempty: bool = False,
    ) -> None:
        self.body = body
        self.status_subresource = status_subresource
        self.condition_fields = condition_fields  # what the kind's schema keeps of a condition
        self.omitempty = omitempty  # a built-in kind: a field of zero value is not stored (Go's omitempty)

    def apply(self, patch: dict[str, Any]) -> None:
        before = {k: v for k, v in self.body.items() if k != "metadata"}
        if self.status_subresource:  # /status: only status changes
            patch = {"status": patch.get("status")}
        body = merge_patch(self.body, patch)
        for c in (body.get("status") or {}).get("conditions") or ():
            for k in set(c) - self.condition_fields:
                del c[k]  # pruned: not in the schema
            for k in [k for k, v in c.items() if self.omitempty and v in (0, "", None)]:
                del c[k]
        meta = body["metadata"]
        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
        if not self.status_subresource and {k: v for k, v in body.items() if k != "metadata"} != before:
            meta["generation"] += 1  # a CRD without a status subresource: every change is a new generation
        self.body = body

    def group(self) -> PodGroup:
        """What the watch delivers, in troupe's terms."""
        return sources.parse_group(copy.deepcopy(self.body))


METAV1_CONDITION = frozenset(("type", "status", "reason", "message", "observedGeneration", "lastTransitionTime"))
VOLCANO_CONDITION = frozenset(("type", "status", "reason", "message", "lastTransitionTime", "transitionID"))


def stored(source: str) -> Stored:
    meta = {"name": "g", "namespace": "ns", "uid": "uid-g", "generation": 1, "resourceVersion": "10"}
    gang = {"schedulingPolicy": {"gang": {"minCount": 2}}}
    if source == "troupe":
        body = {"apiVersion": f"{C.GROUP}/{C.VERSION}", "spec": gang}
    elif source == "jobs":  # the PodGroup troupe makes for a Job: troupe's own kind
        meta["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "uid-job", "controller": True}
        ]
        body = {"apiVersion": f"{C.GROUP}/{C.VERSION}", "spec": gang}
    elif source.startswith("native"):
        del meta["generation"]  # a native PodGroup has none (1.37)
        body = {"apiVersion": f"scheduling.k8s.io/{source.partition('/')[2]}", "spec": gang}
    elif source == "scheduler-plugins":
        body = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "spec": {"minMember": 2}}
    elif source == "volcano":
        body = {"apiVersion": "scheduling.volcano.sh/v1beta1", "spec": {"minMember": 2}}
    elif source == "volcano/queue":  # a field troupe does not honour: named in every message
        body = {"apiVersion": "scheduling.volcano.sh/v1beta1", "spec": {"minMember": 2, "queue": "gpu-team"}}
    else:
        raise AssertionError(source)
    body = {"kind": "PodGroup", "metadata": meta, **body}
    if source.startswith("volcano"):
        return Stored(body, status_subresource=False, condition_fields=VOLCANO_CONDITION)
    if source == "scheduler-plugins":  # its CRD has no conditions at all
        return Stored(body, status_subresource=True, condition_fields=frozenset())
    if source.startswith("native"):  # a built-in kind: metav1.Condition, observedGeneration omitempty
        return Stored(body, status_subresource=True, condition_fields=METAV1_CONDITION, omitempty=True)
    return Stored(body, status_subresource=True, condition_fields=METAV1_CONDITION)


SOURCES = ["troupe", "jobs", "native/v1beta1", "native/v1alpha3", "native/v1alpha2", "scheduler-plugins", "volcano"]
SOURCES += ["volcano/queue"]
# The sources whose object shows troupe's decision (scheduler-plugins' CRD
# has no conditions: only its first report, scheduleStartTime, is written).
SHOW_DECISIONS = [s for s in SOURCES if s != "scheduler-plugins"]


@pytest.fixture
async def world(api):
    """(the stored object's holder, the writer): the writer reads the group's
    member counts from the stored object as it is when the write runs."""
    holder: dict[str, Stored] = {}
    api_client = client.ApiClient(client.Configuration(host=api.url))
    rest = RestClient(api_client)

    def members(_key: GroupKey) -> tuple[PodGroup | None, MemberCounts]:
        return holder["g"].group(), MemberCounts(pods=2)

    w = StatusWriter(rest, TokenBucket(1000, 1000), workers=2, members=members)
    yield holder, w
    await w.close()
    await rest.close()
    await api_client.close()


def writes(api: FakeAPI) -> list[dict[str, Any]]:
    return [r for r in api.requests if r["method"] == "PATCH"]


async def decide(api: FakeAPI, obj: Stored, writer: StatusWriter, status: str, reason: str, message: str) -> None:
    """One decision on the group as the watch shows it, written, and the
    written object delivered back (the watch catching up)."""
    seen = len(writes(api))
    writer.group_condition(obj.group(), status, reason, message)
    await writer.flush()
    for r in writes(api)[seen:]:
        obj.apply(r["body"])


WAITING = "0/2 nodes are available: 2 Insufficient cpu."


@pytest.mark.parametrize("source", SOURCES)
async def test_the_same_decision_three_times_is_one_write(api, world, source):
    holder, writer = world
    obj = holder["g"] = stored(source)
    for _ in range(3):
        await decide(api, obj, writer, "False", C.REASON_UNSCHEDULABLE, WAITING)
    assert len(writes(api)) == 1, [w["body"] for w in writes(api)]


@pytest.mark.parametrize("source", SOURCES)
async def test_the_same_decision_while_the_watch_lags_is_one_write(api, world, source):
    holder, writer = world
    obj = holder["g"] = stored(source)
    stale = obj.group()
    for _ in range(3):
        writer.group_condition(stale, "False", C.REASON_UNSCHEDULABLE, WAITING)
        await writer.flush()
    assert len(writes(api)) == 1


@pytest.mark.parametrize("source", SOURCES)
async def test_one_write_per_changed_decision(api, world, source):
    """Each decision twice; every change of message, reason or status is
    written once where the object shows it."""
    holder, writer = world
    obj = holder["g"] = stored(source)
    decisions = [
        ("False", C.REASON_UNSCHEDULABLE, WAITING),
        ("False", C.REASON_UNSCHEDULABLE, "0/3 nodes are available: 3 Insufficient cpu."),
        ("False", C.REASON_SCHEDULER_ERROR, "PodGroup ns/g: bad"),
        ("True", C.REASON_SCHEDULED, "2 pod(s) placed"),
    ]
    for d in decisions:
        for _ in range(2):
            await decide(api, obj, writer, *d)
    expected = len(decisions) if source in SHOW_DECISIONS else 1
    assert len(writes(api)) == expected, [w["body"] for w in writes(api)]
    if source in SHOW_DECISIONS:  # and what the object shows, read back, is the last decision
        last = obj.group().condition(C.POD_GROUP_SCHEDULED)
        assert last is not None and (last.status, last.reason, last.message) == ("True", "Scheduled", decisions[-1][2])


@pytest.mark.parametrize("source", SHOW_DECISIONS)
async def test_a_disruption_is_written_once(api, world, source):
    holder, writer = world
    obj = holder["g"] = stored(source)
    await decide(api, obj, writer, "True", C.REASON_SCHEDULED, "2 pod(s) placed")
    for _ in range(3):
        seen = len(writes(api))
        writer.group_disrupted(obj.group(), "preempted by PodGroup ns/high, which has a higher priority")
        await writer.flush()
        for r in writes(api)[seen:]:
            obj.apply(r["body"])
    assert len(writes(api)) == 2


async def test_a_volcano_group_keeps_troupes_reason_and_message_through_its_vocabulary():
    """What troupe reads back of a Volcano PodGroup is what it wrote: the reason
    (SchedulerError stays SchedulerError; Volcano's NotEnoughResources is
    troupe's Unschedulable) and the message without the notes troupe appends
    on the object (fields troupe does not honour)."""
    obj = stored("volcano/queue")
    group = obj.group()
    assert group.ignored  # the queue: named in every message on the object
    for reason, theirs in (
        (C.REASON_UNSCHEDULABLE, "NotEnoughResources"),
        (C.REASON_SCHEDULER_ERROR, C.REASON_SCHEDULER_ERROR),
    ):
        condition = {"type": C.POD_GROUP_SCHEDULED, "status": "False", "reason": reason, "message": "why"}
        status = sources.export_status(group, [condition], MemberCounts(), "2026-01-01T00:00:00Z")
        (unschedulable,) = status["conditions"]
        assert unschedulable["reason"] == theirs and unschedulable["message"] != "why"  # the notes are there
        read = sources.parse_group({**obj.body, "status": status}).condition(C.POD_GROUP_SCHEDULED)
        assert read is not None and (read.status, read.reason, read.message) == ("False", reason, "why")


@pytest.mark.parametrize("source", SOURCES)
async def test_patches_sent_are_counted_by_source(api, world, source):
    holder, writer = world
    obj = holder["g"] = stored(source)
    api_group = obj.body["apiVersion"].partition("/")[0]
    counter = metrics.GROUP_STATUS_WRITES.labels(source=api_group, write="conditions")
    before = counter._value.get()
    for _ in range(3):
        await decide(api, obj, writer, "False", C.REASON_UNSCHEDULABLE, WAITING)
    assert counter._value.get() - before == len(writes(api)) == 1


async def test_a_kueue_groups_pods_get_their_condition_once(api, world):
    """A Kueue group has no object: nothing is written for the group, and each
    pod's condition once per changed message."""
    _, writer = world
    pods = [
        replace(make_pod(f"q-{i}", namespace="ns", uid=f"uid-q-{i}", resource_version="5"), group_size=2)
        for i in range(2)
    ]
    group = sources.implied_group(GroupKey("ns", "q", "kueue.x-k8s.io"), pods, "2026-01-01T00:00:00Z")
    assert group is not None and group.min_count == 2
    for message in (WAITING, WAITING, WAITING, "0/3 nodes are available: 3 Insufficient cpu."):
        writer.group_condition(group, "False", C.REASON_UNSCHEDULABLE, message)
        for p in pods:
            writer.pod_unschedulable(p, message)
        await writer.flush()
    assert sorted(r["path"] for r in writes(api)) == [f"/api/v1/namespaces/ns/pods/q-{i}/status" for i in (0, 0, 1, 1)]
