"""The estimator interface the offline experiments call: ``make(name, ranker=, hidden=, **options)`` and
``estimator_option_defaults(name)`` (each estimator's keyword options with their defaults, plus ``gbdt``, the
LightGBM settings of ``ranker: lambdamart``), over the registry ``ltrjax.offline.estimators``.
"""

from __future__ import annotations

from ltrjax.offline import estimators as _registry


def estimator_option_defaults(name: str) -> dict:
    """{option: default} of estimator ``name`` (``gbdt``: the tree ranker's LightGBM settings)."""
    return {**_registry.estimator_option_defaults(name), "gbdt": None}


def make(name: str, *, ranker: str, hidden, **options):
    """Estimator ``name`` with a ``ranker`` scorer of widths ``hidden`` and keyword ``options`` (memoized)."""
    options = {k: tuple(v) if isinstance(v, list) else v for k, v in options.items()}
    if ranker != "lambdamart":
        options.pop("gbdt", None)
    return _registry.make_estimator(name, ranker=ranker, hidden=tuple(hidden), **options)


def vectorization_table_options(dim: int) -> dict:
    """Per-estimator options of the Vectorization tables: the ULTRA listwise forms of naive and IPS (the paper's
    baselines) and Vectorization's d."""
    return {"naive": {"form": "listwise"}, "ips": {"form": "listwise"}, "ips_oracle": {"form": "listwise"},
            "vectorization": {"dim": int(dim)}}
