"""Monte Carlo checks of what must hold in expectation: IPS and Affine corrections are unbiased."""

import jax
import jax.numpy as jnp
import numpy as np

from ltrjax.clicks import examination, pbm, sample_clicks, trust_bias, vardasbi_trust_epsilons
from ltrjax.offline.estimators.affine import affine_labels
from ltrjax.offline.estimators.ips import ips_weights

K = 10
N = 400_000


def _clicks(model, rel, key):
    u = jax.random.uniform(key, (N, 2, K))
    return np.asarray(jax.jit(sample_clicks)(model, u, jnp.broadcast_to(rel, (N, K)),
                                             jnp.zeros((N, K), jnp.int32)), np.float64)


def test_ips_weighted_click_dcg_is_unbiased():
    """E[sum_k c_k / theta_k * lambda_k] = sum_k R_k lambda_k for a fixed displayed ranking (PBM)."""
    theta = examination("inverse", K, 1.0)
    rel = jnp.asarray([1, 0, 1, 1, 0, 0, 1, 0, 0, 1], jnp.float32)
    clicks = _clicks(pbm(theta), rel, jax.random.PRNGKey(0))
    discount = 1 / np.log2(np.arange(2, K + 2))
    w = np.asarray(ips_weights(jnp.asarray(theta, jnp.float32)))
    per_session = clicks @ (w * discount)
    true_dcg = float(np.sum(np.asarray(rel) * discount))
    se = per_session.std() / np.sqrt(N)
    assert abs(per_session.mean() - true_dcg) < 4 * se
    # and the naive click DCG is clearly biased downwards
    assert (clicks @ discount).mean() < true_dcg - 20 * se


def test_clipped_ips_is_biased_only_where_clipped():
    theta = examination("inverse", K, 1.0)
    w = np.asarray(ips_weights(jnp.asarray(theta, jnp.float32), clip=4.0))
    np.testing.assert_allclose(w[:4], 1 / theta[:4], rtol=1e-6)
    assert np.all(w[4:] == 4.0)


def test_affine_labels_are_unbiased_under_trust_bias():
    """Mean over sessions of (c - beta_k)/alpha_k at every position -> R (Vardasbi et al., baselines.md §5.7)."""
    theta = examination("inverse", K, 1.0)
    model = trust_bias(theta, *vardasbi_trust_epsilons(K))
    rel = jnp.asarray([1, 0, 1, 0, 1, 0, 0, 1, 1, 0], jnp.float32)
    clicks = _clicks(model, rel, jax.random.PRNGKey(1))
    y = np.asarray(affine_labels(jnp.asarray(clicks.sum(0)), jnp.asarray(float(N)), model.alpha, model.beta)) / N
    per = (clicks - np.asarray(model.beta)) / np.asarray(model.alpha)
    se = per.std(0) / np.sqrt(N)
    assert np.all(np.abs(y - np.asarray(rel)) < 4 * se), (y, se)
    # IPS on clicks alone (alpha = theta, beta = 0) is biased under trust bias at position 1
    ips = clicks[:, 0].mean() / theta[0]
    assert abs(ips - float(rel[0])) > 10 * se[0]


def test_affine_under_binary_noise_pbm_is_unbiased():
    """PBM with symmetric noise mu: alpha = theta (1 - 2 mu), beta = theta mu (as run_offline sets them)."""
    mu = 0.1
    theta = examination("inverse", K, 1.0)
    rel = jnp.asarray([0, 1, 1, 0, 0, 1, 0, 1, 0, 1], jnp.float32)
    clicks = _clicks(pbm(theta), rel * (1 - 2 * mu) + mu, jax.random.PRNGKey(2))
    alpha, beta = theta * (1 - 2 * mu), theta * mu
    y = np.asarray(affine_labels(jnp.asarray(clicks.sum(0)), jnp.asarray(float(N)), alpha, beta)) / N
    se = ((clicks - beta) / alpha).std(0) / np.sqrt(N)
    assert np.all(np.abs(y - np.asarray(rel)) < 4 * se)


def test_prs_is_ips_times_the_lower_examination_in_expectation():
    """PBM, every click vector of a 4-position list enumerated exactly (issue 20 "Why" 2, audit §1.3).

    Clicks are independent across positions, so E[c_i (1 - c_j)] = theta_i rho_i (1 - theta_j rho_j), and the
    expected PRS weight of a pair (min(1, theta_j/theta_i), gamma = 1) is the expected IPS weight (1/theta_i) times
    min(theta_i, theta_j): in expectation PRS is IPS with each pair down-weighted by the lower document's
    examination. Checked through the project's own pair statistics (``reduce_sessions``), weights and losses.
    """
    import itertools

    from ltrjax.clicks import click_prob
    from ltrjax.offline.estimators import ClickBatch, Propensities, make_estimator
    from ltrjax.offline.estimators.prs import prs_weights
    from ltrjax.offline.logging import reduce_sessions

    k = 4
    with jax.enable_x64(True):
        theta = jnp.asarray(examination("inverse", k, 1.3), jnp.float64)
        rho = jnp.asarray([0.9, 0.2, 0.7, 0.4], jnp.float64)
        p = np.asarray(click_prob(pbm(theta), rho, jnp.zeros(k, jnp.int32)), np.float64)
        vectors = np.array(list(itertools.product([0, 1], repeat=k)), np.float64)  # [16, K]
        prob = np.prod(np.where(vectors == 1, p, 1 - p), axis=1)
        assert abs(prob.sum() - 1) < 1e-15
        stats = reduce_sessions(jnp.asarray(vectors), jnp.arange(len(vectors)), len(vectors))
        pairs = np.asarray(stats.pairs, np.float64)  # [16, K, K]: c_i (1 - c_j) of each click vector
        expected_pairs = np.einsum("v,vij->ij", prob, pairs)
        want = p[:, None] * (1 - p[None, :]) * (1 - np.eye(k))
        np.testing.assert_allclose(expected_pairs, want, rtol=0, atol=1e-15)

        w_prs = np.asarray(prs_weights(theta, 1.0))
        w_ips = np.asarray(ips_weights(theta))[:, None] * np.ones((k, k))
        lower = np.minimum(np.asarray(theta)[:, None], np.asarray(theta)[None, :])
        np.testing.assert_allclose(w_prs * expected_pairs, w_ips * expected_pairs * lower, rtol=1e-13, atol=0)

        # the same through the estimators' losses, expectation over the enumerated click vectors
        props = Propensities(theta=theta, alpha=theta, beta=jnp.zeros(k, jnp.float64))
        feats = jnp.asarray(np.random.default_rng(0).normal(size=(1, k, 3)), jnp.float64)
        scores = np.asarray(feats[0] @ jnp.asarray([0.3, -0.5, 0.8]))
        logistic = np.log1p(np.exp(-(scores[:, None] - scores[None, :])))

        def expected_loss(name):
            est = make_estimator(name)
            params = {"ranker": {"params": {"Dense_0": {"kernel": jnp.asarray([[0.3], [-0.5], [0.8]]),
                                                         "bias": jnp.zeros(1, jnp.float64)}}}}
            state = {"step": jnp.int32(0), "props": props}
            loss = jax.jit(est.loss)  # one program for the 16 click vectors, not one per eager operation
            total = 0.0
            for v, pv in enumerate(prob):
                batch = ClickBatch(features=feats, mask=jnp.ones((1, k), bool), n_sessions=jnp.ones(1),
                                   clicks=jnp.asarray(vectors[v][None]), pairs=stats.pairs[v][None],
                                   pairs_lambda=stats.pairs_lambda[v][None])
                total += pv * float(loss(params, state, batch, None)[0])
            return total

        np.testing.assert_allclose(expected_loss("prs"), np.sum(w_ips * lower * want * logistic), rtol=1e-12)
        np.testing.assert_allclose(expected_loss("ips"), np.sum(w_ips * want * logistic), rtol=1e-12)
        assert expected_loss("prs") < expected_loss("ips")  # not the same number: the identity is informative
