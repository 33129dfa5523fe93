"""Gather per-document training examples from the simulator's counters (host side).

Models train on documents of training-split queries that were shown more than
``min_impressions`` times and early-stop on validation-split documents under the same filter
(EBRank §5.1, seed-code.md §1.3). Test-split interactions never reach training.
"""

from __future__ import annotations

import numpy as np

from ltrjax.data.layout import PaddedDataset
from ltrjax.data.queryset import TRAIN, VALI
from ltrjax.models.train import key_seed, subset_indices
from ltrjax.online.policies.base import member
from ltrjax.online.state import STAT_NAMES, DocCounters


def collect_documents(data: PaddedDataset, counters: tuple[DocCounters, ...], entered, split: int,
                      min_impressions: float, limit: int | None = None, seed=None) -> dict[str, np.ndarray]:
    """Document ids (``doc``: rows of ``data.document_table()``; a fit gathers their features on the device) and
    counters of entered documents of ``split`` queries with n > min_impressions (the counters that are not None in
    ``counters``). No feature is copied: at MSLR-30K shape a member's capped examples were 2 x 36 MB of features,
    held on the host and again stacked for the device.

    With ``limit``, at most that many of them (``subset_indices``, as ``ltrjax.models.train.subsample``
    chooses them from the full collection).
    """
    keeps = []
    for bucket, c, ent in zip(data.buckets, counters, entered):
        impressions = np.asarray(c.impressions)
        keep = (np.asarray(bucket.split)[:, None] == split) & np.asarray(ent) & (impressions > min_impressions)
        keeps.append(keep & np.asarray(bucket.doc_mask))
    counts = [int(k.sum()) for k in keeps]
    picked = subset_indices(sum(counts), limit, seed)
    if picked is not None:
        chosen = np.zeros(sum(counts), bool)
        chosen[picked] = True
        offsets = np.cumsum([0] + counts)
        for b, keep in enumerate(keeps):
            keep[keep] = chosen[offsets[b]:offsets[b + 1]]  # row-major order, as the concatenation below
    parts: dict[str, list[np.ndarray]] = {}
    for bucket, start, c, keep in zip(data.buckets, data.document_starts, counters, keeps):
        if not keep.any():
            continue
        parts.setdefault("doc", []).append((start + np.asarray(bucket.doc_row)[keep]).astype(np.int32))
        for name in STAT_NAMES:
            if getattr(c, name) is not None:  # a retrain brings only the counters its policy reads
                parts.setdefault(name, []).append(np.asarray(getattr(c, name))[keep])
    if not parts:
        return {"doc": np.zeros((0,), np.int32),
                **{k: np.zeros((0,), np.float32) for k in STAT_NAMES if getattr(counters[0], k) is not None}}
    return {k: np.concatenate(v) for k, v in parts.items()}


def member_splits(data: PaddedDataset, counters: tuple[DocCounters, ...], entered, n_members: int,
                  min_impressions: float, keys=None, limit: int | None = None) -> list[tuple[dict, dict]]:
    """Per member of a population (``counters``/``entered`` with a leading member axis, or the simulator's
    ``MemberViews``, read with ``member``): its (training,
    validation) documents, as ``collect_documents`` gathers them. With ``limit``, at most that many per
    split, the subset ``fit_members`` would draw with member ``keys`` (so the counters of documents it
    would drop are never gathered)."""
    seeds = [key_seed(keys[i]) if limit is not None else [] for i in range(n_members)]
    return [tuple(collect_documents(data, member(counters, i), member(entered, i), split, min_impressions,
                                    limit, seeds[i] + [split_index])
                  for split_index, split in enumerate((TRAIN, VALI))) for i in range(n_members)]


def split_capacity(data: PaddedDataset, split: int) -> int:
    """Number of documents of ``split`` queries: the most examples a retrain can ever see (a fixed
    padded size, so training compiles once per run)."""
    return int(sum(int(np.sum(np.asarray(b.n_docs)[np.asarray(b.split) == split])) for b in data.buckets))
