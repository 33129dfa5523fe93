"""DBGD and MGD (baselines.md §3.1–3.3) under the EBRank logging/learning protocol (§3.6).

Per session, n candidates w'_j = w_log + delta u_j (u_j uniform on the unit sphere, delta = 1) are
(multi)interleaved with the logging ranker w_log (ranker 0): team-draft (TDM; R = 2 is team-draft
interleaving) or probabilistic multileaving (PM, tau = 3), see ``ltrjax.online.multileaving``.
Winners W = { j : candidate j beats ranker 0 } (ties lose); if W is non-empty the learning model
moves by eta (1/|W|) sum_{j in W} (w'_j - w_log) = eta delta mean_{j in W} u_j, and eta decays.
DBGD is MGD with one candidate and team-draft interleaving.

As for PDGD (``pdgd.py``, whose module docstring explains it): the logging model is frozen between
retrain points, every per-session step depends only on w_log, so the learning model at a retrain
point is exactly w_log + sum_t eta_t Delta_t (eta_t = lr decay^(earlier updates since the retrain);
training-split sessions only unless ``all_splits``). EBRank defaults: lr 0.1, decay 0.99999, delta 1.

The displayed list is produced by ``session_scores`` as scores K - i + (team + 1)/(R + 1) at the list's
position i (-1 for other documents): the simulator's top K *is* the multileaved list, and for TDM the
fractions hand the teams to ``session_record`` (``multileaving.teams_of_scores``), so nothing is
recomputed there (XLA does not CSE the two calls inside the simulator's scan). The session record is
tiny: the session key's two words and the winner mask; ``update`` regenerates the u_j from the key
(the same derivation as in the scan), which avoids storing n x F directions per session.

Costs per session: candidate directions (n F normals) and scores O(n D F); TDM one top-K per ranker
(``lax.top_k``, no sort) plus O(R K^2). PM costs K orderings of the picked rankers (top-``pm_depth``;
``None`` = all documents, exact), and its credit recomputes the rankers from the key plus O(R K D) rank
counting. ``pm_samples`` = S > 0 draws S joint team assignments per session as the reference does (it
uses 10,000): S K uniforms per session, which dominate (threefry); the default ``pm_samples = 0``
computes the S -> inf limit exactly (P(D > 0) - P(D < 0), no sampling noise; exact ties, which the
sampled estimate resolves at random, lose). S = 1000 keeps the reference's sampling noise at a
standard error <= 0.032 per preference.

Measured in the simulator (2 shared CPU cores under load, D = 64, F = 46, K = 5, 500 lanes), per
session: PDGD ~10 us, DBGD ~15-23 us, TD-MGD (n = 9) ~36-46 us (CFTopK ~2.5 us); P-MGD (n = 49) exact
~450 us, with S = 1000 ~2.3 ms; P-DBGD with S = 10,000 ~4.5 ms.
"""

from __future__ import annotations

from typing import Annotated

import jax
import jax.numpy as jnp
import numpy as np

from ltrjax.constraints import NonNegativeInt, OneOf, Positive, PositiveInt, Range
from ltrjax.data.layout import Bucket, PaddedDataset
from ltrjax.online import multileaving as ml
from ltrjax.online.policies.base import QueryView
from ltrjax.online.policies.linear_online import LinearOnlineLearner, pad_rows, padded_length

MULTILEAVE = ("team_draft", "probabilistic")
EXACT_TIE_TOL = 1e-6  # an exact PM preference below this is a tie (float rounding), and ties lose


def key_words(key: jax.Array) -> jax.Array:
    """The raw uint32 words of a key (typed or legacy): what the session record stores."""
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(key)
    return key


def session_keys(words: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(directions, multileaving, credit) keys of a session, derived from its key words."""
    k_dir, k_ml, k_credit = jax.random.split(words, 3)
    return k_dir, k_ml, k_credit


def unit_directions(key: jax.Array, n: int, dim: int) -> jax.Array:
    """``[n, dim]`` directions uniform on the unit sphere (normal / norm; §3.1 step 1)."""
    u = jax.random.normal(key, (n, dim), jnp.float32)
    return u / jnp.linalg.norm(u, axis=1, keepdims=True)


class MGD(LinearOnlineLearner):
    """Multileave gradient descent with ``n_candidates`` candidates (§3.2) and a frozen logging model (§3.6)."""

    name = "mgd"

    def __init__(self, data: PaddedDataset, n_candidates: PositiveInt = 9,
                 multileave: Annotated[str, OneOf(MULTILEAVE)] = "team_draft", delta: Positive = 1.0,
                 learning_rate: float = 0.1, decay: Annotated[float, Range(0, 1, lo_open=True)] = 0.99999,
                 top_k: PositiveInt = 5, tau: Positive = 3.0, pm_samples: NonNegativeInt = 0,
                 pm_depth: PositiveInt | None = None, **kwargs):
        super().__init__(data, learning_rate=learning_rate, decay=decay, **kwargs)
        if multileave not in MULTILEAVE:
            raise ValueError(f"unknown multileave {multileave!r}; expected one of {MULTILEAVE}")
        if int(n_candidates) < 1:
            raise ValueError("n_candidates must be >= 1")
        self.n_candidates = int(n_candidates)
        self.multileave = multileave
        self.delta = float(delta)
        self.top_k = int(top_k)
        self.tau = float(tau)
        self.pm_samples = int(pm_samples)
        self.pm_depth = None if pm_depth is None else int(pm_depth)
        self._direction_sum = jax.jit(self._direction_sum_impl, static_argnames="chunk")

    # -- per segment
    def prepare(self, params, bucket: Bucket, behaviour=None):
        return {"base": self.bucket_base(params, bucket)}  # the features come per lane (QueryView.features)

    # -- rankers and the displayed list
    def directions(self, k_dir: jax.Array) -> jax.Array:
        return unit_directions(k_dir, self.n_candidates, self.n_in)

    def ranker_scores(self, view: QueryView, k_dir: jax.Array) -> jax.Array:
        """``[R, D]``: the logging ranker's scores, then each candidate's s + delta u_j . x."""
        u = self.directions(k_dir)
        s0 = self.logging_scores(view.aux["base"], view.counters, self.w_b(view.params))
        proj = view.features @ u[:, : self.n_nb].T  # [D, n]
        if self.concat:
            proj = proj + self.x_b(view.counters)[:, None] * u[None, :, self.n_nb]
        return jnp.concatenate([s0[None, :], s0[None, :] + self.delta * proj.T], axis=0)

    def _multileave(self, view: QueryView, key):
        """(ranking [k], teams [k] or None, valid [k], ranker scores [R, D], mask [D], credit key)."""
        k_dir, k_ml, k_credit = session_keys(key_words(key))
        scores = self.ranker_scores(view, k_dir)
        width = scores.shape[-1]
        mask = jnp.arange(width) < view.n_entered
        k = min(self.top_k, width)
        if self.multileave == "team_draft":
            tops = ml.ranker_tops(scores, mask, k)
            ranking, teams, valid = ml.team_draft(k_ml, tops, jnp.minimum(view.n_entered, k))
        else:
            ranking, valid = ml.probabilistic_multileave(k_ml, scores, mask, k, self.tau, self.pm_depth)
            teams = None
        return ranking, teams, valid, scores, mask, k_credit

    def session_scores(self, view: QueryView, key):
        """Scores whose top K is the multileaved list; for TDM their fractions carry the teams."""
        ranking, teams, valid, scores, _, _ = self._multileave(view, key)
        return ml.display_scores(ranking, valid, scores.shape[-1], teams, self.n_candidates + 1)

    def credit(self, view: QueryView, key, scores, shown, slot_valid, clicked) -> jax.Array:
        """Per-ranker credit ``[R]`` of the session (TDM: clicks per team; PM: pref(j, 0)).

        TDM reads the teams back from ``scores`` (nothing is recomputed); PM recomputes the rankers
        from ``key`` to infer who placed each clicked document.
        """
        width = scores.shape[-1]
        if shown.shape[-1] > min(self.top_k, width):
            raise ValueError(f"{self.name}: the simulator shows {shown.shape[-1]} documents but the policy "
                             f"multileaves top_k={self.top_k}; set top_k >= sim.top_k")
        clicked = clicked & slot_valid
        n_rankers = self.n_candidates + 1
        if self.multileave == "team_draft":
            teams = jnp.where(slot_valid, ml.teams_of_scores(scores[shown], n_rankers), ml.NO_TEAM)
            return ml.team_credit(teams, clicked, n_rankers)
        _, _, _, rankers, mask, k_credit = self._multileave(view, key)
        assignment = ml.probabilistic_assignment(rankers, mask, shown, slot_valid, self.tau, self.pm_depth)
        if self.pm_samples <= 0:
            return ml.probabilistic_preferences_exact(assignment, clicked)
        return ml.probabilistic_preferences(k_credit, assignment, clicked, self.pm_samples)

    def session_record(self, view: QueryView, key, scores, shown, slot_valid, clicked):
        """The key words (to regenerate the u_j in ``update``) and the winner mask ``[n]``."""
        exact = self.multileave == "probabilistic" and self.pm_samples <= 0
        win = ml.winners(self.credit(view, key, scores, shown, slot_valid, clicked), EXACT_TIE_TOL if exact else 0.0)
        return {"key": key_words(key), "win": win}

    # -- the retrain point
    def _direction_sum_impl(self, words: jax.Array, weights: jax.Array, chunk: int) -> jax.Array:
        """sum_{t,j} weights[t, j] u_{t,j} ``[n_in]``, the u regenerated from each session's key words."""

        def body(acc, xs):
            wd, wt = xs
            u = jax.vmap(lambda kw: self.directions(session_keys(kw)[0]))(wd)  # [chunk, n, n_in]
            return acc + jnp.einsum("cj,cjf->f", wt, u), None

        xs = (words.reshape((-1, chunk) + words.shape[1:]), weights.reshape((-1, chunk) + weights.shape[1:]))
        acc, _ = jax.lax.scan(body, jnp.zeros((self.n_in,), jnp.float32), xs)
        return acc

    def update(self, key, params, hyper, data: PaddedDataset, counters, entered, log):
        """w_log + sum_t eta_t delta mean_{j in W_t} u_{t,j} over the sessions since the last retrain."""
        if log is None or log.record is None or len(log.query) == 0:
            return params, {"skipped": True}
        query = np.asarray(log.query)
        win = np.asarray(log.record["win"], bool)
        n_win = win.sum(axis=1)
        eta = self.step_sizes(hyper, data, query, n_win > 0)
        weights = (eta * self.delta / np.maximum(n_win, 1))[:, None] * win
        sel = np.flatnonzero(eta > 0)
        step = np.zeros(self.n_in, np.float64)
        if sel.size:
            n_pad, chunk = padded_length(sel.size, max(1, (1 << 22) // (self.n_candidates * self.n_in)))
            words = pad_rows(np.asarray(log.record["key"])[sel], n_pad)
            step = np.asarray(self._direction_sum(jnp.asarray(words), jnp.asarray(pad_rows(
                weights[sel].astype(np.float32), n_pad)), chunk=chunk), np.float64)
        w = params["w"] + jnp.asarray(step, jnp.float32)
        return {**params, "w": w}, self.update_info(eta, step, int(self.training_sessions(data, query).sum()))


class DBGD(MGD):
    """Dueling bandit gradient descent: one candidate, team-draft interleaving (§3.1)."""

    name = "dbgd"

    def __init__(self, data: PaddedDataset, multileave: Annotated[str, OneOf(MULTILEAVE)] = "team_draft", **kwargs):
        if kwargs.pop("n_candidates", 1) != 1:
            raise ValueError("DBGD has exactly one candidate; use MGD for more")
        super().__init__(data, n_candidates=1, multileave=multileave, **kwargs)
