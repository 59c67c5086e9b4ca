"""Numbers and output of the end-to-end benchmark: per-run summary
(pods/s, group latency percentiles), the side-by-side tables, the plot.

Definitions (client clock, monotonic):

- pods/s = pods bound / (last pod bound - first pod created);
- group latency = the time the last pod of the group was seen bound
  - the time the create of the group's last pod returned;
- creator pods/s = pods created / (last create returned - first create sent).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .e2e_workload import RAW_RUNS, SCHEDULERS

NAMES = {
    "troupe": "troupe",
    "upstream": "upstream",
    "raw": "raw bind",
    "troupe-native": "troupe (native objects)",
    "troupe-coscheduling": "troupe (scheduler-plugins objects)",
    "raw-troupe": "raw bind (troupe's kinds)",
}
VARIANT_LABELS = {"troupe-native": "native", "troupe-coscheduling": "scheduler-plugins"}


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between closest
    ranks (numpy's default); nan for no values."""
    xs = sorted(v for v in values if v == v)
    if not xs:
        return math.nan
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} not in [0, 100]")
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(pod_created: Sequence[float], bound_at: Sequence[float], size: int) -> dict[str, Any]:
    """Throughput and per-group latency from per-pod timestamps (nan = never).
    Pods are ordered by group (group g = indexes g*size .. g*size+size-1)."""
    n = len(pod_created)
    created = [t for t in pod_created if t == t]
    bound = [t for t in bound_at if t == t]
    first_created = min(created) if created else math.nan
    last_created = max(created) if created else math.nan
    last_bound = max(bound) if bound else math.nan
    span = last_bound - first_created
    # The phase in which the creator still runs: binds compete with creates for the API server.
    creating = last_created - first_created
    bound_creating = sum(1 for t in bound if t <= last_created)
    latencies: list[float] = []
    for g in range(n // size):
        c = pod_created[g * size : (g + 1) * size]
        b = bound_at[g * size : (g + 1) * size]
        if all(t == t for t in c) and all(t == t for t in b):
            latencies.append(max(b) - max(c))
    return {
        "pods": n,
        "pods_created": len(created),
        "pods_bound": len(bound),
        "groups": n // size,
        "groups_bound": len(latencies),
        "pods_per_s": len(bound) / span if bound and span > 0 else math.nan,
        "span_s": span,
        "first_created_at": first_created,  # monotonic, as the stamps
        "last_bound_at": last_bound,
        "drain_s": last_bound - last_created,  # last bound after the last create returned
        "bound_while_creating": bound_creating,
        "pods_per_s_while_creating": bound_creating / creating if creating > 0 else math.nan,
        "latency_p50_s": percentile(latencies, 50),
        "latency_p99_s": percentile(latencies, 99),
        "latency_max_s": max(latencies) if latencies else math.nan,
    }


# ------------------------------------------------------------------ tables


def _num(x: float | None, digits: int = 0) -> str:
    if x is None or x != x:
        return "-"
    return f"{x:,.{digits}f}"


def _secs(x: float | None) -> str:
    if x is None or x != x:
        return "-"
    return f"{x * 1000:.0f} ms" if abs(x) < 1 else f"{x:.2f} s"


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or a != a or b != b or b == 0:
        return "-"
    return f"{a / b:.2f}x"


def _cell_rate(run: dict[str, Any] | None) -> str:
    if run is None:
        return "-"
    if run.get("failed"):
        return f"FAILED ({run['pods_bound']}/{run['pods']} bound; {run.get('outcome', '')[:40]})"
    if run["pods_bound"] < run["pods"]:
        return f"TIMEOUT {run['pods_bound']}/{run['pods']} bound"
    return _num(run["pods_per_s"])


def _complete(run: dict[str, Any] | None, key: str) -> float | None:
    if run is None or run["pods_bound"] < run["pods"]:
        return None
    return run[key]


def _table(header: list[str], rows: Iterable[list[str]]) -> str:
    rows = list(rows)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    line = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *(line(r) for r in rows)])


def group_runs(runs: list[dict[str, Any]]) -> list[tuple[int, str, str, dict[str, dict[str, Any]]]]:
    """[(nodes, shape key, shape label, {scheduler: run})] in run order."""
    out: dict[tuple[int, str], tuple[str, dict[str, dict[str, Any]]]] = {}
    for r in runs:
        if r.get("profiled"):
            continue
        key = (r["nodes"], r["shape"])
        out.setdefault(key, (r["shape_label"], {}))[1][r["scheduler"]] = r
    return [(n, s, label, scheds) for (n, s), (label, scheds) in out.items()]


def _violations(sc: dict[str, dict[str, Any]]) -> str:
    """Gangs whose bound pods span more than one topology domain, per scheduler (t / u / r), of the
    gangs with bound pods; `!` marks a run whose PodGroups lost the constraint on the API server."""
    cells, of = [], set()
    for s in SCHEDULERS:
        top = (sc.get(s) or {}).get("topology")
        if not top:
            cells.append("-")
            continue
        cells.append(f"{top['violations']}" + ("" if top.get("stored", True) is not False else "!"))
        of.add(top["gangs_with_bound_pods"])
    return " / ".join(cells) + (f" of {'/'.join(map(str, sorted(of)))}" if of else "")


def throughput_table(runs: list[dict[str, Any]]) -> str:
    """Pods/s side by side; apiserver CPU per bound pod; with a topology shape, the gangs not in one domain."""
    topology = any(r.get("topology") for r in runs)
    header = [
        "nodes",
        "shape",
        "pods",
        "creator pods/s (t/u/r)",
        *(f"{NAMES[s]} pods/s" for s in SCHEDULERS),
        "troupe÷upstream",
        "troupe÷raw",
        "apiserver ms/pod (t/u/r)",
        *(["not in one rack (t/u/r)"] if topology else []),
    ]
    rows = []
    for nodes, _, label, sc in group_runs(runs):
        t, u, r = (sc.get(s) for s in SCHEDULERS)
        any_run = t or u or r or next(iter(sc.values()))  # a run of a variant only (troupe-native)
        creator = "/".join(_num(sc[s].get("creator_pods_per_s")) if s in sc else "-" for s in SCHEDULERS)
        api = "/".join(_num(sc[s].get("apiserver_ms_per_pod"), 1) if s in sc else "-" for s in SCHEDULERS)
        rows.append(
            [
                str(nodes),
                label,
                str(any_run["pods"]),
                creator,
                *(_cell_rate(sc.get(s)) for s in SCHEDULERS),
                _ratio(_complete(t, "pods_per_s"), _complete(u, "pods_per_s")),
                _ratio(_complete(t, "pods_per_s"), _complete(r, "pods_per_s")),
                api,
                *([_violations(sc)] if topology else []),
            ]
        )
    return _table(header, rows)


def variant_table(runs: list[dict[str, Any]], variant: str) -> str | None:
    """troupe on another group source's objects (troupe-native: the very objects
    upstream gets; troupe-coscheduling: scheduler-plugins' PodGroups) beside
    troupe on its own CRDs and upstream; None without such a run."""
    if not any(r["scheduler"] == variant for r in runs):
        return None
    v = VARIANT_LABELS[variant]
    header = [
        "nodes",
        "shape",
        f"troupe ({v}) pods/s",
        f"{v}÷troupe (own CRDs)",
        f"p99 {v}÷troupe (own CRDs)",
        f"{v}÷upstream",
        f"p99 {v}÷upstream",
        f"apiserver ms/pod {v}",
    ]
    rows = []
    for nodes, _, label, sc in group_runs(runs):
        n, t, u = sc.get(variant), sc.get("troupe"), sc.get("upstream")
        if n is None:
            continue
        rows.append(
            [
                str(nodes),
                label,
                _cell_rate(n),
                _ratio(_complete(n, "pods_per_s"), _complete(t, "pods_per_s")),
                _ratio(_complete(n, "latency_p99_s"), _complete(t, "latency_p99_s")),
                _ratio(_complete(n, "pods_per_s"), _complete(u, "pods_per_s")),
                _ratio(_complete(n, "latency_p99_s"), _complete(u, "latency_p99_s")),
                _num(n.get("apiserver_ms_per_pod"), 1),
            ]
        )
    return _table(header, rows)


TREE_RUNS = ("troupe-native", "troupe", "upstream", "raw", "raw-troupe")  # the rows of tree_table, in this order
# The raw loop a run is divided by: the one given the same objects (troupe's own
# kinds cost the API server more to create and to patch than native ones).
RAW_PEER = {"troupe": "raw-troupe"}


def raw_peer(sc: dict[str, dict[str, Any]], name: str) -> dict[str, Any] | None:
    """The raw loop's run on the objects run `name` got (the native raw loop where that run is missing)."""
    return sc.get(RAW_PEER.get(name, "raw")) or sc.get("raw")


def tree_table(runs: list[dict[str, Any]]) -> str | None:
    """A tree shape (l): one row per run with pods/s, group (replica) latency, partial replicas and
    replicas not in one rack, and its pods/s over upstream's and over the raw loop's on the same
    objects (the native raw loop where that run is missing); None without such a run."""
    header = [
        "nodes",
        "shape",
        "run",
        "pods/s",
        "replica latency p50 / p99",
        "partial replicas",
        "not in one rack",
        "÷ upstream",
        "÷ raw (same objects)",
        "p99 ÷ upstream",
        "p99 ÷ raw (same objects)",
    ]
    rows = []
    for nodes, _, label, sc in group_runs(runs):
        if not any(r.get("tree") for r in sc.values()):
            continue
        u = sc.get("upstream")
        for name in (*TREE_RUNS, *(s for s in sc if s not in TREE_RUNS)):
            run = sc.get(name)
            if run is None:
                continue
            r = raw_peer(sc, name)
            top = run.get("topology") or {}
            rows.append(
                [
                    str(nodes),
                    label,
                    NAMES.get(name, name),
                    _cell_rate(run),
                    f"{_secs(run['latency_p50_s'])} / {_secs(run['latency_p99_s'])}",
                    _num(run.get("partial_groups")),
                    f"{top['violations']}" + ("" if top.get("stored", True) is not False else "!") if top else "-",
                    "" if name == "upstream" else _ratio(_complete(run, "pods_per_s"), _complete(u, "pods_per_s")),
                    "" if name in RAW_RUNS else _ratio(_complete(run, "pods_per_s"), _complete(r, "pods_per_s")),
                    ""
                    if name == "upstream"
                    else _ratio(_complete(run, "latency_p99_s"), _complete(u, "latency_p99_s")),
                    "" if name in RAW_RUNS else _ratio(_complete(run, "latency_p99_s"), _complete(r, "latency_p99_s")),
                ]
            )
    return _table(header, rows) if rows else None


def status_rate(run: dict[str, Any] | None) -> float | None:
    """Pods bound / (every group's scheduled condition shown - first pod created): pods/s counted
    until the run's status writes are done, not only its binds; None where not measured."""
    if run is None or run.get("status_done_at") is None or not run.get("pods_bound"):
        return None
    span = run["status_done_at"] - run["first_created_at"]
    return float(run["pods_bound"] / span) if span > 0 else None


def status_table(runs: list[dict[str, Any]]) -> str | None:
    """Per run that writes group conditions: how long after its last bind every group showed its
    scheduled condition, pods/s counted to that moment (and over the raw loop's on the same objects,
    as tree_table pairs them), and the scheduler's CPU by then. None without such a run."""
    header = [
        "nodes",
        "shape",
        "run",
        "last condition after last bind",
        "pods/s to last condition",
        "÷ raw (same objects)",
        "scheduler CPU s to last condition",
    ]
    rows = []
    for nodes, _, label, sc in group_runs(runs):
        for name, run in sc.items():
            if "status_done_at" not in run:
                continue
            done = run["status_done_at"]
            peer = None if name in RAW_RUNS else raw_peer(sc, name)
            rows.append(
                [
                    str(nodes),
                    label,
                    NAMES.get(name, name),
                    "not all within the wait" if done is None else _secs(done - run["last_bound_at"]),
                    _num(status_rate(run)),
                    "" if name in RAW_RUNS else _ratio(status_rate(run), status_rate(peer)),
                    _num(run.get("scheduler_cpu_to_status_s"), 1),
                ]
            )
    return _table(header, rows) if rows else None


def latency_table(runs: list[dict[str, Any]]) -> str:
    header = ["nodes", "shape", *(f"{NAMES[s]} p50 / p99" for s in SCHEDULERS), "p99 troupe÷upstream", "p99 troupe÷raw"]
    rows = []
    for nodes, _, label, sc in group_runs(runs):
        t, u, r = (sc.get(s) for s in SCHEDULERS)
        cells = []
        for s in SCHEDULERS:
            run = sc.get(s)
            if run is None:
                cells.append("-")
            else:
                extra = (
                    "" if run["groups_bound"] == run["groups"] else f" ({run['groups_bound']}/{run['groups']} groups)"
                )
                cells.append(f"{_secs(run['latency_p50_s'])} / {_secs(run['latency_p99_s'])}{extra}")
        rows.append(
            [
                str(nodes),
                label,
                *cells,
                _ratio(_complete(t, "latency_p99_s"), _complete(u, "latency_p99_s")),
                _ratio(_complete(t, "latency_p99_s"), _complete(r, "latency_p99_s")),
            ]
        )
    return _table(header, rows)


def detail_table(runs: list[dict[str, Any]]) -> str:
    header = [
        "nodes",
        "shape",
        "run",
        "bound",
        "pods/s",
        "span",
        "drain after last create",
        "creator pods/s",
        "pods/s while creating",
        "scheduler CPU s",
        "apiserver CPU s",
        "apiserver ms/pod",
        "net of idle",
        "etcd CPU s",
        "bench CPU s",
        "other CPU s (wall)",
        "ready after",
        "nodes used (max pods/node)",
        "log (error lines)",
    ]
    rows = []
    for r in runs:
        rows.append(
            [
                str(r["nodes"]),
                r["shape"],
                r["run"],
                f"{r['pods_bound']}/{r['pods']}",
                _num(r["pods_per_s"]),
                _secs(r.get("span_s")),
                _secs(r.get("drain_s")),
                _num(r.get("creator_pods_per_s")),
                _num(r.get("pods_per_s_while_creating")),
                _num(r.get("scheduler_cpu_s"), 1),
                _num(r.get("apiserver_cpu_s"), 1),
                _num(r.get("apiserver_ms_per_pod"), 1),
                _num(r.get("apiserver_net_ms_per_pod"), 1),
                _num(r.get("etcd_cpu_s"), 1),
                _num(r.get("bench_cpu_s"), 1),
                f"{_num(r.get('other_cpu_s'), 1)} ({_num(r.get('wall_s'), 0)} s)"
                if r.get("other_cpu_s") is not None
                else "-",
                _secs(r.get("scheduler_ready_s")),
                f"{r.get('nodes_used', 0)} ({r.get('max_pods_per_node', 0)})",
                f"{Path(r.get('log', '')).name} ({r.get('log_problem_lines', 0)})",
            ]
        )
    return _table(header, rows)


def requests_table(runs: list[dict[str, Any]]) -> str | None:
    """API requests per pod bound, one row per kind ("VERB resource[/subresource]"), one column per
    run; a kind below 0.01 a pod in every run is left out. None when no run has the counts."""
    counted = [r for r in runs if r.get("api_requests") is not None and r.get("pods_bound")]
    if not counted:
        return None
    per_pod = [{k: n / r["pods_bound"] for k, n in r["api_requests"].items()} for r in counted]
    kinds = sorted({k for p in per_pod for k, v in p.items() if v >= 0.01})
    rows = [[kind, *(f"{p.get(kind, 0.0):.2f}" for p in per_pod)] for kind in kinds]
    rows.append(["all", *(f"{sum(p.values()):.2f}" for p in per_pod)])
    return _table(["requests per pod", *(r["run"] for r in counted)], rows)


# -------------------------------------------------------------------- plot


def plot(runs: list[dict[str, Any]], path: Path) -> str | None:
    """Grouped bars: pods/s (top row) and p99 group latency (bottom row), one
    column per node count. Returns None, or why no plot was written."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return (
            "matplotlib is not installed, so no plot; install it with "
            "`.venv/bin/pip install 'matplotlib>=3.8'` and rerun"
        )
    groups = group_runs(runs)
    node_counts = sorted({g[0] for g in groups})
    if not node_counts:
        return "no runs to plot"
    fig, axes = plt.subplots(2, len(node_counts), figsize=(5.5 * len(node_counts), 8), squeeze=False)
    colors = {"troupe": "#1f77b4", "upstream": "#ff7f0e", "raw": "#7f7f7f"}
    width = 0.26
    for col, nodes in enumerate(node_counts):
        mine = [g for g in groups if g[0] == nodes]
        labels = [g[2] for g in mine]
        for row, (key, ylabel) in enumerate(
            (
                ("pods_per_s", "pods/s (bound / (last bound - first created))"),
                ("latency_p99_s", "p99 group latency (s)"),
            )
        ):
            ax = axes[row][col]
            for k, s in enumerate(SCHEDULERS):
                vals, unfinished = [], []
                for g in mine:
                    run = g[3].get(s)
                    v = run.get(key) if run else None
                    vals.append(v if v is not None and v == v else 0.0)
                    unfinished.append(run if run is not None and run["pods_bound"] < run["pods"] else None)
                xs = [i + (k - 1) * width for i in range(len(mine))]
                bars = ax.bar(xs, vals, width, label=NAMES[s], color=colors[s])
                for bar, v, run in zip(bars, vals, unfinished):
                    x = bar.get_x() + bar.get_width() / 2
                    if run is not None:
                        bar.set_hatch("//")
                    if v:
                        ax.annotate(
                            f"{v:,.0f}" if key == "pods_per_s" else f"{v:.2f}",
                            (x, bar.get_height()),
                            ha="center",
                            va="bottom",
                            fontsize=7,
                        )
                    elif run is not None:  # no bar to see: say what happened
                        ax.annotate(
                            f"{run['pods_bound']:,}/{run['pods']:,} bound",
                            (x, 0),
                            xytext=(0, 4),
                            textcoords="offset points",
                            ha="center",
                            va="bottom",
                            rotation=90,
                            fontsize=7,
                            color=colors[s],
                        )
            ax.set_xticks(range(len(mine)), labels, fontsize=8)
            ax.set_ylabel(ylabel, fontsize=8)
            ax.set_title(f"{nodes} nodes", fontsize=10)
            if row == 0 and col == 0:
                ax.legend(fontsize=8)
    fig.suptitle(
        "troupe vs kube-scheduler v1.37.2 (GangScheduling) vs raw bind loop\n"
        "same API server, nodes and pod creator; hatched = did not finish",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None
