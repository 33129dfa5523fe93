"""The interface every online policy implements (SPEC §2).

The simulator never names a policy. Per segment it asks the policy to ``refresh`` any
per-segment randomness and to ``prepare`` per-document values from its frozen parameters and the
behaviour counters as of the segment start (model scores, priors, refreshed behaviour features),
then, inside the per-session scan, for ``session_scores`` of one query from those values and the
query's live counters, and for a ``session_record`` of what a learner needs from that session
(e.g. a PDGD gradient or a multileaving winner). At retrain points ``update`` retrains from the
counters and the log of every session since the previous retrain. Offline evaluation asks for
``test_scores`` with (warm) or without (cold) behaviour information.

Segments are the behaviour-feature refresh points (``sim.refreshes``; UCBRank: 100); models
retrain at every ``refreshes / n_updates``-th of them (``sim.n_updates``; both papers: 20).

Arrays handed to ``session_scores`` are one query's rows in entry order; everything else is
``[Qb, Db]`` in dataset order. A policy is an immutable Python object holding its static
hyper-parameters; its learnable state is the ``params`` pytree it returns from ``init``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from ltrjax.data.layout import Bucket, PaddedDataset
from ltrjax.online.state import DocCounters

Params = Any
Aux = Any


class QueryView(NamedTuple):
    """What a policy may read about one query inside the session scan."""

    aux: Aux  # the policy's own per-document values from ``prepare`` (entry order) [Db]
    hyper: Any  # the policy's traced hyper-parameters (``Policy.hyper``), e.g. exploration strength
    counters: DocCounters  # live counters [Db]
    n_entered: jax.Array  # i32 []
    issue_count: jax.Array  # i32 [] including the current session


class SessionLog(NamedTuple):
    """What happened in the sessions of a segment (global time order), for learners that replay them."""

    query: Any  # i32 [n]  global query index
    shown: Any  # i32 [n, K]  document slot (dataset order) per position, -1 for empty slots
    clicks: Any  # bool [n, K]
    session: Any  # i32 [n] global session index
    record: Any = None  # the policy's ``session_record`` pytree, leaves with leading axis n (None: none)


class Policy:
    """Base class: a deterministic scorer with no learning. Subclasses override what they need."""

    name: str = "policy"
    trains: bool = False

    def init(self, key: jax.Array, data: PaddedDataset) -> Params:
        return ()

    def hyper(self, params: Params) -> Any:
        """Scalar hyper-parameters read inside the session scan; traced, so a grid compiles once."""
        return ()

    def with_hyper(self, params: Params, **values) -> Params:
        """``params`` with hyper-parameters replaced (for validation grids)."""
        if values:
            raise ValueError(f"{self.name} has no tunable hyper-parameters {sorted(values)}")
        return params

    def refresh(self, key: jax.Array, params: Params) -> Params:
        """Called before every segment (a behaviour refresh), e.g. to redraw MC-dropout masks."""
        return params

    def prepare(self, params: Params, bucket: Bucket, behaviour: DocCounters) -> Aux:
        """Per-document values ``[Qb, Db, ...]`` (dataset order), computed once per segment.

        ``behaviour`` holds the bucket's counters ``[Qb, Db]`` (dataset order) as of the segment start:
        the refreshed behaviour features of a policy that freezes them between refreshes. XLA drops
        it when a policy does not read it.
        """
        return jnp.zeros(bucket.labels.shape, jnp.float32)

    def doc_scores(self, aux: Aux, counters: DocCounters, hyper: Any) -> jax.Array:
        """Logging scores from each document's own values (any shape); the default session score."""
        return aux

    def session_scores(self, view: QueryView, key: jax.Array) -> jax.Array:
        """Logging scores ``[Db]`` of one query for one session (higher is shown first)."""
        return self.doc_scores(view.aux, view.counters, view.hyper)

    def session_record(self, view: QueryView, key: jax.Array, scores: jax.Array, shown: jax.Array,
                       slot_valid: jax.Array, clicked: jax.Array) -> Any:
        """What an online learner keeps of one session, computed inside the scan (None: nothing).

        ``key`` is the key ``session_scores`` got, ``scores`` its output ``[Db]`` (entry order),
        ``shown`` the entry-order slots ``[K]`` in display order, ``slot_valid``/``clicked`` bool
        ``[K]``. The leaves reach ``update`` stacked in ``SessionLog.record`` (sessions in time order).
        """
        return None

    def test_scores(self, params: Params, bucket: Bucket, counters: DocCounters, warm: bool) -> jax.Array:
        """Deterministic scores ``[Qb, Db]`` for offline evaluation, with or without behaviour."""
        return self.prepare(params, bucket, counters)

    def update(self, key: jax.Array, params: Params, data: PaddedDataset, counters: tuple[DocCounters, ...],
               entered: tuple[jax.Array, ...], log: SessionLog | None) -> tuple[Params, dict]:
        """Retrain at a retrain point from dataset-order counters of every bucket and the log of all
        sessions since the previous retrain; returns (params, info)."""
        return params, {}
