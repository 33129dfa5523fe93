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
