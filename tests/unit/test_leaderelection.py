"""Leader election against an in-memory Lease (the API's optimistic
concurrency included): acquire, renew, a standby waiting for an expired lease
by its own clock, release, and a paused leader that may no longer act."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from scheduler.api.config import LeaderElection
from scheduler.runtime.kube import NotLeading, RestClient
from scheduler.runtime.leaderelection import LeaderElector, LeadershipLost


class FakeLeaseAPI:
    """One Lease, with resourceVersion preconditions on PUT (409 on a stale one)."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.version = 0
        self.writes = 0
        self.refuse: int | None = None  # answer every write with this status (e.g. 404: no namespace)

    async def request(self, method: str, path: str, body: bytes, content_type: str = "", timeout: Any = None) -> bytes:
        if method != "GET" and self.refuse is not None:
            raise ApiException(status=self.refuse, reason={403: "Forbidden", 404: "NotFound"}.get(self.refuse, ""))
        if method == "GET":
            if self.lease is None:
                raise ApiException(status=404, reason="NotFound")
            return json.dumps(self.lease).encode()
        obj = json.loads(body)
        if method == "POST":
            if self.lease is not None:
                raise ApiException(status=409, reason="AlreadyExists")
        elif method == "PUT":
            assert self.lease is not None
            if obj["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
                raise ApiException(status=409, reason="Conflict")
        self.version += 1
        self.writes += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        self.lease = obj
        return json.dumps(obj).encode()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


CONFIG = LeaderElection.model_validate(
    {"leaderElect": True, "leaseDuration": "3s", "renewDeadline": "2s", "retryPeriod": "1s"}
)


def elector(api: FakeLeaseAPI, name: str, clock: Clock) -> LeaderElector:
    return LeaderElector(api, CONFIG, name, clock=clock)  # type: ignore[arg-type]


async def test_the_first_candidate_leads_the_second_waits_until_the_lease_runs_out_by_its_own_clock() -> None:
    api, clock = FakeLeaseAPI(), Clock()
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    assert await a._try() == "a"
    a.leading.set()
    assert a.may_act()
    assert await b._try() == "a"  # held
    clock.now += 2.9
    assert await b._try() == "a"  # not yet 3 s since b saw the record change
    assert not a.may_act()  # a did not renew for 2.9 s > renewDeadline: it may not act any more
    clock.now += 0.2
    assert await b._try() == "b"  # expired by b's clock: taken, under the resourceVersion
    assert api.lease is not None and api.lease["spec"]["holderIdentity"] == "b"
    assert api.lease["spec"]["leaseTransitions"] == 1


async def test_a_renewing_leader_keeps_the_lease() -> None:
    api, clock = FakeLeaseAPI(), Clock()
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    assert await a._try() == "a"
    for _ in range(10):
        clock.now += 1.0
        assert await a._try() == "a"
        assert await b._try() == "a"  # b sees the record change every second


async def test_a_released_lease_is_taken_at_the_next_try() -> None:
    api, clock = FakeLeaseAPI(), Clock()
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    await a._try()
    a.leading.set()
    assert await b._try() == "a"
    await a.release()
    assert not a.may_act()
    assert await b._try() == "b"


async def test_a_paused_leader_gives_up_when_it_wakes() -> None:
    api, clock = FakeLeaseAPI(), Clock()
    a, b = elector(api, "a", clock), elector(api, "b", clock)
    assert await a._try() == "a"
    a.leading.set()
    await b._try()
    clock.now += 10  # a is paused; b takes over
    assert await b._try() == "b"
    assert not a.may_act()  # whatever a had in flight is refused by the client guard
    CONFIG_FAST = LeaderElection.model_validate(
        {"leaderElect": True, "leaseDuration": "30ms", "renewDeadline": "20ms", "retryPeriod": "1ms"}
    )
    a.config = CONFIG_FAST
    with pytest.raises(LeadershipLost):
        await asyncio.wait_for(a.run(), timeout=2)


async def test_the_client_refuses_writes_while_the_replica_may_not_act() -> None:
    rest = RestClient.__new__(RestClient)  # only the guard is exercised: it raises before any I/O
    rest.may_write = lambda: False
    with pytest.raises(NotLeading):
        await rest.request("POST", "/api/v1/namespaces/ns/pods/p/binding", b"{}")
    with pytest.raises(NotLeading):
        await rest.request("PATCH", "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c/status", b"{}")


@pytest.mark.parametrize(
    "status, said",
    [
        (404, "namespace 'troupe-system' does not exist. Create it (kubectl create namespace troupe-system"),
        (403, "creating lease Lease troupe-system/troupe-scheduler is forbidden: the ServiceAccount needs get, create"),
    ],
)
async def test_a_lease_that_cannot_be_written_is_explained_once_and_tried_less_often(status, said, caplog) -> None:
    api, clock = FakeLeaseAPI(), Clock()
    api.refuse = status
    a = elector(api, "a", clock)
    with caplog.at_level("INFO", logger="scheduler.runtime.leaderelection"):
        waits = []
        for _ in range(8):
            assert await a._try() == ""
            waits.append(a.retry_wait())
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and said in errors[0], errors
    assert not [r for r in caplog.records if r.levelname == "WARNING"], "no warning every retry"
    assert waits == [2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0, 30.0]  # retryPeriod 1s, doubling to the cap

    api.refuse = None  # fixed by a person: taken at the next try, at the usual pace again
    caplog.clear()
    with caplog.at_level("INFO", logger="scheduler.runtime.leaderelection"):
        assert await a._try() == "a"
    assert "the Lease can be written again" in caplog.text
    assert a.retry_wait() == 1.0
