"""The host-side layout of a whole dataset: documents in one flat array, queries as row ranges."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Sequence

import numpy as np

if TYPE_CHECKING:
    from .preprocess import PreprocessReport

SPLIT_NAMES = ("train", "vali", "test")
TRAIN, VALI, TEST = 0, 1, 2


@dataclasses.dataclass(frozen=True, eq=False)
class QuerySet:
    """All splits of a dataset in CSR-like form; docs of query ``i`` are rows
    ``query_offsets[i]:query_offsets[i+1]`` of ``features`` and ``labels``."""

    name: str
    features: np.ndarray  # float32 [N_docs, F]
    labels: np.ndarray  # int32 [N_docs]
    query_offsets: np.ndarray  # int64 [Q+1]
    qids: np.ndarray  # int64 [Q] original query ids
    split: np.ndarray  # int8 [Q]: 0 train, 1 vali, 2 test
    y_max: int
    bm25_column: int  # 0-based column of the BM25 feature, -1 if none
    feature_ids: np.ndarray  # int32 [F] original 1-based ids of the columns
    info: dict = dataclasses.field(default_factory=dict)
    # what reading and preprocessing dropped or merged (None before ``preprocess``)
    preprocess_report: "PreprocessReport | None" = None
    docids: np.ndarray | None = None  # str [N_docs]: the files' ``#docid`` comments (TREC ids), None: the data has none

    def __post_init__(self) -> None:
        n_docs, n_feat = self.features.shape
        n_q = self.qids.shape[0]
        if self.query_offsets.shape != (n_q + 1,) or self.query_offsets[0] != 0:
            raise ValueError("query_offsets must have Q+1 entries starting at 0")
        if self.query_offsets[-1] != n_docs or self.labels.shape != (n_docs,):
            raise ValueError("query_offsets[-1], labels and features disagree on the number of documents")
        if self.split.shape != (n_q,) or self.feature_ids.shape != (n_feat,):
            raise ValueError("split must have Q entries and feature_ids F entries")
        if self.docids is not None and self.docids.shape != (n_docs,):
            raise ValueError("docids must have one entry per document")
        if not -1 <= self.bm25_column < n_feat:
            raise ValueError(f"bm25_column {self.bm25_column} out of range for {n_feat} features")

    @property
    def n_queries(self) -> int:
        return int(self.qids.shape[0])

    @property
    def n_docs(self) -> int:
        return int(self.labels.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.features.shape[1])

    @property
    def docs_per_query(self) -> np.ndarray:
        return np.diff(self.query_offsets)

    def __repr__(self) -> str:
        """One line: name, sizes per split, grades and BM25 column, not every array (``print(qs)``)."""
        per_split = "/".join(str(int(np.sum(self.split == s))) for s in range(len(SPLIT_NAMES)))
        bm25 = f"BM25 column {self.bm25_column}" if self.bm25_column >= 0 else "no BM25 column"
        return (f"QuerySet({self.name!r}: {self.n_queries} queries ({'/'.join(SPLIT_NAMES)} {per_split}), "
                f"{self.n_docs} documents, {self.n_features} features, grades 0-{self.y_max}, {bm25})")

    def without_features(self) -> "QuerySet":
        """This query set with its feature matrix released: ``features`` becomes a read-only NaN placeholder of the
        same shape that takes no memory, everything else stays. For a caller that has laid the features out
        (``pad_and_bucket``) and reads only the rest (an online run: names, ids, splits; at MSLR-30K shape the flat
        copy is 2 GB). The placeholder's NaNs make an accidental read fail loudly downstream rather than pass."""
        return dataclasses.replace(self, features=np.broadcast_to(np.float32(np.nan), self.features.shape))

    def query_slice(self, i: int) -> slice:
        return slice(int(self.query_offsets[i]), int(self.query_offsets[i + 1]))

    def split_queries(self, split: int | str) -> np.ndarray:
        """Indices of the queries of one split (0/1/2 or "train"/"vali"/"test")."""
        code = SPLIT_NAMES.index(split) if isinstance(split, str) else int(split)
        return np.flatnonzero(self.split == code)


def random_split(
    n_queries: int, seed: int, fractions: Sequence[float] = (0.6, 0.2, 0.2)
) -> np.ndarray:
    """Split codes (int8 [Q]) assigning a seeded random ``fractions`` share of queries to
    train/vali/test; the counts are rounded so that they add up to ``n_queries``."""
    frac = np.asarray(fractions, dtype=np.float64)
    bounds = np.rint(np.cumsum(frac / frac.sum()) * n_queries).astype(np.int64)
    codes = np.zeros(n_queries, dtype=np.int8)
    order = np.random.default_rng(np.random.SeedSequence([seed, 0x5B17])).permutation(n_queries)
    codes[order[bounds[0] : bounds[1]]] = VALI
    codes[order[bounds[1] :]] = TEST
    return codes


def offsets_from_counts(counts: np.ndarray) -> np.ndarray:
    """Query offsets (int64 [Q+1]) from documents-per-query counts."""
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return offsets
