"""The segment phase: one segment of every member of a population, in three steps, and the loop over a phase's
segments (``run_segments``).

* produce: the segment's inputs (``PreparedSegment``: scan inputs with the click uniforms, run keys, where each
  output goes). They depend only on the draws, plans and trial keys, not on the simulation state. The host
  producer is ``host_producer`` (``prepare`` of each segment, NumPy); ``run_segments`` takes any function
  ``produce(i) -> PreparedSegment``, so another producer (e.g. one that builds the same fields on the device)
  plugs in without touching the loop.
* launch: dispatch the compiled segment program (``step.population_segment``) asynchronously.
* collect: the outputs put back in session order (``collect``; swappable through ``run_segments(collect=...)``).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import jax
import numpy as np

from ltrjax.online import host_random, memory, programs, transfers
from ltrjax.online import step as step_lib
from ltrjax.online.plan import ClassPlan
from ltrjax.online.policies.base import Policy
from ltrjax.online.schedule import SessionDraws

if TYPE_CHECKING:
    from ltrjax.online.context import SimContext


@dataclasses.dataclass
class PreparedSegment:
    """One segment of every member, ready to launch (a producer's output: ``prepare``)."""

    schedules: tuple  # per bucket: step_lib.SessionInputs with leading [members, steps, lanes] axes
    keys: jax.Array  # [members] run keys
    targets: list  # per trial, per bucket: (session index of every valid slot, valid mask)
    n_sessions: int  # sessions of the segment per member
    trial_of: np.ndarray  # trial index of every member
    widths: tuple | None = None  # per bucket: entry slots the segment program advances (None: every slot)
    bounds: tuple | None = None  # width classes: per bucket the first step of every class and the end ([C+1])
    window: int | None = None  # a device-made segment: the session window its targets index (``device_phase``)


def click_uniforms(run_key: jax.Array, first_session: int, n_sessions: int, n_rows: int, top_k: int) -> np.ndarray:
    """Uniforms ``[n, n_rows, K]`` deciding the clicks of sessions first_session..first_session+n-1.

    Drawn in bulk on the host with NumPy's PCG64, seeded from the trial key and the first session
    index (threefry costs ~60 ns per number on a CPU; this ~1 ns). Shared verbatim with the reference.
    """
    words = host_random.key_words(run_key).ravel().tolist()
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(words + [int(first_session)])))
    return rng.random((n_sessions, n_rows, top_k), dtype=np.float32)


def schedule_inputs(ctx: SimContext, draws: SessionDraws, plan: list[np.ndarray], run_key: jax.Array
                    ) -> tuple[list[step_lib.SessionInputs], list[tuple[np.ndarray, np.ndarray]]]:
    """Per bucket: the scan inputs ``[steps, lanes, ...]`` of one trial's segment, and (session index of
    every valid slot, valid mask) to put the outputs back into session order."""
    n = len(draws)
    uniforms = None
    if not ctx.protocol.device_rng:
        uniforms = click_uniforms(run_key, int(draws.session[0]) if n else 0, n, ctx.uniform_rows,
                                  ctx.config.top_k)
    inputs, targets = [], []
    for b, bucket in enumerate(ctx.data.buckets):
        valid = plan[b] >= 0
        idx = np.where(valid, plan[b], 0)
        rows = np.where(valid, ctx.data.row_of_query[draws.query[idx]], bucket.n_queries).astype(np.int32)
        inputs.append(step_lib.SessionInputs(rows=rows, enter=valid & draws.enter[idx],
                                             session=draws.session[idx].astype(np.int32),
                                             uniforms=None if uniforms is None else uniforms[idx], valid=valid))
        targets.append((idx[valid], valid))
    return inputs, targets


def prepare(ctx: SimContext, draws: list[SessionDraws], plans: list, run_keys: list[jax.Array],
            trial_of: np.ndarray, widths: tuple | None = None) -> PreparedSegment:
    """The host side of one segment of every member (``draws``/``plans``/``run_keys`` per trial): scan
    inputs (with the click uniforms) stacked per member, and where each output goes. It does not depend
    on the simulation state, so the next segment is prepared while the device runs the current one."""
    per_trial = [schedule_inputs(ctx, d, p, k) for d, p, k in zip(draws, plans, run_keys)]
    bounds = None
    if isinstance(plans[0], ClassPlan):
        widths, bounds = plans[0].widths, tuple(np.asarray(b, np.int32) for b in plans[0].bounds)
    schedules = tuple(  # one copy per member of its trial's inputs
        jax.tree_util.tree_map(lambda *xs: np.stack([xs[t] for t in trial_of]),
                               *(inputs[b] for inputs, _ in per_trial))
        for b in range(len(ctx.data.buckets)))
    return PreparedSegment(schedules=memory.shard(schedules),
                           keys=memory.shard(np.stack([host_random.key_words(run_keys[t]) for t in trial_of])),
                           targets=[targets for _, targets in per_trial], n_sessions=len(draws[0]),
                           trial_of=trial_of, widths=widths, bounds=bounds)


def host_producer(ctx: SimContext, segments: list, plans: list, run_keys: list, trial_of: np.ndarray,
                  widths: list | None) -> Callable[[int], PreparedSegment]:
    """``produce(i)``: segment ``i``'s ``prepare`` (``segments[i]``, ``plans[i]``: per trial; ``widths[i]``: per
    bucket, None: every slot), the host's way to make a segment's inputs for ``run_segments``."""
    widths = widths or [None] * len(segments)
    return lambda i: prepare(ctx, segments[i], plans[i], run_keys, trial_of, widths[i])


def launch(ctx: SimContext, policy: Policy, params, hyper, states, segment: PreparedSegment):
    """Dispatch one prepared segment (asynchronously): returns the new states, the device outputs and the
    segment's ``prepare`` output for evaluation (``step.population_segment``)."""
    transfers.count_host((params, hyper, states, segment.schedules, segment.keys), "segment")
    if segment.bounds is not None:
        widths = (segment.widths if policy.narrow_rows
                  else tuple((None,) * len(w) for w in segment.widths))
        return programs.compiled(policy)["class_segment"](
            ctx.protocol, params, hyper, memory.shard(tuple(states)), ctx.data.buckets, ctx.queries,
            segment.schedules, segment.keys, segment.bounds, widths=widths)
    widths = segment.widths if policy.narrow_rows else None
    return programs.compiled(policy)["segment"](ctx.protocol, params, hyper, memory.shard(tuple(states)),
                                                ctx.data.buckets, ctx.queries, segment.schedules, segment.keys,
                                                widths=widths)


def collect(ctx: SimContext, ys, segment: PreparedSegment, logs: bool = True):
    """A launched segment's outputs in session order: per member NDCG ``[P, n]``, shown ``[P, n, K]``,
    clicks and session records (leaves ``[P, n, ...]``); blocks until the device is done. With ``logs=False``
    only the NDCG comes to the host (shown, clicks and records are None)."""
    trial_of, n, k_top = segment.trial_of, segment.n_sessions, ctx.config.top_k
    n_members = len(trial_of)
    ndcg = np.zeros((n_members, n), np.float32)
    if not logs:
        ys = [out.replace(shown=None, clicks=None, record=None) for out in ys]
    shown = np.full((n_members, n, k_top), -1, np.int32) if logs else None
    clicked = np.zeros((n_members, n, k_top), bool) if logs else None
    records = None
    groups = [np.flatnonzero(trial_of == t) for t in range(len(segment.targets))]
    for b, out in enumerate(jax.device_get(ys)):
        for t, rows in enumerate(groups):
            target, valid = segment.targets[t][b]
            sel = (rows[:, None], target[None, :])
            ndcg[sel] = out.ndcg[rows][:, valid]
            if not logs:
                continue
            shown[sel] = out.shown[rows][:, valid]
            clicked[sel] = out.clicks[rows][:, valid]
            if out.record is not None:
                if records is None:
                    records = jax.tree_util.tree_map(
                        lambda r: np.zeros((n_members, n) + r.shape[3:], r.dtype), out.record)
                jax.tree_util.tree_map(lambda acc, r: acc.__setitem__(sel, r[rows][:, valid]), records, out.record)
    return ndcg, shown, clicked, records


def run_segments(ctx: SimContext, policy: Policy, params, hyper, states, n_segments: int,
                 produce: Callable[[int], PreparedSegment], before: Callable | None = None,
                 after: Callable | None = None, timings: dict | None = None, logs: bool = True,
                 collect_outputs: Callable | None = None):
    """Every segment of a phase (warm-up or main), for every member: the one simulation loop (``trial``'s warm-up,
    main phase and ``simulate_frozen`` use it). ``produce(i)`` makes segment i's inputs (``host_producer``, or any
    producer of the same ``PreparedSegment`` fields); the next segment is produced while the device runs the
    current one. ``before(i, params) -> params`` runs before segment i is launched (e.g. a new dropout mask),
    ``after(i, params, states, outputs, prepared) -> params`` once its outputs are collected (evaluation, logging,
    retraining); the time of everything but ``after`` is added to ``timings["simulate"]``. Without ``after`` no
    output comes to the host; else ``collect_outputs(ys, segment, logs)`` brings them (default ``collect``;
    ``logs=False``: only the sessions' NDCG). Returns the final (params, states)."""
    collect_outputs = collect_outputs or functools.partial(collect, ctx)
    upcoming = produce(0)
    for i in range(n_segments):
        tic = time.perf_counter()
        if before is not None:
            params = before(i, params)
        segment = upcoming
        states, ys, prepared = launch(ctx, policy, params, hyper, states, segment)
        states = list(states)
        if i + 1 < n_segments:  # host work for the next segment while the device runs this one
            upcoming = produce(i + 1)
        if after is None:  # nothing to collect; still one segment in flight at a time
            outputs = jax.block_until_ready(ys)
        else:
            outputs = collect_outputs(ys, segment, logs)
        if timings is not None:
            timings["simulate"] += time.perf_counter() - tic
        if after is not None:
            params = after(i, params, states, outputs, prepared)
    return params, jax.block_until_ready(states)
