"""Plackett–Luce sampling and PDGD's debiased pairwise gradient (baselines.md §3.4).

All functions work on one query: ``scores`` ``[D]`` with a candidate ``mask`` ``[D]`` (the entered
documents), and a displayed ranking given as document slots ``ranking`` ``[K]`` with ``valid`` ``[K]``
(empty positions last). They are pure, shape-static and vmappable.

Plackett–Luce (PL):  P(R_i = d | R_{1:i-1}) = exp(s_d) / Z_i,   Z_i = sum_{d' in mask, d' not in R_{1:i-1}} exp(s_d').

The denominators run over the FULL candidate set, displayed or not (pitfall (ii) of §3.4). Everything
is computed in log space (``logsumexp`` subtracts the max), so scores of any magnitude are safe.

PDGD (§3.4 steps 3–5), for one session with clicks ``c``:

* pairs: every clicked a with every *negative* b = unclicked displayed document at a position
  <= (last click) + 1;
* debiasing weight: rho(a, b) = P(R*_ab) / (P(R) + P(R*_ab)), R*_ab = R with a and b swapped. Only the
  denominators at positions lo+1..hi differ (lo < hi the two positions): with x = R_lo, y = R_hi,
  Z*_l = Z_l - e^{s_y} + e^{s_x}, so  log P(R*)/P(R) = sum_{l=lo+1}^{hi} log Z_l - log Z*_l  and
  rho = sigmoid(log P(R*)/P(R));
* pair weight: w_ab = rho(a, b) e^{s_a} e^{s_b} / (e^{s_a} + e^{s_b})^2 = rho sigmoid(s_a-s_b) sigmoid(s_b-s_a);
* gradient: g = sum_pairs w_ab (x_a - x_b) = sum_i coef_i x_{R_i},  coef_i = sum_b w_{i,b} - sum_a w_{a,i}.

``pdgd_coefficients`` returns coef ``[K]`` (cost O(D + K^3)): a learner stores K numbers per session
and forms g from the displayed documents' features later.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

NEG_INF = -jnp.inf


def gumbel_perturb(key: jax.Array, scores: jax.Array) -> jax.Array:
    """s + Gumbel(0, 1) noise: the descending order of the result is an exact PL sample (Gumbel-top-k)."""
    return scores + jax.random.gumbel(key, scores.shape, scores.dtype)


def sample_ranking(key: jax.Array, scores: jax.Array, mask: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    """A PL sample of min(k, #mask) positions: (slots ``[k]``, valid ``[k]``) by Gumbel-top-k (§3.4 step 1)."""
    noisy = jnp.where(mask, gumbel_perturb(key, scores), NEG_INF)
    k = min(k, scores.shape[-1])
    _, ranking = jax.lax.top_k(noisy, k)
    return ranking, jnp.arange(k) < jnp.sum(mask)


def _shown_mask(ranking: jax.Array, valid: jax.Array, width: int) -> jax.Array:
    """bool ``[D]``: the document is at a valid displayed position."""
    return jnp.zeros((width,), bool).at[jnp.where(valid, ranking, width)].set(True, mode="drop")


def _logsumexp(x: jax.Array, axis=-1) -> jax.Array:
    """logsumexp that returns -inf (not NaN) for an all -inf slice."""
    m = jnp.max(x, axis=axis, keepdims=True)
    m = jnp.where(jnp.isfinite(m), m, 0.0)
    return jnp.log(jnp.sum(jnp.exp(x - m), axis=axis)) + jnp.squeeze(m, axis)


def log_rest(scores: jax.Array, mask: jax.Array, ranking: jax.Array, valid: jax.Array) -> jax.Array:
    """log sum_{d in mask, not displayed} e^{s_d}: the part of every PL denominator that is never placed."""
    rest = mask & ~_shown_mask(ranking, valid, scores.shape[-1])
    return _logsumexp(jnp.where(rest, scores, NEG_INF))


def log_denominators(scores: jax.Array, mask: jax.Array, ranking: jax.Array, valid: jax.Array) -> jax.Array:
    """log Z_i ``[K]`` over the full candidate set: log(rest + sum_{m >= i} e^{s_{R_m}}), without cancellation."""
    shown = jnp.where(valid, scores[ranking], NEG_INF)
    tail = jax.lax.cumlogsumexp(shown, reverse=True)
    return jnp.logaddexp(log_rest(scores, mask, ranking, valid), tail)


def log_prob(scores: jax.Array, mask: jax.Array, ranking: jax.Array, valid: jax.Array) -> jax.Array:
    """log P(R_{1:k} | s) of a displayed prefix under PL with full-candidate denominators (§3.4 step 1)."""
    terms = scores[ranking] - log_denominators(scores, mask, ranking, valid)
    return jnp.sum(jnp.where(valid, terms, 0.0))


def pdgd_pairs(clicked: jax.Array, valid: jax.Array) -> jax.Array:
    """bool ``[K, K]``: [i, j] = (doc at i clicked) and (doc at j a negative) (§3.4 step 3).

    Negatives: unclicked displayed documents at positions <= last click + 1. No click: no pairs.
    """
    clicked = clicked & valid
    pos = jnp.arange(clicked.shape[-1])
    last = jnp.max(jnp.where(clicked, pos, -1))
    negative = valid & ~clicked & (pos <= last + 1)
    return clicked[:, None] & negative[None, :]


def swap_log_ratio(scores: jax.Array, mask: jax.Array, ranking: jax.Array, valid: jax.Array) -> jax.Array:
    """``[K, K]``: [i, j] = log P(R*_ij) - log P(R) for the documents at positions i and j (0 on the diagonal).

    Only denominators at l = lo+1..hi change (x = R_lo, y = R_hi): Z*_l = (Z_l - e^{s_y}) + e^{s_x}, with
    Z_l - e^{s_y} summed directly (rest + displayed at m >= l, m != hi: no cancellation). Each position l is
    scaled by its own max M_l = max(s over the documents left at l), so Z_l e^{-M_l} >= 1 never underflows;
    e^{s_x - M_l} is capped at e^80 and Z*_l floored at 1e-30, bounding each term by ~88 (rho -> 0 or 1
    there, as it should). O(K^3) adds, K^2 exps and K^3 logs.
    """
    k = ranking.shape[-1]
    pos = jnp.arange(k)
    shown = jnp.where(valid, scores[ranking], NEG_INF)  # [m]
    rest = log_rest(scores, mask, ranking, valid)
    later = pos[None, :] >= pos[:, None]  # [l, m]: m >= l
    top = jnp.maximum(rest, jnp.max(jnp.where(later, shown[None, :], NEG_INF), axis=1))  # M_l [l]
    top = jnp.where(jnp.isfinite(top), top, 0.0)
    a = jnp.exp(jnp.minimum(shown[None, :] - top[:, None], 80.0))  # e^{s_{R_m} - M_l} [l, m]
    rest_l = jnp.exp(rest - top)  # [l]
    z = rest_l + jnp.sum(jnp.where(later, a, 0.0), axis=1)  # Z_l e^{-M_l} [l]
    without = later[:, None, :] & (pos[None, :, None] != pos[None, None, :])  # [l, hi, m]
    z_minus = rest_l[:, None] + jnp.sum(jnp.where(without, a[:, None, :], 0.0), axis=2)  # (Z_l - e^{s_hi}) e^{-M_l}
    z_star = z_minus[None, :, :] + a.T[:, :, None]  # [lo, l, hi]: + e^{s_lo - M_l}
    lo, l_, hi = pos[:, None, None], pos[None, :, None], pos[None, None, :]
    inside = (lo < l_) & (l_ <= hi) & valid[None, :, None]
    terms = jnp.where(inside, jnp.log(jnp.maximum(z, 1e-30))[None, :, None] - jnp.log(jnp.maximum(z_star, 1e-30)),
                      0.0)
    upper = jnp.sum(terms, axis=1)  # [lo, hi], meaningful for lo < hi
    return jnp.where(pos[:, None] < pos[None, :], upper, upper.T) * (pos[:, None] != pos[None, :])


def pdgd_pair_weights(scores: jax.Array, mask: jax.Array, ranking: jax.Array, valid: jax.Array,
                      clicked: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(rho ``[K, K]``, w ``[K, K]``) of the inferred pairs [clicked i, negative j] (0 elsewhere; §3.4 steps 3–5)."""
    pairs = pdgd_pairs(clicked, valid)
    rho = jax.nn.sigmoid(swap_log_ratio(scores, mask, ranking, valid))
    s = jnp.where(valid, scores[ranking], 0.0)
    diff = s[:, None] - s[None, :]
    pair_prob_grad = jax.nn.sigmoid(diff) * jax.nn.sigmoid(-diff)  # e^{s_a} e^{s_b} / (e^{s_a} + e^{s_b})^2
    rho = jnp.where(pairs, rho, 0.0)
    return rho, rho * pair_prob_grad


def pdgd_coefficients(scores: jax.Array, mask: jax.Array, ranking: jax.Array, valid: jax.Array,
                      clicked: jax.Array) -> jax.Array:
    """coef ``[K]`` with the PDGD gradient g = sum_i coef_i x_{R_i} (§3.4 step 5); zero without clicks.

    ``scores`` are the *logging* scores the ranking was sampled from (pitfall (iv)), before any noise.
    """
    _, w = pdgd_pair_weights(scores, mask, ranking, valid, clicked)
    return jnp.sum(w, axis=1) - jnp.sum(w, axis=0)
