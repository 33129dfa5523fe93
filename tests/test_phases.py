"""Each phase of the simulator called alone (issue 40): protocol, plan, memory, segment, evaluate, retrain, and the
trial that composes them, on the tiny simulator of tests/toy_sims.py; the segment and trial phases are checked
against ``Simulator.run`` (itself checked against the NumPy reference loop: tests/test_simulator_reference.py)."""

import dataclasses

import jax
import numpy as np
import pytest

from ltrjax.constraints import ConfigError
from ltrjax.online import evaluate, memory, plan, programs, protocol, retrain, segment, trial
from ltrjax.online.policies.base import member, stack_members
from ltrjax.online.simulator import Simulator
from ltrjax.online.state import kept_counters
from tests import toy_sims


def fresh_states(ctx, trials, trial_of, names):
    """Every member's initial states (stacked per bucket), as the trial makes them without a warm-up."""
    initial = [stack_members(s) for s in zip(*(protocol.host_init_states(ctx, t.init, names) for t in trials))]
    return [jax.tree_util.tree_map(lambda a: a[trial_of], s) for s in initial]


def test_protocol_counts_draws_and_bounds():
    sim = toy_sims.small_sim()
    ctx, cfg = sim.context, sim.config
    n_warm, n_main = protocol.session_counts(ctx)
    assert (n_warm, n_main) == (cfg.warmup_sessions_per_query * ctx.data.n_queries, cfg.sessions) == (60, 360)
    trial_of, trials = protocol.group_trials([toy_sims.KEYS[0], toy_sims.KEYS[1], toy_sims.KEYS[0]])
    assert trial_of.tolist() == [0, 1, 0] and len(trials) == 2
    warm, main = protocol.session_plan(ctx, trials[0].plan)
    assert (len(warm), len(main)) == (n_warm, n_main)
    assert warm.session.tolist() == list(range(n_warm)) and main.session.tolist() == list(range(n_warm, n_warm + n_main))
    assert not warm.enter.any() and 0 < main.enter.mean() < 1  # entry_prob 0.5 in the main phase only
    again = protocol.session_plan(ctx, trials[0].plan)[1]
    np.testing.assert_array_equal(again.query, main.query)  # a function of the key alone
    assert not np.array_equal(protocol.session_plan(ctx, trials[1].plan)[1].query, main.query)
    points, starts = protocol.segment_bounds(n_main, cfg.n_segments)
    assert len(points) == cfg.n_segments and starts[0] == 0 and points[-1] == n_main - 1
    np.testing.assert_array_equal(starts[1:], points[:-1] + 1)  # contiguous, every session in one segment


def test_plan_schedules_every_session_once_in_its_bucket():
    """``plan.main_segments``: per segment and trial, every bucket's schedule holds each of the segment's sessions of
    that bucket exactly once, a query's sessions in one lane in session order, no query twice in one step, one shape for every
    segment and trial; the shape is remembered (``PlanMemory``) and a later plan of fewer sessions keeps it."""
    sim = toy_sims.small_sim()
    ctx, memo = sim.context, plan.PlanMemory()
    mains = [protocol.session_plan(ctx, protocol.trial_keys(k).plan)[1] for k in toy_sims.KEYS]
    points, starts, segments, plans = plan.main_segments(ctx, memo, mains, len(mains[0]))
    shapes = set()
    for per_trial, per_plan in zip(segments, plans):
        for draws, schedules in zip(per_trial, per_plan):
            seen = []
            for b, schedule in enumerate(schedules):
                shapes.add((b, schedule.shape))
                idx = schedule[schedule >= 0]
                assert (ctx.data.bucket_of_query[draws.query[idx]] == b).all()
                seen += idx.tolist()
                steps, lanes = np.nonzero(schedule >= 0)
                for q in np.unique(draws.query[idx]):  # a query's sessions: one lane, in session order
                    mine = draws.query[schedule[steps, lanes]] == q
                    assert len(set(lanes[mine].tolist())) == 1 and (np.diff(schedule[steps, lanes][mine]) > 0).all()
                for step in schedule:
                    queries = draws.query[step[step >= 0]]
                    assert len(set(queries.tolist())) == len(queries)
            assert sorted(seen) == list(range(len(draws)))
    assert len(shapes) == len(ctx.data.buckets)
    steps, lanes = memo.steps["main"], memo.lanes["main"]
    assert all(1 <= n <= m for n, m in zip(lanes, ctx.n_lanes))
    fewer = plan.plan(ctx, memo, [mains[0].slice(0, 20)])
    assert [s.shape for s in fewer[0]] == [(steps, n) for n in lanes] and memo.steps["main"] == steps
    widths = plan.segment_widths(ctx, memo, mains, points)
    assert widths == [plan.reachable_widths(ctx, mains)] * len(points) and plan.width_sets(memo) == [widths[0]]
    assert all(ctx.config.top_k <= w <= bucket.width for w, bucket in zip(widths[0], ctx.data.buckets))


def test_memory_member_bytes_and_chunk_size():
    sim = toy_sims.small_sim()
    ctx, memo, policy = sim.context, sim.memo, toy_sims.small_ebrank(sim.data)
    planes = len(kept_counters(policy.counters_read)) + 3
    assert memory.state_bytes(ctx, policy) == sum(b.n_queries * b.width * planes * 4 for b in ctx.data.buckets)
    one = memory.member_bytes(ctx, memo, policy)
    assert one > memory.state_bytes(ctx, policy) + 2 * memory.aux_bytes(ctx, policy) > 0
    fits_three = dataclasses.replace(ctx, memory_budget=3 * one + 1, state_budget=None, max_members=None)
    # balanced chunks: at most three members each, as few chunks as that allows, as equal as possible
    assert [memory.chunk_size(fits_three, memo, n, policy=policy) for n in (1, 3, 4, 7, 8)] == [1, 3, 2, 3, 3]
    assert memory.chunk_size(fits_three, memo, 7, max_members=2, policy=policy) == 2
    assert memory.check_fits(fits_three, memo, policy) == one
    with pytest.raises(ConfigError, match="population.memory_gb"):
        memory.check_fits(dataclasses.replace(ctx, memory_budget=one - 1), memo, policy)
    assert memory.pad_to_devices([1, 2, 3], ["a", "b", "c"], 2) == ([1, 2, 3, 3], ["a", "b", "c", "c"])


def no_warmup_sim() -> Simulator:
    sim = toy_sims.small_sim()
    return Simulator(sim.data, sim.click_model, sim.config, warmup_policy=None)


def test_segment_prepare_launch_collect_equals_the_runs_first_segment():
    """The first main segment of one trial, produced (``segment.prepare``), launched and collected alone from the
    initial states, gives the sessions' NDCG, shown lists and clicks of ``Simulator.run``'s first segment."""
    sim = no_warmup_sim()
    policy = toy_sims.small_ebrank(sim.data)
    key = toy_sims.KEYS[1]
    run = sim.run(policy, key, progress=False, keep_logs=True)
    ctx, memo = sim.context, sim.memo
    trial_of, trials = protocol.group_trials([key])
    main = protocol.session_plan(ctx, trials[0].plan)[1]
    points, starts, segments, plans = plan.main_segments(ctx, memo, [main], len(main))
    widths = plan.segment_widths(ctx, memo, [main], points)
    params, hyper = trial.init_members(ctx, policy, trials, trial_of, [policy.default_hyper()])
    params = programs.compiled(policy)["refresh"](protocol.fold_member_keys(trials, trial_of, "policy", 1, 0), params)
    states = fresh_states(ctx, trials, trial_of, kept_counters(policy.counters_read))
    prepared = segment.prepare(ctx, segments[0], plans[0], [trials[0].run], trial_of, widths[0])
    assert prepared.n_sessions == points[0] + 1 and len(prepared.schedules) == len(ctx.data.buckets)
    new_states, ys, _ = segment.launch(ctx, policy, params, hyper, states, prepared)
    ndcg, shown, clicked, _ = segment.collect(ctx, ys, prepared)
    np.testing.assert_array_equal(ndcg[0], run.session_ndcg[:points[0] + 1])
    np.testing.assert_array_equal(shown[0], run.logs[0].shown)
    np.testing.assert_array_equal(clicked[0], run.logs[0].clicks)
    assert np.asarray(new_states[0].issue_count).sum() > 0
    lean = segment.collect(ctx, ys, prepared, logs=False)  # the NDCG only
    np.testing.assert_array_equal(lean[0], ndcg)
    assert lean[1:] == (None, None, None)


def test_evaluate_a_fresh_state():
    """``evaluate``: per member and query Warm/Cold NDCG of the initial states, in [0, 1]; the test-only evaluation
    equals the full one on the test queries (NaN elsewhere), and a member evaluated alone equals its row."""
    sim = toy_sims.small_sim()
    ctx, policy = sim.context, toy_sims.small_ebrank(sim.data)
    trial_of, trials = protocol.group_trials(list(toy_sims.KEYS))
    params, _ = trial.init_members(ctx, policy, trials, trial_of, [policy.default_hyper()] * 2)
    states = fresh_states(ctx, trials, trial_of, kept_counters(policy.counters_read))
    full = evaluate.evaluate(ctx, policy, params, states)
    for name in ("warm", "cold"):
        assert full[name].shape == (2, ctx.data.n_queries) and ((0 <= full[name]) & (full[name] <= 1)).all()
    test = ctx.data.split_of_query == 2
    part = evaluate.evaluate(ctx, policy, params, states, test_only=True)
    for name in ("warm", "cold"):
        np.testing.assert_array_equal(part[name][:, test], full[name][:, test])
        assert np.isnan(part[name][:, ~test]).all()
    second = lambda tree: jax.tree_util.tree_map(lambda a: a[1:], tree)  # noqa: E731  (member 1 alone)
    alone = evaluate.evaluate(ctx, policy, second(params), [second(s) for s in states])
    np.testing.assert_array_equal(alone["warm"][0], full["warm"][1])
    means = evaluate.split_means(ctx.data, {k: v[0] for k, v in full.items()})
    assert means["test"]["warm"] == pytest.approx(float(full["warm"][0][test].mean()))


def test_retrain_views_equal_numpy_dataset_order_counters():
    """``retrain.retrain_views``: every member's counters and entered masks in dataset order equal NumPy's gather of
    its entry-order values by ``rank``; ``retrain.retrain`` gives every member new parameters and a train info."""
    sim = toy_sims.small_sim()
    ctx, policy = sim.context, toy_sims.small_ebrank(sim.data)
    rng = np.random.default_rng(0)
    keys = [jax.random.PRNGKey(s) for s in range(3)]
    names = kept_counters(policy.counters_read)
    members = []
    for k in keys:
        per_bucket = []
        for st in protocol.host_init_states(ctx, k, names):
            counts = {n: None if c is None else rng.integers(0, 5, c.shape).astype(np.float32)
                      for n, c in dataclasses.asdict(st.counters).items()}
            per_bucket.append(st.replace(counters=st.counters.replace(**counts)))
        members.append(per_bucket)
    stacked = [stack_members(list(per_bucket)) for per_bucket in zip(*members)]
    counters, entered = retrain.policy_views(ctx, policy, stacked, 3)
    for i in (2, 0, 1):
        for b, state in enumerate(members[i]):
            rank = np.asarray(state.rank)[:-1]
            for name in ("clicks", "impressions"):
                want = np.take_along_axis(np.asarray(getattr(state.counters, name))[:-1], rank, axis=1)
                np.testing.assert_array_equal(getattr(member(counters, i)[b], name), want)
            entry = np.arange(rank.shape[1])[None, :] < np.asarray(state.n_entered)[:, None]
            np.testing.assert_array_equal(member(entered, i)[b], np.take_along_axis(entry[:-1], rank, axis=1))
    trial_of, trials = protocol.group_trials(keys)
    params, hyper = trial.init_members(ctx, policy, trials, trial_of, [policy.default_hyper()] * 3)
    new, infos = retrain.retrain(ctx, policy, protocol.fold_member_keys(trials, trial_of, "train", 0), params,
                                 hyper, stacked, [None] * 3)
    assert len(infos) == 3
    assert jax.tree_util.tree_structure(new) == jax.tree_util.tree_structure(params)
    assert any(not np.array_equal(a, b) for a, b in zip(jax.tree_util.tree_leaves(new), jax.tree_util.tree_leaves(params)))


def test_trial_composed_with_a_swapped_producer_equals_the_run():
    """``trial.run_members`` with a producer of its own (here the host producer, recorded): called once per main
    segment in order, and the results equal ``Simulator.run_population``'s bit for bit."""
    sim = toy_sims.small_sim()
    policy = toy_sims.small_ebrank(sim.data)
    keys, hypers = list(toy_sims.KEYS), [policy.make_hyper(**h) for h in toy_sims.EBRANK_HYPERS]
    want = sim.run_population(policy, keys, hypers, progress=False, keep_logs=True)
    calls = []

    def recording(ctx, segments, plans, run_keys, trial_of, widths):
        host = segment.host_producer(ctx, segments, plans, run_keys, trial_of, widths)
        return lambda i: calls.append(i) or host(i)

    got = trial.run_members(sim.context, sim.memo, policy, keys, hypers, progress=False, keep_logs=True,
                            make_producer=recording)
    assert calls == list(range(sim.config.n_segments))
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a.session_ndcg, b.session_ndcg)
        np.testing.assert_equal(a.eval_history, b.eval_history)
        assert a.cum_ndcg == b.cum_ndcg
        for x, y in zip(jax.tree_util.tree_leaves((a.final_states, a.final_params, a.logs)),
                        jax.tree_util.tree_leaves((b.final_states, b.final_params, b.logs))):
            np.testing.assert_array_equal(x, y)
