"""The slow, obvious reference of the online simulator: plain NumPy, one session at a time.

It follows the EBRank code's own loop (seed-code.md §1.2): each query keeps its documents in a
shuffled order and the available ones are a prefix of it; per session a document may enter,
the policy scores the available documents, the top K are shown, clicks are drawn, counters
are updated with ``np.add.at``. It shares the simulator's random draws (initial order and
prefix sizes, the session sequence, the click uniforms and the policy noise keys), so on the
same inputs the two must agree exactly. Policies are scored by a callback
``score_fn(i, q, docs, counters) -> scores`` written in NumPy by each test; a whole trial
(``run_reference``) builds one per segment from the frozen parameters and the member's typed
hyper-parameters (``inputs["hyper"]``) and retrains through ``update_one`` (a population of one).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ltrjax.clicks import relevance
from ltrjax.metrics import ideal_dcg
from ltrjax.online.policies.base import SessionLog, update_one
from ltrjax.online.schedule import update_points
from ltrjax.online.simulator import SPLITS, click_uniforms, policy_key, resolve_hyper, trial_keys
from ltrjax.online.state import STAT_NAMES as COUNTER_NAMES
from ltrjax.online.state import DocCounters


class ReferenceState:
    """Per-query Python lists of NumPy arrays in entry order (slot j = j-th document to enter)."""

    def __init__(self, doc_ids, n_entered):
        self.doc_ids = [np.asarray(d) for d in doc_ids]  # dataset slot of each entry position
        self.n_entered = np.asarray(n_entered).copy()
        self.issue_count = np.zeros(len(doc_ids), np.int64)
        self.counters = {name: [np.zeros(len(d), np.float32) for d in doc_ids] for name in COUNTER_NAMES}


def shared_policy_noise(run_key, session: int, width: int) -> np.ndarray:
    """The simulator's per-session policy noise (Random-k scores) of one session."""
    return np.asarray(jax.random.uniform(policy_key(run_key, session), (width,)))


def run_sessions(state: ReferenceState, draws, score_fn, gains, n_docs, idcg, click, top_k: int, uniforms,
                 discount):
    """Run ``draws`` one session at a time; returns per-session NDCG, shown (dataset slots), clicks.

    ``score_fn(i, q, docs, counters)`` scores the available documents ``docs`` (dataset slots, entry
    order) of query ``q`` in session ``i`` from their ``counters``; ``uniforms[i]`` ([rows, K])
    decides the clicks; ``discount[k]`` is the NDCG discount of position k (the iDCG's too).
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
        n = state.n_entered[q]
        docs = state.doc_ids[q][:n]
        scores = score_fn(i, q, docs, {name: state.counters[name][q][:n] for name in COUNTER_NAMES})
        order = np.argsort(-scores, kind="stable")[:top_k]  # ties -> earlier-entered document
        m = len(order)
        shown = state.doc_ids[q][order]
        rel = gains[q][shown]
        c = (uniforms[i, 0, :m] < alpha_k[:m] * rel + beta_k[:m]).astype(np.float32)
        for name, delta in (("clicks", c), ("ips_clicks", c * inv_theta[:m]), ("impressions", np.ones_like(c)),
                            ("exposure", theta[:m]), ("alpha_sum", alpha_k[:m]), ("beta_sum", beta_k[:m])):
            np.add.at(state.counters[name][q], order, delta)
        out_ndcg.append(float(np.sum(rel * discount[:m])) / idcg[q] if idcg[q] > 0 else 0.0)
        out_shown.append(np.concatenate([shown, np.full(top_k - m, -1)]))
        out_clicks.append(np.concatenate([c > 0, np.zeros(top_k - m, bool)]))
    return np.asarray(out_ndcg, np.float32), np.asarray(out_shown), np.asarray(out_clicks)


def cumulative(ndcg, split_of_session, gamma):
    out = {}
    for s, name in enumerate(SPLITS):
        total = 0.0
        for x in ndcg[split_of_session == s]:
            total = gamma * total + float(x)
        out[name] = total
    return out


# --------------------------------------------------------------------------- NumPy policies
def bm25_scorer(column, features):
    return lambda i, q, docs, counters: features[q][docs, column]


def random_k_scorer(run_key, draws, widths):
    return lambda i, q, docs, counters: shared_policy_noise(run_key, int(draws.session[i]), widths[q])[: len(docs)]


def ebrank_scorer(params, hyper, beta, features):
    """R_hat + epsilon MC with the exposure statistic, alpha = softplus(x w + b) + 1e-4, in NumPy
    (epsilon from the typed ``EBRankHyper``)."""
    dense = params["prior"]["params"]["MLPScorer_0"]["Dense_0"]
    kernel, bias = np.asarray(dense["kernel"])[:, 0], np.asarray(dense["bias"])[0]
    beta, epsilon = np.float32(beta), np.float32(hyper.epsilon)

    def score(i, q, docs, c):
        alpha = np.logaddexp(np.float32(0), features[q][docs] @ kernel + bias).astype(np.float32) + np.float32(1e-4)
        r_hat = (c["clicks"] + alpha) / (c["exposure"] + alpha + beta)
        return r_hat + epsilon * (r_hat / (c["exposure"] + alpha + beta) ** 2)

    return score


# --------------------------------------------------------------------------- a whole trial
def reference_inputs(data, discount):
    """Per global query: features, gains, n_docs, idcg (with ``discount``), width (dataset slot order;
    EBRank gains)."""
    per_query = {k: [None] * data.n_queries for k in ("features", "gains", "n_docs", "idcg", "width")}
    disc = jnp.asarray(discount, jnp.float32)
    for bucket in data.buckets:
        gains = relevance(bucket.labels, data.y_max, "ebrank") * bucket.doc_mask
        idcg = np.asarray(ideal_dcg(gains, bucket.doc_mask, disc))
        for r, q in enumerate(np.asarray(bucket.query_index)):
            per_query["features"][q] = np.asarray(bucket.features[r])
            per_query["gains"][q] = np.asarray(gains[r])
            per_query["n_docs"][q] = int(bucket.n_docs[r])
            per_query["idcg"][q] = float(idcg[r])
            per_query["width"][q] = bucket.width
    return per_query


def reference_state(data, states) -> ReferenceState:
    doc_ids, n_entered = [None] * data.n_queries, np.zeros(data.n_queries, np.int64)
    for bucket, st in zip(data.buckets, states):
        for r, q in enumerate(np.asarray(bucket.query_index)):
            doc_ids[q] = np.asarray(st.order[r])[: int(bucket.n_docs[r])]
            n_entered[q] = int(st.n_entered[r])
    return ReferenceState(doc_ids, n_entered)


def dataset_order_counters(data, ref: ReferenceState):
    """The reference's counters as the simulator hands them to ``Policy.update_population`` (one member)."""
    counters, entered = [], []
    for bucket in data.buckets:
        arrays = {name: np.zeros(bucket.labels.shape, np.float32) for name in COUNTER_NAMES}
        ent = np.zeros(bucket.labels.shape, bool)
        for r, q in enumerate(np.asarray(bucket.query_index)):
            for name in COUNTER_NAMES:
                arrays[name][r, ref.doc_ids[q]] = ref.counters[name][q]
            ent[r, ref.doc_ids[q][: ref.n_entered[q]]] = True
        counters.append(DocCounters(**{k: jnp.asarray(v) for k, v in arrays.items()}))
        entered.append(jnp.asarray(ent))
    return tuple(counters), tuple(entered)


def behaviour_snapshot(data, ref: ReferenceState):
    """Per global query, the counters in dataset slot order (zeros for documents not entered): what a
    policy's ``prepare`` sees as ``behaviour`` at a segment start."""
    out = {name: [None] * data.n_queries for name in COUNTER_NAMES}
    for bucket in data.buckets:
        for q in np.asarray(bucket.query_index):
            for name in COUNTER_NAMES:
                row = np.zeros(bucket.width, np.float32)
                row[ref.doc_ids[q]] = ref.counters[name][q]
                out[name][q] = row
    return out


def reference_warmup(sim, key):
    """A trial's shared draws and its BM25 warm-up, one session at a time.

    Returns (trial keys, main-phase draws, per-query inputs, reference state after the warm-up, the
    common ``run_sessions`` arguments, ``uniforms(draws)``).
    """
    data = sim.data
    keys = trial_keys(key)
    warm, main = sim.session_plan(keys.plan)
    discount = np.asarray(sim.discount, np.float32)  # the protocol's NDCG discount (SimConfig.discount)
    inputs = reference_inputs(data, discount)
    ref = reference_state(data, sim.init_states(keys.init))
    click = {k: np.asarray(getattr(sim.click_model, k)) for k in ("examination", "alpha", "beta")}
    common = dict(gains=inputs["gains"], n_docs=inputs["n_docs"], idcg=inputs["idcg"], click=click, top_k=5,
                  discount=discount)

    def uniforms(draws):
        return click_uniforms(keys.run, int(draws.session[0]), len(draws), 1, 5)

    run_sessions(ref, warm, bm25_scorer(data.bm25_column, inputs["features"]), uniforms=uniforms(warm), **common)
    return keys, main, inputs, ref, common, uniforms


def make_counters(**values) -> DocCounters:
    """``DocCounters`` of one query from per-counter lists (missing counters are zero)."""
    n = len(next(iter(values.values())))
    return DocCounters(**{k: jnp.asarray(values.get(k, np.zeros(n)), jnp.float32) for k in COUNTER_NAMES})


def assert_matches_reference(sim, result, reference):
    """The simulator's trial ``result`` (run with ``keep_logs``) equals ``run_reference``'s output:
    shown lists, clicks, per-session and cumulative NDCG, and per query the entered documents, the issue
    count and every counter."""
    import pytest  # here, not at the top: benchmarks/sessions_per_sec.py runs this loop where pytest is absent

    ref, ndcg, shown, clicked, split, _ = reference
    np.testing.assert_array_equal(np.concatenate([log.shown for log in result.logs]), shown)
    np.testing.assert_array_equal(np.concatenate([log.clicks for log in result.logs]), clicked)
    np.testing.assert_allclose(result.session_ndcg, ndcg, rtol=1e-5, atol=1e-6)
    for name, value in cumulative(ndcg, split, sim.config.gamma).items():
        assert result.cum_ndcg[name] == pytest.approx(value, rel=1e-5)
    for bucket, st in zip(sim.data.buckets, result.final_states):
        for r, q in enumerate(np.asarray(bucket.query_index)):
            assert int(st.n_entered[r]) == ref.n_entered[q]
            assert int(st.issue_count[r]) == ref.issue_count[q]
            n = int(bucket.n_docs[r])
            for name in COUNTER_NAMES:  # the counters the run kept (its policy's ``counters_read``, and clicks)
                if getattr(st.counters, name) is not None:
                    np.testing.assert_array_equal(np.asarray(getattr(st.counters, name)[r])[:n],
                                                  ref.counters[name][q])
        assert st.counters.clicks is not None


def run_reference(sim, policy, key, make_scorer, hyper=None):
    """A whole trial (BM25 warm-up, segments, retrains through ``update_one``) one session at a time.

    ``hyper`` is what ``Simulator.run`` takes (None, a {name: value} dict or a ``policy.Hyper``), resolved
    by ``resolve_hyper``. ``make_scorer(params, draws, inputs)`` returns the NumPy ``score_fn`` of the
    policy for a segment; ``inputs["hyper"]`` holds the member's typed hyper-parameters and
    ``inputs["behaviour"]`` the counters as of the segment start (``behaviour_snapshot``).
    Segments are the refreshes of ``sim.config``; the policy retrains where the simulator does, with a
    log (no session records) of the sessions since its last retrain.
    Returns the reference state, per-session NDCG, shown, clicks, session splits and retrain count.
    """
    data = sim.data
    keys, main, inputs, ref, common, uniforms = reference_warmup(sim, key)
    hyper = resolve_hyper(policy, hyper)
    inputs["hyper"] = hyper
    params = policy.init(keys.policy, data)
    points = update_points(len(main), sim.config.n_segments)
    starts = np.concatenate([[0], points[:-1] + 1])
    outputs, n_updates, since = [], 0, int(starts[0])
    k_refresh = jax.random.fold_in(keys.policy, 1)
    for i, (a, b) in enumerate(zip(starts, points + 1)):
        seg = main.slice(int(a), int(b))
        params = policy.refresh(jax.random.fold_in(k_refresh, i), params)
        inputs["behaviour"] = behaviour_snapshot(data, ref)
        outputs.append(run_sessions(ref, seg, make_scorer(params, seg, inputs), uniforms=uniforms(seg), **common))
        if sim.config.retrains_after(i) and policy.trains:
            counters, entered = dataset_order_counters(data, ref)
            done = main.slice(since, int(b))
            _, shown, clicked = (np.concatenate(x) for x in zip(*outputs))
            first = since - int(starts[0])
            log = SessionLog(query=done.query, shown=shown[first:], clicks=clicked[first:], session=done.session)
            params, info = update_one(policy, jax.random.fold_in(keys.train, i), params, hyper, data, counters,
                                      entered, log)
            n_updates += not info.get("skipped", False)
        if sim.config.retrains_after(i):
            since = int(b)
    ndcg, shown, clicked = (np.concatenate(x) for x in zip(*outputs))
    return ref, ndcg, shown, clicked, data.split_of_query[main.query], n_updates
