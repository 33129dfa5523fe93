"""PNS, propensity-weighted negative samples (PRS §4.1, §5.4).

Only the unclicked side is weighted: sum_{i clicked, j unclicked} theta_{k_j} l_ij, i.e. PRS with
the clicked document's propensity set to 1 (clipped at gamma like PRS Eq. 11; a no-op for gamma >= 1).
"""

import jax.numpy as jnp

from ltrjax.offline.estimators.base import (Estimator, init_scalar_ranker, n_sessions, next_step,
                                            pairwise_loss, ranker_scores, scalar_scores)


def make(scorer, *, gamma: float | None = 1.0) -> Estimator:
    """``gamma``: the clip of PRS Eq. 11 (None = off)."""

    def loss(params, state, batch, key):
        theta = state["props"].theta
        w = theta[None, :] * jnp.ones_like(theta)[:, None]
        w = w if gamma is None else jnp.minimum(w, gamma)
        s = ranker_scores(scorer, params, batch.features)
        return pairwise_loss(s, batch.pairs * w, batch.mask) / n_sessions(batch), next_step(state)

    return Estimator("pns", init_scalar_ranker(scorer), loss, scalar_scores(scorer.apply))
