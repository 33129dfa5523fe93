"""Toy simulators and runs shared by test files (tests/test_padding.py, tests/test_population.py,
tests/test_simulator_reference.py).

Built once per process (``functools.lru_cache``) and the same shapes, keys and static options everywhere, so the
programs of a run (segments, fits, evaluations) are compiled once for every test that reads them, and the
persistent XLA cache serves the other xdist worker. Treat the returned objects as read-only.
"""

import functools

import jax

from ltrjax import clicks
from ltrjax.data.layout import PaddedDataset, pad_and_bucket
from ltrjax.data.toy import toy_queryset
from ltrjax.online.policies.bm25 import BM25
from ltrjax.online.policies.ebrank import EBRank
from ltrjax.online.simulator import SimConfig, Simulator

# two trials, one hyper-parameter set each (epsilon is a traced leaf: any values share the programs)
KEYS = (jax.random.PRNGKey(11), jax.random.PRNGKey(12))
EBRANK_HYPERS = ({"epsilon": 1.0}, {"epsilon": 50.0})
EBRANK_FIT = {"max_epochs": 2, "patience": 1, "min_examples": 1}


# 6 refreshes, 3 models: retrains after segments 1 and 3, refreshes without a retrain in between
SMALL_CONFIG = SimConfig(sessions=360, warmup_sessions_per_query=2, n_updates=3, refreshes=6, entry_prob=0.5,
                         min_lanes=4, lanes_per_query=0.3)


@functools.lru_cache(maxsize=None)
def small_data() -> PaddedDataset:
    """30 queries of 6 to 24 documents in two buckets (members' plans differ per bucket too)."""
    qs = toy_queryset(n_queries=30, n_features=4, docs=(6, 24), y_max=2, seed=3, recipe="latent")
    data = pad_and_bucket(qs, n_buckets=2, single_bucket_cells=0)
    assert len(data.buckets) == 2
    return data


def small_sim() -> Simulator:
    """A fresh simulator of ``small_data`` and ``SMALL_CONFIG`` (PBM clicks, BM25 warm-up): fresh, so that the
    step counts it remembers come from its own runs."""
    data = small_data()
    return Simulator(data, clicks.make_click_model({"kind": "pbm", "examination": "log2"}, 5), SMALL_CONFIG,
                     warmup_policy=BM25(data))


def small_ebrank(data: PaddedDataset) -> EBRank:
    """The EBRank of ``small_sim``'s runs: epsilon 20, documents with 2 impressions or more, short fits."""
    return EBRank(data, epsilon=20.0, min_impressions=2, fit={"max_epochs": 5, "batch_size": 32})


@functools.lru_cache(maxsize=None)
def wide_sim() -> Simulator:
    """24 queries of 40 to 90 documents in two buckets: the entered documents fill only the first slots of a row
    (narrowing applies) and grow over the run (per-segment widths differ)."""
    qs = toy_queryset(n_queries=24, n_features=4, docs=(40, 90), y_max=2, seed=5, recipe="latent")
    data = pad_and_bucket(qs, n_buckets=2, single_bucket_cells=0)
    config = SimConfig(sessions=600, warmup_sessions_per_query=2, n_updates=4, entry_prob=0.5, min_lanes=16,
                       lanes_per_query=0.5)
    return Simulator(data, clicks.make_click_model({"kind": "pbm", "examination": "log2"}, 5), config,
                     warmup_policy=BM25(data))


def wide_ebrank(cls: type = EBRank) -> EBRank:
    """An EBRank (or subclass) on ``wide_sim``'s data that retrains from the first segment on (no impression
    filter, short fits)."""
    return cls(wide_sim().data, min_impressions=0, fit=EBRANK_FIT)


@functools.lru_cache(maxsize=None)
def wide_ebrank_run() -> tuple[EBRank, list]:
    """(policy, results): ``wide_ebrank()`` run by ``wide_sim()`` (one width per phase, clicks drawn on the host)
    as a population of the ``KEYS`` x ``EBRANK_HYPERS`` members, logs kept."""
    policy = wide_ebrank()
    return policy, wide_sim().run_population(policy, list(KEYS), list(EBRANK_HYPERS), progress=False,
                                             keep_logs=True)
