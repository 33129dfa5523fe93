"""What an online run measures of a finished trial beside its metrics: the click rates of perfect documents by
entry time (UCBRank Fig. 1), the exploitation ratios of linear models (EBRank Table 4) and the paired units of the
significance tests. They read the simulator's final states; ``ltrjax.report`` reads only what they return (stored in
results.json and ``arrays/``)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from ltrjax.data.queryset import TEST
from ltrjax.online.simulator import Simulator, TrialResult
from ltrjax.record import writing
from ltrjax.report import analysis


def peak_rss_bytes() -> int | None:
    """This process's peak resident memory so far, in bytes (``getrusage``'s ``ru_maxrss``: KiB on Linux, bytes on
    macOS); None where there is no ``resource`` module (Windows)."""
    try:
        import resource
    except ImportError:
        return None
    peak = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return peak if sys.platform == "darwin" else peak * 1024


def memory_record(queryset) -> dict:
    """What a run's results.json says of its memory: ``peak_rss_bytes`` (the process's peak resident memory at the
    end of the run, data loading and compilation included), ``feature_bytes`` (the dataset's feature matrix as
    float32, documents x features x 4, every split) and ``peak_rss_over_feature_bytes`` (issue 22 asks <= 3 at
    MSLR-30K shape). ``feature_bytes`` and the ratio are None without a query set."""
    peak = peak_rss_bytes()
    features = int(queryset.n_docs) * int(queryset.n_features) * 4 if queryset is not None else None
    return {"peak_rss_bytes": peak, "feature_bytes": features,
            "peak_rss_over_feature_bytes": peak / features if features and peak is not None else None}


def perfect_click_rates(sim: Simulator, result: TrialResult, n_bins: int) -> dict:
    """Click rate of perfect documents (label = y_max) by entry time (UCBRank Fig. 1), all splits."""
    docs = result.perfect_docs  # the perfect documents' final state (``simulator.perfect_documents``)
    clicks, entry, doc_query, entered = docs.clicks, docs.entry_session, docs.doc_query, docs.entered
    perfect = np.ones(clicks.shape, bool)
    warm_queries = np.asarray(result.warmup_query, np.int64)
    session_query = np.concatenate([warm_queries, np.asarray(result.session_query, np.int64)])
    n_warm = warm_queries.size
    candidates = analysis.candidate_sessions(session_query, entry, doc_query, entered=entered)
    return analysis.click_rate_by_entry(clicks, candidates, entry, perfect, first_main_session=n_warm,
                                        n_main_sessions=len(result.session_query), n_bins=n_bins, entered=entered)


def exploitation_ratios(policy, params) -> dict | None:
    """{"behaviour": |w_b| / sum |w|, "max_nonbehaviour": max_j |w_j| / sum |w|} of a linear model that
    sees the behaviour feature last (EBRank Table 4, Eq. 29), else None."""
    weights_of = getattr(policy, "linear_weights", None)
    weights = weights_of(params) if weights_of is not None else None
    if weights is None:
        return None
    ratios = analysis.exploitation_ratios(np.asarray(weights, np.float64), behaviour_index=-1)
    return {k: float(v) for k, v in ratios.items()}


def save_units(path: Path, sim: Simulator, result: TrialResult) -> None:
    """The paired units of the significance tests of one trial."""
    test_queries = np.flatnonzero(sim.data.split_of_query == TEST)
    tmp = path.with_name(path.stem + ".tmp.npz")
    with writing(path, tmp):  # a failed write: WriteError naming the file, no temporary file left
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(tmp, query=test_queries, query_warm=result.query_ndcg["warm"][test_queries],
                            query_cold=result.query_ndcg["cold"][test_queries],
                            session_ndcg=result.session_ndcg[result.session_split == TEST])
        tmp.replace(path)
