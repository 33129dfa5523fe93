"""A small synthetic ``QuerySet`` for tests and quick runs of the offline protocol.

Labels 0..y_max are drawn per document; features are a random linear map of a noisy latent
relevance plus noise, so a linear ranker can learn them but not perfectly.
"""

from __future__ import annotations

import numpy as np

from ltrjax.data.queryset import QuerySet, offsets_from_counts, random_split


def toy_queryset(n_queries: int = 60, n_features: int = 8, docs=(8, 30), y_max: int = 4,
                 seed: int = 0, label_probs=None, noise: float = 0.7) -> QuerySet:
    rng = np.random.default_rng(seed)
    counts = rng.integers(docs[0], docs[1] + 1, size=n_queries)
    n = int(counts.sum())
    p = np.asarray(label_probs if label_probs is not None else
                   np.array([0.5, 0.25, 0.13, 0.08, 0.04][: y_max + 1]), np.float64)
    labels = rng.choice(y_max + 1, size=n, p=p / p.sum()).astype(np.int32)
    latent = labels / y_max + noise * rng.normal(size=n) / y_max
    w = rng.normal(size=n_features)
    feats = latent[:, None] * w[None, :] + rng.normal(size=(n, n_features))
    feats = (feats - feats.min(0)) / (np.ptp(feats, 0) + 1e-9)
    return QuerySet(name="toy", features=feats.astype(np.float32), labels=labels,
                    query_offsets=offsets_from_counts(counts), qids=np.arange(n_queries, dtype=np.int64),
                    split=random_split(n_queries, seed), y_max=y_max, bm25_column=0,
                    feature_ids=np.arange(1, n_features + 1, dtype=np.int32))
