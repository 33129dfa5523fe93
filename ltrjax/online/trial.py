"""The trial: the phases composed (``run_members``: one population through the protocol) over named state.

A population's trial: its members' keys grouped into trials and its session draws (``protocol``), the BM25
warm-up segments (``warm_up``), an optional retrain after it, then the main phase (``MainPhase``) segment by
segment (``segment.run_segments``) with the policy's refresh before each (``refresh``) and, after each
(``after_segment``), the sessions' NDCG and logs recorded, every member evaluated (``evaluate``) and, at the
protocol's points, retrained (``retrain``); then one ``TrialResult`` per member (``trial_results``).
``run_population`` runs a population chunk by chunk (``memory.chunk_size``); ``simulate_frozen`` only the main
phase's sessions. Every phase is called through its module (``plan.plan``, ``segment.prepare``, ...), so a
benchmark's Stopwatch that wraps one times it.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import jax
import numpy as np
from tqdm.auto import tqdm

from ltrjax import metrics
from ltrjax.online import evaluate, memory, plan, programs, protocol, retrain, segment, transfers
from ltrjax.online.device_trial import DeviceSetup
from ltrjax.online.host_trial import HostSetup
from ltrjax.online.config import SPLITS
from ltrjax.online.plan import PlanMemory
from ltrjax.online.policies.base import Policy, SessionLog, member, stack_members
from ltrjax.online.protocol import TrialKeys
from ltrjax.online.results import TrialResult, perfect_documents
from ltrjax.online.state import STAT_NAMES, BucketState, kept_counters

if TYPE_CHECKING:
    from ltrjax.online.context import SimContext

log = logging.getLogger("ltrjax")


@dataclasses.dataclass
class MainPhase:
    """The main phase of one population run (``run_members``): what it runs and what it accumulates,
    segment by segment (``after_segment``). M members (leading axis), T distinct trials.

    Attributes:
      policy: the policy of every member.
      hyper: its stacked typed hyper-parameters, [M, ...] leaves.
      trials: the T distinct trials' keys.
      trial_of: i64 [M], each member's trial.
      n_real: members that are not device padding (the first ``n_real``).
      segments, plans: per segment and trial, its sessions (``SessionDraws``) and their schedule.
      starts, points: per segment, its first and last main session (the evaluation point).
      widths: per segment and bucket, the entry slots it scans (``plan.segment_widths``).
      session_ndcg: f32 [M, main sessions], NDCG@K of every session's shown list, filled segment by segment.
      history: per member, the split means of each evaluation so far.
      train_info: per member, one dict per retrain.
      logs: per member, every segment's ``SessionLog`` (None unless the logs are kept).
      pending: per member, the ``SessionLog`` of each segment since the last retrain (the next retrain's data).
      collect_logs: whether the sessions' shown lists, clicks and records come to the host (the logs are kept, or
        the policy retrains from them: ``Policy.reads_logs``); without them a retrain gets None logs.
      timings: seconds spent simulating, training and evaluating (shared with the warm-up).
      bar: the progress bar (main sessions x real members).
      per_query: the last evaluation's per-query NDCG, {"warm"/"cold": [M, Q]}.
      setup: how the trials are set up (``HostSetup`` or ``DeviceSetup``: refresh keys, retrained parameters).
      deferred: what stays on the device until the phase ends (``flush``): per segment its sessions' NDCG
        (``(start, stop, [M, window] array)``) and its launched evaluation, when the set-up defers them
        (``DeviceSetup.defers``: no fetch, so no wait, between segments).
    """

    policy: Policy
    hyper: Any
    trials: list
    trial_of: np.ndarray
    n_real: int
    segments: list
    plans: list
    starts: np.ndarray
    points: np.ndarray
    widths: list
    session_ndcg: np.ndarray
    history: list
    train_info: list
    logs: list | None
    pending: list
    collect_logs: bool
    timings: dict
    bar: Any
    per_query: dict | None = None
    setup: Any = None
    deferred: list = dataclasses.field(default_factory=list)


def init_members(ctx: SimContext, policy: Policy, trials: list[TrialKeys], trial_of: np.ndarray, hypers: list):
    """(parameters, typed hyper-parameters) of every member, stacked ([M, ...] leaves) and sharded, as the
    configured set-up makes them (``make_setup``)."""
    return make_setup(ctx, None, trials, trial_of).init_members(policy, hypers)


def make_setup(ctx: SimContext, memo: PlanMemory | None, trials: list[TrialKeys], trial_of: np.ndarray):
    """The population's ``TrialSetup``: ``DeviceSetup`` with ``sim.trial_setup=device``, else ``HostSetup``."""
    memo = memo if memo is not None else PlanMemory()
    return (DeviceSetup if ctx.config.trial_setup == "device" else HostSetup)(ctx, memo, trials, trial_of)


def run_members(ctx: SimContext, memo: PlanMemory, policy: Policy, keys: list, hypers: list, progress: bool,
                keep_logs: bool, keep_states: bool = True, make_producer: Callable | None = None
                ) -> list[TrialResult]:
    """One population through the protocol: the warm-up, an optional retrain after it, the main phase
    segment by segment (``refresh`` before each, ``after_segment`` after it), then one ``TrialResult`` per
    real member (the members padded to a multiple of the device count are dropped). The trials are set up by
    ``make_setup``; ``make_producer`` replaces its main-phase producer (``segment.host_producer``'s arguments)."""
    n_real = len(keys)
    keys, hypers = memory.pad_to_devices(keys, hypers, jax.device_count())
    trial_of, trials = protocol.group_trials(keys)
    setup = make_setup(ctx, memo, trials, trial_of)
    timings = {"simulate": 0.0, "train": 0.0, "evaluate": 0.0}
    draws = setup.draws()
    params, hyper = setup.init_members(policy, hypers)
    states = warm_up(ctx, setup, draws, timings, kept_counters(policy.counters_read))
    train_info: list[list[dict]] = [[] for _ in range(len(keys))]
    if ctx.config.train_after_warmup and policy.trains:
        warm_keys = protocol.fold_member_keys(trials, trial_of, "train", protocol.WARMUP_RETRAIN)
        with transfers.declared_transfers():
            params, infos = retrain.retrain(ctx, policy, warm_keys, params, hyper, states, [None] * len(keys))
        params = setup.retrained(params)
        for acc, info in zip(train_info, infos):
            acc.append(info)
    run = main_phase(ctx, setup, policy, hyper, draws, train_info, timings, keep_logs, progress, n_real)
    produce = (make_producer(ctx, run.segments, run.plans, [t.run for t in trials], trial_of, run.widths)
               if make_producer is not None else setup.main_producer(run.segments, run.plans, run.widths))
    params, states = segment.run_segments(ctx, policy, params, hyper, states, len(run.segments), produce,
                                          before=functools.partial(refresh, run),
                                          after=functools.partial(after_segment, ctx, run), timings=timings,
                                          logs=run.collect_logs, collect_outputs=setup.collect)
    run.bar.close()
    return trial_results(ctx, run, draws, params, states, n_real, keep_states)


def warm_up(ctx: SimContext, setup, draws: list, timings: dict, names: tuple[str, ...] = STAT_NAMES) -> list:
    """Every trial's initial states, after its BM25 warm-up sessions (if any), one copy per member; the states
    keep the counters ``names`` (the main policy's), which the warm-up counts too."""
    initial = setup.initial_states(names)
    tic = time.perf_counter()
    warm_policy = ctx.warmup_policy
    if warm_policy is not None and len(draws[0][0]):
        warm_params, warm_hyper = setup.warmup_members(warm_policy)
        _, initial = segment.run_segments(ctx, warm_policy, warm_params, warm_hyper, initial, 1,
                                          setup.warmup_producer(draws))
    states = setup.member_states(initial)
    memory.release_heap(ctx)
    timings["simulate"] += time.perf_counter() - tic
    return states


def main_phase(ctx: SimContext, setup, policy: Policy, hyper, draws: list, train_info: list[list[dict]],
               timings: dict, keep_logs: bool, progress: bool, n_real: int) -> MainPhase:
    """The main phase's segments and empty accumulators (``MainPhase``)."""
    n_members, n_main = len(setup.trial_of), len(draws[0][1])
    points, starts, segments, plans, widths = setup.main_plan([d[1] for d in draws], n_main)
    bar = tqdm(total=n_main * n_real, desc=f"{policy.name} x{n_real}" if n_real > 1 else policy.name,
               unit="sess", disable=None if progress else True, leave=False)  # None: off on non-TTY
    return MainPhase(policy=policy, hyper=hyper, trials=setup.trials, trial_of=setup.trial_of, n_real=n_real,
                     segments=segments, plans=plans, starts=starts, points=points, widths=widths,
                     session_ndcg=np.zeros((n_members, n_main), np.float32),
                     history=[[] for _ in range(n_members)], train_info=train_info,
                     logs=[[] for _ in range(n_members)] if keep_logs else None,
                     pending=[[] for _ in range(n_members)],
                     collect_logs=keep_logs or (policy.trains and policy.reads_logs), timings=timings, bar=bar,
                     setup=setup)


def refresh(run: MainPhase, i: int, params):
    """Before segment ``i``: the policy's per-segment refresh (e.g. a new dropout mask)."""
    return programs.compiled(run.policy)["refresh"](run.setup.refresh_keys(i), params)


def after_segment(ctx: SimContext, run: MainPhase, i: int, params, states, outputs, prepared):
    """After segment ``i``: record its sessions' NDCG and logs, evaluate every member, and retrain when the
    protocol says so; returns the (retrained) parameters."""
    nd, shown, clicked, record = outputs
    start, stop = run.starts[i], run.points[i] + 1
    if isinstance(nd, np.ndarray):
        run.session_ndcg[:, start:stop] = nd
    else:  # still on the device (``device_phase.device_collect``)
        run.deferred.append(("ndcg", (start, stop, nd)))
    # a retrain from the counters (not the logs) has its views launched first, then the evaluation: the host
    # builds the retrain's examples from the views while the device evaluates (the same programs and results)
    from_counters = ctx.config.retrains_after(i) and run.policy.trains and not run.policy.reads_logs
    with transfers.declared_transfers():  # the retrain's views: its block starts are host numbers
        views = retrain.policy_views(ctx, run.policy, states, len(run.trial_of), launch=True) if from_counters else None
    evaluation = launch_evaluation_members(ctx, run, i, params, states, prepared)
    if run.collect_logs:
        record_logs(run, i, shown, clicked, record)
    if ctx.config.retrains_after(i):
        params = retrain.retrain_after(ctx, run, i, params, states, views)
    if run.setup.defers:
        run.deferred.append(("evaluation", evaluation))
    else:
        evaluated_members(ctx, run, evaluation)
    run.bar.update(int(stop - start) * run.n_real)
    return params


def record_logs(run: MainPhase, i: int, shown, clicked, record) -> None:
    """Segment ``i``'s ``SessionLog`` of every member, kept (``run.logs``) and pending for the next retrain."""
    for m in range(len(run.trial_of)):
        seg = run.segments[i][run.trial_of[m]]
        one = SessionLog(query=seg.query, shown=shown[m], clicks=clicked[m], session=seg.session,
                         record=None if record is None else member(record, m))
        if run.logs is not None:
            run.logs[m].append(one)
        run.pending[m].append(one)


def launch_evaluation_members(ctx: SimContext, run: MainPhase, i: int, params, states, prepared) -> tuple:
    """Every member's per-query NDCG after segment ``i`` (only the test queries before the last segment with
    ``history_splits=test``), launched; ``evaluated_members`` brings it."""
    tic = time.perf_counter()
    last = i == len(run.segments) - 1
    launched = evaluate.launch_evaluation(ctx, run.policy, params, states, prepared=prepared,
                                          test_only=not last and ctx.config.history_splits == "test")
    run.timings["evaluate"] += time.perf_counter() - tic
    return launched


def evaluated_members(ctx: SimContext, run: MainPhase, launched: tuple) -> None:
    """A ``launch_evaluation_members``' per-query NDCG, and its split means appended to the members' history."""
    tic = time.perf_counter()
    run.per_query = evaluate.evaluated(ctx, launched)
    for m in range(len(run.trial_of)):
        run.history[m].append(evaluate.split_means(ctx.data, {k: v[m] for k, v in run.per_query.items()}))
    run.timings["evaluate"] += time.perf_counter() - tic


def flush(ctx: SimContext, run: MainPhase) -> None:
    """What the phase left on the device (``MainPhase.deferred``), brought to the host in segment order: the
    sessions' NDCG in one fetch, then every evaluation's history."""
    ndcg = [item for kind, item in run.deferred if kind == "ndcg"]
    for (start, stop, _), values in zip(ndcg, jax.device_get([nd for _, _, nd in ndcg])):
        run.session_ndcg[:, start:stop] = values[:, :stop - start]
    for kind, item in run.deferred:
        if kind == "evaluation":
            evaluated_members(ctx, run, item)
    run.deferred = []


def trial_results(ctx: SimContext, run: MainPhase, draws: list, params, states, n_real: int,
                  keep_states: bool = True) -> list[TrialResult]:
    """One ``TrialResult`` per real member (host arrays; ``final_states`` only with ``keep_states``), after
    ``flush``."""
    flush(ctx, run)
    cfg = ctx.config
    results = []
    final_states = jax.device_get(states)
    if ctx.caches.cum_weights.size < run.session_ndcg.shape[1]:  # once per simulator, for every member and split
        ctx.caches.cum_weights = metrics.cumulative_weights(run.session_ndcg.shape[1], cfg.gamma)
    weights = ctx.caches.cum_weights
    for m in range(n_real):
        main = draws[run.trial_of[m]][1]
        split = ctx.data.split_of_query[main.query]
        cum = {name: metrics.cumulative_ndcg(run.session_ndcg[m][split == s], cfg.gamma, weights)
               for s, name in enumerate(SPLITS)}
        warm_query = draws[run.trial_of[m]][0].query
        results.append(TrialResult(
            session_ndcg=run.session_ndcg[m], session_split=split, session_query=main.query,
            eval_points=run.points, eval_history=run.history[m], cum_ndcg=cum, train_info=run.train_info[m],
            timings={**run.timings, "members": n_real},
            final_states=tuple(member(s, m) for s in final_states) if keep_states else None,
            perfect_docs=perfect_documents(ctx.data, [member(s, m) for s in final_states]),
            logs=run.logs[m] if run.logs is not None else None,
            query_ndcg={k: v[m] for k, v in run.per_query.items()},
            warmup_query=warm_query if ctx.warmup_policy is not None else warm_query[:0],
            final_params=member(jax.device_get(params), m), hyper=member(jax.device_get(run.hyper), m)))
    return results


def run_population(ctx: SimContext, memo: PlanMemory, policy: Policy, keys: Sequence[jax.Array],
                   hypers: Sequence | None = None, *, progress: bool = True, keep_logs: bool = False,
                   max_members: int | None = None, keep_states: bool = True,
                   on_chunk: Callable[[list[TrialResult]], None] | None = None) -> list[TrialResult]:
    """``Simulator.run_population``: every member ``(keys[i], hypers[i])`` of ``policy``, chunk by chunk
    (``memory.chunk_size``; a short last chunk padded with copies of its last member), ``run_members`` each."""
    keys = list(keys)
    hypers = protocol.resolve_hypers(policy, hypers, len(keys))
    size = memory.chunk_size(ctx, memo, len(keys), max_members, policy)
    memory.announce(ctx, memo, policy, len(keys), size)
    results = []
    tic = time.perf_counter()
    for start in range(0, len(keys), size):
        chunk_keys, chunk_hypers = keys[start:start + size], hypers[start:start + size]
        n_real = len(chunk_keys)
        if start and n_real < size:  # a short last chunk: pad with copies of its last member, one shape
            chunk_keys = chunk_keys + [chunk_keys[-1]] * (size - n_real)
            chunk_hypers = chunk_hypers + [chunk_hypers[-1]] * (size - n_real)
        results += run_members(ctx, memo, policy, chunk_keys, chunk_hypers, progress, keep_logs, keep_states)[:n_real]
        if on_chunk is not None:
            on_chunk(results)
        memory.release_heap(ctx)
        if start == 0 and len(keys) > size:
            spent = time.perf_counter() - tic  # the first chunk includes compiling: a pessimistic ETA
            left = spent * (len(keys) - size) / size
            log.info("%s: first chunk of %d members in %.0f s; about %.0f s (%.1f min) left for the other %d "
                     "members", policy.name, size, spent, left, left / 60, len(keys) - size)
    return results


def simulate_frozen(ctx: SimContext, memo: PlanMemory, policy: Policy, keys: Sequence[jax.Array],
                    hypers: Sequence | None = None, n_sessions: int | None = None) -> tuple[list[BucketState], int]:
    """``Simulator.simulate_frozen``: the main-phase sessions of every member with the policy frozen at its initial
    parameters (no warm-up, retraining or evaluation), the first ``n_sessions`` (None: all) cut into the protocol's
    segments; (final states, blocked until ready; sessions per member)."""
    keys = list(keys)
    hypers = protocol.resolve_hypers(policy, hypers, len(keys))
    trial_of, trials = protocol.group_trials(keys)
    setup = make_setup(ctx, memo, trials, trial_of)
    n_full = protocol.session_counts(ctx)[1]
    n_main = min(n_full, n_sessions or n_full)
    mains = [d[1] for d in setup.draws()] if isinstance(setup, HostSetup) else None  # the device's stay there
    points, _, segments, plans, widths = setup.main_plan(mains, n_main)
    params, hyper = setup.init_members(policy, hypers)
    states = setup.member_states(setup.initial_states(kept_counters(policy.counters_read)))
    produce = setup.main_producer(segments, plans, widths)
    _, states = segment.run_segments(ctx, policy, params, hyper, states, len(points), produce)
    return states, n_main
