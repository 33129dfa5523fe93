"""LambdaMART-style trees for the offline estimators (``ranker: lambdamart``, ``ltrjax.offline.gbdt``).

The objective fed to LightGBM against a NumPy PRS pairwise-logistic reference (PRS Eq. 9/11), the trees in
JAX against LightGBM's own prediction, validation selection, a toy ranking better than random order, and a
smoke of the PRS part of ``experiment=offline_fidelity`` with trees.
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ltrjax.schema import offline_run
from ltrjax.offline import experiment as E
from ltrjax.offline_runner import experiment_config
from ltrjax.offline import gbdt
from ltrjax.offline.estimators import ClickBatch, Propensities, make_estimator
from ltrjax.offline.evaluate import make_evaluator, make_validator, query_metrics
from ltrjax.offline.rankers import make_scorer
from ltrjax.offline.train import TrainConfig, fit
from ltrjax.data.toy import toy_queryset

lgb = pytest.importorskip("lightgbm")
# one LightGBM thread: the same trees (GBDT_DEFAULTS), and no OpenMP threads waiting on the other xdist worker's core
ONE_THREAD = {"num_threads": 1}


def _prs_reference(s, pairs, theta, mask, n_sessions):
    """NumPy L = sum_q sum_ij c_ij min(1, theta_j / theta_i) log(1 + exp(-(s_i - s_j))) / N and its g, diag H."""
    w = np.minimum(1.0, theta[None, :] / theta[:, None])
    valid = mask[:, :, None] & mask[:, None, :]
    a = np.where(valid, pairs * w, 0.0)  # a[q, i, j]: weight of the pair (i above j)
    d = s[:, :, None] - s[:, None, :]
    rho = 1.0 / (1.0 + np.exp(d))  # sigma(-(s_i - s_j))
    g = -(a * rho).sum(2) + (a * rho).sum(1)  # d/ds_i of a_ij l(s_i - s_j) + a_ji l(s_j - s_i)
    h = (a * rho * (1 - rho)).sum(2) + (a * rho * (1 - rho)).sum(1)
    return g / n_sessions, h / n_sessions


def test_objective_fed_to_lightgbm_is_the_numpy_prs_gradient_and_hessian():
    rng = np.random.default_rng(0)
    q, k = 3, 5
    mask = np.ones((q, k), bool)
    mask[2, 3:] = False
    pairs = np.where(mask[:, :, None] & mask[:, None, :], rng.integers(0, 4, (q, k, k)), 0).astype(np.float32)
    pairs[:, np.arange(k), np.arange(k)] = 0.0
    n_sess = np.array([5.0, 3.0, 4.0], np.float32)
    theta = 1.0 / np.arange(1, k + 1, dtype=np.float32)
    batch = ClickBatch(features=jnp.zeros((q, k, 2)), mask=jnp.asarray(mask), n_sessions=jnp.asarray(n_sess),
                       clicks=jnp.zeros((q, k)), pairs=jnp.asarray(pairs), pairs_lambda=jnp.zeros((q, k, k)))
    props = Propensities(theta=jnp.asarray(theta), alpha=jnp.asarray(theta), beta=jnp.zeros(k))
    est = make_estimator("prs", ranker="lambdamart")
    _, state = est.init(jax.random.PRNGKey(0), 2, props)
    s = rng.normal(size=(q, k)).astype(np.float32)
    g, h = gbdt.make_objective(est, batch, state)(s[mask])
    g_ref, h_ref = _prs_reference(s.astype(np.float64), pairs, theta.astype(np.float64), mask, n_sess.sum())
    np.testing.assert_allclose(g, g_ref[mask] * q, rtol=1e-4, atol=1e-6)  # times the number of lists
    np.testing.assert_allclose(h, h_ref[mask] * q, rtol=1e-4, atol=1e-6)
    assert np.all(h >= 0)


@pytest.mark.parametrize("name", ["naive", "ips", "ips_oracle", "pns", "prs", "prs_lambda", "ips_lambda",
                                  "pair_debias_lambda", "labeled", "production"])
def test_closed_form_hessian_equals_one_hessian_vector_product_per_slot(name):
    """The pairwise estimators' closed-form diag H (``pair_hessian_diagonal``) is the exact one: it equals the
    generic path (one HVP per list slot) on random scores, ragged lists and lambda weights; estimators without
    ``pair_weights`` (the labeled ones) take the generic path either way."""
    rng = np.random.default_rng(3)
    q, k = 4, 7
    mask = np.ones((q, k), bool)
    mask[1, 4:] = False
    mask[3, 2:] = False
    valid = mask[:, :, None] & mask[:, None, :]
    pairs = np.where(valid, rng.integers(0, 3, (q, k, k)), 0).astype(np.float32)
    pairs[:, np.arange(k), np.arange(k)] = 0.0
    lam = np.where(valid, rng.random((q, k, k)), 0.0).astype(np.float32)
    theta = 1.0 / np.arange(1, k + 1, dtype=np.float32)
    labels = np.where(mask, rng.integers(0, 3, (q, k)), 0).astype(np.float32)
    props = Propensities(theta=jnp.asarray(theta), alpha=jnp.asarray(theta), beta=jnp.zeros(k))
    est = make_estimator(name, ranker="lambdamart")
    if est.kind == "labeled":
        from ltrjax.offline.estimators import LabeledBatch
        batch = LabeledBatch(features=jnp.zeros((q, k, 1)), labels=jnp.asarray(labels), mask=jnp.asarray(mask))
        assert est.pair_weights is None
    else:
        batch = ClickBatch(features=jnp.zeros((q, k, 1)), mask=jnp.asarray(mask),
                           n_sessions=jnp.asarray([5.0, 3.0, 4.0, 2.0]), clicks=jnp.zeros((q, k)),
                           pairs=jnp.asarray(pairs), pairs_lambda=jnp.asarray(pairs * lam))
        assert est.pair_weights is not None
    _, state = est.init(jax.random.PRNGKey(0), 1, props)
    s = jnp.asarray(rng.normal(size=(q, k)).astype(np.float32) * 2.0)
    g, h, _ = gbdt.score_derivatives(est)(s, state, batch)
    g_cols, h_cols, _ = gbdt.score_derivatives(est, by_columns=True)(s, state, batch)
    np.testing.assert_array_equal(np.asarray(g), np.asarray(g_cols))
    np.testing.assert_allclose(np.asarray(h)[mask], np.asarray(h_cols)[mask], rtol=2e-5, atol=1e-7)
    assert float(np.abs(np.asarray(h)[mask]).max()) > 0  # a check that can fail: the lists do carry curvature


def test_tree_arrays_score_like_lightgbm():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(400, 4)).astype(np.float32)
    y = np.sin(3 * x[:, 0]) + (x[:, 1] > 0.2) + rng.normal(scale=0.1, size=400)
    booster = lgb.train({"objective": "regression", "num_leaves": 7, "verbosity": -1, "min_data_in_leaf": 5},
                        lgb.Dataset(x, label=y), num_boost_round=12)
    xt = np.concatenate([x, rng.normal(size=(50, 4)).astype(np.float32)])
    for n in (1, 5, 12):
        got = np.asarray(gbdt.tree_scores(gbdt.tree_arrays(booster, n, n_trees=12), jnp.asarray(xt.reshape(50, 9, 4))))
        np.testing.assert_allclose(got.reshape(-1), booster.predict(xt, num_iteration=n), rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def toy_trial():
    qs = toy_queryset(n_queries=120, n_features=6, docs=(6, 30), y_max=2, seed=5, recipe="latent")
    exp = experiment_config({"experiment": {
        "n_sessions": 20_000, "progress": False, "ranker": "lambdamart", "click_model": {"threshold": 2},
        "train": {"max_epochs": 40, "patience": 10}, "logging_chunk": 8192, "eval_buckets": 1,
        "estimator_options": {"prs": {"gbdt": ONE_THREAD}}}})
    return qs, exp, E.prepare_trial(qs, exp, 0)


def test_labeled_trees_select_by_validation_and_beat_random_order(toy_trial):
    qs, exp, trial = toy_trial
    est = make_estimator("labeled", ranker="lambdamart", gbdt=ONE_THREAD)
    validate = make_validator(est, trial.vali)
    fr = fit(est, trial.labeled_train, jax.random.PRNGKey(0), qs.n_features, TrainConfig(max_epochs=40, patience=10),
             validate=validate)
    h = fr.history
    assert h["best_vali"] == pytest.approx(max(h["vali"]), abs=1e-6)
    assert h["best_epoch"] == int(np.argmax(h["vali"])) + 1
    # the selected ensemble, scored in JAX, is the one LightGBM validated
    assert validate(fr.params, fr.state) == pytest.approx(h["best_vali"], abs=1e-5)
    trees = make_evaluator(est, trial.test)(fr.params, fr.state)["ndcg@10"]
    rng = np.random.default_rng(0)
    random = np.mean([np.mean(np.concatenate([np.asarray(query_metrics(
        jnp.asarray(rng.normal(size=b.mask.shape)), b.labels, b.mask)["ndcg@10"])[np.any(b.mask & (b.labels > 0), -1)]
        for b in trial.test])) for _ in range(20)])
    assert trees > random + 0.1


def test_prs_trees_from_clicks_beat_random_order(toy_trial):
    _, exp, trial = toy_trial
    res = E.run_setting(trial, exp, estimators=["prs"], log=lambda *a: None)
    rng = np.random.default_rng(0)
    random = np.mean([np.mean(np.concatenate([np.asarray(query_metrics(
        jnp.asarray(rng.normal(size=b.mask.shape)), b.labels, b.mask)["ndcg@10"])[np.any(b.mask & (b.labels > 0), -1)]
        for b in trial.test])) for _ in range(20)])
    assert res["prs"]["ndcg@10"] > random + 0.1
    assert 1 <= res["prs"]["epochs"] <= 40


def test_unknown_rankers_and_treeless_estimators_are_refused():
    with pytest.raises(ValueError, match="lambdamart"):
        make_scorer("gbdt")
    with pytest.raises(ValueError, match="tree-ensemble"):
        make_estimator("dla", ranker="lambdamart")
    with pytest.raises(ValueError, match="linear or mlp"):
        make_estimator("vectorization", ranker="lambdamart")
    with pytest.raises(ValueError, match="unknown keys"):
        make_estimator("prs", ranker="lambdamart", gbdt={"num_leafs": 3})


def test_offline_fidelity_prs_part_with_trees_smoke(tmp_path):
    from ltrjax.offline_runner import run_fidelity

    cfg = {"experiment": {"trials": 2, "eval_buckets": 1, "parts": ["prs"],
                          "train": {"max_epochs": 8, "patience": 3},
                          "estimator_options": {n: {"gbdt": ONE_THREAD} for n in ("naive", "ips", "pns", "prs")},
                          "prs": {"ranker": "lambdamart", "estimators": ["naive", "ips", "pns", "prs"],
                                  "clicks_per_query": 20, "click_sweep": [20], "noise": [0.0, 0.1],
                                  "assumed_eta": [1.0, 2.0], "table1": False}}}
    qs = toy_queryset(n_queries=50, n_features=6, docs=(6, 30), y_max=2, seed=3, recipe="latent")
    res = run_fidelity(offline_run(cfg, "offline_fidelity"), tmp_path, queryset=qs, log=lambda *a: None)
    measured = [c for c in res["claims"] if c["paper"] == "PRS" and c["verdict"] != "untestable"]
    assert [c["id"] for c in measured] == ["prs_gt_ips", "prs_gt_pns", "prs_ips_gap_vs_noise", "prs_ips_gap_vs_eta"]
    assert all("lambdamart" in c["setting"] for c in measured)
    md = (tmp_path / "results.md").read_text()
    assert "lambdamart ranker" in md
    assert json.loads((tmp_path / "results.json").read_text())["prs"]["setting"]["ranker"] == "lambdamart"
    assert (tmp_path / "prs_sweeps.png").exists()
