"""EBRank (ltrjax.online.policies.ebrank): the Beta prior's loss, posterior scores, and training."""

import functools
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import betaln

from ltrjax import clicks
from ltrjax.data.layout import pad_and_bucket
from ltrjax.data.queryset import QuerySet
from ltrjax.online.policies.base import NoHyper, QueryView, update_one
from ltrjax.online.policies.ebrank import (
    EBRank,
    EBRankHyper,
    EBRankOnlyBehaviour,
    EBRankOnlyPrior,
    beta_statistics,
    marginal_certainty,
    posterior_mean,
    prior_nll,
    prior_nll_betaln,
    prior_nll_constant,
)
from ltrjax.online.simulator import SimConfig, Simulator
from ltrjax.online.state import STAT_NAMES, DocCounters
from ltrjax.data.toy import toy_queryset

N_FEATURES = 4


# --------------------------------------------------------------------------- loss and formulas
def dropped(beta, c, n, clamp):
    """prior_nll's dropped constant of the data, in float64."""
    with jax.enable_x64(True):
        return np.asarray(prior_nll_constant(beta, jnp.asarray(c, jnp.float64), jnp.asarray(n, jnp.float64), clamp))


def test_prior_nll_matches_scipy_without_clamp():
    rng = np.random.default_rng(0)
    alpha = rng.uniform(0.05, 20, 500)
    beta = rng.uniform(0.5, 10, 500)
    n = rng.uniform(0, 300, 500)
    c = rng.uniform(0, 1, 500) * n
    got = np.asarray(jax.jit(prior_nll)(alpha, beta, c, n, 1e-3), np.float64) + dropped(beta, c, n, 1e-3)
    want = betaln(alpha, beta) - betaln(c + alpha, n - c + beta)
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-3)


def test_prior_nll_clamp_keeps_loss_and_gradients_finite():
    alpha, beta, clamp = jnp.float32(2.0), 5.0, 1e-3
    value_and_grad = jax.jit(jax.value_and_grad(prior_nll, argnums=(0, 2)), static_argnums=(1, 4))
    for c, n in [(10.0, 2.0), (30.0, 0.0), (5.0 + 2.0 + 1e-2, 2.0)]:  # C > N + beta
        assert c > n + beta
        value, grad = value_and_grad(alpha, beta, jnp.float32(c), jnp.float32(n), clamp)
        assert np.isfinite(float(value)) and all(np.isfinite(float(g)) for g in grad)
        assert float(value) + dropped(beta, c, n, clamp) == pytest.approx(
            float(betaln(2.0, beta) - betaln(c + 2.0, clamp)), rel=1e-4)
    # just below the clamp boundary the unclamped formula applies
    c, n = 6.0, 2.0  # n - c + beta = 1
    assert float(prior_nll(alpha, beta, c, n, clamp)) + dropped(beta, c, n, clamp) == pytest.approx(
        float(betaln(2.0, beta) - betaln(c + 2.0, n - c + beta)), rel=1e-5)


def loss_grid():
    """Documents on a grid of clicks C (0 to 1e6, both sides of the Stirling switch at 8), click rates C/N
    (0: N = 50 (1 + C), up to C > N, clamped) and features that put alpha from ~1e-3 to ~30."""
    cs = np.array([0, 1, 3, 7.5, 8, 20, 100, 1e3, 1e4, 1e5, 1e6])
    rates = np.array([0.0, 0.01, 0.1, 0.5, 0.9, 1.0, 1.5])
    c, rate = (a.ravel() for a in np.meshgrid(cs, rates, indexing="ij"))
    n = np.where(rate > 0, c / np.maximum(rate, 1e-9), 50.0 * (1 + c))
    x = np.random.default_rng(0).normal(size=(len(c), 3))
    return x, c, n


def linear_alpha(w, x):
    return jax.nn.softplus(x @ w) + 1e-4  # BetaPrior's link


def mean_loss(nll, w, x, c, n, beta=5.0, clamp=1e-3):
    return jnp.mean(nll(linear_alpha(w, x), beta, c, n, clamp))


@pytest.mark.parametrize("scale", [0.1, 1.0, 3.0])  # alpha ~ 0.7 (+-0.1), spread over 1e-3..30
@pytest.mark.parametrize("rows", ["small_c", "large_c", "all"])
def test_prior_nll_gradient_equals_betaln(scale, rows):
    """The model-parameter gradient of the lgamma/digamma loss equals betaln's (float32 both) within 1e-5
    relative, and the float64 reference's within 1e-5 too, on a grid with C up to 1e6 and alpha down to ~1e-3."""
    x, c, n = loss_grid()
    keep = {"small_c": c < 8, "large_c": c >= 1e4, "all": np.ones_like(c, bool)}[rows]
    x, c, n = x[keep], c[keep], n[keep]
    w = np.array([1.0, -2.0, 0.5]) * scale
    grad = lambda nll, *a: np.asarray(jax.jit(jax.grad(functools.partial(mean_loss, nll)))(*a), np.float64)  # noqa
    f32 = [jnp.asarray(a, jnp.float32) for a in (w, x, c, n)]
    got, ref32 = grad(prior_nll, *f32), grad(prior_nll_betaln, *f32)
    with jax.enable_x64(True):
        ref64 = grad(prior_nll_betaln, *(jnp.asarray(a, jnp.float64) for a in (w, x, c, n)))
    assert np.linalg.norm(got - ref32) <= 1e-5 * np.linalg.norm(ref32)
    assert np.linalg.norm(got - ref64) <= 1e-5 * np.linalg.norm(ref64)


def test_prior_nll_derivative_matches_finite_differences_float64():
    """The custom_jvp's digamma derivative is the derivative of the value it defines (central differences,
    float64), in every branch (C below and above 8, N - C + beta below and above 8, clamped)."""
    x, c, n = loss_grid()
    with jax.enable_x64(True):
        for alpha0 in (1e-3, 0.1, 1.0, 30.0):
            alpha = jnp.full(len(c), alpha0, jnp.float64)
            f = jax.jit(lambda a: prior_nll(a, 5.0, jnp.asarray(c), jnp.asarray(n), 1e-3))
            deriv = np.asarray(jax.jit(jax.vmap(jax.grad(lambda a, c, n: prior_nll(a, 5.0, c, n, 1e-3))))(
                alpha, jnp.asarray(c), jnp.asarray(n)))
            h = 1e-6 * alpha0
            fd = (np.asarray(f(alpha + h)) - np.asarray(f(alpha - h))) / (2 * h)
            roundoff = 1e-13 * np.abs(np.asarray(f(alpha))).max() / h
            np.testing.assert_allclose(deriv, fd, rtol=1e-6, atol=roundoff)


def test_prior_nll_value_differences_equal_betaln():
    """Only constants of the data are dropped: per document, loss + ``prior_nll_constant`` is scipy's betaln form
    (float64, to series error), so the loss difference between two parameter settings is betaln's: to 1e-8 in
    float64 and within float32 rounding (1e-4 relative) in float32."""
    x, c, n = loss_grid()
    w1, w2 = np.array([1.0, -2.0, 0.5]), np.array([0.8, -1.5, 0.9])

    def scipy_loss(w):  # float64 Eq. 14 per document, scipy's betaln (JAX's float64 betaln is only good to ~1e-6)
        alpha = np.log1p(np.exp(x @ w)) + 1e-4
        return betaln(alpha, 5.0) - betaln(c + alpha, np.maximum(n - c + 5.0, 1e-3))

    with jax.enable_x64(True):
        a64 = [jnp.asarray(a, jnp.float64) for a in (x, c, n)]
        per_doc = np.asarray(prior_nll(linear_alpha(w1, a64[0]), 5.0, a64[1], a64[2], 1e-3)
                             + prior_nll_constant(5.0, a64[1], a64[2], 1e-3))
        got64 = float(mean_loss(prior_nll, w1, *a64) - mean_loss(prior_nll, w2, *a64))
    np.testing.assert_allclose(per_doc, scipy_loss(w1), rtol=1e-9, atol=1e-9)
    want = float(np.mean(scipy_loss(w1) - scipy_loss(w2)))
    assert got64 == pytest.approx(want, abs=1e-8)  # scipy's own rounding of values up to ~6e5
    a32 = [jnp.asarray(a, jnp.float32) for a in (x, c, n)]
    got32 = float(mean_loss(prior_nll, w1, *a32)) - float(mean_loss(prior_nll, w2, *a32))
    assert got32 == pytest.approx(want, rel=1e-4)


def test_posterior_mean_and_marginal_certainty():
    alpha, beta, c, n, e = 2.0, 5.0, 3.0, 10.0, 7.0
    r = float(posterior_mean(alpha, beta, c, n))
    assert r == pytest.approx(5.0 / 17.0)
    assert float(marginal_certainty(r, alpha, beta, e)) == pytest.approx((5.0 / 17.0) / 14.0**2)
    # no behaviour: the prior mean; much behaviour: the click rate
    assert float(posterior_mean(alpha, beta, 0.0, 0.0)) == pytest.approx(2.0 / 7.0)
    assert float(posterior_mean(alpha, beta, 3e5, 1e6)) == pytest.approx(0.3, abs=1e-4)
    # certainty gains shrink as exposure grows
    mc = np.asarray(marginal_certainty(r, alpha, beta, jnp.array([0.0, 1.0, 10.0, 100.0])))
    assert np.all(np.diff(mc) < 0)


def test_beta_statistics_and_unknown_statistic():
    assert beta_statistics("exposure", 1, 2, 3, 4) == (1, 4, 4)
    assert beta_statistics("ips", 1, 2, 3, 4) == (2, 3, 4)
    with pytest.raises(ValueError):
        beta_statistics("clicks", 1, 2, 3, 4)
    data = pad_and_bucket(toy_queryset(n_queries=6, n_features=N_FEATURES, docs=(6, 30), y_max=2, seed=1,
                                       recipe="latent"), n_buckets=1)
    with pytest.raises(ValueError):
        EBRank(data, statistic="clicks")


# --------------------------------------------------------------------------- scores
@pytest.fixture(scope="module")
def toy():
    qs = toy_queryset(n_queries=24, n_features=N_FEATURES, docs=(6, 14), y_max=2, seed=5, recipe="latent")
    return pad_and_bucket(qs, n_buckets=1)


def _counters(rng, shape):
    impressions = rng.integers(0, 50, shape).astype(np.float32)
    exposure = impressions * rng.uniform(0.4, 1.0, shape).astype(np.float32)
    clicks_ = np.floor(exposure * rng.uniform(0, 1, shape)).astype(np.float32)
    ips = clicks_ * rng.uniform(1.0, 2.6, shape).astype(np.float32)
    z = np.zeros(shape, np.float32)
    return DocCounters(*(jnp.asarray(a) for a in (clicks_, ips, impressions, exposure, z, z)))


@pytest.mark.parametrize("statistic", ["exposure", "ips"])
def test_session_and_test_scores(toy, statistic):
    policy = EBRank(toy, epsilon=7.0, beta=5.0, statistic=statistic)
    params = policy.init(jax.random.PRNGKey(0), toy)
    bucket = toy.buckets[0]
    counters = _counters(np.random.default_rng(1), bucket.labels.shape)
    alpha = np.asarray(bucket.on_slots(policy.prepare(params, bucket)))  # per document, laid out [Qb, Db]
    assert np.all(alpha > 0) and np.all(np.isfinite(alpha))
    c, n, e = (np.asarray(x) for x in beta_statistics(statistic, counters.clicks, counters.ips_clicks,
                                                       counters.impressions, counters.exposure))
    r_hat = (c + alpha) / (n + alpha + 5.0)
    np.testing.assert_allclose(policy.test_scores(params, bucket, counters, True), r_hat, rtol=1e-5)
    np.testing.assert_allclose(policy.test_scores(params, bucket, counters, False), alpha / (alpha + 5.0), rtol=1e-5)
    view = QueryView(aux=jnp.asarray(alpha[0]), hyper=policy.default_hyper(), params=params,
                     counters=jax.tree_util.tree_map(lambda a: a[0], counters), n_entered=jnp.int32(3),
                     issue_count=jnp.int32(1))
    want = r_hat[0] + 7.0 * r_hat[0] / (e[0] + alpha[0] + 5.0) ** 2
    np.testing.assert_allclose(policy.session_scores(view, jax.random.PRNGKey(0)), want, rtol=1e-5)
    # epsilon comes from the view's typed hyper-parameters, not from the constructor
    other = view._replace(hyper=policy.make_hyper(epsilon=3.0))
    np.testing.assert_allclose(policy.session_scores(other, jax.random.PRNGKey(0)),
                               r_hat[0] + 3.0 * r_hat[0] / (e[0] + alpha[0] + 5.0) ** 2, rtol=1e-5)
    # ablations
    prior_only = EBRankOnlyPrior(toy, statistic=statistic)
    np.testing.assert_allclose(prior_only.session_scores(view, None), alpha[0] / (alpha[0] + 5.0), rtol=1e-5)
    behav = EBRankOnlyBehaviour(toy, statistic=statistic)
    np.testing.assert_allclose(behav.test_scores((), bucket, counters, True), c / np.maximum(n, 0.01), rtol=1e-5)
    np.testing.assert_array_equal(behav.test_scores((), bucket, counters, False), 0.0)


def test_make_hyper_changes_only_epsilon(toy):
    policy = EBRank(toy, epsilon=20.0)
    params = policy.init(jax.random.PRNGKey(0), toy)
    assert set(params) == {"prior"}  # the hyper-parameters are not parameters
    default = policy.default_hyper()
    new = policy.make_hyper(epsilon=0.5)
    assert type(new) is type(default) is EBRankHyper is policy.Hyper
    assert float(new.epsilon) == 0.5 and float(default.epsilon) == 20.0
    assert jnp.asarray(new.epsilon).dtype == jnp.float32  # a traced leaf: a grid shares one compilation
    assert [float(x) for x in jax.tree_util.tree_leaves(new)] == [0.5]  # epsilon is its only field
    assert jax.tree_util.tree_structure(new) == jax.tree_util.tree_structure(default)  # stackable members
    assert float(policy.make_hyper().epsilon) == 20.0  # no values: the configured ones
    with pytest.raises(ValueError, match="gamma"):
        policy.make_hyper(gamma=1.0)
    with pytest.raises(ValueError, match="gamma"):
        policy.make_hyper(epsilon=1.0, gamma=1.0)
    # the ablations that rank without exploration have no hyper-parameters
    assert type(EBRankOnlyBehaviour(toy).default_hyper()) is NoHyper
    with pytest.raises(ValueError, match="epsilon"):
        EBRankOnlyBehaviour(toy).make_hyper(epsilon=1.0)


# --------------------------------------------------------------------------- simulation
@pytest.mark.parametrize("statistic", ["ips", "exposure"])
def test_short_simulation_stays_finite(toy, statistic):
    # beta = 1 and no impression filter: IPS clicks exceed N + beta for some documents, so the clamp is used
    policy = EBRank(toy, statistic=statistic, beta=1.0 if statistic == "ips" else 5.0, min_impressions=0,
                    fit={"max_epochs": 20, "batch_size": 64, "patience": 5})
    sim = Simulator(toy, clicks.make_click_model({"kind": "pbm"}, 5),
                    SimConfig(sessions=600, warmup_sessions_per_query=0, n_updates=3, entry_prob=0.5, min_lanes=8))
    result = sim.run(policy, jax.random.PRNGKey(3), progress=False)
    assert len(result.train_info) == 2
    for info in result.train_info:
        assert not info.get("skipped"), info
        assert info["n_train"] > 20 and info["epochs"] >= 1
        assert np.isfinite(info["train_loss"]) and np.isfinite(info["val_loss"])
    if statistic == "ips":
        assert max(info["clamped_fraction"] for info in result.train_info) > 0
    assert np.all(np.isfinite(result.session_ndcg))
    assert np.all((result.session_ndcg >= 0) & (result.session_ndcg <= 1 + 1e-6))
    assert all(np.isfinite(v) for v in result.cum_ndcg.values())
    assert np.isfinite(result.warm_ndcg) and np.isfinite(result.cold_ndcg)


# --------------------------------------------------------------------------- the prior learns
def test_trained_prior_recovers_beta_binomial_mle():
    """Documents with R ~ Beta(0.5 + 4 x0, 5) and 200 Bernoulli(R) clicks each: training through
    ``update_one`` (``EBRank.update_population`` with one member) learns alpha increasing in x0 (near the
    truth), flat in a noise feature."""
    rng = np.random.default_rng(0)
    n_queries, n_docs, n = 300, 10, 200
    x = rng.uniform(size=(n_queries * n_docs, 2)).astype(np.float32)
    alpha_true = 0.5 + 4.0 * x[:, 0]
    clicked = rng.binomial(n, rng.beta(alpha_true, 5.0)).astype(np.float32)
    qs = QuerySet(name="mle", features=x, labels=np.zeros(x.shape[0], np.int32),
                  query_offsets=np.arange(0, x.shape[0] + 1, n_docs, dtype=np.int64),
                  qids=np.arange(n_queries, dtype=np.int64),
                  split=np.where(np.arange(n_queries) < 240, 0, 1).astype(np.int8), y_max=1, bm25_column=-1,
                  feature_ids=np.arange(1, 3, dtype=np.int32))
    data = pad_and_bucket(qs, n_buckets=1)
    bucket = data.buckets[0]
    assert bucket.labels.shape[0] == n_queries

    def dataset_order(values):
        out = np.zeros(bucket.labels.shape, np.float32)
        out[:, :n_docs] = values.reshape(n_queries, n_docs)
        return jnp.asarray(out)

    shown = dataset_order(np.full(x.shape[0], float(n)))
    counters = DocCounters(clicks=dataset_order(clicked), ips_clicks=dataset_order(clicked), impressions=shown,
                           exposure=shown, alpha_sum=shown, beta_sum=jnp.zeros_like(shown))
    policy = EBRank(data, beta=5.0, fit={"max_epochs": 200, "learning_rate": 0.05, "patience": 20})
    before = policy.init(jax.random.PRNGKey(0), data)
    after, info = update_one(policy, jax.random.PRNGKey(1), before, policy.default_hyper(), data, (counters,),
                             (bucket.doc_mask,), None)
    assert info["n_train"] == 2400 and info["n_val"] == 600
    # a retrain reads only the counters of its statistic and impressions (the simulator brings no others)
    read = set(policy.retrain_counters) | {"impressions"}
    assert read == {"clicks", "impressions", "exposure"}
    lean = counters.replace(**{name: None for name in STAT_NAMES if name not in read})
    same, same_info = update_one(policy, jax.random.PRNGKey(1), before, policy.default_hyper(), data, (lean,),
                                 (bucket.doc_mask,), None)
    assert same_info == info
    for got, want in zip(jax.tree_util.tree_leaves(same), jax.tree_util.tree_leaves(after)):
        np.testing.assert_array_equal(got, want)

    grid = jnp.array([[0.0, 0.5], [0.5, 0.5], [1.0, 0.5], [0.5, 0.0], [0.5, 1.0]])
    alpha_of = jax.jit(policy.alpha)
    a = np.asarray(alpha_of(after, grid))
    assert a[0] < a[1] < a[2]
    assert 2.5 < a[2] - a[0] < 5.5  # truth: 4
    assert a[1] == pytest.approx(2.5, abs=0.75)
    assert abs(a[4] - a[3]) < 0.5  # the noise feature is ignored (it was not at initialization)
    a0 = np.asarray(alpha_of(before, grid))
    assert abs(a0[4] - a0[3]) > 1.0

    mean_nll = jax.jit(lambda alpha: jnp.mean(prior_nll(alpha, 5.0, clicked, float(n), 1e-3)))
    loss = lambda params: float(mean_nll(alpha_of(params, jnp.asarray(x))))  # noqa: E731
    truth = float(mean_nll(jnp.asarray(alpha_true, jnp.float32)))
    assert loss(after) < loss(before) - 0.5
    assert loss(after) < truth + 0.05  # at (or beyond, by overfitting) the true prior's likelihood
