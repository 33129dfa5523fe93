"""Test-fold metrics of the offline protocol (SPEC §6): NDCG@{1,3,5,10} with gain 2^y - 1 and
log2 discount, and MAP (relevant = label >= ``map_threshold``), over the full candidate lists; beside them
DCG@k, RR@k (MRR), ERR@k and P@k, each named by its ir_measures string (``ir_measure``).

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

from ltrjax.metrics import (average_precision, dcg_at_k, err_at_k, exp_gain, log2_discount, ndcg_at_k,
                            precision_at_k, reciprocal_rank_at_k)

KS = (1, 3, 5, 10)
ERR_MAX_GRADE = 4  # gdeval's, as ir_measures' ERR@k


def ir_measure(metric: str, map_threshold: int = 1) -> str | None:
    """The ir_measures string that computes ``metric`` (a key of ``query_metrics``) on the same run and qrels
    (qrels: the evaluation labels), or None where ir_measures has no such measure (unnormalized DCG)."""
    name, _, k = metric.partition("@")
    rel = "" if map_threshold == 1 else f"(rel={map_threshold})"
    return {"ndcg": f"nDCG(dcg='exp-log2')@{k}", "dcg": None, "mrr": f"RR{rel}@{k}", "err": f"ERR@{k}",
            "p": f"P{rel}@{k}", "map": f"AP{rel}"}[name]


METRIC_DEFINITIONS = {
    "ndcg": "DCG@k over the ideal DCG@k of the query's documents; gain 2^y - 1, discount 1/log2(i + 1)",
    "dcg": "sum over the top k of (2^y - 1) / log2(i + 1); tested as ir_measures' nDCG(dcg='exp-log2')@k times "
           "the ideal DCG@k",
    "mrr": "1 / rank of the first document with label >= map_threshold in the top k (0 if none)",
    "err": f"expected reciprocal rank, R = (2^y - 1) / 2^{ERR_MAX_GRADE} (Chapelle et al. 2009, gdeval)",
    "p": "documents with label >= map_threshold in the top k, over k",
    "map": "average precision over the whole list, relevant = label >= map_threshold",
}


@functools.partial(jax.jit, static_argnames=("ks", "map_threshold"))
def query_metrics(scores, labels, mask, ks=KS, map_threshold: int = 1):
    """Per-query NDCG@k, DCG@k, RR@k, ERR@k, P@k and AP (dict of ``[Q]`` arrays) plus whether the query has a
    relevant doc; ``ir_measure(key)`` names each in ir_measures."""
    gains = exp_gain(labels)
    out = {f"ndcg@{k}": ndcg_at_k(scores, gains, mask, log2_discount(k)) for k in ks}
    out.update({f"dcg@{k}": dcg_at_k(scores, gains, mask, log2_discount(k)) for k in ks})
    out.update({f"mrr@{k}": reciprocal_rank_at_k(scores, labels, mask, k, map_threshold) for k in ks})
    out.update({f"err@{k}": err_at_k(scores, labels, mask, k, ERR_MAX_GRADE) for k in ks})
    out.update({f"p@{k}": precision_at_k(scores, labels, mask, k, map_threshold) for k in ks})
    out["map"] = average_precision(scores, labels, mask, map_threshold)
    out["has_relevant"] = jnp.any(mask & (labels > 0), axis=-1)
    return out


@functools.lru_cache(maxsize=256)  # bounded: estimators of many settings do not accumulate programs
def jitted_score(estimator):
    return jax.jit(estimator.score)


def make_evaluator(estimator, buckets, ks=KS, map_threshold: int = 1, drop_no_relevant: bool = True,
                   per_query: bool = False):
    """evaluate(params, state) -> {metric: mean over queries, "n_queries": ..., "n_dropped": ...}; with
    ``per_query`` also ``"_per_query"``: {"query_index": [Q] QuerySet rows of the kept queries, metric: [Q]}."""
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
        if per_query:
            index = np.concatenate([np.asarray(b.query_index) for b in buckets])
            res["_per_query"] = {"query_index": index[keep], **{k: v[keep] for k, v in cat.items()}}
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
