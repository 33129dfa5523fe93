"""Affine correction for trust bias (Vardasbi et al. CIKM'20; baselines.md §5.7): learned and oracle.

``affine`` (``make``, the default) learns its bias model from clicks, as the released Vectorization code's
``affine`` mode does (audit §2.1): relevance r = (r0(x), 1) and a learned observation vector o_k = (a_k, b_k)
per position, click logit z_i = <r, o_{k_i}> = a_k r0(x_i) + b_k in Vectorization's listwise softmax loss
(Vectorization Eq. 9), ranking by r0. o_k starts at (1, 0) (the logit r0, the naive softmax loss; the released
code starts at (1, 1), the same softmax) and is frozen for the first ``freeze`` steps; validation may end
training only after ``freeze + joint_steps`` steps and selects from the end of the freeze, Vectorization's schedule.

What the clicks identify: where the logit can represent log P(c | x, k), the softmax optimum is
exp(z_i) = C P(c_i = 1) for one constant C (every list's gradient vanishes). With P(c) = alpha_k R + beta_k and
binary R, r0 taking one value per grade, a_k r0 + b_k = log(alpha_k R + beta_k) + log C: (alpha_k, beta_k) are
recovered up to one common positive factor, i.e. alpha_k / alpha_1 and beta_k / alpha_1
(``recovered_affine``; tests/test_offline_estimators.py). With graded R the exponential link cannot represent
an affine click rate exactly, and the fit is the closest log-linear one.

``affine_oracle`` (``make_oracle``) is told the true (alpha_k, beta_k) (``Propensities``): every displayed
document gets the corrected label y_hat = (c - beta_k) / alpha_k, unbiased for R (E[y_hat] = R). Summed over a
query's sessions: Y_k = (C_k - n beta_k) / alpha_k. The labels go into the softmax loss, which is linear in
them: -sum_k Y_k log softmax(s)_k. Because a negative aggregated label makes that loss unbounded below,
``clip_negative`` (default true) clips the per-(query, position) aggregate Y_k at 0. An upper reference: the
papers' baselines learn their bias models.
"""

import jax
import jax.numpy as jnp

from ltrjax.offline.estimators.base import (Estimator, init_scalar_ranker, n_sessions, next_step,
                                            ranker_scores, scalar_scores, weighted_softmax_ce)


def affine_labels(clicks, n, alpha, beta):
    """sum over sessions of (c - beta_k) / alpha_k for ``clicks`` summed over ``n`` sessions."""
    return (clicks - n[..., None] * beta) / jnp.maximum(alpha, 1e-12)


def recovered_affine(observation, r0_relevant, r0_irrelevant):
    """(alpha_k, beta_k) / alpha_1 implied by learned o_k = (a_k, b_k) and the ranker's r0 of a relevant and an
    irrelevant document: beta_k ~ exp(a_k r0_irr + b_k), alpha_k ~ exp(a_k r0_rel + b_k) - beta_k."""
    a, b = observation[:, 0], observation[:, 1]
    beta = jnp.exp(a * r0_irrelevant + b)
    alpha = jnp.exp(a * r0_relevant + b) - beta
    return alpha / alpha[0], beta / alpha[0]


def make(scorer, *, freeze: int = 500, joint_steps: int = 4000) -> Estimator:
    """Affine with (alpha_k, beta_k) learned from clicks (module docstring); ``freeze``, ``joint_steps`` as for
    Vectorization."""
    freeze, joint = int(freeze), int(joint_steps)
    base_init = init_scalar_ranker(scorer)

    def init(key, n_features, props):
        k = props.theta.shape[0]
        params, state = base_init(key, n_features, props)
        obs = jnp.stack([jnp.ones((k,), jnp.float32), jnp.zeros((k,), jnp.float32)], axis=-1)
        return {**params, "observation": obs}, state

    def loss(params, state, batch, key):
        r0 = ranker_scores(scorer, params, batch.features)  # [B, K]
        o = jnp.where(state["step"] < freeze, jax.lax.stop_gradient(params["observation"]), params["observation"])
        z = r0 * o[:, 0] + o[:, 1]
        return weighted_softmax_ce(z, batch.clicks, batch.mask) / n_sessions(batch), next_step(state)

    return Estimator("affine", init, loss, scalar_scores(scorer.apply), min_steps=freeze + joint,
                     select_from=freeze)


def make_oracle(scorer, *, clip_negative: bool = True) -> Estimator:
    """Affine told the true (alpha_k, beta_k); ``clip_negative``: clip the per-(query, position) aggregate label at 0."""

    def loss(params, state, batch, key):
        s = ranker_scores(scorer, params, batch.features)
        props = state["props"]
        y = affine_labels(batch.clicks, batch.n_sessions, props.alpha, props.beta)
        y = jnp.maximum(y, 0.0) if clip_negative else y
        return weighted_softmax_ce(s, y, batch.mask) / n_sessions(batch), next_step(state)

    return Estimator("affine_oracle", init_scalar_ranker(scorer), loss, scalar_scores(scorer.apply))
