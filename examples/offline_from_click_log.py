"""Train every offline (counterfactual) estimator from a click-log file, with the Python API.

Without ``--click-log`` the example first makes one, the way you would convert your own system's log:
a deterministic production ranking (one feature) shows the top 10 of each training query, a
position-biased user (examination 1/k, noisy binary relevance) clicks, and the sessions go into a
``ClickLog`` (query id, shown document ids by position, clicks, split, time) written as Parquet
(docs/click-logs.md). Then ``ltrjax.train_offline`` trains the estimators from that file and
evaluates them on the dataset's test queries.

    python examples/offline_from_click_log.py                       # synthetic data, simulated log
    python examples/offline_from_click_log.py --letor /data/MQ2008/Fold1 --click-log my_log.parquet
    python examples/offline_from_click_log.py --smoke --json        # tiny, for the test suite
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

import ltrjax
from ltrjax.compile_cache import ensure_compilation_cache


def simulated_click_log(queryset, n_sessions: int, k: int = 10, ranking_feature: int = 0,
                        noise: float = 0.1, seed: int = 0) -> ltrjax.ClickLog:
    """Sessions of a production ranker and a position-biased user, in the click-log schema."""
    rng = np.random.default_rng(seed)
    train = queryset.split_queries("train")
    offsets = queryset.query_offsets
    doc_ids = np.full((len(train), k), -1, np.int32)  # the production top-k of every training query
    for row, q in enumerate(train):
        scores = queryset.features[offsets[q]:offsets[q + 1], ranking_feature]
        top = np.argsort(-scores, kind="stable")[:k]
        doc_ids[row, :len(top)] = top
    which = rng.integers(0, len(train), n_sessions)
    shown = doc_ids[which]
    labels = np.where(shown >= 0, queryset.labels[offsets[train[which]][:, None] + np.maximum(shown, 0)], 0)
    relevant = labels >= (1 if queryset.y_max <= 2 else 3)
    click_prob = np.where(relevant, 1 - noise, noise) / np.arange(1, k + 1)  # examination (1/k)^1
    clicks = (rng.random(shown.shape) < click_prob) & (shown >= 0)
    session = np.arange(n_sessions, dtype=np.int64)
    return ltrjax.ClickLog(session_id=session, time=session, query_id=queryset.qids[train[which]], doc_ids=shown,
                           clicks=clicks, split=np.zeros(n_sessions, np.int8))


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--letor", help="a LETOR folder or file with the features (default: synthetic data)")
    parser.add_argument("--click-log", help="a Parquet click log (default: simulate one)")
    parser.add_argument("--sessions", type=int, default=200_000, help="sessions of the simulated log")
    parser.add_argument("--out", help="output folder (results.json, results.md, models/); default: temporary")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (the test suite runs this)")
    parser.add_argument("--json", action="store_true", help="print the results as one JSON line")
    args = parser.parse_args(argv)
    ensure_compilation_cache()  # compiled programs persist: a second run compiles nothing (docs/python-api.md)
    dataset = ({"kind": "letor", "name": Path(args.letor).name, "path": args.letor} if args.letor else
               {"kind": "synthetic", "name": "synthetic", "preset": "synthetic", "n_queries": 120 if args.smoke else 500})
    queryset = ltrjax.load_dataset({**dataset, "min_docs": 0}, seed=0)
    estimators = ("naive", "ips", "prs", "labeled") if args.smoke else ltrjax.ALL_ESTIMATORS
    settings = ltrjax.OfflineSettings(
        estimators=tuple(e for e in estimators if e != "production"),  # the log replaces the production ranker
        click_model={"kind": "pbm", "examination": "inverse", "eta": 1.0, "relevance": "binary", "noise": 0.1},
        train=ltrjax.TrainConfig(max_epochs=5 if args.smoke else 300, patience=30), eval_buckets=2)
    with tempfile.TemporaryDirectory() as tmp:
        path = args.click_log
        if path is None:
            path = Path(args.out or tmp) / "click_log.parquet"
            log = simulated_click_log(queryset, 20_000 if args.smoke else args.sessions)
            ltrjax.write_click_log(path, log, {"source": "examples/offline_from_click_log.py"})
            print(f"wrote {log.n_sessions} sessions ({int(log.clicks.sum())} clicks) to {path}")
        results = ltrjax.train_offline(queryset, path, settings=settings, out_dir=args.out)
    used = results["trials_info"][0]["click_log"]
    summary = {"dataset": results["dataset"], "click_log": used,
               "estimators": {name: {m: entry[m] for m in ("ndcg@5", "ndcg@10", "map")}
                              for name, entry in results["algorithms"].items()}}
    if args.json:
        print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
