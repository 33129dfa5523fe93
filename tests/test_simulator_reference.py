"""The vectorized simulator equals the one-session-at-a-time NumPy reference on shared draws."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ltrjax.online import behaviour as behav
from ltrjax.online import step as step_lib
from ltrjax.online.policies.base import Policy
from ltrjax.online.policies.bm25 import BM25
from ltrjax.online.policies.ebrank import EBRank
from ltrjax.online.policies.random_k import RandomK
from ltrjax.online.schedule import SessionDraws
from ltrjax.online.simulator import SimConfig, Simulator, trial_keys
from tests.reference.online_loop import (
    COUNTER_NAMES,
    assert_matches_reference,
    bm25_scorer,
    ebrank_scorer,
    random_k_scorer,
    reference_inputs,
    reference_state,
    run_reference,
    run_sessions,
)
from tests import toy_sims

CONFIG = toy_sims.SMALL_CONFIG  # tests/test_population.py's simulator: its EBRank programs serve this file's too


@pytest.fixture(scope="module")
def setup():
    data = toy_sims.small_data()
    assert len(data.buckets) == 2  # the reference check covers sessions in several buckets
    sim = toy_sims.small_sim()
    return data, sim.click_model, sim


def numpy_scorer(sim, policy):
    """The NumPy scoring of each policy under test, for ``run_reference``."""
    if isinstance(policy, BM25):
        return lambda params, draws, inputs: bm25_scorer(sim.data.bm25_column, inputs["features"])
    if isinstance(policy, RandomK):
        return lambda params, draws, inputs: random_k_scorer(trial_keys(KEY).run, draws, inputs["width"])
    return lambda params, draws, inputs: ebrank_scorer(params, inputs["hyper"], policy.beta, inputs["features"])


KEY = jax.random.PRNGKey(1)  # tests/test_population.py's first trial


@pytest.mark.parametrize("make_policy", [
    lambda d: BM25(d),
    lambda d: RandomK(d),
    toy_sims.small_ebrank,
], ids=["bm25", "random_k", "ebrank"])
def test_vectorized_equals_reference(setup, make_policy):
    data, _, sim = setup
    policy = make_policy(data)
    result = sim.run(policy, KEY, progress=False, keep_logs=True)
    reference = run_reference(sim, policy, KEY, numpy_scorer(sim, policy))
    assert_matches_reference(sim, result, reference)
    n_updates = reference[-1]
    # the protocol really exercised document entry and (for EBRank) model updates
    assert sum(int(np.sum(st.n_entered[:-1])) for st in result.final_states) > \
        sum(int(np.sum(st.n_entered[:-1])) for st in sim.init_states(trial_keys(KEY).init))
    if policy.trains:
        assert n_updates >= 1


class FrozenCTR(Policy):
    """A test policy: ranks by the CTR of the last refresh (``prepare``'s behaviour counters) and keeps
    a session record, to check the refresh schedule, the records and the logs handed to ``update``."""

    name = "frozen_ctr"
    trains = True

    def init(self, key, data):
        return {"retrains": jnp.int32(0)}

    def prepare(self, params, bucket, behaviour):
        return behav.ctr(behaviour)

    def session_record(self, view, key, scores, shown, slot_valid, clicked):
        return {"n_clicks": jnp.sum(clicked.astype(jnp.int32)), "top_score": scores[shown[0]]}

    def update(self, key, params, hyper, data, counters, entered, log):
        n_clicks = None if log.record is None else np.asarray(log.record["n_clicks"])  # the reference keeps none
        return {"retrains": params["retrains"] + 1}, {"sessions": np.asarray(log.session), "n_clicks": n_clicks,
                                                      "clicks": np.asarray(log.clicks)}


def frozen_ctr_scorer(params, draws, inputs):
    behaviour = inputs["behaviour"]

    def score(i, q, docs, counters):
        n, c = behaviour["impressions"][q][docs], behaviour["clicks"][q][docs]
        return np.where(n > 0, c / np.where(n > 0, n, 1), 0).astype(np.float32)

    return score


def test_protocols_retrain_points_and_session_counts(setup):
    """The EBRank protocol retrains after every segment but the last (19 of 20); the UCBRank protocol (100 refreshes,
    20 updates) after refreshes 2, 7, ..., 97, 20 times, its code's ``points[n_d//2::n_d]``. Session counts:
    EBRank Eq. 28, #Q x (mean docs - 5) / eta; UCBRank §6.1.2, #Q x mean docs / eta."""
    from ltrjax.online.simulator import default_session_count

    ebrank = SimConfig(n_updates=20)
    assert [i for i in range(20) if ebrank.retrains_after(i)] == list(range(19))
    ucbrank = SimConfig(n_updates=20, refreshes=100)
    assert [i for i in range(100) if ucbrank.retrains_after(i)] == list(range(2, 100, 5))
    data = setup[0]
    n_docs = np.concatenate([np.asarray(b.n_docs) for b in data.buckets])
    assert default_session_count(data, 0.5) == round(data.n_queries * (n_docs.mean() - 5) / 0.5)
    assert default_session_count(data, 0.5, "ucbrank") == round(data.n_queries * n_docs.mean() / 0.5)


def test_refreshes_records_and_logs_match_reference(setup):
    data, model, _ = setup
    config = dataclasses.replace(CONFIG, n_updates=2, refreshes=6)
    sim = Simulator(data, model, config, warmup_policy=BM25(data))
    policy = FrozenCTR()
    result = sim.run(policy, KEY, progress=False, keep_logs=True)
    reference = run_reference(sim, policy, KEY, frozen_ctr_scorer)
    n_updates = reference[-1]

    assert len(result.logs) == 6 and len(result.eval_history) == 6
    assert_matches_reference(sim, result, reference)
    # 6 refreshes, 2 models: two retrains, after the middle segment of each three (the UCBRank code's
    # points[n_d//2::n_d]), the first from the log of segments 0-1, the second from segments 2-4
    assert [config.retrains_after(i) for i in range(6)] == [False, True, False, False, True, False]
    assert n_updates == 2 and len(result.train_info) == 2 and int(result.final_params["retrains"]) == 2
    info = result.train_info[0]
    np.testing.assert_array_equal(info["sessions"], np.concatenate([log.session for log in result.logs[:2]]))
    np.testing.assert_array_equal(result.train_info[1]["sessions"],
                                  np.concatenate([log.session for log in result.logs[2:5]]))
    np.testing.assert_array_equal(info["n_clicks"], info["clicks"].sum(axis=1))  # records line up with sessions
    assert info["clicks"].sum() > 0
    # the frozen CTR really changed ranking between refreshes (the policy is not a constant)
    assert np.unique(np.concatenate([log.record["top_score"] for log in result.logs])).size > 1
    with pytest.raises(ValueError, match="multiple"):
        SimConfig.from_mapping({"n_updates": 4, "refreshes": 6})


# --------------------------------------------------------------------------- one step on its own
def step_plan(rng, bucket, n_steps, n_lanes, pool):
    """Random lane inputs of ``n_steps`` steps: each lane idle (p = 1/4) or one of ``pool``'s rows, never two lanes
    on one row in a step; entries with p = 1/2. Returns rows, enter, valid ``[steps, lanes]``."""
    rows = np.full((n_steps, n_lanes), bucket.n_queries, np.int32)
    valid = rng.random((n_steps, n_lanes)) >= 0.25
    valid[0, -1] = False  # at least one idle lane, and one step with every lane busy
    valid[1] = True
    for t in range(n_steps):
        rows[t, valid[t]] = rng.choice(pool, int(valid[t].sum()), replace=False)
    enter = (rng.random((n_steps, n_lanes)) < 0.5) & valid
    return rows, enter, valid


@pytest.mark.parametrize("make_policy", [
    lambda d: EBRank(d, epsilon=20.0),
    lambda d: RandomK(d),
], ids=["ebrank", "random_k"])
def test_session_step_equals_reference(setup, make_policy):
    """``step.session_step`` alone, jitted, on hand-built lane inputs of one bucket: every step's shown lists,
    clicks and NDCG, and the counters, entries and issue counts after it, equal the NumPy reference on the same
    uniforms (idle lanes change nothing and show nothing; a full query cannot take another document; a query
    with fewer than K documents entered shows empty slots)."""
    data, _, sim = setup
    policy = make_policy(data)
    key = jax.random.PRNGKey(5)
    keys = trial_keys(key)
    b, n_steps, n_lanes, top_k = 1, 8, 3, sim.config.top_k
    bucket = data.buckets[b]
    states = sim.init_states(keys.init)
    params = policy.init(keys.policy, data)
    hyper = policy.make_hyper(epsilon=7.0) if isinstance(policy, EBRank) else policy.default_hyper()
    query_index = np.asarray(bucket.query_index)
    n_docs = np.asarray(bucket.n_docs)

    rng = np.random.default_rng(0)
    full, few = 0, 1  # run only in step 2
    pool = np.arange(2, 7)  # five rows share three lanes in the other steps: queries change lanes between steps
    rows_used = np.concatenate([[full, few], pool])
    state = states[b]
    state = state.replace(n_entered=state.n_entered.at[full].set(int(n_docs[full])).at[few].set(2))
    states[b] = state
    ref = reference_state(data, states)
    assert ref.n_entered[query_index[full]] == n_docs[full] and ref.n_entered[query_index[few]] == 2
    inputs = reference_inputs(data, np.asarray(sim.discount))
    click = {k: np.asarray(getattr(sim.click_model, k)) for k in ("examination", "alpha", "beta")}
    rows, enter, valid = step_plan(rng, bucket, n_steps, n_lanes, pool)
    enter[2, :] = valid[2, :] = True
    rows[2, :] = [full, few, 2]  # the full query tries to take a document; the short one shows empty slots
    uniforms = rng.random((n_steps, n_lanes, 1, top_k), dtype=np.float32)
    session = (1000 + np.arange(n_steps * n_lanes, dtype=np.int32)).reshape(n_steps, n_lanes)
    if isinstance(policy, EBRank):
        make = lambda draws: ebrank_scorer(params, hyper, policy.beta, inputs["features"])  # noqa: E731
    else:
        make = lambda draws: random_k_scorer(keys.run, draws, inputs["width"])  # noqa: E731

    consts = step_lib.segment_constants(policy, params, hyper, state, bucket)
    queries = step_lib.query_constants(bucket, sim.gains[b], sim.idcg[b])
    step = jax.jit(step_lib.session_step, static_argnums=0)
    untouched = np.setdiff1d(np.arange(bucket.n_queries), rows_used)
    before = jax.device_get(state)
    for t in range(n_steps):
        x = step_lib.SessionInputs(rows=rows[t], enter=enter[t], session=session[t], uniforms=uniforms[t],
                                   valid=valid[t])
        state, out = step(policy, sim.protocol, consts, queries, state, x, keys.run)
        out = jax.device_get(out)
        lanes = np.flatnonzero(valid[t])
        draws = SessionDraws(query=query_index[rows[t, lanes]], enter=enter[t, lanes], session=session[t, lanes])
        ndcg, shown, clicked = run_sessions(ref, draws, make(draws), inputs["gains"], inputs["n_docs"],
                                            inputs["idcg"], click, top_k, uniforms[t, lanes], np.asarray(sim.discount))
        np.testing.assert_array_equal(out.shown[lanes], shown)
        np.testing.assert_array_equal(out.clicks[lanes], clicked)
        np.testing.assert_allclose(out.ndcg[lanes], ndcg, rtol=1e-5, atol=1e-6)
        idle = ~valid[t]
        assert np.all(out.shown[idle] == -1) and not out.clicks[idle].any() and np.all(out.ndcg[idle] == 0)
        host = jax.device_get(state)
        for r in rows_used:
            q = query_index[r]
            assert int(host.n_entered[r]) == ref.n_entered[q] and int(host.issue_count[r]) == ref.issue_count[q]
            for i, name in enumerate(COUNTER_NAMES):
                np.testing.assert_array_equal(host.stats[i, r, : n_docs[r]], ref.counters[name][q])
        # a document that entered in this step records the session; idle lanes and other rows are untouched
        for lane in lanes:
            r = rows[t, lane]
            if enter[t, lane] and ref.n_entered[query_index[r]] > int(before.n_entered[r]):
                assert int(host.entry_session[r, host.n_entered[r] - 1]) == session[t, lane]
        if t == 2:  # the full query stays full; the short one has 3 documents: two empty slots
            assert int(host.n_entered[full]) == n_docs[full] and int(host.n_entered[few]) == 3
            assert np.sum(out.shown[1] == -1) == top_k - 3 and not out.clicks[1, 3:].any()
        before = host
    assert np.asarray(out.shown).shape == (n_lanes, top_k)
    initial = jax.device_get(states[b])
    np.testing.assert_array_equal(before.stats[:, untouched], initial.stats[:, untouched])
    for name in ("n_entered", "issue_count", "entry_session"):
        np.testing.assert_array_equal(getattr(before, name)[untouched], getattr(initial, name)[untouched])
    np.testing.assert_array_equal(before.stats[:, -1], 0.0)  # the scratch row absorbs idle lanes' zero updates
    np.testing.assert_array_equal(before.n_entered[-1], initial.n_entered[-1])
    # the steps did something: clicks happened and documents entered
    assert sum(float(ref.counters["clicks"][query_index[r]].sum()) for r in rows_used) > 0
    assert any(before.entry_session[r].max() >= 1000 for r in pool)
