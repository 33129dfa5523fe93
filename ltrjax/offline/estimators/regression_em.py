"""Regression-EM (Wang et al. WSDM'18), ULTRA's online version (baselines.md §5.4).

State theta_k (init 0.9); relevance gamma = sigmoid(s). E-step (stop-gradient), per displayed slot:
  P(e=1, r=0 | c=0) = theta (1 - gamma) / (1 - theta gamma)
  P(e=0, r=1 | c=0) = (1 - theta) gamma / (1 - theta gamma)
Ranker step: sigmoid cross-entropy against P(r=1 | c) = c + (1 - c) P(e=0, r=1 | c=0). ULTRA
samples r ~ Bernoulli(P(r=1|c)); the cross-entropy is linear in the label, so using the
probability itself gives the same expected gradient. M-step (online EM, option ``step``):
  theta_k <- (1 - a) theta_k + a mean_sessions[c + (1 - c) P(e=1, r=0 | c=0)] at position k.
"""

import jax
import jax.numpy as jnp
import optax

from ltrjax.offline.estimators.base import Estimator, n_sessions, ranker_scores, scalar_scores


def e_step(theta, gamma):
    """(P(e=1, r=0 | c=0), P(e=0, r=1 | c=0))."""
    denom = jnp.maximum(1.0 - theta * gamma, 1e-6)
    return theta * (1.0 - gamma) / denom, (1.0 - theta) * gamma / denom


def make(scorer, *, step: float = 0.05) -> Estimator:
    """``step``: the online EM step a of the M-step."""
    step_size = step

    def init(key, n_features, props):
        k = props.theta.shape[0]
        params = {"ranker": scorer.init(key, jnp.zeros((1, n_features), jnp.float32))}
        return params, {"step": jnp.int32(0), "theta": jnp.full((k,), 0.9, jnp.float32), "props": props}

    def loss(params, state, batch, key):
        s = ranker_scores(scorer, params, batch.features)
        gamma = jax.lax.stop_gradient(jax.nn.sigmoid(s))
        p_e1r0, p_e0r1 = e_step(state["theta"], gamma)
        n = batch.n_sessions[:, None]
        c = batch.clicks
        weight = jnp.where(batch.mask, n, 0.0)
        r = jnp.where(weight > 0, (c + (n - c) * p_e0r1) / jnp.maximum(n, 1.0), 0.0)
        ranker_loss = jnp.sum(weight * optax.sigmoid_binary_cross_entropy(s, r)) / n_sessions(batch)
        exam = jnp.where(batch.mask, c + (n - c) * p_e1r0, 0.0)
        seen = jnp.sum(weight, axis=0)
        target = jnp.sum(exam, axis=0) / jnp.maximum(seen, 1e-9)
        theta = jnp.where(seen > 0, (1 - step_size) * state["theta"] + step_size * target, state["theta"])
        return ranker_loss, {**state, "step": state["step"] + 1, "theta": theta}

    return Estimator("regression_em", init, loss, scalar_scores(scorer.apply))
