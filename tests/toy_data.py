"""A small random QuerySet for tests that need no real data."""

import numpy as np

from ltrjax.data.queryset import QuerySet


def toy_queryset(n_queries=40, min_docs=6, max_docs=30, n_features=6, y_max=2, seed=0) -> QuerySet:
    """Labels from a latent score; features noisy views of it; column 0 is a BM25-like feature."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(min_docs, max_docs + 1, n_queries)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    z = rng.normal(size=offsets[-1])
    labels = np.digitize(z, np.linspace(0.6, 1.6, y_max)).astype(np.int32)
    x = z[:, None] * rng.uniform(0.2, 1.0, n_features) + rng.normal(size=(offsets[-1], n_features))
    x = ((x - x.min(0)) / (x.max(0) - x.min(0))).astype(np.float32)
    split = rng.choice(3, n_queries, p=[0.6, 0.2, 0.2]).astype(np.int8)
    split[:3] = [0, 1, 2]
    return QuerySet(name="toy", features=x, labels=labels, query_offsets=offsets,
                    qids=np.arange(n_queries, dtype=np.int64), split=split, y_max=y_max, bm25_column=0,
                    feature_ids=np.arange(1, n_features + 1, dtype=np.int32))
