"""A small random ``QuerySet`` for tests, examples and quick runs that need no real data.

Two recipes, one function (``toy_queryset(recipe=...)``); both draw the documents per query first and give column
0 as the BM25-like feature:

* ``"drawn"`` (the default; the offline protocol's toy): labels 0..y_max drawn per document from ``label_probs``;
  the features are a random linear map of a noisy latent relevance (labels / y_max plus ``noise``) plus unit noise,
  so a linear ranker can learn them but not perfectly. Splits by ``random_split``.
* ``"latent"`` (the online tests' toy): a standard-normal latent z per document; labels are its thresholds
  (``linspace(0.6, 1.6, y_max)``), the features noisy views of it (z times a per-column weight in [0.2, 1] plus
  unit noise). Splits 60/20/20 at random with the first three queries one per split, so every split is non-empty.

The features are min-max scaled per column to [0, 1].
"""

from __future__ import annotations

import numpy as np

from ltrjax.data.queryset import QuerySet, offsets_from_counts, random_split

RECIPES = ("drawn", "latent")


def toy_queryset(n_queries: int = 60, n_features: int = 8, docs=(8, 30), y_max: int = 4, seed: int = 0, *,
                 recipe: str = "drawn", label_probs=None, noise: float = 0.7) -> QuerySet:
    """``n_queries`` queries of ``docs[0]..docs[1]`` documents with ``n_features`` features and labels 0..``y_max``,
    by ``recipe`` (module docstring; ``label_probs`` and ``noise`` are the ``"drawn"`` recipe's)."""
    if recipe not in RECIPES:
        raise ValueError(f"recipe: expected one of {RECIPES}, got {recipe!r}")
    rng = np.random.default_rng(seed)
    counts = rng.integers(docs[0], docs[1] + 1, size=n_queries)
    n = int(counts.sum())
    if recipe == "drawn":
        p = np.asarray(label_probs if label_probs is not None else
                       np.array([0.5, 0.25, 0.13, 0.08, 0.04][: y_max + 1]), np.float64)
        labels = rng.choice(y_max + 1, size=n, p=p / p.sum()).astype(np.int32)
        latent = labels / y_max + noise * rng.normal(size=n) / y_max
        w = rng.normal(size=n_features)
        feats = latent[:, None] * w[None, :] + rng.normal(size=(n, n_features))
        feats = (feats - feats.min(0)) / (np.ptp(feats, 0) + 1e-9)
        split = random_split(n_queries, seed)
    else:
        z = rng.normal(size=n)
        labels = np.digitize(z, np.linspace(0.6, 1.6, y_max)).astype(np.int32)
        feats = z[:, None] * rng.uniform(0.2, 1.0, n_features) + rng.normal(size=(n, n_features))
        feats = (feats - feats.min(0)) / (feats.max(0) - feats.min(0))
        split = rng.choice(3, n_queries, p=[0.6, 0.2, 0.2]).astype(np.int8)
        split[:3] = [0, 1, 2]
    return QuerySet(name="toy", features=feats.astype(np.float32), labels=labels,
                    query_offsets=offsets_from_counts(counts), qids=np.arange(n_queries, dtype=np.int64),
                    split=split, y_max=y_max, bm25_column=0, feature_ids=np.arange(1, n_features + 1, dtype=np.int32))
