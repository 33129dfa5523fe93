"""Behaviour features, the counterfactual learners (CFTopK/CFRandomK/CFEpsilon) and PRIOR."""

import dataclasses
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from omegaconf import OmegaConf

from ltrjax import clicks
from ltrjax.online import behaviour as behav
from ltrjax.runner import make_policy
from ltrjax.online.policies.base import QueryView
from ltrjax.online.policies.counterfactual import CFEpsilon, CFHyper, CFRandomK, CFTopK, CounterfactualL2
from ltrjax.online.policies.prior import Prior
from ltrjax.online.simulator import Simulator, trial_keys
from ltrjax.online.state import DocCounters
from tests.reference.online_loop import (
    COUNTER_NAMES,
    assert_matches_reference,
    make_counters,
    run_reference,
    shared_policy_noise,
)
from tests.online_toy import CONFIG, KEY, N_FEATURES, toy_data, toy_sim

CONF = Path(__file__).resolve().parent.parent / "conf" / "algorithm"


def shipped(name: str, data, **options):
    """The policy of conf/algorithm/``name`` with ``options`` changed; its fit is the config's, so test_policies'
    run of that config has compiled its programs (the retrain threshold ``min_impressions`` is host-side)."""
    return make_policy(name, OmegaConf.merge(load_algorithm(name), options), data)[0]


@pytest.fixture(scope="module")
def toy():
    """The shared toy protocol (tests/online_toy.py), PBM clicks."""
    data = toy_data()
    return data, toy_sim(data, clicks.make_click_model({"kind": "pbm", "examination": "log2"}, 5))


# --------------------------------------------------------------------------- behaviour features
def test_behaviour_features_on_hand_made_counters():
    # unseen; shown and clicked; shown, never clicked
    c = make_counters(clicks=[0, 3, 0], ips_clicks=[0, 6, 0], impressions=[0, 10, 4], exposure=[0, 5, 2],
                      alpha_sum=[0, 4, 2], beta_sum=[0, 1, 0.5])
    np.testing.assert_allclose(behav.ctr(c), [0, 0.3, 0])
    np.testing.assert_allclose(behav.ctr(c, prior_count=1.0), [0, 3 / 11, 0])  # UCBRank code: C / (1 + n)
    np.testing.assert_allclose(behav.delta(c), [-2.0, 0.5, -0.25])  # (C - sum beta) / sum alpha, -2 unseen
    np.testing.assert_allclose(behav.clicks_over_exposure(c), [0, 0.6, 0])
    np.testing.assert_allclose(behav.cf_target(c), [0, 0.6, 0])  # (sum c/theta) / n
    for name in behav.FEATURES:
        np.testing.assert_allclose(behav.feature(name, c)[0], behav.unseen_value(name))
    assert behav.unseen_value("delta") == -2.0 and behav.unseen_value("cn") == 0.0
    # Eq. 12: behaviour evidence where shown, the model elsewhere
    np.testing.assert_allclose(behav.independent_evidence(jnp.array([7.0, 7.0, 7.0]), c), [7.0, 0.5, -0.25])
    # pure and jittable, any shape, no NaN from 0/0
    grid = jax.tree_util.tree_map(lambda a: jnp.stack([a, a]), c)
    out = jax.jit(lambda cc: behav.feature("delta", cc))(grid)
    assert out.shape == (2, 3) and bool(jnp.all(jnp.isfinite(out)))
    with pytest.raises(ValueError):
        behav.feature("dwell", c)
    with pytest.raises(ValueError):
        behav.check_setting("mixed")


def test_delta_is_unbiased_under_trust_bias_and_ctr_is_not():
    """Monte Carlo: counters of UCBRank's affine click model; E[C - sum beta] = R sum alpha exactly."""
    model = clicks.ucbrank_affine(5)
    alpha_k, beta_k = (np.asarray(x) for x in clicks.affine_terms(model))
    rng = np.random.default_rng(0)
    n_docs, n_sessions, k = 60, 20000, 5
    r = rng.choice([0.0, 0.25, 0.5, 1.0], n_docs)
    shown = np.argsort(rng.random((n_sessions, n_docs)), axis=1)[:, :k]  # a random K-subset per session
    uniforms = rng.random((n_sessions, 1, k), dtype=np.float32)
    clicked = np.asarray(clicks.sample_clicks(model, uniforms, jnp.asarray(r[shown], jnp.float32),
                                              jnp.zeros(shown.shape, jnp.int32)), np.float64)
    sums = {name: np.zeros(n_docs) for name in ("clicks", "impressions", "alpha_sum", "beta_sum")}
    np.add.at(sums["clicks"], shown, clicked)
    np.add.at(sums["impressions"], shown, 1.0)
    np.add.at(sums["alpha_sum"], shown, np.broadcast_to(alpha_k, shown.shape))
    np.add.at(sums["beta_sum"], shown, np.broadcast_to(beta_k, shown.shape))
    counters = make_counters(**sums)
    delta = np.asarray(behav.delta(counters), np.float64)
    p = alpha_k * r[shown] + beta_k
    var = np.zeros(n_docs)
    np.add.at(var, shown, p * (1 - p))
    # standardized sum of (C - sum beta - R sum alpha) = sum alpha (Delta - R): mean 0, variance sum p(1-p)
    z = np.sum(sums["alpha_sum"] * (delta - r)) / np.sqrt(var.sum())
    assert abs(z) < 4, z
    per_doc = sums["alpha_sum"] * np.abs(delta - r) / np.sqrt(var)
    assert np.all(per_doc < 5)
    # the raw CTR is biased (trust bias clicks non-relevant documents): far outside the same band
    ctr = np.asarray(behav.ctr(counters), np.float64)
    assert np.max(sums["impressions"] * np.abs(ctr - r) / np.sqrt(var)) > 15


def test_cf_target_is_unbiased_and_cfrandomk_trains(toy):
    """(sum c/theta)/n from the simulator's own counters is unbiased for R (pooled 4 sigma, PBM)."""
    data, shared = toy
    sim = Simulator(data, shared.click_model, dataclasses.replace(CONFIG, warmup_sessions_per_query=0))
    policy = shipped("cfrandomk", data, min_impressions=2)
    result = sim.run(policy, jax.random.PRNGKey(5), progress=False, keep_logs=True)
    assert np.isfinite([result.cum_ndcg["test"], result.warm_ndcg, result.cold_ndcg]).all()
    assert sum(not i.get("skipped") for i in result.train_info) >= 1
    assert result.warm_ndcg == result.cold_ndcg  # wo_behav: no behaviour in the test scores

    theta = np.asarray(sim.click_model.examination)[:5]
    gains = np.asarray(sim.gains[0])
    state = result.final_states[0]
    counters = jax.tree_util.tree_map(np.asarray, state.counters)  # entry order
    order = np.asarray(state.order)
    r_entry = np.take_along_axis(gains, order[:-1], axis=1)
    target = np.asarray(behav.cf_target(counters))[:-1]
    n = counters.impressions[:-1]
    # exact variance of sum_t c_t/theta_t given the positions: sum_t (R/theta_t - R^2), from the session log
    var = np.zeros(gains.shape)
    shown = np.concatenate([log.shown for log in result.logs])
    rows = data.row_of_query[np.concatenate([log.query for log in result.logs])]
    for pos in range(5):
        ok = shown[:, pos] >= 0
        rr, dd = rows[ok], shown[ok, pos]
        np.add.at(var, (rr, dd), gains[rr, dd] / theta[pos] - gains[rr, dd] ** 2)
    var_entry = np.take_along_axis(var, order[:-1], axis=1)
    assert n.sum() == 5 * CONFIG.sessions
    z = np.sum(n * (target - r_entry)) / np.sqrt(var_entry.sum())
    assert abs(z) < 4, z
    for level in np.unique(gains[np.asarray(data.buckets[0].doc_mask)]):  # also per relevance level
        m = (r_entry == level) & (n > 0)
        z_level = np.sum(n[m] * (target[m] - level)) / np.sqrt(var_entry[m].sum())
        assert abs(z_level) < 4, (level, z_level)


# --------------------------------------------------------------------------- scores
def test_concat_cold_scores_ignore_live_counters(toy):
    data, _ = toy
    bucket = data.buckets[0]
    rng = np.random.default_rng(1)
    busy = make_counters(**{k: rng.uniform(1, 30, bucket.labels.shape).ravel() for k in COUNTER_NAMES})
    busy = jax.tree_util.tree_map(lambda a: a.reshape(bucket.labels.shape), busy)
    empty = DocCounters.zeros(bucket.labels.shape)
    for feature in ("cn", "delta"):
        policy = CFTopK(data, setting="concat", behaviour=feature)
        params = policy.init(jax.random.PRNGKey(0), data)
        assert abs(float(policy.w_b(params))) > 1e-3
        cold_busy = policy.test_scores(params, bucket, busy, warm=False)
        np.testing.assert_array_equal(cold_busy, policy.test_scores(params, bucket, empty, warm=False))
        # cold = f([x_nb, unseen x_b]) from the full model; warm = f([x_nb, live x_b])
        unseen = jnp.full(bucket.labels.shape + (1,), behav.unseen_value(feature))
        full = policy.model(params["model"], jnp.concatenate([bucket.features, unseen], axis=-1))
        np.testing.assert_allclose(cold_busy, full, rtol=1e-5, atol=1e-6)
        live = behav.feature(feature, busy)[..., None]
        warm = policy.test_scores(params, bucket, busy, warm=True)
        np.testing.assert_allclose(warm, policy.model(params["model"], jnp.concatenate([bucket.features, live], -1)),
                                   rtol=1e-5, atol=1e-5)
        assert not np.allclose(warm, cold_busy)
        # with no behaviour at all, warm and cold agree
        np.testing.assert_allclose(policy.test_scores(params, bucket, empty, warm=True), cold_busy, rtol=1e-6)
    # independent evidence: cold is the x_nb model, warm switches to Delta for shown documents
    ie = CFTopK(data, setting="ie", behaviour="delta")
    params = ie.init(jax.random.PRNGKey(0), data)
    cold = ie.test_scores(params, bucket, busy, warm=False)
    np.testing.assert_allclose(cold, ie.model(params["model"], bucket.features), rtol=1e-6)
    np.testing.assert_allclose(ie.test_scores(params, bucket, busy, warm=True), behav.delta(busy), rtol=1e-6)


def test_prior_fills_unseen_documents_with_h(toy):
    data, _ = toy
    bucket = data.buckets[0]
    policy = Prior(data)
    params = policy.init(jax.random.PRNGKey(2), data)
    rng = np.random.default_rng(2)
    shape = bucket.labels.shape
    seen = rng.random(shape) < 0.5
    n = np.where(seen, rng.integers(1, 40, shape), 0).astype(np.float32)
    exposure = n * 0.6
    c = rng.binomial(n.astype(np.int64), 0.3).astype(np.float32)
    counters = make_counters(clicks=c.ravel(), ips_clicks=(c / 0.6).ravel(), impressions=n.ravel(),
                             exposure=exposure.ravel(), alpha_sum=exposure.ravel(), beta_sum=np.zeros(n.size))
    counters = jax.tree_util.tree_map(lambda a: a.reshape(shape), counters)
    h = policy.prior_model(params["prior"], bucket.features)
    x_b = np.where(seen, np.asarray(behav.clicks_over_exposure(counters)), np.asarray(h))
    g = policy.model(params["model"], jnp.concatenate([bucket.features, jnp.asarray(x_b)[..., None]], -1))
    warm = policy.test_scores(params, bucket, counters, warm=True)
    np.testing.assert_allclose(warm, g, rtol=1e-5, atol=1e-6)
    # the logging scores are the same function of the live counters
    np.testing.assert_allclose(policy.doc_scores(policy.prepare(params, bucket), counters, policy.w_b(params)),
                               warm, rtol=1e-6)
    # an unseen document's x_b is h(x_nb), not the unseen value 0
    g_zero = policy.model(params["model"], jnp.concatenate([bucket.features, jnp.zeros(shape + (1,))], -1))
    assert not np.allclose(np.asarray(warm)[~seen], np.asarray(g_zero)[~seen])
    # cold: h alone, whatever the counters
    np.testing.assert_allclose(policy.test_scores(params, bucket, counters, warm=False), h, rtol=1e-6)


def test_epsilon_is_a_traced_hyper_parameter(toy):
    data, _ = toy
    policy = CFEpsilon(data, setting="concat")
    params = policy.init(jax.random.PRNGKey(0), data)
    assert set(params) == {"model"}  # epsilon is a hyper-parameter, not a parameter
    assert type(policy.default_hyper()) is CFHyper and float(policy.default_hyper().epsilon) == 1.0
    assert float(policy.make_hyper(epsilon=10).epsilon) == 10.0
    with pytest.raises(ValueError, match="beta"):
        policy.make_hyper(beta=1.0)
    # the noise scale is read from the session's hyper-parameters: one jitted scorer serves every epsilon
    bucket = data.buckets[0]
    view = QueryView(aux=policy.prepare(params, bucket)[0], hyper=policy.make_hyper(epsilon=0.0), params=params,
                     counters=DocCounters.zeros((bucket.width,)), n_entered=jnp.int32(3), issue_count=jnp.int32(1))
    scores = jax.jit(policy.session_scores)
    key = jax.random.PRNGKey(3)
    base = np.asarray(scores(view, key))
    noisy = np.asarray(scores(view._replace(hyper=policy.make_hyper(epsilon=10.0)), key))
    np.testing.assert_allclose(noisy - base, 10.0 * np.asarray(jax.random.uniform(key, base.shape)), rtol=1e-5,
                               atol=1e-5)
    assert scores._cache_size() == 1
    with pytest.raises(ValueError):
        CounterfactualL2(data, serving="softmax")
    with pytest.raises(ValueError):
        CFTopK(data, setting="concat", hidden=(8,))


# --------------------------------------------------------------------------- vectorized == reference
def numpy_cf_scores(policy, params, hyper, x, c, noise):
    """CF linear model (+ LeakyReLU) on [x_nb, C/E] in NumPy, plus epsilon-noise."""
    dense = params["model"]["params"]["Dense_0"]
    kernel, bias = np.asarray(dense["kernel"])[:, 0], np.asarray(dense["bias"])[0]
    z = x @ kernel[:N_FEATURES] + bias
    if policy.setting == "concat":
        e = c["exposure"]
        z = z + kernel[N_FEATURES] * np.where(e > 0, c["clicks"] / np.where(e > 0, e, 1), 0).astype(np.float32)
    s = np.where(z >= 0, z, np.float32(0.01) * z)
    if policy.serving == "epsilon":
        s = s + np.float32(hyper.epsilon) * noise
    return s


def cf_scorer(policy, run_key):
    """``run_reference`` scorer: the CF policy's NumPy scores with the simulator's noise draws."""
    def make(params, draws, inputs):
        def score(i, q, docs, counters):
            noise = shared_policy_noise(run_key, int(draws.session[i]), inputs["width"][q])[: len(docs)]
            return numpy_cf_scores(policy, params, inputs["hyper"], inputs["features"][q][docs], counters, noise)
        return score
    return make


@pytest.mark.parametrize("make_policy, hyper", [
    (lambda d: CFTopK(d, setting="concat", train=False), {}),
    (lambda d: shipped("cfepsilon_concat", d, min_impressions=2), {"epsilon": 2.0}),
], ids=["cftopk_concat_frozen", "cfepsilon_concat"])
def test_vectorized_equals_reference(toy, make_policy, hyper):
    data, sim = toy
    policy = make_policy(data)
    key = KEY
    result = sim.run(policy, key, hyper=hyper, progress=False, keep_logs=True)
    reference = run_reference(sim, policy, key, cf_scorer(policy, trial_keys(key).run), hyper)
    assert_matches_reference(sim, result, reference)
    n_updates = reference[-1]
    assert n_updates == (2 if policy.trains else 0)
    if not policy.trains:
        assert result.train_info == []


# --------------------------------------------------------------------------- end to end
@pytest.mark.parametrize("make_policy", [
    lambda d: shipped("cftopk", d, min_impressions=2),
    lambda d: shipped("prior_concat", d),
], ids=["cftopk", "prior_concat"])
def test_policies_run_and_retrain(toy, make_policy):
    data, sim = toy
    policy = make_policy(data)
    result = sim.run(policy, KEY, progress=False)
    values = [result.cum_ndcg[s] for s in ("train", "vali", "test")] + [result.warm_ndcg, result.cold_ndcg]
    assert np.isfinite(values).all() and 0 < result.warm_ndcg <= 1 and 0 < result.cold_ndcg <= 1
    done = [i for i in result.train_info if not i.get("skipped")]
    assert len(done) >= 1 and all(np.isfinite(i["val_loss"]) for i in done)


def load_algorithm(name: str):
    """An algorithm config with its ``defaults`` resolved (as Hydra composes conf/algorithm)."""
    cfg = OmegaConf.load(CONF / f"{name}.yaml")
    parents = [d for d in cfg.pop("defaults", []) if d != "_self_"]
    return OmegaConf.merge(*[load_algorithm(p) for p in parents], cfg) if parents else cfg


@pytest.mark.parametrize("name, cls, setting", [
    ("cftopk", CFTopK, "wo_behav"), ("cftopk_concat", CFTopK, "concat"),
    ("cfrandomk", CFRandomK, "wo_behav"), ("cfrandomk_concat", CFRandomK, "concat"),
    ("cfepsilon", CFEpsilon, "wo_behav"), ("cfepsilon_concat", CFEpsilon, "concat"),
    ("prior_concat", Prior, None),
])
def test_configs_build_policies(toy, name, cls, setting):
    data, _ = toy
    policy, tune = make_policy(name, load_algorithm(name), data)
    assert type(policy) is cls and policy.name == name and policy.trains
    if setting is not None:
        assert policy.setting == setting and policy.behaviour == "cn"
    if cls is CFEpsilon:
        assert policy.epsilon == 1.0 and list(tune["epsilon"]) == [0, 1, 10]
    else:
        assert not tune


def test_behaviour_features_on_host_counters_are_numpy_and_equal_the_device_ones():
    """A retrain's examples are host arrays: the behaviour features and targets of NumPy counters are computed by
    NumPy (an eager jnp operation compiled a program for every new example count) and equal, bit for bit, the
    same functions compiled (as inside the session scan), unseen documents included."""
    rng = np.random.default_rng(0)
    n = 1000
    impressions = rng.integers(0, 4, n).astype(np.float32) * rng.integers(0, 50, n).astype(np.float32)
    clicks = np.floor(impressions * rng.random(n, dtype=np.float32))
    theta = rng.uniform(0.1, 1.0, n).astype(np.float32)
    counters = DocCounters(clicks=clicks, ips_clicks=clicks / theta, impressions=impressions,
                           exposure=impressions * theta, alpha_sum=impressions * theta * 0.9,
                           beta_sum=impressions * np.float32(0.05))
    assert (impressions == 0).any() and (impressions > 0).any()
    fns = {"ctr": lambda c: behav.ctr(c), "ctr1": lambda c: behav.ctr(c, 1.0), "delta": behav.delta,
           "cn": behav.clicks_over_exposure, "cf_target": behav.cf_target}
    for name, fn in fns.items():
        host = fn(counters)
        device = np.asarray(jax.jit(fn)(jax.tree_util.tree_map(jnp.asarray, counters)))
        assert isinstance(host, np.ndarray) and host.dtype == np.float32, name
        np.testing.assert_array_equal(host, device, err_msg=name)
