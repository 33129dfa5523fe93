"""Pairwise Debiasing / Unbiased LambdaMART (Hu et al. WWW'19), ULTRA's version (baselines.md §5.6).

State t+_k, t-_k (init 1). Loss sum_{c_i > c_j} l_ij / (t+_{k_i} t-_{k_j}). Bias update (stop-grad):
  A+_k = sum_{pairs, k_i = k} l_ij / t-_{k_j},  t+ <- (1 - a) t+ + a (A+ / A+_1)^(1/(p+1))
  A-_k = sum_{pairs, k_j = k} l_ij / t+_{k_i},  t- <- (1 - a) t- + a (A- / A-_1)^(1/(p+1))
with a = ``step`` (0.05) and p = ``p`` (1). A position whose A is 0 in a batch (or a batch
whose A_1 is 0) keeps its old value.

``make_lambda`` (``pair_debias_lambda``): Unbiased LambdaMART itself (Hu et al. WWW'19; PRS Table 1's baseline, "IPS
weights on both clicked and unclicked documents", t+ and t- learned jointly with the ranker): every pair's loss
also weighted by |Delta NDCG_ij| under the current scores (``ClickStats.pairs_lambda`` with ``delta_dcg``, as
``ips_lambda`` and ``prs_lambda`` weight theirs), in the loss and in the bias update alike. On trees
(``ranker: lambdamart``) the bias update runs once per boosting round, from all the lists (``ltrjax.offline.gbdt``).
"""

import jax
import jax.numpy as jnp

from ltrjax.offline.estimators.base import (Estimator, delta_dcg, init_scalar_ranker, n_sessions, pair_logistic,
                                            pair_mask, ranker_scores, scalar_scores)


def update_bias(t, a_sum, step, p):
    ok = (a_sum > 0) & (a_sum[0] > 0)
    ratio = jnp.where(ok, a_sum / jnp.where(a_sum[0] > 0, a_sum[0], 1.0), 1.0)
    return jnp.where(ok, (1 - step) * t + step * ratio ** (1.0 / (p + 1.0)), t)


def debiased_pairs(name: str, scorer, step: float, p: float, pair_counts, trees: bool) -> Estimator:
    """sum_ij P_ij l_ij / (t+_{k_i} t-_{k_j}) / N with P = ``pair_counts(batch, scores)`` (constant in the scores) and
    t+, t- updated from the P-weighted pair losses (module docstring); ``trees``: expose the pair weights, so trees
    take the hessian in closed form."""
    base_init = init_scalar_ranker(scorer)

    def init(key, n_features, props):
        k = props.theta.shape[0]
        params, state = base_init(key, n_features, props)
        return params, {**state, "t_plus": jnp.ones((k,)), "t_minus": jnp.ones((k,))}

    def loss(params, state, batch, key):
        s = ranker_scores(scorer, params, batch.features)
        tp, tm = state["t_plus"], state["t_minus"]
        pl = jnp.where(pair_mask(batch.mask), pair_counts(batch, s) * pair_logistic(s), 0.0)
        total = jnp.sum(pl / (tp[:, None] * tm[None, :])) / n_sessions(batch)
        pl = jax.lax.stop_gradient(pl)
        a_plus = jnp.sum(pl / tm[None, None, :], axis=(0, 2))
        a_minus = jnp.sum(pl / tp[None, :, None], axis=(0, 1))
        new_state = {**state, "step": state["step"] + 1, "t_plus": update_bias(tp, a_plus, step, p),
                     "t_minus": update_bias(tm, a_minus, step, p)}
        return total, new_state

    def pair_weights(state, batch, s):
        return pair_counts(batch, s) / (state["t_plus"][:, None] * state["t_minus"][None, :])

    return Estimator(name, init, loss, scalar_scores(scorer.apply), pair_weights=pair_weights if trees else None)


def make(scorer, *, step: float = 0.05, p: float = 1.0) -> Estimator:
    """``step``: a of the bias update; ``p``: the exponent p of the bias update."""
    return debiased_pairs("pair_debias", scorer, step, p, lambda batch, s: batch.pairs, trees=False)


def make_lambda(scorer, *, step: float = 1.0, p: float = 1.0) -> Estimator:
    """Unbiased LambdaMART (module docstring): sum |Delta NDCG_ij| l_ij / (t+_{k_i} t-_{k_j}), t+ and t- updated
    as ``make``'s from the |Delta NDCG|-weighted pair losses. ``step`` 1: the whole closed-form update at every
    boosting round, from all the lists (Hu et al.'s LightGBM implementation re-estimates the biases each iteration,
    with exponent 1/(p+1) = .5); on minibatches (a linear or MLP ranker) ULTRA damps it to .05."""
    return debiased_pairs("pair_debias_lambda", scorer, step, p,
                          lambda batch, s: batch.pairs_lambda * delta_dcg(s, batch.mask), trees=True)
