"""Padded query lists for the offline protocol (SPEC §6).

Evaluation and the labeled rankers need the full candidate lists of a split as fixed-shape
arrays; queries are grouped into a few buckets of similar size so that a query with 40
documents does not pay for one with 1,250. Document order inside every query is shuffled
once by seed, so that ``lax.top_k``'s lower-index tie-breaking is a random tie-break
(baselines.md §0).
"""

from __future__ import annotations

import jax
import numpy as np
from flax import struct

from ltrjax.data.layout import quantile_widths


@struct.dataclass
class Lists:
    """Queries padded to a common width. Leading axis = query."""

    features: jax.Array  # f32 [Q, D, F]
    labels: jax.Array  # i32 [Q, D]
    mask: jax.Array  # bool [Q, D]
    doc_index: jax.Array  # i32 [Q, D] row in the QuerySet (0 where padded)
    query_index: jax.Array  # i32 [Q]

    @property
    def n_queries(self) -> int:
        return int(self.labels.shape[0])


def query_docs(query_offsets: np.ndarray, q: int) -> np.ndarray:
    return np.arange(query_offsets[q], query_offsets[q + 1])


def pad_queries(qs, query_ids, rng: np.random.Generator, width: int | None = None,
                max_docs: int | None = None) -> Lists:
    """Pad ``query_ids`` to one width, shuffling document order within each query.

    ``max_docs`` caps the documents kept per query (a random subset); ``None`` keeps all.
    """
    offsets = np.asarray(qs.query_offsets)
    query_ids = np.asarray(query_ids, np.int64)
    sizes = offsets[query_ids + 1] - offsets[query_ids]
    keep = sizes if max_docs is None else np.minimum(sizes, max_docs)
    width = int(max(1, keep.max(initial=1))) if width is None else int(width)
    doc_index = np.zeros((len(query_ids), width), np.int64)
    mask = np.zeros((len(query_ids), width), bool)
    for row, (q, n) in enumerate(zip(query_ids, keep)):
        docs = offsets[q] + rng.permutation(sizes[row])[:n]
        doc_index[row, :n] = docs
        mask[row, :n] = True
    features = np.where(mask[..., None], np.asarray(qs.features)[doc_index], 0.0).astype(np.float32)
    labels = np.where(mask, np.asarray(qs.labels)[doc_index], 0).astype(np.int32)
    return Lists(features=features, labels=labels, mask=mask, doc_index=doc_index.astype(np.int32),
                 query_index=query_ids.astype(np.int32))


def bucket_queries(qs, query_ids, rng: np.random.Generator, n_buckets: int = 2,
                   multiple: int = 8, max_docs: int | None = None, widths=None) -> list[Lists]:
    """Split ``query_ids`` into padded groups by document count (``widths`` or ``n_buckets`` quantiles:
    ``ltrjax.data.layout.quantile_widths``).

    Sharing ``widths`` between splits (e.g. validation and test) shares compiled shapes.
    """
    offsets = np.asarray(qs.query_offsets)
    query_ids = np.asarray(query_ids, np.int64)
    if len(query_ids) == 0:
        return []
    sizes = offsets[query_ids + 1] - offsets[query_ids]
    if max_docs is not None:
        sizes = np.minimum(sizes, max_docs)
    widths = quantile_widths(sizes, n_buckets, multiple) if widths is None else np.asarray(widths)
    if sizes.max() > widths[-1]:
        raise ValueError(f"bucket widths {widths} do not cover a query with {sizes.max()} documents")
    which = np.searchsorted(widths, sizes, side="left")
    out = []
    for b, w in enumerate(widths):
        members = query_ids[which == b]
        if len(members):
            out.append(pad_queries(qs, members, rng, width=int(w), max_docs=max_docs))
    return out
