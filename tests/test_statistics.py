"""Statistical checks of the simulator: click-through rates and the behaviour estimators it feeds.

A Random-k logging policy on a few small queries puts every document at every position many
times, so per-(position, label) click rates and per-document estimates of R can be compared with
the click model within binomial standard errors (4 sigma). Tolerances are derived from the exact
per-impression Bernoulli variances of the positions each document was actually shown at.
"""

import jax
import numpy as np
import pytest

from ltrjax import clicks
from ltrjax.data.layout import pad_and_bucket
from ltrjax.data.queryset import QuerySet
from ltrjax.online.policies.ebrank import beta_statistics
from ltrjax.online.policies.random_k import RandomK
from ltrjax.online.simulator import SimConfig, Simulator
from ltrjax.online.state import counters_in_dataset_order

N_SESSIONS = 20_000
N_QUERIES, N_DOCS, Y_MAX, K = 6, 8, 2, 5
EARLY = N_SESSIONS // 10  # the early snapshot: the first 10% of sessions


def balanced_queryset(seed=0) -> QuerySet:
    """N_QUERIES queries of N_DOCS documents, each a shuffle of labels 0,0,0,1,1,1,2,2."""
    rng = np.random.default_rng(seed)
    labels = np.concatenate([rng.permutation([0, 0, 0, 1, 1, 1, 2, 2]) for _ in range(N_QUERIES)]).astype(np.int32)
    features = rng.uniform(size=(labels.size, 3)).astype(np.float32)
    offsets = np.arange(0, labels.size + 1, N_DOCS, dtype=np.int64)
    return QuerySet(name="balanced", features=features, labels=labels, query_offsets=offsets,
                    qids=np.arange(N_QUERIES, dtype=np.int64), split=np.array([0, 0, 1, 1, 2, 2], np.int8),
                    y_max=Y_MAX, bm25_column=0, feature_ids=np.arange(1, 4, dtype=np.int32))


class Run:
    """One Random-k trial (no warm-up, so the logs hold every session) and per-impression tables."""

    def __init__(self, click_cfg, relevance):
        self.data = pad_and_bucket(balanced_queryset(), n_buckets=1)
        self.model = clicks.make_click_model(click_cfg, K)
        config = SimConfig(sessions=N_SESSIONS, warmup_sessions_per_query=0, n_updates=1, relevance=relevance,
                           min_lanes=N_QUERIES)
        sim = Simulator(self.data, self.model, config)
        self.result = sim.run(RandomK(self.data), jax.random.PRNGKey(2024), progress=False, keep_logs=True)
        bucket = self.data.buckets[0]
        self.labels = np.asarray(bucket.labels)
        self.R = np.asarray(clicks.relevance(self.labels, Y_MAX, relevance))  # [Q, D]
        query = np.concatenate([log.query for log in self.result.logs])
        self.session = np.concatenate([log.session for log in self.result.logs])
        self.shown = np.concatenate([log.shown for log in self.result.logs])  # [n, K]
        self.clicks = np.concatenate([log.clicks for log in self.result.logs])
        assert np.all(self.data.bucket_of_query[query] == 0)
        self.row = np.broadcast_to(self.data.row_of_query[query][:, None], self.shown.shape)
        self.position = np.broadcast_to(np.arange(K)[None, :], self.shown.shape)

    def impressions(self, upto=None):
        """Flat (row, slot, position, click) of shown slots of the first ``upto`` sessions."""
        sl = slice(None, upto)
        on = self.shown[sl] >= 0
        return (self.row[sl][on], self.shown[sl][on], self.position[sl][on], self.clicks[sl][on])

    def per_document(self, values_per_position, upto=None):
        """Sum over the impressions of every document of a per-position value (or clicks with 'click')."""
        row, slot, pos, clicked = self.impressions(upto)
        out = np.zeros(self.labels.shape, np.float64)
        vals = clicked.astype(np.float64) if isinstance(values_per_position, str) else values_per_position[pos]
        np.add.at(out, (row, slot), vals)
        return out


@pytest.fixture(scope="module")
def pbm_run():
    return Run({"kind": "pbm", "examination": "log2"}, "ebrank")


@pytest.fixture(scope="module")
def affine_run():
    return Run({"kind": "ucbrank_affine"}, "linear")


def _check_ctr(run, expected):
    """CTR per (position, label) from the logs against ``expected[k, y]``, within 4 binomial sigma."""
    row, slot, pos, clicked = run.impressions()
    y = run.labels[row, slot]
    n = np.zeros((K, Y_MAX + 1))
    c = np.zeros((K, Y_MAX + 1))
    np.add.at(n, (pos, y), 1)
    np.add.at(c, (pos, y), clicked)
    assert n.min() > 3000  # every cell is well populated
    ctr = c / n
    sigma = np.sqrt(expected * (1 - expected) / n)
    assert np.all(np.abs(ctr - expected) <= 4 * sigma + 1e-12), (ctr, expected)
    return ctr


def test_pbm_click_rates_match_model(pbm_run):
    theta = clicks.examination_log2(K)
    R = 0.1 + 0.9 * (2.0 ** np.arange(Y_MAX + 1) - 1) / (2.0**Y_MAX - 1)  # [0.1, 0.4, 1.0]
    np.testing.assert_allclose(R, [0.1, 0.4, 1.0])
    expected = theta[:, None] * R[None, :]
    ctr = _check_ctr(pbm_run, expected)
    assert ctr[0, 2] > 0.95 and ctr[4, 0] < 0.06  # position 1 / label 2 always clicked


def test_ucbrank_affine_click_rates_match_model(affine_run):
    model = clicks.ucbrank_affine(K)
    R = np.arange(Y_MAX + 1) / Y_MAX
    expected = np.asarray(model.alpha)[:, None] * R[None, :] + np.asarray(model.beta)[:, None]
    _check_ctr(affine_run, expected)


def test_random_k_shows_documents_uniformly(pbm_run):
    """Random-k: every entered document is equally likely at every position."""
    row, slot, pos, _ = pbm_run.impressions()
    counts = np.zeros((N_QUERIES * N_DOCS, K))
    np.add.at(counts, (row * N_DOCS + slot, pos), 1)
    issued = np.bincount(pbm_run.row[:, 0], minlength=N_QUERIES)
    expected = np.repeat(issued / N_DOCS, N_DOCS)[:, None]  # all documents entered after <= 3 sessions
    p = 1.0 / N_DOCS
    assert np.all(np.abs(counts - expected) <= 4 * np.sqrt(expected * (1 - p)) + 4)


@pytest.mark.parametrize("fixture", ["pbm_run", "affine_run"])
def test_counters_equal_a_recount_of_the_logs(request, fixture):
    run = request.getfixturevalue(fixture)
    counters = counters_in_dataset_order(run.result.final_states[0])
    theta = np.asarray(run.model.examination, np.float64)
    alpha, beta = (np.asarray(x, np.float64) for x in clicks.affine_terms(run.model))
    np.testing.assert_array_equal(np.asarray(counters.clicks), run.per_document("click"))
    np.testing.assert_array_equal(np.asarray(counters.impressions), run.per_document(np.ones(K)))
    np.testing.assert_allclose(counters.exposure, run.per_document(theta), rtol=1e-4)
    np.testing.assert_allclose(counters.alpha_sum, run.per_document(alpha), rtol=1e-4)
    np.testing.assert_allclose(counters.beta_sum, run.per_document(beta), rtol=1e-4, atol=1e-6)
    row, slot, pos, clicked = run.impressions()
    ips = np.zeros(run.labels.shape)
    np.add.at(ips, (row, slot), clicked / theta[pos])
    np.testing.assert_allclose(counters.ips_clicks, ips, rtol=1e-4)
    assert float(np.sum(counters.impressions)) == N_SESSIONS * K


def _estimate(run, statistic, upto=None):
    """C/N of an EBRank statistic and its standard error, per document, from the first ``upto`` sessions."""
    theta = np.asarray(run.model.examination, np.float64)
    R = run.R
    n = run.per_document(np.ones(K), upto)
    exposure = run.per_document(theta, upto)
    clicked = run.per_document("click", upto)
    row, slot, pos, c = run.impressions(upto)
    ips = np.zeros(run.labels.shape)
    np.add.at(ips, (row, slot), c / theta[pos])
    C, N, _ = beta_statistics(statistic, clicked, ips, n, exposure)
    if statistic == "exposure":  # Var(sum c) = sum theta R (1 - theta R)
        var = R * exposure - R**2 * run.per_document(theta**2, upto)
    else:  # Var(sum c / theta) = sum (R / theta - R^2)
        var = R * run.per_document(1 / theta, upto) - R**2 * n
    return C / N, np.sqrt(var) / N


def _check_unbiased(estimate, se, R):
    err = (estimate - R).ravel()
    se = se.ravel()
    n_docs = err.size
    # mean signed error within 4 standard errors of 0
    assert abs(err.mean()) <= 4 * np.sqrt(np.sum(se**2)) / n_docs, (err.mean(), se.mean())
    # the spread is the binomial one: E|z| = sqrt(2/pi), sd(|z|) = sqrt(1 - 2/pi)
    z = np.abs(err / se)
    assert abs(z.mean() - np.sqrt(2 / np.pi)) <= 4 * np.sqrt(1 - 2 / np.pi) / np.sqrt(n_docs), z.mean()
    return np.abs(err).mean()


@pytest.mark.parametrize("statistic", ["exposure", "ips"])
def test_behaviour_estimates_converge_to_relevance(pbm_run, statistic):
    final, se_final = _estimate(pbm_run, statistic)
    early, se_early = _estimate(pbm_run, statistic, EARLY)
    assert pbm_run.per_document(np.ones(K)).min() > 1000  # every document has many impressions
    # the simulator's own counters give the same estimate
    counters = counters_in_dataset_order(pbm_run.result.final_states[0])
    C, N, _ = beta_statistics(statistic, *(np.asarray(getattr(counters, f)) for f in
                                           ("clicks", "ips_clicks", "impressions", "exposure")))
    np.testing.assert_allclose(C / N, final, rtol=1e-4, atol=1e-6)

    mae_final = _check_unbiased(final, se_final, pbm_run.R)
    mae_early = _check_unbiased(early, se_early, pbm_run.R)
    assert mae_final < 0.05
    assert mae_final < 0.6 * mae_early  # ~ sqrt(1/10) expected


def test_affine_correction_is_unbiased(affine_run):
    run = affine_run
    alpha, beta = (np.asarray(x, np.float64) for x in clicks.affine_terms(run.model))
    counters = counters_in_dataset_order(run.result.final_states[0])
    delta = (np.asarray(counters.clicks, np.float64) - np.asarray(counters.beta_sum)) / np.asarray(counters.alpha_sum)
    R = run.R
    # Var(sum c) = sum p (1 - p), p = alpha R + beta
    s = lambda v: run.per_document(v)  # noqa: E731
    var = R * s(alpha) + s(beta) - (R**2 * s(alpha**2) + 2 * R * s(alpha * beta) + s(beta**2))
    se = np.sqrt(var) / np.asarray(counters.alpha_sum)
    mae = _check_unbiased(delta, se, R)
    assert mae < 0.06
    # the uncorrected click rate is biased upwards for non-relevant documents
    naive = np.asarray(counters.clicks) / np.asarray(counters.impressions)
    assert np.all(naive[run.labels == 0] > 0.15)
