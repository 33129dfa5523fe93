"""Click models (ltrjax.clicks) against the reference tables of baselines.md §1 and seed-code.md §2.2."""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from omegaconf import OmegaConf

from ltrjax import clicks

CLICK_MODEL_DIR = Path(__file__).resolve().parent.parent / "conf" / "click_model"
sample_clicks = jax.jit(clicks.sample_clicks)  # eager dispatch of each op is slower than one compile


def _binomial_tolerance(p, n, n_sigma=4.0):
    """n_sigma binomial standard errors of a rate p estimated from n draws (floor for p ~ 0 or 1)."""
    p = np.asarray(p, np.float64)
    return n_sigma * np.sqrt(np.maximum(p * (1.0 - p), 1.0 / n) / n)


# --------------------------------------------------------------------------- PBM, eta = 0
def test_pbm_without_position_bias_clicks_equal_binary_relevance():
    theta = clicks.examination("log2", 5, eta=0.0)
    np.testing.assert_array_equal(theta, np.ones(5))
    model = clicks.pbm(theta)
    labels = jax.random.bernoulli(jax.random.PRNGKey(0), 0.4, (4000, 5)).astype(jnp.int32)
    rel = clicks.relevance_binary(labels, threshold=1)  # R in {0, 1}
    uniforms = jax.random.uniform(jax.random.PRNGKey(1), (4000, 2, 5))
    got = np.asarray(sample_clicks(model, uniforms, rel, labels))
    np.testing.assert_array_equal(got, np.asarray(labels).astype(bool))
    assert 0 < got.sum() < got.size


# --------------------------------------------------------------------------- reference tables
def test_ucbrank_affine_alpha_beta_table():
    model = clicks.ucbrank_affine(5)
    np.testing.assert_allclose(model.alpha, [0.350000, 0.532032, 0.547262, 0.537005, 0.520157], atol=1e-5)
    np.testing.assert_allclose(model.beta, [0.650000, 0.258065, 0.153308, 0.106067, 0.079517], atol=1e-5)
    # the affine click probability of a relevant / non-relevant document
    np.testing.assert_allclose(clicks.click_prob(model, jnp.ones(5), jnp.zeros(5, jnp.int32)),
                               np.asarray(model.alpha) + np.asarray(model.beta), rtol=1e-6)
    np.testing.assert_allclose(clicks.click_prob(model, jnp.zeros(5), jnp.zeros(5, jnp.int32)), model.beta,
                               rtol=1e-6)


# baselines.md §1.2, eta = 1: theta eps+, theta eps- (= beta_k), alpha_k, as printed there
TRUST_TABLE = {
    "theta_eps_plus": ["0.9800", "0.4850", "0.3200", "0.2375", "0.1880", "0.1550", "0.1314", "0.1138", "0.1000",
                       "0.0890"],
    "theta_eps_minus": ["0.6500", "0.1625", "0.07222", "0.04063", "0.02600", "0.01806", "0.01327", "0.01016",
                        "0.00802", "0.00650"],
    "alpha": ["0.3300", "0.3225", "0.2478", "0.1969", "0.1620", "0.1369", "0.1182", "0.1036", "0.0920", "0.0825"],
}


def _printed(values):
    """Values and half a unit of the last printed digit (+ float32 slack)."""
    numbers = np.array([float(v) for v in values])
    tolerance = np.array([0.5 * 10.0 ** -len(v.split(".")[1]) for v in values]) + 1e-6
    return numbers, tolerance


def test_trust_bias_reproduces_vardasbi_table():
    eps_plus, eps_minus = clicks.vardasbi_trust_epsilons(10)
    np.testing.assert_allclose(eps_plus, 0.98 - np.arange(10) / 100, atol=1e-12)
    np.testing.assert_allclose(eps_minus, 0.65 / np.arange(1, 11), atol=1e-12)
    model = clicks.trust_bias(clicks.examination("inverse", 10), eps_plus, eps_minus)
    p_rel = np.asarray(clicks.click_prob(model, jnp.ones(10), jnp.zeros(10, jnp.int32)))
    p_nonrel = np.asarray(clicks.click_prob(model, jnp.zeros(10), jnp.zeros(10, jnp.int32)))
    for got, name in [(p_rel, "theta_eps_plus"), (p_nonrel, "theta_eps_minus"), (np.asarray(model.alpha), "alpha")]:
        want, tol = _printed(TRUST_TABLE[name])
        assert np.all(np.abs(got - want) <= tol), (name, got, want)
    np.testing.assert_allclose(model.beta, p_nonrel, rtol=1e-6)
    np.testing.assert_allclose(model.examination, 1.0 / np.arange(1, 11), rtol=1e-6)


def test_trust_bias_epsilons_frozen_after_caps():
    eps_plus, eps_minus = clicks.vardasbi_trust_epsilons(25)
    np.testing.assert_allclose(eps_plus[19:], 0.79)  # frozen after k = 20
    np.testing.assert_allclose(eps_minus[9:], 0.065)  # frozen after k = 10


def test_examination_curves():
    np.testing.assert_allclose(clicks.examination_log2(5), [1.0, 0.63093, 0.5, 0.430677, 0.386853], atol=1e-5)
    np.testing.assert_allclose(clicks.examination("log2", 5, eta=2.0),
                               np.array([1.0, 0.63093, 0.5, 0.430677, 0.386853]) ** 2, atol=1e-5)
    np.testing.assert_allclose(clicks.examination("inverse", 4, eta=2.0), [1, 1 / 4, 1 / 9, 1 / 16])
    joachims = [0.68, 0.61, 0.48, 0.34, 0.28, 0.20, 0.11, 0.10, 0.08, 0.06]
    np.testing.assert_allclose(clicks.examination("joachims", 12), joachims + [0.06, 0.06])
    # severity raises the listed values (not (1/k)^eta)
    np.testing.assert_allclose(clicks.examination("joachims", 10, eta=2.0), np.square(joachims))
    np.testing.assert_allclose(clicks.examination("log2", 5, cutoff=3), [1.0, 0.63093, 0.5, 0, 0], atol=1e-5)
    with pytest.raises(ValueError):
        clicks.examination("nope", 5)


def test_relevance_mappings():
    np.testing.assert_allclose(clicks.relevance_ebrank(np.arange(3), 2), [0.1, 0.4, 1.0], atol=1e-6)
    np.testing.assert_allclose(clicks.relevance_ebrank(np.arange(5), 4), [0.1, 0.16, 0.28, 0.52, 1.0], atol=1e-6)
    np.testing.assert_allclose(clicks.relevance_linear(np.arange(5), 4), [0, 0.25, 0.5, 0.75, 1.0])
    np.testing.assert_allclose(clicks.relevance(np.arange(3), 2, "ebrank"), [0.1, 0.4, 1.0], atol=1e-6)
    with pytest.raises(ValueError):
        clicks.relevance(np.arange(3), 2, "nope")


# --------------------------------------------------------------------------- TianGong matrix
def test_tiangong_matrix_values():
    m = clicks.TIANGONG_MATRIX
    assert m.shape == (5, 10)
    assert m[0, 0] == pytest.approx(0.5905310300703774)
    assert m[1, 2] == pytest.approx(0.014456379881537999)  # not monotone in relevance at position 3
    assert m[4, 2] == pytest.approx(0.2419871794871795)
    np.testing.assert_allclose(m.sum(1), [0.865179, 0.753075, 0.755597, 1.000287, 1.256436], atol=1e-6)
    with pytest.raises(ValueError):
        clicks.click_matrix(m, 11)


def test_tiangong_simulated_click_rates_match_matrix():
    n = 200_000
    model = clicks.make_click_model({"kind": "tiangong"}, 10)
    assert model.kind == "matrix"
    sample = jax.jit(lambda key, y: jnp.mean(clicks.sample_clicks(
        model, jax.random.uniform(key, (n, 2, 10)), jnp.zeros((n, 10)), jnp.full((n, 10), y, jnp.int32)),
        axis=0))
    rates = np.stack([np.asarray(sample(jax.random.PRNGKey(10 + y), y)) for y in range(5)])
    truth = clicks.TIANGONG_MATRIX
    err = np.abs(rates - truth)
    tol = _binomial_tolerance(truth, n)
    assert np.all(err <= tol), np.argwhere(err > tol)


# --------------------------------------------------------------------------- cascade
def _cascade_reference(p_click, p_stop, labels, uniforms):
    """Sequential walk: click with P(click|y), and only after a click stop with P(stop|y)."""
    out = np.zeros(labels.shape, bool)
    for i in range(labels.shape[0]):
        for k in range(labels.shape[1]):
            y = labels[i, k]
            if uniforms[i, 0, k] < p_click[y]:
                out[i, k] = True
                if uniforms[i, 1, k] < p_stop[y]:
                    break
    return out


def test_cascade_perfect_never_clicks_irrelevant():
    n = 20_000
    model = clicks.make_click_model({"kind": "cascade", "preset": "perfect", "n_grades": 5}, 10)
    labels = jax.random.randint(jax.random.PRNGKey(2), (n, 10), 0, 5)
    got = np.asarray(sample_clicks(model, jax.random.uniform(jax.random.PRNGKey(3), (n, 2, 10)),
                                          jnp.zeros((n, 10)), labels))
    labels = np.asarray(labels)
    assert not got[labels == 0].any()
    # no stops in 'perfect': every position is reached, so the click rate is P(click | y)
    for y, p in enumerate([0.0, 0.2, 0.4, 0.8, 1.0]):
        cell = got[labels == y]
        assert abs(cell.mean() - p) <= _binomial_tolerance(p, cell.size)


def test_cascade_paper_semantics():
    n = 20_000
    p_click, p_stop = clicks.CASCADE_PRESETS["navigational"][5]
    model = clicks.make_click_model({"kind": "cascade", "preset": "navigational", "n_grades": 5}, 10)
    labels = np.asarray(jax.random.randint(jax.random.PRNGKey(4), (n, 10), 0, 5))
    uniforms = np.asarray(jax.random.uniform(jax.random.PRNGKey(5), (n, 2, 10)))
    got = np.asarray(sample_clicks(model, jnp.asarray(uniforms), jnp.zeros((n, 10)), jnp.asarray(labels)))

    raw_click = uniforms[:, 0, :] < np.asarray(p_click)[labels]
    stop_coin = uniforms[:, 1, :] < np.asarray(p_stop)[labels]
    stop_event = got & stop_coin
    # no click after the first stop (a stop needs a click at that position)
    first_stop = np.where(stop_event.any(1), stop_event.argmax(1), 10)
    after = np.arange(10)[None, :] > first_stop[:, None]
    assert not got[after].any()
    # before and at the stop, clicks are exactly the raw click coins
    before = ~after
    np.testing.assert_array_equal(got[before], raw_click[before])
    # a stop coin at an unclicked position does not stop: later clicks happen after such positions
    unclicked_coin = ~raw_click & stop_coin
    first_unclicked_coin = np.where(unclicked_coin.any(1), unclicked_coin.argmax(1), 10)
    later = np.arange(10)[None, :] > first_unclicked_coin[:, None]
    assert (got & later & (first_stop[:, None] > first_unclicked_coin[:, None])).sum() > 100
    # and the whole joint structure equals a sequential walk
    np.testing.assert_array_equal(got[:2000], _cascade_reference(p_click, p_stop, labels[:2000], uniforms[:2000]))


def test_valid_mask_blocks_clicks_in_empty_slots():
    n = 5000
    labels = jax.random.randint(jax.random.PRNGKey(6), (n, 5), 0, 5)
    rel = clicks.relevance_ebrank(labels, 4)
    uniforms = jax.random.uniform(jax.random.PRNGKey(7), (n, 2, 5))
    # empty slots are trailing in the simulator (fewer entered documents than K) or whole idle rows
    n_valid = np.asarray(jax.random.randint(jax.random.PRNGKey(8), (n,), 0, 6))
    trailing = np.arange(5)[None, :] < n_valid[:, None]
    scattered = np.asarray(jax.random.bernoulli(jax.random.PRNGKey(9), 0.6, (n, 5)))
    for cfg in [{"kind": "pbm"}, {"kind": "tiangong"}, {"kind": "cascade", "preset": "informational"}]:
        model = clicks.make_click_model(cfg, 5)
        masks = [trailing] if model.kind == "cascade" else [trailing, scattered]
        free = np.asarray(sample_clicks(model, uniforms, rel, labels))
        for valid in masks:
            masked = np.asarray(sample_clicks(model, uniforms, rel, labels, jnp.asarray(valid)))
            assert not masked[~valid].any(), cfg
            assert free[~valid].any(), cfg  # the mask really removed clicks
            np.testing.assert_array_equal(masked[valid], free[valid])


# --------------------------------------------------------------------------- from config files
def _load(name):
    return OmegaConf.to_container(OmegaConf.load(CLICK_MODEL_DIR / f"{name}.yaml"), resolve=True)


def test_every_click_model_config_builds():
    names = sorted(p.stem for p in CLICK_MODEL_DIR.glob("*.yaml"))
    assert {"cascade", "ebrank_pbm", "pbm_inverse", "tiangong", "trust_bias", "ucbrank_trust"} <= set(names)
    for name in names:
        model = clicks.make_click_model(_load(name), 5)
        assert model.n_positions == 5, name
        for leaf in jax.tree_util.tree_leaves(model):
            assert np.all(np.isfinite(np.asarray(leaf))), name

    pbm = clicks.make_click_model(_load("ebrank_pbm"), 5)
    assert pbm.kind == "affine"
    np.testing.assert_allclose(pbm.alpha, clicks.examination_log2(5), rtol=1e-6)
    np.testing.assert_allclose(pbm.beta, 0.0)
    np.testing.assert_allclose(pbm.examination, clicks.examination_log2(5), rtol=1e-6)

    inverse = clicks.make_click_model(_load("pbm_inverse"), 5)
    np.testing.assert_allclose(inverse.alpha, 1.0 / np.arange(1, 6), rtol=1e-6)

    trust = clicks.make_click_model(_load("trust_bias"), 5)
    eps_plus, eps_minus = clicks.vardasbi_trust_epsilons(5)
    theta = 1.0 / np.arange(1, 6)
    np.testing.assert_allclose(trust.alpha, theta * (eps_plus - eps_minus), rtol=1e-6)
    np.testing.assert_allclose(trust.beta, theta * eps_minus, rtol=1e-6)

    ucb = clicks.make_click_model(_load("ucbrank_trust"), 5)
    np.testing.assert_allclose(ucb.alpha, clicks.ucbrank_affine(5).alpha)
    np.testing.assert_allclose(ucb.beta, clicks.ucbrank_affine(5).beta)

    tiangong = clicks.make_click_model(_load("tiangong"), 5)
    assert tiangong.kind == "matrix"
    np.testing.assert_allclose(tiangong.matrix, clicks.TIANGONG_MATRIX[:, :5], rtol=1e-6)

    cascade = clicks.make_click_model(_load("cascade"), 5)
    assert cascade.kind == "cascade"
    np.testing.assert_allclose(cascade.cascade_click, [0.05, 0.3, 0.5, 0.7, 0.95], rtol=1e-6)
    np.testing.assert_allclose(cascade.stop, [0.2, 0.3, 0.5, 0.7, 0.9], rtol=1e-6)


def test_make_click_model_rejects_unknown():
    with pytest.raises(ValueError):
        clicks.make_click_model({"kind": "no_such_model"}, 5)
    with pytest.raises(ValueError):
        clicks.make_click_model({"kind": "cascade", "preset": "perfect", "n_grades": 4}, 5)
    with pytest.raises(ValueError):
        clicks.make_click_model({"kind": "pbm", "examination": "no_such_curve"}, 5)


def test_cascade_empty_slot_cannot_stop_the_walk():
    """A masked (empty) slot draws no click, so it cannot end the cascade for later slots."""
    model = clicks.cascade([1.0, 1.0], [1.0, 1.0], 3)  # every examined document is clicked, then stop
    uniforms = jnp.zeros((2, 3))  # u < p everywhere: click and stop whenever allowed
    labels = jnp.array([1, 1, 1])
    valid = jnp.array([False, True, True])
    out = clicks.sample_clicks(model, uniforms, jnp.ones(3), labels, valid)
    np.testing.assert_array_equal(np.asarray(out), [False, True, False])


# --------------------------------------------------------------------------- Vectorization trust-bias relevance
def test_vectorization_relevance_is_eq13_on_zero_based_labels():
    """Eq. 13, gamma_y = (2^(y-1) - 1)/(2^(y_max-1) - 1) on 1-based grades, on 0-based labels (hand-computed)."""
    np.testing.assert_allclose(clicks.relevance(np.arange(3), 2, "vectorization"), [0, 1 / 3, 1], atol=1e-7)
    np.testing.assert_allclose(clicks.relevance(np.arange(5), 4, "vectorization"),
                               [0, 1 / 15, 3 / 15, 7 / 15, 1], atol=1e-7)
    np.testing.assert_allclose(clicks.relevance(np.arange(5), 4, "vectorization"),
                               [0, 0.0667, 0.2, 0.4667, 1], atol=1e-4)


def test_vectorization_err_relevance_is_the_released_vector_and_five_grade_only():
    np.testing.assert_allclose(clicks.relevance(np.arange(5), 4, "vectorization_err"), [.10, .16, .28, .52, 1.0],
                               atol=1e-7)
    with pytest.raises(clicks.ClickModelDataMismatch, match="5 grades"):
        clicks.relevance(np.arange(3), 2, "vectorization_err")
    assert "vectorization_err" in clicks.RELEVANCE_MAPPINGS


def test_tiangong_on_three_grade_data_is_refused():
    with pytest.raises(clicks.ClickModelDataMismatch, match="3 grades") as err:
        clicks.make_click_model({"kind": "tiangong"}, 10, y_max=2)
    assert isinstance(err.value, ValueError)
    with pytest.raises(clicks.ClickModelDataMismatch):
        clicks.check_click_model_data({"kind": "tiangong", "relevance": "vectorization"}, 2)
    clicks.check_click_model_data({"kind": "tiangong"}, 4)  # five grades: hosted
    clicks.check_click_model_data({"kind": "trust_bias", "relevance": "vectorization"}, 2)
    assert clicks.make_click_model({"kind": "tiangong"}, 10, y_max=4).kind == "matrix"
