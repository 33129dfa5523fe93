"""PDGD (Oosterhuis & de Rijke 2018) under the EBRank logging/learning protocol (baselines.md §3.4, §3.6).

Protocol (§3.6, the EBRank variant). A *logging* linear model w_log serves every session and is
frozen between retrain points; a *learning* model is updated after every training-split session
from the logging model's scores, with a step size that decays per update and resets at each
retrain; at each retrain point the logging model becomes the learning model. Because every
per-session update Delta_t depends only on the frozen w_log (and that session's ranking and clicks),
the learning model at a retrain point is exactly

    w_learn = w_log + sum_t eta_t Delta_t,   eta_t = lr * decay^(number of earlier updates since the retrain),

summed over the sessions since the previous retrain in time order. ``update`` computes this sum
(vectorized) from the per-session records; it is the §3.6 protocol itself, not an approximation.
It differs from classic online LTR (one update per session, the next session already ranked by the
updated model): here rankings use the model of the last retrain point (20 per run by default;
raise ``sim.n_updates`` for more frequent logging refreshes).

Sessions train only when their query is in the training split (the paper's semantics; EBRank's code
trains on all splits: ``all_splits=True``). An update "happens" (and decays the step) in a training
session with at least one click (no click -> no update, §3.4 step 2).

Model: s = w . x, no bias, w ~ U(0, 1) per feature (EBRank's variants; ``init="zeros"`` for the
classic w_0 = 0). Features (``ltrjax.online.behaviour``): ``wo_behav`` x = x_nb; ``concat``
x = [x_nb, x_b] with x_b read live from the query's counters at session time (warm test scores
use the current counters, cold ones the unseen value). ``ie`` is rejected: PDGD needs one
scoring function. PDGD defaults (EBRank copy): lr 0.1, decay 0.9999.

Per session (inside the scan) the policy shows the top K of s + Gumbel noise (an exact PL sample)
and records the K coefficients of g = sum_i coef_i x_{R_i} (``plackett_luce.pdgd_coefficients``,
from the noise-free logging scores over all entered documents) plus, for concat, the x_b of the
displayed documents at that time.
"""

from __future__ import annotations

from typing import Annotated

import jax.numpy as jnp
import numpy as np

from ltrjax.constraints import Range
from ltrjax.data.layout import Bucket, PaddedDataset
from ltrjax.online import plackett_luce as pl
from ltrjax.online.policies.base import QueryView
from ltrjax.online.policies.linear_online import LinearOnlineLearner, pad_rows, padded_length, weighted_feature_sum


class PDGD(LinearOnlineLearner):
    """Pairwise Differentiable Gradient Descent with a logging model frozen between retrains (§3.4, §3.6)."""

    name = "pdgd"

    def __init__(self, data: PaddedDataset, learning_rate: float = 0.1,
                 decay: Annotated[float, Range(0, 1, lo_open=True)] = 0.9999, **kwargs):
        super().__init__(data, learning_rate=learning_rate, decay=decay, **kwargs)

    def prepare(self, params, bucket: Bucket, behaviour=None):
        return self.bucket_base(params, bucket)

    def session_scores(self, view: QueryView, key):
        """Logging scores + Gumbel noise: the top K is a Plackett–Luce sample (§3.4 step 1)."""
        return pl.gumbel_perturb(key, self.logging_scores(view.aux, view.counters, self.w_b(view.params)))

    def session_record(self, view: QueryView, key, scores, shown, slot_valid, clicked):
        """coef ``[K]`` of g = sum_i coef_i x_{shown_i} (noise-free logging scores), and x_b ``[K]`` for concat."""
        s = self.logging_scores(view.aux, view.counters, self.w_b(view.params))
        mask = jnp.arange(s.shape[-1]) < view.n_entered
        record = {"coef": pl.pdgd_coefficients(s, mask, shown, slot_valid, clicked & slot_valid)}
        if self.concat:
            record["x_b"] = self.x_b(view.counters)[shown]
        return record

    def update(self, key, params, hyper, data: PaddedDataset, counters, entered, log):
        """w_log + sum_t eta_t g_t over the sessions since the last retrain (module docstring)."""
        if log is None or log.record is None or len(log.query) == 0:
            return params, {"skipped": True}
        query, shown = np.asarray(log.query), np.asarray(log.shown)
        clicks = np.asarray(log.clicks) & (shown >= 0)
        eta = self.step_sizes(hyper, data, query, clicks.any(axis=1))
        weights = (eta[:, None] * np.asarray(log.record["coef"], np.float64) * (shown >= 0)).astype(np.float32)
        step = np.zeros(self.n_in, np.float64)
        bucket_of = data.bucket_of_query[query]
        for b, bucket in enumerate(data.buckets):
            sel = np.flatnonzero((bucket_of == b) & (eta > 0))
            if sel.size == 0:
                continue
            n_pad, chunk = padded_length(sel.size)
            rows = pad_rows(data.row_of_query[query[sel]].astype(np.int32), n_pad)
            step[: self.n_nb] += np.asarray(weighted_feature_sum(
                bucket, rows, pad_rows(shown[sel].astype(np.int32), n_pad), pad_rows(weights[sel], n_pad),
                chunk=chunk), np.float64)
        if self.concat:
            step[self.n_nb] = np.sum(weights.astype(np.float64) * np.asarray(log.record["x_b"], np.float64))
        w = params["w"] + jnp.asarray(step, jnp.float32)
        return {**params, "w": w}, self.update_info(eta, step, int(self.training_sessions(data, query).sum()))
