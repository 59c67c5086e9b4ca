"""Properties of victim selection for a gang, on small random clusters,
against a brute-force reference that tries every subset of candidate units.

- nothing of equal or higher priority is ever chosen;
- a victim gang is taken whole (all its running pods) or not at all;
- the victims make room: the gang fits without them;
- the ranked search (the path for large clusters) finds victims whenever any
  exist, and its choice is irreducible (no victim unit can be spared);
- with few candidates, the choice is the best under the preference order
  (no PDB violation, lowest highest priority, fewest pods, fewest groups).
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from scheduler.api.config import SchedulerConfiguration
from scheduler.api.parse import parse_pod
from scheduler.api.records import GroupKey
from scheduler.core.scheduler import Scheduler
from scheduler.plugins import in_tree_registry
from scheduler.plugins.defaultpreemption.search import Choice, search_group
from scheduler.plugins.defaultpreemption.victims import Unit, victim_units

from .test_preemption import gang, pod
from .test_runtime_scheduler import node

UNIT = st.tuples(st.booleans(), st.integers(1, 2), st.integers(0, 4))  # (is a gang of 2, cpu per pod, priority)
CLUSTER = st.fixed_dictionaries(
    {
        "nodes": st.lists(st.integers(2, 4), min_size=2, max_size=4),
        "units": st.lists(UNIT, max_size=6),
        "gang": st.tuples(st.integers(1, 3), st.integers(1, 2), st.integers(1, 5)),  # (pods, cpu, priority)
    }
)


def build(spec: dict[str, Any]) -> tuple[Scheduler, list[Any], int, list[Unit], dict[tuple[str, str], int]]:
    sched = Scheduler(SchedulerConfiguration(), in_tree_registry())
    free = {}
    for i, cpu in enumerate(spec["nodes"]):
        sched.on_node(node(f"n{i}", cpu=str(cpu)))
        free[f"n{i}"] = cpu
    gang_sizes: dict[tuple[str, str], int] = {}
    for u, (is_gang, cpu, prio) in enumerate(spec["units"]):
        count = 2 if is_gang else 1
        spots = []
        for _ in range(count):  # first fit, spreading the gang's pods where they go
            where = next((n for n, room in free.items() if room >= cpu), None)
            if where is None:
                break
            free[where] -= cpu
            spots.append(where)
        if len(spots) < count:
            for n in spots:
                free[n] += cpu
            continue
        group = f"u{u}" if is_gang else None
        if group:
            sched.on_podgroup(gang(group, 2, priority=prio))
            gang_sizes[GroupKey("ns", group)] = 2
        for k, n in enumerate(spots):
            sched.on_pod(pod(f"u{u}-{k}", cpu=str(cpu), group=group, priority=prio, node_name=n))
    size, cpu, prio = spec["gang"]
    pods = [parse_pod(pod(f"g-{i}", cpu=str(cpu), group="g", priority=prio)) for i in range(size)]
    units = victim_units(sched.cache, sched.cache.snapshot(), prio, exclude={GroupKey("ns", "g")})
    return sched, pods, prio, units, gang_sizes


def brute_force(sched: Scheduler, pods: list[Any], units: list[Unit]) -> tuple[int, int, int, int] | None:
    place = sched.frameworks["troupe-scheduler"].handle.place
    assert place is not None
    snapshot = sched.cache.snapshot()
    best = None
    for size in range(1, len(units) + 1):
        for subset in itertools.combinations(units, size):
            mark = snapshot.mark()
            for u in subset:
                for p in u.pods:
                    snapshot.remove_pod(p)
            fits = len(place(snapshot, pods, None)) >= len(pods)
            snapshot.restore(mark)
            if fits:
                key = Choice(list(subset), []).key(())
                best = key if best is None or key < best else best
    return best


def fits_without(sched: Scheduler, pods: list[Any], victims: list[Unit]) -> bool:
    place = sched.frameworks["troupe-scheduler"].handle.place
    assert place is not None
    snapshot = sched.cache.snapshot()
    for u in victims:
        for p in u.pods:
            snapshot.remove_pod(p)
    return len(place(snapshot, pods, None)) >= len(pods)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(CLUSTER)
def test_victims_are_lower_priority_whole_gangs_and_make_room(spec: dict[str, Any]) -> None:
    sched, pods, prio, units, gang_sizes = build(spec)
    assume(not fits_without(sched, pods, []))  # PostFilter runs only for a gang that does not fit
    reference = brute_force(sched, pods, units)
    place = sched.frameworks["troupe-scheduler"].handle.place
    assert place is not None
    for exact_units in (0, 10):  # the ranked search, then every subset
        choice = search_group(sched.cache.snapshot(), place, pods, len(pods), units, exact_units=exact_units)
        if reference is None:
            assert choice is None
            continue
        assert choice is not None
        for u in choice.victims:
            assert u.priority < prio and all(p.priority < prio for p in u.pods)
            if u.group is not None:  # whole: every running pod of the gang
                assert len(u.pods) == gang_sizes[u.group]
        assert fits_without(sched, pods, choice.victims)
        if exact_units == 0:
            for spared in choice.victims:  # irreducible
                assert not fits_without(sched, pods, [u for u in choice.victims if u is not spared])
        else:
            assert choice.key(()) == reference
