"""Tests at the unit of replication, the trial: paired t-tests over per-trial values, and how many trials a power
estimate from the observed spread asks for.

A trial (one seed: its split, production ranker, logged clicks and every estimator's fit) is what an experiment
replicates; two systems' values in one trial share all of it, so the trials pair up and the test is a paired t-test
over the n per-trial differences d_t = a_t - b_t (Student's t with n - 1 degrees of freedom, ``scipy.stats``).
Units inside a trial (test queries, test sessions) share one learned model and are not independent replicates.

Kinds of one-sided claims about d = a - b (``paired_t``):

* ``superiority``: mean(d) > 0;
* ``noninferiority``: mean(d) > -margin (a is not worse than b by the margin or more);
* ``equivalence``: |mean(d)| < margin, two one-sided tests (TOST), p = the larger of the two.

Every result carries ``effect``: how far the observed mean lies on the claim's side of its null (mean(d),
mean(d) + margin, margin - |mean(d)|), and ``trials_needed``: the smallest n at which the test reaches
p < ``ALPHA`` with probability ``POWER`` if the true effect and spread were the observed ones (the noncentral t;
None when the observed effect is not on the claim's side). Imports no other module of ltrjax (a leaf).
"""

from __future__ import annotations

import importlib

import numpy as np


def _stats():
    """``scipy.stats``, imported when first used: it takes about 0.5 s, and every run imports this module through
    the report code, most never testing anything."""
    return importlib.import_module("scipy.stats")

ALPHA = 0.05
POWER = 0.8
MAX_TRIALS = 10_000  # the largest n a power estimate searches
KINDS = ("superiority", "noninferiority", "equivalence")


def _diff(a, b) -> np.ndarray:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if a.ndim != 1 or a.shape != b.shape or a.size < 1:
        raise ValueError(f"paired over trials: two non-empty 1-D arrays of the same length, got shapes {a.shape} and "
                         f"{b.shape}")
    d = a - b
    if not np.all(np.isfinite(d)):
        raise ValueError(f"paired over trials: {int(np.sum(~np.isfinite(d)))} non-finite differences")
    return d


def trials_needed(effect: float, sd: float, *, two_sided: bool = False, alpha: float = ALPHA,
                  power: float = POWER) -> int | None:
    """Smallest n (2..``MAX_TRIALS``) at which a paired t-test of a true mean difference ``effect`` (beyond the
    null) with per-trial spread ``sd`` rejects at ``alpha`` with probability ``power``; None when ``effect`` <= 0
    or no n up to ``MAX_TRIALS`` does."""
    if not np.isfinite(effect) or effect <= 0:
        return None
    if sd <= 0:
        return 2
    n = np.arange(2, MAX_TRIALS + 1, dtype=np.float64)
    crit = _stats().t.ppf(1 - (alpha / 2 if two_sided else alpha), n - 1)
    reach = _stats().nct.sf(crit, n - 1, effect / sd * np.sqrt(n))
    hit = np.flatnonzero(reach >= power)
    return int(n[hit[0]]) if hit.size else None


def paired_t(a, b, kind: str = "superiority", margin: float = 0.0, alpha: float = ALPHA) -> dict:
    """One-sided paired t-test over trials of the claim ``kind`` about a - b (module docstring); one trial has no
    spread: p and trials_needed are None."""
    if kind not in KINDS:
        raise ValueError(f"paired_t: kind must be one of {KINDS}, got {kind!r}")
    d = _diff(a, b)
    n, mean = d.size, float(d.mean())
    sd = float(d.std(ddof=1)) if n > 1 else float("nan")
    se = max(sd / np.sqrt(n), 1e-12)
    if kind == "superiority":
        p, effect = _stats().t.sf(mean / se, n - 1), mean
    elif kind == "noninferiority":
        p, effect = _stats().t.sf((mean + margin) / se, n - 1), mean + margin
    else:
        p = max(_stats().t.sf((mean + margin) / se, n - 1), _stats().t.cdf((mean - margin) / se, n - 1))
        effect = margin - abs(mean)
    if n < 2:
        p = None
    return {"kind": kind, "unit": "trial", "test": "paired t over trials (one-sided)", "n": int(n),
            "mean_diff": mean, "std_diff": sd, "margin": float(margin), "wins": int(np.sum(d > 0)),
            "p_value": None if p is None else float(p), "effect": float(effect),
            "trials_needed": None if p is None or p < alpha else trials_needed(effect, sd, alpha=alpha)}


def two_sided_p(a, b) -> float | None:
    """Two-sided paired t-test p over trials (``scipy.stats.ttest_rel``); equal differences: 1 if all zero, else 0."""
    d = _diff(a, b)
    if d.size < 2:
        return None
    if np.allclose(d, d[0]):
        return 1.0 if d[0] == 0 else 0.0
    return float(_stats().ttest_rel(np.asarray(a, np.float64), np.asarray(b, np.float64)).pvalue)


def passes(test: dict, alpha: float = ALPHA) -> bool:
    return test.get("p_value") is not None and test["p_value"] < alpha


def verdict(test: dict, controls: dict | None = None, alpha: float = ALPHA) -> str:
    """The claim's word from its test and its controls' ({name: the same test with the subject replaced}):

    * "uninformative in this regime": a control that learns nothing passes the same test, and the claim's own
      observed effect is not against it (so the test cannot tell the subject from the control);
    * "holds": p < ``alpha`` (the papers' level) and no control passes;
    * "does not hold": the observed effect is not on the claim's side;
    * "undecided at n trials": on the claim's side but not significant (``trials_needed`` says how many trials
      the power estimate asks for), or one trial (no test).
    """
    if any(passes(c, alpha) for c in (controls or {}).values()) and test["effect"] > 0:
        return "uninformative in this regime"
    if passes(test, alpha):
        return "holds"
    if test["effect"] <= 0 and test.get("p_value") is not None:
        return "does not hold"
    return f"undecided at {test['n']} trials"


def all_of(tests: dict) -> dict:
    """Intersection-union of one-sided tests ({name: ``paired_t`` result}): the claim holds only if every one does;
    p = the largest, effect = the smallest, trials_needed = the largest a test asks for (None if any cannot)."""
    worst = min(tests, key=lambda k: tests[k]["effect"])
    needs = [t["trials_needed"] for t in tests.values() if not passes(t)]
    ps = [t["p_value"] for t in tests.values()]
    out = {**tests[worst], "p_value": None if None in ps else max(ps), "closest": worst}
    out["trials_needed"] = (None if not needs or any(x is None for x in needs) else max(needs))
    return out
