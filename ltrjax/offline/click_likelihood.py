"""Click log-likelihood and perplexity per rank on held-out sessions (issue 42, item 3; Dupret & Piwowarski 2008,
the measure of the click-model literature and of CLAX):

    LL_k = 1/N_k sum_sessions [c_k log P(c_k = 1) + (1 - c_k) log (1 - P(c_k = 1))],   PPL_k = 2^(-LL_k / ln 2)

over the N_k held-out sessions that show a document at rank k (PPL 1: perfect; 2: a coin). Held-out sessions are
the log's sessions of split ``vali``/``test`` on training queries (``click_stream.scan`` keeps up to
``MAX_HELDOUT``). Scored as click models: ``rank_ctr``, the training sessions' click rate at each rank (the
position-only reference), and the estimators whose fit is a click probability, RegressionEM's
P(c) = theta_k sigmoid(s + b). The estimators whose losses fit clicks only up to a list constant (DLA, Affine,
Vectorization: softmax losses) and the pairwise naive estimator give no probability and are not scored.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

MAX_HELDOUT = 200_000
EPS = 1e-6  # probabilities clipped to [EPS, 1 - EPS]


@dataclasses.dataclass(frozen=True)
class HeldOut:
    """Held-out sessions by rank: ``features [H, K, F]`` of the shown documents, ``mask [H, K]``, ``clicks``."""

    features: np.ndarray
    mask: np.ndarray
    clicks: np.ndarray

    @property
    def n_sessions(self) -> int:
        return int(self.mask.shape[0])


def per_rank(p: np.ndarray, clicks: np.ndarray, mask: np.ndarray) -> dict:
    """{"log_likelihood": mean LL per rank (nats), "perplexity": PPL per rank, "sessions": N_k} (ranks with no
    held-out session: None)."""
    p = np.clip(np.asarray(p, np.float64), EPS, 1 - EPS)
    ll = np.where(clicks, np.log(p), np.log1p(-p))
    n = mask.sum(axis=0)
    total = np.where(mask, ll, 0.0).sum(axis=0)
    mean = np.where(n > 0, total / np.maximum(n, 1), np.nan)
    nan_none = lambda a: [None if not np.isfinite(x) else float(x) for x in a]  # noqa: E731
    return {"log_likelihood": nan_none(mean), "perplexity": nan_none(2.0 ** (-mean / np.log(2.0))),
            "sessions": [int(x) for x in n]}


def rank_ctr(stats, mask) -> np.ndarray:
    """[K]: the training sessions' click rate at each rank (clicks at k over sessions showing a document at k)."""
    shown = (np.asarray(stats.n_sessions)[:, None] * np.asarray(mask)).sum(axis=0)
    return np.asarray(stats.clicks).sum(axis=0) / np.maximum(shown, 1.0)


def click_probabilities(name: str, estimator, params, state, heldout: HeldOut) -> np.ndarray | None:
    """P(c = 1) of every held-out shown document under a fitted estimator, or None where its fit is no click
    probability (module docstring)."""
    if name != "regression_em":
        return None
    s = np.asarray(jax.jit(estimator.score)(params, state, heldout.features, heldout.mask), np.float64)
    theta = np.asarray(state["theta"], np.float64)[: heldout.mask.shape[1]]
    intercept = float(np.asarray(state.get("intercept", 0.0)))
    return theta[None, :] * (1.0 / (1.0 + np.exp(-(s + intercept))))


def markdown(rows: dict) -> str:
    """A table: a row per click model, its perplexity at each rank (held-out sessions)."""
    rows = {name: r for name, r in rows.items() if r}
    if not rows:
        return ""
    k = max(len(r["perplexity"]) for r in rows.values())
    first = next(iter(rows.values()))
    lines = ["", "### Click perplexity per rank (held-out sessions)", "",
             f"Sessions per rank: {', '.join(map(str, first['sessions']))}. Lower is better; 1 is perfect.", "",
             "| click model | " + " | ".join(f"@{i + 1}" for i in range(k)) + " |", "|---|" + "---|" * k]
    for name, r in rows.items():
        lines.append(f"| {name} | " + " | ".join("-" if v is None else f"{v:.4f}" for v in r["perplexity"]) + " |")
    return "\n".join(lines) + "\n"


def rows_of(results: dict) -> dict:
    """{click model: {"perplexity": per rank, mean over trials; "sessions": ...}} of an offline results dict."""
    infos = results.get("trials_info") or []
    rows = {}
    if infos and infos[0].get("click_perplexity_rank_ctr"):
        rows["rank_ctr"] = infos[0]["click_perplexity_rank_ctr"]
    for name, entry in (results.get("algorithms") or {}).items():
        per = [t["click_perplexity"] for t in entry["trials"] if t.get("click_perplexity")]
        if per:
            k = len(per[0]["perplexity"])
            mean = [None if any(p["perplexity"][i] is None for p in per) else
                    float(np.mean([p["perplexity"][i] for p in per])) for i in range(k)]
            rows[name] = {"perplexity": mean, "sessions": per[0]["sessions"]}
    return rows
