"""Test-fold metrics of the offline protocol (SPEC §6): NDCG@{1,3,5,10} with gain 2^y - 1 and
log2 discount, and MAP (relevant = label >= ``map_threshold``), over the full candidate lists.

Queries whose ideal DCG is 0 (no relevant document) are left out of the means when
``drop_no_relevant`` is true (SPEC §3), and counted. The metric computation is one jitted
function shared by every estimator (compiled once per bucket shape); only scoring is per
estimator.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ltrjax.metrics import average_precision, exp_gain, log2_discount, ndcg_at_k

KS = (1, 3, 5, 10)


@functools.partial(jax.jit, static_argnames=("ks", "map_threshold"))
def query_metrics(scores, labels, mask, ks=KS, map_threshold: int = 1):
    """Per-query NDCG@k and AP (dict of ``[Q]`` arrays) plus whether the query has a relevant doc."""
    gains = exp_gain(labels)
    out = {f"ndcg@{k}": ndcg_at_k(scores, gains, mask, log2_discount(k)) for k in ks}
    out["map"] = average_precision(scores, labels, mask, map_threshold)
    out["has_relevant"] = jnp.any(mask & (labels > 0), axis=-1)
    return out


@functools.lru_cache(maxsize=256)  # bounded: estimators of many settings do not accumulate programs
def jitted_score(estimator):
    return jax.jit(estimator.score)


def make_evaluator(estimator, buckets, ks=KS, map_threshold: int = 1, drop_no_relevant: bool = True):
    """evaluate(params, state) -> {metric: mean over queries, "n_queries": ..., "n_dropped": ...}."""
    score = jitted_score(estimator)

    def evaluate(params, state):
        parts = [query_metrics(score(params, state, b.features, b.mask), b.labels, b.mask, tuple(ks),
                               int(map_threshold)) for b in buckets]
        cat = {k: np.concatenate([np.asarray(p[k]) for p in parts]) for k in parts[0]}
        has = cat.pop("has_relevant")
        keep = has if drop_no_relevant else np.ones_like(has)
        res = {k: float(np.mean(v[keep])) if keep.any() else 0.0 for k, v in cat.items()}
        res["n_queries"] = int(keep.sum())
        res["n_dropped"] = int((~keep).sum())
        return res

    return evaluate


@functools.partial(jax.jit, static_argnames=("k",))
def _ndcg_sum(scores, labels, mask, k: int = 10):
    nd = ndcg_at_k(scores, exp_gain(labels), mask, log2_discount(k))
    has = jnp.any(mask & (labels > 0), axis=-1)
    return jnp.sum(jnp.where(has, nd, 0.0)), jnp.sum(has)


def mean_ndcg(scores, buckets, k: int = 10) -> float:
    """Mean NDCG@k over the queries of ``buckets`` with a relevant document, ranking by ``scores`` (one array
    per bucket, shaped like its mask)."""
    tot, cnt = 0.0, 0.0
    for s, b in zip(scores, buckets):
        a, c = _ndcg_sum(s, b.labels, b.mask, k)
        tot, cnt = tot + float(a), cnt + float(c)
    return tot / max(cnt, 1.0)


def make_validator(estimator, buckets, k: int = 10):
    """validate(params, state) -> mean NDCG@k over validation queries with a relevant document.

    Cheaper than the full evaluator (top-k only, no full sort for AP); runs after every epoch. Its ``buckets``
    and ``k`` are attributes, for fitters that score the validation lists themselves (``ltrjax.offline.gbdt``).
    """
    score = jitted_score(estimator)

    def validate(params, state):
        return mean_ndcg([score(params, state, b.features, b.mask) for b in buckets], buckets, k)

    validate.buckets, validate.k = buckets, k
    return validate
