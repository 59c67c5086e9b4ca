"""Invariants of gang scheduling, checked from the outside while faults happen.

An `Observer` polls the API (kubectl, as the admin) in a thread and checks,
at every observation:

- no pod is bound twice: once a pod (by uid) is seen on a node, it is never
  seen on another node, nor unbound again;
- no gang is bound below minCount: a gang seen with some but fewer than
  minCount pods bound must reach minCount within `partial_grace` seconds
  (the binds of one decision are separate API calls, so an observation can
  fall between two of them, and binds in flight at an outage are retried
  through it; a gang that stays partial was placed partially);
- no node is overcommitted: the requests (cpu, memory, pods) of the pods
  bound to a node fit its allocatable;
- with `reservations=True`: no room is held for a group that is gone. A pod
  whose group object no longer exists (`live_groups` says which exist), or
  whose gang has fewer pods than minCount, must not carry
  `status.nominatedNodeName` longer than `release_grace` seconds after that
  was first observed (a fault before then moves the deadline, up to
  `release_grace_max`): a restarted scheduler adopts what that field says.

Trees of groups (troupe's CompositePodGroups, `expect_tree` with a
`TreeShape`) add, at every observation:

- no tree is bound below minGroupCount at any level: a CompositePodGroup
  with some pods bound under it must have at least minGroupCount (a basic
  one: 1) children bound, a PodGroup child bound when it has minCount pods
  bound (a basic one: 1), a CompositePodGroup child when its own rule
  holds; seen otherwise, it must hold within `partial_grace` seconds (the
  gangs' bind window; a fault that deletes pods of the tree excuses it as it
  excuses a gang). Every ancestor of a PodGroup with pods bound is checked.
- with `reservations=True`: no room is held for a tree member whose leaf
  PodGroup, an ancestor CompositePodGroup or the root is gone (`live_groups`
  names CompositePodGroups with the source `COMPOSITE`), or whose tree is
  not ready (its root short of minGroupCount ready children: a PodGroup is
  ready with minCount pods, a CompositePodGroup with minGroupCount ready
  children), past the same grace as a gone group's.

Gangs come from several group sources (`SOURCES`: troupe's PodGroup,
scheduler-plugins', Volcano's, Kueue's plain pod groups); `pod_gang` says
which group a pod names. `final_check()` waits for every expected pod to be
bound; `leaked_nominations()` lists what is still held for a group that is
gone. Used by tests/integration/test_outage.py,
test_leader_failover_repeated.py and bench/soak.py. Polling failures (the
API server is away) are counted, not raised.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from scheduler.api.quantity import parse_quantity

GROUP_LABEL = "scheduling.troupe.dev/pod-group"
# troupe's pods that stand in for a unit waiting for new nodes (scheduler/runtime/capacity.py)
STANDS_IN_FOR = "scheduling.troupe.dev/stands-in-for"
STAND_IN_UNIT = "scheduling.troupe.dev/unit"


@dataclass(frozen=True)
class Source:
    """How one group source links a pod to its group, and the group object it reads."""

    name: str
    api_version: str | None  # the group object's; None: no object, the pods declare the group (Kueue)
    resource: str | None  # kubectl's fully qualified resource (three CRDs have the kind PodGroup)
    label: str | None = None
    annotation: str | None = None
    size_annotation: str | None = None  # the gang size every pod declares (Kueue)

    @property
    def api_group(self) -> str:
        return (self.api_version or self.label or "").split("/")[0]

    def group_of(self, meta: Mapping[str, Any]) -> str | None:
        if self.label is not None:
            value = (meta.get("labels") or {}).get(self.label)
        else:
            value = (meta.get("annotations") or {}).get(self.annotation or "")
        return str(value) if value else None

    def declared_size(self, meta: Mapping[str, Any]) -> int | None:
        if self.size_annotation is None:
            return None
        try:
            return int((meta.get("annotations") or {}).get(self.size_annotation) or 0) or None
        except ValueError:
            return None

    def group_object(self, namespace: str, name: str, size: int) -> dict[str, Any] | None:
        """The group object as its operator would write it: a gang of `size`."""
        if self.api_version is None:
            return None
        if self.name == "troupe":
            spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": size}}}
        else:  # scheduler-plugins and Volcano: spec.minMember
            spec = {"minMember": size}
        meta = {"name": name, "namespace": namespace}
        return {"apiVersion": self.api_version, "kind": "PodGroup", "metadata": meta, "spec": spec}

    def link(self, pod: dict[str, Any], group: str, size: int) -> None:
        """Make `pod` a member of `group` (of `size` pods)."""
        meta = pod["metadata"]
        if self.label is not None:
            meta.setdefault("labels", {})[self.label] = group
        else:
            meta.setdefault("annotations", {})[self.annotation or ""] = group
        if self.size_annotation is not None:
            meta.setdefault("annotations", {})[self.size_annotation] = str(size)


SOURCES: dict[str, Source] = {
    s.name: s
    for s in (
        Source("troupe", "scheduling.troupe.dev/v1alpha2", "podgroups.scheduling.troupe.dev", label=GROUP_LABEL),
        Source(
            "scheduler-plugins",
            "scheduling.x-k8s.io/v1alpha1",
            "podgroups.scheduling.x-k8s.io",
            label="scheduling.x-k8s.io/pod-group",
        ),
        Source(
            "volcano",
            "scheduling.volcano.sh/v1beta1",
            "podgroups.scheduling.volcano.sh",
            annotation="scheduling.k8s.io/group-name",
        ),
        Source(
            "kueue",
            None,
            None,
            label="kueue.x-k8s.io/pod-group-name",
            size_annotation="kueue.x-k8s.io/pod-group-total-count",
        ),
    )
}


def pod_gang(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(source, group name) of the group the pod names, if any."""
    meta = pod["metadata"]
    for source in SOURCES.values():
        group = source.group_of(meta)
        if group is not None:
            return source.name, group
    return None


# troupe's CompositePodGroups: `live_groups` names them (COMPOSITE, namespace, name).
COMPOSITE = "troupe-composite"
COMPOSITE_API = "scheduling.troupe.dev/v1alpha2"
COMPOSITE_RESOURCE = "compositepodgroups.scheduling.troupe.dev"


@dataclass(frozen=True)
class TreeNode:
    """A CompositePodGroup or a leaf PodGroup (troupe's kinds) of a tree."""

    parent: str | None  # a CompositePodGroup's name; None: the root
    minimum: int | None = None  # gang: minGroupCount / minCount; None: basic
    size: int = 0  # a leaf's pods
    key: str | None = None  # topology key


@dataclass(frozen=True)
class TreeShape:
    """A tree: its CompositePodGroups (the root first, every parent before its
    children) and its leaf PodGroups, by name (one name space for both)."""

    root: str
    composites: Mapping[str, TreeNode]
    leaves: Mapping[str, TreeNode]

    def __post_init__(self) -> None:
        assert not set(self.composites) & set(self.leaves), "a tree's groups need distinct names"
        assert self.composites[self.root].parent is None, "the root has no parent"

    def children(self, name: str) -> list[tuple[bool, str]]:
        """(is a CompositePodGroup, name) of `name`'s children, CompositePodGroups first."""
        return [(True, c) for c, n in self.composites.items() if n.parent == name] + [
            (False, leaf) for leaf, n in self.leaves.items() if n.parent == name
        ]

    def ancestors(self, leaf: str) -> list[str]:
        """The CompositePodGroups above a leaf, its parent first, the root last."""
        out: list[str] = []
        parent = self.leaves[leaf].parent
        while parent is not None:
            out.append(parent)
            parent = self.composites[parent].parent
        return out

    def depth(self) -> int:
        """Levels, the PodGroups included."""
        return 1 + max((len(self.ancestors(leaf)) for leaf in self.leaves), default=0)

    @property
    def pods(self) -> int:
        return sum(n.size for n in self.leaves.values())

    def rule(
        self, counts: Mapping[str, int], exists: Callable[[bool, str], bool] = lambda composite, name: True
    ) -> dict[str, tuple[bool, int, int]]:
        """Each group's rule over `counts` (pods per leaf: bound ones for
        "bound", existing ones for "ready"): name -> (holds, what it counts
        (a leaf's pods, a CompositePodGroup's children that hold), pods counted
        under it). A group that does not exist (`exists`) does not hold."""
        out: dict[str, tuple[bool, int, int]] = {}

        def visit(composite: bool, name: str) -> tuple[bool, int]:
            if not composite:
                n = counts.get(name, 0)
                ok = exists(False, name) and n >= (self.leaves[name].minimum or 1)
                out[name] = (ok, n, n)
                return ok, n
            held = under = 0
            for child_composite, child in self.children(name):
                ok, pods = visit(child_composite, child)
                held += ok
                under += pods
            ok = exists(True, name) and held >= (self.composites[name].minimum or 1)
            out[name] = (ok, held, under)
            return ok, under

        visit(True, self.root)
        return out

    def why_not(
        self,
        rule: Mapping[str, tuple[bool, int, int]],
        name: str,
        exists: Callable[[bool, str], bool] = lambda composite, name: True,
    ) -> str:
        """Why `name` (a CompositePodGroup or a leaf) does not hold by `rule`:
        down to the first child that does not."""
        composite = name in self.composites
        if not exists(composite, name):
            return f"{'CompositePodGroup' if composite else 'PodGroup'} {name} is gone"
        _, n, _ = rule[name]
        if not composite:
            return f"{name} has {n} of minCount {self.leaves[name].minimum or 1} pod(s)"
        text = f"{name} has {n} of minGroupCount {self.composites[name].minimum or 1} child group(s)"
        failing = [c for _, c in self.children(name) if not rule[c][0]]
        return text + (f": {self.why_not(rule, failing[0], exists)}" if failing else "")

    def summary(self, counts: Mapping[str, int]) -> str:
        """Pods per leaf over each leaf's minimum, e.g. "t1-leader 1/1, t1-workers 2/3"."""
        return ", ".join(f"{leaf} {counts.get(leaf, 0)}/{n.minimum or 1}" for leaf, n in self.leaves.items())


GangKey = tuple[str, str, str]  # namespace, group name, source


def _gang_key(pod: Mapping[str, Any]) -> GangKey | None:
    gang = pod_gang(pod)
    return None if gang is None else (pod["metadata"]["namespace"], gang[1], gang[0])


def _gang_name(key: GangKey) -> str:
    namespace, name, source = key
    return f"{namespace}/{name}" + ("" if source == "troupe" else f" ({source})")


@dataclass
class Gang:
    namespace: str
    name: str
    min_count: int
    source: str = "troupe"
    # A fault touched the gang (one of its pods or nodes deleted): being
    # partial until then is expected, not a violation.
    disrupted_until: float = 0.0
    partial_since: float | None = None
    reported: bool = False


@dataclass
class Gone:
    """A group observed gone (its object deleted, or fewer pods than minCount):
    its pods must not hold room after `deadline`."""

    why: str
    since: float
    deadline: float
    held_at_start: bool  # its pods were nominated when it was first seen gone, or in the observation before
    released: bool = False
    reported: bool = False


@dataclass
class Tree:
    """A tree the observer knows the shape of; `checked` while it is expected
    (not deleted on purpose): its shape stays for the reservation check."""

    namespace: str
    shape: TreeShape
    checked: bool = True
    disrupted_until: float = 0.0  # a fault deleted some of its pods (set through its leaves' gangs)
    partial_since: dict[str, float] = field(default_factory=dict)  # CompositePodGroup -> seen below its rule since
    partial_clock: dict[str, str] = field(default_factory=dict)  # the same, wall clock
    reported: set[str] = field(default_factory=set)
    history: list[str] = field(default_factory=list)  # "HH:MM:SS bound: ..." whenever that changed
    last_summary: str = ""


@dataclass
class Observer:
    cluster: Any  # hack/localcluster.LocalCluster
    partial_grace: float = 75.0
    interval: float = 0.5
    # Pods are listed with this label selector; None: every pod (the
    # overcommit check then counts them all, and every source's gangs are seen).
    selector: str | None = GROUP_LABEL
    # Check that no room stays held for a group that is gone (module docstring).
    reservations: bool = False
    # (source, namespace, name) of the group objects that exist now; None: not known now.
    live_groups: Callable[[], set[tuple[str, str, str]] | None] | None = None
    release_grace: float = 10.0
    release_grace_max: float = 60.0
    # A pod that stands in for a unit waiting for new nodes (troupe's
    # autoscaling, docs/autoscaling.md) may outlive its need by this much: a
    # leader that dies after the bind leaves it to the next one, which sweeps
    # what it adopted and no unit asks for again after 30 s.
    stand_in_grace: float = 90.0
    violations: list[str] = field(default_factory=list)
    observations: int = 0
    poll_failures: int = 0
    max_partial_seconds: float = 0.0
    max_tree_partial_seconds: float = 0.0
    tree_partial_violations: int = 0
    tree_held_violations: int = 0  # of held_violations, those of tree members

    def __post_init__(self) -> None:
        self.gangs: dict[GangKey, Gang] = {}
        self.trees: dict[tuple[str, str], Tree] = {}  # (namespace, root) -> its tree
        self.leaf_tree: dict[tuple[str, str], tuple[str, str]] = {}  # (namespace, leaf PodGroup) -> its tree
        self.first_node: dict[str, tuple[str, str]] = {}  # uid -> (pod key, node)
        self.bound_uids: set[str] = set()
        # Pods seen bound, then unbound in a later list: uid -> (pod key, node, when).
        self.unbound_again: dict[str, tuple[str, str, str]] = {}
        self.stale_reads = 0  # of those, seen on their node again: the API's older view
        # Reservations (with `reservations`): pods seen nominated, groups seen
        # gone, how long their room stayed held, pods bound while their group was gone.
        self.nominated_uids: set[str] = set()
        # Stand-ins (label STANDS_IN_FOR): seen, seen with no unbound pod of
        # their unit left since (uid -> when), reported.
        self.stand_ins_seen = 0
        self.stand_in_idle: dict[str, float] = {}
        self.stand_ins_left: list[str] = []
        self._stand_ins_known: set[str] = set()
        self._stand_ins_reported: set[str] = set()
        self.gone: dict[GangKey, Gone] = {}
        self.release_seconds: list[float] = []
        self.held_violations = 0
        self.bound_while_gone: list[str] = []  # pods first seen bound while their group object was gone
        self.held_ends: list[str] = []  # how each room held past its deadline ended (released, or pods gone)
        self._held_before: set[GangKey] = set()  # gangs with a nominated pod in the previous observation
        self._fault_started: float | None = None  # a fault under way since
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_pods: list[dict[str, Any]] = []
        self.last_groups: set[tuple[str, str, str]] | None = None

    # ----------------------------------------------------------- bookkeeping

    def expect_gang(self, namespace: str, name: str, min_count: int, source: str = "troupe") -> None:
        with self._lock:
            self.gangs[(namespace, name, source)] = Gang(namespace, name, min_count, source)

    def forget_gang(self, namespace: str, name: str, source: str = "troupe") -> None:
        """The gang was deleted on purpose (finished work)."""
        with self._lock:
            self.gangs.pop((namespace, name, source), None)

    def expect_tree(self, namespace: str, shape: TreeShape) -> None:
        """A tree of troupe's kinds: its leaves are expected gangs (minCount,
        a basic one 1), and its CompositePodGroups are checked by their rule."""
        with self._lock:
            self.trees[(namespace, shape.root)] = Tree(namespace, shape)
            for leaf, node in shape.leaves.items():
                self.gangs[(namespace, leaf, "troupe")] = Gang(namespace, leaf, node.minimum or 1)
                self.leaf_tree[(namespace, leaf)] = (namespace, shape.root)

    def forget_tree(self, namespace: str, root: str) -> None:
        """The tree (or a part of it) was deleted on purpose: no longer expected
        nor checked for binding; its shape stays for the reservation check."""
        with self._lock:
            tree = self.trees.get((namespace, root))
            if tree is None:
                return
            tree.checked = False
            for leaf in tree.shape.leaves:
                self.gangs.pop((namespace, leaf, "troupe"), None)

    def disrupt(self, namespace: str, name: str, seconds: float = 90.0, source: str = "troupe") -> None:
        """A fault removed some of the gang's pods: allow it (and the tree it
        is a leaf of) to be partial for a while."""
        with self._lock:
            until = time.monotonic() + seconds
            gang = self.gangs.get((namespace, name, source))
            if gang is not None:
                gang.disrupted_until = until
                gang.partial_since = None
            tree = self._tree_of((namespace, name, source))
            if tree is not None:
                tree.disrupted_until = max(tree.disrupted_until, until)
                tree.partial_since.clear()

    def _tree_of(self, gkey: GangKey | None) -> Tree | None:
        if gkey is None or gkey[2] != "troupe":
            return None
        root = self.leaf_tree.get((gkey[0], gkey[1]))
        return None if root is None else self.trees.get(root)

    def fault_started(self, now: float | None = None) -> None:
        """A fault that stops the scheduler or its API for a while begins: no
        deadline that has not passed yet is enforced until `fault_made`."""
        with self._lock:
            self._fault_started = time.monotonic() if now is None else now

    def fault_made(self, now: float | None = None) -> None:
        """That fault ended just now: a group seen gone whose deadline had not
        passed when it began gets `release_grace` from now (at most
        `release_grace_max` after it was first seen gone)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            began = now if self._fault_started is None else self._fault_started
            for g in self.gone.values():
                if g.deadline >= began:
                    g.deadline = min(max(g.deadline, now + self.release_grace), g.since + self.release_grace_max)
            self._fault_started = None

    def violation(self, text: str) -> None:
        with self._lock:
            self.violations.append(f"{time.strftime('%H:%M:%S')} {text}")

    # --------------------------------------------------------------- polling

    def start(self) -> Observer:
        self._thread = threading.Thread(target=self._run, name="invariants", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        with self._lock:
            present = {p["metadata"]["uid"] for p in self.last_pods}
            for uid, (key, node, when) in self.unbound_again.items():
                if uid in present:  # one deleted since cannot be told apart; it is bound nowhere now
                    self.violations.append(
                        f"{when} pod {key} was bound to {node}, then unbound, and not seen bound again"
                    )
            self.unbound_again.clear()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.poll()

    def poll(self) -> bool:
        """One observation; False if the API could not be read."""
        select = ("-l", self.selector) if self.selector else ()
        try:
            pods = self.cluster.get_json("pods", "-A", *select, "--request-timeout=10s")["items"]
            nodes = self.cluster.get_json("nodes", "--request-timeout=10s")["items"]
        except Exception:  # noqa: BLE001 - the API server may be away: not an observation
            with self._lock:
                self.poll_failures += 1
            return False
        # After the pods: a group created since the pods were listed is not
        # missed, one deleted since is seen gone (the grace covers it).
        groups = self.live_groups() if self.live_groups is not None else None
        self.check(pods, nodes, time.monotonic(), groups=groups)
        return True

    def check(
        self,
        pods: Iterable[dict[str, Any]],
        nodes: Iterable[dict[str, Any]],
        now: float,
        groups: set[tuple[str, str, str]] | None = None,
    ) -> None:
        """The invariants over one consistent-enough view (pods listed before
        nodes, then `groups`: the group objects that exist, if known)."""
        pods = list(pods)
        stand_ins = [p for p in pods if STANDS_IN_FOR in (p["metadata"].get("labels") or {})]
        if stand_ins:
            pods = [p for p in pods if STANDS_IN_FOR not in (p["metadata"].get("labels") or {})]
        with self._lock:
            self._check_stand_ins(stand_ins, pods, now)
            self.observations += 1
            self.last_pods = pods
            self.last_groups = groups
            newly_bound: list[dict[str, Any]] = []
            bound_by_gang: dict[GangKey, int] = {}
            used: dict[str, dict[str, Decimal]] = {}
            for p in pods:
                meta, spec = p["metadata"], p["spec"]
                uid, key = meta["uid"], f"{meta['namespace']}/{meta['name']}"
                node = spec.get("nodeName") or ""
                seen = self.first_node.get(uid)
                if seen is not None and node and seen[1] != node:
                    self.violations.append(
                        f"{time.strftime('%H:%M:%S')} pod {key} (uid {uid[:8]}) was bound to {seen[1]}, now {node}"
                    )
                elif seen is not None and not node:
                    # nodeName cannot be unset: either the API served an older
                    # list (seen right after an etcd restart) or the bind was
                    # lost. A violation only if it is not seen on its node again.
                    self.unbound_again.setdefault(uid, (key, seen[1], time.strftime("%H:%M:%S")))
                elif node and self.unbound_again.pop(uid, None) is not None:
                    self.stale_reads += 1
                if node:
                    if uid not in self.bound_uids:
                        newly_bound.append(p)
                    self.first_node.setdefault(uid, (key, node))
                    self.bound_uids.add(uid)
                    gkey = _gang_key(p)
                    if gkey is not None and not meta.get("deletionTimestamp"):
                        bound_by_gang[gkey] = bound_by_gang.get(gkey, 0) + 1
                    terminal = (p.get("status") or {}).get("phase") in ("Succeeded", "Failed")
                    if not terminal:
                        u = used.setdefault(node, {"cpu": Decimal(0), "memory": Decimal(0), "pods": Decimal(0)})
                        for c in spec.get("containers") or []:
                            req = (c.get("resources") or {}).get("requests") or {}
                            for r in ("cpu", "memory"):
                                if r in req:
                                    u[r] += parse_quantity(str(req[r]))
                        u["pods"] += 1
            for n in nodes:
                name = n["metadata"]["name"]
                alloc = (n.get("status") or {}).get("allocatable") or {}
                for r, amount in used.get(name, {}).items():
                    if r in alloc and amount > parse_quantity(str(alloc[r])):
                        self.violations.append(
                            f"{time.strftime('%H:%M:%S')} node {name} overcommitted: {r} {amount} > {alloc[r]}"
                        )
            for gkey, gang in self.gangs.items():
                bound = bound_by_gang.get(gkey, 0)
                partial = 0 < bound < gang.min_count and now >= gang.disrupted_until
                if not partial:
                    gang.partial_since = None
                    continue
                if gang.partial_since is None:
                    gang.partial_since = now
                lasted = now - gang.partial_since
                self.max_partial_seconds = max(self.max_partial_seconds, lasted)
                if lasted > self.partial_grace and not gang.reported:
                    gang.reported = True
                    self.violations.append(
                        f"{time.strftime('%H:%M:%S')} gang {_gang_name(gkey)} has {bound} of minCount "
                        f"{gang.min_count} pods bound for {lasted:.0f}s"
                    )
            self._check_trees(bound_by_gang, now)
            if self.reservations:
                self._check_reservations(pods, groups, newly_bound, now)

    def _check_stand_ins(self, stand_ins: list[dict[str, Any]], pods: list[dict[str, Any]], now: float) -> None:
        """No stand-in outlives its unit's need (its group bound whole or gone:
        no unbound pod of it left) by more than `stand_in_grace` (caller holds
        the lock). Its unit: the annotation "<API group> <namespace>/<name>",
        a PodGroup or a tree's root CompositePodGroup."""
        waiting: set[tuple[str, str]] = set()
        for p in pods:
            gkey = _gang_key(p)
            phase = (p.get("status") or {}).get("phase")
            if gkey is None or p["spec"].get("nodeName") or phase in ("Succeeded", "Failed"):
                continue
            waiting.add((gkey[0], gkey[1]))
            root = self.leaf_tree.get((gkey[0], gkey[1]))
            if root is not None:
                waiting.add(root)
        present = set()
        for s in stand_ins:
            meta = s["metadata"]
            uid = meta["uid"]
            present.add(uid)
            if uid not in self._stand_ins_known:
                self._stand_ins_known.add(uid)
                self.stand_ins_seen += 1
            unit = str((meta.get("annotations") or {}).get(STAND_IN_UNIT) or "")
            namespace, _, name = unit.partition(" ")[2].partition("/")
            if (namespace, name) in waiting:
                self.stand_in_idle.pop(uid, None)
                continue
            since = self.stand_in_idle.setdefault(uid, now)
            if now - since > self.stand_in_grace and uid not in self._stand_ins_reported:
                self._stand_ins_reported.add(uid)
                self.violations.append(
                    f"{time.strftime('%H:%M:%S')} stand-in {meta['namespace']}/{meta['name']} for {unit} left "
                    f"behind: no pod of its unit has waited for {now - since:.0f}s"
                )
        for uid in set(self.stand_in_idle) - present:
            del self.stand_in_idle[uid]
        self.stand_ins_left = [f"{s['metadata']['namespace']}/{s['metadata']['name']}" for s in stand_ins]

    def _check_trees(self, bound_by_gang: Mapping[GangKey, int], now: float) -> None:
        """No CompositePodGroup with pods bound under it is seen below its rule
        for longer than `partial_grace` (caller holds the lock)."""
        clock = time.strftime("%H:%M:%S")
        for tree in self.trees.values():
            if not tree.checked:
                continue
            shape, ns = tree.shape, tree.namespace
            bound = {leaf: bound_by_gang.get((ns, leaf, "troupe"), 0) for leaf in shape.leaves}
            rule = shape.rule(bound)
            summary = shape.summary(bound)
            if summary != tree.last_summary:
                tree.last_summary = summary
                below = [c for c in shape.composites if rule[c][2] and not rule[c][0]]
                tree.history.append(f"{clock} bound {summary}" + (f" (below: {', '.join(below)})" if below else ""))
                del tree.history[:-12]
            excused = now < tree.disrupted_until
            for name, node in shape.composites.items():
                holds, held, under = rule[name]
                if holds or not under or excused:
                    tree.partial_since.pop(name, None)
                    tree.partial_clock.pop(name, None)
                    continue
                since = tree.partial_since.setdefault(name, now)
                tree.partial_clock.setdefault(name, clock)
                lasted = now - since
                self.max_tree_partial_seconds = max(self.max_tree_partial_seconds, lasted)
                if lasted > self.partial_grace and name not in tree.reported:
                    tree.reported.add(name)
                    self.tree_partial_violations += 1
                    children = ", ".join(
                        f"{c} {'bound' if rule[c][0] else 'not bound'}" for _, c in shape.children(name)
                    )
                    what = "the root" if node.parent is None else f"under {node.parent}"
                    self.violations.append(
                        f"{clock} tree {ns}/{shape.root} bound below minGroupCount: CompositePodGroup {name} "
                        f"({what}) has {held} of minGroupCount {node.minimum or 1} child group(s) bound "
                        f"({children}) with {under} pod(s) bound under it, since {tree.partial_clock[name]} "
                        f"({lasted:.0f}s); timeline: {'; '.join(tree.history)}"
                    )

    def _gone_groups(self, pods: list[dict[str, Any]], groups: set[tuple[str, str, str]] | None) -> dict[GangKey, str]:
        """The groups that pods name and that are gone: why, by gang."""
        live: dict[GangKey, int] = {}
        declared: dict[GangKey, int] = {}
        for p in pods:
            gkey = _gang_key(p)
            if gkey is None:
                continue
            meta = p["metadata"]
            terminal = (p.get("status") or {}).get("phase") in ("Succeeded", "Failed")
            live.setdefault(gkey, 0)
            if not meta.get("deletionTimestamp") and not terminal:
                live[gkey] += 1
            size = SOURCES[gkey[2]].declared_size(meta)
            if size is not None:
                declared[gkey] = max(declared.get(gkey, 0), size)
        gone: dict[GangKey, str] = {}
        for gkey, count in live.items():
            namespace, name, source = gkey
            if (
                groups is not None
                and SOURCES[source].api_version is not None
                and (source, namespace, name) not in groups
            ):
                gone[gkey] = "its PodGroup is gone"
                continue
            gang = self.gangs.get(gkey)
            min_count = gang.min_count if gang is not None else declared.get(gkey)
            if min_count is not None and count < min_count:
                gone[gkey] = f"it has {count} of minCount {min_count} pods"
        trees: dict[tuple[str, str], dict[str, str]] = {}
        for gkey in live:
            tree = self._tree_of(gkey)
            if gkey in gone or tree is None:
                continue
            at = (tree.namespace, tree.shape.root)
            if at not in trees:
                trees[at] = self._tree_gone(tree, live, groups)
            why = trees[at].get(gkey[1])
            if why is not None:
                gone[gkey] = why
        return gone

    def _tree_gone(
        self, tree: Tree, live: Mapping[GangKey, int], groups: set[tuple[str, str, str]] | None
    ) -> dict[str, str]:
        """The tree's leaves that must hold no room, and why: an ancestor
        CompositePodGroup is gone, or the tree is not ready (its root short of
        ready children, each group by its rule over the pods that exist)."""
        ns, shape = tree.namespace, tree.shape

        def exists(composite: bool, name: str) -> bool:
            return groups is None or (COMPOSITE if composite else "troupe", ns, name) in groups

        out: dict[str, str] = {}
        for leaf in shape.leaves:
            for above in shape.ancestors(leaf):
                if not exists(True, above):
                    which = "its tree's root" if above == shape.root else "its ancestor"
                    out[leaf] = f"{which} CompositePodGroup {above} is gone"
                    break
        rule = shape.rule({leaf: live.get((ns, leaf, "troupe"), 0) for leaf in shape.leaves}, exists)
        if not rule[shape.root][0]:
            why = f"its tree {ns}/{shape.root} is not ready: {shape.why_not(rule, shape.root, exists)}"
            for leaf in shape.leaves:
                out.setdefault(leaf, why)
        return out

    def _check_reservations(
        self,
        pods: list[dict[str, Any]],
        groups: set[tuple[str, str, str]] | None,
        newly_bound: list[dict[str, Any]],
        now: float,
    ) -> None:
        """No pod of a group that is gone holds room past its deadline (caller holds the lock)."""
        nominated: dict[GangKey, list[str]] = {}
        for p in pods:
            target = (p.get("status") or {}).get("nominatedNodeName")
            if not target or p["spec"].get("nodeName") or p["metadata"].get("deletionTimestamp"):
                continue
            self.nominated_uids.add(p["metadata"]["uid"])
            gkey = _gang_key(p)
            if gkey is not None:
                nominated.setdefault(gkey, []).append(f"{p['metadata']['name']} on {target}")
        gone = self._gone_groups(pods, groups)
        clock = time.strftime("%H:%M:%S")
        for gkey in list(self.gone):
            if gkey not in gone:
                g = self.gone.pop(gkey)  # whole again, its object back, or its pods deleted
                if g.reported and not g.released:
                    self.held_ends.append(
                        f"{clock} {_gang_name(gkey)}: still held {now - g.since:.0f}s after {g.why}, "
                        "when its pods were deleted (or it was whole again)"
                    )
        for gkey, why in gone.items():
            held = nominated.get(gkey, [])
            g = self.gone.get(gkey)
            if g is None:
                g = self.gone[gkey] = Gone(why, now, now + self.release_grace, bool(held) or gkey in self._held_before)
            if not held and not g.released:
                g.released = True
                if g.held_at_start:
                    self.release_seconds.append(now - g.since)
                if g.reported:
                    self.held_ends.append(f"{clock} {_gang_name(gkey)}: released {now - g.since:.0f}s after {g.why}")
            excused = self._fault_started is not None and g.deadline >= self._fault_started
            overdue = (now > g.deadline and not excused) or now > g.since + self.release_grace_max
            if held and overdue and not g.reported:
                g.reported = True
                self.held_violations += 1
                tree = self._tree_of(gkey)
                member = "gang"
                if tree is not None:
                    self.tree_held_violations += 1
                    member = f"tree {tree.namespace}/{tree.shape.root} member"
                self.violations.append(
                    f"{time.strftime('%H:%M:%S')} room held for {member} {_gang_name(gkey)} {now - g.since:.0f}s "
                    f"after {g.why}: nominatedNodeName {', '.join(sorted(held))}"
                )
        for p in newly_bound:
            gkey = _gang_key(p)
            if gkey is not None and gone.get(gkey, "").endswith(" is gone"):
                name = f"{p['metadata']['namespace']}/{p['metadata']['name']}"
                self.bound_while_gone.append(f"{name} {now - self.gone[gkey].since:.0f}s after")
        self._held_before = set(nominated)

    # ------------------------------------------------------------- the end

    def leaked_nominations(self) -> list[str]:
        """Pods of the last observation nominated (not bound) for a group
        that is gone: room that a restarted scheduler would hold again."""
        with self._lock:
            gone = self._gone_groups(self.last_pods, self.last_groups)
            return [
                f"{p['metadata']['namespace']}/{p['metadata']['name']} on "
                f"{p['status']['nominatedNodeName']} ({gone[gkey]})"
                for p in self.last_pods
                if (p.get("status") or {}).get("nominatedNodeName")
                and not p["spec"].get("nodeName")
                and (gkey := _gang_key(p)) in gone
            ]

    def _expected(self, p: Mapping[str, Any]) -> bool:
        return _gang_key(p) in self.gangs

    def stands_ins_seen_text(self) -> str:
        with self._lock:
            return f"{self.stand_ins_seen} / {len(self.stand_ins_left)}"

    def unbound(self) -> list[str]:
        """Pods of expected gangs that exist and have no node (in the last observation)."""
        with self._lock:
            return [
                f"{p['metadata']['namespace']}/{p['metadata']['name']}"
                for p in self.last_pods
                if not p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp") and self._expected(p)
            ]

    def binding_backlog(self, at_least: int) -> bool:
        """The last observation shows binding under way (a pod of an expected
        gang bound) with at least `at_least` of their pods still unbound."""
        left = self.unbound()
        with self._lock:
            expected = [p for p in self.last_pods if self._expected(p)]
        return len(left) >= at_least and len(expected) > len(left)

    def final_check(self, timeout: float = 120.0, expected_pods: int | None = None) -> list[str]:
        """Wait until every pod of the expected gangs is bound (and, if given,
        at least `expected_pods` exist); the pods still unbound at the deadline."""
        deadline = time.monotonic() + timeout
        left: list[str] = ["(no observation)"]
        while time.monotonic() < deadline:
            if self.poll():
                left = self.unbound()
                with self._lock:
                    count = len(self.last_pods)
                if not left and (expected_pods is None or count >= expected_pods):
                    return []
                if expected_pods is not None and count < expected_pods:
                    left = left or [f"only {count} of {expected_pods} pods exist"]
            time.sleep(self.interval)
        return left


# ------------------------------------------------------------------ workload


def gang_objects(
    namespace: str, name: str, size: int, cpu: str = "100m", memory: str = "64Mi", source: str = "troupe"
) -> list[dict[str, Any]]:
    """A gang of `size` (minCount/minMember `size`) of one group source: its
    group object, if the source has one, then its `size` pods."""
    group = SOURCES[source].group_object(namespace, name, size)
    pods = [gang_pod(namespace, name, i, cpu, memory, source=source, size=size) for i in range(size)]
    return ([group] if group is not None else []) + pods


def tree_objects(namespace: str, shape: TreeShape, cpu: str = "100m", memory: str = "64Mi") -> list[dict[str, Any]]:
    """A tree of troupe's kinds: its CompositePodGroups (parents first, every
    one naming the root's Workload), its leaf PodGroups, then each leaf's
    `size` pods (`<leaf>-<i>`)."""
    out: list[dict[str, Any]] = []
    for name, node in shape.composites.items():
        spec: dict[str, Any] = {
            "workloadRef": {"workloadName": shape.root, "templateName": name},
            "schedulingPolicy": _policy(node, "minGroupCount"),
        }
        out.append(_tree_group("CompositePodGroup", namespace, name, node, spec))
    for name, node in shape.leaves.items():
        out.append(_tree_group("PodGroup", namespace, name, node, {"schedulingPolicy": _policy(node, "minCount")}))
    for name, node in shape.leaves.items():
        out += [gang_pod(namespace, name, i, cpu, memory) for i in range(node.size)]
    return out


def _policy(node: TreeNode, field: str) -> dict[str, Any]:
    return {"basic": {}} if node.minimum is None else {"gang": {field: node.minimum}}


def _tree_group(kind: str, namespace: str, name: str, node: TreeNode, spec: dict[str, Any]) -> dict[str, Any]:
    if node.parent is not None:
        spec["parentCompositePodGroupName"] = node.parent
    if node.key is not None:
        spec["schedulingConstraints"] = {"topology": [{"key": node.key}]}
    meta = {"name": name, "namespace": namespace}
    return {"apiVersion": COMPOSITE_API, "kind": kind, "metadata": meta, "spec": spec}


def gang_pod(
    namespace: str,
    group: str,
    index: int,
    cpu: str = "100m",
    memory: str = "64Mi",
    source: str = "troupe",
    size: int = 0,
) -> dict[str, Any]:
    """Pod `index` of gang `group` (`size`: the gang's, for a source whose pods declare it)."""
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{group}-{index}", "namespace": namespace},
        "spec": {
            "schedulerName": "troupe-scheduler",
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "c",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": cpu, "memory": memory}},
                }
            ],
        },
    }
    SOURCES[source].link(pod, group, size)
    return pod


def apply_until_done(cluster: Any, objects: list[dict[str, Any]], timeout: float = 120.0) -> int:
    """`kubectl apply` the objects, again and again while the API server is
    away (apply creates what is missing and leaves the rest: a retry after a
    half-done attempt is safe). Returns the number of failed attempts;
    raises TimeoutError at the deadline."""
    import json

    body = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    deadline = time.monotonic() + timeout
    failures = 0
    while True:
        try:
            r = cluster.kubectl("apply", "--request-timeout=10s", "-f", "-", input=body, check=False, timeout=30)
            if r.returncode == 0:
                return failures
            why = r.stderr.strip()[-500:]
        except subprocess.TimeoutExpired:
            why = "kubectl timed out"
        failures += 1
        if time.monotonic() > deadline:
            raise TimeoutError(f"kubectl apply kept failing: {why}")
        time.sleep(0.5)
