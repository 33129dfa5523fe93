"""UCBRank (UCBRank §4-5): the MC-dropout MLP, the exploration strategies, training and the simulator loop."""

from collections import Counter
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from omegaconf import OmegaConf

from ltrjax import clicks
from ltrjax.models.mc_dropout import (
    DropoutMLP,
    MCDropoutMLP,
    dropout_masks,
    example_masks,
    mc_dropout_scores,
    mc_samples,
)
from ltrjax.models.train import FitConfig, MemberFit, fit_members
from ltrjax.online import behaviour as behav
from ltrjax.runner import make_policy
from ltrjax.online.policies.base import QueryView, update_one
from ltrjax.online.policies.ucbrank import UCBHyper, UCBRank, ucb_bonus
from ltrjax.online.simulator import trial_keys
from ltrjax.online.state import DocCounters
from ltrjax.data.queryset import TRAIN
from ltrjax.online.training_data import collect_documents
from tests.reference.online_loop import COUNTER_NAMES, assert_matches_reference, make_counters, run_reference
from tests.online_toy import CONFIG, KEY, N_FEATURES, toy_data, toy_sim

CONF = Path(__file__).resolve().parent.parent / "conf" / "algorithm"
FIT = {"max_epochs": 40, "learning_rate": 0.01, "batch_size": 256}  # one compiled fit for every test


@pytest.fixture(scope="module")
def toy():
    """The shared toy protocol (tests/online_toy.py), UCBRank's affine clicks."""
    data = toy_data()
    return data, toy_sim(data, clicks.ucbrank_affine(5))


def numpy_mlp(params, x, mask=None, dtype=np.float32):
    """The DropoutMLP forward in NumPy (sigmoid hidden layers, optional mask on the last one)."""
    p = jax.tree_util.tree_map(lambda a: np.asarray(a, dtype), params["params"])
    h = np.asarray(x, dtype)
    for i in range(len([k for k in p if k.startswith("layers_")])):
        h = 1 / (1 + np.exp(-(h @ p[f"layers_{i}"]["kernel"] + p[f"layers_{i}"]["bias"])))
    if mask is not None:
        h = h * np.asarray(mask, dtype)
    return h @ p["out"]["kernel"][:, 0] + p["out"]["bias"][0]


def bucket_counters(bucket, rng, seen_prob=0.6):
    """Random dataset-order counters of a bucket; about ``seen_prob`` of the documents shown."""
    shape = bucket.labels.shape
    n = np.where(rng.random(shape) < seen_prob, rng.integers(1, 30, shape), 0).astype(np.float32)
    alpha, beta = n * rng.uniform(0.3, 0.6, shape), n * rng.uniform(0.05, 0.3, shape)
    c = np.minimum(rng.binomial(n.astype(np.int64), 0.4), n).astype(np.float32)
    return DocCounters(clicks=jnp.asarray(c), ips_clicks=jnp.asarray(c * 2), impressions=jnp.asarray(n),
                       exposure=jnp.asarray(alpha + beta), alpha_sum=jnp.asarray(alpha), beta_sum=jnp.asarray(beta))


# --------------------------------------------------------------------------- the MC-dropout model
def test_masks_shared_across_documents_and_redrawn_across_passes():
    model = MCDropoutMLP(N_FEATURES)
    params = model.init(jax.random.PRNGKey(0))
    x = jax.random.uniform(jax.random.PRNGKey(1), (3, 7, N_FEATURES))
    masks = np.asarray(jax.jit(model.masks)(jax.random.PRNGKey(2)))
    assert masks.shape == (10, 32) and set(np.unique(masks)) <= {0.0, 2.0}
    assert len({tuple(m) for m in masks}) == 10  # a different mask per pass
    samples = np.asarray(jax.jit(model.samples)(params, x, masks))
    assert samples.shape == (3, 7, 10)
    apply = jax.jit(model.module.apply)
    for i in range(10):  # pass i = the forward with ONE mask broadcast to every document
        np.testing.assert_allclose(samples[..., i], apply(params, x, masks[i]), rtol=1e-5, atol=1e-6)
    assert samples.std(-1).min() > 0
    # training masks: one per example, {0, 1/keep}, fresh when the minibatch (the step) changes
    draw = jax.jit(example_masks, static_argnums=(1, 2))
    seed = np.arange(1, 65, dtype=np.uint32) * np.uint32(2654435761)
    m = np.asarray(draw(seed, 32, 0.5))
    assert m.shape == (64, 32) and set(np.unique(m)) <= {0.0, 2.0}
    assert 0.4 < np.mean(m > 0) < 0.6 and len({tuple(r) for r in m}) == 64
    np.testing.assert_array_equal(draw(seed, 32, 0.5), m)  # deterministic given the batch
    perm = np.random.default_rng(0).permutation(64)
    assert not np.array_equal(np.asarray(draw(seed[perm], 32, 0.5)), m[perm])


def test_mc_mean_and_std_equal_numpy_recomputation():
    """Eq. 15-16 with the same masks: mean and the 1/N std over 10 passes, in float64 NumPy."""
    params = DropoutMLP().init(jax.random.PRNGKey(3), jnp.zeros((1, N_FEATURES)))
    x = np.random.default_rng(0).random((40, N_FEATURES)).astype(np.float32)
    key = jax.random.PRNGKey(4)
    mean, std = mc_dropout_scores(params, x, key, n_passes=10)
    masks = np.asarray(dropout_masks(key, 10, 32, 0.5))
    scores = np.stack([numpy_mlp(params, x, m, np.float64) for m in masks], axis=-1)
    np.testing.assert_allclose(mean, scores.mean(-1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(std, np.sqrt(np.mean((scores - scores.mean(-1, keepdims=True)) ** 2, -1)),
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(std, scores.std(-1, ddof=0), rtol=1e-4, atol=1e-5)
    # the deterministic forward: no mask, no rescaling
    np.testing.assert_allclose(DropoutMLP().apply(params, x), numpy_mlp(params, x, None, np.float64),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(mc_samples(DropoutMLP(), params, x, masks), scores, rtol=1e-5, atol=1e-5)


def test_mc_dropout_std_shrinks_with_training_data():
    """Dropout-trained MLP, noisy target: the mean MC std at held-out points falls from 50 to 5,000 examples,
    both with the same fit (so fewer optimizer steps for 50 examples, as in the policy) and with the 50
    examples repeated 100x (the same number of steps: only the data's diversity differs). Averaged over three
    fit keys: one fit's 5000/50 ratio ranges .72-.83 with the key (and moved when the epoch shuffle changed);
    the mean of three is .77."""
    dim = 20
    model = MCDropoutMLP(dim)
    cfg = FitConfig(optimizer="adam", learning_rate=0.01, batch_size=500, max_epochs=30, patience=30)
    fit = MemberFit(model.loss, cfg)
    rng = np.random.default_rng(0)

    def target(x):
        return np.sin(3 * x[:, 0]) + x[:, 1]

    def examples(n, repeat=1):
        x = rng.uniform(-1, 1, (n, dim)).astype(np.float32)
        y = (target(x) + 0.3 * rng.normal(size=n)).astype(np.float32)
        x, y = np.repeat(x, repeat, 0), np.repeat(y, repeat, 0)
        return {"features": x, "target": y, "seed": rng.integers(0, 2**32, len(y), dtype=np.uint32)}

    held_out = rng.uniform(-1, 1, (500, dim)).astype(np.float32)
    params0 = model.init(jax.random.PRNGKey(0))
    sets = {"50": examples(50), "50x100": examples(50, 100), "5000": examples(5000)}
    # one population of nine members (three fit keys per training set): one compiled fit, and each member fits as
    # a population of one would (fits do not depend on their padding nor on the other members)
    trains = [train for train in sets.values() for _ in range(3)]
    vals = [{"features": t["features"], "target": t["target"]} for t in trains]  # no seed: dropout-free validation
    nine = jax.tree_util.tree_map(lambda a: jnp.stack([a] * 9), params0)
    fit_keys = jnp.concatenate([jax.random.split(jax.random.PRNGKey(1), 3)] * 3)
    params, infos = fit_members(fit, nine, trains, vals, fit_keys, "t", (5000, 5000))
    assert all(not i.get("skipped") and i["n_train"] == len(t["target"]) for i, t in zip(infos, trains))
    stds = {name: float(np.mean([jnp.mean(model.mc_scores(jax.tree_util.tree_map(lambda a: a[m], params), held_out,
                                                          jax.random.PRNGKey(2))[1]) for m in range(3 * i, 3 * i + 3)]))
            for i, name in enumerate(sets)}
    # MC dropout with a fixed rate does not concentrate (the std falls, but not towards 0)
    assert stds["5000"] < 0.8 * stds["50"], stds
    assert stds["5000"] < 0.9 * stds["50x100"], stds


# --------------------------------------------------------------------------- scoring
def test_ucb_bonus_on_hand_made_counters():
    impressions = jnp.array([4.0, 1.0, 0.0, 9.0])
    np.testing.assert_allclose(ucb_bonus(7, impressions), np.sqrt(np.log(7) / np.array([4, 1, 1, 9])), rtol=1e-6)
    np.testing.assert_array_equal(ucb_bonus(1, impressions), 0.0)  # log 1 = 0: no bonus in a query's first session
    assert np.all(np.diff(np.asarray(ucb_bonus(jnp.arange(2, 50), 3.0))) > 0)  # grows with T_q
    assert np.all(np.diff(np.asarray(ucb_bonus(20, jnp.arange(1.0, 50.0)))) < 0)  # shrinks with T_d


def test_strategies_on_hand_made_inputs(toy):
    data, _ = toy
    score = jnp.array([0.3, 0.9, 0.1, 0.5])
    aux = {"score": score, "std": jnp.array([0.5, 0.0, 1.0, 0.1]), "shown": jnp.array([True, True, False, True])}
    counters = make_counters(impressions=[4, 1, 0, 9], alpha_sum=[2, 0.5, 0, 4])
    view = QueryView(aux=aux, hyper=UCBHyper(exploration=jnp.float32(0.5)), params=None, counters=counters,
                     n_entered=jnp.int32(4), issue_count=jnp.int32(7))
    key = jax.random.PRNGKey(5)
    u = jax.random.uniform(key, (4,))

    def scores(**kw):
        return np.asarray(UCBRank(data, **kw).session_scores(view, key))

    np.testing.assert_array_equal(scores(strategy="topk"), score)  # argsort of f: [1, 3, 0, 2]
    assert list(np.argsort(-scores(strategy="topk"))) == [1, 3, 0, 2]
    np.testing.assert_allclose(scores(strategy="epsilon"), score + 0.5 * u, rtol=1e-6)
    np.testing.assert_array_equal(scores(strategy="randomk"), u)  # ignores the model
    other = view._replace(aux={k: v[::-1] for k, v in aux.items()})
    np.testing.assert_array_equal(UCBRank(data, strategy="randomk").session_scores(other, key), u)
    ucb = scores(strategy="ucb")
    np.testing.assert_allclose(ucb, [0.55, 0.9, 0.6, 0.55], rtol=1e-6)  # f + lambda * MC std
    assert list(np.argsort(-ucb, kind="stable"))[:2] == [1, 2]  # the uncertain document overtakes two better ones
    # IE: sqrt(log T_q / T_d) for documents shown at the refresh, the MC std (or the code's count) otherwise
    bonus = np.sqrt(np.log(7) / np.array([4, 1, 1, 9]))
    np.testing.assert_allclose(scores(strategy="ucb", setting="ie"),
                               score + 0.5 * np.where(aux["shown"], bonus, aux["std"]), rtol=1e-6)
    np.testing.assert_allclose(scores(strategy="ucb", setting="ie", ie_unshown_bonus="count"),
                               score + 0.5 * bonus, rtol=1e-6)
    # lambda is a traced hyper-parameter
    policy = UCBRank(data, exploration=0.5)
    params = policy.init(jax.random.PRNGKey(0), data)
    assert set(params) == {"model", "dropout_key"}  # lambda is not a parameter
    assert type(policy.default_hyper()) is UCBHyper
    assert float(policy.make_hyper(exploration=10).exploration) == 10.0
    assert float(policy.default_hyper().exploration) == 0.5
    with pytest.raises(ValueError, match="epsilon"):
        policy.make_hyper(epsilon=1.0)
    # the scores read lambda from the view (the constructor's value is only the default)
    np.testing.assert_allclose(UCBRank(data, exploration=7.0).session_scores(view, key), ucb, rtol=1e-6)
    for bad in ({"strategy": "softmax"}, {"setting": "mixed"}, {"ucb_center": "median"}, {"ie_unshown_bonus": "x"}):
        with pytest.raises(ValueError):
            UCBRank(data, **bad)


def test_prepare_switches_independent_evidence_and_refresh_redraws_masks(toy):
    data, _ = toy
    bucket = data.buckets[0]
    behaviour = bucket_counters(bucket, np.random.default_rng(1))
    shown = np.asarray(behaviour.alpha_sum) > 0
    delta = np.asarray(behav.delta(behaviour))
    for strategy, center in (("topk", "model"), ("ucb", "model"), ("ucb", "mc_mean")):
        policy = UCBRank(data, strategy=strategy, setting="ie", ucb_center=center)
        params = policy.init(jax.random.PRNGKey(0), data)
        aux = policy.prepare(params, bucket, behaviour)
        f = np.asarray(policy.model(params["model"], bucket.features))
        if center == "mc_mean":
            f = np.asarray(policy.model.mc_scores(params["model"], bucket.features, params["dropout_key"])[0])
        np.testing.assert_allclose(aux["score"], np.where(shown, delta, f), rtol=1e-5, atol=1e-6)  # Eq. 12
        if strategy == "ucb":
            np.testing.assert_array_equal(aux["shown"], shown)
    # the MC masks come from the refresh's key: the same key gives the same std, a new refresh new masks
    policy = UCBRank(data, setting="concat")
    params = policy.init(jax.random.PRNGKey(0), data)
    std = np.asarray(policy.prepare(params, bucket, behaviour)["std"])
    np.testing.assert_array_equal(policy.prepare(params, bucket, behaviour)["std"], std)
    refreshed = policy.refresh(jax.random.PRNGKey(9), params)
    assert not np.allclose(policy.prepare(refreshed, bucket, behaviour)["std"], std)
    x = jnp.concatenate([bucket.features, behav.delta(behaviour)[..., None]], -1)  # concat: x_b from behaviour
    _, std_x = policy.model.mc_scores(params["model"], x, params["dropout_key"])
    np.testing.assert_allclose(std, std_x, rtol=1e-5, atol=1e-6)


def test_cold_and_warm_test_scores(toy):
    data, _ = toy
    bucket = data.buckets[0]
    busy = bucket_counters(bucket, np.random.default_rng(2))
    empty = DocCounters.zeros(bucket.labels.shape)
    for feature in ("delta", "ctr"):
        policy = UCBRank(data, setting="concat", behaviour=feature)
        params = policy.init(jax.random.PRNGKey(0), data)
        cold = policy.test_scores(params, bucket, busy, warm=False)
        np.testing.assert_array_equal(cold, policy.test_scores(params, bucket, empty, warm=False))
        unseen = jnp.full(bucket.labels.shape + (1,), {"delta": -2.0, "ctr": 0.0}[feature])
        np.testing.assert_allclose(cold, policy.model(params["model"], jnp.concatenate([bucket.features, unseen], -1)),
                                   rtol=1e-6)
        warm = policy.test_scores(params, bucket, busy, warm=True)
        live = behav.feature(feature, busy)[..., None]
        np.testing.assert_allclose(warm, policy.model(params["model"], jnp.concatenate([bucket.features, live], -1)),
                                   rtol=1e-6)
        assert not np.allclose(warm, cold)
        np.testing.assert_allclose(policy.test_scores(params, bucket, empty, warm=True), cold, rtol=1e-6)
    ie = UCBRank(data, setting="ie")
    params = ie.init(jax.random.PRNGKey(0), data)
    f = ie.model(params["model"], bucket.features)
    np.testing.assert_allclose(ie.test_scores(params, bucket, busy, warm=False), f, rtol=1e-6)
    np.testing.assert_allclose(ie.test_scores(params, bucket, busy, warm=True),
                               jnp.where(busy.alpha_sum > 0, behav.delta(busy), f), rtol=1e-6)
    wo = UCBRank(data)
    np.testing.assert_array_equal(wo.test_scores(params, bucket, busy, True),
                                  wo.test_scores(params, bucket, busy, False))


# --------------------------------------------------------------------------- training
def test_delta_label_training_reduces_validation_mse(toy):
    """Counters whose affine label Delta = R = y / y_max exactly (raw CTR is not); documents never shown
    are left out; concat inputs carry x_b from the counters at the retrain point."""
    data, _ = toy
    bucket = data.buckets[0]
    rng = np.random.default_rng(3)
    shape = bucket.labels.shape
    n = np.where(rng.random(shape) < 0.7, 10.0, 0.0).astype(np.float32)
    r = np.asarray(bucket.labels, np.float32) / data.y_max
    alpha, beta = 0.5 * n, 0.2 * n
    c = alpha * r + beta
    counters = (DocCounters(clicks=jnp.asarray(c), ips_clicks=jnp.asarray(c), impressions=jnp.asarray(n),
                            exposure=jnp.asarray(alpha), alpha_sum=jnp.asarray(alpha), beta_sum=jnp.asarray(beta)),)
    entered = (bucket.doc_mask,)
    split = np.asarray(bucket.split)[:, None]
    vali = np.asarray(bucket.doc_mask) & (split == 1) & (n > 0)
    train_docs = np.asarray(bucket.doc_mask) & (split == 0) & (n > 0)

    policy = UCBRank(data, fit=FIT)
    params = policy.init(jax.random.PRNGKey(0), data)

    def val_mse(p):
        return float(np.mean((np.asarray(policy.model(p["model"], bucket.features))[vali] - r[vali]) ** 2))

    before = val_mse(params)
    new, info = update_one(policy, jax.random.PRNGKey(1), params, policy.default_hyper(), data, counters, entered,
                           None)
    assert info["n_train"] == train_docs.sum() and info["n_val"] == vali.sum()  # shown at least once (n > 0)
    assert val_mse(new) == pytest.approx(info["val_loss"], rel=1e-4)  # validation is dropout-free
    assert val_mse(new) < 0.5 * before, (before, val_mse(new))
    # the regression target is Delta (= R here), not the CTR
    docs = collect_documents(data, counters, entered, TRAIN, 0)
    ex = UCBRank(data, setting="concat").examples(docs)
    np.testing.assert_allclose(ex["target"], r[train_docs], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ex["extra"][:, -1], r[train_docs], rtol=1e-5, atol=1e-6)  # x_b = Delta
    assert not np.allclose(np.asarray(behav.ctr(counters[0]))[train_docs], r[train_docs])


# --------------------------------------------------------------------------- configs
def load_algorithm(name: str):
    cfg = OmegaConf.load(CONF / f"{name}.yaml")
    parents = [d for d in cfg.pop("defaults", []) if d != "_self_"]
    return OmegaConf.merge(*[load_algorithm(p) for p in parents], cfg) if parents else cfg


@pytest.mark.parametrize("prefix, strategy", [("ucb_topk", "topk"), ("ucb_randomk", "randomk"),
                                              ("ucb_epsilon", "epsilon"), ("ucbrank", "ucb")])
def test_configs_build_policies(toy, prefix, strategy):
    data, _ = toy
    for suffix, setting, feature in (("", "wo_behav", "delta"), ("_concat", "concat", "delta"),
                                     ("_ctr", "concat", "ctr"), ("_ie", "ie", "delta")):
        policy, tune = make_policy(prefix + suffix, load_algorithm(prefix + suffix), data)
        assert type(policy) is UCBRank and policy.name == prefix + suffix and policy.trains
        assert (policy.strategy, policy.setting, policy.behaviour) == (strategy, setting, feature)
        assert policy.fit_config.optimizer == "adam" and policy.fit_config.learning_rate == 1e-3
        assert policy.min_impressions == 0 and policy.model.n_passes == 10 and policy.model.rate == 0.5
        if strategy in ("epsilon", "ucb"):
            assert list(tune["exploration"]) == [0, 0.01, 0.05, 0.1, 0.5, 1, 10]
        else:
            assert not tune
        if strategy == "topk":
            assert policy.exploration == 0.0


# --------------------------------------------------------------------------- vectorized == reference
def ucb_scorer(policy, sim, key):
    """NumPy UCBRank scores for ``run_reference``: the model on the refresh's behaviour counters (with
    the refresh's MC masks), the exploration term from the live counters and T_q counted here; Eq. 12's switch
    and Delta from the refresh's counters, or with ``evidence="live"`` from the live ones."""
    warm, _ = sim.session_plan(trial_keys(key).plan)
    issued = Counter(np.asarray(warm.query).tolist())  # the BM25 warm-up sessions count in T_q

    def make(params, draws, inputs):
        masks = np.asarray(policy.model.masks(params["dropout_key"]))
        lam = np.float32(inputs["hyper"].exploration)

        def score(i, q, docs, counters):
            issued[q] += 1
            b = {k: inputs["behaviour"][k][q][docs] for k in COUNTER_NAMES}
            seen = b["alpha_sum"] > 0
            delta = np.where(seen, (b["clicks"] - b["beta_sum"]) / np.where(seen, b["alpha_sum"], 1), -2.0)
            x = inputs["features"][q][docs]
            if policy.setting == "concat":
                x = np.concatenate([x, delta[:, None].astype(np.float32)], axis=1)
            samples = np.stack([numpy_mlp(params["model"], x, m) for m in masks], axis=-1)
            f, es = samples.mean(-1), samples.std(-1)
            if policy.setting == "ie":
                if policy.live:
                    seen = counters["alpha_sum"] > 0
                    delta = np.where(seen, (counters["clicks"] - counters["beta_sum"])
                                     / np.where(seen, counters["alpha_sum"], 1), -2.0)
                bonus = np.sqrt(np.log(issued[q]) / np.maximum(counters["impressions"], 1))
                f, es = np.where(seen, delta, f), np.where(seen, bonus, es)
            return (f + lam * es).astype(np.float32)

        return score

    return make


@pytest.mark.parametrize("make_policy, hyper", [
    (lambda d: UCBRank(d, setting="ie", fit=FIT), {"exploration": 0.3}),
    (lambda d: UCBRank(d, setting="ie", fit=FIT, evidence="live"), {"exploration": 0.3}),
    (lambda d: UCBRank(d, setting="concat", train=False), {"exploration": 2.0}),
], ids=["ucbrank_ie", "ucbrank_ie_live", "ucbrank_concat_frozen"])
def test_vectorized_equals_reference(toy, make_policy, hyper):
    data, sim = toy
    policy = make_policy(data)
    result = sim.run(policy, KEY, hyper=hyper, progress=False, keep_logs=True)
    reference = run_reference(sim, policy, KEY, ucb_scorer(policy, sim, KEY), hyper)
    n_updates = reference[-1]
    assert len(result.logs) == CONFIG.refreshes
    assert_matches_reference(sim, result, reference)
    assert n_updates == (2 if policy.trains else 0)
    assert len(result.train_info) == n_updates
    assert np.isfinite([result.warm_ndcg, result.cold_ndcg]).all()


def test_live_evidence_changes_what_is_shown_and_refuses_concat(toy):
    """evidence="live" (EBRank Table 3) reads Eq. 12 from the live counters: on the same trial the shown lists
    differ from the refreshed evidence's; concat's x_b is a model input and cannot be live."""
    data, sim = toy
    shown = {}
    for evidence in ("refreshed", "live"):
        policy = UCBRank(data, setting="ie", train=False, evidence=evidence)
        result = sim.run(policy, KEY, hyper={"exploration": 0.3}, progress=False, keep_logs=True)
        shown[evidence] = np.concatenate([log.shown for log in result.logs])
    assert shown["live"].shape == shown["refreshed"].shape
    assert (shown["live"] != shown["refreshed"]).any(axis=1).mean() > 0.01
    with pytest.raises(ValueError, match="live"):
        UCBRank(data, setting="concat", evidence="live")


def test_exploration_changes_what_is_shown(toy):
    """lambda = 0 vs 10 on the same trial (frozen model): UCB shows more distinct documents with MC-std
    exploration (wo_behav) and with the code's count bonus under IE (conf ucbrank and ucbrank_ie's options)."""
    data, sim = toy
    for kw in ({"setting": "wo_behav"}, {"setting": "ie", "ie_unshown_bonus": "count", "ucb_center": "model"}):
        policy = UCBRank(data, train=False, **kw)
        distinct = []
        for lam in (0.0, 10.0):
            result = sim.run(policy, KEY, hyper={"exploration": lam}, progress=False, keep_logs=True)
            shown = np.concatenate([log.shown for log in result.logs])
            query = np.concatenate([log.query for log in result.logs])
            distinct.append(len({(q, d) for q, row in zip(query, shown) for d in row if d >= 0}))
        assert distinct[1] > distinct[0], (kw, distinct)
