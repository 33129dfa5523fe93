"""The estimator interface the offline experiments call: ``make(name, ranker=, hidden=, **options)`` and
``estimator_option_defaults(name)`` (each estimator's keyword options and their defaults).

The estimator registry (``ltrjax.offline.estimators``) provides both; until it does, the flat option
mapping of its older ``make_estimator(name, opts, ranker, hidden)`` is split per estimator here.
"""

from __future__ import annotations

from ltrjax.offline import estimators as _registry

# the older registry's flat options, per estimator that reads them
_LEGACY_OPTIONS = {
    "naive": {"naive_form": "pairwise"},
    "ips": {"ips_form": "pairwise", "ips_clip": None},
    "pns": {"prs_gamma": 1.0},
    "prs": {"prs_gamma": 1.0},
    "prs_lambda": {"prs_gamma": 1.0},
    "dla": {"dla_clip": None},
    "regression_em": {"em_step": 0.05},
    "pair_debias": {"pd_step": 0.05, "pd_p": 1.0},
    "affine": {"affine_clip_negative": True},
    "vectorization": {"vec_dim": 2, "vec_freeze": 500, "vec_joint_steps": 4000, "vec_l2": 1e-3,
                      "vec_base_hidden": [256, 64], "vec_logvar_min": -10.0, "vec_observation_init": None,
                      "vec_train_observation": True},
    "labeled": {"labeled_form": "pairwise"},
    "production": {},
}
NEW_INTERFACE = hasattr(_registry, "estimator_option_defaults")


def estimator_option_defaults(name: str) -> dict:
    """{option: default} of estimator ``name``."""
    if NEW_INTERFACE:
        return dict(_registry.estimator_option_defaults(name))
    return {**_LEGACY_OPTIONS.get(name, {}), "gbdt": None}


def make(name: str, *, ranker: str, hidden, **options):
    """Estimator ``name`` with a ``ranker`` scorer of widths ``hidden`` and keyword ``options`` (memoized)."""
    if NEW_INTERFACE:
        return _registry.make_estimator(name, ranker=ranker, hidden=tuple(hidden), **options)
    return _registry.make_estimator(name, options, ranker, tuple(hidden))


def registered() -> tuple[str, ...]:
    return tuple(_registry.ALL_ESTIMATORS)


def vectorization_table_options(dim: int) -> dict:
    """Per-estimator options of the Vectorization tables: the ULTRA listwise forms of naive and IPS (the paper's
    baselines) and Vectorization's d."""
    if NEW_INTERFACE:
        return {"naive": {"form": "listwise"}, "ips": {"form": "listwise"}, "ips_oracle": {"form": "listwise"},
                "vectorization": {"dim": int(dim)}}
    return {"naive": {"naive_form": "listwise"}, "ips": {"ips_form": "listwise"}, "vectorization": {"vec_dim": int(dim)}}
