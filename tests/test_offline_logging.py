"""Logging of the offline protocol: vectorized logger vs a one-session-at-a-time NumPy loop."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ltrjax.clicks import (TIANGONG_MATRIX, cascade, click_matrix, examination, pbm, relevance_binary,
                           trust_bias, vardasbi_trust_epsilons)
from ltrjax.offline.lists import bucket_queries, pad_queries
from ltrjax.offline.logging import (LoggedLists, log_click_stats, log_sessions, reduce_sessions,
                                    reference_click_stats, reference_session_clicks,
                                    top_k_lists)
from ltrjax.data.toy import toy_queryset

K = 10


def _logged(n_queries=7, k=K, seed=0, short_last=True):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 5, size=(n_queries, k)).astype(np.int32)
    mask = np.ones((n_queries, k), bool)
    if short_last:
        mask[-1, 6:] = False  # a query with only 6 documents
    labels = np.where(mask, labels, 0)
    rel = np.asarray(relevance_binary(labels, 3, 0.1))
    return LoggedLists(features=jnp.zeros((n_queries, k, 2)), labels=jnp.asarray(labels),
                       relevance=jnp.asarray(np.where(mask, rel, 0.0)), mask=jnp.asarray(mask),
                       doc_index=jnp.zeros((n_queries, k), jnp.int32), query_index=jnp.arange(n_queries))


MODELS = {
    "pbm_inverse": pbm(examination("inverse", K, 1.0)),
    "trust_bias": trust_bias(examination("inverse", K, 1.0), *vardasbi_trust_epsilons(K)),
    "tiangong": click_matrix(TIANGONG_MATRIX, K),
    "cascade": cascade([0.05, 0.3, 0.5, 0.7, 0.95], [0.2, 0.3, 0.5, 0.7, 0.9], K),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_vectorized_clicks_match_numpy_loop(name):
    model = MODELS[name]
    logged = _logged()
    sessions = log_sessions(jax.random.PRNGKey(3), model, logged, 3000)
    ref = reference_session_clicks(model, logged.relevance, logged.labels, logged.mask, sessions.query,
                                   sessions.uniforms)
    np.testing.assert_array_equal(np.asarray(sessions.clicks), ref)
    assert ref.sum() > 100  # the comparison is not vacuous
    assert not ref[np.asarray(sessions.query) == 6][:, 6:].any()  # empty slots never clicked


def test_session_statistics_match_loop():
    model = MODELS["pbm_inverse"]
    logged = _logged()
    s = log_sessions(jax.random.PRNGKey(5), model, logged, 2000)
    stats = reduce_sessions(s.clicks, s.query, 7)
    n, c, pairs, pairs_l = reference_click_stats(s.clicks, s.query, 7)
    np.testing.assert_allclose(stats.n_sessions, n)
    np.testing.assert_allclose(stats.clicks, c)
    np.testing.assert_allclose(stats.pairs, pairs)
    np.testing.assert_allclose(stats.pairs_lambda, pairs_l, rtol=1e-5)


def test_chunked_logging_counts_every_session_once():
    model = MODELS["pbm_inverse"]
    logged = _logged()
    stats = log_click_stats(jax.random.PRNGKey(0), model, logged, 10_007, chunk=1000)
    assert stats.total_sessions == 10_007
    # the same key and chunk size reproduce the log exactly
    again = log_click_stats(jax.random.PRNGKey(0), model, logged, 10_007, chunk=1000)
    np.testing.assert_array_equal(stats.clicks, again.clicks)
    # CTR per slot = theta_k R averaged over queries, within 5 sigma
    rel = np.asarray(logged.relevance)
    theta = np.asarray(model.examination)
    for q in range(7):
        n = float(stats.n_sessions[q])
        p = theta * rel[q]
        sd = np.sqrt(np.maximum(p * (1 - p), 1e-4) / n)
        assert np.all(np.abs(np.asarray(stats.clicks[q]) / n - p) < 5 * sd + 1e-9)


def test_tiangong_matrix_reproduced_by_simulated_click_rates():
    """Empirical CTR[label, position] from 200k simulated sessions matches M within 4 sigma."""
    model = MODELS["tiangong"]
    # 5 queries; query q shows label (q + k) % 5 at slot k, so every (label, slot) cell is covered
    labels = (np.arange(5)[:, None] + np.arange(K)[None, :]) % 5
    logged = LoggedLists(features=jnp.zeros((5, K, 1)), labels=jnp.asarray(labels, jnp.int32),
                         relevance=jnp.zeros((5, K)), mask=jnp.ones((5, K), bool),
                         doc_index=jnp.zeros((5, K), jnp.int32), query_index=jnp.arange(5))
    stats = log_click_stats(jax.random.PRNGKey(11), model, logged, 200_000, chunk=50_000)
    ctr = np.zeros((5, K))
    for q in range(5):
        ctr[labels[q], np.arange(K)] = np.asarray(stats.clicks[q]) / float(stats.n_sessions[q])
    n_cell = 200_000 / 5
    sd = np.sqrt(TIANGONG_MATRIX * (1 - TIANGONG_MATRIX) / n_cell)
    z = np.abs(ctr - TIANGONG_MATRIX) / sd
    assert z.max() < 4.5, z.max()


def test_top_k_lists_show_production_order():
    qs = toy_queryset(n_queries=20, seed=1)
    rng = np.random.default_rng(0)
    lists = pad_queries(qs, np.arange(20), rng)
    scores = jnp.asarray(lists.features[..., 0])
    logged = top_k_lists(lists, scores, jnp.asarray(lists.labels, jnp.float32), K)
    for q in range(20):
        n = int(lists.mask[q].sum())
        want = np.argsort(-np.where(lists.mask[q], np.asarray(scores[q]), -np.inf), kind="stable")[: min(n, K)]
        np.testing.assert_array_equal(np.asarray(logged.doc_index[q][: len(want)]), lists.doc_index[q][want])
        np.testing.assert_allclose(np.asarray(logged.features[q][: len(want)]), lists.features[q][want])
        assert int(logged.mask[q].sum()) == min(n, K)


def test_buckets_cover_every_query_once():
    qs = toy_queryset(n_queries=50, docs=(3, 90), seed=2)
    ids = np.arange(50)
    buckets = bucket_queries(qs, ids, np.random.default_rng(0), n_buckets=3)
    seen = np.concatenate([np.asarray(b.query_index) for b in buckets])
    assert sorted(seen.tolist()) == ids.tolist()
    for b in buckets:
        for row, q in enumerate(np.asarray(b.query_index)):
            n = qs.query_offsets[q + 1] - qs.query_offsets[q]
            assert b.mask[row].sum() == n
            assert sorted(b.doc_index[row][b.mask[row]].tolist()) == list(range(qs.query_offsets[q], qs.query_offsets[q + 1]))
            np.testing.assert_array_equal(b.labels[row][b.mask[row]], qs.labels[b.doc_index[row][b.mask[row]]])


def test_logging_boost_reorders_by_the_boosted_feature_only_when_asked():
    """``logging_boost``: weight 0 keeps the production scores; a large weight ranks every query by the feature
    (NumPy reference: the z-scored column); a column outside the features is refused."""
    from ltrjax.offline.experiment import logging_scores
    from ltrjax.offline_runner import experiment_config

    def boost(column, weight):
        return experiment_config({"logging_boost": {"column": column, "weight": weight}})

    qs = toy_queryset(n_queries=12, seed=3)
    rng = np.random.default_rng(0)
    buckets = bucket_queries(qs, np.arange(12), rng, n_buckets=2)
    prod = [jnp.asarray(rng.normal(size=b.mask.shape), jnp.float32) for b in buckets]
    same = logging_scores(qs, boost(1, 0.0), buckets, prod)
    assert all(a is b for a, b in zip(same, prod))
    boosted = logging_scores(qs, boost(1, 1e4), buckets, prod)
    for b, s in zip(buckets, boosted):
        mask = np.asarray(b.mask)
        col = np.asarray(b.features)[..., 1]
        for row in range(mask.shape[0]):
            m = mask[row]
            np.testing.assert_array_equal(np.argsort(-np.asarray(s)[row][m], kind="stable"),
                                          np.argsort(-col[row][m], kind="stable"))
    with pytest.raises(ValueError, match="logging_boost.column"):
        logging_scores(qs, boost(qs.n_features, 1.0), buckets, prod)


def test_a_click_budget_logs_sessions_until_it_is_spent():
    """``n_clicks`` (PRS §5.2 counts clicks): sessions are logged while fewer than n clicks came before them, so
    the total is n up to the last session's clicks, and the kept sessions are exactly the first ones of the
    session budget's stream (the same key and chunks), whatever the chunk size."""
    model = MODELS["pbm_inverse"]
    logged = _logged()
    for chunk in (64, 1000):
        stats = log_click_stats(jax.random.PRNGKey(3), model, logged, n_clicks=5_000, chunk=chunk)
        assert 5_000 <= stats.total_clicks < 5_000 + K
        n = int(stats.total_sessions)
        by_sessions = log_click_stats(jax.random.PRNGKey(3), model, logged, n, chunk=chunk)
        for a, b in zip(jax.tree_util.tree_leaves(stats), jax.tree_util.tree_leaves(by_sessions)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(ValueError, match="exactly one budget"):
        log_click_stats(jax.random.PRNGKey(3), model, logged, 10, n_clicks=10)


def test_chunked_pair_statistics_equal_the_per_session_reference_on_long_lists():
    """Whole candidate lists (K = 60) through small chunks (the [chunk, K, K] pair statistics bound the memory):
    the chunked per-query statistics equal the one-session-at-a-time reference over the same sessions."""
    from ltrjax.offline.logging import chunk_size

    k = 60
    logged = _logged(n_queries=5, k=k, seed=4)
    model = pbm(examination("inverse", k))
    sessions = []
    stats = log_click_stats(jax.random.PRNGKey(8), model, logged, 700, chunk=128,
                            on_chunk=lambda first, q, c: sessions.append((first, q, c)))
    assert [f for f, _, _ in sessions] == [0, 128, 256, 384, 512, 640]
    query = np.concatenate([q for _, q, _ in sessions])
    clicks = np.concatenate([c for _, _, c in sessions])
    n, c, pairs, pairs_l = reference_click_stats(clicks, query, 5)
    np.testing.assert_allclose(stats.n_sessions, n)
    np.testing.assert_allclose(stats.clicks, c)
    np.testing.assert_allclose(stats.pairs, pairs)
    np.testing.assert_allclose(stats.pairs_lambda, pairs_l, rtol=1e-5)
    assert chunk_size(1250) == (1 << 24) // 1250 ** 2 and chunk_size(10) == 1 << 17 and chunk_size(60, 7) == 7


def test_result_randomization_estimates_the_examination_curve():
    """A simulated result-randomization experiment (PRS Table 1's propensity estimate) recovers theta_k / theta_1
    of a PBM within sampling error."""
    from ltrjax.offline.logging import randomization_propensities

    logged = _logged(n_queries=20, seed=2, short_last=False)
    theta = examination("inverse", K)
    est = randomization_propensities(jax.random.PRNGKey(0), pbm(theta), logged, 200_000)
    np.testing.assert_allclose(est, theta / theta[0], atol=0.03)
    assert est[0] == 1.0


def test_result_randomization_is_unbiased_when_list_length_and_relevance_go_together():
    """Half the lists have 4 documents, all relevant (R = .9), half 10 documents, mostly not (R = .1): position 1's
    click rate over all sessions is about 5x that of the long lists, so normalising by it put theta_k beyond 4 at
    about a fifth of the truth. Over the sessions that reach k the ratio is theta_k / theta_1 again."""
    from ltrjax.offline.logging import randomization_propensities

    n = 40
    mask = np.ones((n, K), bool)
    mask[: n // 2, 4:] = False
    rel = np.where(mask, np.where(np.arange(n)[:, None] < n // 2, 0.9, 0.1), 0.0)
    logged = LoggedLists(features=jnp.zeros((n, K, 2)), labels=jnp.asarray(mask.astype(np.int32)),
                         relevance=jnp.asarray(rel, jnp.float32), mask=jnp.asarray(mask),
                         doc_index=jnp.zeros((n, K), jnp.int32), query_index=jnp.arange(n))
    theta = examination("inverse", K)
    est = randomization_propensities(jax.random.PRNGKey(1), pbm(theta), logged, 200_000)
    np.testing.assert_allclose(est, theta / theta[0], rtol=0.15)
    assert est[0] == 1.0
