"""Team-draft and probabilistic multileaving of R rankers (baselines.md §3.3), with R = 2 interleaving.

Pure, shape-static, jittable and vmappable functions of one query. A ranker is given by its scores
``[R, D]`` over the query's document slots with a candidate ``mask`` ``[D]``; rankings break score
ties towards the lower slot (as ``lax.top_k``; the simulator's entry order is random, so ties are
broken at random). Ranker 0 is the current model; 1..R-1 are candidates. A displayed list has
``k`` positions, of which the first min(k, #mask) are valid.

**Team-draft multileaving (TDM)** needs only each ranker's top-k (``lax.top_k``), because a ranker's
next pick is always among its first k documents:

1. while all rankers agree on the document at the next position, append it with team -1 ("none",
   no credit; the HarrieO rule);
2. then rounds: each round a fresh random permutation of the rankers (from ``key``) picks in turn,
   each appending its highest-ranked document not yet in the list, tagged with its team;
3. credit_j = number of clicked documents of team j.

**Probabilistic multileaving (PM)**: sigma_j(d) ∝ rank_j(d)^-tau (1-based rank over the candidates),
renormalised over the unplaced documents; every position draws from the uniform mixture
(1/R) sum_j sigma_j, i.e. it picks a ranker uniformly and then a document from that ranker's sigma
(the same distribution). Only the (at most k) rankers picked need an ordering, so sampling sorts k
rankers, not R. ``depth`` (static) truncates each ranker to its top ``depth`` documents
(sigma = 0 below; ``None``: all documents, exact); the credit inference uses the same truncation.

Credit inference: P_i(j) ∝ sigma_j(d_i | documents unplaced before position i), normalised over j
(only the ranks of the k displayed documents are needed: O(R k D) by counting, no sort). The
reference draws 10,000 joint team assignments of the clicked documents and averages
sign(credit_j - credit_0). ``probabilistic_preferences`` does the same with a static ``n_samples``
(S k uniforms and S k R compares per session; the threefry draws dominate: ~1 ms per session at
S = 1000 on a CPU, ~4 ms at the reference's 10,000); ``probabilistic_preferences_exact`` returns its limit S -> inf,
P(D_j > 0) - P(D_j < 0) with D_j = credit_j - credit_0, by a (2k+1)-state convolution over the
clicks (R k^2 work, no sampling noise).

Winners (MGD §3.2): { j >= 1 : credit_j > credit_0 } for TDM, { j >= 1 : pref(j, 0) > 0 } for PM.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

NEG_INF = -jnp.inf
NO_TEAM = -1


def ranker_tops(scores: jax.Array, mask: jax.Array, k: int) -> jax.Array:
    """Each ranker's top-k slots ``[R, k]`` (descending, ties to the lower slot)."""
    _, tops = jax.lax.top_k(jnp.where(mask[None, :], scores, NEG_INF), min(k, scores.shape[-1]))
    return tops


def display_scores(ranking: jax.Array, valid: jax.Array, width: int, teams: jax.Array | None = None,
                   n_rankers: int = 1) -> jax.Array:
    """Scores ``[width]`` whose top-k order is ``ranking``: k - i at position i, -1 for every other slot.

    With ``teams``, position i scores k - i + (team_i + 1) / (n_rankers + 1): the fraction (< 1, so the
    order is unchanged) carries the team to whoever reads the scores back (``teams_of_scores``).
    """
    k = ranking.shape[-1]
    values = (k - jnp.arange(k)).astype(jnp.float32)
    if teams is not None:
        values = values + (teams + 1).astype(jnp.float32) / (n_rankers + 1)
    target = jnp.where(valid, ranking, width)  # invalid positions are dropped, never overwrite a valid one
    return jnp.full((width,), -1.0, jnp.float32).at[target].set(values, mode="drop")


def teams_of_scores(scores: jax.Array, n_rankers: int) -> jax.Array:
    """The teams ``display_scores`` encoded, read from the scores of the displayed documents (-1: none)."""
    frac = scores - jnp.floor(scores)
    return (jnp.round(frac * (n_rankers + 1)) - 1).astype(jnp.int32)


# --------------------------------------------------------------------------------------- team draft
def team_draft(key: jax.Array, tops: jax.Array, n_valid: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Team-draft multileaving of R rankers' top-k lists ``tops`` ``[R, k]`` (§3.3).

    ``n_valid`` = min(k, #candidates): the number of positions to fill (each ranker's first
    ``n_valid`` entries are real documents). Returns (ranking ``[k]``, teams ``[k]`` (-1: no team or
    empty), valid ``[k]``). R = 2 is team-draft interleaving with the shared-prefix rule.
    """
    n_rankers, k = tops.shape
    # the picks gather from ``tops`` k times: without the barrier XLA fuses the producer of ``tops`` (the
    # rankers' scores and top-k) into every gather and recomputes it (measured 6x slower per session)
    tops = jax.lax.optimization_barrier(tops)
    pos = jnp.arange(k)
    valid = pos < n_valid
    agree = jnp.all(tops == tops[:1], axis=0) & valid
    prefix = jnp.sum(jnp.cumprod(agree.astype(jnp.int32)))
    n_rounds = math.ceil(k / n_rankers)
    perms = jax.vmap(lambda kk: jax.random.permutation(kk, n_rankers))(jax.random.split(key, n_rounds))
    order = perms.reshape(-1)  # the picking order after the prefix, round after round
    teams = jnp.where((pos >= prefix) & valid, order[jnp.clip(pos - prefix, 0, order.shape[0] - 1)], NO_TEAM)
    ranking = jnp.full((k,), -1, tops.dtype)
    for i in range(k):  # k is small and static: unrolled
        cand = tops[jnp.maximum(teams[i], 0)]  # [k]
        taken = jnp.any((cand[:, None] == ranking[None, :]) & (pos[None, :] < i), axis=1)
        first = jnp.argmax(~taken & valid)
        pick = jnp.where(i < prefix, tops[0, i], cand[first])
        ranking = ranking.at[i].set(jnp.where(valid[i], pick, -1))
    return ranking, teams.astype(jnp.int32), valid


def team_credit(teams: jax.Array, clicked: jax.Array, n_rankers: int) -> jax.Array:
    """credit_j = number of clicked documents of team j ``[R]`` (team -1 counts for nobody)."""
    hit = (teams[:, None] == jnp.arange(n_rankers)[None, :]) & clicked[:, None]
    return jnp.sum(hit, axis=0).astype(jnp.float32)


# --------------------------------------------------------------------------------------- probabilistic
def _rank_weight(rank: jax.Array, tau: float) -> jax.Array:
    """(rank + 1)^-tau for a 0-based rank."""
    return jnp.power(rank.astype(jnp.float32) + 1.0, -tau)


def probabilistic_multileave(key: jax.Array, scores: jax.Array, mask: jax.Array, k: int, tau: float = 3.0,
                             depth: int | None = None) -> tuple[jax.Array, jax.Array]:
    """Sample a PM list (§3.3): (ranking ``[k]``, valid ``[k]``); ``scores`` ``[R, D]``.

    Position i picks ranker a_i uniformly, then rank r of a_i's ordering among the unplaced documents
    with P ∝ (r+1)^-tau (Gumbel-max). Cost: k top-``depth`` orderings plus O(k depth).
    """
    n_rankers, width = scores.shape
    depth = width if depth is None else min(int(depth), width)
    if depth < k:
        raise ValueError(f"probabilistic multileaving needs depth >= k ({depth} < {k})")
    n = jnp.sum(mask)
    valid = jnp.arange(k) < n
    k_assign, k_pick = jax.random.split(key)
    assign = jax.random.randint(k_assign, (k,), 0, n_rankers)
    _, orders = jax.lax.top_k(jnp.where(mask[None, :], scores[assign], NEG_INF), depth)  # [k, depth]
    orders = jax.lax.optimization_barrier(orders)  # gathered k times: keep XLA from recomputing it per gather
    ranks = jnp.arange(depth)
    log_w = -tau * jnp.log(ranks.astype(jnp.float32) + 1.0)
    gumbels = jax.random.gumbel(k_pick, (k, depth))
    placed = jnp.zeros((width,), bool)
    ranking = jnp.zeros((k,), jnp.int32)
    for i in range(k):
        free = ~placed[orders[i]] & (ranks < n)
        r = jnp.argmax(jnp.where(free, log_w + gumbels[i], NEG_INF))
        doc = orders[i, r].astype(jnp.int32)
        ranking = ranking.at[i].set(jnp.where(valid[i], doc, -1))
        placed = placed.at[jnp.where(valid[i], doc, width)].set(True, mode="drop")
    return ranking, valid


def displayed_ranks(scores: jax.Array, mask: jax.Array, ranking: jax.Array) -> jax.Array:
    """0-based rank ``[R, k]`` of each displayed document under each ranker (ties to the lower slot), by
    counting the candidates ranked above it: O(R k D), no sort."""
    width = scores.shape[-1]
    s_doc = scores[:, jnp.clip(ranking, 0, width - 1)]  # [R, k]
    slots = jnp.arange(width)
    above = (scores[:, None, :] > s_doc[:, :, None]) | (
        (scores[:, None, :] == s_doc[:, :, None]) & (slots[None, None, :] < ranking[None, :, None]))
    return jnp.sum(above & mask[None, None, :], axis=-1)


def probabilistic_assignment(scores: jax.Array, mask: jax.Array, ranking: jax.Array, valid: jax.Array,
                             tau: float = 3.0, depth: int | None = None) -> jax.Array:
    """P ``[k, R]``: probability that ranker j placed the document at position i (§3.3 credit inference),
    sigma_j(d_i | unplaced before i) normalised over j; rows of invalid positions are uniform."""
    width = scores.shape[-1]
    depth = width if depth is None else min(int(depth), width)
    n = jnp.sum(mask)
    ranks = displayed_ranks(scores, mask, ranking)  # [R, k]
    sigma = jnp.where((ranks < depth) & valid[None, :], _rank_weight(ranks, tau), 0.0)  # [R, k]
    all_ranks = jnp.arange(width)
    total = jnp.sum(jnp.where((all_ranks < n) & (all_ranks < depth), _rank_weight(all_ranks, tau), 0.0))
    before = jnp.cumsum(sigma, axis=1) - sigma  # mass placed before position i, per ranker
    p = sigma / jnp.maximum(total - before, 1e-30)
    p = p.T  # [k, R]
    norm = jnp.sum(p, axis=1, keepdims=True)
    return jnp.where(norm > 0, p / jnp.where(norm > 0, norm, 1.0), 1.0 / scores.shape[0])


def probabilistic_preferences(key: jax.Array, assignment: jax.Array, clicked: jax.Array,
                              n_samples: int) -> jax.Array:
    """pref ``[R]``: mean over ``n_samples`` joint team assignments of the clicked documents of
    sign(credit_j - credit_0) (pref_0 = 0; §3.3). ``assignment`` from ``probabilistic_assignment``."""
    k, n_rankers = assignment.shape
    upper = jnp.cumsum(assignment, axis=1)  # [k, R]
    u = jax.random.uniform(key, (n_samples, k)) * upper[None, :, -1]
    team = jnp.minimum(jnp.sum(u[:, :, None] > upper[None, :, :], axis=-1), n_rankers - 1)  # [S, k]
    counts = jnp.sum((team[:, :, None] == jnp.arange(n_rankers)) & clicked[None, :, None], axis=1)  # [S, R]
    return jnp.mean(jnp.sign(counts - counts[:, :1]).astype(jnp.float32), axis=0)


def probabilistic_preferences_exact(assignment: jax.Array, clicked: jax.Array) -> jax.Array:
    """The S -> inf limit of ``probabilistic_preferences``: P(D_j > 0) - P(D_j < 0), D_j = credit_j - credit_0.

    Per click i, D_j moves +1 w.p. P_ij, -1 w.p. P_i0, else stays: a (2k+1)-state convolution.
    """
    k, n_rankers = assignment.shape
    plus = jnp.where(clicked[:, None], assignment, 0.0)  # [k, R]
    minus = jnp.where(clicked[:, None], assignment[:, :1], 0.0) * jnp.ones((1, n_rankers))
    dist = jnp.zeros((n_rankers, 2 * k + 1)).at[:, k].set(1.0)
    for i in range(k):
        stay = 1.0 - plus[i] - minus[i]
        up = jnp.pad(dist[:, :-1], ((0, 0), (1, 0)))
        down = jnp.pad(dist[:, 1:], ((0, 0), (0, 1)))
        dist = dist * stay[:, None] + up * plus[i][:, None] + down * minus[i][:, None]
    pref = jnp.sum(dist[:, k + 1:], axis=1) - jnp.sum(dist[:, :k], axis=1)
    return pref.at[0].set(0.0)


# --------------------------------------------------------------------------------------- winners
def winners(credit: jax.Array, tol: float = 0.0) -> jax.Array:
    """bool ``[R-1]``: candidates that beat the current ranker (credit_j > credit_0 + tol, ties lose; §3.2).

    ``tol`` absorbs float rounding of an exact preference (``probabilistic_preferences_exact``) in a tie.
    """
    return credit[1:] > credit[0] + tol
