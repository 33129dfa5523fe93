"""What a trial measured: ``TrialResult`` (host arrays), its perfect documents' final state (``PerfectDocs``) and
the session logs of consecutive segments joined (``concat_logs``)."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import numpy as np

from ltrjax.data.layout import PaddedDataset
from ltrjax.online.policies.base import SessionLog
from ltrjax.online.state import BucketState


class PerfectDocs(NamedTuple):
    """A trial's final state of its perfect documents (label = y_max; real documents of every bucket, in bucket
    order and row-major dataset order): what ``ltrjax.measure.perfect_click_rates`` reads (UCBRank Fig. 1). A few
    percent of the documents, so a run keeps it for every member instead of the whole final state."""

    doc_query: np.ndarray  # i32 global query of each document
    clicks: np.ndarray  # f32 raw clicks
    entry_session: np.ndarray  # i32 global session index at which it entered (-1: initial)
    entered: np.ndarray  # bool whether it has entered


def perfect_documents(data: PaddedDataset, states) -> PerfectDocs:
    """``PerfectDocs`` of one member's final ``states`` (per bucket, host or device arrays): the counters and entry
    sessions put back into dataset order (``state.to_dataset_order``, here a NumPy gather) at the perfect documents."""
    parts = []
    for bucket, state in zip(data.buckets, states):
        perfect = np.asarray(bucket.doc_mask) & (np.asarray(bucket.labels) == data.y_max)
        rank = np.asarray(state.rank)[:-1]

        def at_perfect(entry_order, rank=rank, perfect=perfect):
            return np.take_along_axis(np.asarray(entry_order)[:-1], rank, axis=1)[perfect]

        entered = np.arange(rank.shape[1])[None, :] < np.asarray(state.n_entered)[:, None]
        parts.append(PerfectDocs(
            doc_query=np.broadcast_to(np.asarray(bucket.query_index)[:, None], perfect.shape)[perfect],
            clicks=at_perfect(state.counters.clicks), entry_session=at_perfect(state.entry_session),
            entered=at_perfect(entered)))
    return PerfectDocs(*(np.concatenate(leaves) for leaves in zip(*parts)))


@dataclasses.dataclass
class TrialResult:
    """Everything a trial measured (host arrays)."""

    session_ndcg: np.ndarray  # f32 [n_main] NDCG@K of the shown list of every main session
    session_split: np.ndarray  # i8 [n_main]
    session_query: np.ndarray  # i32 [n_main]
    eval_points: np.ndarray  # i64 [n_updates] session index of each evaluation
    eval_history: list[dict]  # per evaluation point: {split: {"warm": x, "cold": y}}
    cum_ndcg: dict[str, float]  # per split
    train_info: list[dict]
    timings: dict[str, float]
    final_states: tuple[BucketState, ...] | None = None  # None when the run did not keep them (``keep_states``)
    perfect_docs: PerfectDocs | None = None
    logs: list[SessionLog] | None = None
    query_ndcg: dict[str, np.ndarray] | None = None  # final per-query "warm"/"cold" NDCG@K [n_queries]
    warmup_query: np.ndarray | None = None  # i32 [n_warm] query of every warm-up session
    final_params: object = None
    hyper: object = None  # the member's typed hyper-parameters

    @property
    def warm_ndcg(self) -> float:
        return float(self.eval_history[-1]["test"]["warm"])

    @property
    def cold_ndcg(self) -> float:
        return float(self.eval_history[-1]["test"]["cold"])


def concat_logs(logs: list[SessionLog]) -> SessionLog:
    """One log of consecutive segments (records concatenated leaf by leaf)."""
    if len(logs) == 1:
        return logs[0]
    records = [log.record for log in logs]
    record = None if records[0] is None else jax.tree_util.tree_map(lambda *r: np.concatenate(r), *records)
    return SessionLog(*(np.concatenate([getattr(log, f) for log in logs]) for f in ("query", "shown", "clicks",
                                                                                     "session")), record=record)
