"""Analyses of online runs: exploitation ratios (EBRank Table 4) and click rates of perfect
documents by entry time (UCBRank Fig. 1). Pure NumPy on host arrays.

Document arrays (``entry_session``, ``doc_query``, clicks, labels, ...) are flat and aligned:
element ``i`` of each describes the same document. ``BucketState`` keeps its counters and
``entry_session`` in *entry order* (slot j = the j-th document of the query to enter), so either
take both in entry order (labels via ``state.to_entry_order``) or both in dataset order, and
drop the scratch row and padding slots. ``BucketState.entry_session`` is -1 both for initial
documents and for documents that never entered: pass ``entered`` (slot j < n_entered) to tell
them apart.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np


def _weight_vector(weights) -> np.ndarray:
    w = np.asarray(weights, np.float64)
    if w.ndim == 2 and 1 in w.shape:  # a Dense kernel [d, 1]
        w = w.reshape(-1)
    if w.ndim != 1 or w.size == 0:
        raise ValueError(f"exploitation_ratio: expected a linear model's weight vector, got shape {w.shape}")
    return w


def exploitation_ratio(weights, behaviour_index: int | Sequence[int] = -1) -> float:
    """EBRank Eq. 29: |w_b| / sum_i |w_i| of a linear model's weights (no bias term).

    ``behaviour_index`` may list several behaviour features (e.g. UCBRank's concatenated w-ctr
    and w-Delta); their |w| are summed. Returns NaN for an all-zero weight vector.
    """
    w = np.abs(_weight_vector(weights))
    idx = np.atleast_1d(np.asarray(behaviour_index, np.int64))
    total = w.sum()
    if total <= 0:
        return float("nan")
    return float(w[np.unique(np.mod(idx, w.size))].sum() / total)


def exploitation_ratios(weights, behaviour_index: int | Sequence[int] = -1) -> dict[str, float]:
    """Both columns of EBRank Table 4: the behaviour features' ratio and the largest ratio of a
    single non-behaviour feature (``max_nonbehaviour``)."""
    w = np.abs(_weight_vector(weights))
    total = w.sum()
    behaviour = np.zeros(w.size, bool)
    behaviour[np.atleast_1d(np.asarray(behaviour_index, np.int64))] = True
    if total <= 0:
        return {"behaviour": float("nan"), "max_nonbehaviour": float("nan")}
    other = w[~behaviour]
    return {"behaviour": float(w[behaviour].sum() / total),
            "max_nonbehaviour": float(other.max() / total) if other.size else 0.0}


def candidate_sessions(session_query, entry_session, doc_query, *, entered=None) -> np.ndarray:
    """i64 per document: the number of sessions of its query at or after its entry.

    ``session_query`` [n_sessions] is the query of every session of the run in global session order
    (warm-up sessions, then main sessions; the global session index is the position). A document
    with ``entry_session`` t >= 0 entered in session t and is a candidate in sessions t, t+1, ...
    of its query; -1 means it was in the initial candidate set (a candidate from session 0).
    Documents with ``entered`` False get 0. Vectorized: one sort of the sessions by
    (query, index) and two searchsorted per document.
    """
    session_query = np.asarray(session_query, np.int64).reshape(-1)
    entry = np.asarray(entry_session, np.int64)
    doc_query = np.asarray(doc_query, np.int64)
    if entry.shape != doc_query.shape:
        raise ValueError(f"candidate_sessions: entry_session {entry.shape} and doc_query {doc_query.shape} differ")
    n = session_query.size
    # key = query * (n + 1) + session index, sorted (unique): sessions of query q at or after t are
    # the keys in [q (n+1) + t, q (n+1) + n]
    keys = np.sort(session_query * (n + 1) + np.arange(n, dtype=np.int64))
    start = np.clip(entry, 0, n)
    lo = np.searchsorted(keys, doc_query * (n + 1) + start, side="left")
    hi = np.searchsorted(keys, doc_query * (n + 1) + n, side="left")
    count = (hi - lo).astype(np.int64)
    if entered is not None:
        entered = np.asarray(entered, bool)
        if entered.shape != entry.shape:
            raise ValueError(f"candidate_sessions: entered {entered.shape} and entry_session {entry.shape} differ")
        count = np.where(entered, count, 0)
    return count


def _bin_label(lo: float, hi: float) -> str:
    return f"{100 * lo:.0f}–{100 * hi:.0f}%"


def click_rate_by_entry(clicks, candidate_sessions, entry_session, is_perfect, first_main_session: int,
                        n_main_sessions: int, n_bins: int = 10, *, entered=None) -> dict:
    """UCBRank Fig. 1: click rate (#clicks / #candidate sessions) of perfect documents by entry time.

    Documents considered: ``is_perfect`` (label == y_max) and ``entered`` (all when None). Bin 0,
    "initial", holds documents with entry_session < ``first_main_session`` (-1: initial set; the
    warm-up admits no documents); bins 1..n_bins split the main phase
    [first_main_session, first_main_session + n_main_sessions) into equal ranges of entry time.
    The rate of a bin is the mean over its documents of each document's own click rate.
    Documents with 0 candidate sessions are left out of the mean and counted in ``skipped``.

    Returns lists of length n_bins + 1 (bin 0 = initial): ``labels``, ``rate`` (NaN for an empty
    bin), ``rate_std`` (over documents), ``count`` (documents averaged), ``skipped``; and
    ``edges_session`` / ``edges_fraction`` (n_bins + 1 edges of the main-phase bins, as global
    session indices and as fractions of the main phase), ``n_bins``.
    """
    clicks = np.asarray(clicks, np.float64)
    cand = np.asarray(candidate_sessions, np.float64)
    entry = np.asarray(entry_session, np.int64)
    perfect = np.asarray(is_perfect, bool)
    if not (clicks.shape == cand.shape == entry.shape == perfect.shape):
        raise ValueError(f"click_rate_by_entry: document arrays differ in shape: clicks {clicks.shape}, "
                         f"candidate_sessions {cand.shape}, entry_session {entry.shape}, is_perfect {perfect.shape}")
    if n_bins < 1 or n_main_sessions < 1:
        raise ValueError(f"click_rate_by_entry: need n_bins >= 1 and n_main_sessions >= 1, got {n_bins}, "
                         f"{n_main_sessions}")
    keep = perfect if entered is None else perfect & np.asarray(entered, bool).reshape(perfect.shape)
    clicks, cand, entry = clicks[keep], cand[keep], entry[keep]
    rel = (entry - first_main_session) / float(n_main_sessions)
    main_bin = 1 + np.clip(np.floor(rel * n_bins).astype(np.int64), 0, n_bins - 1)
    bins = np.where(entry < first_main_session, 0, main_bin)
    valid = cand > 0
    rate = np.where(valid, clicks / np.where(valid, cand, 1.0), 0.0)
    nb = n_bins + 1
    count = np.bincount(bins[valid], minlength=nb)
    skipped = np.bincount(bins[~valid], minlength=nb)
    total = np.bincount(bins[valid], weights=rate[valid], minlength=nb)
    total_sq = np.bincount(bins[valid], weights=rate[valid] ** 2, minlength=nb)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(count > 0, total / np.maximum(count, 1), np.nan)
        var = np.where(count > 0, total_sq / np.maximum(count, 1) - mean ** 2, np.nan)
    fractions = np.linspace(0.0, 1.0, n_bins + 1)
    edges = first_main_session + fractions * n_main_sessions
    return {
        "labels": ["initial"] + [_bin_label(fractions[i], fractions[i + 1]) for i in range(n_bins)],
        "rate": [float(x) for x in mean],
        "rate_std": [float(np.sqrt(max(v, 0.0))) if np.isfinite(v) else float("nan") for v in var],
        "count": [int(c) for c in count],
        "skipped": [int(s) for s in skipped],
        "edges_session": [float(e) for e in edges],
        "edges_fraction": [float(f) for f in fractions],
        "n_bins": int(n_bins),
    }


def average_click_rates(per_trial: Sequence[dict]) -> dict:
    """Mean over trials of :func:`click_rate_by_entry` outputs (same binning): ``rate`` = mean of
    the trials' bin rates (trials with an empty bin ignored there), ``rate_std`` = their std over
    trials, ``count``/``skipped`` summed, ``rate_trials`` = the per-trial rates."""
    if not per_trial:
        raise ValueError("average_click_rates: no trials")
    rates = np.array([t["rate"] for t in per_trial], np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN bins
        mean = np.nanmean(rates, axis=0)
        std = np.nanstd(rates, axis=0)
    out = {k: v for k, v in per_trial[0].items() if k in ("labels", "edges_session", "edges_fraction", "n_bins")}
    out.update(rate=[float(x) for x in mean], rate_std=[float(x) for x in std],
               count=[int(x) for x in np.sum([t["count"] for t in per_trial], axis=0)],
               skipped=[int(x) for x in np.sum([t["skipped"] for t in per_trial], axis=0)],
               rate_trials=rates.tolist(), trials=len(per_trial))
    return out
