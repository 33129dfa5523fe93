"""Gather per-document training examples from the simulator's counters (host side).

Models train on documents of training-split queries that were shown more than
``min_impressions`` times and early-stop on validation-split documents under the same filter
(EBRank §5.1, seed-code.md §1.3). Test-split interactions never reach training.
"""

from __future__ import annotations

import numpy as np

from ltrjax.data.layout import PaddedDataset
from ltrjax.data.queryset import TRAIN, VALI
from ltrjax.models.train import key_seed, subsample, subset_indices
from ltrjax.online.policies.base import MemberViews, member
from ltrjax.online.state import STAT_NAMES, DocCounters


def eligible_documents(data: PaddedDataset, counters: tuple[DocCounters, ...], entered, min_impressions: float
                       ) -> list[np.ndarray]:
    """Per bucket, bool ``[Qb, Db]``: the entered real documents shown more than ``min_impressions`` times (any
    split); ``split_cells`` then picks one split's."""
    return [np.asarray(ent) & np.asarray(bucket.doc_mask) & (np.asarray(c.impressions) > min_impressions)
            for bucket, c, ent in zip(data.buckets, counters, entered)]


def split_cells(data: PaddedDataset, eligible: list[np.ndarray], split: int, limit: int | None = None, seed=None
                ) -> list[np.ndarray]:
    """Per bucket, the flat (row-major) indices of the ``eligible`` cells of ``split`` queries; with ``limit``, at
    most that many of them in all (``subset_indices`` of their row-major concatenation, bucket after bucket)."""
    cells = [np.flatnonzero(ok & (np.asarray(bucket.split) == split)[:, None])
             for bucket, ok in zip(data.buckets, eligible)]
    picked = subset_indices(sum(c.size for c in cells), limit, seed)
    if picked is not None:
        offsets = np.cumsum([0] + [c.size for c in cells])
        cells = [c[picked[np.searchsorted(picked, lo):np.searchsorted(picked, hi)] - lo]
                 for c, lo, hi in zip(cells, offsets[:-1], offsets[1:])]
    return cells


def gather_documents(data: PaddedDataset, counters: tuple[DocCounters, ...], cells: list[np.ndarray]
                     ) -> dict[str, np.ndarray]:
    """The documents at ``cells`` (``split_cells``): their ids (``doc``) and the counters that are not None."""
    names = [name for name in STAT_NAMES if getattr(counters[0], name) is not None]
    parts: dict[str, list[np.ndarray]] = {}
    for bucket, start, c, at in zip(data.buckets, data.document_starts, counters, cells):
        if not at.size:
            continue
        parts.setdefault("doc", []).append((start + np.asarray(bucket.doc_row).reshape(-1)[at]).astype(np.int32))
        for name in names:  # a retrain brings only the counters its policy reads
            parts.setdefault(name, []).append(np.asarray(getattr(c, name)).reshape(-1)[at])
    if not parts:
        return {"doc": np.zeros((0,), np.int32), **{k: np.zeros((0,), np.float32) for k in names}}
    return {k: np.concatenate(v) for k, v in parts.items()}


def collect_documents(data: PaddedDataset, counters: tuple[DocCounters, ...], entered, split: int,
                      min_impressions: float, limit: int | None = None, seed=None) -> dict[str, np.ndarray]:
    """Document ids (``doc``: rows of ``data.document_table()``; a fit gathers their features on the device) and
    counters of entered documents of ``split`` queries with n > min_impressions (the counters that are not None in
    ``counters``), bucket by bucket in row-major order. No feature is copied: at MSLR-30K shape a member's capped
    examples were 2 x 36 MB of features, held on the host and again stacked for the device.

    With ``limit``, at most that many of them (``subset_indices``, as ``ltrjax.models.train.subsample``
    chooses them from the full collection).
    """
    eligible = eligible_documents(data, counters, entered, min_impressions)
    return gather_documents(data, counters, split_cells(data, eligible, split, limit, seed))


def member_splits(data: PaddedDataset, counters: tuple[DocCounters, ...], entered, n_members: int,
                  min_impressions: float, keys=None, limit: int | None = None) -> list[tuple[dict, dict]]:
    """Per member of a population (``counters``/``entered`` with a leading member axis, or the simulator's
    ``MemberViews``, read with ``member``): its (training,
    validation) documents, as ``collect_documents`` gathers them. With ``limit``, at most that many per
    split, the subset ``fit_members`` would draw with member ``keys`` (so the counters of documents it
    would drop are never gathered). Counters that carry ``documents`` (``MemberViews`` of a retrain with
    ``sim.retrain_examples=device``) give the eligible documents filtered on the device: the same arrays."""
    documents = counters.documents if isinstance(counters, MemberViews) else None
    out = []
    for i in range(n_members):
        seed = key_seed(keys[i]) if limit is not None else []
        if documents is not None:  # subset_indices of the same count and seed: split_cells' subset
            out.append(tuple(subsample(docs, limit, seed + [j])
                             for j, docs in enumerate(documents(i, min_impressions))))
            continue
        counts = member(counters, i)
        eligible = eligible_documents(data, counts, member(entered, i), min_impressions)  # once for both splits
        out.append(tuple(gather_documents(data, counts, split_cells(data, eligible, split, limit, seed + [j]))
                         for j, split in enumerate((TRAIN, VALI))))
    return out


def split_capacity(data: PaddedDataset, split: int) -> int:
    """Number of documents of ``split`` queries: the most examples a retrain can ever see (a fixed
    padded size, so training compiles once per run)."""
    return int(sum(int(np.sum(np.asarray(b.n_docs)[np.asarray(b.split) == split])) for b in data.buckets))
