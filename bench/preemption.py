"""Shape p of `python -m bench core`: preemption of running low-priority gangs
by high-priority gangs, with troupe's gang search and with the simple
"remove all, then reprieve" method as the baseline.

The cluster does what it would do with the scheduler's decisions (as
scheduler/simulate/runner.py does): a placement is confirmed with `on_bound`
and the pod coming back with `spec.nodeName`; a victim is deleted at once
(`on_pod_deleted`, the kubelet finished it); the delete events move the
preemptor from the unschedulable pool to backoff, and a fake clock moves past
the backoff between rounds so it is retried. Only `schedule_unit` is timed.

The baseline replaces `search_group` in the plugin's module with
`remove_all_then_reprieve` (same call, `exact_units` ignored). It runs one gang
cycle per candidate unit, so it gets a budget of search time: once spent, the
remaining preemptors get no victims (their cycles are cheap failures) and the
run reports how many preemptors it covered.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .shapes import (
    PreemptShape,
    high_name,
    high_pod_body,
    low_pod_body,
    preempt_node_body,
    preempt_podgroup_body,
)

SEARCHES = ("gang", "baseline")


class FakeClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


@dataclass(slots=True)
class _SearchLog:
    """What the (wrapped) search did, call by call."""

    budget_s: float | None
    calls: int = 0
    seconds: float = 0.0
    trials: list[int] = field(default_factory=list)
    refused: int = 0  # calls not run because the budget was spent

    @property
    def spent(self) -> bool:
        return self.budget_s is not None and self.calls > 0 and self.seconds >= self.budget_s


def _install_search(search: str, log: _SearchLog) -> Any:
    """Wraps (gang) or replaces (baseline) the plugin's `search_group`; returns the original."""
    from scheduler.plugins.defaultpreemption import plugin
    from scheduler.plugins.defaultpreemption import search as search_mod

    original = plugin.search_group

    def wrapped(snapshot: Any, place: Any, pods: Any, needed: int, units: Any, pdbs: Any = (), **kw: Any) -> Any:
        if log.spent:
            log.refused += 1
            return None  # out of budget: this preemptor gets no victims
        t0 = time.perf_counter()
        if search == "baseline":
            choice = search_mod.remove_all_then_reprieve(snapshot, place, pods, needed, units, pdbs)
        else:
            choice = original(snapshot, place, pods, needed, units, pdbs, **kw)
        log.seconds += time.perf_counter() - t0
        log.calls += 1
        if choice is not None:
            log.trials.append(choice.trials)
        return choice

    plugin.search_group = wrapped  # type: ignore[assignment]
    return original


def _feed(sched: Any, shape: PreemptShape) -> None:
    for i in range(shape.nodes):
        sched.on_node(preempt_node_body(shape, i))
    for g in range(shape.low_gangs):
        sched.on_podgroup(preempt_podgroup_body(f"low-{g:05d}", shape.low_size, shape.low_priority, f"uid-pg-low-{g}"))
    for i in range(shape.low_pods):
        sched.on_pod(low_pod_body(shape, i))  # running before the bench: bound, not queued
    for g in range(shape.high_gangs):
        sched.on_podgroup(
            preempt_podgroup_body(high_name(g), shape.high_size, shape.high_priority, f"uid-pg-{high_name(g)}")
        )
    for g in range(shape.high_gangs):
        for j in range(shape.high_size):
            sched.on_pod(high_pod_body(shape, g, j))


def run(shape: PreemptShape, search: str, budget_s: float | None = None) -> dict[str, Any]:
    """One run of shape p with `search` ("gang" or "baseline"); `budget_s`
    caps the search time (at least one preemptor is always decided)."""
    from scheduler.api.config import SchedulerConfiguration
    from scheduler.core.scheduler import Scheduler
    from scheduler.plugins import in_tree_registry
    from scheduler.plugins.defaultpreemption import plugin

    if search not in SEARCHES:
        raise ValueError(f"search {search!r}: choose from {SEARCHES}")
    config = SchedulerConfiguration()
    clock = FakeClock()
    sched = Scheduler(config, in_tree_registry(), clock=clock, report_delay=0)
    t0 = time.perf_counter()
    _feed(sched, shape)
    feed_s = time.perf_counter() - t0
    sched.start_scheduling()

    log = _SearchLog(budget_s)
    original = _install_search(search, log)
    try:
        loop = _loop(sched, shape, clock, config)
    finally:
        plugin.search_group = original  # type: ignore[assignment]

    # Every high gang bound whole? Every low gang untouched or evicted whole?
    cache = sched.cache
    high_bound = {
        high_name(g): sum(1 for j in range(shape.high_size) if cache.placed_node(f"uid-{high_name(g)}-{j}"))
        for g in range(shape.high_gangs)
    }
    evicted = loop["evicted"]
    per_low: Counter[str] = Counter()
    for i in range(shape.low_pods):
        group = shape.low_group(i)
        if group is not None and f"uid-low-{i:06d}" in evicted:
            per_low[group] += 1
    partial = sorted(g for g, n in per_low.items() if n != shape.low_size)
    victims = loop["victims"]  # preemptor -> victim pods, in the order preemptors first chose victims
    counts = list(victims.values())
    times = loop["preempt_times"]
    preempt_s = sum(times)
    return {
        "search": search,
        "budget_s": budget_s,
        "budget_spent": log.spent,
        "nodes": shape.nodes,
        "low_gangs": shape.low_gangs,
        "low_pods": shape.low_pods,
        "high_gangs": shape.high_gangs,
        "high_size": shape.high_size,
        "feed_s": feed_s,
        "rounds": loop["rounds"],
        "cycles": loop["cycles"],
        "decide_s": loop["decide_s"],
        "preemption_decisions": len(times),
        "preemptors": len(victims),
        "preempt_s": preempt_s,
        "decisions_per_s": len(times) / preempt_s if preempt_s else 0.0,
        "decision_ms_median": statistics.median(times) * 1e3 if times else None,
        "decision_ms_max": max(times) * 1e3 if times else None,
        "search_s": log.seconds,
        "search_calls": log.calls,
        "search_refused": log.refused,
        "trials_mean": statistics.mean(log.trials) if log.trials else None,
        "victims": victims,
        "victim_groups": loop["victim_groups"],
        "victims_mean": statistics.mean(counts) if counts else None,
        "victims_max": max(counts) if counts else None,
        "victims_total": len(evicted),
        "high_bound_whole": sum(1 for n in high_bound.values() if n == shape.high_size),
        "high_partly_bound": sorted(g for g, n in high_bound.items() if 0 < n < shape.high_size),
        # Covered preemptors (victims chosen) that are not bound whole: must be empty.
        "covered_not_bound": sorted(g for g in victims if high_bound.get(g, 0) != shape.high_size),
        "low_gangs_partly_evicted": partial,
        "victims_not_in_low_gangs": sum(1 for uid in evicted if not uid.startswith("uid-low-")),
    }


def _loop(sched: Any, shape: PreemptShape, clock: FakeClock, config: Any) -> dict[str, Any]:
    """Rounds of cycles until a round binds and evicts nothing."""
    victims: dict[str, int] = {}
    victim_groups: dict[str, int] = {}
    evicted: set[str] = set()
    preempt_times: list[float] = []
    cycles = rounds = 0
    decide_s = 0.0
    q = config.queue
    # Each productive round binds or evicts at least one pod.
    for _ in range(shape.low_pods + shape.high_pods + 2):
        rounds += 1
        progress = 0
        while True:
            t0 = time.perf_counter()
            popped = sched.queue.pop_nowait()
            if popped is None:
                break
            decision = sched.schedule_unit(popped)
            dt = time.perf_counter() - t0
            decide_s += dt
            cycles += 1
            if decision is None:
                continue
            if decision.victims:
                preempt_times.append(dt)
                key = decision.group_key
                name = key[1] if key is not None else decision.unplaced[0][0].name
                victims[name] = victims.get(name, 0) + len(decision.victims)
                victim_groups[name] = victim_groups.get(name, 0) + len(decision.victim_groups)
                # The cluster deletes them (the kubelet finishes them at once here).
                for v in decision.victims:
                    evicted.add(v.uid)
                    sched.on_pod_deleted({"metadata": {"namespace": v.namespace, "name": v.name, "uid": v.uid}})
                progress += len(decision.victims)
            for a in decision.assignments:
                sched.on_bound(a.pod, a.node)
                g, j = a.pod.name.rsplit("-", 1)
                sched.on_pod(high_pod_body(shape, int(g.split("-")[1]), int(j), a.node))  # the watch confirms it
                progress += 1
        if progress == 0:
            break
        # Past every backoff and the unschedulable flush: everything left is retried.
        clock.now += max(q.pod_max_backoff_seconds, q.max_unschedulable_seconds) + 1.0
    return {
        "victims": victims,
        "victim_groups": victim_groups,
        "evicted": evicted,
        "preempt_times": preempt_times,
        "cycles": cycles,
        "rounds": rounds,
        "decide_s": decide_s,
    }


def compare(gang: dict[str, Any], baseline: dict[str, Any]) -> dict[str, Any]:
    """Victims per preemptor over the preemptors both runs decided (the first
    one sees the same cluster in both; later ones see what earlier choices left)."""
    common = [g for g in baseline["victims"] if g in gang["victims"]]
    first = next(iter(baseline["victims"]), None)
    g_mean = statistics.mean(gang["victims"][g] for g in common) if common else None
    b_mean = statistics.mean(baseline["victims"][g] for g in common) if common else None
    return {
        "preemptors": len(common),
        "first": first,
        "first_victims": [gang["victims"].get(first), baseline["victims"].get(first)] if first else None,
        "gang_victims_mean": g_mean,
        "baseline_victims_mean": b_mean,
        "gang_victims_max": max((gang["victims"][g] for g in common), default=None),
        "baseline_victims_max": max((baseline["victims"][g] for g in common), default=None),
        "baseline_over_gang_victims": b_mean / g_mean if g_mean else None,
        "gang_decision_ms": gang["decision_ms_median"],
        "baseline_decision_ms": baseline["decision_ms_median"],
        "speedup": (
            baseline["decision_ms_median"] / gang["decision_ms_median"]
            if gang["decision_ms_median"] and baseline["decision_ms_median"]
            else None
        ),
    }
