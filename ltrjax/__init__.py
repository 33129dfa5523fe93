"""ltrjax: a JAX-accelerated simulator for learning to rank from clicks (user manual: docs/python-api.md).

The names below are imported on first use (``ltrjax.EBRank`` imports ``ltrjax.online.policies.ebrank``),
so ``import ltrjax`` is cheap and changes no global state: no JAX option, logging level or matplotlib
backend is touched.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

_EXPORTS = {
    # data
    "QuerySet": "ltrjax.data.queryset",
    "load_dataset": "ltrjax.data.registry",
    "shipped_datasets": "ltrjax.data.registry",
    "read_letor": "ltrjax.data.letor",
    "preprocess": "ltrjax.data.preprocess",
    "generate_synthetic": "ltrjax.data.synthetic",
    "pad_and_bucket": "ltrjax.data.layout",
    "PaddedDataset": "ltrjax.data.layout",
    "queryset_from_arrays": "ltrjax.api",
    # click models and metrics
    "ClickModel": "ltrjax.clicks",
    "make_click_model": "ltrjax.clicks",
    "pbm": "ltrjax.clicks",
    "trust_bias": "ltrjax.clicks",
    "cascade": "ltrjax.clicks",
    "click_matrix": "ltrjax.clicks",
    "examination": "ltrjax.clicks",
    "metrics": "ltrjax.metrics",
    # the online simulator and its policies
    "SimConfig": "ltrjax.online.simulator",
    "Simulator": "ltrjax.online.simulator",
    "TrialResult": "ltrjax.online.simulator",
    "Policy": "ltrjax.online.policies.base",
    "QueryView": "ltrjax.online.policies.base",
    "SessionLog": "ltrjax.online.policies.base",
    "DocCounters": "ltrjax.online.state",
    "BM25": "ltrjax.online.policies.bm25",
    "RandomK": "ltrjax.online.policies.random_k",
    "EBRank": "ltrjax.online.policies.ebrank",
    "CFTopK": "ltrjax.online.policies.counterfactual",
    "CFRandomK": "ltrjax.online.policies.counterfactual",
    "CFEpsilon": "ltrjax.online.policies.counterfactual",
    "PDGD": "ltrjax.online.policies.pdgd",
    "DBGD": "ltrjax.online.policies.dbgd",
    "MGD": "ltrjax.online.policies.dbgd",
    "Prior": "ltrjax.online.policies.prior",
    "UCBRank": "ltrjax.online.policies.ucbrank",
    # offline estimators
    "make_estimator": "ltrjax.offline.estimators",
    "ALL_ESTIMATORS": "ltrjax.offline.estimators",
    "Estimator": "ltrjax.offline.estimators",
    "ClickBatch": "ltrjax.offline.estimators",
    "LabeledBatch": "ltrjax.offline.estimators",
    "Propensities": "ltrjax.offline.estimators",
    "TrainConfig": "ltrjax.offline.train",
    "fit": "ltrjax.offline.train",
    # click logs, saved models, scoring
    "ClickLog": "ltrjax.clicklog",
    "read_click_log": "ltrjax.clicklog",
    "write_click_log": "ltrjax.clicklog",
    "load_model": "ltrjax.saved",
    "score_queryset": "ltrjax.score",
    # run functions (plain objects and dataclasses, no Hydra)
    "compare_online": "ltrjax.api",
    "algorithm": "ltrjax.api",
    "summarize_online": "ltrjax.api",
    "OfflineSettings": "ltrjax.api",
    "train_offline": "ltrjax.api",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ltrjax' has no attribute {name!r}")
    mod = importlib.import_module(module)
    value = mod if name == module.rsplit(".", 1)[-1] else getattr(mod, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # for type checkers and IDEs; at run time the names load on first use
    from ltrjax import metrics  # noqa: F401
    from ltrjax.api import (OfflineSettings, algorithm, compare_online, queryset_from_arrays,  # noqa: F401
                            summarize_online, train_offline)
    from ltrjax.clicklog import ClickLog, read_click_log, write_click_log  # noqa: F401
    from ltrjax.clicks import ClickModel, cascade, click_matrix, examination, make_click_model, pbm, trust_bias  # noqa: F401
    from ltrjax.data.layout import PaddedDataset, pad_and_bucket  # noqa: F401
    from ltrjax.data.letor import read_letor  # noqa: F401
    from ltrjax.data.preprocess import preprocess  # noqa: F401
    from ltrjax.data.queryset import QuerySet  # noqa: F401
    from ltrjax.data.registry import load_dataset, shipped_datasets  # noqa: F401
    from ltrjax.data.synthetic import generate_synthetic  # noqa: F401
    from ltrjax.offline.estimators import (ALL_ESTIMATORS, ClickBatch, Estimator, LabeledBatch,  # noqa: F401
                                           Propensities, make_estimator)
    from ltrjax.offline.train import TrainConfig, fit  # noqa: F401
    from ltrjax.online.policies.base import Policy, QueryView, SessionLog  # noqa: F401
    from ltrjax.online.policies.bm25 import BM25  # noqa: F401
    from ltrjax.online.policies.counterfactual import CFEpsilon, CFRandomK, CFTopK  # noqa: F401
    from ltrjax.online.policies.dbgd import DBGD, MGD  # noqa: F401
    from ltrjax.online.policies.ebrank import EBRank  # noqa: F401
    from ltrjax.online.policies.pdgd import PDGD  # noqa: F401
    from ltrjax.online.policies.prior import Prior  # noqa: F401
    from ltrjax.online.policies.random_k import RandomK  # noqa: F401
    from ltrjax.online.policies.ucbrank import UCBRank  # noqa: F401
    from ltrjax.online.simulator import SimConfig, Simulator, TrialResult  # noqa: F401
    from ltrjax.online.state import DocCounters  # noqa: F401
    from ltrjax.saved import load_model  # noqa: F401
    from ltrjax.score import score_queryset  # noqa: F401
