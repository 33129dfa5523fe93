"""The vectorized simulator equals the one-session-at-a-time NumPy reference on shared draws."""

import jax
import numpy as np
import pytest

from ltrjax import clicks
from ltrjax.data.layout import pad_and_bucket
from ltrjax.online.policies.bm25 import BM25
from ltrjax.online.policies.ebrank import EBRank
from ltrjax.online.policies.random_k import RandomK
from ltrjax.online.schedule import update_points
from ltrjax.online.simulator import SimConfig, Simulator, click_uniforms, trial_keys
from ltrjax.online.state import DocCounters
from tests.reference.online_loop import (
    COUNTER_NAMES,
    ReferenceState,
    cumulative,
    run_sessions,
    shared_policy_noise,
)
from tests.toy_data import toy_queryset

CONFIG = SimConfig(sessions=700, warmup_sessions_per_query=3, n_updates=3, entry_prob=0.5, min_lanes=4,
                   lanes_per_query=0.3)


@pytest.fixture(scope="module")
def setup():
    qs = toy_queryset(n_queries=36, min_docs=6, max_docs=30, n_features=6, seed=3)
    data = pad_and_bucket(qs, n_buckets=2)
    model = clicks.make_click_model({"kind": "pbm", "examination": "log2"}, 5)
    return data, model, Simulator(data, model, CONFIG, warmup_policy=BM25(data))


def reference_inputs(data):
    """Per global query: features, gains, n_docs, idcg, width (dataset slot order)."""
    from ltrjax.clicks import relevance
    from ltrjax.metrics import ideal_dcg
    import jax.numpy as jnp

    per_query = {k: [None] * data.n_queries for k in ("features", "gains", "n_docs", "idcg", "width")}
    disc = jnp.asarray(clicks.examination_log2(5))
    for bucket in data.buckets:
        gains = relevance(bucket.labels, data.y_max, "ebrank") * bucket.doc_mask
        idcg = np.asarray(ideal_dcg(gains, bucket.doc_mask, disc))
        for r, q in enumerate(np.asarray(bucket.query_index)):
            per_query["features"][q] = np.asarray(bucket.features[r])
            per_query["gains"][q] = np.asarray(gains[r])
            per_query["n_docs"][q] = int(bucket.n_docs[r])
            per_query["idcg"][q] = float(idcg[r])
            per_query["width"][q] = bucket.width
    return per_query


def reference_state(data, states):
    doc_ids, n_entered = [None] * data.n_queries, np.zeros(data.n_queries, np.int64)
    for bucket, st in zip(data.buckets, states):
        for r, q in enumerate(np.asarray(bucket.query_index)):
            doc_ids[q] = np.asarray(st.order[r])[: int(bucket.n_docs[r])]
            n_entered[q] = int(st.n_entered[r])
    return ReferenceState(doc_ids, n_entered)


def dataset_order_counters(data, ref: ReferenceState):
    counters, entered = [], []
    for bucket in data.buckets:
        arrays = {name: np.zeros(bucket.labels.shape, np.float32) for name in COUNTER_NAMES}
        ent = np.zeros(bucket.labels.shape, bool)
        for r, q in enumerate(np.asarray(bucket.query_index)):
            for name in COUNTER_NAMES:
                arrays[name][r, ref.doc_ids[q]] = ref.counters[name][q]
            ent[r, ref.doc_ids[q][: ref.n_entered[q]]] = True
        counters.append(DocCounters(**{k: jax.numpy.asarray(v) for k, v in arrays.items()}))
        entered.append(jax.numpy.asarray(ent))
    return tuple(counters), tuple(entered)


def policy_kind(policy, data):
    if isinstance(policy, BM25):
        return {"name": "bm25", "column": data.bm25_column}
    if isinstance(policy, RandomK):
        return {"name": "random_k"}
    return {"name": "ebrank", "beta": policy.beta, "epsilon": policy.epsilon}


def run_reference(sim, policy, key):
    data = sim.data
    keys = trial_keys(key)
    states = sim.init_states(keys.init)
    warm, main = sim.session_plan(keys.plan)
    inputs = reference_inputs(data)
    ref = reference_state(data, states)
    click = {k: np.asarray(getattr(sim.click_model, k)) for k in ("examination", "alpha", "beta")}
    common = dict(features=inputs["features"], gains=inputs["gains"], n_docs=inputs["n_docs"],
                  idcg=inputs["idcg"], click=click, top_k=5)

    def shared(draws):
        noise = lambda i, q: shared_policy_noise(keys.run, int(draws.session[i]), inputs["width"][q])  # noqa: E731
        uniforms = click_uniforms(keys.run, int(draws.session[0]), len(draws), 1, 5)
        return dict(uniforms=uniforms, noise_fn=noise)

    run_sessions(ref, warm, policy_kind(sim.warmup_policy, data), (), **common, **shared(warm))
    params = policy.init(keys.policy, data)
    points = update_points(len(main), sim.config.n_updates)
    starts = np.concatenate([[0], points[:-1] + 1])
    ndcg, shown, clicked, n_updates = [], [], [], 0
    for i, (a, b) in enumerate(zip(starts, points + 1)):
        seg = main.slice(int(a), int(b))
        nd, sh, cl = run_sessions(ref, seg, policy_kind(policy, data), params, **common, **shared(seg))
        ndcg.append(nd), shown.append(sh), clicked.append(cl)
        if i < len(points) - 1 and policy.trains:
            counters, entered = dataset_order_counters(data, ref)
            params, info = policy.update(jax.random.fold_in(keys.train, i), params, data, counters, entered, None)
            n_updates += not info.get("skipped", False)
    split = data.split_of_query[main.query]
    return ref, np.concatenate(ndcg), np.concatenate(shown), np.concatenate(clicked), split, n_updates


@pytest.mark.parametrize("make_policy", [
    lambda d: BM25(d),
    lambda d: RandomK(d),
    lambda d: EBRank(d, epsilon=20.0, min_impressions=2, fit={"max_epochs": 5, "batch_size": 32}),
], ids=["bm25", "random_k", "ebrank"])
def test_vectorized_equals_reference(setup, make_policy):
    data, _, sim = setup
    policy = make_policy(data)
    key = jax.random.PRNGKey(11)
    result = sim.run(policy, key, progress=False, keep_logs=True)
    ref, ndcg, shown, clicked, split, n_updates = run_reference(sim, policy, key)

    vec_shown = np.concatenate([log.shown for log in result.logs])
    vec_clicks = np.concatenate([log.clicks for log in result.logs])
    np.testing.assert_array_equal(vec_shown, shown)
    np.testing.assert_array_equal(vec_clicks, clicked)
    np.testing.assert_allclose(result.session_ndcg, ndcg, rtol=1e-5, atol=1e-6)
    ref_cum = cumulative(ndcg, split, sim.config.gamma)
    for name, value in ref_cum.items():
        assert result.cum_ndcg[name] == pytest.approx(value, rel=1e-5)

    # counters and entered documents, query by query
    for bucket, st in zip(data.buckets, result.final_states):
        for r, q in enumerate(np.asarray(bucket.query_index)):
            assert int(st.n_entered[r]) == ref.n_entered[q]
            assert int(st.issue_count[r]) == ref.issue_count[q]
            n = int(bucket.n_docs[r])
            for name in COUNTER_NAMES:
                np.testing.assert_array_equal(np.asarray(getattr(st.counters, name)[r])[:n], ref.counters[name][q])
    # the protocol really exercised document entry and (for EBRank) model updates
    assert sum(int(np.sum(st.n_entered[:-1])) for st in result.final_states) > \
        sum(int(np.sum(st.n_entered[:-1])) for st in sim.init_states(trial_keys(key).init))
    if policy.trains:
        assert n_updates >= 1
