"""PRS, propensity ratio scoring (PRS Eq. 9-11; baselines.md §5.3).

Pairs (i clicked, j unclicked) of a session weighted by min(gamma, theta_{k_j} / theta_{k_i})
(Eq. 11; option ``gamma``, default 1, ``None`` = unclipped Eq. 9) on the pairwise logistic
loss l_ij = log(1 + exp(-(s_i - s_j))). The lambda variant (``prs_lambda``, PRS §5.1) also
multiplies each pair by |Delta NDCG_ij| of swapping i and j in the ranking by the current scores
(gain 2^c - 1, IDCG over the session's clicks).
"""

import jax.numpy as jnp

from ltrjax.offline.estimators.base import Estimator, delta_dcg, pairwise_estimator


def prs_weights(theta, gamma=1.0):
    """omega_ij = min(gamma, theta_j / theta_i), ``[K, K]`` (PRS Eq. 11)."""
    w = theta[None, :] / jnp.maximum(theta[:, None], 1e-12)
    return w if gamma is None else jnp.minimum(w, gamma)


def _make(scorer, gamma, lambda_variant: bool) -> Estimator:

    def pair_weights(state, batch, s):
        w = prs_weights(state["props"].theta, gamma)
        if lambda_variant:
            return batch.pairs_lambda * w * delta_dcg(s, batch.mask)
        return batch.pairs * w

    return pairwise_estimator("prs_lambda" if lambda_variant else "prs", scorer, pair_weights)


def make(scorer, *, gamma: float | None = 1.0) -> Estimator:
    """PRS on the pairwise logistic loss; ``gamma``: Eq. 11's clip (None = Eq. 9 unclipped)."""
    return _make(scorer, gamma, lambda_variant=False)


def make_lambda(scorer, *, gamma: float | None = 1.0) -> Estimator:
    """PRS-LambdaMART's lambda weighting (PRS §5.1); ``gamma`` as for ``make``."""
    return _make(scorer, gamma, lambda_variant=True)
