"""The framework's reused results (static masks, row-local filters and scores kept
across cycles by per-row versions) never change an answer: a long-lived
Framework places every pod exactly where a brand-new one would, while nodes,
bound pods and assumed pods come and go."""

from __future__ import annotations

import random

import pytest

from scheduler.api.config import Profile
from scheduler.api.parse import parse_node, parse_pod
from scheduler.cluster.cache import ClusterCache
from scheduler.core.schedule_one import schedule_pod
from scheduler.framework.framework import ROW_LOCAL_SCORE_AFTER, Framework
from scheduler.framework.interface import Handle
from scheduler.plugins import in_tree_registry

SPECS = [("500m", "1Gi"), ("1", "2Gi"), ("2", "512Mi")]


def node(name: str, cpu: int, zone: int, tainted: bool = False) -> dict:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": f"z{zone}"}},
        "spec": {"taints": [{"key": "t", "value": "x", "effect": "NoSchedule"}]} if tainted else {},
        "status": {"allocatable": {"cpu": str(cpu), "memory": f"{cpu * 2}Gi", "pods": "20"}},
    }


def pod(i: int, spec: tuple[str, str], node_name: str = "") -> dict:
    body = {
        "metadata": {"name": f"p{i}", "namespace": "ns", "uid": f"u{i}"},
        "spec": {"schedulerName": "troupe-scheduler",
                 "containers": [{"name": "c", "resources": {"requests": {"cpu": spec[0], "memory": spec[1]}}}]},
    }
    if node_name:
        body["spec"]["nodeName"] = node_name
    return body


@pytest.mark.parametrize("seed", range(6))
def test_a_long_lived_framework_agrees_with_a_fresh_one(seed):
    rng = random.Random(seed)
    cache = ClusterCache()
    registry = in_tree_registry()
    profile = Profile.model_validate({"percentageOfNodesToScore": 100})
    long_lived = Framework(profile, registry, Handle(cache))
    names = [f"n{i}" for i in range(12)]
    for i, name in enumerate(names):
        cache.upsert_node(parse_node(node(name, rng.choice([2, 4, 8]), i % 3, tainted=(i == 0))))
    running: list[str] = []
    placed = 0
    for step in range(400):
        op = rng.random()
        if op < 0.1 and running:  # a running pod goes away
            cache.remove_pod(running.pop(rng.randrange(len(running))))
        elif op < 0.15:  # a node changes size (its row version changes)
            name = rng.choice(names)
            cache.upsert_node(parse_node(node(name, rng.choice([2, 4, 8]), names.index(name) % 3)))
        else:  # schedule one pod, in a snapshot that may already hold assumed pods
            snapshot = cache.snapshot()
            fresh = Framework(profile, registry, Handle(cache))
            for k in range(rng.randint(1, 4)):
                spec = rng.choice(SPECS)
                p = parse_pod(pod(step * 10 + k, spec))
                got = schedule_pod(long_lived, p, snapshot)
                want = schedule_pod(fresh, p, snapshot)
                assert got.row == want.row, f"seed {seed} step {step}: {got.row} != {want.row}"
                if got.row is None:
                    assert got.diagnosis.message == want.diagnosis.message
                    break
                vec = snapshot.request_vector(p)[0]
                snapshot.assume(got.row, vec, (p.nonzero_cpu, p.nonzero_memory), p)
                # Half of the placements are committed to the cache (bound), the rest dropped.
                if rng.random() < 0.5:
                    cache.upsert_pod(parse_pod(pod(step * 10 + k, spec, snapshot.names[got.row])))
                    running.append(p.uid)
                placed += 1
    assert placed > 100
    # The reuse actually happened (else this test proves nothing).
    assert any(e.calls >= ROW_LOCAL_SCORE_AFTER for e in long_lived.caches.row_scores.values())
