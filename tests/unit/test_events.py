"""EventRecorder against a small local HTTP server: Events are best-effort
(bounded queue, dropped and counted when full), wait while pods are being
bound, are not repeated, are aggregated per PodGroup past AGGREGATE_AFTER,
and a failing API is logged once, not once per Event. Also the token bucket's
priority for binds."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from kubernetes_asyncio import client

from scheduler.api import constants as C
from scheduler.runtime import events as ev
from scheduler.runtime import outage
from scheduler.runtime.events import AGGREGATE_AFTER, EventRecorder
from scheduler.runtime.kube import RestClient
from scheduler.runtime.ratelimit import TokenBucket

from .builders import make_pod
from .test_status_writer import EVENTS_PATH, FakeAPI, api  # noqa: F401 - `api` is a fixture used here


@pytest.fixture
async def rest(api):
    api_client = client.ApiClient(client.Configuration(host=api.url))
    r = RestClient(api_client)
    yield r
    await r.close()
    await api_client.close()


@pytest.fixture
async def recorders():
    made: list[EventRecorder] = []
    yield made
    for r in made:
        await r.close()


def posted(api: FakeAPI) -> list[dict]:
    return [r["body"] for r in api.requests if r["method"] == "POST" and r["path"] == EVENTS_PATH]


def pod(name: str, group: str | None = None):
    return make_pod(name, namespace="team", uid=f"uid-{name}", group=group)


async def test_a_full_queue_drops_new_events_counts_them_and_logs_once(api, rest, recorders, caplog):
    busy = True
    r = EventRecorder(rest, TokenBucket(1000, 1000), binding=lambda _s: busy, max_queued=3)
    recorders.append(r)
    before = ev.DROPPED._value.get()
    with caplog.at_level(logging.WARNING, logger="scheduler.runtime.events"):
        for i in range(8):
            r.pod_event(pod(f"p{i}"), "Normal", C.EVENT_SCHEDULED, f"Successfully assigned team/p{i} to n", "Binding")
    assert r.queued == 3
    assert ev.DROPPED._value.get() - before == 5
    assert len([m for m in caplog.messages if "dropping new ones" in m]) == 1
    busy = False
    await r.flush(5)
    assert [e["regarding"]["name"] for e in posted(api)] == ["p0", "p1", "p2"]


async def test_events_wait_while_pods_are_being_bound_then_go_at_full_rate(api, rest, recorders):
    busy = True
    r = EventRecorder(rest, TokenBucket(1000, 1000), binding=lambda _s: busy)
    recorders.append(r)
    for i in range(30):
        r.pod_event(pod(f"p{i}"), "Warning", C.EVENT_FAILED_SCHEDULING, f"no room {i}", "Scheduling")
    await asyncio.sleep(1.0)
    # BUSY_EVENTS_PER_SECOND (5) with a burst of 1: about 5 in the first second, never all 30.
    assert 2 <= len(posted(api)) <= 8
    busy = False
    start = time.monotonic()
    await r.flush(5)
    assert len(posted(api)) == 30
    assert time.monotonic() - start < 1.0


async def test_events_trickle_while_conditions_are_being_written_then_go_at_full_rate(api, rest, recorders):
    writing = True
    r = EventRecorder(rest, TokenBucket(1000, 1000))
    r.behind = lambda: writing
    recorders.append(r)
    for i in range(30):
        r.pod_event(pod(f"p{i}"), "Normal", C.EVENT_SCHEDULED, f"Successfully assigned team/p{i} to n", "Binding")
    await asyncio.sleep(1.0)
    assert 2 <= len(posted(api)) <= 8  # no bind in flight: only the status writer holds them back
    writing = False
    await r.flush(5)
    assert len(posted(api)) == 30


async def test_the_same_note_on_the_same_object_is_posted_once(api, rest, recorders):
    r = EventRecorder(rest, TokenBucket(1000, 1000))
    recorders.append(r)
    p = pod("p")
    for _ in range(3):
        r.pod_event(p, "Warning", C.EVENT_FAILED_SCHEDULING, "0/3 nodes are available", "Scheduling")
    r.pod_event(p, "Warning", C.EVENT_FAILED_SCHEDULING, "0/4 nodes are available", "Scheduling")
    await r.flush(5)
    assert [e["note"] for e in posted(api)] == ["0/3 nodes are available", "0/4 nodes are available"]


async def test_scheduled_events_of_a_podgroup_are_aggregated_past_the_first_ten(api, rest, recorders):
    busy = True  # as during a gang's binds: the aggregate waits, and counts every pod bound meanwhile
    r = EventRecorder(rest, TokenBucket(1000, 1000), binding=lambda _s: busy)
    recorders.append(r)
    for i in range(25):
        r.pod_event(pod(f"g-{i}", group="g"), "Normal", C.EVENT_SCHEDULED, f"Successfully assigned team/g-{i}", "")
    for i in range(3):  # pods of no group always get their own
        r.pod_event(pod(f"lone-{i}"), "Normal", C.EVENT_SCHEDULED, f"Successfully assigned team/lone-{i}", "")
    busy = False
    await r.flush(5)
    events = posted(api)
    on_pods = sorted(e["regarding"]["name"] for e in events if e["regarding"]["kind"] == "Pod")
    assert on_pods == sorted([f"g-{i}" for i in range(AGGREGATE_AFTER)] + [f"lone-{i}" for i in range(3)])
    (combined,) = [e for e in events if e["regarding"]["kind"] == "PodGroup"]
    assert combined["regarding"]["name"] == "g" and combined["reason"] == C.EVENT_SCHEDULED
    assert combined["note"].startswith("Successfully assigned 15 more pod(s) of PodGroup team/g ")
    # Pods bound after it was sent are counted in a new one.
    for i in range(25, 29):
        r.pod_event(pod(f"g-{i}", group="g"), "Normal", C.EVENT_SCHEDULED, f"Successfully assigned team/g-{i}", "")
    await r.flush(5)
    notes = [e["note"] for e in posted(api) if e["regarding"]["kind"] == "PodGroup"]
    assert notes[-1].startswith("Successfully assigned 4 more pod(s)")


async def test_a_failing_api_is_logged_once_not_once_per_event(api, rest, recorders, caplog, monkeypatch):
    """A refusal is logged once until a post succeeds; an outage (500) is the
    outage tracker's one line, shared with the other components."""
    events_outage = outage.Outage("events")
    monkeypatch.setattr(outage, "EVENTS", events_outage)
    monkeypatch.setattr(outage, "TRACKERS", (events_outage,))
    api.script[("POST", EVENTS_PATH)] = [422]
    r = EventRecorder(rest, TokenBucket(1000, 1000))
    recorders.append(r)
    with caplog.at_level(logging.WARNING):
        for i in range(6):
            r.pod_event(pod(f"p{i}"), "Normal", C.EVENT_SCHEDULED, f"assigned {i}", "Binding")
        await r.flush(5)
        assert len(posted(api)) == 6
        assert len([m for m in caplog.messages if "Event not posted" in m]) == 1
        api.script[("POST", EVENTS_PATH)] = [500]
        for i in range(6, 12):
            r.pod_event(pod(f"p{i}"), "Normal", C.EVENT_SCHEDULED, f"assigned {i}", "Binding")
        await r.flush(5)
    assert len(posted(api)) == 12 and events_outage.down and events_outage.failures == 6
    assert len([m for m in caplog.messages if "API server unreachable (events)" in m]) == 1
    # An answer, even a refusal, ends the outage (else settling() would stay true for every component).
    api.script[("POST", EVENTS_PATH)] = [422]
    r.pod_event(pod("p12"), "Normal", C.EVENT_SCHEDULED, "assigned 12", "Binding")
    await r.flush(5)
    assert not events_outage.down


async def test_binds_take_tokens_ahead_of_status_writes():
    bucket = TokenBucket(20, 1)
    await bucket.acquire()  # empty: every caller below waits for a token
    order: list[str] = []

    async def take(name: str, first: bool) -> None:
        await bucket.acquire(first=first)
        order.append(name)

    status = asyncio.create_task(take("status", False))
    await asyncio.sleep(0)
    binds = [asyncio.create_task(take(f"bind{i}", True)) for i in range(3)]
    await asyncio.gather(status, *binds)
    assert order[-1] == "status"
