"""Synthetic LETOR-like datasets shaped like the real ones (sizes, label mix, a BM25 column).

Each document has a latent relevance ``z = u_query + e_doc`` (unit variance); labels are
thresholds of ``z`` at its own quantiles, so the label mix matches the preset's exactly.
A few noisy "views" of ``z`` carry the relevance signal into the features, which also mix
shared per-document factors, per-query latents and noise, and are clipped to [0, 1] (some
mostly zero, a few constant, some uninformative). The BM25 column is a noisy monotone
function of ``z``. Features are drawn block by block into one float32 array, so memory
stays near the size of the result.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

import numpy as np
from scipy.special import ndtri

from .queryset import QuerySet, offsets_from_counts, random_split

_BLOCK_ROWS = 1 << 16
_QUERY_LATENTS = 4  # per-query latents shifting the features (removed by per-query scaling)
_SPREAD = np.float32(0.18)  # std of a feature around its center before clipping to [0, 1]


@dataclasses.dataclass(frozen=True)
class SyntheticParams:
    """Shape of a synthetic dataset; see PRESETS for values imitating real datasets."""

    name: str = "synthetic"
    n_queries: int = 500
    docs_mean: float = 25.0  # documents per query: docs_min + a log-normal with this mean ...
    docs_std: float = 12.0  # ... and about this spread, clipped at docs_max
    docs_min: int = 6
    docs_max: int = 80
    pin_max: bool = False  # give the largest query exactly docs_max documents
    n_features: int = 46
    label_probs: tuple[float, ...] = (0.74, 0.20, 0.06)
    bm25_feature: int | None = 25  # 1-based id of the BM25-like column
    bm25_signal: float = 0.3  # correlation of the BM25 score with the latent relevance
    query_share: float = 0.3  # share of the latent relevance variance that is per query
    n_views: int = 4  # noisy copies of the latent relevance that features mix
    view_noise: float = 1.5  # noise std of each view (relevance std is 1)
    informative: float = 0.6  # fraction of features that carry relevance signal
    signal: float = 0.6  # largest loading of a feature on its view
    n_factors: int = 6  # shared per-document factors that correlate the features
    sparse: float = 0.3  # fraction of features that are mostly 0
    constant_features: tuple[int, ...] = (6, 7, 8, 9, 10)  # 1-based ids, 0 everywhere
    # share of the latent relevance variance that is an interaction a*b of two per-document factors, each
    # carried by ``interaction_features`` features: invisible to a linear ranker, learnable by an MLP
    nonlinear: float = 0.0
    interaction_features: int = 10

    @property
    def y_max(self) -> int:
        return len(self.label_probs) - 1

    def __post_init__(self) -> None:
        if self.n_queries < 1 or self.n_features < 1:
            raise ValueError("a synthetic dataset needs at least one query and one feature")
        if not 1 <= self.docs_min <= self.docs_max:
            raise ValueError("need 1 <= docs_min <= docs_max")
        if len(self.label_probs) < 2 or min(self.label_probs) < 0:
            raise ValueError("label_probs needs at least two non-negative entries")
        if self.bm25_feature is not None and not 1 <= self.bm25_feature <= self.n_features:
            raise ValueError(f"bm25_feature {self.bm25_feature} outside 1..{self.n_features}")
        if self.bm25_feature in self.constant_features:
            raise ValueError("the BM25 feature cannot also be a constant feature")
        if not 0.0 <= self.nonlinear < 1.0:
            raise ValueError(f"nonlinear must lie in [0, 1), got {self.nonlinear}")
        free = self.n_features - len(set(self.constant_features)) - (self.bm25_feature is not None)
        if self.nonlinear > 0 and not 1 <= self.interaction_features <= free // 2:
            raise ValueError(f"interaction_features must lie in 1..{free // 2} (two disjoint sets among the "
                             f"{free} non-constant, non-BM25 features), got {self.interaction_features}")


# MSLR keeps 128 of its 133 non-behaviour features after dropping the constant ones (EBRank's
# dataset info); which ids those are is not published, so five arbitrary ids stand in.
_MSLR_CONSTANT = (96, 97, 98, 99, 100)

PRESETS: dict[str, SyntheticParams] = {
    # The embedded default: small and quick, shaped like MQ2007.
    "synthetic": SyntheticParams(),
    # Sizes, maxima and label mixes as published; docs_std is measured for MQ2008 and a guess
    # elsewhere (no published figure). bm25_signal is tuned for BM25 NDCG@5 ~0.5 (EBRank gain).
    # LETOR 4.0 (Qin & Liu 2013): 1692 queries / 69623 docs; 784 queries / 15211 docs.
    "synthetic_mq2007": SyntheticParams(
        name="synthetic_mq2007", n_queries=1692, docs_mean=41.1, docs_std=12.0,
        docs_min=6, docs_max=147, pin_max=True, label_probs=(0.74, 0.20, 0.06),
        bm25_signal=0.38,
    ),
    "synthetic_mq2008": SyntheticParams(  # BM25 as on the real files: NDCG@5 ~0.6
        name="synthetic_mq2008", n_queries=784, docs_mean=19.4, docs_std=22.0,
        docs_min=5, docs_max=121, pin_max=True, label_probs=(0.81, 0.13, 0.06),
        bm25_signal=0.4,
    ),
    # MSLR-WEB10K/30K: 10000 queries / 1,200,192 docs; 31531 queries / 3,771,125 docs.
    "synthetic_mslr10k": SyntheticParams(
        name="synthetic_mslr10k", n_queries=10000, docs_mean=120.0, docs_std=60.0,
        docs_min=1, docs_max=908, pin_max=True, n_features=136,
        label_probs=(0.52, 0.32, 0.13, 0.02, 0.01), bm25_feature=110,
        constant_features=_MSLR_CONSTANT, bm25_signal=0.33,
    ),
    "synthetic_mslr30k": SyntheticParams(
        name="synthetic_mslr30k", n_queries=31531, docs_mean=119.6, docs_std=60.0,
        docs_min=1, docs_max=1251, pin_max=True, n_features=136,
        label_probs=(0.52, 0.32, 0.13, 0.02, 0.01), bm25_feature=110,
        constant_features=_MSLR_CONSTANT, bm25_signal=0.33,
    ),
    # Yahoo! LTR challenge set 1 (Chapelle & Chang 2011): 29921 queries / 709877 docs, 700
    # feature ids of which 519 are used; label mix approximate. The real data has no known
    # BM25 id: the synthetic one puts a BM25-like column at id 1 so the BM25 warm start works.
    "synthetic_yahoo": SyntheticParams(
        name="synthetic_yahoo", n_queries=29921, docs_mean=23.7, docs_std=18.0,
        docs_min=1, docs_max=139, pin_max=True, n_features=700,
        label_probs=(0.261, 0.359, 0.287, 0.076, 0.017), bm25_feature=1, bm25_signal=0.33,
        constant_features=tuple(range(520, 701)),
    ),
    # The Vectorization papers' regime on a CPU budget (issue 20): 5 grades with Yahoo!'s label mix, enough queries
    # that the 1% production ranker is trained on about 100 (17000 x 0.6 x 0.01), Yahoo!-sized lists (~20 docs)
    # and 46 features so that a table of 8 runs fits on one core.
    "synthetic_vec_regime": SyntheticParams(
        name="synthetic_vec_regime", n_queries=17000, docs_mean=20.0, docs_std=12.0,
        docs_min=5, docs_max=60, label_probs=(0.261, 0.359, 0.287, 0.076, 0.017), bm25_signal=0.33,
    ),
    # Istella-S: 33018 queries / 3,408,630 docs (avg 103), 220 features; the maximum and
    # the label mix (mostly 0) are approximate; BM25-like column at id 1 as for Yahoo.
    "synthetic_istella_s": SyntheticParams(
        name="synthetic_istella_s", n_queries=33018, docs_mean=103.2, docs_std=50.0,
        docs_min=1, docs_max=1000, n_features=220,
        label_probs=(0.89, 0.02, 0.04, 0.03, 0.02), bm25_feature=1, bm25_signal=0.33,
        constant_features=(),
    ),
}


def synthetic_params(params: SyntheticParams | Mapping) -> SyntheticParams:
    """A SyntheticParams from itself or a mapping: ``preset`` (default "synthetic") plus any
    field overrides; unknown keys and None values are ignored."""
    if isinstance(params, SyntheticParams):
        return params
    base = PRESETS[params.get("preset") or "synthetic"]
    fields = {f.name for f in dataclasses.fields(SyntheticParams)}
    overrides = {k: v for k, v in params.items() if k in fields and v is not None}
    if "label_probs" in overrides:
        overrides["label_probs"] = tuple(float(p) for p in overrides["label_probs"])
    if "constant_features" in overrides:
        overrides["constant_features"] = tuple(int(i) for i in overrides["constant_features"])
    return dataclasses.replace(base, **overrides)


def generate_synthetic(params: SyntheticParams | Mapping, *, seed: int) -> QuerySet:
    """Draw a synthetic dataset (features in [0, 1]), split 60/20/20 by query with ``seed``."""
    p = synthetic_params(params)
    streams = [np.random.default_rng(s) for s in np.random.SeedSequence([seed, 0x51D]).spawn(4)]
    counts = docs_per_query(p, streams[0])
    offsets = offsets_from_counts(counts)
    n_docs = int(offsets[-1])

    rng = streams[1]
    query_part = rng.standard_normal(p.n_queries) * np.sqrt(p.query_share)
    latent = np.repeat(query_part, counts).astype(np.float32)
    latent += rng.standard_normal(n_docs, dtype=np.float32) * np.float32(np.sqrt(1 - p.query_share))
    interaction = _interaction(p, latent, streams[3]) if p.nonlinear > 0 else None
    relevance = latent if interaction is None else interaction[0]
    probs = np.asarray(p.label_probs, dtype=np.float64) / sum(p.label_probs)
    thresholds = np.quantile(relevance, np.cumsum(probs)[:-1]).astype(np.float32)
    labels = np.searchsorted(thresholds, relevance, side="right").astype(np.int32)

    features = np.empty((n_docs, p.n_features), dtype=np.float32)
    _draw_features(p, latent, counts, features, streams[2])
    if interaction is not None:
        _, factors, loadings = interaction
        for r0 in range(0, n_docs, _BLOCK_ROWS):  # the features carrying a and b, then clipped again
            block = features[r0: r0 + _BLOCK_ROWS]
            block += factors[r0: r0 + _BLOCK_ROWS] @ loadings
            np.clip(block, 0.0, 1.0, out=block)
    return QuerySet(
        name=p.name,
        features=features,
        labels=labels,
        query_offsets=offsets,
        qids=np.arange(1, p.n_queries + 1, dtype=np.int64),
        split=random_split(p.n_queries, seed),
        y_max=p.y_max,
        bm25_column=-1 if p.bm25_feature is None else p.bm25_feature - 1,
        feature_ids=np.arange(1, p.n_features + 1, dtype=np.int32),
        info={"source": f"synthetic:{p.name}", "seed": int(seed), "split_by": "random 60/20/20",
              **({} if interaction is None else {"interaction_feature_ids": [
                  (np.flatnonzero(row) + 1).tolist() for row in interaction[2]]})},
    )


def _interaction(p: SyntheticParams, latent: np.ndarray, rng: np.random.Generator):
    """(relevance, factors [N, 2], loadings [2, F]) of a dataset with ``nonlinear`` = lambda > 0.

    relevance = sqrt(1 - lambda) z + sqrt(lambda) a b with a, b ~ N(0, 1) per document (a b has unit variance
    and no correlation with a, b or z, so no linear function of the features predicts it); a and b each load
    with weight ``signal`` (times the features' 0.18 spread) on their own ``interaction_features`` features,
    drawn from the non-constant, non-BM25 ones. The views and BM25 still carry z alone."""
    lam = np.float32(p.nonlinear)
    factors = rng.standard_normal((latent.size, 2), dtype=np.float32)
    relevance = np.sqrt(1 - lam) * latent + np.sqrt(lam) * factors[:, 0] * factors[:, 1]
    excluded = set(int(i) - 1 for i in p.constant_features) | ({p.bm25_feature - 1} if p.bm25_feature else set())
    free = np.array([i for i in range(p.n_features) if i not in excluded])
    chosen = rng.permutation(free)[: 2 * p.interaction_features].reshape(2, p.interaction_features)
    loadings = np.zeros((2, p.n_features), np.float32)
    for row, cols in enumerate(chosen):
        loadings[row, cols] = _SPREAD * p.signal
    return relevance.astype(np.float32), factors, loadings


def docs_per_query(p: SyntheticParams, rng: np.random.Generator) -> np.ndarray:
    """``docs_min`` plus a rounded log-normal, clipped at ``docs_max``; the log-normal's
    location is tuned so that the mean is ``docs_mean``, its shape follows ``docs_std``.
    With ``pin_max`` the largest query gets exactly ``docs_max`` documents."""
    excess = max(p.docs_mean - p.docs_min, 1e-3)
    sigma = np.sqrt(np.log1p((p.docs_std / excess) ** 2))
    normal = rng.standard_normal(p.n_queries)

    def draw(mu: float) -> np.ndarray:
        return np.minimum(p.docs_min + np.rint(np.exp(mu + sigma * normal)), p.docs_max)

    lo, hi = -5 * sigma - 10, np.log(p.docs_max) + 5 * sigma
    for _ in range(60):  # bisection on the location; the clipped mean is monotone in it
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if draw(mid).mean() < p.docs_mean else (lo, mid)
    counts = draw(0.5 * (lo + hi)).astype(np.int64)
    if p.pin_max:
        counts[np.argmax(counts)] = p.docs_max
    return counts


def _draw_features(
    p: SyntheticParams,
    latent: np.ndarray,
    counts: np.ndarray,
    out: np.ndarray,
    rng: np.random.Generator,
) -> None:
    """Fill ``out`` [N, F] block by block: ``clip(center + 0.18 * (noise + mix @ loadings))``
    where ``mix`` stacks the shared factors, the relevance views and the query's latents."""
    n_feat = p.n_features
    n_inf = int(round(p.informative * n_feat))
    informative = np.zeros(n_feat, dtype=bool)
    informative[rng.permutation(n_feat)[:n_inf]] = True
    view_of = rng.integers(0, p.n_views, n_feat)
    signal_w = np.where(informative, p.signal * rng.uniform(0.3, 1.0, n_feat), 0.0)
    view_w = np.zeros((p.n_views, n_feat))
    view_w[view_of, np.arange(n_feat)] = signal_w
    factor_w = rng.standard_normal((p.n_factors, n_feat)) * (0.5 / np.sqrt(p.n_factors))
    query_w = rng.standard_normal((_QUERY_LATENTS, n_feat)) * (0.45 / np.sqrt(_QUERY_LATENTS))
    explained = (view_w**2).sum(0) + (factor_w**2).sum(0) + (query_w**2).sum(0)
    noise_sd = np.sqrt(np.maximum(1.0 - explained, 0.05))
    zero_rate = np.where(rng.random(n_feat) < p.sparse, rng.uniform(0.3, 0.85, n_feat), 0.0)
    center = np.where(zero_rate > 0, -_SPREAD * ndtri(np.maximum(zero_rate, 1e-9)), 0.5)
    query_latent = rng.standard_normal((p.n_queries, _QUERY_LATENTS)).astype(np.float32)
    loadings = (_SPREAD * np.concatenate([factor_w, view_w, query_w])).astype(np.float32)
    noise_sd = (_SPREAD * noise_sd).astype(np.float32)
    center = center.astype(np.float32)
    view_scale = np.float32(1.0 / np.sqrt(1.0 + p.view_noise**2))
    constant = np.asarray(p.constant_features, dtype=np.int64) - 1
    constant = constant[(constant >= 0) & (constant < n_feat)]
    bm25 = -1 if p.bm25_feature is None else p.bm25_feature - 1
    query_of_doc = np.repeat(np.arange(p.n_queries, dtype=np.int32), counts)
    r = np.float32(p.bm25_signal)
    n_mix = p.n_factors + p.n_views + _QUERY_LATENTS

    for r0 in range(0, latent.size, _BLOCK_ROWS):
        r1 = min(r0 + _BLOCK_ROWS, latent.size)
        z = latent[r0:r1]
        mix = np.empty((r1 - r0, n_mix), dtype=np.float32)
        mix[:, : p.n_factors + p.n_views] = rng.standard_normal(
            (r1 - r0, p.n_factors + p.n_views), dtype=np.float32
        )
        views = mix[:, p.n_factors : p.n_factors + p.n_views]
        views *= np.float32(p.view_noise)
        views += z[:, None]
        views *= view_scale
        mix[:, p.n_factors + p.n_views :] = query_latent[query_of_doc[r0:r1]]
        block = out[r0:r1]
        rng.standard_normal(out=block, dtype=np.float32)
        block *= noise_sd
        block += mix @ loadings
        block += center
        np.clip(block, 0.0, 1.0, out=block)
        block[:, constant] = 0.0
        if bm25 >= 0:
            score = r * z + np.sqrt(1 - r * r) * rng.standard_normal(r1 - r0, dtype=np.float32)
            block[:, bm25] = 1.0 / (1.0 + np.exp(-1.5 * score))
