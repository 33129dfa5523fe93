"""Click uniforms drawn on the device (``sim.click_rng=device``): clicks follow the click model in
expectation, and the stream is reproducible but distinct from the host (NumPy) stream."""

import dataclasses

import jax
import numpy as np
import pytest

from ltrjax import clicks
from ltrjax.data.layout import pad_and_bucket
from ltrjax.online.policies.bm25 import BM25
from ltrjax.online.simulator import SimConfig, Simulator
from ltrjax.data.toy import toy_queryset

CONFIG = SimConfig(sessions=6000, warmup_sessions_per_query=0, n_updates=2, entry_prob=0.0, min_lanes=4,
                   lanes_per_query=0.3, click_rng="device")


@pytest.fixture(scope="module")
def setup():
    qs = toy_queryset(n_queries=30, n_features=5, docs=(6, 12), y_max=2, seed=4, recipe="latent")
    data = pad_and_bucket(qs, n_buckets=1)
    model = clicks.make_click_model({"kind": "pbm", "examination": "log2"}, 5)
    return data, model


def test_device_clicks_match_the_click_model(setup):
    data, model = setup
    sim = Simulator(data, model, CONFIG)
    result = sim.run(BM25(data), jax.random.PRNGKey(3), progress=False, keep_logs=True)
    shown = np.concatenate([log.shown for log in result.logs])
    clicked = np.concatenate([log.clicks for log in result.logs])
    query = np.concatenate([log.query for log in result.logs])
    # expected click probability of every shown (session, position): theta_k * R(label)
    gains = np.zeros_like(clicked, np.float64)
    for b, bucket in enumerate(data.buckets):
        g = np.asarray(sim.gains[b])
        rows = data.row_of_query[query]
        in_bucket = data.bucket_of_query[query] == b
        gains[in_bucket] = np.take_along_axis(g[rows[in_bucket]], np.maximum(shown[in_bucket], 0), axis=1)
    on = shown >= 0
    expected = np.asarray(model.alpha[:5]) * gains + np.asarray(model.beta[:5])
    for k in range(5):
        n = on[:, k].sum()
        p = expected[on[:, k], k]
        observed = clicked[on[:, k], k].sum()
        sd = np.sqrt(np.sum(p * (1 - p)))
        assert abs(observed - p.sum()) < 4 * sd, (k, observed, p.sum(), sd, n)  # a 4-sigma binomial check


def test_device_stream_reproducible_and_distinct_from_host(setup):
    data, model = setup
    device = Simulator(data, model, CONFIG)  # the shapes of the test above: its programs serve this run
    host = Simulator(data, model, dataclasses.replace(CONFIG, click_rng="host"))
    key = jax.random.PRNGKey(5)
    a = device.run(BM25(data), key, progress=False, keep_logs=True)
    b = device.run(BM25(data), key, progress=False, keep_logs=True)
    c = host.run(BM25(data), key, progress=False, keep_logs=True)
    clicks_of = lambda r: np.concatenate([log.clicks for log in r.logs])  # noqa: E731
    np.testing.assert_array_equal(clicks_of(a), clicks_of(b))
    assert not np.array_equal(clicks_of(a), clicks_of(c))
    with pytest.raises(ValueError, match="click_rng"):
        SimConfig.from_mapping({"click_rng": "gpu"})
