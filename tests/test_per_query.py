"""Per-query results of offline runs (issue 42, item 3): per_query.parquet holds a row per (query_id, trial,
estimator, metric) whose means are results.json's figures, and results.json / results.md name every metric's
ir_measures string."""

import json

import numpy as np
import pyarrow.parquet as pq

from ltrjax.schema import offline_run
from ltrjax.data.toy import toy_queryset
from ltrjax.offline.experiment import METRICS
from ltrjax.offline_runner import run_offline


def test_per_query_parquet_holds_the_means_of_results_json(tmp_path):
    qs = toy_queryset(n_queries=60, seed=3)
    cfg = {"experiment": {"trials": 2, "n_sessions": 5_000, "progress": False, "estimators": ["naive", "production"],
                          "train": {"max_epochs": 2, "patience": 1}, "eval_buckets": 1, "save_models": False}}
    results = run_offline(offline_run(cfg), tmp_path, queryset=qs)
    table = pq.read_table(tmp_path / "per_query.parquet")
    assert table.schema.names == ["query_id", "trial", "estimator", "metric", "value"]
    rows = {n: np.asarray(table.column(n).to_pylist()) for n in table.schema.names}
    assert set(rows["trial"]) == {0, 1} and set(rows["estimator"]) == {"naive", "production"}
    assert set(rows["query_id"]) <= set(int(q) for q in qs.qids[qs.split == 2])
    for name in ("naive", "production"):
        for t in (0, 1):
            trial = results["algorithms"][name]["trials"][t]
            for metric in METRICS:
                sel = (rows["estimator"] == name) & (rows["trial"] == t) & (rows["metric"] == metric)
                assert sel.sum() == trial["n_queries"]
                assert abs(rows["value"][sel].mean() - trial[metric]) < 1e-6, (name, t, metric)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["measures"]["ndcg@10"]["ir_measures"] == "nDCG(dcg='exp-log2')@10"
    assert saved["measures"]["mrr@10"]["ir_measures"] == "RR@10" and saved["measures"]["dcg@3"]["ir_measures"] is None
    md = (tmp_path / "results.md").read_text()
    assert "- `err@10`: `ERR@10`" in md and "- `map`: `AP`" in md
    # a resumed run with a third trial keeps the rows of the first two
    cfg["experiment"]["trials"] = 3
    run_offline(offline_run(cfg), tmp_path, queryset=qs)
    assert set(pq.read_table(tmp_path / "per_query.parquet").column("trial").to_pylist()) == {0, 1, 2}
