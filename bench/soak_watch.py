"""The soak's watch on group objects: which exist now, and how many times
each source's status actually changed.

One thread per group resource (troupe's, scheduler-plugins' and Volcano's
PodGroups, and troupe's CompositePodGroups for the soak's trees) lists, then watches from the list's resourceVersion, and resumes
from the last one it saw when the connection drops (an API server restart);
only a 410 (too old) makes it list again. A MODIFIED event counts as a status
change when the object's `status` differs from the one last seen for its uid
(only troupe writes these objects in the soak: the soak creates and deletes
them, nothing else modifies them). A change that falls in a relist's gap
counts once, whatever happened in the gap (`relists` says how often). An
object whose resourceVersion is not newer than the one last seen is an
older view (an API server just after an etcd restart may serve one) and
changes nothing.

Stored changes are what the API server kept: a patch that changes nothing
makes no event. troupe's `troupe_group_status_writes_total` counts patches
sent; the two side by side are writes per status change.
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import time
import urllib.parse
from collections import Counter
from typing import Any

from .e2e_kube import Credentials

READ_TIMEOUT = 330.0  # the server ends a watch after timeoutSeconds=300


class GroupWatch:
    def __init__(self, creds: Credentials, resources: dict[str, str]) -> None:
        """`resources`: source name -> collection path, e.g. "/apis/scheduling.x-k8s.io/v1alpha1/podgroups"."""
        self.creds = creds
        self.resources = resources
        url = urllib.parse.urlsplit(creds.server)
        self._host, self._port = url.hostname or "127.0.0.1", url.port or 443
        self._ssl = ssl.create_default_context(cadata=creds.ca_pem)
        self._headers = {"Authorization": f"Bearer {creds.token}", "Accept": "application/json"}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        # source -> uid -> (namespace, name, resourceVersion, status)
        self._objects: dict[str, dict[str, tuple[str, str, int, Any]]] = {s: {} for s in resources}
        self._synced: dict[str, bool] = {s: False for s in resources}
        self.changes: Counter[str] = Counter()
        self.relists: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self._threads = [
            threading.Thread(target=self._run, args=(s,), name=f"watch {s}", daemon=True) for s in resources
        ]

    def start(self) -> GroupWatch:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()  # a thread blocked on a quiet watch ends with the process (daemon)

    def live(self) -> set[tuple[str, str, str]] | None:
        """(source, namespace, name) of every group object that exists; None
        until every resource has been listed once."""
        with self._lock:
            if not all(self._synced.values()):
                return None
            return {(s, ns, name) for s, objs in self._objects.items() for ns, name, _, _ in objs.values()}

    # ---------------------------------------------------------------- internals

    def _connection(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(self._host, self._port, context=self._ssl, timeout=READ_TIMEOUT)

    def _relist(self, source: str) -> str:
        conn = self._connection()
        try:
            conn.request("GET", self.resources[source], headers=self._headers)
            resp = conn.getresponse()
            body = resp.read()
            if resp.status != 200:
                raise OSError(f"list {self.resources[source]}: HTTP {resp.status}")
        finally:
            conn.close()
        reply = json.loads(body)
        with self._lock:
            known = self._objects[source]
            fresh: dict[str, tuple[str, str, int, Any]] = {}
            for obj in reply.get("items") or []:
                uid = obj["metadata"]["uid"]
                fresh[uid] = self._newer(source, known.get(uid), obj)
            self._objects[source] = fresh
            if self._synced[source]:
                self.relists[source] += 1
            self._synced[source] = True
        return str(reply["metadata"]["resourceVersion"])

    def _newer(
        self, source: str, before: tuple[str, str, int, Any] | None, obj: dict[str, Any]
    ) -> tuple[str, str, int, Any]:
        """What is known of `obj` after seeing it (caller holds the lock): a
        newer version replaces `before`, counting a status change."""
        meta = obj["metadata"]
        rv, status = int(meta["resourceVersion"]), obj.get("status")
        if before is not None and rv <= before[2]:
            return before  # an older view, or one already seen
        if before is not None and before[3] != status:
            self.changes[source] += 1
        return meta["namespace"], meta["name"], rv, status

    def _event(self, source: str, kind: str, obj: dict[str, Any]) -> None:
        uid = obj["metadata"]["uid"]
        with self._lock:
            known = self._objects[source]
            if kind == "DELETED":
                known.pop(uid, None)
            else:
                known[uid] = self._newer(source, known.get(uid), obj)

    def _run(self, source: str) -> None:
        rv = ""
        while not self._stop.is_set():
            try:
                if not rv:
                    rv = self._relist(source)
                rv = self._watch(source, rv)
            except (OSError, http.client.HTTPException, ValueError, KeyError):
                self.errors[source] += 1
                self._stop.wait(0.5)

    def _watch(self, source: str, rv: str) -> str:
        """Watch from `rv` until the stream ends; the resourceVersion to go on
        from ("" to list again)."""
        query = urllib.parse.urlencode(
            {"watch": "1", "resourceVersion": rv, "allowWatchBookmarks": "true", "timeoutSeconds": "300"}
        )
        conn = self._connection()
        try:
            conn.request("GET", f"{self.resources[source]}?{query}", headers=self._headers)
            resp = conn.getresponse()
            if resp.status == 410:
                return ""
            if resp.status != 200:
                resp.read()
                time.sleep(0.5)
                return rv
            while not self._stop.is_set():
                line = resp.readline()
                if not line:
                    return rv  # the server ended the watch (timeout or restart): go on from rv
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    return "" if obj.get("code") == 410 else rv
                rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    self._event(source, kind, obj)
            return rv
        finally:
            conn.close()
