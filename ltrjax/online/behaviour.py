"""Behaviour features x_b from a document's click counters, and the ways a ranker may use them.

Every function here is a pure, elementwise function of ``DocCounters`` (any shape: one query's
row [Db] inside the session scan, or a bucket [Qb, Db] for evaluation), so the same code serves
the per-session logging scores and the offline Warm/Cold evaluation; on host (NumPy) counters, a
retrain's examples, it computes with NumPy.

Features (``FEATURES``):

- ``ctr``   raw click-through rate C / n (cumulated clicks over impressions), 0 when unseen.
            The UCBRank paper's "raw CTR"; its code divides by 1 + n because its impression
            counter starts at 1 — that is ``ctr_prior_count = 1`` here. The default (0) is the
            plain rate: its unseen value 0 is then a limit of the seen values (an unclicked
            document also has CTR 0) rather than a separate convention, and one impression does
            not halve the rate.
- ``delta`` UCBRank's affine-corrected feature (Eq. 8): (sum c - sum beta_k) / sum alpha_k over
            the sessions that showed the document; -2 when unseen (the code's
            ``ips_initialize``). Unbiased for R under the trust-bias / affine click model
            P(c) = alpha_k R + beta_k; under PBM (alpha = theta, beta = 0) it is C / E.
- ``cn``    EBRank's concat feature: raw clicks over accumulated exposure, C / E, 0 when unseen
            (seed-code.md §1.5; the paper's text writes C/n with IPS clicks — both consistent
            for R under PBM).

Feature settings (``SETTINGS``; UCBRank §4.3):

- ``wo_behav`` the model sees x_nb only (Eq. 10);
- ``concat``   the model sees [x_nb, x_b] (Eq. 11);
- ``ie``       independent evidence (Eq. 12): rank by x_b for documents that were shown
               (sum alpha_k > 0, i.e. impressions > 0) and by the x_nb model otherwise.

x_b here is *live*: it is read from the counters of the current session (the EBRank code
updates it after every session). UCBRank's code freezes x_b between 100 refreshes — that would
be a separate segment schedule for the behaviour features and is not implemented here.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ltrjax.online.state import DocCounters

FEATURES = ("ctr", "delta", "cn")
SETTINGS = ("wo_behav", "concat", "ie")
DELTA_UNSEEN = -2.0
UNSEEN = {"ctr": 0.0, "delta": DELTA_UNSEEN, "cn": 0.0}


def check_feature(name: str) -> str:
    if name not in FEATURES:
        raise ValueError(f"unknown behaviour feature {name!r}; expected one of {FEATURES}")
    return name


def check_setting(name: str) -> str:
    if name not in SETTINGS:
        raise ValueError(f"unknown feature setting {name!r}; expected one of {SETTINGS}")
    return name


def _safe_ratio(num, den, seen, unseen: float):
    if all(isinstance(a, (np.ndarray, np.generic)) for a in (num, den, seen)):
        # host arrays (a retrain's examples): NumPy, the same float32 operations; an eager jnp op here compiled a
        # program for every new example count
        return np.where(seen, num / np.where(seen, den, 1.0), np.asarray(unseen, np.result_type(num, den)))
    return jnp.where(seen, num / jnp.where(seen, den, 1.0), jnp.asarray(unseen, jnp.result_type(num, den)))


def shown(counters: DocCounters) -> jax.Array:
    """bool: the document has been shown at least once (in the top K)."""
    return counters.impressions > 0


def ctr(counters: DocCounters, prior_count: float = 0.0) -> jax.Array:
    """C / (n + prior_count) for shown documents, 0 otherwise (``prior_count = 1``: UCBRank code)."""
    return _safe_ratio(counters.clicks, counters.impressions + prior_count, shown(counters), 0.0)


def delta(counters: DocCounters) -> jax.Array:
    """UCBRank Eq. 8: (sum c - sum beta_k) / sum alpha_k for shown documents, -2 otherwise."""
    seen = counters.alpha_sum > 0
    return _safe_ratio(counters.clicks - counters.beta_sum, counters.alpha_sum, seen, DELTA_UNSEEN)


def clicks_over_exposure(counters: DocCounters) -> jax.Array:
    """EBRank's concat feature C / E (raw clicks over sum theta_k), 0 when never exposed."""
    return _safe_ratio(counters.clicks, counters.exposure, counters.exposure > 0, 0.0)


def feature(name: str, counters: DocCounters, ctr_prior_count: float = 0.0) -> jax.Array:
    """x_b of every document under feature ``name``."""
    if name == "ctr":
        return ctr(counters, ctr_prior_count)
    if name == "delta":
        return delta(counters)
    if name == "cn":
        return clicks_over_exposure(counters)
    check_feature(name)
    raise AssertionError  # unreachable


def unseen_value(name: str) -> float:
    """x_b of a document that was never shown (what cold evaluation substitutes)."""
    return UNSEEN[check_feature(name)]


def independent_evidence(model_scores: jax.Array, counters: DocCounters, name: str = "delta",
                         ctr_prior_count: float = 0.0) -> jax.Array:
    """UCBRank Eq. 12: x_b where the document was shown (sum alpha_k > 0), the model score otherwise."""
    return jnp.where(counters.alpha_sum > 0, feature(name, counters, ctr_prior_count), model_scores)


def cf_target(counters: DocCounters) -> jax.Array:
    """The counterfactual L2 regression target (baselines.md §4.1): (sum c / theta_k) / n, 0 when unseen.

    Unbiased for R under PBM because E[c / theta_k] = R at every position.
    """
    return _safe_ratio(counters.ips_clicks, counters.impressions, shown(counters), 0.0)
