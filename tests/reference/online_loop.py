"""The slow, obvious reference of the online simulator: plain NumPy, one session at a time.

It follows the EBRank code's own loop (seed-code.md §1.2): each query keeps its documents in a
shuffled order and the available ones are a prefix of it; per session a document may enter,
the policy scores the available documents, the top K are shown, clicks are drawn, counters
are updated with ``np.add.at``. It shares the simulator's random draws (initial order and
prefix sizes, the session sequence, the click uniforms and the policy noise keys), so
on the same inputs the two must agree exactly.
"""

from __future__ import annotations

import numpy as np

import jax

from ltrjax.online.simulator import SPLITS, policy_key

COUNTER_NAMES = ("clicks", "ips_clicks", "impressions", "exposure", "alpha_sum", "beta_sum")


class ReferenceState:
    """Per-query Python lists of NumPy arrays in entry order (slot j = j-th document to enter)."""

    def __init__(self, doc_ids, n_entered):
        self.doc_ids = [np.asarray(d) for d in doc_ids]  # dataset slot of each entry position
        self.n_entered = np.asarray(n_entered).copy()
        self.issue_count = np.zeros(len(doc_ids), np.int64)
        self.counters = {name: [np.zeros(len(d), np.float32) for d in doc_ids] for name in COUNTER_NAMES}


def numpy_scores(kind: dict, q: int, state: ReferenceState, features, params, noise):
    """Logging scores of the available documents of query ``q`` (entry order)."""
    n = state.n_entered[q]
    docs = state.doc_ids[q][:n]
    c = {name: state.counters[name][q][:n] for name in COUNTER_NAMES}
    if kind["name"] == "bm25":
        return features[q][docs, kind["column"]]
    if kind["name"] == "random_k":
        return noise[:n]
    if kind["name"] == "ebrank":
        dense = params["prior"]["params"]["MLPScorer_0"]["Dense_0"]
        kernel, bias = np.asarray(dense["kernel"])[:, 0], np.asarray(dense["bias"])[0]
        logits = features[q][docs] @ kernel + bias
        alpha = np.logaddexp(np.float32(0), logits).astype(np.float32) + np.float32(1e-4)
        beta = np.float32(kind["beta"])
        cc, nn_, ee = c["clicks"], c["exposure"], c["exposure"]
        r_hat = (cc + alpha) / (nn_ + alpha + beta)
        return r_hat + np.float32(params["epsilon"]) * (r_hat / (ee + alpha + beta) ** 2)
    raise ValueError(kind)


def shared_policy_noise(run_key, session: int, width: int) -> np.ndarray:
    """The simulator's per-session policy noise (Random-k scores) of one session."""
    return np.asarray(jax.random.uniform(policy_key(run_key, session), (width,)))


def run_sessions(state: ReferenceState, draws, policy_kind, params, features, gains, n_docs, idcg,
                 click, top_k: int, uniforms, noise_fn=None):
    """Run ``draws`` one session at a time; returns per-session NDCG, shown (dataset slots), clicks.

    ``uniforms[i]`` ([2, K]) decides the clicks of session i; ``noise_fn(i, q)`` gives policy noise.
    """
    theta = np.asarray(click["examination"], np.float32)[:top_k]
    alpha_k = np.asarray(click["alpha"], np.float32)[:top_k]
    beta_k = np.asarray(click["beta"], np.float32)[:top_k]
    inv_theta = np.where(theta > 0, np.float32(1) / np.where(theta > 0, theta, 1), 0).astype(np.float32)
    out_ndcg, out_shown, out_clicks = [], [], []
    for i, (q, enter) in enumerate(zip(draws.query, draws.enter)):
        if enter:
            state.n_entered[q] = min(state.n_entered[q] + 1, n_docs[q])
        state.issue_count[q] += 1
        noise = noise_fn(i, q) if policy_kind["name"] == "random_k" else None
        scores = numpy_scores(policy_kind, q, state, features, params, noise)
        order = np.argsort(-scores, kind="stable")[:top_k]  # ties -> earlier-entered document
        docs = state.doc_ids[q][order]
        u = uniforms[i, 0, : len(order)]
        rel = gains[q][docs]
        p = alpha_k[: len(order)] * rel + beta_k[: len(order)]
        c = (u < p).astype(np.float32)
        for name, delta in (("clicks", c), ("ips_clicks", c * inv_theta[: len(order)]),
                            ("impressions", np.ones_like(c)), ("exposure", theta[: len(order)]),
                            ("alpha_sum", alpha_k[: len(order)]), ("beta_sum", beta_k[: len(order)])):
            np.add.at(state.counters[name][q], order, delta)
        dcg = float(np.sum(rel * theta[: len(order)]))
        out_ndcg.append(dcg / idcg[q] if idcg[q] > 0 else 0.0)
        shown = np.full(top_k, -1)
        shown[: len(order)] = docs
        out_shown.append(shown)
        clicked = np.zeros(top_k, bool)
        clicked[: len(order)] = c > 0
        out_clicks.append(clicked)
    return np.asarray(out_ndcg, np.float32), np.asarray(out_shown), np.asarray(out_clicks)


def cumulative(ndcg, split_of_session, gamma):
    out = {}
    for s, name in enumerate(SPLITS):
        total = 0.0
        for x in ndcg[split_of_session == s]:
            total = gamma * total + float(x)
        out[name] = total
    return out
