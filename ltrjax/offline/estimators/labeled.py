"""Rankers trained on true labels: the labeled-data skyline and the production ranker.

``form="pairwise"``: pairwise logistic loss over label-differing pairs (rax); ``"listwise"``:
softmax cross-entropy with gains 2^y - 1 (rax). Both averaged over the batch's lists.
"""

import jax.numpy as jnp
import rax

from ltrjax.offline.estimators.base import (Estimator, init_scalar_ranker, next_step, ranker_scores,
                                            scalar_scores)


def make(scorer, *, form: str = "pairwise") -> Estimator:
    """The labeled-data skyline; ``form``: "pairwise" or "listwise" (module docstring)."""
    return _make(scorer, "labeled", form)


def make_production(scorer) -> Estimator:
    """The production (logging) ranker: the pairwise labeled loss on its 1% of training queries."""
    return _make(scorer, "production", "pairwise")


def _make(scorer, name: str, form: str) -> Estimator:

    def loss(params, state, batch, key):
        s = ranker_scores(scorer, params, batch.features)
        n_lists = jnp.maximum(jnp.sum(jnp.any(batch.mask, axis=-1)), 1.0)
        if form == "listwise":
            total = rax.softmax_loss(s, 2.0**batch.labels - 1.0, where=batch.mask, reduce_fn=jnp.sum)
        else:
            total = rax.pairwise_logistic_loss(s, batch.labels, where=batch.mask, reduce_fn=jnp.sum)
        return total / n_lists, next_step(state)

    return Estimator(name, init_scalar_ranker(scorer), loss, scalar_scores(scorer.apply), kind="labeled")
