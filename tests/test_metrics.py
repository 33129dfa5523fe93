"""Ranking metrics (ltrjax.metrics): baselines.md §2 worked examples, sanity checks, and rax as an oracle."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rax

from ltrjax import metrics

ndcg_at_k = jax.jit(metrics.ndcg_at_k)
average_precision = jax.jit(metrics.average_precision, static_argnames="threshold")
average_relevant_position = jax.jit(metrics.average_relevant_position)


def test_worked_example_exponential_and_linear_gain():
    labels = jnp.array([2, 1, 0])  # documents A, B, C
    scores = jnp.array([2.0, 3.0, 1.0])  # ranking [B, A, C]
    mask = jnp.ones(3, bool)
    discount = metrics.log2_discount(3)
    np.testing.assert_allclose(discount, [1.0, 1 / np.log2(3), 0.5], rtol=1e-6)
    gains = metrics.exp_gain(labels)
    np.testing.assert_allclose(gains, [3.0, 1.0, 0.0])
    ranking, valid = metrics.top_k_ranking(scores, mask, 3)
    np.testing.assert_array_equal(ranking, [1, 0, 2])
    assert float(metrics.dcg_of_ranking(ranking, valid, gains, discount)) == pytest.approx(2.89279, abs=1e-5)
    assert float(metrics.ideal_dcg(gains, mask, discount)) == pytest.approx(3.63093, abs=1e-5)
    assert float(ndcg_at_k(scores, gains, mask, discount)) == pytest.approx(0.796708, abs=1e-6)
    assert float(ndcg_at_k(scores, labels.astype(jnp.float32), mask, discount)) == pytest.approx(0.859719, abs=1e-6)


def test_ideal_ranking_is_one_and_zero_labels_are_zero():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 5, (64, 12))
    mask = rng.uniform(size=(64, 12)) < 0.7
    mask[:, 0] = True
    labels[:, 0] = 3  # every list has a relevant document
    gains = jnp.asarray(2.0**labels - 1.0, jnp.float32)
    mask = jnp.asarray(mask)
    for k in (1, 5, 12):
        got = np.asarray(ndcg_at_k(gains, gains, mask, metrics.log2_discount(k)))
        np.testing.assert_allclose(got, 1.0, rtol=1e-6)
        # the reversed ranking is worse wherever the list holds two different gains in the top k
        worse = np.asarray(ndcg_at_k(-gains, gains, mask, metrics.log2_discount(k)))
        assert np.all(worse <= 1.0 + 1e-6) and np.any(worse < 0.99)
    zero = jnp.zeros((4, 6))
    scores = jnp.asarray(rng.normal(size=(4, 6)), jnp.float32)
    np.testing.assert_array_equal(ndcg_at_k(scores, zero, jnp.ones((4, 6), bool), metrics.log2_discount(5)), 0.0)
    # relevant documents only outside the mask: ideal DCG over the mask is 0, so NDCG is 0
    gains = jnp.array([[0.0, 0.0, 7.0]])
    assert float(ndcg_at_k(jnp.array([[3.0, 2.0, 1.0]]), gains, jnp.array([[True, True, False]]),
                           metrics.log2_discount(2))[0]) == 0.0


def test_ideal_over_all_documents_never_exceeds_ideal_over_subset():
    rng = np.random.default_rng(2)
    n, d = 256, 15
    labels = rng.integers(0, 3, (n, d))
    scores = jnp.asarray(rng.normal(size=(n, d)), jnp.float32)
    all_docs = np.arange(d)[None, :] < rng.integers(6, d + 1, (n, 1))
    shown = jnp.asarray(all_docs & (rng.uniform(size=(n, d)) < 0.5))
    all_docs = jnp.asarray(all_docs)
    gains = jnp.asarray(2.0**labels - 1.0, jnp.float32)
    disc = metrics.log2_discount(5)
    over_all = np.asarray(ndcg_at_k(scores, gains, shown, disc, all_docs))
    over_subset = np.asarray(ndcg_at_k(scores, gains, shown, disc))
    assert np.all(over_all <= over_subset + 1e-6)
    assert np.mean(over_all < over_subset - 1e-3) > 0.2  # strictly lower whenever a hidden doc beats the shown
    assert np.all((over_all >= 0) & (over_subset <= 1 + 1e-6))


def test_masked_documents_are_never_ranked():
    rng = np.random.default_rng(6)
    n, d = 128, 10
    scores = rng.normal(size=(n, d)).astype(np.float32)
    mask_np = rng.uniform(size=(n, d)) < 0.4
    boosted = jnp.asarray(np.where(mask_np, scores, 100.0 + scores))  # masked documents have the highest scores
    scores, mask = jnp.asarray(scores), jnp.asarray(mask_np)
    ranking, valid = jax.jit(metrics.top_k_ranking, static_argnums=2)(boosted, mask, 5)
    ranking, valid = np.asarray(ranking), np.asarray(valid)
    picked_mask = np.take_along_axis(mask_np, ranking, axis=1)
    assert np.all(picked_mask[valid])
    np.testing.assert_array_equal(valid.sum(1), np.minimum(mask_np.sum(1), 5))
    # and NDCG ignores the scores of masked documents
    gains = jnp.asarray(2.0 ** rng.integers(0, 3, (n, d)) - 1.0, jnp.float32)
    np.testing.assert_allclose(ndcg_at_k(boosted, gains, mask, metrics.log2_discount(5)),
                               ndcg_at_k(scores, gains, mask, metrics.log2_discount(5)), rtol=1e-6)
    # a list with fewer valid documents than k gets empty slots, not padded documents
    ranking, valid = metrics.top_k_ranking(jnp.array([5.0, 4.0, 3.0]), jnp.array([False, True, False]), 3)
    assert ranking[0] == 1 and list(np.asarray(valid)) == [True, False, False]


def test_cumulative_ndcg():
    gamma = 0.995
    assert metrics.cumulative_ndcg([1, 0], gamma) == pytest.approx(gamma, abs=1e-12)
    assert metrics.cumulative_ndcg([0, 1], gamma) == pytest.approx(1.0, abs=1e-12)
    assert metrics.cumulative_ndcg([], gamma) == 0.0
    for c, t in [(0.5, 1), (0.3, 10), (1.0, 2000)]:
        want = c * (1 - gamma**t) / (1 - gamma)
        assert metrics.cumulative_ndcg(np.full(t, c), gamma) == pytest.approx(want, rel=1e-10)


def test_cumulative_ndcg_with_shared_weights_is_the_same_number():
    """The simulator computes ``cumulative_weights`` once for every member and split (the longest sequence) and
    passes them: each split's Cum-NDCG is bit for bit the one with its own weights."""
    rng = np.random.default_rng(4)
    values = rng.random(100_003)
    weights = metrics.cumulative_weights(values.size, 0.995)
    for n in (1, 2, 17, 4099, 60_001, values.size):
        part = values[rng.random(values.size) < n / values.size][:n]
        assert metrics.cumulative_ndcg(part, 0.995, weights) == metrics.cumulative_ndcg(part, 0.995)


def test_cumulative_ndcg_curve_is_the_recursion():
    values = np.random.default_rng(0).uniform(size=500)
    gamma = 0.99
    want = np.zeros_like(values)
    s = 0.0
    for t, x in enumerate(values):
        s = gamma * s + x
        want[t] = s
    np.testing.assert_allclose(metrics.cumulative_ndcg_curve(values, gamma), want, rtol=1e-12)
    assert metrics.cumulative_ndcg(values, gamma) == pytest.approx(want[-1], rel=1e-12)
    assert metrics.cumulative_ndcg_curve([], gamma).size == 0


def test_average_precision_hand_examples():
    scores = jnp.array([4.0, 3.0, 2.0, 1.0])
    labels = jnp.array([2, 0, 1, 0])
    mask = jnp.ones(4, bool)
    # relevant at ranks 1 and 3: (1 + 2/3) / 2
    assert float(average_precision(scores, labels, mask)) == pytest.approx(5 / 6, abs=1e-6)
    assert float(average_precision(scores, labels, mask, threshold=2)) == pytest.approx(1.0, abs=1e-6)
    # reversed: relevant at ranks 2 and 4: (1/2 + 2/4) / 2
    assert float(average_precision(-scores, labels, mask)) == pytest.approx(0.5, abs=1e-6)
    # masking the first irrelevant document moves the second relevant one to rank 2
    mask2 = jnp.array([True, False, True, True])
    assert float(average_precision(scores, labels, mask2)) == pytest.approx(1.0, abs=1e-6)
    assert float(average_precision(scores, jnp.zeros(4, jnp.int32), mask)) == 0.0
    # relevant documents outside the mask do not count
    assert float(average_precision(scores, jnp.array([0, 0, 0, 1]), jnp.array([1, 1, 1, 0], bool))) == 0.0


def test_average_relevant_position_hand_examples():
    scores = jnp.array([4.0, 3.0, 2.0, 1.0])
    labels = jnp.array([2, 0, 1, 0])
    mask = jnp.ones(4, bool)
    # (1*2 + 3*1) / 3
    assert float(average_relevant_position(scores, labels, mask)) == pytest.approx(5 / 3, abs=1e-6)
    # reversed: document 0 at rank 4, document 2 at rank 2: (4*2 + 2*1) / 3
    assert float(average_relevant_position(-scores, labels, mask)) == pytest.approx(10 / 3, abs=1e-6)
    mask2 = jnp.array([True, False, True, True])
    assert float(average_relevant_position(scores, labels, mask2)) == pytest.approx(4 / 3, abs=1e-6)
    assert float(average_relevant_position(scores, jnp.zeros(4, jnp.int32), mask)) == 0.0


@pytest.mark.parametrize("gain", ["exp", "ebrank"])
@pytest.mark.parametrize("k", [1, 5, 10])
def test_ndcg_agrees_with_rax(gain, k):
    rng = np.random.default_rng(k)
    n, d, y_max = 200, 12, 4
    scores = jnp.asarray(rng.normal(size=(n, d)), jnp.float32)  # continuous: no ties
    labels = rng.integers(0, y_max + 1, (n, d))
    mask = np.arange(d)[None, :] < rng.integers(2, d + 1, (n, 1))
    labels = np.where(mask, labels, 0)
    labels[:, 0] = np.maximum(labels[:, 0], 1)  # nonzero ideal DCG
    labels, mask = jnp.asarray(labels), jnp.asarray(mask)
    if gain == "exp":
        gain_fn = lambda y: 2.0**y - 1.0  # noqa: E731
    else:
        gain_fn = lambda y: 0.1 + 0.9 * (2.0**y - 1.0) / (2.0**y_max - 1.0)  # noqa: E731
    discount_fn = lambda r: 1.0 / jnp.log2(r + 1.0)  # noqa: E731
    gains = jnp.where(mask, gain_fn(labels.astype(jnp.float32)), 0.0)
    ours = np.asarray(ndcg_at_k(scores, gains, mask, metrics.log2_discount(k)))
    oracle = jax.jit(lambda s, y, m: rax.ndcg_metric(s, y, where=m, topn=k, gain_fn=gain_fn,
                                                     discount_fn=discount_fn, reduce_fn=None))
    theirs = np.asarray(oracle(scores, labels.astype(jnp.float32), mask))
    np.testing.assert_allclose(ours, theirs, atol=1e-5)
    assert np.std(ours) > 0.05  # the batch really spans different values
