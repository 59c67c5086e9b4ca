"""A client-side token bucket, as client-go's QPS/burst (kube-scheduler `clientConnection`)."""

from __future__ import annotations

import asyncio
import time


class TokenBucket:
    def __init__(self, qps: float, burst: int) -> None:
        self.qps = qps
        self.burst = burst
        self._tokens = float(burst)
        self._last = time.monotonic()
        self._lock = asyncio.Lock()
        self._paused_until = 0.0
        self._first_waiting = 0

    def pause(self, seconds: float) -> None:
        """The server said 429 Retry-After: nobody sends for a while."""
        self._paused_until = max(self._paused_until, time.monotonic() + seconds)

    async def acquire(self, first: bool = False) -> None:
        """Wait for a token. Callers marked `first` (binds) go ahead of the
        others sharing the bucket (status writes): those take no token while
        a `first` caller waits."""
        if first:
            self._first_waiting += 1
        try:
            while True:
                async with self._lock:
                    now = time.monotonic()
                    wait = self._paused_until - now
                    if wait <= 0:
                        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
                        self._last = now
                        if self._tokens >= 1 and (first or not self._first_waiting):
                            self._tokens -= 1
                            return
                        wait = max((1 - self._tokens) / self.qps, 1 / self.qps if not first else 0.0)
                await asyncio.sleep(wait)
        finally:
            if first:
                self._first_waiting -= 1
