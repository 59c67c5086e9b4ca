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
