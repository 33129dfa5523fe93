"""Offline fidelity of Vectorization (KDD'22) on clicks from a true vector-based examination hypothesis.

Fast tests (run by default, marker ``fidelity``): the click models are what they claim to be, the
statistics and recovery measures behave, the experiment script's ``--smoke`` run writes its files.
Long tests (``fidelity`` and ``slow``; ``pytest -m fidelity``): the paired comparisons over 5 seeds of
``ltrjax.offline.fidelity.vector_eh_checks`` (about 25 minutes on one CPU core). Each asserts the
verdict measured when they were written (docs/fidelity.md); a claim of the issue that was
measured not to hold is an ``xfail(strict=True)``, which fails the run if the claim starts to hold.
"""

import importlib.util
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ltrjax.schema import offline_run
from ltrjax.clicks import make_click_model, sample_clicks
from ltrjax.offline import fidelity as F

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.fidelity


# --------------------------------------------------------------------------- fast
@pytest.mark.parametrize("d", [1, 2, 3])
def test_vector_eh_has_rank_d_keeps_grade_order_and_non_collinear_observations(d):
    m = F.vector_eh(d)
    sv = np.linalg.svd(m.matrix, compute_uv=False)
    assert np.sum(sv > 1e-9) == d and sv[d - 1] > 0.04 * sv[0]  # rank d, and the d-th direction is not negligible
    assert np.all(m.matrix >= 0) and np.all(m.matrix <= 1)
    # Vectorization Eq. 4: at every position the click rate orders the grades the same way
    assert np.all(np.diff(m.matrix, axis=0) > 0)
    if d > 1:
        o = m.observation / np.linalg.norm(m.observation, axis=1, keepdims=True)
        assert np.abs(o @ o.T).min() < 0.9  # some pairs of o_k are far from collinear
        # and no scalar examination fits: M[y, k] / M[y, 1] depends on y
        ratio = m.matrix[1:] / m.matrix[1:, :1]
        assert np.ptp(ratio, axis=0).max() > 0.1


def test_matrix_click_model_draws_the_matrix_rates():
    m = F.vector_eh(3)
    model = make_click_model(m.click_model(), 10)
    n = 40_000
    labels = jnp.tile(jnp.arange(5)[:, None], (1, 10))  # grade y in every slot of row y
    u = jax.random.uniform(jax.random.PRNGKey(0), (n, 5, 2, 10))
    clicks = sample_clicks(model, u, jnp.zeros((5, 10)), labels)
    rate = np.asarray(clicks.mean(0))
    se = np.sqrt(m.matrix * (1 - m.matrix) / n)
    assert np.all(np.abs(rate - m.matrix) < 5 * se + 1e-9)


def test_matrix_propensities_recover_theta_of_a_pbm_matrix():
    """For M = g(y) theta_k (d = 1) the CTR ratio the estimators are told is exactly theta_k / theta_1."""
    from ltrjax.offline.experiment import estimator_propensities
    from ltrjax.offline_runner import experiment_config
    from ltrjax.offline.logging import LoggedLists

    m = F.vector_eh(1)
    rng = np.random.default_rng(0)
    labels = jnp.asarray(rng.integers(0, 5, size=(30, 10)))
    logged = LoggedLists(features=jnp.zeros((30, 10, 2)), labels=labels, relevance=jnp.zeros((30, 10)),
                         mask=jnp.ones((30, 10), bool), doc_index=jnp.zeros((30, 10), jnp.int32),
                         query_index=jnp.arange(30))
    props = estimator_propensities(experiment_config(F.vector_eh_config(m)), logged, 4)
    np.testing.assert_allclose(np.asarray(props.theta), 1.0 / np.arange(1, 11), rtol=1e-5)


def test_subspace_r2_is_invariant_to_invertible_maps_and_discriminates():
    o = F.vector_eh(3).observation
    a = np.array([[2.0, -1.0, 0.5], [0.3, 1.0, 0.0], [1.0, 0.2, -3.0]])
    assert F.subspace_r2(o, o @ a) == pytest.approx(1.0, abs=1e-9)
    assert F.subspace_r2(o @ a, o) == pytest.approx(1.0, abs=1e-9)
    rng = np.random.default_rng(1)
    other = rng.normal(size=o.shape)
    assert F.subspace_r2(o, other) < 0.9
    assert F.subspace_r2(o, o[:, :2]) < 0.98  # a 2-dimensional span misses part of the 3-dimensional one
    np.testing.assert_allclose(F.principal_cosines(o, o @ a), 1.0, atol=1e-9)
    assert F.principal_cosines(o, o[:, :2])[-1] < 1e-6  # the missing direction has cosine 0
    assert F.principal_cosines(o, other)[-1] < 0.9


def test_paired_and_equivalence_tests():
    rng = np.random.default_rng(0)
    base = rng.normal(0.7, 0.02, size=8)
    better = base + 0.01 + rng.normal(0, 0.002, size=8)
    assert F.paired_test(better, base)["p_value"] < 0.01
    assert F.paired_test(base, better)["p_value"] > 0.9
    assert F.equivalence_test(base + rng.normal(0, 0.001, 8), base, 0.01)["p_value"] < 0.01
    assert F.equivalence_test(better + 0.02, base, 0.01)["p_value"] > 0.5


def test_fit_selects_checkpoints_from_select_from_while_min_steps_only_delays_stopping():
    """Regression (issue 11): Vectorization's forced 4500 steps (``min_steps``) made ``fit`` skip validation until
    then, so its result was the last iterate, never a selected checkpoint, unlike every other estimator's."""
    from ltrjax.offline.estimators.base import Estimator
    from ltrjax.offline.train import TrainConfig, fit

    def init(key, n_features, props):
        return {"w": jnp.zeros(())}, {"step": jnp.int32(0)}

    def loss(params, state, batch, key):
        return jnp.sum(batch["x"]) * params["w"] ** 2, state

    data = {"x": jnp.ones((4, 1))}
    cfg = TrainConfig(batch_size=4, max_epochs=5, patience=2, eval_every=1)
    for select_from, best_epoch in ((3, 5), (None, 20)):
        scores = iter([0.1, 0.2, 0.9] + [0.3] * 100)  # validation peaks at the 3rd validated epoch
        est = Estimator("stub", init, loss, None, min_steps=20, select_from=select_from)
        fr = fit(est, data, jax.random.PRNGKey(0), 1, cfg, validate=lambda p, s: next(scores))
        assert fr.history["epochs"] == 20  # one step per epoch: stopping waits for min_steps either way
        assert fr.history["best_epoch"] == best_epoch


def test_vectorization_selects_from_the_end_of_the_freeze():
    from ltrjax.offline.estimators import make_estimator

    est = make_estimator("vectorization", dim=3, freeze=500, joint_steps=4000)
    assert (est.select_from, est.min_steps) == (500, 4500)


def test_former_joint_schedule_shortens_the_budget_under_a_fixed_budget():
    """The 'joint phase 4000 > former 200 steps' check compares two schedules. Under the tables' fixed step budget an
    estimator's ``min_steps`` (what ``joint_steps`` sets) changes nothing, so the former schedule is a budget of
    freeze + 200 steps there; under early stopping it stays ``joint_steps``."""
    from ltrjax.offline.config import override

    cfg = F.vector_eh_config(F.vector_eh(3), 1000)
    assert cfg.train_for("vectorization").max_steps == 3000
    old = F.former_joint_schedule(cfg)
    assert old.options_for("vectorization")["joint_steps"] == 200
    assert old.train_for("vectorization").max_steps == 500 + 200 and old.train_for("naive").max_steps == 3000
    early = override(cfg, {"train": {"max_steps": None}})
    assert F.former_joint_schedule(early).train_for("vectorization") == early.train_for("vectorization")


def test_per_position_linear_click_functions_rank_differently_d3():
    """The cause of Vectorization's loss on d = 3 vector-EH clicks with linear rankers (docs/fidelity.md),
    measured on the population (Bayes posterior of basis_queryset(noise=1.0), no training): the true click rate
    P(click | x, k) ranks documents as well as E[gain | x] at every position (Eq. 4 holds in feature space), and
    log P(click | x, k) has rank 3 to within .02 in click rate (the softmax link is not the limit), but its best
    linear fit in the features, what <r(x), o_k> can be with a linear r, ranks worse the lower the position."""
    r = F.position_rankings(F.vector_eh(3), noise=1.0)
    assert min(r["bayes_click"]) > r["bayes_gain"] - 0.03
    assert r["log_rank_err"] < 0.02
    lin = np.asarray(r["linear_log"])
    assert lin[0] > r["linear_gain"] - 0.01  # the top position's fit ranks like the best linear scorer of the gain
    # lower positions' fits, and their blend, do not
    assert lin[-1] < lin[0] - 0.05 and np.mean(lin) < r["linear_gain"] - 0.03


def test_offline_fidelity_smoke(tmp_path):
    path = REPO / "experiments" / "offline_fidelity.py"
    spec = importlib.util.spec_from_file_location("script_offline_fidelity", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    saved = {k: getattr(jax.config, k) for k in ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs")}
    try:
        module.main(["--smoke", "--out", str(tmp_path)])
    finally:
        for k, v in saved.items():
            jax.config.update(k, v)
    from ltrjax.offline.fidelity_experiment import CLAIMS

    res = json.loads((tmp_path / "results.json").read_text())
    md = (tmp_path / "results.md").read_text()
    assert md.count("## Claims") == 1 and all(f"`{cid}`" in md for cid in CLAIMS)
    assert "oracle: told the true click model" in md  # oracle rows are labelled
    assert (tmp_path / "d_sweep.png").exists() and (tmp_path / "prs_sweeps.png").exists()
    assert [c["id"] for c in res["claims"]] == list(CLAIMS)
    by_id = {c["id"]: c for c in res["claims"]}
    for c in res["claims"]:
        assert {"id", "paper", "paper_cell", "ours", "n", "verdict", "p_value"} <= set(c)
        assert c["verdict"] in ("holds", "does not hold", "untestable", "refused", "uninformative in this regime",
                                f"undecided at {c['n']} trials")
        assert c["p_value"] is None or 0.0 <= c["p_value"] <= 1.0
        assert c["unit"] == "trial"
        if c["verdict"] in ("untestable", "refused"):
            assert c["reason"] and (c["p_value"] is None) == (c["verdict"] == "untestable")
        elif c["verdict"] != "holds":
            assert c["cause"]  # a tested cause, a passing control, the trials needed, or "none established"
    for cid in ("prs_gt_ips", "prs_gt_pns", "prs_ips_gap_vs_clicks", "prs_ips_gap_vs_noise", "prs_ips_gap_vs_eta",
                "vec_ge_affine_trust_bias", "vec_d1_eq_dla_pbm"):
        assert by_id[cid]["verdict"] != "untestable" and by_id[cid]["n"] == 2 and by_id[cid]["p_value"] is not None
    assert by_id["vec_gt_scalar_tiangong"]["verdict"] == "untestable"  # the smoke run has no tiangong setting
    assert by_id["vec_eh_beats_scalar"]["verdict"] == "untestable"
    assert "oracle" not in json.dumps(by_id["vec_ge_affine_trust_bias"]["setting"])  # learned Affine is the comparator
    for cid in ("vec_ge_affine_trust_bias", "vec_d1_eq_dla_pbm"):  # margins scale with the run's headroom
        c = by_id[cid]
        assert c["margin"] == pytest.approx(0.25 * max(c["headroom"], 0.0)) and set(c["controls"]) == {"production",
                                                                                                      "naive"}
    # a finished run's claims recomputed from its per-trial values under other verdict settings
    from ltrjax.offline_runner import recompute_claims

    again = {c["id"]: c for c in recompute_claims(tmp_path, {"margin_fraction": 0.5})["claims"]}
    c = again["vec_ge_affine_trust_bias"]
    assert c["margin"] == pytest.approx(0.5 * max(c["headroom"], 0.0)) and c["headroom"] == by_id[
        "vec_ge_affine_trust_bias"]["headroom"]
    assert "margin 0.5 x headroom" in c["setting"]
    assert f"| {c['margin']:.4f} ({c['headroom']:.4f}) |" in (tmp_path / "results.md").read_text()
    assert json.loads((tmp_path / "results.json").read_text())["config"]["margin_fraction"] == 0.5
    assert len(res["vectorization"]["tables"]["trust_bias"]["affine"]) == 2  # one NDCG per trial
    # the PRS part logged whole lists at the configured clicks per logged query
    for info in res["prs"]["logging"]:
        assert info["list_size"] >= info["mean_presented"] > 10 and abs(info["clicks_per_query"] - 20) < 1.0


def test_every_estimator_of_a_fidelity_table_has_the_same_schedule(tmp_path):
    """Equal treatment (issue 20): every estimator of a table gets the same step budget, validation cadence and
    best-checkpoint rule, read back from the run's results (the schedules its fits ran under)."""
    from ltrjax.offline_runner import run_fidelity
    from ltrjax.data.toy import toy_queryset

    # the smoke run's data, sessions and Vectorization freeze (experiments/offline_fidelity.py SMOKE): the same
    # compiled programs; joint_steps, not compiled, makes Vectorization's min_steps (4004) exceed the budget
    cfg = {"experiment": {"trials": 1, "eval_buckets": 1, "parts": ["vectorization"],
                          "train": {"max_steps": 24, "eval_every_steps": 8},
                          "estimator_options": {"vectorization": {"freeze": 4, "joint_steps": 4000,
                                                                  "base_hidden": [8]}},
                          "vectorization": {"dims": [2], "settings": ["trust_bias"], "n_sessions": 3000,
                                            "estimators": ["naive", "dla", "affine", "production", "labeled"]}}}
    run_fidelity(offline_run(cfg, "offline_fidelity"), tmp_path, queryset=toy_queryset(60, seed=3))
    saved = json.loads((tmp_path / "results.json").read_text())
    plan = saved["training"]["vectorization_trust_bias"]
    assert set(plan) == {"naive", "dla", "affine", "production", "labeled", "vectorization"}
    click = {n: s for n, s in plan.items() if n not in ("production", "labeled")}
    # Vectorization's own min_steps (freeze + joint = 4004) no longer lengthens its budget
    assert {s["max_steps"] for s in click.values()} == {24} and {s["steps_run"] for s in click.values()} == {24}
    for key in ("eval_every_steps", "first_validated_step", "patience_steps"):
        assert len({s[key] for s in click.values()}) == 1, key
    assert all(s["patience_steps"] > s["max_steps"] for s in plan.values())  # no early stopping
    assert all(s["max_steps"] >= 24 for s in plan.values())


# --------------------------------------------------------------------------- long
SEEDS = list(range(5))


@pytest.fixture(scope="module")
def checks():
    out = F.run_checks("linear_noisy", SEEDS, n_queries=300, n_sessions=200_000, dims=(3, 2), old_schedule=(3,))
    for c in out["claims"]:  # what the pins below are read against (pytest -s shows it)
        print(f"{c['setting']}: {c['claim']}: p = {c['p_value']}, {c['verdict']}")
    return out


def _claim(checks, setting, text):
    (c,) = [c for c in checks["claims"] if c["setting"] == setting and text in c["claim"]]
    return c


NOT_HOLD = "measured not to hold (docs/fidelity.md); strict: fails if it starts to hold"


# Two verdicts moved with a8a4f66, which gave every estimator the same fixed step budget (3,000 steps, validated every
# 99) instead of epochs with early stopping (DLA had stopped at its 300-epoch cap, 900 steps, still improving; d=3's
# IPS early-stopped at 186 steps): d=2 > DLA p = .005 -> .12-.16 (DLA .7663 -> .7926), d=3 > IPS p = .61 -> .01. With
# the old schedule passed back in (train / estimator overrides), this tree reproduces the old per-seed figures bit for
# bit (2026-11-27 bisect; docs/testing.md), so the pins follow the budgets of today's protocol.
@pytest.mark.slow
@pytest.mark.parametrize("d, ref, holds", [
    (3, "naive", False), (3, "ips", True), (3, "dla", False), (3, "affine", False), (3, "regression_em", True),
    (2, "naive", False), (2, "ips", False), (2, "affine", False), (2, "dla", False), (2, "regression_em", True)])
def test_vectorization_true_d_beats_scalar_estimators(checks, request, d, ref, holds):
    """Issue 11: on vector-EH clicks, Vectorization with the true d is significantly above each scalar estimator."""
    if not holds:
        request.applymarker(pytest.mark.xfail(strict=True, reason=NOT_HOLD))
    c = _claim(checks, f"vector EH d={d}", f"> {ref} on")
    assert c["p_value"] < 0.05 and c["mean_diff"] > 0


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason=NOT_HOLD)
def test_vectorization_recovers_observation_vectors_d3(checks):
    c = _claim(checks, "vector EH d=3", "recover the true o_k")
    assert c["verdict"] == "holds"


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason=NOT_HOLD)
def test_long_joint_phase_recovers_observation_vectors_better(checks):
    """4000 joint steps (was 200) moved the final o_k toward the true span (cosine .21 -> .51, p = .03); since
    Vectorization's checkpoint is selected on validation NDCG (from the end of the freeze), the selected o_k are
    often early ones and the difference is no longer significant (.15 -> .22, p = .22)."""
    raw = checks["raw"]["vector_eh_d3"]
    assert F.paired_test(raw["recovery_min_cosine"], raw["recovery_min_cosine_old_schedule"])["p_value"] < 0.05


@pytest.mark.slow
def test_base_vector_is_not_what_loses(checks):
    """Ranking by the mean of the learned o_k instead of Eq. 8's base vector gains < 0.01 NDCG@10, and no
    significant gain. One-sided, as the claim is: a base vector that ranks *better* than the mean o_k does not
    make it "what loses". (It was two-sided, |mean| < 0.01, and failed at -0.0103 on a 2-core run of dab10fd,
    i.e. the base vector ahead: per seed the difference ranges about -0.016 ... +0.005, and the same seeds give
    -0.0029 pinned to one core and -0.0056 on two, as XLA's CPU kernels round differently with the thread count.)"""
    raw = checks["raw"]["vector_eh_d3"]
    assert np.mean(np.subtract(raw["vectorization_mean_o"], raw["vectorization"])) < 0.01
    assert _claim(checks, "vector EH d=3", "mean_k o_k")["verdict"] == "does not hold"


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason=NOT_HOLD)
def test_vectorization_d1_matches_dla_on_pbm_clicks(checks):
    assert _claim(checks, "PBM (scalar EH), d=1", "= DLA")["verdict"] == "holds"


@pytest.mark.slow
def test_vectorization_matches_affine_on_trust_bias_clicks(checks):
    """Mean difference inside the 0.01 margin and no paired difference (5 seeds are too few for TOST at 0.05)."""
    c = _claim(checks, "trust bias, d=2", "= Affine")
    assert abs(c["mean_diff"]) < 0.01 and c["p_difference"] > 0.05
    raw = checks["raw"]["trust_bias_d2"]
    assert F.paired_test(raw["vectorization"], raw["naive"])["p_value"] < 0.05  # and trust bias does cost naive


# --------------------------------------------------------------------------- long: the confounded bed
# Issue 11's acceptance bed (docs/fidelity.md): MLP rankers, features that carry r(y) (noise 0.35), logging
# that also promotes a feature the labels and clicks ignore, d = 3's "anything but junk" weight 0.3; 10 seeds
# (100-109, fresh: the bed was chosen on seeds 0-1 and 10-14), 600 queries. About 17 minutes on one core.
CONFOUNDED_SEEDS = list(range(100, 110))


@pytest.fixture(scope="module")
def confounded():
    return F.run_checks("confounded_mlp", CONFOUNDED_SEEDS, n_queries=600, n_sessions=200_000, dims=(3, 2))


# The confounded bed's pins, rerun 2026-11-27 (93b7d10's tree passes every one of them). Two changes since touch its
# Affine comparisons: 'affine' is now the learned Affine (69bf6f8: it learns alpha_k, beta_k from the
# clicks, as the paper's baseline did; 93b7d10's was told the true ones and clipped negative labels at 0, an oracle),
# and every estimator has one fixed step budget (a8a4f66). At d = 2 Affine now reaches Vectorization (.9728 against
# .9723, p = .81; before .9693 against .9723, p = .004); on trust-bias clicks Vectorization equals Affine within .01
# (.9666 against .9683; before it was above the clipped oracle, .9578 against .9501). The learned Affine, not the
# budget, moved d = 2: under 93b7d10's schedule it is .9728 too, p = .10 (docs/results/fidelity_vector_eh/affine_schedule).
CONFOUNDED_NOT_HOLD = {(2, "affine")}


@pytest.mark.slow
@pytest.mark.parametrize("d, ref", [(d, ref) for d in (3, 2) for ref in F.SCALAR])
def test_confounded_vectorization_true_d_beats_every_scalar_estimator_and_affine(confounded, request, d, ref):
    """Issue 11: on vector-EH clicks, Vectorization with the true d is significantly above naive, IPS, DLA,
    RegressionEM and Affine (one-sided paired t over 10 seeds); at d = 2 not above Affine (CONFOUNDED_NOT_HOLD)."""
    if (d, ref) in CONFOUNDED_NOT_HOLD:
        request.applymarker(pytest.mark.xfail(strict=True, reason=NOT_HOLD))
    c = _claim(confounded, f"vector EH d={d}", f"> {ref} on")
    assert c["p_value"] < 0.05 and c["mean_diff"] > 0


@pytest.mark.slow
def test_confounded_vectorization_d1_matches_dla_on_pbm_clicks(confounded):
    assert _claim(confounded, "PBM (scalar EH), d=1", "= DLA")["verdict"] == "holds"


@pytest.mark.slow
def test_confounded_vectorization_on_trust_bias_clicks_is_not_below_affine(confounded):
    """Trust-bias clicks (a 2-dimensional vector EH): Vectorization (d = 2) equals Affine within 0.01, the paper's
    Table 2 claim (TOST over the same 10 seeds; Affine learns its alpha_k, beta_k from the clicks, as the paper's
    baseline did). Before 69bf6f8 and a8a4f66 it was significantly above an Affine told the true alpha_k, beta_k that
    clipped negative labels at 0 (CONFOUNDED_NOT_HOLD's note)."""
    c = _claim(confounded, "trust bias, d=2", "= Affine")
    assert c["verdict"] == "holds" and abs(c["mean_diff"]) < 0.01


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason=NOT_HOLD)
def test_confounded_vectorization_recovers_observation_vectors_d3(confounded):
    """Smallest principal-angle cosine .60 on average (seeds .02-.96): the span is found in some seeds only."""
    assert _claim(confounded, "vector EH d=3", "recover the true o_k")["verdict"] == "holds"


def test_beds_and_experiment_pass_the_bed_to_the_checks(monkeypatch, tmp_path):
    """The experiment's vector_eh block runs vector_eh_checks on the configured bed (ranker, logging boost, junk
    weight, seeds from first_seed) without training anything here."""
    from omegaconf import OmegaConf

    from ltrjax import offline_runner

    tb = F.BEDS["confounded_mlp"]
    assert tb.over() == {"ranker": "mlp", "logging_boost": {"column": 8, "weight": 1.5}}
    assert F.BEDS["linear_noisy"].over() == {"ranker": "linear"}
    from ltrjax.offline.config import TEST_BEDS  # the names the config accepts without importing fidelity

    assert tuple(F.BEDS) == TEST_BEDS
    qs = tb.queryset(20)
    assert qs.n_features == 12 and np.allclose(np.corrcoef(qs.features[:, 8], qs.labels)[0, 1], 0, atol=0.2)
    seen = {}

    def fake_checks(q, seeds, n_sessions, dims, margin, old_schedule, log=None, over=None, junk=0.15, **kw):
        seen.update(n_queries=q.n_queries, seeds=seeds, over=over, junk=junk, dims=dims)
        return {"claims": [], "raw": {}}

    monkeypatch.setattr(F, "vector_eh_checks", fake_checks)
    cfg = OmegaConf.create({"experiment": {
        **OmegaConf.to_container(OmegaConf.load(REPO / "conf" / "experiment" / "offline_fidelity.yaml")),
        "vectorization": {"settings": []}, "prs": {"estimators": []},
        "vector_eh": {"seeds": 2, "first_seed": 7, "n_queries": 25, "dims": [3]}}})
    offline_runner.run_fidelity(offline_run(cfg, "offline_fidelity"), tmp_path, queryset=tb.queryset(30))
    assert seen["seeds"] == [7, 8] and seen["n_queries"] == 25 and seen["junk"] == 0.3 and seen["dims"] == (3,)
    assert seen["over"]["ranker"] == "mlp" and seen["over"]["logging_boost"]["weight"] == 1.5


def test_prs_table1_pair_runs_on_trees_with_estimated_propensities(tmp_path):
    """PRS Table 1's analogue: prs_lambda told theta estimated by result randomization against Unbiased LambdaMART
    (pair_debias_lambda, learning t+/t- with the trees), ips_lambda an extra column; LightGBM trees on the same
    boosting-round budget; the sweeps are saved before it."""
    pytest.importorskip("lightgbm")
    from ltrjax.offline_runner import run_fidelity
    from ltrjax.data.toy import toy_queryset

    one_thread = {"gbdt": {"num_threads": 1}}  # the same trees (gbdt.GBDT_DEFAULTS), faster in a busy process
    cfg = {"experiment": {"trials": 2, "eval_buckets": 1, "parts": ["prs"], "randomization_sessions": 2000,
                          "estimator_options": {"prs_lambda": one_thread, "ips_lambda": one_thread,
                                                "pair_debias_lambda": one_thread},
                          "prs": {"estimators": ["ips", "prs"], "max_steps": 8, "clicks_per_query": 10,
                                  "click_sweep": [10], "noise": [0.1], "assumed_eta": [1.0], "table1": True,
                                  "table1_rounds": 3}}}
    # the smoke run's data (experiments/offline_fidelity.py): its PRS part compiled the linear ips and prs programs
    res = run_fidelity(offline_run(cfg, "offline_fidelity"), tmp_path, queryset=toy_queryset(60, seed=3),
                       log=lambda *a: None)
    (c,) = [c for c in res["claims"] if c["id"] == "prs_lambda_gt_unbiased_lambdamart"]
    assert c["verdict"] != "untestable" and c["n"] == 2 and 0.0 <= c["p_value"] <= 1.0
    assert set(c["ours"]) == {"prs_lambda", "pair_debias_lambda"}
    plan = res["training"]["prs_table1"]
    assert plan["prs_lambda"]["max_rounds"] == plan["pair_debias_lambda"]["max_rounds"] == plan["ips_lambda"][
        "max_rounds"] == 3
