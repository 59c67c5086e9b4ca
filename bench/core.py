"""`python -m bench core`: the scheduling core on scheduler_perf shapes, no API.

The core is driven exactly as the live loop drives it (scheduler/runtime/
scheduler.py): a `Scheduler` with no binder and no status writer is fed the
watch events (`on_node`, `on_podgroup`, `on_pod`), then `queue.pop_nowait()` +
`schedule_unit()` run until the queue is empty, and every placement is
confirmed with `on_pod(<body with spec.nodeName>)` as the watch would confirm
the binding. Reported per shape:

- feed: the watch events before the first cycle (parse, cache, queue, gates);
- decide: `pop_nowait` + `schedule_unit` only; pods/s = pods placed / decide;
- loop: decide + the confirming `on_pod` events (body built from the index);
- largest gang: the `schedule_unit` time of the largest unit (median and max
  over the units of that size; the first cycle also fills the static caches);
- peak RSS: `resource.getrusage(RUSAGE_SELF).ru_maxrss` of a fresh process per
  (shape, variant), so numbers do not leak between shapes; the RSS right after
  the imports is shown next to it as the baseline.

Variants, each in its own subprocess: `default` (the shipped configuration:
the default profile, adaptive percentageOfNodesToScore, 10 % at 5000 nodes),
`full` (a profile with exactly the reference's plugins and
percentageOfNodesToScore: 100: the same work as the reference) and
`reference` (bench/reference.py, per-node Python). The reference runs until a
decision-time budget is spent and is extrapolated per pod beyond that (the
table says how many pods were measured). The `full` run's placements are
compared with the reference's, pod by pod, over the pods the reference placed.

Shape `t` (upstream's TopologyAwareScheduling/5000Nodes_750Gangs_3000Pods):
every PodGroup asks that the gang land inside one `topology.kubernetes.io/rack`
(50 racks of 100 nodes of 4 CPU). The reference knows no topology, so instead
of `full`/`reference` it runs `all` (the default profile with
percentageOfNodesToScore: 100). After each run the placements are checked:
the table counts the gangs whose pods landed in more than one rack, and
shows upstream's published scheduler_perf figures for the shape beside
troupe's (quoted, not measured here).

Shape `p` (bench/preemption.py, not in the default `--shapes`): 5000 nodes
full of running low-priority 3-pod gangs, then 100 high-priority 8-pod gangs
that must preempt; DefaultPreemption's gang search against the "remove all,
then reprieve" baseline, which gets a search-time budget (`--preempt-budget`).

Shapes `r` and `g` (devices, in the default `--shapes`): 5000 nodes of 4
CPU with 8 GPUs each, 500 gangs of 4 pods asking one GPU each. In `r` the GPUs
are DRA devices (a ResourceSlice per node, a DeviceClass, a ResourceClaim per
pod, all fed with `on_device_class` / `on_resource_slice` / `on_resource_claim`
before the pods); in `g` they are the extended resource `nvidia.com/gpu`.
Each placement of `r` is confirmed as the API would show it: the claim with
`status.allocation` (the allocation troupe assumed at Reserve) and
`reservedFor` the pod, then the bound pod. After each run the placements are
checked (no device allocated twice, each claim's devices on its pod's node,
every gang bound whole; for `g`, no node given more GPUs than it has), and the
table gives g's pods/s ÷ r's against the target (DRA within 3x of extended
resources). The reference knows no devices: no `full`/`reference` pair.

`--profile` adds cProfile listings (bench/out/core_profile_*.txt) of the
largest gang's cycle, the small-gang decision loop and the feed.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import platform
import pstats
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .shapes import (
    DRA,
    EXTENDED,
    NAMESPACE,
    Shape,
    device_class_body,
    pod_body,
    pod_index,
    pod_name,
    podgroup_body,
    preempt_shape,
    resource_claim_body,
    resource_slice_body,
    shape_node_body,
    shapes,
)

OUT_DIR = Path(__file__).resolve().parent / "out"
TARGET_PODS_PER_S = 5000
# Shapes r and g: DRA pods/s must be within this factor of the extended-resource rate (g ÷ r <= 3).
TARGET_DRA_RATIO = 3.0

# Upstream's published scheduler_perf figures for TopologyAwareScheduling/5000Nodes_750Gangs_3000Pods
# (SchedulingThroughput Average, pods/s, two runs of pull-kubernetes-scheduler-perf, quoted in
# kubernetes/kubernetes PR #140611). Not measured here. "adaptive" is with that PR's adaptive limit on the
# placements scored (percentageOfPlacementsToScore, about 5 of the 50 racks); "score all" scores every
# placement, which is what kube-scheduler v1.37.2 does (it has no such limit).
UPSTREAM_TAS = {
    "workload": "TopologyAwareScheduling/5000Nodes_750Gangs_3000Pods",
    "nodes": 5000,
    "adaptive": (562, 630),
    "score_all": (109, 114),
    "adaptive_ref": 600,
    "score_all_ref": 110,
    "source": "kubernetes/kubernetes PR #140611 (scheduler_perf, not measured here)",
}


# ----------------------------------------------------------------- helpers


def _rss_now_mib() -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _peak_rss_mib() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB on Linux


def _units(shape: Shape) -> Iterator[tuple[list[dict[str, Any]], int]]:
    """The shape's scheduling units in queue order (creation order), with minCount."""
    if not shape.gangs:
        for i in range(shape.pods):
            yield [pod_body(shape, i)], 1
        return
    size = shape.pods_per_gang
    for g in range(shape.gangs):
        yield [pod_body(shape, i) for i in range(g * size, (g + 1) * size)], size


# ------------------------------------------------------------------ workers


def _unit_stats(unit_times: dict[int, list[float]]) -> dict[str, Any]:
    """Decision time of the largest units: median (what the table shows; the
    first cycle also builds the static-filter caches) and max, over the units
    of the largest size."""
    if not unit_times:
        return {"size": 0, "count": 0, "seconds": 0.0, "max_seconds": 0.0}
    size = max(unit_times)
    times = sorted(unit_times[size])
    return {"size": size, "count": len(times), "seconds": statistics.median(times), "max_seconds": times[-1]}


def _reference_profile() -> dict[str, Any]:
    """A profile with exactly the plugins bench/reference.py implements, in its
    order and weights (the queue-level points, preEnqueue and permit, keep
    their defaults): the `full` variant does the reference's work."""
    from scheduler.api.config import EXTENSION_POINTS

    from . import reference

    plugins: dict[str, Any] = {}
    for point in EXTENSION_POINTS:
        if point in ("preEnqueue", "permit"):
            continue
        plugins[point] = {"disabled": [{"name": "*"}]}
    plugins["filter"]["enabled"] = [{"name": n} for n in reference.FILTERS]
    plugins["score"]["enabled"] = [{"name": n, "weight": w} for n, w in reference.SCORES]
    return {"plugins": plugins}


def _new_scheduler(variant: str) -> Any:
    from scheduler.api.config import SchedulerConfiguration
    from scheduler.core.scheduler import Scheduler
    from scheduler.plugins import in_tree_registry

    raw: dict[str, Any] = {}
    if variant == "full":
        raw = {"percentageOfNodesToScore": 100, "profiles": [_reference_profile()]}
    elif variant == "all":  # the default profile, every feasible node scored
        raw = {"percentageOfNodesToScore": 100}
    return Scheduler(SchedulerConfiguration.model_validate(raw), in_tree_registry())


def _feed(sched: Any, shape: Shape) -> tuple[float, float]:
    """(nodes s, pods s): the nodes (and, for DRA, the DeviceClass and the ResourceSlices), then the
    PodGroups (and, for DRA, the ResourceClaims) and the pods."""
    t0 = time.perf_counter()
    for i in range(shape.nodes):
        sched.on_node(shape_node_body(shape, i))
    if shape.devices == DRA:
        sched.on_device_class(device_class_body())
        for i in range(shape.nodes):
            sched.on_resource_slice(resource_slice_body(shape, i))
    t1 = time.perf_counter()
    for g in range(shape.gangs):
        sched.on_podgroup(podgroup_body(shape, g))
    if shape.devices == DRA:
        for i in range(shape.pods):
            sched.on_resource_claim(resource_claim_body(i))
    for i in range(shape.pods):
        sched.on_pod(pod_body(shape, i))
    return t1 - t0, time.perf_counter() - t1


def _confirm(sched: Any, shape: Shape, decision: Any) -> None:
    """The watch events that follow a decision once it is written: for DRA, each pod's claim with the
    allocation troupe assumed at Reserve and `reservedFor` the pod (PreBind writes it before the bind),
    then each pod bound to its node. A pod placed with no allocation assumed gets no claim event (the
    check after the run counts it)."""
    for p in decision.assignments:
        i = pod_index(p.pod.name)
        if shape.devices == DRA:
            allocation = sched.cache.dra.assumed.get((NAMESPACE, p.pod.name))
            if allocation is not None:
                sched.on_resource_claim(resource_claim_body(i, allocation.to_api(), resource_version="2"))
        sched.on_pod(pod_body(shape, i, p.node))


def devices_check(shape: Shape, sched: Any, node_of: dict[int, str]) -> dict[str, Any]:
    """Shapes with devices, after the run: gangs bound whole (from the cache) and, for DRA, no device
    allocated to two claims, each placed pod's claim allocated on its node (pool == node name, the
    slices' pools are named after their node), no allocation left only assumed; for extended
    resources, no node given more GPUs than it has."""
    size = shape.pods_per_gang
    bound_per_gang: dict[int, int] = {}
    for p in sched.cache.pods.values():
        if p.node_name:
            g = pod_index(p.name) // size
            bound_per_gang[g] = bound_per_gang.get(g, 0) + 1
    out: dict[str, Any] = {
        "devices": shape.devices,
        "devices_per_node": shape.devices_per_node,
        "gangs": shape.gangs,
        "gangs_bound_whole": sum(1 for n in bound_per_gang.values() if n == size),
        "gangs_partly_bound": sum(1 for n in bound_per_gang.values() if 0 < n < size),
    }
    per_node: dict[str, int] = {}
    for node in node_of.values():
        per_node[node] = per_node.get(node, 0) + 1  # one GPU a pod
    if shape.devices == EXTENDED:
        out["nodes_over_capacity"] = sum(1 for n in per_node.values() if n > shape.devices_per_node)
        return out
    dra = sched.cache.dra
    owners: dict[tuple[str, str, str], int] = {}  # device -> claims it is allocated to
    allocated = not_allocated = off_node = 0
    for i in range(shape.pods):
        allocation = dra.allocation((NAMESPACE, pod_name(i)))
        if allocation is None:
            not_allocated += i in node_of
            continue
        allocated += 1
        for r in allocation.results:
            owners[(r.driver, r.pool, r.device)] = owners.get((r.driver, r.pool, r.device), 0) + 1
        node = node_of.get(i)
        if node is None or any(r.pool != node for r in allocation.results):
            off_node += 1  # allocated for a pod not placed, or on another node than its pod's
    out.update(
        {
            "claims_allocated": allocated,
            "devices_allocated": len(owners),
            "devices_allocated_twice": sum(1 for n in owners.values() if n > 1),
            "claims_off_node": off_node,
            "placed_without_allocation": not_allocated,
            "claims_only_assumed": len(dra.assumed),
        }
    )
    return out


def devices_problems(check: dict[str, Any]) -> list[str]:
    """What is wrong in a devices_check result (empty: all good)."""
    problems = []
    if check["gangs_bound_whole"] != check["gangs"]:
        problems.append(f"{check['gangs_bound_whole']} of {check['gangs']} gangs bound whole")
    if check["gangs_partly_bound"]:
        problems.append(f"{check['gangs_partly_bound']} gangs partly bound")
    for key, what in (
        ("nodes_over_capacity", "nodes given more GPUs than they have"),
        ("devices_allocated_twice", "devices allocated twice"),
        ("claims_off_node", "claims allocated off their pod's node"),
        ("placed_without_allocation", "pods placed without an allocated claim"),
        ("claims_only_assumed", "claims still only assumed"),
    ):
        if check.get(key):
            problems.append(f"{check[key]} {what}")
    return problems


def topology_check(shape: Shape, node_of: dict[int, str]) -> dict[str, Any]:
    """Shape with a topology key: how many gangs have pods in more than one
    domain (node label value of the key; a node without the label is a domain
    of its own), from pod index -> node of every placed pod."""
    key = shape.topology_key
    domain = {}
    for i in range(shape.nodes):
        body = shape_node_body(shape, i)
        name = body["metadata"]["name"]
        domain[name] = body["metadata"]["labels"].get(key, f"<no {key}: {name}>")
    per_gang: dict[int, set[str]] = {}
    for i, node in node_of.items():
        per_gang.setdefault(i // shape.pods_per_gang, set()).add(domain[node])
    spans = [len(d) for d in per_gang.values()]
    return {
        "key": key,
        "domains": len(set(domain.values())),
        "gangs": shape.gangs,
        "gangs_placed": len(per_gang),
        "violations": sum(1 for n in spans if n > 1),
        "max_domains_per_gang": max(spans, default=0),
        "domains_used": len(set().union(*per_gang.values())) if per_gang else 0,
    }


def run_vectorized(shape: Shape, variant: str, placements_file: str | None) -> dict[str, Any]:
    sched = _new_scheduler(variant)
    fwk = sched.frameworks["troupe-scheduler"]
    rss_base = _rss_now_mib()  # interpreter + numpy + pydantic + the scheduler's modules, empty cache
    feed_nodes_s, feed_pods_s = _feed(sched, shape)
    rss_fed = _rss_now_mib()
    decide_s = confirm_s = 0.0
    placements: list[str] = []
    node_of: dict[int, str] = {}  # pod index -> node (checked against the topology key, if any)
    unit_times: dict[int, list[float]] = {}  # unit size -> schedule_unit seconds
    cycles = 0
    while True:
        t0 = time.perf_counter()
        popped = sched.queue.pop_nowait()
        if popped is None:
            break
        decision = sched.schedule_unit(popped)
        t1 = time.perf_counter()
        cycles += 1
        if decision is not None:
            _confirm(sched, shape, decision)  # the watch confirms the claims' allocations and the binding
            for p in decision.assignments:
                node_of[pod_index(p.pod.name)] = p.node
            placements.extend(p.node for p in decision.assignments)
            unit_times.setdefault(len(popped.pods), []).append(t1 - t0)
        confirm_s += time.perf_counter() - t1
        decide_s += t1 - t0
    bound = sum(1 for p in sched.cache.pods.values() if p.node_name)
    if placements_file:
        Path(placements_file).write_text("\n".join(placements))
    return {
        "variant": variant,
        "topology": topology_check(shape, node_of) if shape.topology_key else None,
        "devices": devices_check(shape, sched, node_of) if shape.devices else None,
        "percentage_of_nodes_to_score": fwk.percentage_of_nodes_to_score,
        "nodes_to_score": fwk.num_nodes_to_score(shape.nodes),
        "filters": [p.name for p in fwk.filters],
        "scores": [[s.plugin.name, s.weight] for s in fwk.scores],
        "feed_nodes_s": feed_nodes_s,
        "feed_pods_s": feed_pods_s,
        "decide_s": decide_s,
        "confirm_s": confirm_s,
        "cycles": cycles,
        "pods_placed": len(placements),
        "pods_bound": bound,
        "pods_per_s": len(placements) / decide_s if decide_s else 0.0,
        "loop_pods_per_s": len(placements) / (decide_s + confirm_s) if decide_s else 0.0,
        "largest_unit": _unit_stats(unit_times),
        "rss_base_mib": rss_base,
        "rss_fed_mib": rss_fed,
        "peak_rss_mib": _peak_rss_mib(),
        "left_in_queue": len(sched.queue),
    }


def run_reference(shape: Shape, budget_s: float, placements_file: str | None) -> dict[str, Any]:
    from . import reference

    rss_base = _rss_now_mib()  # interpreter + the api modules
    nodes = reference.parse_nodes(shape_node_body(shape, i) for i in range(shape.nodes))
    result = reference.run(nodes, _units(shape), budget_s)
    placements = result.pop("placements")
    if placements_file:
        Path(placements_file).write_text("\n".join(placements))
    per_pod = result["decide_s"] / result["pods"] if result["pods"] else 0.0
    return {
        "variant": "reference",
        "budget_s": budget_s,
        **result,
        "pods_placed": sum(1 for p in placements if p),
        "s_per_pod": per_pod,
        "pods_per_s": 1 / per_pod if per_pod else 0.0,
        # Extrapolated per pod when the largest unit was not decided whole.
        "largest_unit_s": (
            result["largest_unit_measured"]["seconds"]
            if result["largest_unit_measured"]["size"] == shape.largest_unit
            else per_pod * shape.largest_unit
        ),
        "largest_unit_extrapolated": result["largest_unit_measured"]["size"] != shape.largest_unit,
        "full_run_estimate_s": per_pod * shape.pods,
        "rss_base_mib": rss_base,
        "peak_rss_mib": _peak_rss_mib(),
    }


PROFILES = {
    # what: (shape, description)
    "gang": ("c", "the largest gang's cycle (first gang of shape c)"),
    "loop": ("a", "the whole decision loop of shape a (1000 small gangs: per-cycle costs)"),
    "feed": ("c", "the feed of shape c (watch events before the first cycle)"),
}


def run_profile(shape: Shape, what: str, top: int = 10) -> dict[str, Any]:
    """cProfile of one part of a run, default configuration; the full listing
    goes to bench/out/core_profile_<what>.txt."""
    sched = _new_scheduler("default")
    prof = cProfile.Profile()
    if what == "feed":
        prof.enable()
        _feed(sched, shape)
        prof.disable()
        pods = shape.pods
    else:
        _feed(sched, shape)
        pods = 0
        prof.enable()
        while (popped := sched.queue.pop_nowait()) is not None:
            decision = sched.schedule_unit(popped)
            if decision is not None:
                pods += len(decision.assignments)
                prof.disable()
                _confirm(sched, shape, decision)
                prof.enable()
            if what == "gang":
                break
        prof.disable()
    text = io.StringIO()
    stats = pstats.Stats(prof, stream=text)
    stats.sort_stats("tottime").print_stats(30)
    stats.sort_stats("cumulative").print_stats(30)
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    rows = []
    for (file, line, func), (_, nc, tt, ct, _) in sorted(raw.items(), key=lambda kv: -kv[1][2])[:top]:
        where = f"{Path(file).parent.name}/{Path(file).name}:{line}({func})" if line else func
        rows.append({"function": where, "calls": nc, "tottime_s": tt, "cumtime_s": ct})
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    listing = OUT_DIR / f"core_profile_{what}.txt"
    listing.write_text(text.getvalue())
    return {
        "what": what,
        "shape": shape.key,
        "description": PROFILES[what][1],
        "pods": pods,
        "profiled_s": sum(v[2] for v in raw.values()),
        "top": rows,
        "listing": str(listing),
    }


def worker(spec: dict[str, Any]) -> dict[str, Any]:
    if spec["shape"] == "p":
        from . import preemption

        rss_base = _rss_now_mib()
        got = preemption.run(preempt_shape(spec["quick"]), spec["search"], spec.get("budget_s"))
        return {**got, "rss_base_mib": rss_base, "peak_rss_mib": _peak_rss_mib()}
    shape = shapes(spec["quick"])[spec["shape"]]
    if spec["variant"] == "profile":
        return run_profile(shape, spec["what"])
    if spec["variant"] == "reference":
        return run_reference(shape, spec["budget_s"], spec.get("placements"))
    return run_vectorized(shape, spec["variant"], spec.get("placements"))


def _spawn(spec: dict[str, Any]) -> dict[str, Any]:
    """One measurement in a fresh interpreter (clean RSS, no shared caches)."""
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "core", "--worker", json.dumps(spec)],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"worker {spec} failed ({proc.returncode}):\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------- report


def _fmt(value: Any, spec: str = ".0f") -> str:
    return "-" if value is None else format(value, spec)


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def _agreement(full_file: Path, ref_file: Path) -> tuple[int, int]:
    """(pods placed on the same node, pods compared) over the reference's prefix."""
    ref = ref_file.read_text().split("\n") if ref_file.read_text() else []
    full = full_file.read_text().split("\n") if full_file.read_text() else []
    n = min(len(ref), len(full))
    return sum(1 for a, b in zip(ref[:n], full[:n]) if a == b), n


def _reference_profile_note() -> str:
    """Whether bench/reference.py still implements troupe's default profile."""
    from scheduler.framework.framework import DEFAULT_PLUGINS

    from . import reference

    filters = tuple(n for n, _ in DEFAULT_PLUGINS["filter"])
    scores = tuple((n, w or 1) for n, w in DEFAULT_PLUGINS["score"])
    ref = f"{', '.join(reference.FILTERS)}; {', '.join(f'{n} x{w}' for n, w in reference.SCORES)}"
    if filters == reference.FILTERS and scores == reference.SCORES:
        return f"the reference's plugins are the default profile's ({ref})"
    extra = [n for n in filters if n not in reference.FILTERS] + [
        f"{n} x{w}" for n, w in scores if (n, w) not in reference.SCORES
    ]
    return (
        f"the reference's plugins ({ref}) are what `full` runs; the default profile also has "
        f"{', '.join(extra) or 'a different order'}, so `default` does more work per pod"
    )


def render(result: dict[str, Any]) -> str:
    out = []
    q = " (--quick)" if result["quick"] else ""
    out.append(f"troupe core benchmark{q}: Python {result['python']}, numpy {result['numpy']}, {result['machine']}")
    out.append("")
    headers = [
        "shape",
        "nodes",
        "pods",
        "scored",
        "feed s",
        "decide s",
        "pods/s",
        "range",
        "loop pods/s",
        "largest unit",
        "unit ms (median)",
        "unit ms (max)",
        "peak RSS MiB",
        "base MiB",
    ]
    rows = []
    for r in result["shapes"]:
        d = r["default"]
        rows.append(
            [
                f"{r['key']} {r['name']}",
                str(r["nodes"]),
                str(r["pods"]),
                str(d["nodes_to_score"]),
                _fmt(d["feed_nodes_s"] + d["feed_pods_s"], ".2f"),
                _fmt(d["decide_s"], ".2f"),
                _fmt(d["pods_per_s"]),
                "-".join(_fmt(v) for v in (min(r["default_runs_pods_per_s"]), max(r["default_runs_pods_per_s"]))),
                _fmt(d["loop_pods_per_s"]),
                str(d["largest_unit"]["size"]),
                _fmt(d["largest_unit"]["seconds"] * 1e3, ".1f"),
                _fmt(d["largest_unit"]["max_seconds"] * 1e3, ".1f"),
                _fmt(d["peak_rss_mib"]),
                _fmt(d["rss_base_mib"]),
            ]
        )
    if rows:
        out.append(
            "troupe, default configuration (default profile, percentageOfNodesToScore adaptive; `scored` = nodes scored per pod;"
        )
        out.append(f"pods/s = the median of {result['repeat']} fresh runs, range = slowest-fastest;")
        out.append("unit ms = schedule_unit of one of the largest units, median and max over them):")
        out.append(_table(headers, rows))
        out.append("")
    topo = render_topology(result)
    if topo:
        out.append(topo)
        out.append("")
    dev = render_devices(result)
    if dev:
        out.append(dev)
        out.append("")
    headers = [
        "shape",
        "full pods/s",
        "full unit ms",
        "full RSS MiB",
        "ref pods/s",
        "ref unit ms",
        "ref measured",
        "speedup full/ref",
        "speedup default/ref",
        "same node",
    ]
    rows = []
    for r in result["shapes"]:
        f, ref, d = r.get("full"), r.get("reference"), r["default"]
        if f is None or ref is None:
            continue
        measured = f"{ref['pods']}/{r['pods']} pods" + ("" if ref["complete"] else " *")
        unit = _fmt(ref["largest_unit_s"] * 1e3, ".1f") + (" *" if ref["largest_unit_extrapolated"] else "")
        agree = r.get("agreement")
        rows.append(
            [
                f"{r['key']} {r['name']}",
                _fmt(f["pods_per_s"]),
                _fmt(f["largest_unit"]["seconds"] * 1e3, ".1f"),
                _fmt(f["peak_rss_mib"]),
                _fmt(ref["pods_per_s"], ".1f"),
                unit,
                measured,
                _fmt(f["pods_per_s"] / ref["pods_per_s"] if ref["pods_per_s"] else None, ".0f") + "x",
                _fmt(d["pods_per_s"] / ref["pods_per_s"] if ref["pods_per_s"] else None, ".0f") + "x",
                f"{agree[0]}/{agree[1]}" if agree else "-",
            ]
        )
    if rows:
        out.append(
            "`full` = troupe with the reference's plugins and percentageOfNodesToScore: 100 (the same work) vs the per-node"
        )
        out.append("Python reference (bench/reference.py, scores all feasible nodes):")
        out.append(_table(headers, rows))
        out.append(
            "* reference stopped after its decision-time budget; pods/s and the largest unit are extrapolated per pod."
        )
        out.append(
            "`same node`: pods the full run put on the same node as the reference, over the pods the reference decided;"
        )
        out.append(f"{result['reference_profile']}.")
    gangs = [
        r
        for r in result["shapes"]
        if r["gangs"] and r["nodes"] >= 5000 and not r.get("topology_key") and not r.get("devices")
    ]
    if gangs:
        out.append("")
        verdict = ", ".join(
            f"{r['key']} {r['default']['pods_per_s']:.0f} ({'ok' if r['default']['pods_per_s'] >= TARGET_PODS_PER_S else 'MISS'})"
            for r in gangs
        )
        out.append(f"target >= {TARGET_PODS_PER_S} pods/s at 5000 nodes, homogeneous gangs (default config): {verdict}")
    if result.get("preemption"):
        out.append("")
        out.append(render_preemption(result["preemption"]))
    for p in result.get("profiles", []):
        out.append("")
        out.append(
            f"cProfile of {p['description']}: {p['pods']} pods, {p['profiled_s']:.2f} s of tottime; top {len(p['top'])} by tottime:"
        )
        out.append(
            _table(
                ["function", "calls", "tottime s", "cumtime s"],
                [[t["function"], str(t["calls"]), f"{t['tottime_s']:.3f}", f"{t['cumtime_s']:.3f}"] for t in p["top"]],
            )
        )
        out.append(f"(listing: {p['listing']})")
    return "\n".join(out)


def render_topology(result: dict[str, Any]) -> str:
    """Shapes with a topology constraint (t): troupe beside upstream's published figures, and the check."""
    rows = []
    up = UPSTREAM_TAS
    for r in result["shapes"]:
        if not r.get("topology_key"):
            continue
        d, a = r["default"], r.get("all")
        published = r["nodes"] == up["nodes"]

        def violations(v: dict[str, Any] | None) -> str:
            if v is None or not v.get("topology"):
                return "-"
            top = v["topology"]
            return f"{top['violations']}/{top['gangs']}" + (
                "" if top["gangs_placed"] == top["gangs"] else f" ({top['gangs_placed']} placed)"
            )

        rows.append(
            [
                f"{r['key']} {r['name']}",
                _fmt(d["pods_per_s"]),
                "-".join(_fmt(v) for v in (min(r["default_runs_pods_per_s"]), max(r["default_runs_pods_per_s"]))),
                _fmt(a["pods_per_s"]) if a else "-",
                "-".join(map(str, up["adaptive"])) if published else "n/a",
                "-".join(map(str, up["score_all"])) if published else "n/a",
                _fmt(d["pods_per_s"] / up["adaptive_ref"], ".2f") + "x" if published else "-",
                _fmt(a["pods_per_s"] / up["score_all_ref"], ".1f") + "x" if published and a else "-",
                violations(d),
                violations(a),
            ]
        )
    if not rows:
        return ""
    headers = [
        "shape",
        "troupe pods/s",
        "range",
        "troupe all-nodes pods/s",
        "upstream adaptive*",
        "upstream score-all*",
        f"troupe ÷ {up['adaptive_ref']}",
        f"all-nodes ÷ {up['score_all_ref']}",
        "gangs not in one domain",
        "(all-nodes)",
    ]
    return "\n".join(
        [
            "topology-aware shapes: every PodGroup has schedulingConstraints.topology[0].key; `troupe` = default "
            "configuration (median of the runs),",
            "`all-nodes` = default profile with percentageOfNodesToScore: 100 (one run); "
            "`gangs not in one domain` = gangs whose pods landed in more than one domain (must be 0):",
            _table(headers, rows),
            f"* upstream's published scheduler_perf figures for {up['workload']}, pods/s, {up['source']}: "
            "adaptive = with an adaptive limit on the",
            "  placements (racks) scored, score-all = every placement scored, as kube-scheduler v1.37.2 does. "
            f"Ratios are troupe ÷ {up['adaptive_ref']} and all-nodes ÷ {up['score_all_ref']}.",
        ]
    )


def devices_ratio(result: dict[str, Any]) -> dict[str, Any] | None:
    """Shape g's pods/s ÷ shape r's (medians of the runs), against TARGET_DRA_RATIO; None without both."""
    by_key = {r["key"]: r for r in result["shapes"] if r.get("devices")}
    g, r = by_key.get("g"), by_key.get("r")
    if g is None or r is None:
        return None
    gv, rv = g["default"]["pods_per_s"], r["default"]["pods_per_s"]
    ratio = gv / rv if rv else None
    return {
        "extended_pods_per_s": gv,
        "dra_pods_per_s": rv,
        "ratio": ratio,
        "target": TARGET_DRA_RATIO,
        "ok": ratio is not None and ratio <= TARGET_DRA_RATIO,
    }


def render_devices(result: dict[str, Any]) -> str:
    """Shapes with devices (r, g): pods/s, the placement checks, and g ÷ r against the target."""
    rows = []
    for r in result["shapes"]:
        if not r.get("devices"):
            continue
        d = r["default"]
        c = d.get("devices") or {}
        dra = r["devices"] == DRA
        runs = r["default_runs_pods_per_s"]
        rows.append(
            [
                f"{r['key']} {r['name']}",
                "DRA claims" if dra else "extended resource",
                _fmt(d["pods_per_s"]),
                "-".join(_fmt(v) for v in (min(runs), max(runs))),
                _fmt(d["largest_unit"]["seconds"] * 1e3, ".1f"),
                f"{d['pods_placed']}/{r['pods']}",
                f"{c.get('gangs_bound_whole', '-')}/{r['gangs']}",
                str(c.get("devices_allocated_twice", "-")) if dra else "-",
                str(c.get("claims_off_node", "-")) if dra else "-",
                "-" if dra else str(c.get("nodes_over_capacity", "-")),
            ]
        )
    if not rows:
        return ""
    headers = [
        "shape",
        "GPUs as",
        "pods/s",
        "range",
        "gang ms (median)",
        "pods placed",
        "gangs bound whole",
        "devices allocated twice",
        "claims off their pod's node",
        "nodes over GPU capacity",
    ]
    lines = [
        "devices: 8 GPUs per node, every pod asks for one; pods/s = median of the runs of the default configuration;",
        "`devices allocated twice`, `claims off their pod's node` and `nodes over GPU capacity` must be 0:",
        _table(headers, rows),
    ]
    ratio = result.get("devices_ratio")
    if ratio is not None:
        verdict = "-" if ratio["ratio"] is None else ("ok" if ratio["ok"] else "MISS")
        lines.append(
            f"extended resource ÷ DRA (g ÷ r): {_fmt(ratio['extended_pods_per_s'])} ÷ {_fmt(ratio['dra_pods_per_s'])} "
            f"= {_fmt(ratio['ratio'], '.2f')}x; target <= {ratio['target']:.0f}x: {verdict}"
        )
    return "\n".join(lines)


def render_preemption(entry: dict[str, Any]) -> str:
    """Shape p: the gang search and the baseline side by side."""
    g, b, c = entry["gang"], entry["baseline"], entry["compare"]

    def cell(v: Any, spec: str) -> str:
        return v if isinstance(v, str) else _fmt(v, spec)

    def row(what: str, gv: Any, bv: Any, spec: str = ".1f", faster: bool = False) -> list[str]:
        """`faster`: the ratio is the search's advantage (search / baseline, for rates)."""
        num, den = (gv, bv) if faster else (bv, gv)
        numeric = isinstance(num, (int, float)) and isinstance(den, (int, float)) and den
        if not numeric:
            return [what, cell(gv, spec), cell(bv, spec), ""]
        r = num / den
        return [what, cell(gv, spec), cell(bv, spec), _fmt(r, ".0f" if r >= 100 else ".3g") + "x"]

    first = c["first_victims"] or [None, None]
    rows = [
        row("preemptors decided", f"{g['preemptors']}/{g['high_gangs']}", f"{b['preemptors']}/{b['high_gangs']}"),
        row("preemption decisions/s", g["decisions_per_s"], b["decisions_per_s"], ".3g", faster=True),
        row("decision ms (median)", g["decision_ms_median"], b["decision_ms_median"], ".0f"),
        row("decision ms (max)", g["decision_ms_max"], b["decision_ms_max"], ".0f"),
        row("search's gang cycles per decision (mean)", g["trials_mean"], b["trials_mean"], ".0f"),
        row(f"victims of the first preemptor ({c['first']}: same cluster)", first[0], first[1], ".0f"),
        row(
            f"victims per preemptor, the {c['preemptors']} both decided (mean)",
            c["gang_victims_mean"],
            c["baseline_victims_mean"],
            ".2f",
        ),
        row("victims per preemptor, all decided (mean)", g["victims_mean"], b["victims_mean"], ".2f"),
        row("victims per preemptor, all decided (max)", g["victims_max"], b["victims_max"], ".0f"),
        row(
            "high gangs bound whole",
            f"{g['high_bound_whole']}/{g['high_gangs']}",
            f"{b['high_bound_whole']}/{b['high_gangs']}",
        ),
        row(
            "low gangs left partly evicted",
            str(len(g["low_gangs_partly_evicted"])),
            str(len(b["low_gangs_partly_evicted"])),
        ),
        row("cycles (all units, all rounds)", str(g["cycles"]), str(b["cycles"])),
        row("peak RSS MiB", g["peak_rss_mib"], b["peak_rss_mib"], ".0f"),
    ]
    budget = b["budget_s"]
    lines = [
        f"preemption, shape {entry['key']} {entry['name']}: {entry['nodes']} nodes of {entry['node_cpu']} CPU full of "
        f"{entry['low_gangs']} running low-priority 3-pod gangs ({entry['low_cpu']} CPU a pod), then "
        f"{entry['high_gangs']} priority-{entry['high_priority']} gangs of {entry['high_size']} x {entry['high_cpu']} CPU;",
        "a decision = a cycle whose PostFilter chose victims (schedule_unit time); victims are deleted at once and",
        "the preemptor retried after its backoff. `baseline` = remove_all_then_reprieve in place of the gang search"
        + (
            f", search budget {budget:.0f} s (spent: the remaining preemptors got no victims)"
            if b["budget_spent"]
            else (f", search budget {budget:.0f} s (not spent)" if budget is not None else "")
        )
        + ":",
        _table(["", "gang search", "baseline", "search advantage"], rows),
    ]
    problems = [
        f"{name}: {what}"
        for name, r in (("gang search", g), ("baseline", b))
        for what, bad in (
            ("preemptors not bound whole", r["covered_not_bound"]),
            ("high gangs partly bound", r["high_partly_bound"]),
            ("low gangs partly evicted", r["low_gangs_partly_evicted"]),
        )
        if bad
    ]
    if g["high_bound_whole"] != g["high_gangs"]:
        problems.append(f"gang search: only {g['high_bound_whole']} of {g['high_gangs']} high gangs bound")
    lines.append(
        "PROBLEMS: " + "; ".join(problems)
        if problems
        else "checks: every preemptor bound whole, victim gangs evicted whole"
    )
    return "\n".join(lines)


def run_preemption(quick: bool, budget_s: float, started: float) -> dict[str, Any]:
    shape = preempt_shape(quick)
    entry: dict[str, Any] = {
        "key": shape.key,
        "name": shape.name,
        "nodes": shape.nodes,
        "low_gangs": shape.low_gangs,
        "low_pods": shape.low_pods,
        "high_gangs": shape.high_gangs,
        "high_size": shape.high_size,
        "high_priority": shape.high_priority,
        "node_cpu": shape.node_cpu,
        "low_cpu": shape.low_cpu,
        "high_cpu": shape.high_cpu,
    }
    for search, budget in (("gang", None), ("baseline", budget_s)):
        print(
            f"[{time.perf_counter() - started:6.1f}s] shape p {shape.name}: {search}"
            + (f" (search budget {budget:.0f} s)" if budget is not None else ""),
            file=sys.stderr,
            flush=True,
        )
        entry[search] = _spawn({"shape": "p", "quick": quick, "search": search, "budget_s": budget})
    from .preemption import compare

    entry["compare"] = compare(entry["gang"], entry["baseline"])
    return entry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench core", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--shapes",
        default="a,b,c,d,t,g,r",
        help="comma-separated shape keys (a,b,c,d,t,g,r,p); default a,b,c,d,t,g,r. t: upstream's topology-aware shape "
        "(750 gangs x 4, each inside one of 50 racks of 100 nodes), checked for gangs that span racks. "
        "r and g: 500 gangs x 4 pods asking one GPU each on 5000 nodes of 8 GPUs, as DRA ResourceClaims (r) or "
        "the extended resource nvidia.com/gpu (g); `--shapes g,r` prints g's pods/s / r's against the 3x target. "
        "p (preemption: 5000 nodes full of "
        "low-priority gangs, 100 high-priority 8-pod gangs, gang search vs remove-all-then-reprieve) is not in the "
        "default: at 5000 nodes it takes about 15 minutes, nearly all of it the baseline's first decision (--quick: 15 s)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="500 nodes and a tenth of the pods (p: 10 high gangs): a sanity run"
    )
    parser.add_argument(
        "--preempt-budget",
        type=float,
        default=None,
        metavar="S",
        help="shape p: search-time budget of the remove-all-then-reprieve baseline; the decision under way is "
        "finished, later preemptors get no victims (default 60, --quick 8)",
    )
    parser.add_argument(
        "--ref-budget",
        type=float,
        default=None,
        metavar="S",
        help="decision-time budget of the reference per shape, then extrapolate (default 30, --quick 2)",
    )
    parser.add_argument("--no-reference", action="store_true", help="skip the `full` and `reference` variants")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also cProfile the largest gang's cycle (c), the small-gang loop (a) and the feed (c)",
    )
    parser.add_argument(
        "--out", default=str(OUT_DIR / "core.json"), help="JSON result file (default bench/out/core.json)"
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        metavar="N",
        help="fresh runs of the default variant per shape; the median is reported (default 3)",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0

    table = shapes(args.quick)
    keys = [k.strip() for k in args.shapes.split(",") if k.strip()]
    unknown = [k for k in keys if k not in table and k != "p"]
    if unknown:
        parser.error(f"unknown shape(s) {', '.join(unknown)}; choose from {', '.join(table)}, p")
    preempt = "p" in keys
    keys = [k for k in keys if k != "p"]
    preempt_budget = args.preempt_budget if args.preempt_budget is not None else (8.0 if args.quick else 60.0)
    budget = args.ref_budget if args.ref_budget is not None else (2.0 if args.quick else 30.0)
    import numpy

    result: dict[str, Any] = {
        "quick": args.quick,
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "rss": "peak = resource.getrusage(RUSAGE_SELF).ru_maxrss of a fresh subprocess per (shape, variant); "
        "base = VmRSS once the modules are imported and the Scheduler is built, before the feed",
        "ref_budget_s": budget,
        "repeat": args.repeat,
        "shapes": [],
    }
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent, capture_output=True, text=True
    )
    result["git_head"] = head.stdout.strip() if head.returncode == 0 else ""
    result["reference_profile"] = _reference_profile_note()
    if any(table[k].topology_key for k in keys):
        result["upstream_published_tas"] = UPSTREAM_TAS
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="troupe-bench-") as tmp:
        for key in keys:
            shape = table[key]
            entry: dict[str, Any] = {
                "key": key,
                "name": shape.name,
                "nodes": shape.nodes,
                "gangs": shape.gangs,
                "pods_per_gang": shape.pods_per_gang,
                "pods": shape.pods,
                "topology_key": shape.topology_key,
                "devices": shape.devices,
                "devices_per_node": shape.devices_per_node,
            }
            print(
                f"[{time.perf_counter() - started:6.1f}s] shape {key} {shape.name}: default",
                file=sys.stderr,
                flush=True,
            )
            # This machine's speed swings by a third between identical runs:
            # the default variant runs --repeat times and the median run is kept.
            runs = [_spawn({"shape": key, "quick": args.quick, "variant": "default"}) for _ in range(args.repeat)]
            runs.sort(key=lambda d: d["pods_per_s"])
            entry["default"] = runs[len(runs) // 2]
            entry["default_runs_pods_per_s"] = [d["pods_per_s"] for d in runs]
            if shape.topology_key:
                # The reference knows nothing of topology constraints: no `full`/`reference` pair. Instead the
                # default profile scoring every feasible node, beside upstream's score-all figure.
                print(f"[{time.perf_counter() - started:6.1f}s] shape {key}: all", file=sys.stderr, flush=True)
                entry["all"] = _spawn({"shape": key, "quick": args.quick, "variant": "all"})
            elif not args.no_reference and not shape.devices:  # the reference knows no devices
                files = {v: str(Path(tmp) / f"{key}-{v}.txt") for v in ("full", "reference")}
                print(f"[{time.perf_counter() - started:6.1f}s] shape {key}: full", file=sys.stderr, flush=True)
                entry["full"] = _spawn(
                    {"shape": key, "quick": args.quick, "variant": "full", "placements": files["full"]}
                )
                print(f"[{time.perf_counter() - started:6.1f}s] shape {key}: reference", file=sys.stderr, flush=True)
                entry["reference"] = _spawn(
                    {
                        "shape": key,
                        "quick": args.quick,
                        "variant": "reference",
                        "budget_s": budget,
                        "placements": files["reference"],
                    }
                )
                entry["agreement"] = _agreement(Path(files["full"]), Path(files["reference"]))
            for v in ("default", "full", "all"):
                got = entry.get(v)
                if got is not None and got["pods_placed"] != shape.pods:
                    print(
                        f"warning: shape {key} {v}: placed {got['pods_placed']} of {shape.pods} pods", file=sys.stderr
                    )
                if got is not None and got.get("topology") and got["topology"]["violations"]:
                    top = got["topology"]
                    print(
                        f"warning: shape {key} {v}: {top['violations']} of {top['gangs_placed']} placed gangs span more "
                        f"than one {top['key']} domain",
                        file=sys.stderr,
                    )
                if got is not None and got.get("devices"):
                    for problem in devices_problems(got["devices"]):
                        print(f"warning: shape {key} {v}: {problem}", file=sys.stderr)
            result["shapes"].append(entry)
        ratio = devices_ratio(result)
        if ratio is not None:
            result["devices_ratio"] = ratio
        if preempt:
            result["preemption"] = run_preemption(args.quick, preempt_budget, started)
        if args.profile:
            result["profiles"] = []
            for what, (pkey, _) in PROFILES.items():
                print(
                    f"[{time.perf_counter() - started:6.1f}s] profile {what} (shape {pkey})",
                    file=sys.stderr,
                    flush=True,
                )
                result["profiles"].append(
                    _spawn({"shape": pkey, "quick": args.quick, "variant": "profile", "what": what})
                )
    result["total_s"] = time.perf_counter() - started
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(render(result))
    print(f"\nwritten: {out} ({result['total_s']:.0f} s)")
    return 0
