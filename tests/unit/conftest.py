"""Unit-test fixtures. Object builders live in `builders.py` (plain functions)."""

from __future__ import annotations

import pytest

from .builders import make_cache, make_framework


class FakeClock:
    """An injectable monotonic clock the test advances by hand (no sleeps)."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def cache():
    return make_cache()


@pytest.fixture
def fwk(cache):
    return make_framework(cache)


@pytest.fixture(autouse=True)
def fresh_outage_trackers(monkeypatch):
    """Each test starts with the API server reachable as far as runtime/outage.py knows
    (its trackers are module state: an outage left by one test must not shorten
    another's retries or silence its log lines)."""
    from scheduler.runtime import outage

    for attr in ("BINDS", "WATCHES", "STATUS", "RESYNC", "LEASE"):
        monkeypatch.setattr(outage, attr, outage.Outage(getattr(outage, attr).component))
