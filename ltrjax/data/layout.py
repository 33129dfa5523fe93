"""Padded ``[query, doc]`` layout with masks and size buckets (SPEC §2.1, §3).

Queries are grouped into a few buckets by document count, each padded to its own width, so a
query with 40 documents does not pay for one with 1,250. Every bucket is a read-only pytree;
``query_index`` maps its rows back to the flat ``QuerySet``.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from ltrjax.data.queryset import QuerySet


@struct.dataclass
class Bucket:
    """Queries padded to ``n_docs_max`` documents. Leading axis = query, except ``doc_features``.

    The features are held once per document, not per padded cell: ``doc_features`` holds the bucket's documents
    (query after query) and one zero row last, and ``doc_row`` points every ``[query, slot]`` at its document's row
    (padded slots at the zero row). Per-document work (a model's scores, EBRank's alpha) runs over the documents
    and is laid out afterwards (``on_slots``); ``features`` is the padded ``[Qb, Db, F]`` view, gathered on use.
    """

    doc_features: jax.Array  # f32 [Nb+1, F] the bucket's documents, then a zero row (index Nb)
    doc_row: jax.Array  # i32 [Qb, Db] row of doc_features of each (query, slot); padded slots -> Nb
    labels: jax.Array  # i32 [Qb, Db]
    doc_mask: jax.Array  # bool [Qb, Db]
    n_docs: jax.Array  # i32 [Qb]
    split: jax.Array  # i32 [Qb]  0 train, 1 vali, 2 test
    query_index: jax.Array  # i32 [Qb] row in the QuerySet

    @property
    def n_queries(self) -> int:
        return int(self.labels.shape[0])

    @property
    def width(self) -> int:
        return int(self.labels.shape[1])

    @property
    def features(self) -> jax.Array:
        """f32 ``[Qb, Db, F]``, zeros where padded: the padded view, gathered when read (inside a program a
        transient the size of the padded layout; per-document work should use ``on_slots`` instead)."""
        return self.on_slots(self.doc_features, axis=0)

    def on_slots(self, values: jax.Array, axis: int = -1) -> jax.Array:
        """Per-document ``values`` (document axis ``axis``, ``Nb+1`` long, as ``doc_features``) laid out per
        ``[query, slot]``: that axis becomes ``[Qb, Db]`` (padded slots get the zero row's value)."""
        return jnp.take(values, self.doc_row, axis=axis)

    def take_queries(self, rows: jax.Array) -> "Bucket":
        """The bucket of queries ``rows`` only (the documents are shared, not copied)."""
        return self.replace(**{name: getattr(self, name)[rows]
                               for name in ("doc_row", "labels", "doc_mask", "n_docs", "split", "query_index")})


@struct.dataclass
class DocumentTable:
    """Every bucket's ``doc_features`` behind one int32 document id (bucket b's row r is ``starts[b] + r``): retrain
    examples carry ids, not copies of their features, and a program gathers the rows it uses (``rows``)."""

    blocks: tuple[jax.Array, ...]  # each bucket's doc_features [Nb+1, F]
    starts: tuple[int, ...] = struct.field(pytree_node=False)  # the id of each block's first row

    def rows(self, ids: jax.Array) -> jax.Array:
        """The feature rows of document ``ids`` (any shape): ``ids.shape + (F,)``."""
        out = None
        for block, start in zip(self.blocks, self.starts):
            local = ids - start
            got = jnp.take(block, jnp.clip(local, 0, block.shape[0] - 1), axis=0)
            out = got if out is None else jnp.where(((local >= 0) & (local < block.shape[0]))[..., None], got, out)
        return out


@dataclasses.dataclass(frozen=True)
class PaddedDataset:
    """A dataset as size buckets plus the facts every policy needs."""

    name: str
    buckets: tuple[Bucket, ...]
    n_queries: int
    n_features: int
    y_max: int
    bm25_column: int
    bucket_of_query: np.ndarray  # i32 [Q]
    row_of_query: np.ndarray  # i32 [Q]
    split_of_query: np.ndarray  # i8 [Q]
    feature_ids: np.ndarray | None = None  # i32 [F] original 1-based ids of the columns (None: 1..F)

    def column_of_feature(self, feature: int) -> int:
        """The 0-based column of original (1-based) feature id ``feature``; ValueError when it was dropped."""
        ids = np.arange(1, self.n_features + 1) if self.feature_ids is None else np.asarray(self.feature_ids)
        hits = np.flatnonzero(ids == int(feature))
        if hits.size == 0:
            raise ValueError(f"dataset {self.name!r} has no feature {feature} (after preprocessing it keeps "
                             f"{ids.size} features, ids {int(ids.min(initial=0))}..{int(ids.max(initial=0))}; "
                             "constant and dropped features are removed)")
        return int(hits[0])

    @property
    def document_starts(self) -> tuple[int, ...]:
        """The id of each bucket's first document row (``DocumentTable``; each bucket has ``Nb+1`` rows)."""
        sizes = [int(b.doc_features.shape[0]) for b in self.buckets]
        return tuple(int(s) for s in np.cumsum([0] + sizes[:-1]))

    def document_table(self) -> DocumentTable:
        """Every bucket's documents behind one id (no copy: the table holds the buckets' arrays)."""
        return DocumentTable(tuple(b.doc_features for b in self.buckets), self.document_starts)


def padded_cells(sizes: np.ndarray, widths: np.ndarray) -> int:
    """Number of [query, doc] cells when each query is padded to its bucket's width."""
    return int(widths[np.searchsorted(widths, sizes, side="left")].sum())


def quantile_widths(sizes, n_quantiles: int, multiple: int = 8) -> np.ndarray:
    """The distinct upper ``n_quantiles``-quantiles of the document counts ``sizes``, rounded up to ``multiple``
    (the last one covers the largest query). Offline evaluation lists use them as they are (``n_quantiles`` =
    buckets); ``bucket_widths`` starts from finer ones and merges."""
    qs = np.quantile(np.asarray(sizes), np.linspace(0, 1, n_quantiles + 1)[1:], method="higher")
    return np.unique(-(-qs.astype(np.int64) // multiple) * multiple)


def bucket_widths(docs_per_query: np.ndarray, n_buckets: int, multiple: int = 8,
                  merge_tolerance: float = 0.25) -> np.ndarray:
    """Upper document counts of at most ``n_buckets`` buckets, chosen to keep padding small.

    Start from fine quantiles of the size distribution (rounded up to ``multiple``) and merge the
    adjacent pair that adds the fewest padded cells, until at most ``n_buckets`` remain; keep
    merging while the total padding stays within ``merge_tolerance`` x (real documents) of the
    unmerged layout: every bucket costs one compilation per policy, so small or uniform datasets
    get one or two buckets and skewed ones (MSLR: 1 to 1,251 documents) get more.
    """
    sizes = np.sort(np.asarray(docs_per_query))
    widths = quantile_widths(sizes, 4 * n_buckets, multiple)
    widths[-1] = max(widths[-1], -(-sizes[-1] // multiple) * multiple)
    budget = padded_cells(sizes, widths) + merge_tolerance * sizes.sum()
    while len(widths) > 1:
        candidates = [np.delete(widths, i) for i in range(len(widths) - 1)]
        costs = [padded_cells(sizes, w) for w in candidates]
        best = int(np.argmin(costs))
        if len(widths) <= n_buckets and costs[best] > budget:
            break
        widths = candidates[best]
    return widths


def bucket_documents(features: np.ndarray, rows: np.ndarray) -> jax.Array:
    """float32 ``[len(rows)+1, F]`` device array: ``features[rows]`` and a zero row last (the padded slots')."""
    out = np.empty((len(rows) + 1, features.shape[1]), np.float32)
    np.take(features, rows, axis=0, out=out[:-1])
    out[-1] = 0.0
    return jax.device_put(out)


def pad_and_bucket(qs: QuerySet, n_buckets: int = 4, multiple: int = 8, merge_tolerance: float = 0.25,
                   single_bucket_cells: int = 200_000, min_width: int = 1, features: list | None = None
                   ) -> PaddedDataset:
    """Split a ``QuerySet`` into padded buckets of queries of similar size.

    ``features``: ``[matrix]``, the feature matrix handed over when ``qs`` carries a placeholder
    (``QuerySet.without_features``): the list is emptied, and after each bucket (the one with the most documents
    first) the rows still needed are kept in a smaller copy and the rest freed, so laying out holds about one flat
    matrix and one bucket's documents at a time. Each bucket keeps its documents' features once
    (``Bucket.doc_features``, 1.0x the flat matrix in all; a padded ``[Qb, Db, F]`` copy was 1.6x at MSLR-30K shape).

    A dataset whose one-bucket layout has at most ``single_bucket_cells`` [query, doc] cells stays
    one bucket: there padding costs less than compiling another bucket's programs. Every bucket is at
    least ``min_width`` wide (the simulator's ``top_k``: a ranking of K slots needs K columns).
    """
    sizes = np.diff(qs.query_offsets).astype(np.int64)
    if sizes.size == 0:
        raise ValueError(f"dataset {qs.name!r} has no query to lay out")
    widths = bucket_widths(sizes, n_buckets, multiple, merge_tolerance)
    widths = np.unique(np.maximum(widths, -(-int(min_width) // multiple) * multiple))
    if len(sizes) * widths[-1] <= single_bucket_cells:
        widths = widths[-1:]
    bucket_of_query = np.searchsorted(widths, sizes, side="left").astype(np.int32)
    row_of_query = np.zeros(len(sizes), np.int32)
    members = [np.flatnonzero(bucket_of_query == b) for b in range(len(widths))]
    for rows in members:
        row_of_query[rows] = np.arange(len(rows), dtype=np.int32)
    source = qs.features if features is None else features.pop()  # a handed-over matrix: freed bucket by bucket
    doc_bucket = np.repeat(bucket_of_query, sizes)
    position = np.arange(len(doc_bucket))  # original row -> its row in ``source``
    # the bucket holding the most documents first: the sooner its rows leave ``source``, the lower the peak
    order = [int(b) for b in np.argsort([-int(sizes[rows].sum()) for rows in members], kind="stable")]
    buckets: list = [None] * len(widths)
    for done, b in enumerate(order):
        width, rows = widths[b], members[b]
        n_docs = sizes[rows]
        doc_mask = np.arange(width)[None, :] < n_docs[:, None]
        # flat row index of every (query, slot); padded slots point at row 0 and are masked
        flat = np.where(doc_mask, qs.query_offsets[rows][:, None] + np.arange(width)[None, :], 0)
        labels = np.where(doc_mask, qs.labels[flat], 0).astype(np.int32)
        doc_row = np.full(doc_mask.shape, int(doc_mask.sum()), np.int32)  # padded slots: the zero row
        doc_row[doc_mask] = np.arange(int(doc_mask.sum()), dtype=np.int32)  # row-major: query after query
        buckets[b] = Bucket(
            doc_features=bucket_documents(source, position[flat[doc_mask]]),
            # device_put: jnp.asarray of a NumPy array is a program (lax.stage) to compile per shape
            doc_row=jax.device_put(doc_row),
            labels=jax.device_put(labels),
            doc_mask=jax.device_put(doc_mask),
            n_docs=jax.device_put(n_docs.astype(np.int32)),
            split=jax.device_put(np.asarray(qs.split[rows], np.int32)),
            query_index=jax.device_put(rows.astype(np.int32)),
        )
        if features is not None and done + 1 < len(order):  # keep only the rows of the buckets still to lay out
            alive = np.flatnonzero(np.isin(doc_bucket, order[done + 1:]))
            source = source[position[alive]]  # the previous matrix is freed here (the only reference)
            position = np.zeros(len(doc_bucket), np.int64)
            position[alive] = np.arange(len(alive))
    return PaddedDataset(
        name=qs.name,
        buckets=tuple(buckets),
        n_queries=int(len(sizes)),
        n_features=int(qs.features.shape[1]),
        y_max=int(qs.y_max),
        bm25_column=int(qs.bm25_column),
        bucket_of_query=bucket_of_query,
        row_of_query=row_of_query,
        split_of_query=np.asarray(qs.split, np.int8),
        feature_ids=np.asarray(qs.feature_ids, np.int32),
    )
