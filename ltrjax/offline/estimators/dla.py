"""DLA, the dual learning algorithm (Ai et al. SIGIR'18; baselines.md §5.5).

A propensity logit g_k per position and the ranker are trained jointly:
  L_rank = -sum_i c_i w_i log softmax(s)_i,  w_k = sg(softmax(g)_1 / softmax(g)_k)  (option ``clip``)
  L_prop = -sum_i c_i v_i log softmax(g)_i,  v_i = sg(softmax(s)_first / softmax(s)_i)
where "first" is the document shown at position 1; L = L_prop + L_rank. Softmaxes run over the
displayed slots of each list. ULTRA passes g through an ELU layer on one-hot positions; a free
logit per position is the same family.
"""

import jax
import jax.numpy as jnp

from ltrjax.offline.estimators.base import (Estimator, masked_log_softmax, n_sessions, next_step,
                                            ranker_scores, scalar_scores, weighted_softmax_ce)


def make(scorer, *, clip: float | None = None) -> Estimator:
    """``clip``: upper bound of the propensity weight w_k (None = off)."""

    def init(key, n_features, props):
        k = props.theta.shape[0]
        params = {"ranker": scorer.init(key, jnp.zeros((1, n_features), jnp.float32)),
                  "propensity": jnp.zeros((k,), jnp.float32)}
        return params, {"step": jnp.int32(0), "props": props}

    def loss(params, state, batch, key):
        s = ranker_scores(scorer, params, batch.features)
        g = jnp.broadcast_to(params["propensity"], s.shape)
        lp = masked_log_softmax(g, batch.mask)
        w = jax.lax.stop_gradient(jnp.exp(lp[..., :1] - lp))
        w = w if clip is None else jnp.minimum(w, clip)
        ls = masked_log_softmax(s, batch.mask)
        v = jax.lax.stop_gradient(jnp.exp(ls[..., :1] - ls))
        rank_loss = weighted_softmax_ce(s, batch.clicks * w, batch.mask)
        prop_loss = weighted_softmax_ce(g, batch.clicks * v, batch.mask)
        return (prop_loss + rank_loss) / n_sessions(batch), next_step(state)

    return Estimator("dla", init, loss, scalar_scores(scorer.apply))
