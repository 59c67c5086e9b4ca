"""scheduler/runtime/outage.py: one WARNING when an outage begins, one INFO when it
ends, DEBUG in between; a failure right after a recovery stays quiet unless it
lasts; kopf's per-retry errors are counted, not printed."""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import pytest
from kubernetes_asyncio.client.exceptions import ApiException
from prometheus_client import REGISTRY

from scheduler.runtime import failpoints, outage
from scheduler.runtime.outage import FLAP_SECONDS, KopfRetryFilter, Outage, is_outage


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def outages(component: str) -> float:
    """troupe_api_outages_total of the component, as /metrics shows it."""
    return REGISTRY.get_sample_value("troupe_api_outages_total", {"component": component}) or 0.0


def lines(caplog, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level and r.name == "scheduler.runtime.outage"]


@pytest.fixture(autouse=True)
def own_trackers(monkeypatch):
    """The process-wide trackers may be left down by other tests."""
    monkeypatch.setattr(outage, "TRACKERS", ())


def test_one_warning_per_outage_and_one_info_when_it_ends(caplog):
    clock = Clock()
    before = outages("binds")
    o = Outage("binds", clock=clock)
    with caplog.at_level(logging.DEBUG, logger="scheduler.runtime.outage"):
        for _ in range(50):
            o.failed(ConnectionRefusedError(111, "Connect call failed"))
            clock.now += 0.1
        assert o.down and o.failures == 50
        o.succeeded()
        o.succeeded()
    assert lines(caplog, logging.WARNING) == [
        "API server unreachable (binds): ConnectionRefusedError: [Errno 111] Connect call failed; retrying with backoff"
    ]
    assert lines(caplog, logging.INFO) == ["API server reachable again (binds) after 5.0s; 50 request(s) failed"]
    assert len(lines(caplog, logging.DEBUG)) == 49
    assert not o.down and outages("binds") == before + 1


def test_a_failure_right_after_a_recovery_is_quiet_unless_it_lasts(caplog):
    clock = Clock()
    before = outages("watches")
    o = Outage("watches", clock=clock)
    with caplog.at_level(logging.DEBUG, logger="scheduler.runtime.outage"):
        o.failed("first")
        clock.now += 3
        o.succeeded()
        clock.now += 1
        o.failed("a ragged edge")  # within FLAP_SECONDS of the recovery
        clock.now += 0.5
        o.succeeded()
        assert len(lines(caplog, logging.WARNING)) == 1 and len(lines(caplog, logging.INFO)) == 1
        clock.now += 1
        o.failed("a second outage, soon after")
        clock.now += FLAP_SECONDS + 1
        o.failed("still down")  # it lasted: now it is worth a warning
        o.succeeded()
    warnings = lines(caplog, logging.WARNING)
    assert len(warnings) == 2 and warnings[1].startswith("API server unreachable (watches) for 11s: still down")
    assert len(lines(caplog, logging.INFO)) == 2
    assert outages("watches") == before + 3


@pytest.mark.parametrize(
    "exc, expected",
    [
        (ApiException(status=500), True),
        (ApiException(status=503), True),
        (ApiException(status=504), True),
        (ApiException(status=409), False),
        (ApiException(status=422), False),
        (ApiException(status=429), False),
        (aiohttp.ServerDisconnectedError(), True),
        (ConnectionResetError(), True),
        (TimeoutError(), True),
        (ValueError("bad"), False),
    ],
)
def test_is_outage(exc, expected):
    assert is_outage(exc) is expected


def test_one_warning_for_all_components(monkeypatch, caplog):
    """The first component to find the API server away says so; the others
    note it at DEBUG while it still waits, and warn only if theirs lasts."""
    clock = Clock()
    binds, watches, status = Outage("binds", clock=clock), Outage("watches", clock=clock), Outage("status", clock=clock)
    monkeypatch.setattr(outage, "TRACKERS", (binds, watches, status))
    with caplog.at_level(logging.DEBUG, logger="scheduler.runtime.outage"):
        watches.failed("connection refused")
        clock.now += 0.5
        binds.failed("connection refused")
        status.failed("503")
        clock.now += 2
        for t in (binds, watches, status):
            t.succeeded()
        assert lines(caplog, logging.WARNING) == [
            "API server unreachable (watches): connection refused; retrying with backoff"
        ]
        assert lines(caplog, logging.INFO) == ["API server reachable again (watches) after 2.5s; 1 request(s) failed"]
        clock.now += FLAP_SECONDS + 1
        binds.failed("connection refused")  # a new outage, nobody else down: warned
        watches.failed("connection refused")
        clock.now += FLAP_SECONDS + 1
        watches.failed("connection refused")  # covered, but it lasted
    warnings = lines(caplog, logging.WARNING)
    assert len(warnings) == 3 and warnings[1].startswith("API server unreachable (binds)")
    assert warnings[2].startswith("API server unreachable (watches) for 11s")


def test_a_403_is_an_outage_only_while_the_api_server_settles(monkeypatch):
    """A restarted kube-apiserver refuses allowed requests with 403 until its
    RBAC caches sync: retried while some component saw it away or just back,
    a plain refusal otherwise."""
    clock = Clock()
    watches, binds = Outage("watches", clock=clock), Outage("binds", clock=clock)
    monkeypatch.setattr(outage, "TRACKERS", (watches, binds))
    forbidden = ApiException(status=403, reason="Forbidden")
    assert not is_outage(forbidden)  # never away: RBAC says no
    watches.failed(ConnectionRefusedError())
    assert is_outage(forbidden)  # away
    clock.now += 3
    watches.succeeded()
    clock.now += FLAP_SECONDS - 1
    assert is_outage(forbidden) and is_outage(ApiException(status=401))  # just back
    clock.now += 2
    assert not is_outage(forbidden)  # settled: a 403 is a 403
    assert not is_outage(ApiException(status=404))


async def test_backoff_says_retry_until_the_outage_is_old(monkeypatch):
    clock = Clock()
    o = Outage("status writes", clock=clock)
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    assert await o.backoff(TimeoutError(), give_up_after=60)
    clock.now += 61
    assert not await o.backoff(TimeoutError(), give_up_after=60)
    assert slept and 1.0 <= slept[0] <= 5.0


def test_kopf_retry_errors_are_counted_not_printed(monkeypatch):
    o = Outage("watches")
    monkeypatch.setattr(outage, "WATCHES", o)
    f = KopfRetryFilter()

    def record(name: str, level: int, msg: str) -> logging.LogRecord:
        return logging.LogRecord(name, level, __file__, 1, msg, None, None)

    retry = "Request attempt #2/9 failed; will retry: GET https://x/apis/a/b -> ClientConnectorError()"
    assert not f.filter(record("kopf._cogs.clients.watching", logging.ERROR, retry))
    assert o.down and o.failures == 1
    assert f.filter(record("kopf.objects", logging.ERROR, "Handler failed"))
    assert f.filter(record("scheduler.runtime.binder", logging.ERROR, retry))


def test_error_failpoints_fire_on_every_nth_pass(monkeypatch):
    monkeypatch.setattr(failpoints, "_armed", failpoints._parse("bind-500=3"))
    monkeypatch.setattr(failpoints, "_passes", {})
    assert [failpoints.every("bind-500") for _ in range(7)] == [False, False, True, False, False, True, False]
    assert not failpoints.every("bind-lost")
