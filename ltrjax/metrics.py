"""Ranking metrics with masks (baselines.md §2): DCG/NDCG@k, MAP, ARP, cumulative NDCG.

All functions are batch-agnostic over leading axes and take the document axis last. Gains and
discounts are explicit so that both conventions in use are one call away:
  * EBRank: gain = relevance probability R, discount = examination theta_k = 1/log2(k+1);
  * ULTRA / OLTR: gain = 2^y - 1, discount = 1/log2(k+1).
The ideal DCG is taken over every valid document of the query (``ideal_mask``), which for the
online protocol includes documents that have not entered yet (EBRank §5.1.4).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def log2_discount(k: int):
    """lambda_i = 1 / log2(i + 1), i = 1..k."""
    return 1.0 / jnp.log2(jnp.arange(2, k + 2, dtype=jnp.float32))


def exp_gain(labels):
    """g(y) = 2^y - 1."""
    return 2.0 ** jnp.asarray(labels, jnp.float32) - 1.0


def top_k_ranking(scores, mask, k: int):
    """Indices of the top-k masked scores (``[..., k]``) and whether each slot holds a document.

    Ties go to the lower index (``lax.top_k``); callers randomize document order to randomize ties.
    """
    masked = jnp.where(mask, scores, -jnp.inf)
    k = min(k, scores.shape[-1])
    values, indices = jax.lax.top_k(masked, k)
    return indices, values > -jnp.inf


def dcg_of_shown_gains(shown_gains, slot_valid, discount):
    """DCG = sum_i g(R_i) lambda_i over the displayed slots from the shown documents' gains ``[..., k]``."""
    return jnp.sum(jnp.where(slot_valid, shown_gains * discount[: shown_gains.shape[-1]], 0.0), axis=-1)


def dcg_of_ranking(ranking, slot_valid, gains, discount):
    """DCG = sum_i g(R_i) lambda_i over the displayed slots; ``discount`` has shape [k]."""
    return dcg_of_shown_gains(jnp.take_along_axis(gains, ranking, axis=-1), slot_valid, discount)


def ideal_dcg(gains, ideal_mask, discount):
    """DCG of the gain-sorted ranking over ``ideal_mask`` documents."""
    k = min(discount.shape[-1], gains.shape[-1])
    top, _ = jax.lax.top_k(jnp.where(ideal_mask, gains, -jnp.inf), k)
    return jnp.sum(jnp.where(top > -jnp.inf, top * discount[:k], 0.0), axis=-1)


def ndcg_of_shown_gains(shown_gains, slot_valid, idcg, discount):
    """NDCG from the shown documents' gains ``[..., k]`` and a precomputed ideal DCG; 0 when idcg == 0."""
    dcg = dcg_of_shown_gains(shown_gains, slot_valid, discount)
    return jnp.where(idcg > 0, dcg / jnp.where(idcg > 0, idcg, 1.0), 0.0)


def ndcg_of_ranking(ranking, slot_valid, gains, idcg, discount):
    """NDCG of a displayed ranking given a precomputed ideal DCG; 0 when idcg == 0."""
    return ndcg_of_shown_gains(jnp.take_along_axis(gains, ranking, axis=-1), slot_valid, idcg, discount)


def ndcg_at_k(scores, gains, mask, discount, ideal_mask=None):
    """NDCG@k of ranking ``mask``ed documents by ``scores``; k = len(discount).

    ``ideal_mask`` (default ``mask``) selects the documents the ideal ranking is drawn from.
    Queries whose ideal DCG is 0 score 0.
    """
    ideal_mask = mask if ideal_mask is None else ideal_mask
    ranking, slot_valid = top_k_ranking(scores, mask, discount.shape[-1])
    return ndcg_of_ranking(ranking, slot_valid, gains, ideal_dcg(gains, ideal_mask, discount), discount)


def average_precision(scores, labels, mask, threshold: int = 1):
    """AP = sum_i P@i rel_i / sum_i rel_i over the full masked ranking; 0 without relevant docs."""
    n = scores.shape[-1]
    order, slot_valid = top_k_ranking(scores, mask, n)
    rel = (jnp.take_along_axis(labels, order, axis=-1) >= threshold) & slot_valid
    hits = jnp.cumsum(rel, axis=-1)
    precision = hits / jnp.arange(1, n + 1)
    n_rel = jnp.sum(rel, axis=-1)
    return jnp.where(n_rel > 0, jnp.sum(precision * rel, axis=-1) / jnp.maximum(n_rel, 1), 0.0)


def average_relevant_position(scores, labels, mask):
    """ARP = sum_d rank(d) y_d / sum_d y_d (lower is better); 0 without relevant docs."""
    n = scores.shape[-1]
    order, slot_valid = top_k_ranking(scores, mask, n)
    y = jnp.where(slot_valid, jnp.take_along_axis(labels, order, axis=-1), 0).astype(jnp.float32)
    ranks = jnp.arange(1, n + 1, dtype=jnp.float32)
    total = jnp.sum(y, axis=-1)
    return jnp.where(total > 0, jnp.sum(ranks * y, axis=-1) / jnp.maximum(total, 1e-12), 0.0)


def cumulative_weights(n: int, gamma: float = 0.995) -> np.ndarray:
    """gamma ** (n-1, ..., 1, 0): the weight of each of n values in Cum-NDCG (Eq. 7), the last value's 1."""
    return gamma ** np.arange(n - 1, -1, -1, dtype=np.float64)


def cumulative_ndcg(values, gamma: float = 0.995, weights: np.ndarray | None = None) -> float:
    """EBRank Cum-NDCG (Eq. 7): S_t = gamma S_{t-1} + x_t, returned at the end of the sequence. ``weights``:
    ``cumulative_weights(n, gamma)`` for some n >= len(values), computed once for several sequences (the powers
    are most of the work; the result is the same)."""
    values = np.asarray(values, np.float64)
    if values.size == 0:
        return 0.0
    if weights is None:
        weights = cumulative_weights(values.size, gamma)
    return float(np.dot(weights[weights.size - values.size:], values))


def cumulative_ndcg_curve(values, gamma: float = 0.995) -> np.ndarray:
    """S_t for every t of the sequence (for plots of Cum-NDCG over time); a linear filter in C."""
    values = np.asarray(values, np.float64)
    if values.size == 0:
        return values
    from scipy.signal import lfilter  # imported here: scipy.signal takes over a second to import

    return lfilter([1.0], [1.0, -gamma], values)


# --------------------------------------------------------------------------- the field's measures (issue 42)
# Each is checked against ir_measures (tests/test_metrics_ir_measures.py) on the same run and qrels; the string of
# every offline metric is ``ltrjax.offline.evaluate.IR_MEASURES``.
def dcg_at_k(scores, gains, mask, discount):
    """DCG@k = sum_{i <= k} g(y_i) / log2(i + 1) of ranking ``mask``ed documents by ``scores`` (k = len(discount))."""
    ranking, slot_valid = top_k_ranking(scores, mask, discount.shape[-1])
    return dcg_of_ranking(ranking, slot_valid, gains, discount)


def _top_labels(scores, labels, mask, k: int):
    ranking, slot_valid = top_k_ranking(scores, mask, k)
    return jnp.take_along_axis(labels, ranking, axis=-1), slot_valid


def reciprocal_rank_at_k(scores, labels, mask, k: int, threshold: int = 1):
    """RR@k = 1 / (rank of the first document with label >= threshold), 0 when none is in the top k."""
    top, valid = _top_labels(scores, labels, mask, k)
    hit = valid & (top >= threshold)
    first = jnp.argmax(hit, axis=-1)
    return jnp.where(hit.any(axis=-1), 1.0 / (first + 1.0), 0.0)


def precision_at_k(scores, labels, mask, k: int, threshold: int = 1):
    """P@k = |{i <= k: y_i >= threshold}| / k (a list shorter than k still divides by k, as trec_eval)."""
    top, valid = _top_labels(scores, labels, mask, k)
    return jnp.sum(valid & (top >= threshold), axis=-1) / float(k)


def err_at_k(scores, labels, mask, k: int, max_grade: int = 4):
    """ERR@k (Chapelle et al. 2009, Eq. 4): sum_r (1/r) R_r prod_{i<r} (1 - R_i), R = (2^y - 1) / 2^max_grade
    (gdeval's ``max_grade`` 4, what ir_measures' ``ERR@k`` computes)."""
    top, valid = _top_labels(scores, labels, mask, k)
    r = jnp.where(valid, (2.0 ** jnp.asarray(top, jnp.float32) - 1.0) / 2.0 ** max_grade, 0.0)
    reach = jnp.concatenate([jnp.ones_like(r[..., :1]), jnp.cumprod(1.0 - r, axis=-1)[..., :-1]], axis=-1)
    return jnp.sum(r * reach / jnp.arange(1, r.shape[-1] + 1, dtype=jnp.float32), axis=-1)
