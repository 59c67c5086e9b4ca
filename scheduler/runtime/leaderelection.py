"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's
leaderelection does it (kube-scheduler's `leaderElection`).

- A candidate tries every `retryPeriod`: it takes the Lease when nobody holds
  it, when the holder released it, or when the holder's record has not
  changed for `leaseDuration` by the candidate's own clock (clocks of
  different machines are never compared), always under the Lease's
  resourceVersion, so two candidates cannot both win.
- The leader renews every `retryPeriod`. It may act only while its last
  successful renewal is younger than `renewDeadline` (< `leaseDuration`):
  `may_act()` is checked before every write troupe sends, so a leader that was
  paused (SIGSTOP) or cut off sends nothing once its lease could have been
  taken. Past the deadline it gives up and the process exits, to restart clean.
- A leader that stops cleanly releases the Lease (holder cleared, duration
  1 s), so a standby takes over at its next retry instead of after a lease.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException
from prometheus_client import Gauge

from ..api.config import LeaderElection
from . import outage
from .apitime import now_micro
from .kube import RestClient, encode

log = logging.getLogger(__name__)

LEADER = Gauge(
    "leader_election_master_status",
    "1 while this replica holds the Lease and may schedule, 0 as a standby (upstream's name).",
    ["name"],
)


# While the Lease cannot be written for a reason only a person can fix (no
# namespace, no permission), a candidate tries less often, up to this.
MAX_PROBLEM_BACKOFF_SECONDS = 30.0


def _failed(what: str, exc: BaseException) -> None:
    """A lease request failed: an outage is logged once (outage.LEASE), anything else each time."""
    if outage.is_outage(exc):
        outage.LEASE.failed(f"{what}: {outage.describe(exc)}")
    else:
        log.warning("leader election: %s failed: %s", what, getattr(exc, "reason", None) or exc)


def explain(what: str, exc: ApiException, namespace: str, name: str) -> str | None:
    """What is wrong and what to do, for the answers a person must fix; None
    for the others (conflicts, outages: retried as they are)."""
    lease = f"Lease {namespace}/{name}"
    where = "leaderElection.resourceNamespace in the configuration, or --leader-elect-resource-namespace"
    if exc.status == 404 and what == "creating lease":
        return (
            f"cannot create {lease}: namespace {namespace!r} does not exist. Create it "
            f"(kubectl create namespace {namespace}; manifests/00-namespace.yaml makes troupe-system), "
            f"or point {where} at an existing namespace"
        )
    if exc.status == 403:
        return (
            f"{what} {lease} is forbidden: the ServiceAccount needs get, create and update on leases "
            f"in {namespace!r} (manifests/02-rbac.yaml grants them in troupe-system through the Role and "
            f"RoleBinding troupe-scheduler-leader-election; move them if {where} names another namespace)"
        )
    if exc.status == 401:
        return (
            f"{what} {lease}: the API server does not accept troupe's credentials (401): check its token or kubeconfig"
        )
    return None


class LeadershipLost(Exception):
    """The Lease was not renewed within renewDeadline: this replica must stop."""


class LeaderElector:
    def __init__(
        self,
        rest: RestClient,
        config: LeaderElection,
        identity: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._rest = rest
        self.config = config
        self.identity = identity
        self._clock = clock
        self.leading = asyncio.Event()
        self._renewed_at = -1e18  # monotonic time the last successful acquire/renew was sent
        # What this candidate last saw of the Lease, and when (its own clock).
        self._observed: tuple[str, str] | None = None  # (holder, renewTime)
        self._observed_at = 0.0
        # resourceLock names the lock's resource: "leases", the only lock
        # upstream still has (endpoints and configmaps locks are gone).
        self._path = (
            f"/apis/coordination.k8s.io/v1/namespaces/{config.resource_namespace}"
            f"/{config.resource_lock}/{config.resource_name}"
        )
        LEADER.labels(name=config.resource_name).set(0)
        # A problem only a person can fix (`explain`), said once, and how many
        # tries in a row it has stopped: the wait between tries doubles.
        self.problem = ""
        self._problem_tries = 0

    def may_act(self) -> bool:
        """Leading, and the last renewal is recent enough that nobody else can hold the Lease."""
        return self.leading.is_set() and self._clock() < self._renewed_at + self.config.renew_deadline

    async def run(self) -> None:
        """Acquire, then renew until the deadline is missed (LeadershipLost)."""
        cfg = self.config
        told = ""
        while not self.leading.is_set():
            holder = await self._try()
            if holder == self.identity:
                self.leading.set()
                LEADER.labels(name=cfg.resource_name).set(1)
                log.info("leader election: this replica (%s) leads; scheduling", self.identity)
                break
            if holder != told and not self.problem:
                log.info("leader election: standby; lease %s held by %s", cfg.resource_name, holder or "nobody")
                told = holder
            await asyncio.sleep(self.retry_wait())
        while True:
            await asyncio.sleep(cfg.retry_period)
            holder = await self._try()
            if holder != self.identity and not self.may_act():
                self.leading.clear()
                LEADER.labels(name=cfg.resource_name).set(0)
                raise LeadershipLost(
                    f"lease {cfg.resource_name} not renewed within {cfg.renew_deadline:g}s "
                    f"(holder now: {holder or 'unknown'}); exiting to restart clean"
                )

    def retry_wait(self) -> float:
        """retryPeriod; doubled per try while a problem only a person can fix lasts."""
        if not self.problem:
            return self.config.retry_period
        return min(float(self.config.retry_period * 2 ** min(self._problem_tries, 16)), MAX_PROBLEM_BACKOFF_SECONDS)

    def _problem(self, what: str, exc: ApiException) -> bool:
        """Say a problem only a person can fix, once; True if it is one."""
        problem = explain(what, exc, self.config.resource_namespace, self.config.resource_name)
        if problem is None:
            return False
        if problem != self.problem:
            log.error("leader election: %s; retrying with backoff (up to %gs)", problem, MAX_PROBLEM_BACKOFF_SECONDS)
        self.problem = problem
        self._problem_tries += 1
        return True

    def _fixed(self) -> None:
        if self.problem:
            log.info("leader election: the Lease can be written again")
        self.problem, self._problem_tries = "", 0

    async def _try(self) -> str:
        """One acquire-or-renew attempt; returns the holder after it ("" unknown)."""
        cfg = self.config
        sent = self._clock()
        read, lease = await self._read()
        if not read:
            return ""
        now = now_micro()
        what = "creating lease" if lease is None else "updating lease"
        try:
            if lease is None:
                await self._create(now)
            else:
                holder = self._other_holder(lease.get("spec") or {})
                if holder:
                    self._fixed()
                    return holder  # held, and renewed within a lease by what this candidate saw
                lease["spec"] = self._renewal(lease.get("spec") or {}, now)
                await self._rest.request("PUT", self._path, encode(lease), timeout=cfg.retry_period)
        except ApiException as exc:
            if exc.status != 409 and not self._problem(what, exc):  # 409: another candidate won this round
                _failed("writing lease", exc)
            return ""
        except (TimeoutError, OSError, aiohttp.ClientError) as exc:  # ServerDisconnectedError is no OSError
            _failed("writing lease", exc)
            return ""
        self._renewed_at = sent
        self._fixed()
        return self.identity

    async def _read(self) -> tuple[bool, dict[str, Any] | None]:
        """(read, the Lease): (True, None) where there is no Lease yet, (False, None) where the read failed."""
        try:
            lease = json.loads(await self._rest.request("GET", self._path, b"", timeout=self.config.retry_period))
        except ApiException as exc:
            if exc.status != 404:
                if not self._problem("reading lease", exc):
                    _failed("reading lease", exc)
                return False, None
            lease = None
        except (TimeoutError, OSError, aiohttp.ClientError) as exc:  # ServerDisconnectedError is no OSError
            _failed("reading lease", exc)
            return False, None
        outage.LEASE.succeeded()
        return True, lease

    async def _create(self, now: str) -> None:
        cfg = self.config
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": cfg.resource_name, "namespace": cfg.resource_namespace},
            "spec": {**self._spec(now), "acquireTime": now, "leaseTransitions": 0},
        }
        path = self._path.rsplit("/", 1)[0]
        await self._rest.request("POST", path, encode(body), timeout=cfg.retry_period)

    def _other_holder(self, spec: dict[str, Any]) -> str:
        """Another candidate that holds the Lease and renewed it within a
        lease by what this candidate saw (its own clock); "" where this one
        may take or renew it."""
        holder = str(spec.get("holderIdentity") or "")
        record = (holder, str(spec.get("renewTime") or ""))
        if record != self._observed:
            self._observed, self._observed_at = record, self._clock()
        if holder and holder != self.identity and self._clock() < self._observed_at + self.config.lease_duration:
            return holder
        return ""

    def _renewal(self, spec: dict[str, Any], now: str) -> dict[str, Any]:
        """The Lease's spec held by this candidate: renewed where it held it,
        taken over (one more transition) where not."""
        new = self._spec(now)
        if str(spec.get("holderIdentity") or "") != self.identity:
            new["acquireTime"] = now
            new["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        else:
            new["acquireTime"] = spec.get("acquireTime") or now
            new["leaseTransitions"] = int(spec.get("leaseTransitions") or 0)
        return new

    def _spec(self, now: str) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.config.lease_duration)),
            "renewTime": now,
        }

    async def release(self) -> None:
        """Give the Lease up (a clean stop): holder cleared, so a standby takes it at once."""
        if not self.may_act():
            return
        self.leading.clear()
        LEADER.labels(name=self.config.resource_name).set(0)
        try:
            lease = json.loads(await self._rest.request("GET", self._path, b"", timeout=2))
            if (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            lease["spec"] = {
                **lease["spec"],
                "holderIdentity": None,
                "leaseDurationSeconds": 1,
                "renewTime": now_micro(),
            }
            await self._rest.request("PUT", self._path, encode(lease), timeout=2)
            log.info("leader election: lease %s released", self.config.resource_name)
        except Exception as exc:  # best effort: the lease expires anyway
            log.warning("leader election: releasing the lease failed: %s", exc)
