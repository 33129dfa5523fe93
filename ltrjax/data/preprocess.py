"""Query filtering, feature dropping and per-query min-max normalisation of a QuerySet."""

from __future__ import annotations

import dataclasses
from typing import Iterable, Iterator

import numpy as np

from .queryset import SPLIT_NAMES, TEST, TRAIN, QuerySet, offsets_from_counts

NORMALIZATIONS = ("query_minmax", "none")


@dataclasses.dataclass(frozen=True)
class PreprocessReport:
    """What reading and preprocessing changed (``QuerySet.preprocess_report``; results.json records
    ``as_dict()``): queries dropped, purged or merged and features dropped, with counts per split."""

    queries_read: dict[str, int]  # per split
    longest_query: int  # the most documents of any query read
    min_docs: int
    queries_dropped_min_docs: dict[str, int]  # per split: queries with <= min_docs documents
    test_queries_purged: int  # test queries without a relevant document
    queries_merged: int = 0  # queries whose lines were not contiguous in their file (grouped into one)
    duplicate_lines: int = 0  # lines equal to an earlier line of their file (the reader's count; kept)
    label_ranges: dict | None = None  # per split [lowest, highest] label read, when the splits differ
    # the qids of the dropped and purged queries (a click log's sessions on them are skipped and counted);
    # left out of ``as_dict``
    dropped_qids: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64), repr=False,
                                                compare=False)  # an array: == would be elementwise; the counts compare
    features_read: int = 0
    features_dropped_config: tuple[int, ...] = ()  # original 1-based ids
    features_dropped_constant: tuple[int, ...] = ()  # constant within every kept training query

    @property
    def queries_dropped(self) -> int:
        return sum(self.queries_dropped_min_docs.values()) + self.test_queries_purged

    def as_dict(self) -> dict:
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "dropped_qids"}
        return {**fields, "features_dropped_config": list(self.features_dropped_config),
                "features_dropped_constant": list(self.features_dropped_constant)}

    def summary(self) -> str | None:
        """One line of what changed (None when nothing did), for a WARNING."""
        parts = []
        dropped = self.queries_dropped_min_docs
        if sum(dropped.values()):
            per = ", ".join(f"{s} {n}" for s, n in dropped.items() if n)
            parts.append(f"dropped {sum(dropped.values())} of {sum(self.queries_read.values())} queries with "
                         f"<= {self.min_docs} documents (dataset.min_docs; {per})")
        if self.test_queries_purged:
            parts.append(f"purged {self.test_queries_purged} test queries without a relevant document "
                         "(dataset.purge_test_without_relevant)")
        if self.queries_merged:
            parts.append(f"merged the lines of {self.queries_merged} queries whose lines were not contiguous "
                         "in their file")
        if self.duplicate_lines:
            parts.append(f"kept {self.duplicate_lines} lines that repeat an earlier line of their file exactly "
                         "(same qid, label, features and docid)")
        if self.label_ranges:
            ranges = ", ".join(f"{s} {lo}-{hi}" for s, (lo, hi) in self.label_ranges.items())
            parts.append(f"the splits' label ranges differ ({ranges}); every split is graded on one scale whose top "
                         "label is the highest of any split (dataset.y_max sets it)")
        if self.features_dropped_constant:
            parts.append(f"dropped {len(self.features_dropped_constant)} of {self.features_read} features as constant "
                         f"in every training query (ids {_ids(self.features_dropped_constant)}; "
                         "dataset.drop_constant_features)")
        return "; ".join(parts) or None


def _ids(ids) -> str:
    ids = list(ids)
    return ", ".join(map(str, ids[:12])) + (f", ... ({len(ids)} in all)" if len(ids) > 12 else "")
_BLOCK_ROWS = 1 << 14  # rows per block when writing the output array
_REDUCE_ROWS = 1 << 10  # rows per block of the per-query reductions


def preprocess(
    qs: QuerySet,
    *,
    normalize: str = "query_minmax",
    drop_features: Iterable[int] = (),
    drop_constant_features: bool = True,
    min_docs: int = 5,
    purge_test_without_relevant: bool = True,
) -> QuerySet:
    """Filter queries, drop features and normalise, recording every count in ``info``.

    Queries with ``<= min_docs`` documents are removed from every split; test queries whose
    labels are all 0 are purged; configured feature ids (1-based, original) are dropped, and
    so are features constant within every kept training query; the BM25 column is remapped
    (-1 if it was dropped). The counts also go to ``preprocess_report`` (``PreprocessReport``).
    The input is not modified.
    """
    if normalize not in NORMALIZATIONS:
        raise ValueError(f"normalize must be one of {NORMALIZATIONS}, got {normalize!r}")
    counts = qs.docs_per_query
    if (counts == 0).any():
        raise ValueError("every query needs at least one document")

    too_small = counts <= min_docs
    if qs.n_queries:
        max_label = np.maximum.reduceat(qs.labels, qs.query_offsets[:-1])
    else:
        max_label = np.zeros(0, dtype=qs.labels.dtype)
    no_relevant = (qs.split == TEST) & (max_label == 0) & ~too_small
    purged = no_relevant if purge_test_without_relevant else np.zeros_like(no_relevant)
    keep_query = ~too_small & ~purged

    mins, maxs = query_min_max(qs.features, qs.query_offsets)
    drop_config = np.isin(qs.feature_ids, [int(i) for i in drop_features])
    train_kept = keep_query & (qs.split == TRAIN)
    if drop_constant_features and train_kept.any():
        drop_constant = (maxs[train_kept] == mins[train_kept]).all(axis=0) & ~drop_config
    else:
        drop_constant = np.zeros(qs.n_features, dtype=bool)
    keep_column = ~drop_config & ~drop_constant

    features = _select_and_normalize(
        qs, keep_query, keep_column, mins, maxs, normalize == "query_minmax"
    )
    keep_doc = np.repeat(keep_query, counts)
    feature_ids = qs.feature_ids[keep_column]
    bm25_column = -1
    if qs.bm25_column >= 0 and keep_column[qs.bm25_column]:
        bm25_column = int(np.count_nonzero(keep_column[: qs.bm25_column]))

    info = dict(qs.info)
    info.update(
        queries_read=_per_split(qs.split, np.ones_like(keep_query)),
        docs_read=_per_split(qs.split, np.ones_like(keep_query), counts),
        queries_dropped_min_docs=_per_split(qs.split, too_small),
        test_queries_without_relevant=int(no_relevant.sum()),
        test_queries_purged=int(purged.sum()),
        queries_kept=_per_split(qs.split, keep_query),
        docs_kept=_per_split(qs.split, keep_query, counts),
        features_read=qs.n_features,
        features_dropped_config=[int(i) for i in qs.feature_ids[drop_config]],
        features_dropped_constant=[int(i) for i in qs.feature_ids[drop_constant]],

        features_kept=int(keep_column.sum()),
        bm25_dropped=bool(qs.bm25_column >= 0 and bm25_column < 0),
        min_docs=int(min_docs),
        normalize=normalize,
    )
    report = PreprocessReport(
        queries_read=info["queries_read"],
        longest_query=int(counts.max(initial=0)),
        min_docs=int(min_docs),
        queries_dropped_min_docs=info["queries_dropped_min_docs"],
        test_queries_purged=info["test_queries_purged"],
        queries_merged=int(info.get("queries_merged", 0)),  # the reader's count (``registry``), if any
        duplicate_lines=int(info.get("duplicate_lines", 0)),
        label_ranges=info.get("label_ranges"),
        dropped_qids=np.asarray(qs.qids[~keep_query], np.int64),
        features_read=qs.n_features,
        features_dropped_config=tuple(info["features_dropped_config"]),
        features_dropped_constant=tuple(info["features_dropped_constant"]),
    )
    return dataclasses.replace(
        qs,
        preprocess_report=report,
        features=features,
        labels=qs.labels[keep_doc],
        docids=qs.docids[keep_doc] if qs.docids is not None else None,
        query_offsets=offsets_from_counts(counts[keep_query]),
        qids=qs.qids[keep_query],
        split=qs.split[keep_query],
        bm25_column=bm25_column,
        feature_ids=feature_ids,
        info=info,
    )


def query_min_max(features: np.ndarray, query_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-query minimum and maximum of every feature, each [Q, F].

    ``reduceat`` runs on blocks of about _REDUCE_ROWS rows: on a whole large array it is
    several times slower (cache misses)."""
    n_q = query_offsets.size - 1
    mins = np.empty((n_q, features.shape[1]), dtype=features.dtype)
    maxs = np.empty_like(mins)
    for q0, q1 in _query_blocks(query_offsets, _REDUCE_ROWS):
        rows = features[query_offsets[q0] : query_offsets[q1]]
        starts = query_offsets[q0:q1] - query_offsets[q0]
        np.minimum.reduceat(rows, starts, axis=0, out=mins[q0:q1])
        np.maximum.reduceat(rows, starts, axis=0, out=maxs[q0:q1])
    return mins, maxs


def query_minmax_normalize(features: np.ndarray, query_offsets: np.ndarray) -> np.ndarray:
    """Per-query min-max scaling of every feature to [0, 1]; a feature constant within a query
    becomes 0. Returns a new float32 array."""
    mins, maxs = query_min_max(features, query_offsets)
    out = np.empty(features.shape, dtype=np.float32)
    for q0, q1 in _query_blocks(query_offsets, _BLOCK_ROWS):
        rows = slice(query_offsets[q0], query_offsets[q1])
        counts = np.diff(query_offsets[q0 : q1 + 1])
        _scale_into(out[rows], features[rows], mins[q0:q1], maxs[q0:q1], counts)
    return out


def _select_and_normalize(
    qs: QuerySet,
    keep_query: np.ndarray,
    keep_column: np.ndarray,
    mins: np.ndarray,
    maxs: np.ndarray,
    normalize: bool,
) -> np.ndarray:
    """Kept rows and columns, normalised block by block into one new float32 array."""
    counts = qs.docs_per_query
    columns = np.flatnonzero(keep_column)
    all_columns = columns.size == qs.n_features
    out = np.empty((int(counts[keep_query].sum()), columns.size), dtype=np.float32)
    mins, maxs = mins[:, columns], maxs[:, columns]
    written = 0
    for q0, q1 in _query_blocks(qs.query_offsets, _BLOCK_ROWS):
        block_keep = keep_query[q0:q1]
        if not block_keep.any():
            continue
        x = qs.features[qs.query_offsets[q0] : qs.query_offsets[q1]]
        if not block_keep.all():
            x = x[np.repeat(block_keep, counts[q0:q1])]
        if not all_columns:
            x = np.take(x, columns, axis=1)
        dest = out[written : written + x.shape[0]]
        if normalize:
            kept = np.flatnonzero(block_keep) + q0
            _scale_into(dest, x, mins[kept], maxs[kept], counts[kept])
        else:
            dest[...] = x
        written += x.shape[0]
    return out


def _scale_into(dest, x, mins, maxs, counts) -> None:
    span = maxs - mins
    span[span == 0] = 1  # then x - min is 0 as well
    np.subtract(x, np.repeat(mins, counts, axis=0), out=dest)
    np.divide(dest, np.repeat(span, counts, axis=0), out=dest)


def _query_blocks(query_offsets: np.ndarray, rows: int) -> Iterator[tuple[int, int]]:
    """Consecutive query ranges [q0, q1) of at most ``rows`` rows, or one larger query."""
    n_q = query_offsets.size - 1
    q0 = 0
    while q0 < n_q:
        q1 = int(np.searchsorted(query_offsets, query_offsets[q0] + rows, side="right")) - 1
        q1 = min(max(q1, q0 + 1), n_q)
        yield q0, q1
        q0 = q1


def _per_split(split: np.ndarray, mask: np.ndarray, weights: np.ndarray | None = None) -> dict[str, int]:
    w = np.ones(split.shape, dtype=np.int64) if weights is None else weights
    return {name: int(w[(split == code) & mask].sum()) for code, name in enumerate(SPLIT_NAMES)}
