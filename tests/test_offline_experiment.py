"""Training loop, evaluation against a NumPy reference, and a tiny end-to-end ``run_offline``."""

import json

import jax
import jax.numpy as jnp
import numpy as np

from ltrjax.offline.estimators import LabeledBatch, make_estimator
from ltrjax.offline.evaluate import make_evaluator, make_validator
from ltrjax.offline.experiment import run_offline
from ltrjax.offline.lists import bucket_queries, pad_queries
from ltrjax.offline.toy import toy_queryset
from ltrjax.offline.train import TrainConfig, fit


def _ndcg_ref(scores, labels, k):
    order = np.argsort(-scores, kind="stable")
    disc = 1 / np.log2(np.arange(2, len(scores) + 2))
    gains = 2.0 ** labels - 1
    dcg = np.sum(gains[order][:k] * disc[:k])
    idcg = np.sum(np.sort(gains)[::-1][:k] * disc[:k])
    return dcg / idcg if idcg > 0 else 0.0


def _ap_ref(scores, labels):
    rel = labels[np.argsort(-scores, kind="stable")] >= 1
    if not rel.any():
        return 0.0
    return float(np.sum(np.cumsum(rel) / np.arange(1, len(rel) + 1) * rel) / rel.sum())


def test_evaluator_matches_numpy_reference():
    qs = toy_queryset(n_queries=40, docs=(3, 40), seed=3)
    buckets = bucket_queries(qs, np.arange(40), np.random.default_rng(0), n_buckets=3)
    est = make_estimator("labeled")
    params, state = est.init(jax.random.PRNGKey(0), qs.n_features)
    params = {"ranker": jax.tree_util.tree_map(lambda x: x + 0.3 * jnp.ones_like(x), params["ranker"])}
    res = make_evaluator(est, buckets, drop_no_relevant=True)(params, state)
    feats = qs.features @ np.asarray(params["ranker"]["params"]["Dense_0"]["kernel"])[:, 0]
    per = {f"ndcg@{k}": [] for k in (1, 3, 5, 10)} | {"map": []}
    for q in range(40):
        sl = qs.query_slice(q)
        s, y = feats[sl], qs.labels[sl]
        if not (y > 0).any():
            continue
        for k in (1, 3, 5, 10):
            per[f"ndcg@{k}"].append(_ndcg_ref(s, y, k))
        per["map"].append(_ap_ref(s, y))
    assert res["n_queries"] == len(per["map"])
    for name, vals in per.items():
        np.testing.assert_allclose(res[name], np.mean(vals), rtol=1e-4)
    np.testing.assert_allclose(make_validator(est, buckets)(params, state), res["ndcg@10"], rtol=1e-5)


def test_fit_improves_validation_and_keeps_the_best_epoch():
    qs = toy_queryset(n_queries=80, seed=4)
    rng = np.random.default_rng(0)
    train = pad_queries(qs, np.flatnonzero(qs.split == 0), rng)
    vali = bucket_queries(qs, np.flatnonzero(qs.split == 1), rng)
    est = make_estimator("labeled", form="listwise")
    data = LabeledBatch(features=jnp.asarray(train.features), labels=jnp.asarray(train.labels, jnp.float32),
                        mask=jnp.asarray(train.mask))
    val = make_evaluator(est, vali)
    res = fit(est, data, jax.random.PRNGKey(0), qs.n_features, TrainConfig(batch_size=16, max_epochs=15, patience=50),
              validate=lambda p, s: val(p, s)["ndcg@10"])
    h = res.history
    assert h["epochs"] == 15 and h["n_batches"] == -(-data.mask.shape[0] // 16)
    assert h["best_vali"] == max(h["vali"])
    assert h["best_epoch"] == int(np.argmax(h["vali"])) + 1
    assert val(res.params, res.state)["ndcg@10"] == h["best_vali"]
    assert h["loss"][-1] < h["loss"][0]


def test_run_offline_end_to_end(tmp_path):
    qs = toy_queryset(n_queries=120, seed=5)
    cfg = {"experiment": {"trials": 2, "n_sessions": 20_000, "progress": False,
                          "estimators": ["prs", "production", "labeled"],
                          "click_model": {"threshold": 2}, "train": {"max_epochs": 5, "patience": 2},
                          "logging_chunk": 8192, "eval_buckets": 1}}
    out = run_offline(cfg, tmp_path, queryset=qs)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert (tmp_path / "results.md").exists()
    assert set(saved["algorithms"]) == {"prs", "production", "labeled"}
    for name, entry in saved["algorithms"].items():
        for m in ("ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "map"):
            assert 0.0 <= entry[m] <= 1.0
            assert entry[m] == np.mean([t[m] for t in entry["trials"]])
        assert len(entry["trials"]) == 2
    assert out["trials_info"][0]["sessions"] == 20_000
    # two trials use different seeds, so their production rankers differ
    prod = saved["algorithms"]["production"]["trials"]
    assert prod[0]["ndcg@10"] != prod[1]["ndcg@10"]
