"""Checks that a loaded dataset can be used before any work starts (issue 21 "Data checks before work").

Each failure is one paragraph naming the dataset, split or file, and the counts: a ``DataCheckError``
(data that parses but cannot be used) or, for a setting the data cannot meet, a ``ConfigError`` naming
the key. ``python -m ltrjax.run`` turns both into exit status 2.
"""

from __future__ import annotations

import numpy as np

from ltrjax.constraints import ConfigError

from .errors import DataCheckError
from .queryset import SPLIT_NAMES, QuerySet

_BLOCK_ROWS = 1 << 16


def check_queryset(qs: QuerySet) -> None:
    """Every split has a query, and a query with a relevant document (NDCG is undefined without one: the
    metrics of the split would be NaN), and every feature value is finite after preprocessing."""
    report = qs.preprocess_report
    if qs.n_queries == 0:
        read = sum(report.queries_read.values()) if report else 0
        if report and read:
            raise DataCheckError(
                _where(qs), f"no query has more than dataset.min_docs = {report.min_docs} documents (all {read} "
                f"queries read were dropped; the longest has {report.longest_query})",
                f"set dataset.min_docs={max(report.longest_query - 1, 0)} or lower, or use data with longer lists")
        raise DataCheckError(_where(qs), "the dataset has no query", "check its files")
    max_label = np.maximum.reduceat(qs.labels, qs.query_offsets[:-1])
    for code, split in enumerate(SPLIT_NAMES):
        in_split = qs.split == code
        n = int(in_split.sum())
        if n == 0:
            raise DataCheckError(_where(qs, split), f"split {split} has no query ({_fate(qs, split)})",
                                 _more_queries_hint(qs))
        if not (max_label[in_split] > 0).any() and not (split == "train" and qs.info.get("unlabelled_train")):
            docs = int(np.diff(qs.query_offsets)[in_split].sum())
            raise DataCheckError(
                _where(qs, split), f"split {split} has no relevant document (all {docs} labels of its {n} queries "
                "are 0): its NDCG would be undefined", "check the labels, or use data with relevant documents")
    if qs.n_features == 0:
        why = ("are constant within every training query (dataset.drop_constant_features dropped them)"
               if report and report.features_dropped_constant else "were dropped (dataset.drop_features)")
        raise DataCheckError(
            _where(qs), f"no feature is left to rank by: all {report.features_read if report else 0} features read "
            f"{why}",
            "check that the file's documents differ in their features, or set dataset.drop_constant_features=false")
    bad = _non_finite(qs.features)
    if bad:
        raise DataCheckError(_where(qs), f"{bad} feature values are not finite after preprocessing "
                             f"(normalize = {qs.info.get('normalize')!r})",
                             "check the file for extreme values, or set dataset.normalize=none")


def check_list_width(longest: int, top_k: int, dataset: str, key: str = "sim.top_k") -> None:
    """``top_k`` must not exceed ``longest``, the most documents of any query of ``dataset``."""
    if top_k > longest:
        raise ConfigError(key, top_k, f"expected at most {longest}, the most documents of any query of dataset "
                          f"{dataset} (a ranking of {top_k} needs that many documents)")


def _where(qs: QuerySet, split: str | None = None) -> str:
    files = qs.info.get("files") or {}
    file = files.get(split) or files.get("all") if split else qs.info.get("source")
    return f"dataset {qs.name}" + (f", split {split}" if split else "") + (f" ({file})" if file else "")


def _fate(qs: QuerySet, split: str) -> str:
    report = qs.preprocess_report
    if report is None:
        return "none given"
    read = report.queries_read[split]
    parts = [f"{read} read"]
    if report.queries_dropped_min_docs[split]:
        parts.append(f"{report.queries_dropped_min_docs[split]} dropped with <= {report.min_docs} documents")
    if split == "test" and report.test_queries_purged:
        parts.append(f"{report.test_queries_purged} purged without a relevant document")
    return ", ".join(parts)


def _more_queries_hint(qs: QuerySet) -> str:
    total = sum(qs.preprocess_report.queries_read.values()) if qs.preprocess_report else qs.n_queries
    return (f"every split needs at least one query with a relevant document ({total} queries in all); use more "
            "queries (dataset.n_queries for synthetic data), a lower dataset.min_docs, or other files")


def _non_finite(features: np.ndarray) -> int:
    return sum(int(np.count_nonzero(~np.isfinite(features[i:i + _BLOCK_ROWS])))
               for i in range(0, features.shape[0], _BLOCK_ROWS))
