"""StatusWriter's preemption writes against a small local HTTP server: the exact
requests (victim condition patch, delete with a uid precondition, Events,
PodGroup conditions), their order, and how it takes 404 / 409 / 500 answers.
This tests the client's logic; the real API server is in
tests/integration/test_preemption_io.py."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from aiohttp import web
from kubernetes_asyncio import client

from scheduler.api import constants as C
from scheduler.api.podgroup import PodGroup, parse_podgroup
from scheduler.runtime.kube import RestClient
from scheduler.runtime.ratelimit import TokenBucket
from scheduler.runtime.status import MERGE_PATCH, STRATEGIC_MERGE_PATCH, StatusWriter

from .builders import make_pod, podgroup_body

POD_PATH = "/api/v1/namespaces/team/pods/victim"
GROUP_PATH = f"/apis/{C.GROUP}/{C.VERSION}/namespaces/team/{C.PODGROUP_PLURAL}/low/status"
EVENTS_PATH = "/apis/events.k8s.io/v1/namespaces/team/events"


class FakeAPI:
    """Records every request; answers from `script[(method, path)]` (a list of
    statuses, the last one repeated), 200 otherwise (201 for a POST)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.script: dict[tuple[str, str], list[int]] = {}
        self.causes: list[dict[str, str]] = []  # details.causes of error answers
        self.bodies: dict[str, dict[str, Any]] = {}  # GET path -> the object answered
        self.delay = 0.0  # seconds each answer is held
        self.hold: asyncio.Event | None = None  # answers wait for it while it is set here
        self.arrived = asyncio.Event()  # set by every request
        self.in_flight = 0
        self.max_in_flight = 0  # the most requests unanswered at once
        self._runner: web.AppRunner | None = None
        self.url = ""

    def calls(self, method: str | None = None) -> list[tuple[str, str]]:
        return [(r["method"], r["path"]) for r in self.requests if method is None or r["method"] == method]

    async def _handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        self.requests.append(
            {
                "method": request.method,
                "path": request.path,
                "content_type": request.headers.get("Content-Type"),
                "body": json.loads(raw) if raw else None,
            }
        )
        self.arrived.set()
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
            if self.hold is not None:
                await self.hold.wait()
        finally:
            self.in_flight -= 1
        if request.method == "GET" and request.path in self.bodies:
            return web.json_response(self.bodies[request.path])
        answers = self.script.get((request.method, request.path))
        n = sum(1 for r in self.requests if (r["method"], r["path"]) == (request.method, request.path))
        status = answers[min(n, len(answers)) - 1] if answers else (201 if request.method == "POST" else 200)
        headers = {"Retry-After": "0"} if status == 429 else {}
        if status >= 400:
            payload = {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "code": status,
                "message": "scripted",
                "details": {"causes": self.causes},
            }
        else:
            payload = {"kind": "Status", "apiVersion": "v1", "status": "Success"}
        return web.json_response(payload, status=status, headers=headers)

    async def start(self) -> FakeAPI:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
async def api():
    s = await FakeAPI().start()
    yield s
    await s.stop()


@pytest.fixture
async def writer(api):
    api_client = client.ApiClient(client.Configuration(host=api.url))
    rest = RestClient(api_client)
    w = StatusWriter(rest, TokenBucket(1000, 1000), workers=2)
    yield w
    await w.close()
    await rest.close()
    await api_client.close()


def victim():
    return make_pod("victim", namespace="team", uid="uid-victim", node_name="n1", priority=1)


def group(conditions: list[dict[str, Any]] | None = None) -> PodGroup:
    body = podgroup_body("low", 2, namespace="team")
    if conditions is not None:
        body["status"] = {"conditions": conditions}
    return parse_podgroup(body)


SCHEDULED = {
    "type": C.POD_GROUP_SCHEDULED,
    "status": "True",
    "reason": C.REASON_SCHEDULED,
    "message": "all bound",
    "observedGeneration": 1,
    "lastTransitionTime": "2026-01-01T00:00:00Z",
}
MESSAGE = "troupe-scheduler: preempting to accommodate a higher priority pod"


# -------------------------------------------------------------- victim pods


async def test_a_victim_gets_its_condition_then_a_delete_with_its_uid_then_an_event(api, writer):
    writer.preempt_pod(victim(), MESSAGE)
    await writer.flush()
    assert api.calls() == [("PATCH", f"{POD_PATH}/status"), ("DELETE", POD_PATH), ("POST", EVENTS_PATH)]
    patch, delete, event = api.requests
    assert patch["content_type"] == STRATEGIC_MERGE_PATCH
    (cond,) = patch["body"]["status"]["conditions"]
    assert {k: v for k, v in cond.items() if k != "lastTransitionTime"} == {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "PreemptionByScheduler",
        "message": MESSAGE,
    }
    assert cond["lastTransitionTime"].endswith("Z")
    assert patch["body"]["metadata"] == {"uid": "uid-victim"}
    # Only this incarnation, and its own grace period (no gracePeriodSeconds).
    assert delete["body"] == {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "uid-victim"}}
    assert delete["content_type"] == "application/json"
    ev = event["body"]
    assert (ev["reason"], ev["type"], ev["note"], ev["action"]) == ("Preempted", "Normal", MESSAGE, "Preempting")
    assert ev["regarding"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": "team",
        "name": "victim",
        "uid": "uid-victim",
    }


@pytest.mark.parametrize("status", [404, 409])
async def test_a_victim_already_gone_or_replaced_at_delete_is_done(api, writer, caplog, status):
    api.script[("DELETE", POD_PATH)] = [status]
    with caplog.at_level(logging.WARNING):
        writer.preempt_pod(victim(), MESSAGE)
        await writer.flush()
    # Sent once, not retried, nothing logged, and no Preempted event for a pod we did not delete.
    assert api.calls() == [("PATCH", f"{POD_PATH}/status"), ("DELETE", POD_PATH)]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("status", [404, 409])
async def test_a_victim_gone_before_its_condition_is_not_deleted(api, writer, status):
    api.script[("PATCH", f"{POD_PATH}/status")] = [status]
    writer.preempt_pod(victim(), MESSAGE)
    await writer.flush()
    assert api.calls() == [("PATCH", f"{POD_PATH}/status")]


async def test_a_patch_refused_for_its_uid_means_the_name_is_another_pods_now(api, writer, caplog):
    """The real API answers 422 (metadata.uid is immutable) to a status patch
    carrying an older uid (tests/integration/test_preemption_io.py)."""
    api.script[("PATCH", f"{POD_PATH}/status")] = [422]
    api.causes = [{"reason": "FieldValueInvalid", "message": "field is immutable", "field": "metadata.uid"}]
    with caplog.at_level(logging.WARNING):
        writer.preempt_pod(victim(), MESSAGE)
        await writer.flush()
    assert api.calls() == [("PATCH", f"{POD_PATH}/status")]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_another_422_is_a_failure(api, writer, caplog):
    api.script[("PATCH", f"{POD_PATH}/status")] = [422]
    api.causes = [{"reason": "FieldValueTooLong", "field": "status.conditions[0].message"}]
    with caplog.at_level(logging.WARNING):
        writer.preempt_pod(victim(), MESSAGE)
        await writer.flush()
    assert api.calls() == [("PATCH", f"{POD_PATH}/status")]
    assert any("status write failed: 422" in r.getMessage() for r in caplog.records)


async def test_a_failed_delete_is_logged_and_posts_no_event(api, writer, caplog):
    api.script[("DELETE", POD_PATH)] = [403]
    with caplog.at_level(logging.WARNING):
        writer.preempt_pod(victim(), MESSAGE)
        await writer.flush()
    assert api.calls() == [("PATCH", f"{POD_PATH}/status"), ("DELETE", POD_PATH)]
    assert any("status write failed: 403" in r.getMessage() for r in caplog.records)


async def test_a_write_failed_by_an_outage_is_written_again_with_one_log_line(api, writer, caplog):
    """503 (etcd away): the write is queued again after a pause, not dropped, and the
    log says it once (outage.STATUS), not once per write."""
    api.script[("DELETE", POD_PATH)] = [503, 200]
    with caplog.at_level(logging.INFO):
        writer.preempt_pod(victim(), MESSAGE)
        await writer.flush()
    assert api.calls("DELETE") == [("DELETE", POD_PATH), ("DELETE", POD_PATH)]
    assert api.calls("POST") == [("POST", EVENTS_PATH)]
    messages = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    warnings = [m for m in messages if "unreachable" in m]
    assert len(warnings) == 1 and warnings[0].startswith("API server unreachable (status writes): 503"), messages
    assert len([m for m in messages if "reachable again (status writes)" in m]) == 1, messages
    assert not [m for m in messages if "status write failed" in m], messages


async def test_a_throttled_delete_is_sent_again(api, writer):
    api.script[("DELETE", POD_PATH)] = [429, 200]
    writer.preempt_pod(victim(), MESSAGE)
    await writer.flush()
    assert api.calls("DELETE") == [("DELETE", POD_PATH), ("DELETE", POD_PATH)]
    assert api.calls("POST") == [("POST", EVENTS_PATH)]


async def test_the_pods_other_writes_do_not_cancel_its_eviction(api, writer):
    pod = victim()
    writer.preempt_pod(pod, MESSAGE)
    # Before any worker runs: a PodScheduled write of the same pod, and the
    # writer told to forget the pod (as on bind or on a DELETED event).
    writer.pod_unschedulable(pod, "0/1 nodes are available")
    writer.forget_pod(pod.uid)
    writer.pod_unschedulable(pod, "0/2 nodes are available")
    await writer.flush()
    assert ("DELETE", POD_PATH) in api.calls()
    reasons = [c["reason"] for r in api.requests if r["method"] == "PATCH" for c in (r["body"]["status"]["conditions"])]
    assert sorted(reasons) == ["PreemptionByScheduler", "Unschedulable"]


# ------------------------------------------------------------ victim groups


async def test_a_victim_group_gets_disruption_target_next_to_its_scheduled_condition_and_an_event(api, writer):
    writer.group_disrupted(group([SCHEDULED]), "preempted by PodGroup team/high")
    await writer.flush()
    patches = [r for r in api.requests if r["method"] == "PATCH"]
    assert [r["path"] for r in patches] == [GROUP_PATH]
    assert patches[0]["content_type"] == MERGE_PATCH
    scheduled, disrupted = patches[0]["body"]["status"]["conditions"]
    assert scheduled == SCHEDULED
    assert {k: v for k, v in disrupted.items() if k != "lastTransitionTime"} == {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "PreemptionByScheduler",
        "message": "preempted by PodGroup team/high",
        "observedGeneration": 1,
    }
    (event,) = [r["body"] for r in api.requests if r["method"] == "POST"]
    assert (event["reason"], event["type"], event["note"]) == ("Preempted", "Normal", "preempted by PodGroup team/high")
    assert event["regarding"]["kind"] == "PodGroup" and event["regarding"]["name"] == "low"


async def test_a_group_marked_already_is_not_patched_again(api, writer):
    marked = dict(SCHEDULED, type=C.DISRUPTION_TARGET, reason=C.REASON_PREEMPTION_BY_SCHEDULER, message="m")
    writer.group_disrupted(group([SCHEDULED, marked]), "m")
    await writer.flush()
    assert api.calls("PATCH") == []


def _types(request: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in request["body"]["status"]["conditions"]}


async def test_a_group_condition_queued_before_the_disruption_is_not_lost(api, writer):
    """Both writes have one key, so the second replaces the first in the queue;
    it must carry the first's condition, which the cache does not show yet."""
    stale = group([SCHEDULED])
    writer.group_condition(stale, "False", C.REASON_UNSCHEDULABLE, "waiting")
    writer.group_disrupted(stale, "preempted")
    await writer.flush()
    last = [r for r in api.requests if r["method"] == "PATCH"][-1]
    assert _types(last) == {
        C.POD_GROUP_SCHEDULED: ("False", C.REASON_UNSCHEDULABLE),
        C.DISRUPTION_TARGET: ("True", C.REASON_PREEMPTION_BY_SCHEDULER),
    }


async def test_a_group_condition_after_the_disruption_keeps_it_while_the_cache_lags(api, writer):
    stale = group([SCHEDULED])
    writer.group_disrupted(stale, "preempted")
    await writer.flush()
    writer.group_condition(stale, "False", C.REASON_UNSCHEDULABLE, "waiting")  # the watch has not caught up
    await writer.flush()
    patches = [r for r in api.requests if r["method"] == "PATCH"]
    assert len(patches) == 2
    assert _types(patches[1]) == {
        C.POD_GROUP_SCHEDULED: ("False", C.REASON_UNSCHEDULABLE),
        C.DISRUPTION_TARGET: ("True", C.REASON_PREEMPTION_BY_SCHEDULER),
    }
    # Once the cache shows it, the cache is the reference again.
    seen = group([patches[1]["body"]["status"]["conditions"][0], patches[1]["body"]["status"]["conditions"][1]])
    writer.group_condition(seen, "False", C.REASON_UNSCHEDULABLE, "waiting")
    await writer.flush()
    assert len(api.calls("PATCH")) == 2
    assert writer._group_conditions == {}


async def test_a_failed_group_write_is_written_again_on_the_next_call(api, writer):
    api.script[("PATCH", GROUP_PATH)] = [422, 200]  # refused (an outage's 5xx is retried by the writer itself)
    g = group([SCHEDULED])
    writer.group_condition(g, "False", C.REASON_UNSCHEDULABLE, "waiting")
    await writer.flush()
    writer.group_condition(g, "False", C.REASON_UNSCHEDULABLE, "waiting")
    await writer.flush()
    assert api.calls("PATCH") == [("PATCH", GROUP_PATH), ("PATCH", GROUP_PATH)]


async def test_an_unchanged_group_condition_is_not_written_twice(api, writer):
    g = group([SCHEDULED])
    writer.group_condition(g, "False", C.REASON_UNSCHEDULABLE, "waiting")
    await writer.flush()
    writer.group_condition(g, "False", C.REASON_UNSCHEDULABLE, "waiting")  # the cache still lags
    await writer.flush()
    writer.group_condition(g, "True", C.REASON_SCHEDULED, "all bound")  # what the cache shows: changed from waiting
    await writer.flush()
    assert len(api.calls("PATCH")) == 2


async def test_status_writes_wait_while_pods_are_being_bound_at_most_the_delay(api, monkeypatch):
    from scheduler.runtime import status as status_module

    monkeypatch.setattr(status_module, "MAX_WRITE_DELAY_SECONDS", 0.6)
    binding = True
    api_client = client.ApiClient(client.Configuration(host=api.url))
    rest = RestClient(api_client)
    w = StatusWriter(rest, TokenBucket(1000, 1000), workers=2, binding=lambda _s: binding)
    try:
        start = asyncio.get_running_loop().time()
        w.group_condition(group(), "True", C.REASON_SCHEDULED, "all bound")
        await asyncio.sleep(0.3)
        assert api.calls("PATCH") == []  # binds first
        await w.flush(5)
        assert api.calls("PATCH") == [("PATCH", GROUP_PATH)]
        assert asyncio.get_running_loop().time() - start >= 0.55  # written once the delay ran out
        binding = False
        w.group_condition(group(), "False", C.REASON_UNSCHEDULABLE, "no room")
        await w.flush(5)
        assert asyncio.get_running_loop().time() - start < 1.0  # not binding: at once
        assert len(api.calls("PATCH")) == 2
    finally:
        await w.close()
        await rest.close()
        await api_client.close()


async def test_status_writes_go_once_binding_has_paused_briefly(api):
    """A bind ended 0.5 s ago and none is in flight: binding has paused
    (QUIET_SECONDS), so the condition goes out now, not after the delay."""
    from scheduler.runtime import status as status_module

    last_bind_ended = 0.5
    api_client = client.ApiClient(client.Configuration(host=api.url))
    rest = RestClient(api_client)
    w = StatusWriter(rest, TokenBucket(1000, 1000), workers=2, binding=lambda within: last_bind_ended < within)
    try:
        assert last_bind_ended > status_module.QUIET_SECONDS
        start = asyncio.get_running_loop().time()
        w.group_condition(group(), "True", C.REASON_SCHEDULED, "all bound")
        await w.flush(5)
        assert api.calls("PATCH") == [("PATCH", GROUP_PATH)]
        assert asyncio.get_running_loop().time() - start < 1.0
    finally:
        await w.close()
        await rest.close()
        await api_client.close()


async def test_preemption_does_not_wait_for_binds(api, monkeypatch):
    """A victim's condition and deletion go out while pods are being bound
    (a higher-priority pod waits for them); a PodGroup condition queued
    earlier still waits."""
    from scheduler.runtime import status as status_module

    monkeypatch.setattr(status_module, "MAX_WRITE_DELAY_SECONDS", 2.0)
    api_client = client.ApiClient(client.Configuration(host=api.url))
    rest = RestClient(api_client)
    w = StatusWriter(rest, TokenBucket(1000, 1000), workers=2, binding=lambda _s: True)
    try:
        w.group_condition(group(), "True", C.REASON_SCHEDULED, "all bound")
        w.preempt_pod(victim(), MESSAGE)
        await asyncio.sleep(0.5)
        assert [c for c in api.calls() if c[0] != "POST"] == [("PATCH", f"{POD_PATH}/status"), ("DELETE", POD_PATH)]
        await w.flush(5)
        assert ("PATCH", GROUP_PATH) in api.calls()  # once its delay ran out
    finally:
        await w.close()
        await rest.close()
        await api_client.close()


# ------------------------------------------------------------ nominations

NOMINEE_PATH = "/api/v1/namespaces/team/pods/preemptor"


def preemptor():
    return make_pod("preemptor", namespace="team", uid="uid-preemptor", priority=100)


@pytest.mark.parametrize("node", ["n1", ""])
async def test_a_nomination_is_written_for_that_incarnation_of_the_pod_only(api, writer, node):
    """nominatedNodeName (or its clearing) carries the pod's uid: the API
    refuses it if the name belongs to another pod by then."""
    writer.nominate(preemptor(), node)
    await writer.flush()
    [patch] = api.requests
    assert (patch["method"], patch["path"], patch["content_type"]) == (
        "PATCH",
        NOMINEE_PATH + "/status",
        STRATEGIC_MERGE_PATCH,
    )
    assert patch["body"] == {"metadata": {"uid": "uid-preemptor"}, "status": {"nominatedNodeName": node}}


@pytest.mark.parametrize("status", [404, 409, 422])
async def test_a_nomination_for_a_pod_gone_or_replaced_is_dropped_quietly(api, writer, caplog, status):
    """404: gone; 422 on metadata.uid (what the real API answers: see
    tests/integration/test_status_writes.py) or 409: another pod has the
    name now. Sent once, nothing logged."""
    api.script[("PATCH", NOMINEE_PATH + "/status")] = [status]
    api.causes = [{"reason": "FieldValueInvalid", "message": "field is immutable", "field": "metadata.uid"}]
    with caplog.at_level(logging.WARNING):
        writer.nominate(preemptor(), "n1")
        await writer.flush()
    assert api.calls() == [("PATCH", NOMINEE_PATH + "/status")]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


# ---------------------------------------------- conditions never made stale

WAITING_PATH = "/api/v1/namespaces/team/pods/waiting"


def waiting(version: str = "5"):
    return make_pod("waiting", namespace="team", uid="uid-waiting", resource_version=version)


async def test_a_pod_condition_is_conditional_on_the_pod_being_as_it_was_seen(api, writer):
    writer.pod_unschedulable(waiting("5"), "0/1 nodes are available")
    await writer.flush()
    [patch] = api.requests
    assert (patch["method"], patch["path"]) == ("PATCH", WAITING_PATH + "/status")
    assert patch["body"]["metadata"] == {"uid": "uid-waiting", "resourceVersion": "5"}
    assert patch["body"]["status"]["conditions"][0]["status"] == "False"


async def test_a_pod_bound_before_its_condition_lands_is_left_scheduled(api, writer, caplog):
    # The bind changed the pod: the API refuses the patch (409); read again,
    # the pod is bound, so the condition is not written.
    api.script[("PATCH", WAITING_PATH + "/status")] = [409]
    api.bodies[WAITING_PATH] = {
        "metadata": {"name": "waiting", "namespace": "team", "uid": "uid-waiting", "resourceVersion": "6"},
        "spec": {"nodeName": "n1"},
    }
    with caplog.at_level(logging.INFO, logger="scheduler.runtime.status"):
        writer.pod_unschedulable(waiting("5"), "0/1 nodes are available")
        await writer.flush()
    assert api.calls() == [("PATCH", WAITING_PATH + "/status"), ("GET", WAITING_PATH)]
    assert "pod team/waiting: bound or gone before its condition was written; not written" in caplog.text


async def test_a_pod_changed_but_still_waiting_gets_its_condition_under_the_new_version(api, writer):
    api.script[("PATCH", WAITING_PATH + "/status")] = [409, 200]
    api.bodies[WAITING_PATH] = {
        "metadata": {"name": "waiting", "namespace": "team", "uid": "uid-waiting", "resourceVersion": "6"},
        "spec": {},
    }
    writer.pod_unschedulable(waiting("5"), "0/1 nodes are available")
    await writer.flush()
    patches = [r for r in api.requests if r["method"] == "PATCH"]
    assert [p["body"]["metadata"]["resourceVersion"] for p in patches] == ["5", "6"]


async def test_a_group_scheduled_while_its_unschedulable_write_is_in_flight_ends_scheduled(api, writer):
    # Writes to one PodGroup never run at once: the later one is sent after
    # the earlier one's answer, so the last to land is the last decided.
    api.hold = asyncio.Event()  # the API answers nothing until it is set
    pg = group()
    writer.group_condition(pg, "False", C.REASON_UNSCHEDULABLE, "0/2 nodes are available")
    await asyncio.wait_for(api.arrived.wait(), timeout=5)  # the first write is in flight, unanswered
    writer.group_condition(pg, "True", C.REASON_SCHEDULED, "2 pod(s) placed")
    api.hold.set()
    await writer.flush()
    sent = [r["body"]["status"]["conditions"][0]["status"] for r in api.requests if r["method"] == "PATCH"]
    assert sent == ["False", "True"]
    assert api.max_in_flight == 1


async def test_a_pod_that_changed_on_every_try_gets_the_same_condition_at_its_next_attempt(api, writer):
    api.script[("PATCH", WAITING_PATH + "/status")] = [409, 409, 409, 200]
    api.bodies[WAITING_PATH] = {
        "metadata": {"name": "waiting", "namespace": "team", "uid": "uid-waiting", "resourceVersion": "6"},
        "spec": {},
    }
    writer.pod_unschedulable(waiting("5"), "0/1 nodes are available")
    await writer.flush()
    assert len(api.calls("PATCH")) == 3  # POD_CONDITION_TRIES, all refused
    writer.pod_unschedulable(waiting("6"), "0/1 nodes are available")  # not deduplicated away
    await writer.flush()
    assert len(api.calls("PATCH")) == 4


async def test_events_wait_behind_queued_conditions(api, writer):
    assert writer.events.behind() is False  # the writer holds its Events back while it writes
    pod = make_pod("p", namespace="team", uid="uid-p")
    writer.pod_unschedulable(pod, "0/1 nodes are available")
    assert writer.events.behind() is True
    await writer.flush(5)
    assert writer.events.behind() is False


async def test_a_held_pod_gets_no_condition_and_a_stale_unschedulable_one_is_withdrawn(api, writer):
    """pod_waiting (a gang short of minCount, a missing group): no condition,
    as upstream; an Unschedulable one from an earlier cycle (the cache's or
    troupe's own) is deleted, under the pod's resourceVersion, so no
    autoscaler provisions for the pod. A SchedulingGated one is the API
    server's and stays."""
    from dataclasses import replace

    writer.pod_waiting(waiting("5"), "waiting for pods of PodGroup team/g: minCount is 4")
    writer.pod_waiting(replace(waiting("5"), unscheduled_reason="SchedulingGated"), "waiting for scheduling gates")
    await writer.flush()
    assert api.requests == []
    writer.pod_waiting(replace(waiting("5"), unscheduled_reason="Unschedulable"), "waiting for pods")
    await writer.flush()
    [patch] = api.requests
    assert (patch["method"], patch["path"]) == ("PATCH", WAITING_PATH + "/status")
    assert patch["body"] == {
        "metadata": {"uid": "uid-waiting", "resourceVersion": "5"},
        "status": {"conditions": [{"type": "PodScheduled", "$patch": "delete"}]},
    }
    # Withdrawn once: the cache still showing it does not write again.
    writer.pod_waiting(replace(waiting("6"), unscheduled_reason="Unschedulable"), "waiting for pods")
    await writer.flush()
    assert len(api.requests) == 1
    # troupe's own Unschedulable, then held again: withdrawn.
    writer.pod_unschedulable(waiting("7"), "0/1 nodes are available")
    writer.pod_waiting(waiting("7"), "waiting for pods")
    await writer.flush()
    assert [r["body"]["status"]["conditions"][0].get("$patch") for r in api.requests[1:]] == ["delete"]
