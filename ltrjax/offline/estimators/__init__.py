"""Offline estimators behind one interface (``base.Estimator``); the registry and ``make_estimator`` by name.

Every estimator is a module with ``make(scorer, *, option=default, ...) -> Estimator``: its options are
keyword arguments with their defaults written once, in that signature (``estimator_option_defaults``
reads them back). The registry below is the single list of names, so **adding an estimator = one module
+ one registry line** (``register_estimator`` does the same from outside the package).

``make_estimator`` is memoized on its arguments, so the same estimator object — and therefore the same
compiled training epoch and scorer — serves every trial and setting.
"""

from __future__ import annotations

import collections
import inspect
from collections.abc import Callable

from ltrjax.offline import gbdt as gbdt_trees
from ltrjax.offline.estimators import (affine, dla, ips, labeled, naive, pair_debias, pns, prs,
                                       regression_em, vectorization)
from ltrjax.offline.estimators.base import ClickBatch, Estimator, LabeledBatch, Propensities
from ltrjax.offline.rankers import make_scorer

# name -> make(scorer, *, **options); the scorer is the scalar (1-output) ranker an estimator trains
ESTIMATORS: dict[str, Callable[..., Estimator]] = {}
# estimators trained on true labels rather than clicks (``LabeledBatch``)
LABELED_ESTIMATORS: tuple[str, ...] = ()
# losses that depend on the ranker's scores alone (no learned propensities or EM state): LightGBM trees can
# be grown on their derivatives (``ranker: lambdamart``, ``ltrjax.offline.gbdt``)
TREE_ESTIMATORS: tuple[str, ...] = ()
# upper references told the true click model (never a claim's comparator unless the paper's was)
ORACLE_ESTIMATORS: tuple[str, ...] = ()
# every name, and the click estimators among them (both kept in registration order)
ALL_ESTIMATORS: tuple[str, ...] = ()
CLICK_ESTIMATORS: tuple[str, ...] = ()


def register_estimator(name: str, make: Callable[..., Estimator], *, labeled: bool = False,
                       tree: bool = False, oracle: bool = False) -> None:
    """Add (or replace) estimator ``name``: ``make(scorer, *, option=default, ...) -> Estimator``.

    ``labeled``: trained on labels (``LabeledBatch``), not clicks; ``tree``: its loss depends on the scores
    alone, so ``ranker: lambdamart`` can grow trees on it; ``oracle``: told the true click model (an upper
    reference, ``ORACLE_ESTIMATORS``).
    """
    global ALL_ESTIMATORS, CLICK_ESTIMATORS, LABELED_ESTIMATORS, ORACLE_ESTIMATORS, TREE_ESTIMATORS
    params = list(inspect.signature(make).parameters.values())
    if not params or params[0].kind not in (params[0].POSITIONAL_ONLY, params[0].POSITIONAL_OR_KEYWORD) or any(
            p.kind is not p.KEYWORD_ONLY or p.default is p.empty for p in params[1:]):
        raise TypeError(f"estimator {name!r}: make must be make(scorer, *, option=default, ...); got "
                        f"{inspect.signature(make)}")
    ESTIMATORS[name] = make
    LABELED_ESTIMATORS = tuple(n for n in LABELED_ESTIMATORS if n != name) + ((name,) if labeled else ())
    TREE_ESTIMATORS = tuple(n for n in TREE_ESTIMATORS if n != name) + ((name,) if tree else ())
    ORACLE_ESTIMATORS = tuple(n for n in ORACLE_ESTIMATORS if n != name) + ((name,) if oracle else ())
    ALL_ESTIMATORS = tuple(ESTIMATORS)
    CLICK_ESTIMATORS = tuple(n for n in ESTIMATORS if n not in LABELED_ESTIMATORS)
    _CACHE.clear()


_CACHE: collections.OrderedDict = collections.OrderedDict()
_CACHE_SIZE = 256  # bounded: a loop over many option values keeps the 256 most recent

# ------------------------------------------------------------------------------------------- the registry
register_estimator("naive", naive.make, tree=True)
register_estimator("ips", ips.make, tree=True)
register_estimator("ips_oracle", ips.make_oracle, tree=True, oracle=True)
register_estimator("ips_lambda", ips.make_lambda, tree=True)
register_estimator("pns", pns.make, tree=True)
register_estimator("prs", prs.make, tree=True)
register_estimator("prs_lambda", prs.make_lambda, tree=True)
register_estimator("dla", dla.make)
register_estimator("regression_em", regression_em.make)
register_estimator("pair_debias", pair_debias.make)
register_estimator("pair_debias_lambda", pair_debias.make_lambda, tree=True)  # Unbiased LambdaMART
register_estimator("affine", affine.make)
register_estimator("affine_oracle", affine.make_oracle, tree=True, oracle=True)
register_estimator("vectorization", vectorization.make)
register_estimator("production", labeled.make_production, labeled=True, tree=True)
register_estimator("labeled", labeled.make, labeled=True, tree=True)


def _known(name: str) -> Callable[..., Estimator]:
    if name not in ESTIMATORS:
        raise ValueError(f"unknown estimator {name!r}; expected one of {ALL_ESTIMATORS}")
    return ESTIMATORS[name]


def estimator_option_defaults(name: str) -> dict[str, object]:
    """The options of estimator ``name`` and their defaults, read from its ``make`` signature."""
    params = list(inspect.signature(_known(name)).parameters.values())[1:]
    return {p.name: p.default for p in params}


def _freeze(x):
    if isinstance(x, dict):
        return ("__dict__", tuple(sorted((k, _freeze(v)) for k, v in x.items())))
    if isinstance(x, (list, tuple)):
        return tuple(_freeze(v) for v in x)
    return x


def make_estimator(name: str, *, ranker: str = "linear", hidden=(64, 32), gbdt: dict | None = None,
                   **options) -> Estimator:
    """Estimator ``name`` on a ``ranker`` (linear | mlp | lambdamart) scorer with its ``options`` (memoized).

    ``options`` are the keyword arguments of the estimator's ``make`` (``estimator_option_defaults``);
    ``gbdt`` the LightGBM settings of ``ranker="lambdamart"`` (over ``gbdt.GBDT_DEFAULTS``).
    """
    make = _known(name)
    unknown = sorted(set(options) - set(estimator_option_defaults(name)))
    if unknown:
        raise ValueError(f"estimator {name!r}: unknown option(s) {unknown}; its options are "
                         f"{estimator_option_defaults(name)}")
    if ranker == "lambdamart" and name not in TREE_ESTIMATORS:
        raise ValueError(f"estimator {name!r} has no tree-ensemble (lambdamart) form; expected one of "
                         f"{TREE_ESTIMATORS}, or ranker linear or mlp")
    if gbdt and ranker != "lambdamart":
        raise ValueError(f"estimator {name!r}: gbdt options apply to ranker 'lambdamart' only, not {ranker!r}")
    key = (name, make, ranker, _freeze(hidden), _freeze(gbdt or {}), _freeze(options))
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    est = make(make_scorer(ranker, 1, tuple(hidden)), **options)
    if ranker == "lambdamart":
        est = gbdt_trees.tree_estimator(est, gbdt)
    _CACHE[key] = est
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return est


# --------------------------------------------------------------------------- transitional: the old flat options
# The experiments' ``estimator_options`` is still one flat dict of prefixed keys; this maps it onto each
# estimator's keyword arguments until the typed offline configuration replaces it.
_FLAT_KEYS = {
    "naive_form": (("naive",), "form"),
    "ips_form": (("ips", "ips_oracle"), "form"),
    "ips_clip": (("ips", "ips_oracle", "ips_lambda"), "clip"),
    "prs_gamma": (("prs", "prs_lambda", "pns"), "gamma"),
    "dla_clip": (("dla",), "clip"),
    "em_step": (("regression_em",), "step"),
    "pd_step": (("pair_debias", "pair_debias_lambda"), "step"),
    "pd_p": (("pair_debias", "pair_debias_lambda"), "p"),
    "affine_clip_negative": (("affine_oracle",), "clip_negative"),
    "labeled_form": (("labeled",), "form"),
    **{f"vec_{k}": (("vectorization",) + (("affine",) if k in ("freeze", "joint_steps") else ()), k)
       for k in ("dim", "freeze", "joint_steps", "l2", "base_hidden", "logvar_min", "observation_init",
                 "train_observation")},  # the learned Affine follows Vectorization's schedule
}


def options_from_flat(name: str, flat: dict | None, ranker: str = "linear") -> dict:
    """``make_estimator`` keyword arguments of estimator ``name`` from a flat, prefixed options dict
    (``{"vec_dim": 2, "ips_clip": None, "gbdt": {...}, ...}``): the keys that belong to ``name``, renamed, and
    ``gbdt`` when ``ranker`` is lambdamart. Unknown keys raise ``ValueError``."""
    out = {}
    for key, value in (flat or {}).items():
        if key == "gbdt":
            if value and ranker == "lambdamart":
                out["gbdt"] = dict(value)
            continue
        if key not in _FLAT_KEYS:
            raise ValueError(f"estimator_options: unknown key {key!r}; expected some of "
                             f"{sorted((*_FLAT_KEYS, 'gbdt'))}")
        names, option = _FLAT_KEYS[key]
        if name in names:
            out[option] = tuple(value) if isinstance(value, list) else value
    return out


__all__ = ["ALL_ESTIMATORS", "CLICK_ESTIMATORS", "ESTIMATORS", "LABELED_ESTIMATORS", "ORACLE_ESTIMATORS",
           "TREE_ESTIMATORS", "ClickBatch",
           "Estimator", "LabeledBatch", "Propensities", "estimator_option_defaults", "make_estimator",
           "options_from_flat", "register_estimator"]
