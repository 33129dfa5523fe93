"""Naive estimator: clicks taken as relevance labels (baselines.md §5.1; PRS §5.1 "Naive").

``form="pairwise"`` (default): sum over clicked/unclicked pairs of l_ij with weight 1 (PRS Eq. 9 with all
propensities equal). ``form="listwise"``: the ULTRA softmax loss -sum_i c_i log softmax(s)_i.
"""

from ltrjax.offline.estimators.base import (Estimator, init_scalar_ranker, n_sessions, next_step,
                                            pairwise_estimator, ranker_scores, scalar_scores,
                                            weighted_softmax_ce)


def make(scorer, *, form: str = "pairwise") -> Estimator:
    """``form``: "pairwise" (PRS §5.1) or "listwise" (ULTRA softmax)."""

    if form != "listwise":
        return pairwise_estimator("naive", scorer, lambda state, batch, s: batch.pairs)

    def loss(params, state, batch, key):
        s = ranker_scores(scorer, params, batch.features)
        return weighted_softmax_ce(s, batch.clicks, batch.mask) / n_sessions(batch), next_step(state)

    return Estimator("naive", init_scalar_ranker(scorer), loss, scalar_scores(scorer.apply))
