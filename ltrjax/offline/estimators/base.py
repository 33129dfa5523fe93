"""One interface for every offline estimator, and the losses they share.

An estimator is three pure functions over explicit pytrees:

* ``init(key, n_features, props) -> (params, state)``: trainable parameters (``params["ranker"]``
  plus, e.g., DLA's propensity logits) and non-trained state (the ``Propensities`` the estimator is
  told, as ``state["props"]``; EM propensities, PairDebias t±, the step). Keeping propensities in
  the state rather than in closures lets one compiled training epoch serve every setting;
* ``loss(params, state, batch, key) -> (loss, new_state)``: the training objective on a
  minibatch of logged queries (``ClickBatch``) or labeled queries (``LabeledBatch``);
* ``score(params, state, features, mask) -> scores``: ranking scores of candidate lists.

Click losses are sums over sessions divided by the batch's number of sessions; because they are
linear in the sessions' click indicators they are computed from per-query ``ClickStats``
(``ltrjax.offline.logging``), which gives exactly the per-session sum.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

NEG = -1e9


@struct.dataclass
class ClickBatch:
    """Logged queries in displayed order (slot k = position k+1) with their click statistics."""

    features: jax.Array  # f32 [B, K, F]
    mask: jax.Array  # bool [B, K]
    n_sessions: jax.Array  # f32 [B]
    clicks: jax.Array  # f32 [B, K]
    pairs: jax.Array  # f32 [B, K, K]
    pairs_lambda: jax.Array  # f32 [B, K, K]


@struct.dataclass
class LabeledBatch:
    """Labeled candidate lists (skyline and production ranker)."""

    features: jax.Array  # f32 [B, D, F]
    labels: jax.Array  # f32 [B, D]
    mask: jax.Array  # bool [B, D]


@struct.dataclass
class Propensities:
    """What the estimators are told about the click model (possibly misspecified)."""

    theta: jax.Array  # f32 [K] examination propensity theta_k
    alpha: jax.Array  # f32 [K] affine P(c) = alpha_k R + beta_k
    beta: jax.Array  # f32 [K]


@dataclasses.dataclass(frozen=True)
class Estimator:
    name: str
    init: Callable[..., Any]
    loss: Callable[..., Any]
    score: Callable[..., Any]
    kind: str = "clicks"  # "clicks" (ClickBatch) or "labeled" (LabeledBatch)
    min_steps: int = 0  # training steps before early stopping may end training
    # training steps before validation may select a checkpoint (None: ``min_steps``). Vectorization
    # validates from the end of its freeze, as ULTRA checkpoints every method from the start: with
    # selection only from ``min_steps`` on, its result was the iterate at ``min_steps``, never selected
    select_from: int | None = None
    # fit(estimator, data, key, n_features, cfg, validate=, props=) -> FitResult replacing ``train.fit``'s
    # gradient loop (the tree ensembles of ``ltrjax.offline.gbdt``); None: the shared loop
    fitter: Callable[..., Any] | None = None
    # pair_weights(state, batch, scores) -> w [B, K, K] for an estimator whose loss is exactly
    # ``pairwise_loss(s, w, mask) / n_sessions(batch)`` with w constant in s (``pairwise_estimator``): the trees
    # then take the Hessian diagonal in closed form (``pair_hessian_diagonal``) instead of K Hessian-vector products
    pair_weights: Callable[..., Any] | None = None


# --------------------------------------------------------------------------- shared pieces
def n_sessions(batch: ClickBatch):
    return jnp.maximum(jnp.sum(batch.n_sessions), 1.0)


def masked_log_softmax(scores, mask):
    """log softmax over the masked slots (0 where masked; safe for all-masked rows)."""
    z = jnp.where(mask, scores, NEG)
    out = z - jax.nn.logsumexp(z, axis=-1, keepdims=True)
    return jnp.where(mask, out, 0.0)


def weighted_softmax_ce(scores, weights, mask):
    """-sum_lists sum_i w_i log softmax(s)_i: the ULTRA listwise softmax loss before normalization."""
    return -jnp.sum(jnp.where(mask, weights, 0.0) * masked_log_softmax(scores, mask))


def pair_logistic(scores):
    """l_ij = log(1 + exp(-(s_i - s_j))), ``[..., K, K]`` (RankNet, sigma = 1)."""
    return jax.nn.softplus(-(scores[..., :, None] - scores[..., None, :]))


def pair_mask(mask):
    return mask[..., :, None] & mask[..., None, :]


def pairwise_loss(scores, pair_weights, mask):
    """sum_{i,j} w_ij l_ij over valid pairs."""
    return jnp.sum(jnp.where(pair_mask(mask), pair_weights * pair_logistic(scores), 0.0))


def pair_hessian_diagonal(scores, pair_weights, mask):
    """diag d^2/ds^2 of ``pairwise_loss`` with weights constant in s: h_i = sum_j (w_ij + w_ji) rho_ij (1 - rho_ij),
    rho_ij = sigma(s_i - s_j) (LambdaMART's Newton denominator; Burges 2010, MSR-TR-2010-82)."""
    rho = jax.nn.sigmoid(scores[..., :, None] - scores[..., None, :])
    a = jnp.where(pair_mask(mask), pair_weights, 0.0) * rho * (1.0 - rho)  # symmetric in rho: a_ij uses rho_ij
    return jnp.sum(a, axis=-1) + jnp.sum(a, axis=-2)


def pairwise_estimator(name: str, scorer, pair_weights) -> "Estimator":
    """An estimator with loss sum_ij w_ij l_ij / N, w = ``pair_weights(state, batch, scores)`` (constant in s:
    any dependence on the scores, e.g. |Delta NDCG|, goes through ``stop_gradient``), over the sessions N."""

    def loss(params, state, batch, key):
        s = ranker_scores(scorer, params, batch.features)
        w = jax.lax.stop_gradient(pair_weights(state, batch, s))
        return pairwise_loss(s, w, batch.mask) / n_sessions(batch), next_step(state)

    return Estimator(name, init_scalar_ranker(scorer), loss, scalar_scores(scorer.apply), pair_weights=pair_weights)


def ranks_of(scores, mask):
    """1-based rank of every slot under ``scores`` (masked slots ranked last)."""
    z = jnp.where(mask, scores, -jnp.inf)
    order = jnp.argsort(-z, axis=-1)
    return jnp.argsort(order, axis=-1) + 1


def delta_dcg(scores, mask):
    """|Delta DCG_ij| for swapping slots i and j with gains 1 (clicked) and 0 (not): |D(r_i) - D(r_j)|.

    Normalization by the session's IDCG lives in ``ClickStats.pairs_lambda``.
    """
    d = 1.0 / jnp.log2(1.0 + ranks_of(jax.lax.stop_gradient(scores), mask))
    return jnp.abs(d[..., :, None] - d[..., None, :])


def scalar_scores(apply_fn):
    """score(params, state, features, mask) for an estimator whose ranker is a scalar scorer."""

    def score(params, state, features, mask):
        del state, mask
        return apply_fn(params["ranker"], features)[..., 0]

    return score


def init_scalar_ranker(scorer):
    """init(key, n_features, props) -> ({"ranker": ...}, {"step": 0, "props": props})."""

    def init(key, n_features, props=None):
        params = {"ranker": scorer.init(key, jnp.zeros((1, n_features), jnp.float32))}
        return params, {"step": jnp.int32(0), "props": props}

    return init


def ranker_scores(scorer, params, features):
    return scorer.apply(params["ranker"], features)[..., 0]


def next_step(state):
    return {**state, "step": state["step"] + 1}
