"""Every registered estimator, on synthetic shapes it was not tuned on, is not clearly below the production
ranker whose logged clicks it learns from (issue 20 "What to build" 7; pgx ``api_test`` style: one test
parametrized over the registry, so a newly registered estimator is checked without editing this file).

Shapes (``ltrjax.data.synthetic``): long lists (LETOR-3.0-like: 45 features, labels 0-2, ~150 documents per
query, few queries: the shape on which RegressionEM collapsed), 3 and 5 grades, few and many queries. Clicks:
the offline experiment's PBM with binary relevance and noise .1; every estimator is told the true click model
(oracles included) and trained with the same small budget. "Clearly below": more than ``MARGIN`` NDCG@10 below
the production ranker on the same test queries, averaged over ``SEEDS`` (single seeds differ by up to +-.08:
RegressionEM -.05, -.08 and +.07 on the default shape).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from ltrjax.data.synthetic import SyntheticParams, generate_synthetic
from ltrjax.offline import experiment as E
from ltrjax.offline_runner import experiment_config
from ltrjax.offline.config import override
from ltrjax.offline.estimators import ALL_ESTIMATORS

MARGIN = 0.05
SEEDS = (0, 1, 2)  # a production ranker trained on ~5 queries varies a lot from seed to seed (.63-.81 NDCG@10)

SHAPES = {
    # the default run: long lists, 3 grades, few queries (one minibatch per epoch)
    "long_lists_3grades_few_queries": SyntheticParams(
        name="long3", n_queries=100, docs_mean=150, docs_std=40, docs_min=30, docs_max=300, n_features=45,
        label_probs=(0.7, 0.16, 0.14), bm25_feature=25, constant_features=(6, 7)),
    "short_lists_5grades_many_queries": SyntheticParams(
        name="short5", n_queries=600, docs_mean=25, docs_std=12, docs_min=6, docs_max=80, n_features=30,
        label_probs=(0.4, 0.3, 0.2, 0.07, 0.03), bm25_feature=1, constant_features=()),
    "mid_lists_3grades_many_queries": SyntheticParams(
        name="mid3", n_queries=400, docs_mean=60, docs_std=20, docs_min=10, docs_max=120, n_features=46,
        label_probs=(0.74, 0.2, 0.06), bm25_feature=25),
    "long_lists_5grades_few_queries": SyntheticParams(
        name="long5", n_queries=80, docs_mean=120, docs_std=40, docs_min=20, docs_max=250, n_features=30,
        label_probs=(0.5, 0.3, 0.13, 0.05, 0.02), bm25_feature=1, constant_features=()),
}
DEFAULT_SHAPE = "long_lists_3grades_few_queries"

EXPERIMENT = {
    "trials": 1, "n_sessions": 20_000, "list_size": 10, "progress": False, "save_models": False, "eval_buckets": 2,
    "production_fraction": 0.05,
    "train": {"batch_size": 16, "max_epochs": 40, "patience": 10, "max_steps": None},  # early stopping
    "train_overrides": {},
    "estimator_options": {"vectorization": {"freeze": 50, "joint_steps": 150, "base_hidden": [16]},
                          "affine": {"freeze": 50, "joint_steps": 150}},
}


@functools.lru_cache(maxsize=None)
def _trial(shape: str, seed: int):
    qs = generate_synthetic(SHAPES[shape], seed=seed)
    exp = experiment_config({"experiment": EXPERIMENT})
    return E.prepare_trial(qs, exp, seed), exp


def _ndcg(shape: str, name: str, ranker: str = "linear") -> tuple[float, float]:
    est, prod = [], []
    for seed in SEEDS:
        trial, exp = _trial(shape, seed)
        exp = override(exp, {"ranker": ranker, "hidden": [16, 8]})
        res = E.run_setting(trial, exp, [name], log=lambda *a: None)
        est.append(res[name]["ndcg@10"])
        prod.append(trial.production_metrics["ndcg@10"])
    return float(np.mean(est)), float(np.mean(prod))


# The labeled-data skyline (an upper reference, trained on every label: on these long lists its pairwise loss is the
# longest case, about a third of the default cases' time) runs under -m slow. By default its training is checked by
# tests/test_offline_experiment.py (fit keeps the best epoch, end-to-end run), tests/test_saved_models.py and the
# offline benchmark smokes, and the production ranker, trained by the same loss, runs in every case here.
SLOW_BY_DEFAULT = {"labeled"}
# Below the production ranker by more than MARGIN, with the evidence: each entry a strict xfail, so the slow tier passes
# while it stays so and fails the day it no longer does. Empty since RegressionEM trains ULTRA's 10,000 steps
# (min_steps; it was 1,000, and on long_lists_5grades_few_queries it scored NDCG@10 0.265 against production's 0.333
# with theta unconverged; now 0.360; docs/testing.md).
KNOWN_BELOW: dict[tuple[str, str], str] = {}


def _cases():
    for name in ALL_ESTIMATORS:
        marks = pytest.mark.slow if name in SLOW_BY_DEFAULT else ()
        yield pytest.param(DEFAULT_SHAPE, name, id=f"{DEFAULT_SHAPE}-{name}", marks=marks)
        for shape in SHAPES:
            if shape != DEFAULT_SHAPE:
                marks = [pytest.mark.slow]
                if (shape, name) in KNOWN_BELOW:
                    marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_BELOW[shape, name]))
                yield pytest.param(shape, name, id=f"{shape}-{name}", marks=marks)


@pytest.mark.parametrize("shape,name", list(_cases()))
def test_estimator_is_not_clearly_below_production(shape, name):
    ndcg, production = _ndcg(shape, name)
    assert ndcg >= production - MARGIN, f"{name} on {shape}: NDCG@10 {ndcg:.3f}, production {production:.3f}"


@pytest.mark.parametrize("name", ["pair_debias", "vectorization", "affine", "dla"])
def test_vectorization_table_estimators_run_with_the_mlp_ranker(name):
    """The Vectorization tables train every estimator on the MLP ranker (PairDebias included)."""
    ndcg, production = _ndcg(DEFAULT_SHAPE, name, ranker="mlp")
    assert np.isfinite(ndcg) and ndcg >= production - MARGIN, f"{name} (mlp): {ndcg:.3f} vs production {production:.3f}"
