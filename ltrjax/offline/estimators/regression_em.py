"""Regression-EM (Wang et al. WSDM'18), ULTRA's online version (baselines.md §5.4).

State theta_k (init 0.9); relevance gamma = sigmoid(s) (sigmoid(s + b) with ``profile_intercept``). E-step
(stop-gradient), per displayed slot:
  P(e=1, r=0 | c=0) = theta (1 - gamma) / (1 - theta gamma)
  P(e=0, r=1 | c=0) = (1 - theta) gamma / (1 - theta gamma)
Ranker step: sigmoid cross-entropy against P(r=1 | c) = c + (1 - c) P(e=0, r=1 | c=0). ULTRA
samples r ~ Bernoulli(P(r=1|c)); the cross-entropy is linear in the label, so using the
probability itself gives the same expected gradient. M-step (online EM, option ``step``):
  theta_k <- (1 - a) theta_k + a mean_sessions[c + (1 - c) P(e=1, r=0 | c=0)] at position k.

**Minimum training steps** (option ``min_steps``, default 10,000: ULTRA's ``max_train_iteration``; validation
selects from the first epoch). Under early stopping the fit runs at least these steps; a fixed step budget
(``train.max_steps``, the tables' protocol) ignores them. Two phases need them:
- *The level.* The ranker starts at s = 0 (gamma = 1/2) against targets near the click rate (~.1), so its first
  steps lower every score; with non-negative features every weight moves the same way, the scores fall fastest on
  the documents with the largest features, the relevant ones, and the ranking is inverted until the level is fitted
  (NDCG@10 .04 on a 45-feature, 150-documents-per-query, 63-logged-query synthetic set, where naive gets .70). With
  few queries there is one minibatch per epoch, and a patience of 10-30 epochs ended training inside that phase
  with an inverted checkpoint: RegressionEM's collapse on LETOR-3.0-shaped data (issue 20, "Why" 8).
- *EM itself.* theta moves by ``step`` toward what the current gamma explains, so it converges only as fast as the
  ranker. After 1,000 steps on a few-query, long-list shape (``long_lists_5grades_few_queries`` of the conformance
  tests, PBM with theta_k = 1/k) theta was still .95, .84, .62, ... at positions 2-4 and NDCG@10 .265 against
  naive's .43; after 10,000 steps NDCG@10 .36, and theta near 1/k where validation keeps a late checkpoint (two of
  the three seeds). On exact expected counts theta is 29 % off after 1,000 steps and within 5 % after 10,000
  (``tests/test_offline_estimators.py::test_regression_em_theta_converges_within_its_minimum_steps``).

Option ``profile_intercept`` (default false) instead solves the sigmoid's intercept b in closed form every step
(sum w (sigmoid(s + b) - r) = 0, bisection) so that no step is spent on the level: the ranking is never
inverted, but the E-step then sees a calibrated gamma near the click rate, and EM settles at the naive fixed
point (theta_k ~ .8-.99 at every position on MQ2008 instead of ~1/k; NDCG@10 .696 against .753 with the plain
sigmoid). Kept as a diagnostic.
"""

import jax
import jax.numpy as jnp
import optax

from ltrjax.offline.estimators.base import Estimator, n_sessions, ranker_scores, scalar_scores

_BISECTION_STEPS = 48
_INTERCEPT_RANGE = 30.0


def e_step(theta, gamma):
    """(P(e=1, r=0 | c=0), P(e=0, r=1 | c=0))."""
    denom = jnp.maximum(1.0 - theta * gamma, 1e-6)
    return theta * (1.0 - gamma) / denom, (1.0 - theta) * gamma / denom


def profiled_intercept(scores, targets, weights):
    """b with sum w (sigmoid(s + b) - r) = 0, by bisection on [-30, 30] (the sum is increasing in b); 0 when
    every weight is 0."""
    scores, targets, weights = (jax.lax.stop_gradient(a) for a in (scores, targets, weights))

    def residual(b):
        return jnp.sum(weights * (jax.nn.sigmoid(scores + b) - targets))

    def bisect(_, lo_hi):
        lo, hi = lo_hi
        mid = 0.5 * (lo + hi)
        up = residual(mid) < 0
        return jnp.where(up, mid, lo), jnp.where(up, hi, mid)

    lo, hi = jax.lax.fori_loop(0, _BISECTION_STEPS, bisect, (-_INTERCEPT_RANGE, _INTERCEPT_RANGE))
    return jnp.where(jnp.sum(weights) > 0, 0.5 * (lo + hi), 0.0)


def make(scorer, *, step: float = 0.05, min_steps: int = 10_000, profile_intercept: bool = False) -> Estimator:
    """``step``: the online EM step a of the M-step; ``min_steps``: training steps before early stopping may end
    training; ``profile_intercept``: fit the sigmoid's intercept in closed form every step (module docstring)."""
    step_size = step

    def init(key, n_features, props):
        k = props.theta.shape[0]
        params = {"ranker": scorer.init(key, jnp.zeros((1, n_features), jnp.float32))}
        return params, {"step": jnp.int32(0), "theta": jnp.full((k,), 0.9, jnp.float32),
                        "intercept": jnp.float32(0.0), "props": props}

    def loss(params, state, batch, key):
        s = ranker_scores(scorer, params, batch.features)
        gamma = jax.lax.stop_gradient(jax.nn.sigmoid(s + state["intercept"]))
        p_e1r0, p_e0r1 = e_step(state["theta"], gamma)
        n = batch.n_sessions[:, None]
        c = batch.clicks
        weight = jnp.where(batch.mask, n, 0.0)
        r = jnp.where(weight > 0, (c + (n - c) * p_e0r1) / jnp.maximum(n, 1.0), 0.0)
        b = profiled_intercept(s, r, weight) if profile_intercept else jnp.float32(0.0)
        ranker_loss = jnp.sum(weight * optax.sigmoid_binary_cross_entropy(s + b, r)) / n_sessions(batch)
        exam = jnp.where(batch.mask, c + (n - c) * p_e1r0, 0.0)
        seen = jnp.sum(weight, axis=0)
        target = jnp.sum(exam, axis=0) / jnp.maximum(seen, 1e-9)
        theta = jnp.where(seen > 0, (1 - step_size) * state["theta"] + step_size * target, state["theta"])
        return ranker_loss, {**state, "step": state["step"] + 1, "theta": theta, "intercept": b}

    return Estimator("regression_em", init, loss, scalar_scores(scorer.apply), min_steps=int(min_steps),
                     select_from=0)
