"""The vectorized simulator equals the one-session-at-a-time NumPy reference on shared draws."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ltrjax import clicks
from ltrjax.data.layout import pad_and_bucket
from ltrjax.online import behaviour as behav
from ltrjax.online.policies.base import Policy
from ltrjax.online.policies.bm25 import BM25
from ltrjax.online.policies.ebrank import EBRank
from ltrjax.online.policies.random_k import RandomK
from ltrjax.online.simulator import SimConfig, Simulator, trial_keys
from tests.reference.online_loop import (
    assert_matches_reference,
    bm25_scorer,
    ebrank_scorer,
    random_k_scorer,
    run_reference,
)
from tests.toy_data import toy_queryset

CONFIG = SimConfig(sessions=700, warmup_sessions_per_query=3, n_updates=3, entry_prob=0.5, min_lanes=4,
                   lanes_per_query=0.3)


@pytest.fixture(scope="module")
def setup():
    qs = toy_queryset(n_queries=36, min_docs=6, max_docs=30, n_features=6, seed=3)
    data = pad_and_bucket(qs, n_buckets=2, single_bucket_cells=0)
    assert len(data.buckets) == 2  # the reference check covers sessions in several buckets
    model = clicks.make_click_model({"kind": "pbm", "examination": "log2"}, 5)
    return data, model, Simulator(data, model, CONFIG, warmup_policy=BM25(data))


def numpy_scorer(sim, policy):
    """The NumPy scoring of each policy under test, for ``run_reference``."""
    if isinstance(policy, BM25):
        return lambda params, draws, inputs: bm25_scorer(sim.data.bm25_column, inputs["features"])
    if isinstance(policy, RandomK):
        return lambda params, draws, inputs: random_k_scorer(trial_keys(KEY).run, draws, inputs["width"])
    return lambda params, draws, inputs: ebrank_scorer(params, inputs["hyper"], policy.beta, inputs["features"])


KEY = jax.random.PRNGKey(11)


@pytest.mark.parametrize("make_policy", [
    lambda d: BM25(d),
    lambda d: RandomK(d),
    lambda d: EBRank(d, epsilon=20.0, min_impressions=2, fit={"max_epochs": 5, "batch_size": 32}),
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
    # 6 refreshes, 2 models: one retrain, after the third segment, from the log of segments 0-2
    assert [config.retrains_after(i) for i in range(6)] == [False, False, True, False, False, False]
    assert n_updates == 1 and len(result.train_info) == 1 and int(result.final_params["retrains"]) == 1
    info = result.train_info[0]
    first_three = np.concatenate([log.session for log in result.logs[:3]])
    np.testing.assert_array_equal(info["sessions"], first_three)
    np.testing.assert_array_equal(info["n_clicks"], info["clicks"].sum(axis=1))  # records line up with sessions
    assert info["clicks"].sum() > 0
    # the frozen CTR really changed ranking between refreshes (the policy is not a constant)
    assert np.unique(np.concatenate([log.record["top_score"] for log in result.logs])).size > 1
    with pytest.raises(ValueError, match="multiple"):
        SimConfig.from_mapping({"n_updates": 4, "refreshes": 6})
