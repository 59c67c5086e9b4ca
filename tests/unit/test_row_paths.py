"""The one-row paths of the row-local plugins (`filter_row`, `score_row`: what
the framework recomputes after a gang member is assumed on a node) give
exactly what the array paths give for that row, on nodes empty, busy, full
and over-full, with and without memory, with extended resources, for pods
asking nothing and pods asking for what no node has, in the default
configuration and in those that fall back to the array path."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from scheduler.framework.interface import CycleState

from .builders import container, make_cache, make_framework, make_node, make_pod, profile_with_args

GPU = "example.com/gpu"
FIT = "NodeResourcesFit"
BALANCED = "NodeResourcesBalancedAllocation"

PROFILES: dict[str, dict[str, Any]] = {
    "default": {},
    "most-allocated": profile_with_args(FIT, {"scoringStrategy": {"type": "MostAllocated"}}),
    "weighted": profile_with_args(
        FIT,
        {
            "scoringStrategy": {
                "type": "LeastAllocated",
                "resources": [{"name": "cpu", "weight": 3}, {"name": "memory", "weight": 1}],
            }
        },
    ),
    "ignored-gpu": profile_with_args(FIT, {"ignoredResources": [GPU]}),
    "balanced-with-gpu": profile_with_args(
        BALANCED, {"resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}, {"name": GPU}]}
    ),
}


def random_requests(rng: random.Random) -> dict[str, str]:
    requests: dict[str, str] = {}
    if rng.random() < 0.85:
        requests["cpu"] = f"{rng.choice([1, 100, 250, 999, 1000, 3500])}m"
    if rng.random() < 0.85:
        requests["memory"] = f"{rng.choice([1, 64, 100, 1000, 4096])}Mi"
    if rng.random() < 0.2:
        requests[GPU] = str(rng.choice([1, 2]))
    if rng.random() < 0.05:
        requests["example.com/nowhere"] = "1"
    return requests


def random_cluster(rng: random.Random, nodes: int = 24) -> tuple[list[Any], list[Any]]:
    made, running = [], []
    for i in range(nodes):
        extra = {GPU: str(rng.choice([0, 1, 4]))} if rng.random() < 0.4 else None
        memory = None if rng.random() < 0.1 else f"{rng.choice([1, 2, 8, 32])}Gi"
        cpu = None if rng.random() < 0.05 else f"{rng.choice([1, 2, 4, 8])}"
        made.append(make_node(f"n{i}", cpu, memory, rng.choice([3, 110]), extra=extra))
        for j in range(rng.randint(0, 6)):  # some nodes end up full or over-full
            reqs = random_requests(rng)
            running.append(
                make_pod(
                    f"r{i}-{j}",
                    containers=[container("c", reqs)],
                    node_name=f"n{i}",
                    phase="Running",
                )
            )
    return made, running


@pytest.mark.parametrize("profile", sorted(PROFILES))
@pytest.mark.parametrize("seed", range(8))
def test_one_row_paths_equal_the_array_paths(profile, seed):
    rng = random.Random(seed)
    nodes, running = random_cluster(rng)
    cache = make_cache(nodes, running)
    fwk = make_framework(cache, PROFILES[profile])
    fit, balanced = fwk.plugins[FIT], fwk.plugins[BALANCED]
    snapshot = cache.snapshot()
    checked = 0
    for k in range(12):
        pod = make_pod(f"p{k}", containers=[container("c", random_requests(rng))])
        for row in range(len(snapshot)):
            one = np.array([row], dtype=np.int64)
            state = CycleState()
            assert fit.filter_row(state, pod, snapshot, row) == bool(fit.filter_rows(state, pod, snapshot, one)[0])
            if not snapshot.valid[row]:
                continue
            assert fit.score_row(CycleState(), pod, snapshot, row) == int(
                fit.score(CycleState(), pod, snapshot, one)[0]
            )
            assert balanced.score_row(CycleState(), pod, snapshot, row) == int(
                balanced.score(CycleState(), pod, snapshot, one)[0]
            )
            checked += 1
        # Assume the pod somewhere: the next pod sees a busier node.
        row = rng.randrange(len(snapshot))
        snapshot.assume(row, snapshot.request_vector(pod)[0], (pod.nonzero_cpu, pod.nonzero_memory), pod)
    assert checked >= 12 * 20


def test_request_vectors_are_shared_and_read_only():
    cache = make_cache([make_node("n0")])
    snapshot = cache.snapshot()
    a = make_pod("a", "500m", "1Gi")
    b = make_pod("b", "500m", "1Gi")
    vec, unknown = snapshot.request_vector(a)
    assert snapshot.request_vector(b)[0] is vec and unknown == ()
    with pytest.raises(ValueError):
        vec[0] = 1
    other = snapshot.request_vector(make_pod("c", "1", "1Gi"))[0]
    assert other is not vec and not np.array_equal(other, vec)
