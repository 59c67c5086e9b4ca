"""The placement algorithm (upstream KEP-5732): PlacementGenerate plugins
propose candidate node sets for the whole group, the group is tried in each
(`group_search.place_group`, on a marked and restored snapshot), Permit judges
it, PlacementScore plugins score the feasible ones, and the best is applied.

What troupe adds:

- Ranks: placements of a lower rank are preferred; higher ranks are tried
  only when no placement of a lower rank is feasible (a group's topology keys
  most preferred first: one rack if any rack fits, else one block, ...).
- Bounds: when every scorer can bound its score before a trial, candidates
  are tried best bound first and the loop stops once no untried candidate can
  beat the best found, which picks what scoring all of them would (ties
  aside), usually after one trial. Otherwise every feasible one is scored.
- Pruned candidates (a generator knows the group cannot fit) are not tried,
  only named in the message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..cluster.snapshot import Snapshot
from ..framework.framework import Framework
from ..framework.interface import CycleState, GroupContext, Placement, PlacementAssignments, Status
from .group_search import SearchBudget, Trial, apply_trial, place_group

# How many domains a message names per level (the rest are counted).
MAX_PLACEMENTS_IN_MESSAGE = 5


@dataclass(slots=True)
class Rejected:
    """A placement the group did not fit: how many of its pods did (None:
    not tried; `pruned` says why), and the first reason."""

    placement: Placement
    fit: int | None
    why: str


@dataclass(slots=True)
class PlacementResult:
    """The chosen placement with its trial (assumed and reserved), or why
    there is none (`status` not ok, or every candidate rejected)."""

    trial: Trial | None = None
    placement: Placement | None = None
    status: Status = field(default_factory=Status.success)
    rejected: list[Rejected] = field(default_factory=list)


def is_whole_cluster(placements: Sequence[Placement]) -> bool:
    """No generator narrowed anything: the one candidate is the cluster."""
    if len(placements) != 1:
        return False
    p = placements[0]
    return p.parent is None and not p.name and not p.kind and not p.pruned


def choose_placement(
    fwk: Framework,
    snapshot: Snapshot,
    ctx: GroupContext,
    placements: Sequence[Placement],
    state: CycleState,
    budget: SearchBudget | None = None,
    reserve: bool = True,
) -> PlacementResult:
    """Try the placements rank by rank; apply (reserve) the best feasible one
    of the first rank that has one (without `reserve`: leave it found, not
    applied, as a preemption's trial asks). `budget`: the search's (None: the
    profile's searchSteps), one for the whole cycle, not one per domain."""
    result = PlacementResult()
    if budget is None:
        budget = SearchBudget(fwk.search_steps)
    for rank in sorted({p.rank for p in placements}):
        tier = [p for p in placements if p.rank == rank]
        candidates = []
        for p in tier:
            if p.pruned:
                result.rejected.append(Rejected(p, None, p.pruned))
            else:
                candidates.append(p)
        if not candidates:
            continue
        best = _best_in(fwk, snapshot, ctx, candidates, state, result, budget)
        if best is None:
            if not result.status.ok:
                return result
            continue
        placement, found = best
        result.placement, result.trial = placement, apply_trial(fwk, snapshot, found) if reserve else found
        return result
    return result


def _best_in(
    fwk: Framework,
    snapshot: Snapshot,
    ctx: GroupContext,
    candidates: Sequence[Placement],
    state: CycleState,
    result: PlacementResult,
    budget: SearchBudget,
) -> tuple[Placement, Trial] | None:
    bounds = fwk.placement_score_bounds(state, ctx, snapshot, candidates) if len(candidates) > 1 else None
    order = np.argsort(-bounds, kind="stable").tolist() if bounds is not None else range(len(candidates))
    proposals: list[PlacementAssignments] = []
    trials: list[Trial] = []
    best_score: int | None = None
    best: tuple[Placement, Trial] | None = None
    for j in order:
        if bounds is not None and best_score is not None and bounds[j] <= best_score:
            break  # no untried candidate can beat the best found
        placement = candidates[j]
        mark = snapshot.mark()
        trial = place_group(fwk, snapshot, ctx, reserve=False, allowed=placement.nodes, budget=budget)
        ctx.placed_now = len(trial.assignments)
        permit = fwk.run_permit(ctx)
        snapshot.restore(mark)
        if not (permit.ok and trial.assignments):
            why = permit.message if not permit.ok else ""
            if trial.failures:
                why = trial.failures[0][1]
            result.rejected.append(Rejected(placement, len(trial.assignments), why or "no pod fits"))
            continue
        proposal = PlacementAssignments(placement, [(a.pod, r) for a, r in zip(trial.assignments, trial.rows)])
        if bounds is None:
            proposals.append(proposal)
            trials.append(trial)
            continue
        scores, status = fwk.run_placement_scores(state, ctx, snapshot, [proposal])
        if not status.ok:
            result.status = status
            return None
        if best_score is None or int(scores[0]) > best_score:
            best_score, best = int(scores[0]), (placement, trial)
    if bounds is not None or not proposals:
        return best
    scores, status = fwk.run_placement_scores(state, ctx, snapshot, proposals)
    if not status.ok:
        result.status = status
        return None
    k = int(np.argmax(scores))  # ties: the first generated
    return proposals[k].placement, trials[k]


def no_placement_message(ctx: GroupContext, rejected: Sequence[Rejected]) -> str:
    """`no topology.kubernetes.io/zone domain fits 8 pods: zone-a 5 fit,
    zone-b at most 3 fit`, one clause per level (kind) in rank order; other
    placements by name with their reason."""
    need = min(ctx.need, len(ctx.pods))
    clauses: list[str] = []
    levels: dict[tuple[int, str], list[Rejected]] = {}
    for r in rejected:
        levels.setdefault((r.placement.rank, r.placement.kind), []).append(r)
    for (_, kind), items in sorted(levels.items(), key=lambda kv: kv[0][0]):
        if not kind:
            named = [f"{r.placement.path or 'the cluster'}: {r.why}" for r in items[:MAX_PLACEMENTS_IN_MESSAGE]]
            more = len(items) - len(named)
            clauses.append(f"no placement fits: {'; '.join(named)}" + (f"; and {more} more" if more > 0 else ""))
            continue
        domains = [r for r in items if r.placement.name]
        if not domains:  # the generator refused the level as a whole
            clauses.append(f"no {kind} domain: {items[0].why}")
            continue
        # Tried domains first, most pods fitting first; then those pruned untried.
        ranked = sorted(domains, key=lambda r: (r.fit is None, -(r.fit or 0)))
        shown = [_fit_text(r) for r in ranked[:MAX_PLACEMENTS_IN_MESSAGE]]
        more = len(ranked) - len(shown)
        clauses.append(
            f"no {kind} domain fits {need} pod{'s' if need != 1 else ''}: {', '.join(shown)}"
            + (f" and {more} more" if more > 0 else "")
        )
    return "; ".join(clauses) if clauses else "no placement fits"


def _fit_text(r: Rejected) -> str:
    if r.fit is not None:
        return f"{r.placement.name} {r.fit} fit"
    return f"{r.placement.name} {r.why}"
