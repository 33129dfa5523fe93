"""Synthetic generator: preset statistics, BM25 quality, determinism, preprocessing."""

import dataclasses
import pathlib

import numpy as np
import pytest
from omegaconf import OmegaConf
from scipy.stats import spearmanr

from ltrjax.data import PRESETS, SyntheticParams, generate_synthetic, load_dataset
from ltrjax.data.synthetic import docs_per_query, synthetic_params

CONF = pathlib.Path(__file__).resolve().parents[1] / "conf" / "dataset"

# (preset, queries, mean docs, max docs, features, label distribution) as published
PUBLISHED = [
    ("synthetic_mq2007", 1692, 41.1, 147, 46, (0.74, 0.20, 0.06)),
    ("synthetic_mq2008", 784, 19.4, 121, 46, (0.81, 0.13, 0.06)),
    ("synthetic_mslr10k", 10000, 120.0, 908, 136, (0.52, 0.32, 0.13, 0.02, 0.01)),
    ("synthetic_mslr30k", 31531, 119.6, 1251, 136, (0.52, 0.32, 0.13, 0.02, 0.01)),
    ("synthetic_yahoo", 29921, 23.7, 139, 700, None),
    ("synthetic_istella_s", 33018, 103.2, None, 220, None),
]


@pytest.mark.parametrize("name, n_queries, mean, maximum, n_features, labels", PUBLISHED)
def test_presets_match_published_shape(name, n_queries, mean, maximum, n_features, labels):
    p = PRESETS[name]
    assert (p.n_queries, p.n_features) == (n_queries, n_features)
    if labels is not None:
        np.testing.assert_allclose(p.label_probs, labels)
    counts = docs_per_query(p, np.random.default_rng(0))  # full size: cheap without features
    assert counts.size == n_queries
    assert abs(counts.mean() - mean) < 0.02 * mean
    assert counts.min() >= p.docs_min
    if maximum is not None:
        assert counts.max() == maximum


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_small_draws_have_the_preset_statistics(name):
    p = PRESETS[name]
    n_queries = 400 if p.docs_mean > 60 else 1500
    qs = generate_synthetic({"preset": name, "n_queries": n_queries}, seed=1)
    assert qs.n_queries == n_queries and qs.n_features == p.n_features and qs.y_max == p.y_max
    assert qs.features.dtype == np.float32 and qs.labels.dtype == np.int32
    assert abs(qs.docs_per_query.mean() - p.docs_mean) < 0.1 * p.docs_mean
    shares = np.bincount(qs.labels, minlength=p.y_max + 1) / qs.n_docs
    np.testing.assert_allclose(shares, np.array(p.label_probs) / sum(p.label_probs), atol=0.03)
    assert qs.features.min() >= 0 and qs.features.max() <= 1
    assert (qs.features[:, np.array(p.constant_features, dtype=int) - 1] == 0).all()
    np.testing.assert_array_equal(np.bincount(qs.split, minlength=3),
                                  np.rint(np.array([0.6, 0.2, 0.2]) * n_queries).astype(int))


def ebrank_ndcg5(scores, labels, offsets, y_max):
    gains = 0.1 + 0.9 * (2.0**labels - 1) / (2.0**y_max - 1)
    disc = 1 / np.log2(np.arange(2, 7))
    out = []
    for a, b in zip(offsets[:-1], offsets[1:]):
        g = gains[a:b]
        top = g[np.argsort(-scores[a:b], kind="stable")][:5]
        ideal = np.sort(g)[::-1][:5]
        out.append((top * disc[: top.size]).sum() / (ideal * disc[: ideal.size]).sum())
    return np.array(out)


@pytest.mark.parametrize("name", ["synthetic", "synthetic_mq2007", "synthetic_mslr10k"])
def test_bm25_column_is_a_realistic_weak_ranker(name):
    qs = load_dataset({"kind": "synthetic", "preset": name, "n_queries": 500}, seed=0)
    bm25 = qs.features[:, qs.bm25_column]
    relevant = np.maximum.reduceat(qs.labels, qs.query_offsets[:-1]) > 0
    ndcg = ebrank_ndcg5(bm25, qs.labels, qs.query_offsets, qs.y_max)[relevant].mean()
    assert 0.42 < ndcg < 0.62, ndcg
    assert 0.15 < spearmanr(bm25, qs.labels).correlation < 0.38


def test_same_seed_same_data_other_seed_other_data():
    params = {"preset": "synthetic", "n_queries": 60}
    a, b, c = (generate_synthetic(params, seed=s) for s in (3, 3, 4))
    for name in ("features", "labels", "query_offsets", "split"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert not np.array_equal(a.labels[:100], c.labels[:100])


def test_overrides_and_params_objects():
    p = synthetic_params({"preset": "synthetic_mslr10k", "n_queries": 7, "docs_mean": None})
    assert p.n_queries == 7 and p.docs_mean == PRESETS["synthetic_mslr10k"].docs_mean
    direct = dataclasses.replace(PRESETS["synthetic"], n_queries=20)
    assert generate_synthetic(direct, seed=0).n_queries == 20
    with pytest.raises(ValueError):
        SyntheticParams(bm25_feature=7, constant_features=(7,))


def test_default_config_loads_normalized_and_preprocessed():
    cfg = OmegaConf.load(CONF / "synthetic.yaml")
    qs = load_dataset(cfg, seed=0)
    assert qs.name == "synthetic" and qs.y_max == 2
    assert qs.info["features_dropped_constant"] == [6, 7, 8, 9, 10]
    assert qs.feature_ids[qs.bm25_column] == 25
    assert qs.docs_per_query.min() > 5
    assert qs.features.min() == 0 and qs.features.max() == 1
    for i in range(0, qs.n_queries, 37):
        block = qs.features[qs.query_slice(i)]
        spread = block.max(0) - block.min(0)
        np.testing.assert_array_equal(block.min(0), 0)
        np.testing.assert_array_equal(block.max(0)[spread > 0], 1)
    test_queries = qs.split_queries("test")
    assert (np.maximum.reduceat(qs.labels, qs.query_offsets[:-1])[test_queries] > 0).all()


def test_mslr_like_config_drops_behaviour_features():
    cfg = dict(OmegaConf.to_container(OmegaConf.load(CONF / "synthetic_mslr30k.yaml")), n_queries=40)
    qs = load_dataset(cfg, seed=0)
    assert qs.info["features_dropped_config"] == [134, 135, 136]
    assert qs.n_features == 128 and qs.feature_ids[qs.bm25_column] == 110 and qs.y_max == 4


def _r2(x, y):
    x = np.concatenate([x, np.ones((len(x), 1))], 1)
    res = y - x @ np.linalg.lstsq(x, y, rcond=None)[0]
    return 1.0 - res.var() / y.var()


def test_nonlinear_relevance_is_an_interaction_no_linear_ranker_sees():
    """``nonlinear`` = lambda puts lambda of the relevance variance into a*b (docs/fidelity.md): labels
    are then far better explained once the product of the interaction features is a feature, and no better with
    lambda = 0 (whose data is exactly the default's: the extra draws come from a stream of their own)."""
    params = {"preset": "synthetic_mq2008", "n_queries": 400}
    plain = generate_synthetic(params, seed=1)
    np.testing.assert_array_equal(plain.features, generate_synthetic({**params, "nonlinear": 0.0}, seed=1).features)
    qs = generate_synthetic({**params, "nonlinear": 0.6}, seed=1)
    ids_a, ids_b = qs.info["interaction_feature_ids"]
    assert len(ids_a) == len(ids_b) == 10 and not set(ids_a) & set(ids_b)
    assert qs.bm25_column + 1 not in ids_a + ids_b
    for data, gain in ((qs, 0.05), (plain, None)):
        x = data.features.astype(np.float64)
        prod = (x[:, np.asarray(ids_a) - 1].mean(1) * x[:, np.asarray(ids_b) - 1].mean(1))[:, None]
        y = data.labels.astype(np.float64)
        linear, with_product = _r2(x, y), _r2(np.concatenate([x, prod], 1), y)
        if gain is None:
            assert with_product - linear < 0.01
        else:
            assert with_product - linear > gain
    with pytest.raises(ValueError, match="nonlinear"):
        SyntheticParams(nonlinear=1.0)
    with pytest.raises(ValueError, match="interaction_features"):
        SyntheticParams(nonlinear=0.5, interaction_features=40)


@pytest.mark.parametrize("recipe", ["drawn", "latent"])
def test_toy_queryset_recipes(recipe):
    """``ltrjax.data.toy``: the one small QuerySet of the tests, in both recipes: the asked sizes, labels and splits,
    features scaled to [0, 1] and tracking the labels, the same data for the same seed."""
    from ltrjax.data.toy import toy_queryset

    qs = toy_queryset(n_queries=30, n_features=5, docs=(4, 9), y_max=3, seed=1, recipe=recipe)
    assert qs.n_queries == 30 and qs.n_features == 5 and qs.y_max == 3
    assert 4 <= qs.docs_per_query.min() and qs.docs_per_query.max() <= 9
    assert set(np.unique(qs.labels)) <= set(range(4)) and set(np.unique(qs.split)) == {0, 1, 2}
    assert qs.features.min() >= 0.0 and qs.features.max() <= 1.0
    assert max(abs(spearmanr(qs.features[:, j], qs.labels)[0]) for j in range(5)) > 0.2
    again = toy_queryset(n_queries=30, n_features=5, docs=(4, 9), y_max=3, seed=1, recipe=recipe)
    np.testing.assert_array_equal(qs.features, again.features)
    with pytest.raises(ValueError, match="recipe"):
        toy_queryset(recipe="nosuch")
