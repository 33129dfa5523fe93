"""Offline estimators behind one interface (``base.Estimator``); ``make_estimator`` by name.

``make_estimator`` is memoized on its (hashable) arguments, so the same estimator object — and
therefore the same compiled training epoch and scorer — serves every trial and setting.
"""

from __future__ import annotations

import functools

from ltrjax.offline import gbdt
from ltrjax.offline.estimators import (affine, dla, ips, labeled, naive, pair_debias, pns, prs,
                                       regression_em, vectorization)
from ltrjax.offline.estimators.base import ClickBatch, Estimator, LabeledBatch, Propensities
from ltrjax.offline.rankers import make_scorer

CLICK_ESTIMATORS = {
    "naive": naive.make,
    "ips": ips.make,
    "pns": pns.make,
    "prs": prs.make,
    "prs_lambda": prs.make_lambda,
    "dla": dla.make,
    "regression_em": regression_em.make,
    "pair_debias": pair_debias.make,
    "affine": affine.make,
    "vectorization": vectorization.make,
}
ALL_ESTIMATORS = (*CLICK_ESTIMATORS, "production", "labeled")
# losses that depend on the ranker's scores alone (no learned propensities or EM state): LightGBM trees can
# be grown on their derivatives (``ranker: lambdamart``, ``ltrjax.offline.gbdt``)
TREE_ESTIMATORS = ("naive", "ips", "pns", "prs", "prs_lambda", "affine", "production", "labeled")


def _freeze(x):
    if isinstance(x, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in x.items()))
    if isinstance(x, (list, tuple)):
        return tuple(_freeze(v) for v in x)
    return x


def make_estimator(name: str, opts: dict | None = None, ranker: str = "linear", hidden=(64, 32)) -> Estimator:
    """Estimator ``name`` with a ``ranker`` (linear|mlp|lambdamart) scorer and options ``opts`` (memoized)."""
    return _make(name, _freeze(dict(opts or {})), ranker, _freeze(hidden))


@functools.lru_cache(maxsize=256)  # bounded: a loop over many option values keeps the 256 most recent
def _make(name, frozen_opts, ranker, hidden) -> Estimator:
    opts = {k: (list(v) if isinstance(v, tuple) else v) for k, v in frozen_opts}
    if name == "vectorization":
        return vectorization.make(make_scorer(ranker, int(opts.get("vec_dim", 2)), hidden), opts)
    scorer = make_scorer(ranker, 1, hidden)
    if ranker == "lambdamart" and name not in TREE_ESTIMATORS:
        raise ValueError(f"estimator {name!r} has no tree-ensemble (lambdamart) form; expected one of "
                         f"{TREE_ESTIMATORS}, or ranker linear / mlp")
    if name in CLICK_ESTIMATORS:
        est = CLICK_ESTIMATORS[name](scorer, opts)
    elif name == "labeled":
        est = labeled.make(scorer, opts)
    elif name == "production":
        est = labeled.make(scorer, opts, name="production", form="pairwise")
    else:
        raise ValueError(f"unknown estimator {name!r}; expected one of {ALL_ESTIMATORS}")
    return gbdt.tree_estimator(est, opts.get("gbdt")) if ranker == "lambdamart" else est


__all__ = ["ALL_ESTIMATORS", "CLICK_ESTIMATORS", "TREE_ESTIMATORS", "ClickBatch", "Estimator", "LabeledBatch",
           "Propensities", "make_estimator"]
