"""Logged click data for the offline protocol (SPEC §6; PRS §5.2; Vectorization §6.1).

A production ranker shows the top-K of every logged training query; each logged session
samples one of those queries uniformly and draws clicks from a click model of SPEC §4 using
explicit uniforms (``ltrjax.clicks.sample_clicks``). Sessions are generated in jitted,
vectorized chunks and reduced on the fly to per-query sufficient statistics, because every
estimator here is a sum over sessions of terms linear in the session's click indicators:

* ``clicks[q, k]``          = sum_s c_k                         (listwise / pointwise estimators)
* ``pairs[q, i, j]``        = sum_s c_i (1 - c_j)               (pairwise estimators, PRS Eq. 9)
* ``pairs_lambda[q, i, j]`` = sum_s c_i (1 - c_j) / IDCG_s      (lambda variant; IDCG of the session's clicks)

Positions are the slots of the displayed list (slot k = position k + 1), and the propensity of
slot k is the same for every session, so it is stored once per position. ``log_sessions``
returns the raw per-session log (query, clicks) for inspection and tests.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from ltrjax.clicks import ClickModel, sample_clicks
from ltrjax.offline.lists import Lists


@struct.dataclass
class LoggedLists:
    """The production ranker's top-K of every logged query, in displayed order."""

    features: jax.Array  # f32 [Q, K, F]
    labels: jax.Array  # i32 [Q, K]
    relevance: jax.Array  # f32 [Q, K] click relevance R(y) of the click model
    mask: jax.Array  # bool [Q, K] slot holds a document
    doc_index: jax.Array  # i32 [Q, K]
    query_index: jax.Array  # i32 [Q]


@struct.dataclass
class ClickStats:
    """Per-logged-query sufficient statistics of the logged sessions (see module docstring)."""

    n_sessions: jax.Array  # f32 [Q]
    clicks: jax.Array  # f32 [Q, K]
    pairs: jax.Array  # f32 [Q, K, K]
    pairs_lambda: jax.Array  # f32 [Q, K, K]

    @property
    def total_sessions(self) -> float:
        return float(jnp.sum(self.n_sessions))

    @property
    def total_clicks(self) -> float:
        return float(jnp.sum(self.clicks))


@struct.dataclass
class Sessions:
    """Raw per-session log: which logged query, the uniforms drawn, and the clicks."""

    query: jax.Array  # i32 [S]
    uniforms: jax.Array  # f32 [S, 2, K]
    clicks: jax.Array  # bool [S, K]


@functools.partial(jax.jit, static_argnames=("k",))
def top_k_lists(lists: Lists, scores, relevance, k: int) -> LoggedLists:
    """Displayed top-K lists of ``lists`` ranked by ``scores`` (ties: the shuffled doc order)."""
    masked = jnp.where(lists.mask, scores, -jnp.inf)
    k = min(k, scores.shape[-1])
    values, order = jax.lax.top_k(masked, k)
    slot = values > -jnp.inf
    take = lambda a: jnp.take_along_axis(a, order, axis=1)  # noqa: E731
    feats = jnp.take_along_axis(lists.features, order[..., None], axis=1)
    return LoggedLists(
        features=jnp.where(slot[..., None], feats, 0.0),
        labels=jnp.where(slot, take(lists.labels), 0),
        relevance=jnp.where(slot, take(relevance), 0.0),
        mask=slot,
        doc_index=jnp.where(slot, take(lists.doc_index), 0),
        query_index=lists.query_index,
    )


@functools.partial(jax.jit, static_argnames=("k",))
def pad_positions(logged: LoggedLists, k: int) -> LoggedLists:
    """Pad the slot axis to exactly ``k`` (queries with fewer documents than K)."""
    extra = k - logged.mask.shape[1]
    if extra <= 0:
        return logged
    pad2 = lambda a, v: jnp.pad(a, ((0, 0), (0, extra)), constant_values=v)  # noqa: E731
    return LoggedLists(features=jnp.pad(logged.features, ((0, 0), (0, extra), (0, 0))),
                       labels=pad2(logged.labels, 0), relevance=pad2(logged.relevance, 0.0),
                       mask=pad2(logged.mask, False), doc_index=pad2(logged.doc_index, 0),
                       query_index=logged.query_index)


def draw_sessions(key, n_sessions: int, n_queries: int, k: int):
    """Uniformly sampled logged queries ``[S]`` and click uniforms ``[S, 2, K]``."""
    kq, ku = jax.random.split(key)
    query = jax.random.randint(kq, (n_sessions,), 0, n_queries)
    uniforms = jax.random.uniform(ku, (n_sessions, 2, k))
    return query, uniforms


def session_clicks(model: ClickModel, logged: LoggedLists, query, uniforms):
    """Clicks ``[S, K]`` of the sessions (vectorized over sessions)."""
    return sample_clicks(model, uniforms, logged.relevance[query], logged.labels[query], logged.mask[query])


def session_idcg(clicks):
    """IDCG of a session's click vector: sum_{m=1}^{#clicks} 1/log2(m + 1) (gain 2^c - 1 = c)."""
    k = clicks.shape[-1]
    cum = jnp.concatenate([jnp.zeros((1,)), jnp.cumsum(1.0 / jnp.log2(jnp.arange(2, k + 2.0)))])
    return cum[jnp.sum(clicks, axis=-1).astype(jnp.int32)]


def reduce_sessions(clicks, query, n_queries: int, weight=None) -> ClickStats:
    """Per-query sufficient statistics of a batch of sessions (``weight`` masks padded sessions)."""
    c = clicks.astype(jnp.float32)
    w = jnp.ones(c.shape[0], jnp.float32) if weight is None else weight.astype(jnp.float32)
    c = c * w[:, None]
    pair = c[:, :, None] * (w[:, None, None] - c[:, None, :])  # c_i (1 - c_j), zero for padded sessions
    idcg = session_idcg(clicks)
    pair_l = pair / jnp.where(idcg > 0, idcg, 1.0)[:, None, None]
    seg = lambda x: jax.ops.segment_sum(x, query, num_segments=n_queries)  # noqa: E731
    return ClickStats(n_sessions=seg(w), clicks=seg(c), pairs=seg(pair), pairs_lambda=seg(pair_l))


def _add(a: ClickStats, b: ClickStats) -> ClickStats:
    return jax.tree_util.tree_map(jnp.add, a, b)


@functools.partial(jax.jit, static_argnames=("n_sessions",))
def log_sessions(key, model: ClickModel, logged: LoggedLists, n_sessions: int) -> Sessions:
    """The raw per-session log (for inspection and tests; memory grows with ``n_sessions``)."""
    n_queries, k = logged.mask.shape
    query, uniforms = draw_sessions(key, n_sessions, n_queries, k)
    return Sessions(query=query, uniforms=uniforms, clicks=session_clicks(model, logged, query, uniforms))


@functools.partial(jax.jit, static_argnames=("chunk",))
def _log_chunk(key, i, remaining, clicks_left, stats: ClickStats, model: ClickModel, logged: LoggedLists, chunk: int):
    """(stats plus chunk ``i``'s sessions, its logged query ``[chunk]``, clicks ``[chunk, K]``, sessions kept).

    A session is kept while fewer than ``remaining`` sessions and ``clicks_left`` clicks came before it in the
    chunk: the sessions of a budget are a prefix of the chunk."""
    n_queries, k = logged.mask.shape
    query, uniforms = draw_sessions(jax.random.fold_in(key, i), chunk, n_queries, k)
    clicks = session_clicks(model, logged, query, uniforms)
    per_session = jnp.sum(clicks, axis=1).astype(jnp.float32)
    clicks_before = jnp.cumsum(per_session) - per_session
    weight = (jnp.arange(chunk) < remaining) & (clicks_before < clicks_left)
    return _add(stats, reduce_sessions(clicks, query, n_queries, weight)), query, clicks, jnp.sum(weight)


def empty_stats(n_queries: int, k: int) -> ClickStats:
    return ClickStats(n_sessions=jnp.zeros((n_queries,)), clicks=jnp.zeros((n_queries, k)),
                      pairs=jnp.zeros((n_queries, k, k)), pairs_lambda=jnp.zeros((n_queries, k, k)))


PAIR_ENTRIES_PER_CHUNK = 1 << 24  # a chunk's [chunk, K, K] pair statistics (64 MiB of f32 per array)


def chunk_size(k: int, requested: int | None = None) -> int:
    """Sessions per logging chunk: ``requested``, else 2^24 / K^2 (memory of the chunk's pair statistics), at
    most 2^17 and at least 1."""
    if requested is not None:
        return int(max(1, requested))
    return int(max(1, min(1 << 17, PAIR_ENTRIES_PER_CHUNK // max(k * k, 1))))


def log_click_stats(key, model: ClickModel, logged: LoggedLists, n_sessions: int | None = None,
                    chunk: int | None = None, progress: bool = False, on_chunk=None,
                    n_clicks: int | None = None) -> ClickStats:
    """Log sessions in jitted chunks, reduced to per-query ``ClickStats``, until the budget is spent.

    The budget is ``n_sessions`` sessions or ``n_clicks`` clicks (PRS §5.2 counts clicks): sessions are logged
    while fewer than ``n_clicks`` clicks came before them, so the total is ``n_clicks`` up to the last
    session's clicks. Chunk ``i`` uses ``fold_in(key, i)``. ``on_chunk(first_session, query, clicks)``, if given,
    receives every chunk's kept sessions as host arrays (logged-query row ``[n]``, clicks ``[n, K]``).
    """
    if (n_sessions is None) == (n_clicks is None):
        raise ValueError("log_click_stats: give exactly one budget, n_sessions or n_clicks")
    n_queries, k = logged.mask.shape
    chunk = chunk_size(k, chunk)
    if n_sessions is not None:
        chunk = int(min(chunk, n_sessions))
    stats = empty_stats(n_queries, k)
    total_sessions, total_clicks, i = 0, 0.0, 0
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=n_sessions or n_clicks, desc="logging " + ("sessions" if n_sessions else "clicks"),
                   leave=False, disable=None)  # disable=None: off on non-TTY output
    while True:
        remaining = (n_sessions - total_sessions) if n_sessions is not None else chunk
        clicks_left = (n_clicks - total_clicks) if n_clicks is not None else float("inf")
        if remaining <= 0 or clicks_left <= 0:
            break
        before = total_clicks  # the clicks of the chunks so far (0.0 without a click budget)
        stats, query, clicks, kept = _log_chunk(key, i, remaining, jnp.float32(min(clicks_left, 3e38)), stats, model,
                                                logged, chunk)
        kept = int(kept)
        if on_chunk is not None:
            on_chunk(total_sessions, np.asarray(query)[:kept], np.asarray(clicks)[:kept])
        total_sessions += kept
        if n_clicks is not None:
            total_clicks = float(jnp.sum(stats.clicks))
            if total_clicks == before and i >= 1000:
                raise ValueError(f"log_click_stats: no click in {i + 1} chunks of {chunk} sessions; the click model "
                                 f"cannot spend a budget of {n_clicks} clicks")
        if bar is not None:
            bar.update(kept if n_sessions is not None else int(total_clicks - before))
        i += 1
    if bar is not None:
        bar.close()
    return jax.block_until_ready(stats)


def randomization_propensities(key, model: ClickModel, logged: LoggedLists, n_sessions: int,
                               chunk: int = 1 << 14) -> np.ndarray:
    """theta_k / theta_1 estimated by a simulated result-randomization experiment (Joachims et al. 2017; PRS
    Table 1): each session shows a logged list in a uniformly random order, so within a list relevance is independent
    of position, and over the sessions whose list reaches k the clicks at k and at 1 are in the ratio theta_k /
    theta_1. Both counts are taken over those sessions only: normalising by position 1's click rate over all sessions
    is biased where list length and relevance go together (short lists of mostly relevant documents inflate it, and
    theta_k beyond the short lists' length comes out too small)."""
    n_queries, k = logged.mask.shape
    clicks_at = np.zeros(k)
    first_clicks_reaching = np.zeros(k)  # clicks at position 1 of the sessions whose list reaches position k
    done, i = 0, 0
    while done < n_sessions:
        n = min(chunk, n_sessions - done)
        c, shown = _randomized_chunk(jax.random.fold_in(key, i), model, logged, chunk)
        c, shown = np.asarray(c[:n], np.float64), np.asarray(shown[:n], np.float64)
        clicks_at += c.sum(0)
        first_clicks_reaching += c[:, 0] @ shown
        done, i = done + n, i + 1
    if first_clicks_reaching[0] <= 0:
        raise ValueError("randomization_propensities: no click at position 1; log more randomization sessions")
    ratio = clicks_at / np.maximum(first_clicks_reaching, 1.0)
    # positions never clicked (or never reached) get the smallest estimated propensity, not 0 (IPS divides by it)
    positive = ratio[ratio > 0]
    return np.where(ratio > 0, ratio, positive.min())


@functools.partial(jax.jit, static_argnames=("chunk",))
def _randomized_chunk(key, model: ClickModel, logged: LoggedLists, chunk: int):
    n_queries, k = logged.mask.shape
    kq, kp, ku = jax.random.split(key, 3)
    query = jax.random.randint(kq, (chunk,), 0, n_queries)
    mask = logged.mask[query]
    # a uniformly random order of each list's documents, padding last
    order = jnp.argsort(jnp.where(mask, jax.random.uniform(kp, mask.shape), 2.0), axis=1)
    take = lambda a: jnp.take_along_axis(a, order, axis=1)  # noqa: E731
    uniforms = jax.random.uniform(ku, (chunk, 2, k))
    clicks = sample_clicks(model, uniforms, take(logged.relevance[query]), take(logged.labels[query]), take(mask))
    return clicks, take(mask)


# --------------------------------------------------------------------------- NumPy reference
def reference_session_clicks(model: ClickModel, relevance, labels, mask, query, uniforms):
    """One session at a time in plain NumPy (the obvious reference for ``session_clicks``)."""
    alpha, beta = np.asarray(model.alpha), np.asarray(model.beta)
    matrix, stop, cclick = np.asarray(model.matrix), np.asarray(model.stop), np.asarray(model.cascade_click)
    relevance, labels, mask = np.asarray(relevance), np.asarray(labels), np.asarray(mask)
    uniforms = np.asarray(uniforms)
    out = np.zeros((len(query), relevance.shape[1]), bool)
    for s, q in enumerate(np.asarray(query)):
        for pos in range(relevance.shape[1]):
            if not mask[q, pos]:
                continue
            y = int(labels[q, pos])
            if model.kind == "affine":
                p = alpha[pos] * relevance[q, pos] + beta[pos]
            elif model.kind == "matrix":
                p = matrix[min(y, matrix.shape[0] - 1), pos]
            else:
                p = cclick[min(y, len(cclick) - 1)]
            click = uniforms[s, 0, pos] < np.float32(p)
            out[s, pos] = click
            if model.kind == "cascade" and click and uniforms[s, 1, pos] < np.float32(stop[min(y, len(stop) - 1)]):
                break
    return out


def reference_click_stats(clicks, query, n_queries: int):
    """Per-query statistics by a loop over sessions (reference for ``reduce_sessions``)."""
    clicks = np.asarray(clicks, np.float64)
    k = clicks.shape[1]
    n = np.zeros(n_queries)
    c = np.zeros((n_queries, k))
    pairs = np.zeros((n_queries, k, k))
    pairs_l = np.zeros((n_queries, k, k))
    for s, q in enumerate(np.asarray(query)):
        n[q] += 1
        c[q] += clicks[s]
        idcg = sum(1.0 / np.log2(m + 1) for m in range(1, int(clicks[s].sum()) + 1))
        for i in range(k):
            for j in range(k):
                if clicks[s, i] == 1 and clicks[s, j] == 0:
                    pairs[q, i, j] += 1
                    pairs_l[q, i, j] += 1.0 / idcg
    return n, c, pairs, pairs_l
