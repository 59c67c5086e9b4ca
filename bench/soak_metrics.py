"""Counters over a soak, summed over every process that counted them.

troupe's (`ReplicaCounters`): a replica's counters start from 0 each time it starts, and a SIGKILLed one
takes what it counted since its last scrape with it. So each process
(replica and start) is scraped every few seconds and right before the soak
kills or stops it; its last scrape is what it counted, and the total is the
sum over processes. A replica that dies by itself loses at most one scrape
interval of counts, and one stopped cleanly what it writes while stopping.

kube-apiserver's (`ApiServerPatches`): the PATCHes of group objects it
received (PodGroups, and CompositePodGroups where asked), the writes of
every replica as the API server saw them.
"""

from __future__ import annotations

import re
import ssl
import subprocess
import threading
import urllib.request
from collections.abc import Mapping

from prometheus_client.parser import text_string_to_metric_families

from .e2e_kube import Credentials

Labels = frozenset[tuple[str, str]]


class ReplicaCounters:
    def __init__(self, names: tuple[str, ...]) -> None:
        """`names`: the sample names to keep (a counter's with its `_total`)."""
        self.names = names
        self._lock = threading.Lock()
        # One entry per process: its last scrape, sample name -> labels -> value.
        self._last: dict[subprocess.Popen[bytes], dict[str, dict[Labels, float]]] = {}
        self.present: set[str] = set()  # names some replica exports (a labelled counter may have no sample yet)
        self.scrapes = 0
        self.failures = 0

    def scrape(self, replica: object) -> bool:
        """Scrape one replica (a hack/troupe_process.TroupeProcess); False if it did not answer."""
        proc = getattr(replica, "proc", None)
        if proc is None or proc.poll() is not None:
            return False
        status, text = replica.get("/metrics")  # type: ignore[attr-defined]
        if status != 200:
            with self._lock:
                self.failures += 1
            return False
        samples: dict[str, dict[Labels, float]] = {}
        present = set()
        try:
            for family in text_string_to_metric_families(text):
                for name in self.names:
                    if name in (family.name, f"{family.name}_total"):
                        present.add(name)
                for s in family.samples:
                    if s.name in self.names:
                        samples.setdefault(s.name, {})[frozenset(s.labels.items())] = s.value
        except ValueError:  # a truncated answer (the process died while writing it)
            with self._lock:
                self.failures += 1
            return False
        with self._lock:
            self._last[proc] = samples
            self.present |= present
            self.scrapes += 1
        return True

    def total(self, name: str, **labels: str) -> float | None:
        """The sum over processes of the samples of `name` that carry `labels`;
        None if no replica ever exported `name`."""
        with self._lock:
            if name not in self.present:
                return None
            return sum(
                value
                for samples in self._last.values()
                for have, value in samples.get(name, {}).items()
                if _matches(have, labels)
            )

    def by_label(self, name: str, label: str) -> dict[str, float] | None:
        """`name` summed over processes, by the value of one label; None if never exported."""
        with self._lock:
            if name not in self.present:
                return None
            out: dict[str, float] = {}
            for samples in self._last.values():
                for have, value in samples.get(name, {}).items():
                    key = dict(have).get(label, "")
                    out[key] = out.get(key, 0.0) + value
            return out


def _matches(have: Labels, want: Mapping[str, str]) -> bool:
    d = dict(have)
    return all(d.get(k) == v for k, v in want.items())


class ApiServerPatches:
    """PATCH requests kube-apiserver received for some resources, by resource and API group,
    over every start of it (its counters restart with it): it is scraped right
    before the soak restarts it, now and then, and at the end, and each start
    is told apart by its `process_start_time_seconds`. Every replica's
    writes, through leader kills and clean stops alike, whatever answer they
    got (retries included)."""

    def __init__(self, creds: Credentials, resources: tuple[str, ...] = ("podgroups",)) -> None:
        self.creds = creds
        self.resources = frozenset(resources)
        self._ssl = ssl.create_default_context(cadata=creds.ca_pem)
        self._lock = threading.Lock()
        self._last: dict[float, dict[tuple[str, str], float]] = {}  # start time -> (resource, API group) -> PATCHes
        self.failures = 0

    def scrape(self) -> bool:
        request = urllib.request.Request(
            f"{self.creds.server}/metrics", headers={"Authorization": f"Bearer {self.creds.token}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=10, context=self._ssl) as r:
                text = r.read().decode()
        except OSError:
            with self._lock:
                self.failures += 1
            return False
        start: float | None = None
        patches: dict[tuple[str, str], float] = {}
        for line in text.splitlines():
            if line.startswith("process_start_time_seconds "):
                start = float(line.split()[1])
            elif line.startswith("apiserver_request_total{") and 'verb="PATCH"' in line:
                labels = dict(_LABEL.findall(line))
                if labels.get("resource") not in self.resources:
                    continue
                key = (labels["resource"], labels.get("group", ""))
                patches[key] = patches.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
        if start is None:
            return False
        with self._lock:
            self._last[start] = patches
        return True

    def patches(self, group: str, resource: str = "podgroups") -> float | None:
        """PATCHes of `group`'s `resource` over every start; None if never scraped."""
        with self._lock:
            if not self._last:
                return None
            return sum(p.get((resource, group), 0.0) for p in self._last.values())


_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
