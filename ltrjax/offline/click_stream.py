"""A click-log file to the estimators' training data in two passes over its record batches (issue 42, item 2), so
that a log larger than memory trains: what stays in memory is the distinct displayed lists and their click
statistics (``click_data.click_training_data`` does the same from a log held whole, with the same result).

Pass 1 checks every batch (``click_data.training_sessions``), sums the counts, refuses on the file's totals, and
collects the distinct lists (query, documents by position); pass 2 maps each batch's training sessions to their
list and adds them to the statistics. Memory: the lists ``[L, 1 + K]`` and statistics, plus one batch.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import numpy as np

from ltrjax.clicklog import BATCH_SESSIONS, iter_click_log
from ltrjax.data.queryset import TRAIN
from ltrjax.offline.click_data import (_warn_skipped, logged_lists, reduce_into, refuse_untrainable,
                                       repeated_documents, training_sessions)
from ltrjax.offline.click_likelihood import MAX_HELDOUT, HeldOut
from ltrjax.offline.logging import empty_stats


def _rows(keys: np.ndarray) -> np.ndarray:
    """``[n, w]`` int64 keys as one structured value per row (np.unique / searchsorted order them by column)."""
    keys = np.ascontiguousarray(keys, np.int64)
    return keys.view(np.dtype([(f"c{i}", "<i8") for i in range(keys.shape[1])])).reshape(-1)


def _pad(a: np.ndarray, k: int, fill) -> np.ndarray:
    return np.pad(a, [(0, 0), (0, k - a.shape[1])], constant_values=fill)


def _batches(path, queryset, batch_sessions: int):
    """(chunk, its queryset rows, its training rows, its counts) of every batch of the file."""
    row0 = 0
    for part in iter_click_log(path, batch_sessions):
        q, rows, info = training_sessions(part, queryset, str(path), warn=False, whole=False, row0=row0)
        yield part, q, rows, info
        row0 += part.n_sessions


def scan(path, queryset, batch_sessions: int = BATCH_SESSIONS, warn: bool = True) -> tuple[np.ndarray, dict]:
    """Pass 1: the distinct displayed lists ``[L, 1 + K]`` (sorted) and the file's counts; a file no estimator
    can learn from is refused on its totals, sessions skipped are warned about once."""
    totals: dict = {}
    uniques, k = [], 1
    for part, q, rows, info in _batches(path, queryset, batch_sessions):
        for key, value in info.items():
            totals[key] = totals.get(key, 0) + value
        if rows.size:
            keys = np.concatenate([q[rows, None], part.doc_ids[rows]], axis=1)
            uniques.append(np.unique(keys, axis=0))
            k = max(k, part.n_positions)
    if not totals:
        totals = {"sessions": 0, "sessions_train": 0}
    if warn and totals.get("sessions_train"):
        _warn_skipped(str(path), totals, queryset)
    refuse_untrainable(totals.get("usable", 0), totals.get("usable_clicks", 0), totals.get("usable_shown", 0),
                       str(path), totals)
    lists = np.unique(np.concatenate([_pad(u, k + 1, -1) for u in uniques]), axis=0)
    return lists, totals


def stream_training_data(path, queryset, labels_to_relevance, chunk: int | Callable[[int], int] = 1 << 17,
                         batch_sessions: int = BATCH_SESSIONS, warn: bool = True):
    """(displayed lists, their click statistics, counts) of the training sessions of the click-log file ``path``,
    as ``click_training_data`` gives them, read ``batch_sessions`` sessions at a time (twice), and the held-out
    sessions (``HeldOut``: split vali/test, at most ``MAX_HELDOUT``; None without any) for the click perplexity.
    ``chunk``: sessions per jitted reduction, or a function of K (the positions) giving it."""
    lists, info = scan(path, queryset, batch_sessions, warn)
    n_lists, k = lists.shape[0], lists.shape[1] - 1
    chunk = int(chunk(k) if callable(chunk) else chunk)
    chunk = max(1, min(chunk, info["usable"]))
    ordered = _rows(lists)
    stats, clicks, held = empty_stats(n_lists, k), 0, []
    for part, q, rows, _ in _batches(path, queryset, batch_sessions):
        held.append(_held_out(part, q, k, MAX_HELDOUT - sum(len(h[0]) for h in held)))
        if not rows.size:
            continue
        keys = _pad(np.concatenate([q[rows, None], part.doc_ids[rows]], axis=1), k + 1, -1)
        list_of = np.searchsorted(ordered, _rows(keys))
        batch_clicks = _pad(part.clicks[rows], k, False)
        stats = reduce_into(stats, batch_clicks, list_of, chunk, n_lists)
        clicks += int(batch_clicks.sum())
    info.update(lists=int(n_lists), clicks=clicks, queries=int(len(np.unique(lists[:, 0]))))
    heldout = held_out_lists(held, queryset, k)
    info["sessions_held_out"] = heldout.n_sessions if heldout is not None else 0
    return logged_lists(lists, queryset, labels_to_relevance), jax.block_until_ready(stats), info, heldout


def _held_out(part, q, k: int, room: int):
    """(queryset rows, doc ids [n, k], clicks [n, k]) of the chunk's held-out sessions (split vali/test, a query of
    the dataset, no document shown twice), at most ``room``."""
    keep = np.flatnonzero((part.split != TRAIN) & (q >= 0) & ~repeated_documents(part.doc_ids))[:max(room, 0)]
    return q[keep], _pad(part.doc_ids[keep], k, -1), _pad(part.clicks[keep], k, False)


def held_out_lists(held, queryset, k: int) -> HeldOut | None:
    """The held-out sessions as ``HeldOut`` (features of the shown documents by rank), None when there are none."""
    q = np.concatenate([h[0] for h in held]) if held else np.zeros(0, np.int64)
    if not q.size:
        return None
    docs = np.concatenate([h[1] for h in held])[:, :k]
    mask = docs >= 0
    rows = np.where(mask, np.asarray(queryset.query_offsets, np.int64)[q][:, None] + docs, 0)
    features = np.where(mask[..., None], np.asarray(queryset.features)[rows], 0.0).astype(np.float32)
    return HeldOut(features=features, mask=mask, clicks=np.concatenate([h[2] for h in held])[:, :k] & mask)
