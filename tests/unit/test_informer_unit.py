"""The Informer's handling of watch lines, without a server: a 410 ERROR
event means relist, other ERROR events fail the watch, bookmarks move the
resourceVersion without touching the cache."""

from __future__ import annotations

import json

import pytest

from scheduler.runtime.informer import Informer, WatchExpired


def informer(log: list) -> Informer:
    return Informer(
        None,
        "/api/v1/pods",
        "pod",
        lambda b: log.append(("up", b["metadata"]["name"])),
        lambda b: log.append(("del", b["metadata"]["name"])),
        cached_keys=set,
        key_of=lambda m: m["uid"],
        tombstone=lambda k: {"metadata": {"uid": k}},
    )


def line(type_: str, obj: dict) -> bytes:
    return json.dumps({"type": type_, "object": obj}).encode()


def test_events_reach_the_handlers_and_move_the_version():
    log: list = []
    inf = informer(log)
    inf._on_line(line("ADDED", {"metadata": {"name": "a", "resourceVersion": "5"}}))
    inf._on_line(line("MODIFIED", {"metadata": {"name": "a", "resourceVersion": "6"}}))
    inf._on_line(line("BOOKMARK", {"metadata": {"resourceVersion": "9"}}))
    inf._on_line(line("DELETED", {"metadata": {"name": "a", "resourceVersion": "10"}}))
    assert log == [("up", "a"), ("up", "a"), ("del", "a")]
    assert inf.resource_version == "10"


def test_410_asks_for_a_relist_and_other_errors_fail_the_watch():
    inf = informer([])
    with pytest.raises(WatchExpired):
        inf._on_line(line("ERROR", {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}))
    with pytest.raises(ValueError, match="500"):
        inf._on_line(line("ERROR", {"kind": "Status", "code": 500, "reason": "InternalError", "message": "x"}))


def test_a_handler_that_raises_is_logged_not_raised(caplog):
    def boom(body):
        raise RuntimeError("odd object")

    inf = Informer(
        None,
        "/api/v1/pods",
        "pod",
        boom,
        boom,
        cached_keys=set,
        key_of=lambda m: m["uid"],
        tombstone=lambda k: {"metadata": {"uid": k}},
    )
    inf._on_line(line("ADDED", {"metadata": {"name": "odd", "namespace": "ns", "resourceVersion": "3"}}))
    assert inf.resource_version == "3" and "cannot handle pod ns/odd" in caplog.text
