"""IPS / IPW (baselines.md §5.2; PRS Eq. 6 for the pairwise form).

Clicked documents are weighted by w_k = min(1/theta_k, M) (option ``clip`` = M; ``None`` = off).
``form="pairwise"``: sum_{i clicked, j unclicked} w_{k_i} l_ij (PRS Eq. 6).
``form="listwise"``: -sum_i c_i w_{k_i} log softmax(s)_i (ULTRA IPWrank).
``ips`` and ``ips_oracle`` share the loss; the names say what the experiment tells them: ``ips_oracle`` gets
the true theta (an upper reference), ``ips`` the propensities the paper gave its IPS (known in PRS Figs. 3-6,
estimated by randomization in PRS Table 1).
``ips_lambda`` (``make_lambda``): IPS-LambdaMART, the pairwise IPS weight 1/theta_{k_i} of the clicked document times
|Delta NDCG_ij| of swapping i and j (``prs_lambda`` with theta_j / theta_i replaced by 1 / theta_i): the tree
baseline our PRS Table 1 analogue compares PRS-LambdaMART with. It is *not* the paper's Unbiased LambdaMART, which
also weights the unclicked side and learns t+ and t- jointly from the clicks (PRS §5.2; ``pair_debias`` learns them,
without the lambda weighting): docs/fidelity.md.
"""

import dataclasses

import jax.numpy as jnp

from ltrjax.offline.estimators.base import (Estimator, delta_dcg, init_scalar_ranker, n_sessions, next_step,
                                            pairwise_estimator, ranker_scores, scalar_scores,
                                            weighted_softmax_ce)


def ips_weights(theta, clip=None):
    """w_k = min(1/theta_k, clip)."""
    w = 1.0 / jnp.maximum(theta, 1e-12)
    return w if clip is None else jnp.minimum(w, clip)


def make(scorer, *, form: str = "pairwise", clip: float | None = None) -> Estimator:
    """``form``: "pairwise" (PRS Eq. 6) or "listwise" (ULTRA IPWrank); ``clip``: M in min(1/theta, M), None = off."""

    if form != "listwise":
        return pairwise_estimator("ips", scorer, lambda state, batch, s: batch.pairs * ips_weights(
            state["props"].theta, clip)[:, None])

    def loss(params, state, batch, key):
        w = ips_weights(state["props"].theta, clip)
        s = ranker_scores(scorer, params, batch.features)
        return weighted_softmax_ce(s, batch.clicks * w, batch.mask) / n_sessions(batch), next_step(state)

    return Estimator("ips", init_scalar_ranker(scorer), loss, scalar_scores(scorer.apply))


def make_oracle(scorer, *, form: str = "pairwise", clip: float | None = None) -> Estimator:
    """IPS told the true theta_k: an upper reference (the experiment decides which ``Propensities`` each name gets)."""
    return dataclasses.replace(make(scorer, form=form, clip=clip), name="ips_oracle")


def make_lambda(scorer, *, clip: float | None = None) -> Estimator:
    """IPS-weighted LambdaMART pairs: w_{k_i} |Delta NDCG_ij| l_ij (module docstring); ``clip`` as for ``make``."""

    def pair_weights(state, batch, s):
        return batch.pairs_lambda * ips_weights(state["props"].theta, clip)[:, None] * delta_dcg(s, batch.mask)

    return pairwise_estimator("ips_lambda", scorer, pair_weights)
