"""Affine correction for trust bias (Vardasbi et al. CIKM'20; baselines.md §5.7).

Every displayed document gets the corrected label y_hat = (c - beta_k) / alpha_k, unbiased for R
(E[y_hat] = R). Summed over a query's sessions: Y_k = (C_k - n beta_k) / alpha_k. The labels go
into the softmax loss, which is linear in them: -sum_k Y_k log softmax(s)_k. Because a negative
aggregated label makes that loss unbounded below, ``clip_negative`` (default true) clips
the per-(query, position) aggregate Y_k at 0.
"""

import jax.numpy as jnp

from ltrjax.offline.estimators.base import (Estimator, init_scalar_ranker, n_sessions, next_step,
                                            ranker_scores, scalar_scores, weighted_softmax_ce)


def affine_labels(clicks, n, alpha, beta):
    """sum over sessions of (c - beta_k) / alpha_k for ``clicks`` summed over ``n`` sessions."""
    return (clicks - n[..., None] * beta) / jnp.maximum(alpha, 1e-12)


def make(scorer, *, clip_negative: bool = True) -> Estimator:
    """``clip_negative``: clip the per-(query, position) aggregate label at 0."""

    def loss(params, state, batch, key):
        s = ranker_scores(scorer, params, batch.features)
        props = state["props"]
        y = affine_labels(batch.clicks, batch.n_sessions, props.alpha, props.beta)
        y = jnp.maximum(y, 0.0) if clip_negative else y
        return weighted_softmax_ce(s, y, batch.mask) / n_sessions(batch), next_step(state)

    return Estimator("affine", init_scalar_ranker(scorer), loss, scalar_scores(scorer.apply))
