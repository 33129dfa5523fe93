"""The plan phase: every segment's lane schedules (``plan``, ``main_segments``; with width classes ``class_plans``)
and the entry slots each segment scans (``reachable_widths``, ``segment_widths``), from the session draws alone.

Shapes are remembered across trials in a ``PlanMemory`` the simulator owns and every function here takes
explicitly: the padded step count, the lanes per bucket, the per-segment widths and the width classes only ever
grow, so later trials (other draws) reuse the compiled programs instead of recompiling. Any valid plan gives
the same trial bit for bit; a plan changes only how fast it runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

import jax
import numpy as np

from ltrjax.online import protocol
from ltrjax.online.config import CLASS_STEPS
from ltrjax.online.policies.base import Policy
from ltrjax.online.schedule import (SessionDraws, doc_slot_occupancy as occupancy_of, entered_counts, lane_schedule,
                                    padded_steps, width_ladder)

if TYPE_CHECKING:
    from ltrjax.online.context import SimContext


@dataclasses.dataclass
class PlanMemory:
    """The shapes a simulator's plans used so far, per phase; they only grow (one compiled shape serves later trials).

    Attributes:
      steps: per phase ("main", "warmup", "classes"), the padded step count of every segment (``plan``; with width
        classes a step count per bucket).
      lanes: per phase, the lanes per bucket (``plan``, ``class_plans``).
      widths: per segment count, the per-segment widths of ``sim.segment_widths=ladder`` (``segment_widths``).
      classes: width classes, (phase width per bucket, class widths per bucket) (``segment_widths``), or None.
      width_shapes: every per-segment width tuple used so far (one segment program each: ``width_sets``).
      device_shapes: per phase, the lanes and steps of a trial set up on the device (``device_setup.PhaseShape``).
    """

    steps: dict = dataclasses.field(default_factory=dict)
    lanes: dict = dataclasses.field(default_factory=dict)
    widths: dict = dataclasses.field(default_factory=dict)
    classes: tuple | None = None
    width_shapes: set = dataclasses.field(default_factory=set)
    device_shapes: dict = dataclasses.field(default_factory=dict)


class ClassPlan(list):
    """One trial's lane schedules of a segment planned in width classes (``sim.segment_widths=classes``), per
    bucket, with what every trial of the segment shares: ``widths[b]`` the class widths (static, one set per
    phase) and ``bounds[b]`` the first step of every class and the last step's end (``[C+1]``)."""

    def __init__(self, schedules, widths: tuple, bounds: tuple):
        super().__init__(schedules)
        self.widths, self.bounds = widths, bounds


def class_rungs(cap: int, top_k: int) -> tuple[int, ...]:
    """The class widths of a bucket whose phase can fill ``cap`` entry slots: the ``width_ladder`` rungs from the
    one holding K up to ``cap`` (8, 12, 16, 24, ...; the last is ``cap``)."""
    rungs = [width_ladder(top_k, cap)]
    while rungs[-1] < cap:
        rungs.append(width_ladder(rungs[-1] + 1, cap))
    return tuple(rungs)


def choose_class_widths(rungs: tuple[int, ...], counts: np.ndarray, n_classes: int | None) -> tuple[int, ...]:
    """At most ``n_classes`` of ``rungs`` (ascending; the last, the phase's width, always kept) that scan the fewest
    slots: ``counts[i]`` sessions need rung ``i`` at least, and each is scanned at the smallest kept rung that holds
    it (a dynamic programme over the rungs; ties keep fewer classes). ``n_classes=None``: every rung."""
    rungs = tuple(int(r) for r in rungs)
    if n_classes is None or len(rungs) <= n_classes:
        return rungs
    cum = np.concatenate([[0], np.cumsum(np.asarray(counts, np.int64))])
    n = len(rungs)
    # cost[k][j]: fewest slots for the sessions needing rungs 0..j with k classes, the largest being rung j
    cost = np.full((n_classes + 1, n), np.inf)
    back = np.zeros((n_classes + 1, n), np.int64)
    cost[1] = [rungs[j] * cum[j + 1] for j in range(n)]
    for k in range(2, n_classes + 1):
        for j in range(n):
            for i in range(j):
                c = cost[k - 1][i] + rungs[j] * (cum[j + 1] - cum[i + 1])
                if c < cost[k][j]:
                    cost[k][j], back[k][j] = c, i
    k = min(range(1, n_classes + 1), key=lambda m: (cost[m][n - 1], m))
    chosen, j = [n - 1], n - 1
    while k > 1:
        j = int(back[k][j])
        chosen.append(j)
        k -= 1
    return tuple(rungs[i] for i in sorted(chosen))


def class_step_widths(plan: ClassPlan, full: list[int] | None = None) -> list[np.ndarray]:
    """Per bucket, the width each step of a ``ClassPlan`` scans (0 past the last class: those steps are not run);
    ``full``: per bucket the width every run step scans instead (a policy without ``narrow_rows``)."""
    out = []
    for b, (schedule, rungs, bounds) in enumerate(zip(plan, plan.widths, plan.bounds)):
        per_step = np.zeros(schedule.shape[0], np.int64)
        for c, w in enumerate(rungs):
            per_step[bounds[c]:bounds[c + 1]] = w if full is None else full[b]
        out.append(per_step)
    return out


def fitted_lanes(segment_rows: list[np.ndarray], most: int, steps: int) -> int:
    """The fewest lanes (at most ``most``) whose ``lane_schedule`` of every segment's sessions (their bucket rows)
    fits into ``steps`` steps: from the sessions per step of the busiest segment upwards."""
    busiest = max((len(r) for r in segment_rows), default=0)
    lanes = max(1, min(most, -(-busiest // max(steps, 1))))
    while lanes < most and any(len(r) and lane_schedule(r, lanes).shape[0] > steps for r in segment_rows):
        lanes = min(most, max(lanes + 1, int(lanes * 1.05)))
    return lanes


def _plan_shape(ctx: SimContext, memo: PlanMemory, rows: list, phase: str) -> tuple[int, tuple, dict]:
    """(step count, lanes per bucket, schedules already computed with them) of ``plan``: the remembered ones when
    every segment fits, else grown (``padded_steps``, ``fitted_lanes``) and remembered."""
    lanes = memo.lanes.get(phase)
    steps = memo.steps.get(phase, 0)
    known = {}  # (segment, bucket) -> its schedule with the remembered lanes, computed once
    if lanes is not None:
        known = {(i, b): lane_schedule(r[b], lanes[b]) for i, r in enumerate(rows) for b in range(len(r))
                 if len(r[b])}
    if lanes is None or any(schedule.shape[0] > steps for schedule in known.values()):
        needed = max((lane_schedule(r[b], ctx.n_lanes[b]).shape[0] for r in rows for b in range(len(r))
                      if len(r[b])), default=1)
        steps = max(steps, padded_steps(needed))  # the ladder leaves headroom for other trials' draws
        lanes = tuple(fitted_lanes([r[b] for r in rows], ctx.n_lanes[b], steps)
                      for b in range(len(ctx.data.buckets)))
        memo.steps[phase], memo.lanes[phase] = steps, lanes
        known = {}
    return steps, lanes, known


def plan(ctx: SimContext, memo: PlanMemory, segments: list[SessionDraws], phase: str = "main"
         ) -> list[list[np.ndarray]]:
    """Lane schedules of every segment and bucket, padded to one step count: entry ``[step, lane]``
    is the segment-local index of the session that lane runs, or -1 when it is idle.

    One shape means one compilation per policy; the step count and the lanes per bucket are also remembered
    per phase (``memo``), so later trials (other draws) reuse the shape instead of recompiling. The step count
    comes from the configured lanes (``n_lanes``); then every bucket keeps only as many lanes as its busiest
    segment needs to fit into that step count (``fitted_lanes``), so small buckets do not scan idle lanes.
    """
    data = ctx.data
    rows = [[data.row_of_query[draws.query[np.flatnonzero(data.bucket_of_query[draws.query] == b)]]
             for b in range(len(data.buckets))] for draws in segments]
    steps, lanes, known = _plan_shape(ctx, memo, rows, phase)
    plans = []
    for i, (draws, per_bucket) in enumerate(zip(segments, rows)):
        bucket_of = data.bucket_of_query[draws.query]
        one = []
        for b in range(len(data.buckets)):
            members = np.flatnonzero(bucket_of == b)
            if members.size == 0:
                one.append(np.full((steps, lanes[b]), -1, np.int64))
                continue
            schedule = known[i, b] if (i, b) in known else lane_schedule(per_bucket[b], lanes[b])
            schedule = np.where(schedule >= 0, members[np.maximum(schedule, 0)], -1)  # segment-local
            if schedule.shape[0] < steps:
                pad = np.full((steps - schedule.shape[0], schedule.shape[1]), -1, schedule.dtype)
                schedule = np.concatenate([schedule, pad])
            one.append(schedule)
        plans.append(one)
    return plans


def main_segments(ctx: SimContext, memo: PlanMemory, mains: list[SessionDraws], n_main: int
                  ) -> tuple[np.ndarray, np.ndarray, list, list]:
    """(last session of each segment, first session of each segment, per segment the trials' draws, per
    segment the trials' lane plans) of the first ``n_main`` main sessions of every trial; all trials are
    planned together, so their schedules share one step count."""
    points, starts = protocol.segment_bounds(n_main, ctx.config.n_segments)
    segments = [[m.slice(int(a), int(b)) for m in mains] for a, b in zip(starts, points + 1)]
    if ctx.config.segment_widths == "classes":
        return points, starts, segments, class_plans(ctx, memo, mains, segments, points)
    plans = plan(ctx, memo, [s for per_trial in segments for s in per_trial])
    plans = [plans[i * len(mains):(i + 1) * len(mains)] for i in range(len(segments))]
    return points, starts, segments, plans


def _class_lanes(ctx: SimContext, memo: PlanMemory, mains: list[SessionDraws], points: np.ndarray) -> tuple:
    """Lanes per bucket of a phase in width classes: about ``CLASS_STEPS`` steps for the bucket's busiest segment,
    at most ``n_lanes`` (remembered)."""
    lanes = memo.lanes.get("classes")
    if lanes is None:
        bucket_of = [ctx.data.bucket_of_query[d.query] for d in mains]
        busiest = [max(int(np.sum(bucket_of[t][a:z + 1] == b)) for t in range(len(mains))
                       for a, z in zip(np.r_[0, points[:-1] + 1], points)) for b in range(len(ctx.data.buckets))]
        lanes = tuple(max(1, min(n, -(-m // CLASS_STEPS))) for n, m in zip(ctx.n_lanes, busiest))
        memo.lanes["classes"] = lanes
    return lanes


def _class_blocks(ctx: SimContext, draws: SessionDraws, entering: np.ndarray, b: int, rungs: np.ndarray,
                  lanes: int) -> list[np.ndarray]:
    """One trial's schedule of each class of bucket ``b`` in a segment (segment-local session indices)."""
    data = ctx.data
    members = np.flatnonzero(data.bucket_of_query[draws.query] == b)
    need = class_need(ctx, draws.query[members], entering)
    if len(need) and need.max() > rungs[-1]:  # segment_widths covers the phase: never here
        raise AssertionError(f"bucket {b}: a query can fill {need.max()} slots > {rungs[-1]}")
    cls = np.searchsorted(rungs, need)
    blocks = []
    for c in range(len(rungs)):
        pick = members[cls == c]
        if pick.size == 0:
            blocks.append(np.zeros((0, lanes), np.int64))
            continue
        schedule = lane_schedule(data.row_of_query[draws.query[pick]], lanes, level=True)
        blocks.append(np.where(schedule >= 0, pick[np.maximum(schedule, 0)], -1))
    return blocks


def _class_segment(ctx: SimContext, per_trial: list[SessionDraws], entering: list[np.ndarray], widths: tuple,
                   lanes: tuple) -> tuple[list, tuple]:
    """(per trial, per bucket: the class schedules one after another; per bucket the class bounds, the longest
    trial's) of one segment."""
    per_bucket = [[] for _ in per_trial]
    bounds = []
    for b in range(len(ctx.data.buckets)):
        rungs = np.asarray(widths[b])
        blocks = [_class_blocks(ctx, draws, entering[t], b, rungs, lanes[b]) for t, draws in enumerate(per_trial)]
        steps = [max(blocks[t][c].shape[0] for t in range(len(per_trial))) for c in range(len(rungs))]
        bounds.append(tuple(int(x) for x in np.r_[0, np.cumsum(steps)]))
        for t in range(len(per_trial)):
            per_bucket[t].append(np.concatenate(
                [np.concatenate([blk, np.full((n - blk.shape[0], lanes[b]), -1, np.int64)])
                 for blk, n in zip(blocks[t], steps)]))
    return per_bucket, tuple(bounds)


def class_plans(ctx: SimContext, memo: PlanMemory, mains: list[SessionDraws], segments: list[list[SessionDraws]],
                points: np.ndarray) -> list[list[ClassPlan]]:
    """Per segment and trial, the lane schedules of a main phase planned in width classes
    (``sim.segment_widths=classes``). A query's class in a segment is the smallest of the bucket's class widths
    (``segment_widths``: at most ``width_classes`` of the ``class_rungs`` up to the phase's width) that holds
    every document it can have entered by the segment's end (the most initial documents plus its entries so
    far, at most its documents; at least K).
    Each class's sessions are packed into the bucket's lanes (``lane_schedule``) and the classes follow each
    other in time; every trial of a segment gets the same class bounds (the longest trial's). The lanes per
    bucket are sized from the bucket's sessions per segment (about ``CLASS_STEPS`` steps, at most
    ``n_lanes``) and the schedules padded to one step count per bucket (``padded_steps``): with the class
    widths remembered per phase, one segment program serves the phase; the bounds are its arguments."""
    data = ctx.data
    widths = segment_widths(ctx, memo, mains, points)[0]
    lanes = _class_lanes(ctx, memo, mains, points)
    entering = [np.zeros(data.n_queries, np.int64) for _ in mains]
    out = []
    for per_trial in segments:
        for t, draws in enumerate(per_trial):
            entering[t] += np.bincount(draws.query[draws.enter], minlength=data.n_queries)
        out.append(_class_segment(ctx, per_trial, entering, widths, lanes))
    total = memo.steps.get("classes", ())
    need = tuple(max(bnd[b][-1] for _, bnd in out) for b in range(len(data.buckets)))
    if not total or any(n > m for n, m in zip(need, total)):
        # headroom for other trials' draws: steps past the bounds are not run, so it costs only their inputs
        total = tuple(max(padded_steps(max(-(-5 * n // 4), 1)), m) for n, m in zip(need, total or (0,) * len(need)))
        memo.steps["classes"] = total
    plans = []
    for per_bucket, bnd in out:
        plans.append([ClassPlan([np.concatenate([sch, np.full((total[b] - sch.shape[0], lanes[b]), -1, np.int64)])
                                 for b, sch in enumerate(trial)], widths, bnd) for trial in per_bucket])
    return plans


def reachable_widths(ctx: SimContext, runs: list[SessionDraws]) -> tuple[int, ...]:
    """Per bucket, how many entry slots the documents of any query can fill in these sessions (each trial's
    whole phase): ``widths_from_entering`` of the most entering sessions of every query."""
    entering = np.zeros(ctx.data.n_queries, np.int64)
    for draws in runs:
        entering = np.maximum(entering, np.bincount(draws.query[draws.enter], minlength=ctx.data.n_queries))
    return widths_from_entering(ctx, entering)


def widths_from_entering(ctx: SimContext, entering: np.ndarray) -> tuple[int, ...]:
    """Per bucket, the entry slots to scan when query q sees at most ``entering[q]`` entering sessions (i64 [Q]):
    the most initial documents plus the most entering sessions of one query, at least K (a list of fewer than K
    entered documents shows empty slots, and ``lax.top_k`` gives them the lowest masked indices, ``entered .. K-1``:
    within the first K, so they index the same slots narrowed or not), rounded up to a multiple of 32 (few shapes to
    compile), at most the bucket's width."""
    widths = []
    for bucket in ctx.data.buckets:
        queries = np.asarray(bucket.query_index)
        most = int(np.asarray(entering)[queries].max()) if len(queries) else 0
        need = max(ctx.config.initial_docs[1] + most, ctx.config.top_k)
        widths.append(int(min(bucket.width, -(-need // 32) * 32)))
    return tuple(widths)


def segment_widths(ctx: SimContext, memo: PlanMemory, runs: list[SessionDraws], stops: np.ndarray
                   ) -> list[tuple[int, ...]]:
    """Per segment (``stops[s]``: its last session, inclusive) and bucket, how many entry slots the documents of
    any query can fill by the segment's end in these sessions (each trial's phase): the most initial documents
    plus the most entering sessions of one query so far, at least K (``reachable_widths``), on the
    ``width_ladder`` (few shapes to compile), at most the bucket's width. A segment scans only these slots
    (``step.scan_segment``). Like the step count, the widths are remembered per segment count and only ever
    grow, so later trials reuse the compiled shapes unless their draws need wider rows. With
    ``sim.segment_widths=phase`` (the default) every segment gets the phase's ``reachable_widths`` instead (one
    program); with ``classes`` every segment gets per bucket the class widths (``class_rungs``) up to the
    phase's ``reachable_widths``, remembered and only growing (``class_plans``)."""
    if ctx.config.segment_widths == "phase":
        out = [reachable_widths(ctx, runs)] * len(stops)
    elif ctx.config.segment_widths == "classes":  # the class widths, one set per phase (``class_plans``)
        out = [_class_widths(ctx, memo, runs, stops)] * len(stops)
    else:
        out = _ladder_widths(ctx, memo, runs, stops)
    memo.width_shapes.update(out)
    return out


def _class_widths(ctx: SimContext, memo: PlanMemory, runs: list[SessionDraws], stops: np.ndarray) -> tuple:
    """Per bucket the class widths of a phase (``segment_widths=classes``), chosen once per phase width for these
    sessions (``choose_class_widths``) and remembered in ``memo.classes``."""
    before = memo.classes[0] if memo.classes else (0,) * len(ctx.data.buckets)
    reach = tuple(max(a, b) for a, b in zip(reachable_widths(ctx, runs), before))
    if memo.classes is None or memo.classes[0] != reach:
        counts = class_need_counts(ctx, runs, stops, reach)
        memo.classes = reach, tuple(
            choose_class_widths(class_rungs(w, ctx.config.top_k), c, ctx.config.width_classes)
            for w, c in zip(reach, counts))
    return memo.classes[1]


def _ladder_widths(ctx: SimContext, memo: PlanMemory, runs: list[SessionDraws], stops: np.ndarray) -> list:
    """Per segment the ``width_ladder`` widths of ``segment_widths=ladder``, grown from (and remembered in)
    ``memo.widths`` for this segment count."""
    data, cfg = ctx.data, ctx.config
    queries = [np.asarray(b.query_index) for b in data.buckets]
    out = []
    for stop in stops:
        entering = np.zeros(data.n_queries, np.int64)
        for draws in runs:
            upto = draws.slice(0, int(stop) + 1)
            entering = np.maximum(entering, np.bincount(upto.query[upto.enter], minlength=data.n_queries))
        out.append(tuple(
            width_ladder(max(cfg.initial_docs[1] + (int(entering[q].max()) if len(q) else 0), cfg.top_k),
                         bucket.width)
            for q, bucket in zip(queries, data.buckets)))
    before = memo.widths.get(len(stops), out)
    out = [tuple(max(a, b) for a, b in zip(x, y)) for x, y in zip(out, before)]
    memo.widths[len(stops)] = out
    return out


def class_need(ctx: SimContext, queries: np.ndarray, entering: np.ndarray) -> np.ndarray:
    """Entry slots each of ``queries``' sessions needs with width classes: the most documents its query can have
    entered (the most initial documents plus ``entering[query]``, its entries so far), at most its documents,
    at least K."""
    cfg = ctx.config
    return np.maximum(np.minimum(cfg.initial_docs[1] + entering[queries], ctx.docs_per_query[queries]), cfg.top_k)


def class_need_counts(ctx: SimContext, runs: list[SessionDraws], stops: np.ndarray, reach: tuple[int, ...]
                      ) -> list[np.ndarray]:
    """Per bucket, how many of these sessions need each ``class_rungs`` width of the bucket's phase width
    ``reach[b]`` at least: a session needs the most documents its query can have entered by its segment's end
    (``stops[s]``: the last session, inclusive), the initial documents plus its entries so far, at most its
    documents, at least K (as ``class_plans`` assigns them)."""
    data = ctx.data
    rungs = [np.asarray(class_rungs(w, ctx.config.top_k)) for w in reach]
    counts = [np.zeros(len(r), np.int64) for r in rungs]
    for draws in runs:
        entering = np.zeros(data.n_queries, np.int64)
        for start, stop in zip(np.r_[0, stops[:-1] + 1], stops):
            seg = draws.slice(int(start), int(stop) + 1)
            entering += np.bincount(seg.query[seg.enter], minlength=data.n_queries)
            need = class_need(ctx, seg.query, entering)
            bucket = data.bucket_of_query[seg.query]
            for b, r in enumerate(rungs):
                idx = np.minimum(np.searchsorted(r, need[bucket == b]), len(r) - 1)
                counts[b] += np.bincount(idx, minlength=len(r))
    return counts


def width_sets(memo: PlanMemory) -> list[tuple]:
    """The distinct per-segment width tuples runs and plans used so far, sorted: per bucket one width, or with
    width classes the bucket's class widths (each a copy of the session step in the segment program)."""
    return sorted(memo.width_shapes)


def doc_slot_occupancy(ctx: SimContext, memo: PlanMemory, policy: Policy, keys: Sequence[jax.Array]) -> float:
    """Entered-document evaluations / scanned document slots (lanes x steps x width, every bucket and segment)
    of the main phase of ``keys``' trials, from their plans and initial states (``schedule.doc_slot_occupancy``;
    deterministic, nothing is simulated). A policy without ``narrow_rows`` scans every slot."""
    data = ctx.data
    _, trials = protocol.group_trials(keys)
    mains = [protocol.session_plan(ctx, t.plan)[1] for t in trials]
    n_main = len(mains[0])
    points, starts, segments, plans = main_segments(ctx, memo, mains, n_main)
    full = [b.width for b in data.buckets]
    widths = segment_widths(ctx, memo, mains, points) if policy.narrow_rows else [tuple(full)] * len(points)
    all_plans, all_entered, all_widths = [], [], []
    for t, trial in enumerate(trials):
        initial = np.zeros(data.n_queries, np.int64)
        for b, state in zip(data.buckets, protocol.host_init_states(ctx, trial.init)):
            initial[np.asarray(b.query_index)] = np.asarray(state.n_entered)[:-1]
        entered = entered_counts(mains[t].slice(0, n_main), initial, ctx.docs_per_query)
        for s in range(len(points)):
            all_plans.append(plans[s][t])
            all_entered.append(entered[starts[s]:points[s] + 1])
            all_widths.append(class_step_widths(plans[s][t], None if policy.narrow_rows else full)
                              if isinstance(plans[s][t], ClassPlan) else widths[s])
    return occupancy_of(all_plans, all_entered, all_widths)
