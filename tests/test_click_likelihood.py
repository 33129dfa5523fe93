"""Click log-likelihood and perplexity per rank (ltrjax.offline.click_likelihood) against slow, obvious loops."""

import math

import numpy as np

from ltrjax.offline.click_likelihood import per_rank, rank_ctr
from ltrjax.offline.logging import ClickStats


def test_per_rank_matches_a_loop_over_sessions():
    rng = np.random.default_rng(0)
    h, k = 300, 6
    mask = rng.random((h, k)) < 0.8
    p = rng.random((h, k))
    clicks = (rng.random((h, k)) < p) & mask
    got = per_rank(p, clicks, mask)
    for r in range(k):
        lls = [math.log(p[i, r]) if clicks[i, r] else math.log(1 - p[i, r]) for i in range(h) if mask[i, r]]
        assert got["sessions"][r] == len(lls)
        assert abs(got["log_likelihood"][r] - sum(lls) / len(lls)) < 1e-12
        assert abs(got["perplexity"][r] - 2 ** (-sum(math.log2(math.exp(x)) for x in lls) / len(lls))) < 1e-9
    coin = per_rank(np.full((h, k), 0.5), clicks, mask)
    assert all(abs(x - 2.0) < 1e-12 for x in coin["perplexity"])  # a coin's perplexity is 2
    empty = per_rank(p, clicks, np.zeros_like(mask))
    assert empty["perplexity"] == [None] * k


def test_rank_ctr_is_the_click_rate_of_the_training_sessions_at_each_rank():
    rng = np.random.default_rng(1)
    lists, k = 7, 4
    mask = rng.random((lists, k)) < 0.9
    n = rng.integers(1, 20, lists).astype(np.float32)
    clicks = np.floor(rng.random((lists, k)) * n[:, None]) * mask
    stats = ClickStats(n_sessions=n, clicks=clicks.astype(np.float32), pairs=np.zeros((lists, k, k), np.float32),
                       pairs_lambda=np.zeros((lists, k, k), np.float32))
    got = rank_ctr(stats, mask)
    for r in range(k):
        shown = sum(n[i] for i in range(lists) if mask[i, r])
        assert abs(got[r] - sum(clicks[i, r] for i in range(lists)) / shown) < 1e-6
