"""Click logs (``ltrjax.clicklog``) in and out of the offline protocol.

Out: the offline logger's sessions (a logged-list row per session) as a ``ClickLog``. In: a
``ClickLog`` becomes the estimators' training data. Every distinct displayed list (query, documents
by position) is one row of ``LoggedLists`` (rows sorted by query, then list) and its sessions are
reduced to ``ClickStats`` in the log's order, chunk by chunk, with the same reduction as the logger,
so a log written by the logger gives the very statistics it computed in memory. Only training-split
sessions train; the others are counted in the returned info.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ltrjax.clicklog import ClickLog, ClickLogError
from ltrjax.data.queryset import SPLIT_NAMES, TRAIN
from ltrjax.offline.logging import ClickStats, LoggedLists, _add, empty_stats, reduce_sessions


def logged_sessions(logged: LoggedLists, queryset, first_session: int, query, clicks) -> ClickLog:
    """Sessions of the offline logger (``query``: rows of ``logged``) as a click log (split ``train``)."""
    query = np.asarray(query, np.int64)
    q = np.asarray(logged.query_index, np.int64)[query]
    offsets = np.asarray(queryset.query_offsets, np.int64)
    mask = np.asarray(logged.mask)[query]
    docs = np.asarray(logged.doc_index, np.int64)[query] - offsets[q][:, None]
    session = first_session + np.arange(len(query), dtype=np.int64)
    return ClickLog(session_id=session, time=session, query_id=np.asarray(queryset.qids, np.int64)[q],
                    doc_ids=np.where(mask, docs, -1).astype(np.int32), clicks=np.asarray(clicks, bool) & mask,
                    split=np.full(len(query), TRAIN, np.int8))


@functools.partial(jax.jit, static_argnames=("n_lists",))
def _reduce_chunk(stats: ClickStats, clicks, rows, weight, n_lists: int) -> ClickStats:
    return _add(stats, reduce_sessions(clicks, rows, n_lists, weight))


def query_rows(log: ClickLog, queryset, path: str = "<click log>") -> np.ndarray:
    """The queryset row of every session's ``query_id``; unknown ids are an error naming the row."""
    qids = np.asarray(queryset.qids, np.int64)
    order = np.argsort(qids, kind="stable")
    pos = np.clip(np.searchsorted(qids[order], log.query_id), 0, max(len(qids) - 1, 0))
    found = qids[order][pos] == log.query_id if len(qids) else np.zeros(log.n_sessions, bool)
    bad = np.flatnonzero(~found)
    if bad.size:
        raise ClickLogError(path, int(bad[0]), f"a query_id of dataset {queryset.name!r} "
                            f"({len(qids)} queries)", f"query_id {log.query_id[bad[0]]}")
    return order[pos]


def click_training_data(log: ClickLog, queryset, labels_to_relevance, chunk: int = 1 << 17,
                        path: str = "<click log>") -> tuple[LoggedLists, ClickStats, dict]:
    """(displayed lists, their click statistics, counts) of the training-split sessions of ``log``.

    ``labels_to_relevance(labels)`` fills ``LoggedLists.relevance`` (what a simulated click model would
    use; estimators never read it). Sessions must name queries and documents of ``queryset``, and a
    ``train`` session must be of a training query of the dataset (no leakage into vali/test).
    """
    q = query_rows(log, queryset, path)
    split = np.asarray(queryset.split)[q]
    train = log.split == TRAIN
    leak = np.flatnonzero(train & (split != TRAIN))
    if leak.size:
        r = int(leak[0])
        raise ClickLogError(path, r, "split 'train' only for training queries of the dataset",
                            f"query_id {log.query_id[r]}, a {SPLIT_NAMES[split[r]]} query of {queryset.name!r}")
    offsets = np.asarray(queryset.query_offsets, np.int64)
    sizes = np.diff(offsets)[q]
    too_far = np.flatnonzero((log.doc_ids >= sizes[:, None]).any(axis=1))
    if too_far.size:
        r = int(too_far[0])
        raise ClickLogError(path, r, f"doc_ids below {sizes[r]}, the documents of query_id {log.query_id[r]}",
                            str([int(d) for d in log.doc_ids[r] if d >= 0]))
    info = {"sessions": log.n_sessions, **{f"sessions_{name}": int(np.sum(log.split == s))
                                           for s, name in enumerate(SPLIT_NAMES)}}
    rows_train = np.flatnonzero(train)
    if not rows_train.size:
        raise ClickLogError(path, None, "at least one session of split 'train'", f"splits {info}")
    keys = np.concatenate([q[rows_train, None], log.doc_ids[rows_train]], axis=1)
    lists, list_of = np.unique(keys, axis=0, return_inverse=True)
    list_of = list_of.reshape(-1)
    list_query, list_docs = lists[:, 0], lists[:, 1:]
    mask = list_docs >= 0
    doc_index = np.where(mask, offsets[list_query][:, None] + list_docs, 0)
    features = np.where(mask[..., None], np.asarray(queryset.features)[doc_index], 0.0).astype(np.float32)
    labels = np.where(mask, np.asarray(queryset.labels)[doc_index], 0).astype(np.int32)
    logged = LoggedLists(features=jnp.asarray(features), labels=jnp.asarray(labels),
                         relevance=jnp.where(mask, labels_to_relevance(labels), 0.0).astype(jnp.float32),
                         mask=jnp.asarray(mask), doc_index=jnp.asarray(doc_index, jnp.int32),
                         query_index=jnp.asarray(list_query, jnp.int32))
    clicks = log.clicks[rows_train]
    n_lists, k = mask.shape
    chunk = int(max(1, min(chunk, len(rows_train))))
    stats = empty_stats(n_lists, k)
    for start in range(0, len(rows_train), chunk):
        n = min(chunk, len(rows_train) - start)
        pad = lambda a: np.pad(a, [(0, chunk - n)] + [(0, 0)] * (a.ndim - 1))  # noqa: E731
        stats = _reduce_chunk(stats, jnp.asarray(pad(clicks[start:start + n])),
                              jnp.asarray(pad(list_of[start:start + n]), jnp.int32),
                              jnp.arange(chunk) < n, n_lists)
    info.update(lists=int(n_lists), clicks=int(clicks.sum()), queries=int(len(np.unique(list_query))))
    return logged, jax.block_until_ready(stats), info
