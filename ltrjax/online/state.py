"""Simulator state: per-query, per-document counters as a pytree (SPEC §2.2).

Counters are stored in *entry order*: slot ``j`` of a query is the ``j``-th of its documents to
enter, so the entered documents are always the prefix ``j < n_entered``, and ties in top-k go to
the earlier-entered document (a random order, so ties never leak the file's label order).
``order``/``rank`` convert between entry order and the dataset's document order.
Every array has one extra scratch row (index ``Qb``) that idle simulation lanes write into.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from ltrjax.data.layout import Bucket
from ltrjax.online import host_random


STAT_NAMES = ("clicks", "ips_clicks", "impressions", "exposure", "alpha_sum", "beta_sum")


@struct.dataclass
class DocCounters:
    """Per-document behaviour statistics, accumulated over every session of every split."""

    clicks: jax.Array  # sum c                       (raw clicks C)
    ips_clicks: jax.Array  # sum c / theta_k          (IPS clicks)
    impressions: jax.Array  # n, times shown in the top K
    exposure: jax.Array  # E = sum theta_k
    alpha_sum: jax.Array  # sum alpha_k (affine correction, UCBRank Eq. 8)
    beta_sum: jax.Array  # sum beta_k

    @classmethod
    def zeros(cls, shape, names: tuple[str, ...] = STAT_NAMES) -> "DocCounters":
        """Zero counters ``shape``; the counters not in ``names`` are None (not kept)."""
        return cls(**{n: jnp.zeros(tuple(shape), jnp.float32) if n in names else None for n in STAT_NAMES})


@struct.dataclass
class BucketState:
    """Simulation state of one size bucket; leading axis = query (+1 scratch row)."""

    counters: DocCounters  # f32 [Qb+1, Db] per counter, entry order; one array per counter, so a row gather
    #                        in the session step reads only the counters the policy uses (None: not kept)
    n_entered: jax.Array  # i32 [Qb+1]
    issue_count: jax.Array  # i32 [Qb+1] T_q, sessions the query has been issued in
    order: jax.Array  # i32 [Qb+1, Db] entry slot j -> document slot (dataset order)
    rank: jax.Array  # i32 [Qb+1, Db] document slot -> entry slot
    entry_session: jax.Array  # i32 [Qb+1, Db] global session index at which slot j entered (-1: initial)

    @property
    def stats(self) -> jax.Array:
        """The kept counters stacked plane-major, ``[kept, Qb+1, Db]`` in STAT_NAMES order (all six unless the
        state was made for a policy's ``counters_read``)."""
        return jnp.stack([c for c in (getattr(self.counters, name) for name in STAT_NAMES) if c is not None])


def kept_counters(names) -> tuple[str, ...]:
    """The counters a state keeps for a policy that reads ``names``: those, and ``clicks`` (the perfect documents'
    record, UCBRank Fig. 1), in ``STAT_NAMES`` order."""
    unknown = set(names) - set(STAT_NAMES)
    if unknown:
        raise ValueError(f"unknown counters {sorted(unknown)}; expected some of {STAT_NAMES}")
    return tuple(n for n in STAT_NAMES if n in names or n == "clicks")


def init_bucket_state(key: jax.Array, bucket: Bucket, initial_docs: tuple[int, int],
                      names: tuple[str, ...] = STAT_NAMES) -> BucketState:
    """Random entry order per query; a random ``initial_docs`` range (inclusive) of documents enter first. Only the
    counters ``names`` are kept (the others None)."""
    n_queries, width = bucket.labels.shape
    keys = jax.vmap(lambda q: jax.random.fold_in(key, q))(bucket.query_index)

    def one_query(k, doc_mask, n_docs):
        k_order, k_init = jax.random.split(k)
        priority = jnp.where(doc_mask, jax.random.uniform(k_order, (width,)), 2.0)
        order = jnp.argsort(priority).astype(jnp.int32)
        n_initial = jax.random.randint(k_init, (), initial_docs[0], initial_docs[1] + 1)
        return order, jnp.minimum(n_initial, n_docs).astype(jnp.int32)

    order, n_entered = jax.vmap(one_query)(keys, bucket.doc_mask, bucket.n_docs)
    rank = jnp.argsort(order, axis=1).astype(jnp.int32)
    pad_row = lambda a: jnp.concatenate([a, a[:1] * 0], axis=0)  # noqa: E731
    return BucketState(
        counters=DocCounters.zeros((n_queries + 1, width), names),
        n_entered=pad_row(n_entered),
        issue_count=jnp.zeros((n_queries + 1,), jnp.int32),
        order=pad_row(order),
        rank=pad_row(rank),
        entry_session=jnp.full((n_queries + 1, width), -1, jnp.int32),
    )


def init_bucket_state_host(key, bucket: Bucket, initial_docs: tuple[int, int],
                           names: tuple[str, ...] = STAT_NAMES) -> BucketState:
    """``init_bucket_state`` computed with NumPy on the host (``host_random``: the same draws, bit for bit, and
    no XLA program per bucket shape to compile); the state's arrays are NumPy arrays."""
    doc_mask, n_docs = np.asarray(bucket.doc_mask), np.asarray(bucket.n_docs)
    n_queries, width = doc_mask.shape
    halves = host_random.split(host_random.fold_in(key, np.asarray(bucket.query_index)))  # [Qb, 2, 2]
    priority = np.where(doc_mask, host_random.uniform(halves[:, 0], (width,)), np.float32(2.0))
    order = np.argsort(priority, axis=1, kind="stable").astype(np.int32)
    n_initial = host_random.randint(halves[:, 1], (), initial_docs[0], initial_docs[1] + 1)
    n_entered = np.minimum(n_initial, n_docs).astype(np.int32)
    rank = np.argsort(order, axis=1, kind="stable").astype(np.int32)
    pad_row = lambda a: np.concatenate([a, np.zeros_like(a[:1])], axis=0)  # noqa: E731
    return BucketState(
        counters=DocCounters(**{n: np.zeros((n_queries + 1, width), np.float32) if n in names else None
                                for n in STAT_NAMES}),
        n_entered=pad_row(n_entered),
        issue_count=np.zeros((n_queries + 1,), np.int32),
        order=pad_row(order),
        rank=pad_row(rank),
        entry_session=np.full((n_queries + 1, width), -1, np.int32),
    )


def to_entry_order(values: jax.Array, state: BucketState) -> jax.Array:
    """``[Qb, Db, ...]`` values in dataset order -> ``[Qb+1, Db, ...]`` in entry order."""
    order = state.order[: values.shape[0]]
    idx = order.reshape(order.shape + (1,) * (values.ndim - 2))
    out = jnp.take_along_axis(values, idx, axis=1)
    return jnp.concatenate([out, jnp.zeros_like(out[:1])], axis=0)


def documents_in_entry_order(values: jax.Array, bucket: Bucket, state: BucketState) -> jax.Array:
    """Per-document ``values`` ``[Nb+1, ...]`` (the rows of ``bucket.doc_features``) -> ``[Qb+1, Db, ...]`` in entry
    order, scratch row zero: ``to_entry_order(bucket.on_slots(values, axis=0), state)`` as one gather of values
    (the entry slots' document rows are gathered first, as int32), bit for bit the same."""
    rows = jnp.take_along_axis(bucket.doc_row, state.order[: bucket.doc_row.shape[0]], axis=1)  # [Qb, Db]
    out = jnp.take(values, rows, axis=0)
    return jnp.concatenate([out, jnp.zeros_like(out[:1])], axis=0)


def to_dataset_order(values: jax.Array, state: BucketState) -> jax.Array:
    """``[Qb+1, Db]`` entry-order values -> ``[Qb, Db]`` in dataset order (scratch row dropped)."""
    return jnp.take_along_axis(values[:-1], state.rank[:-1], axis=1)


def counters_in_dataset_order(state: BucketState, names: tuple[str, ...] = STAT_NAMES) -> DocCounters:
    """The counters ``names`` in dataset order (``[Qb, Db]`` each); the others None."""
    return DocCounters(**{name: to_dataset_order(getattr(state.counters, name), state)
                          if name in names and getattr(state.counters, name) is not None else None
                          for name in STAT_NAMES})


def entered_mask(state: BucketState) -> jax.Array:
    """bool [Qb, Db] in dataset order: which documents have entered."""
    width = state.order.shape[1]
    entered_entry = jnp.arange(width)[None, :] < state.n_entered[:, None]
    return to_dataset_order(entered_entry, state)


def member_in_dataset_order(states, i, names: tuple[str, ...]) -> tuple[tuple[DocCounters, ...], tuple[jax.Array, ...]]:
    """Member ``i`` (may be traced) of member-stacked bucket states: per bucket its counters ``names`` (the others
    None) and its entered mask, in dataset order (a retrain's inputs)."""
    member = [jax.tree_util.tree_map(lambda a: a[i], s) for s in states]
    return tuple(counters_in_dataset_order(s, names=names) for s in member), tuple(entered_mask(s) for s in member)
