"""PNS, propensity-weighted negative samples (PRS §4.1, §5.4).

Only the unclicked side is weighted: sum_{i clicked, j unclicked} theta_{k_j} l_ij, i.e. PRS with
the clicked document's propensity set to 1 (clipped at gamma like PRS Eq. 11; a no-op for gamma >= 1).
"""

import jax.numpy as jnp

from ltrjax.offline.estimators.base import Estimator, pairwise_estimator


def make(scorer, *, gamma: float | None = 1.0) -> Estimator:
    """``gamma``: the clip of PRS Eq. 11 (None = off)."""

    def pair_weights(state, batch, s):
        theta = state["props"].theta
        w = theta[None, :] * jnp.ones_like(theta)[:, None]
        return batch.pairs * (w if gamma is None else jnp.minimum(w, gamma))

    return pairwise_estimator("pns", scorer, pair_weights)
