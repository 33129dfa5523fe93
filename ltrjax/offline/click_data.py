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
import logging

import jax
import jax.numpy as jnp
import numpy as np

from ltrjax.clicklog import ClickLog, ClickLogError
from ltrjax.data.queryset import SPLIT_NAMES, TRAIN
from ltrjax.offline.logging import ClickStats, LoggedLists, _add, empty_stats, reduce_sessions

_logger = logging.getLogger("ltrjax")


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


def query_rows(log: ClickLog, queryset, path: str = "<click log>", row0: int = 0) -> np.ndarray:
    """The queryset row of every session's ``query_id``, -1 for a query preprocessing dropped (its qid is in
    ``preprocess_report.dropped_qids``); any other unknown id is an error naming the row."""
    qids = np.asarray(queryset.qids, np.int64)
    order = np.argsort(qids, kind="stable")
    pos = np.clip(np.searchsorted(qids[order], log.query_id), 0, max(len(qids) - 1, 0))
    found = qids[order][pos] == log.query_id if len(qids) else np.zeros(log.n_sessions, bool)
    report = getattr(queryset, "preprocess_report", None)
    dropped = np.isin(log.query_id, report.dropped_qids) if report is not None else np.zeros_like(found)
    bad = np.flatnonzero(~found & ~dropped)
    if bad.size:
        raise ClickLogError(path, row0 + int(bad[0]), f"a query_id of dataset {queryset.name!r} "
                            f"({len(qids)} queries)", f"query_id {log.query_id[bad[0]]}")
    return np.where(found, order[pos], -1)


def repeated_documents(doc_ids: np.ndarray) -> np.ndarray:
    """bool [S]: sessions that show one document at two positions."""
    d = np.sort(np.where(doc_ids >= 0, doc_ids, -1 - np.arange(doc_ids.shape[1])), axis=1)
    return (d[:, 1:] == d[:, :-1]).any(axis=1)


MIN_TRAIN_SESSIONS = 2


def refuse_untrainable(n: int, n_clicks: int, n_shown: int, path: str, info: dict) -> None:
    """A log no estimator can learn from is refused, naming the file and the counts (of its usable training
    sessions): fewer than ``MIN_TRAIN_SESSIONS`` sessions, no click at all, or every shown document clicked."""
    if not info["sessions_train"]:
        raise ClickLogError(path, None, "at least one session of split 'train'", f"splits {info}")
    counts = f"{n} training sessions, {n_shown} shown documents, {n_clicks} clicks"
    if n < MIN_TRAIN_SESSIONS:
        raise ClickLogError(path, None, f"at least {MIN_TRAIN_SESSIONS} usable training sessions to learn from",
                            f"{counts} (sessions read: {info})")
    if n_clicks == 0:
        raise ClickLogError(path, None, "at least one click among the training sessions (a log without clicks "
                            "teaches every estimator nothing: its ranking would be the initial one)", counts)
    if n_clicks == n_shown:
        raise ClickLogError(path, None, "at least one shown document without a click (a log where every shown "
                            "document is clicked carries no preference to learn)", counts)


def training_sessions(log: ClickLog, queryset, path: str = "<click log>", warn: bool = True, whole: bool = True,
                      row0: int = 0):
    """(queryset row of every session, the rows of the training sessions that train, counts): every check of
    ``click_training_data``, run before any work. Sessions must name queries and documents of ``queryset``
    and a ``train`` session a training query (no leakage into vali/test); sessions on queries preprocessing
    dropped and sessions showing a document twice are skipped and counted (a WARNING when ``warn``); a log
    no estimator can learn from is refused (``refuse_untrainable``; not when ``whole`` is false: ``log`` is a
    chunk of a file, starting at row ``row0``, and the caller refuses on the file's totals)."""
    q = query_rows(log, queryset, path, row0)
    split = np.where(q >= 0, np.asarray(queryset.split)[q], -1)
    train = log.split == TRAIN
    leak = np.flatnonzero(train & (split != TRAIN) & (q >= 0))
    if leak.size:
        r = int(leak[0])
        raise ClickLogError(path, row0 + r, "split 'train' only for training queries of the dataset",
                            f"query_id {log.query_id[r]}, a {SPLIT_NAMES[split[r]]} query of {queryset.name!r}")
    offsets = np.asarray(queryset.query_offsets, np.int64)
    sizes = np.where(q >= 0, np.diff(offsets)[np.maximum(q, 0)], np.iinfo(np.int32).max)
    too_far = np.flatnonzero((log.doc_ids >= sizes[:, None]).any(axis=1))
    if too_far.size:
        r = int(too_far[0])
        raise ClickLogError(path, row0 + r, f"doc_ids below {sizes[r]}, the documents of query_id {log.query_id[r]}",
                            str([int(d) for d in log.doc_ids[r] if d >= 0]))
    info = {"sessions": log.n_sessions, **{f"sessions_{name}": int(np.sum(log.split == s))
                                           for s, name in enumerate(SPLIT_NAMES)}}
    on_dropped, repeated = train & (q < 0), train & repeated_documents(log.doc_ids)
    info.update(skipped_dropped_query=int(on_dropped.sum()),
                skipped_repeated_document=int((repeated & ~on_dropped).sum()))
    if warn:
        _warn_skipped(path, info, queryset)
    rows_train = np.flatnonzero(train & ~on_dropped & ~repeated)
    info.update(usable=int(rows_train.size), usable_clicks=int(log.clicks[rows_train].sum()),
                usable_shown=int((log.doc_ids[rows_train] >= 0).sum()))
    if whole:
        refuse_untrainable(info["usable"], info["usable_clicks"], info["usable_shown"], path, info)
    return q, rows_train, info


def logged_lists(lists: np.ndarray, queryset, labels_to_relevance) -> LoggedLists:
    """``LoggedLists`` of the distinct displayed lists ``lists`` ([L, 1 + K]: queryset row, then document
    index within the query by position, -1 where empty)."""
    offsets = np.asarray(queryset.query_offsets, np.int64)
    list_query, list_docs = lists[:, 0], lists[:, 1:]
    mask = list_docs >= 0
    doc_index = np.where(mask, offsets[list_query][:, None] + list_docs, 0)
    features = np.where(mask[..., None], np.asarray(queryset.features)[doc_index], 0.0).astype(np.float32)
    labels = np.where(mask, np.asarray(queryset.labels)[doc_index], 0).astype(np.int32)
    return LoggedLists(features=jnp.asarray(features), labels=jnp.asarray(labels),
                       relevance=jnp.where(mask, labels_to_relevance(labels), 0.0).astype(jnp.float32),
                       mask=jnp.asarray(mask), doc_index=jnp.asarray(doc_index, jnp.int32),
                       query_index=jnp.asarray(list_query, jnp.int32))


def reduce_into(stats: ClickStats, clicks: np.ndarray, list_of: np.ndarray, chunk: int, n_lists: int) -> ClickStats:
    """``stats`` plus the sessions (``clicks [n, K]`` of lists ``list_of``), ``chunk`` sessions per jitted call."""
    for start in range(0, len(list_of), chunk):
        n = min(chunk, len(list_of) - start)
        pad = lambda a: np.pad(a, [(0, chunk - n)] + [(0, 0)] * (a.ndim - 1))  # noqa: E731
        stats = _reduce_chunk(stats, jnp.asarray(pad(clicks[start:start + n])),
                              jnp.asarray(pad(list_of[start:start + n]), jnp.int32), jnp.arange(chunk) < n, n_lists)
    return stats


def click_training_data(log: ClickLog, queryset, labels_to_relevance, chunk: int = 1 << 17,
                        path: str = "<click log>", warn: bool = True) -> tuple[LoggedLists, ClickStats, dict]:
    """(displayed lists, their click statistics, counts) of the training-split sessions of ``log``
    (``training_sessions``: which sessions train, and the refusals).

    ``labels_to_relevance(labels)`` fills ``LoggedLists.relevance`` (what a simulated click model would
    use; estimators never read it).
    """
    q, rows_train, info = training_sessions(log, queryset, path, warn)
    keys = np.concatenate([q[rows_train, None], log.doc_ids[rows_train]], axis=1)
    lists, list_of = np.unique(keys, axis=0, return_inverse=True)
    logged = logged_lists(lists, queryset, labels_to_relevance)
    clicks = log.clicks[rows_train]
    n_lists, k = lists.shape[0], lists.shape[1] - 1
    stats = reduce_into(empty_stats(n_lists, k), clicks, list_of.reshape(-1),
                        int(max(1, min(chunk, len(rows_train)))), n_lists)
    info.update(lists=int(n_lists), clicks=int(clicks.sum()), queries=int(len(np.unique(lists[:, 0]))))
    return logged, jax.block_until_ready(stats), info


def _warn_skipped(path: str, info: dict, queryset) -> None:
    if info["skipped_dropped_query"]:
        _logger.warning("%s: skipped %d training sessions on queries that preprocessing of dataset %s dropped (too few "
                    "documents, or test queries without a relevant document); counted in results.json "
                    "(click_log.skipped_dropped_query)", path, info["skipped_dropped_query"], queryset.name)
    if info["skipped_repeated_document"]:
        _logger.warning("%s: skipped %d training sessions that show one document at two positions; counted in "
                    "results.json (click_log.skipped_repeated_document)", path, info["skipped_repeated_document"])
