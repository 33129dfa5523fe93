"""Significance tests of the result tables: at the unit of replication, the trial (``trial_level_vs_best``: paired
t-tests over the trials' values, what the online and offline tables report), and Fisher's randomization test
(paired sign flips over any paired units, kept for comparisons that name their own unit).

EBRank §5.1.5 and UCBRank §6 test significance "with the Fisher randomization test (Smucker et
al., 2007), p < 0.05". For paired measurements (the same units scored by two systems) the test
statistic is the mean difference; under the null hypothesis the two labels of every unit are
exchangeable, so each difference's sign is flipped at random and the observed |mean| is compared
with the flipped ones.
"""

from __future__ import annotations

import numpy as np

from ltrjax import trial_stats

EXACT_MAX_UNITS = 16  # 2^16 sign patterns x 16 units: enumerate exactly up to here
_CHUNK_ELEMENTS = 1 << 23  # sign bits (as float64) materialized at once by the Monte Carlo loop: 64 MiB


def _differences(a, b) -> np.ndarray:
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    if a.ndim != 1 or b.ndim != 1:
        raise ValueError(f"paired_randomization_test: a and b must be 1-D arrays of paired units, got shapes "
                         f"{a.shape} and {b.shape}")
    if a.shape != b.shape:
        raise ValueError(f"paired_randomization_test: a and b must pair up unit by unit, got {a.size} and "
                         f"{b.size} units")
    if a.size == 0:
        raise ValueError("paired_randomization_test: no units to test")
    d = a - b
    if not np.all(np.isfinite(d)):
        raise ValueError(f"paired_randomization_test: {int(np.sum(~np.isfinite(d)))} non-finite differences")
    return d


def _sign_flip_p_values(d: np.ndarray, n_samples: int, seed: int, exact_max_units: int) -> np.ndarray:
    """Two-sided sign-flip p-values of the columns of ``d`` [n, K], one pass over shared sign patterns."""
    n, _ = d.shape
    observed = np.abs(d.sum(axis=0))
    tol = 1e-9 * np.abs(d).sum(axis=0)
    total = d.sum(axis=0)
    if n <= exact_max_units:
        patterns = np.arange(1 << n, dtype=np.int64)[:, None]
        bits = ((patterns >> np.arange(n)) & 1).astype(np.float64)  # 1 keeps the sign, 0 flips it
        t = 2.0 * (bits @ d) - total
        p = np.count_nonzero(np.abs(t) >= observed - tol, axis=0) / float(1 << n)
    else:
        if n_samples < 1:
            raise ValueError(f"paired_randomization_test: n_samples must be positive, got {n_samples}")
        rng = np.random.default_rng(seed)
        rows = int(max(1, min(n_samples, _CHUNK_ELEMENTS // n)))
        n_bytes = (n + 7) // 8
        extreme = np.zeros(d.shape[1], np.int64)
        done = 0
        while done < n_samples:
            r = min(rows, n_samples - done)
            packed = np.frombuffer(rng.bytes(r * n_bytes), np.uint8).reshape(r, n_bytes)
            bits = np.unpackbits(packed, axis=1, count=n).astype(np.float64)
            t = 2.0 * (bits @ d) - total
            extreme += np.count_nonzero(np.abs(t) >= observed - tol, axis=0)
            done += r
        p = (extreme + 1) / float(n_samples + 1)
    return np.where(observed <= tol, 1.0, p)


def paired_randomization_test(a, b, *, n_samples: int = 10000, seed: int = 0,
                              exact_max_units: int = EXACT_MAX_UNITS) -> float:
    """Two-sided p-value of mean(a - b) = 0 by Fisher's randomization (paired sign-flip) test.

    ``a[i]`` and ``b[i]`` are the two systems' values on unit ``i``. The statistic is
    T(s) = sum_i s_i d_i with d = a - b and random signs s_i = +-1; p = P(|T(s)| >= |T(1)|).
    With n <= ``exact_max_units`` units all 2^n sign patterns are enumerated (exact p, the
    identity included, so p >= 2/2^n when d != 0); otherwise ``n_samples`` random patterns are
    drawn (seeded, in memory-bounded chunks: about 64 MiB whatever n is) and
    p = (1 + #{|T(s)| >= |T(1)|}) / (1 + n_samples), which is never 0. Units with d_i = 0 carry
    no information and change nothing; all-zero differences give p = 1. Patterns whose |T| ties
    the observed one (up to rounding) count as at least as extreme.

    Cost of the Monte Carlo branch: about n_samples x n x 5 ns on a slow shared core
    (10^4 samples over 10^6 units ~ 1 min); :func:`significance_vs_best` tests all rows in one pass.
    """
    d = _differences(a, b)
    return float(_sign_flip_p_values(d[:, None], n_samples, seed, exact_max_units)[0])


def significance_vs_best(per_unit: dict[str, np.ndarray], alpha: float = 0.05, *, n_samples: int = 10000,
                         seed: int = 0, higher_is_better: bool = True,
                         exact_max_units: int = EXACT_MAX_UNITS) -> dict[str, dict]:
    """Test every row against the best one (by mean) with :func:`paired_randomization_test`
    (all rows in one pass over the same random sign patterns: the cost of one test).

    ``per_unit[row]`` holds the row's values on the same paired units, in the same order, for
    every row. Returns, in the input's row order, ``{row: {"mean", "p_value", "significantly_worse",
    "best", "n_units"}}``: ``p_value`` is None for the best row (the first one on a tie), and
    ``significantly_worse`` is ``p_value < alpha`` for the others. ``best_significant`` on the best
    row says whether it is significantly better than every other row (EBRank Table 3's ``*``).

    Which units to pass (units must pair up across rows, and there must be enough of them):
    with 5 trials a sign-flip test over trials can never reach p < 0.05, since its smallest
    two-sided p-value is 2/2^5 = 1/16. Pass finer units instead:

    * Warm-/Cold-NDCG: (trial, test query) pairs, i.e. the per-query NDCG of the final ranker of
      every trial concatenated over trials (the queries and their entered documents are the same
      for all algorithms in a trial when the trial key fixes the entry order);
    * Cum-NDCG: (trial, test session) pairs of the discounted contributions
      gamma^(T-t) * NDCG_t (:func:`discounted_contributions`), whose sum over a trial's T test
      sessions is its Cum-NDCG. Algorithms share every trial's session sequence (queries and
      entries are drawn from the trial key), so sessions pair up.

    The mean of such units orders rows as the trial means do (the same number of units per trial).
    """
    if not per_unit:
        return {}
    names = list(per_unit)
    values = {k: np.asarray(v, np.float64) for k, v in per_unit.items()}
    sizes = {k: v.shape for k, v in values.items()}
    if any(len(s) != 1 for s in sizes.values()) or len(set(sizes.values())) != 1:
        raise ValueError(f"significance_vs_best: every row needs a 1-D array over the same units, got shapes {sizes}")
    means = {k: float(v.mean()) if v.size else float("nan") for k, v in values.items()}
    sign = 1.0 if higher_is_better else -1.0
    finite = [k for k in names if np.isfinite(means[k])]
    best = max(finite, key=lambda k: sign * means[k]) if finite else names[0]
    others_names = [k for k in names if k != best]
    p_values = {}
    if others_names:
        d = np.stack([_differences(values[best], values[k]) for k in others_names], axis=1)
        p_values = dict(zip(others_names, _sign_flip_p_values(d, n_samples, seed, exact_max_units).tolist()))
    out: dict[str, dict] = {}
    for k in names:
        if k == best:
            out[k] = {"mean": means[k], "p_value": None, "significantly_worse": False, "best": True,
                      "n_units": int(values[k].size)}
        else:
            out[k] = {"mean": means[k], "p_value": p_values[k], "significantly_worse": bool(p_values[k] < alpha),
                      "best": False, "n_units": int(values[k].size)}
    others = [out[k] for k in names if k != best]
    out[best]["best_significant"] = bool(others) and all(o["significantly_worse"] for o in others)
    return out


def discounted_contributions(values, gamma: float = 0.995) -> np.ndarray:
    """gamma^(T-1-t) * x_t for t = 0..T-1: the per-session terms of EBRank's Cum-NDCG (Eq. 7).

    Their sum is ``ltrjax.metrics.cumulative_ndcg(values, gamma)``; pass the NDCG of one
    trial's test sessions (in session order) and concatenate over trials for
    :func:`significance_vs_best`.
    """
    values = np.asarray(values, np.float64)
    if values.ndim != 1:
        raise ValueError(f"discounted_contributions: expected a 1-D sequence, got shape {values.shape}")
    return values * gamma ** np.arange(values.size - 1, -1, -1, dtype=np.float64)


TRIAL_UNIT = "trial (paired t-test over the trials' values, two-sided)"


def paired(first: dict, second: dict) -> tuple[np.ndarray, np.ndarray]:
    """Two rows' values ({trial id: value}) on the trials both have with finite values, in trial order (f64)."""
    shared = sorted(t for t in set(first) & set(second) if np.isfinite(first[t]) and np.isfinite(second[t]))
    return (np.array([first[t] for t in shared], np.float64), np.array([second[t] for t in shared], np.float64))


def trial_level_vs_best(per_trial: dict[str, dict], alpha: float = 0.05, higher_is_better: bool = True) -> dict:
    """Every row against the best (by mean) at the unit of replication: a two-sided paired t-test over the trials
    both ran (``per_trial[row]`` = {trial id: value}); a trial's sessions and queries share one learned model, so
    they are not replicates. Returns, in the input's row order, ``{row: {"mean", "p_value", "significantly_worse",
    "best", "n_trials", "unit", "trials_needed"}}`` (the format of ``significance_vs_best``, ``n_units`` = the
    trials): ``p_value`` is None for the best row and for a row sharing fewer than 2 trials with it;
    ``trials_needed`` is the n a power estimate from the observed paired spread asks for to separate a row that is
    not significantly worse (None when separated, or when no n up to ``trial_stats.MAX_TRIALS`` would);
    ``best_significant`` on the best row: significantly better than every other row."""
    if not per_trial:
        return {}
    names = list(per_trial)
    means = {k: float(np.mean(list(v.values()))) if v else float("nan") for k, v in per_trial.items()}
    sign = 1.0 if higher_is_better else -1.0
    finite = [k for k in names if np.isfinite(means[k])]
    best = max(finite, key=lambda k: sign * means[k]) if finite else names[0]
    out: dict[str, dict] = {}
    for k in names:
        a, b = paired(per_trial[best], per_trial[k])
        row = {"mean": means[k], "p_value": None, "significantly_worse": False, "best": k == best,
               "n_trials": len(a), "n_units": len(a), "unit": TRIAL_UNIT, "trials_needed": None}
        if k != best and len(a) >= 2:
            p = trial_stats.two_sided_p(a, b)
            d = sign * (a - b)
            row.update(p_value=p, significantly_worse=bool(p < alpha))
            if p >= alpha:
                row["trials_needed"] = trial_stats.trials_needed(float(d.mean()), float(d.std(ddof=1)),
                                                                 two_sided=True, alpha=alpha)
        out[k] = row
    others = [out[k] for k in names if k != best]
    out[best]["best_significant"] = bool(others) and all(o["significantly_worse"] for o in others)
    return out


def holm(p_values: dict) -> dict:
    """Holm's step-down adjustment of a family of p-values ({name: p}; None stays None): the k-th smallest of m is
    multiplied by m - k + 1, then made non-decreasing and capped at 1 (Holm 1979). The family-wise error of
    rejecting every adjusted p < alpha is at most alpha."""
    tested = sorted((p, name) for name, p in p_values.items() if p is not None)
    m, running, out = len(tested), 0.0, {name: None for name in p_values}
    for k, (p, name) in enumerate(tested):
        running = max(running, min(1.0, (m - k) * p))
        out[name] = running
    return out


def trial_level_vs_baseline(per_trial: dict[str, dict], baseline: str, alpha: float = 0.05,
                            higher_is_better: bool = True) -> dict:
    """Every other row against the named ``baseline`` row at the unit of replication: a two-sided paired t-test
    over the trials both ran (``per_trial[row]`` = {trial id: value}), the rows' p-values Holm-adjusted as one
    family (``holm``). Returns ``{row: {"difference", "p_value", "p_holm", "better", "worse", "n_trials",
    "unit"}}`` for the rows other than the baseline (``difference``: the row's mean over the shared trials minus
    the baseline's; ``better``/``worse``: ``p_holm < alpha`` in that direction); {} without the baseline."""
    if baseline not in per_trial:
        return {}
    sign = 1.0 if higher_is_better else -1.0
    out: dict[str, dict] = {}
    for k, values in per_trial.items():
        if k == baseline:
            continue
        a, b = paired(values, per_trial[baseline])
        out[k] = {"difference": float((a - b).mean()) if len(a) else float("nan"),
                  "p_value": trial_stats.two_sided_p(a, b) if len(a) >= 2 else None,
                  "n_trials": len(a), "unit": TRIAL_UNIT}
    adjusted = holm({k: row["p_value"] for k, row in out.items()})
    for k, row in out.items():
        p = adjusted[k]
        row.update(p_holm=p, better=bool(p is not None and p < alpha and sign * row["difference"] > 0),
                   worse=bool(p is not None and p < alpha and sign * row["difference"] < 0))
    return out
