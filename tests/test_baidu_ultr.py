"""``+dataset=baidu_ultr`` on generated Feather files (issue 42, item 1): 3 click parts, one annotation file, several
``query_no`` per ``query_id``; the reader finds the expected sessions, documents, features and splits, every
registered estimator trains from it, bad files exit 2 naming the file and column, and the entry point writes
results.md with DCG/MRR per frequency bucket and a per-query Parquet."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pytest

from ltrjax.schema import offline_run
from ltrjax.clicklog import read_click_log
from ltrjax.data.baidu_ultr import FEATURES, read_baidu_ultr
from ltrjax.data.errors import DataCheckError, DatasetNotFoundError
from ltrjax.data.registry import dataset_config, load_dataset
from ltrjax.offline.estimators import ALL_ESTIMATORS
from ltrjax.offline_runner import run_offline
from tests import baidu_fake
from tests.test_run import run_cli


def settings(root, **kw):
    return dataset_config({"kind": "baidu_ultr", "name": "baidu_ultr", "path": str(root),
                           "path_env": "LTRJAX_BAIDU_ULTR", **kw})


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    root = tmp_path_factory.mktemp("baidu")
    truth = baidu_fake.write(root)
    qs = read_baidu_ultr(settings(root), seed=0, cache_dir=root / "cache")
    return root, truth, qs


def test_sessions_documents_features_and_splits(generated):
    root, truth, qs = generated
    pages = truth["pages"]
    train = np.flatnonzero(qs.split == 0)
    assert len(train) == len({q for _, q, _, _ in pages}) == 10
    assert len({q for _, q, _, _ in pages}) < len(pages)  # several query_no per query_id
    log = read_click_log(qs.info["click_log"])
    assert log.n_sessions == len(pages) == 120 and qs.info["sessions"] == 120
    offsets = qs.query_offsets
    first_seen = {}  # (query, url) -> index within the query, in order of first appearance
    query_of_md5 = {}
    for qno, q, urls, clicks in pages:
        query_of_md5.setdefault(q, len(query_of_md5))
        for u in urls:
            first_seen.setdefault((q, u), sum(1 for key in first_seen if key[0] == q))
    for row, (qno, q, urls, clicks) in enumerate(pages):
        assert log.session_id[row] == qno and log.query_id[row] == query_of_md5[q]
        assert log.doc_ids[row].tolist() == [first_seen[(q, u)] for u in urls]
        assert log.clicks[row].tolist() == clicks
    for (q, u), d in first_seen.items():  # one feature row per (query_md5, url_md5): the generator's
        np.testing.assert_array_equal(qs.features[offsets[query_of_md5[q]] + d], truth["features"][q, u])
    assert (qs.labels[: offsets[len(train)]] == 0).all() and qs.info["unlabelled_train"]
    # annotations: a query per query_no, its labels and features; vali/test drawn within each frequency bucket
    a_q = np.flatnonzero(qs.split > 0)
    assert len(a_q) == 30 and qs.labels[offsets[a_q[0]]:].tolist() == truth["a_labels"].tolist()
    np.testing.assert_array_equal(qs.features[offsets[a_q[0]]:], truth["a_features"])
    buckets = qs.info["frequency_bucket"]
    for b in range(10):
        members = [q for q in a_q if buckets[int(qs.qids[q])] == b]
        assert sorted(qs.split[members].tolist()) == [1, 1, 2]  # round(0.5 x 3) vali, the rest test
    assert qs.feature_ids.size == len(FEATURES) == 12


def test_the_embedding_is_an_option(generated, tmp_path):
    root, truth, _ = generated
    qs = read_baidu_ultr(settings(root, embedding=True), seed=0, cache_dir=tmp_path)
    assert qs.n_features == 12 + 768
    a0 = int(qs.query_offsets[np.flatnonzero(qs.split > 0)[0]])
    np.testing.assert_array_equal(qs.features[a0:, 12:], truth["a_embedding"].astype(np.float32))


def test_bad_files_name_the_file_and_column(generated, tmp_path):
    root, _, _ = generated
    bad = tmp_path / "bad"
    (bad / "parts").mkdir(parents=True)
    table = feather.read_table(root / "parts" / "part-0_split-0.feather")
    feather.write_feather(table.drop(["url_md5"]), bad / "parts" / "part-0_split-0.feather")
    with pytest.raises(DatasetNotFoundError, match="the annotation file .*validation.feather is missing"):
        read_baidu_ultr(settings(bad), seed=0, cache_dir=tmp_path)
    feather.write_feather(feather.read_table(root / "parts" / "validation.feather"), bad / "parts" /
                          "validation.feather")
    with pytest.raises(DataCheckError, match=r"part-0_split-0.feather: column 'url_md5' is missing"):
        read_baidu_ultr(settings(bad), seed=0, cache_dir=tmp_path)
    table = table.set_column(table.schema.get_field_index("position"), "position",
                             pa.array(np.zeros(table.num_rows, np.int32)))
    feather.write_feather(table, bad / "parts" / "part-0_split-0.feather")
    with pytest.raises(DataCheckError, match=r"part-0_split-0.feather: column 'position' holds 0, expected values "
                                             r"in 1\.\.1000"):
        read_baidu_ultr(settings(bad), seed=0, cache_dir=tmp_path)
    (bad / "parts" / "part-0_split-0.feather").write_text("not arrow")
    with pytest.raises(DataCheckError, match="part-0_split-0.feather: not an Arrow Feather v2"):
        read_baidu_ultr(settings(bad), seed=0, cache_dir=tmp_path)
    with pytest.raises(DatasetNotFoundError, match=r"Dataset 'baidu_ultr' was not found: no path is configured.*"
                                                   r"LTRJAX_BAIDU_ULTR"):
        load_dataset("baidu_ultr")


def test_every_registered_estimator_trains_from_it(generated, tmp_path):
    root, _, _ = generated
    qs = load_dataset(settings(root, min_docs=0), cache_dir=tmp_path)
    cfg = {"experiment": {"trials": 1, "progress": False, "estimators": list(ALL_ESTIMATORS), "eval_buckets": 1,
                          "train": {"max_epochs": 2, "patience": 1}, "save_models": False}}
    results = run_offline(offline_run(cfg), tmp_path / "run", queryset=qs)
    info = results["trials_info"][0]["click_log"]
    assert info["sessions_train"] + info["sessions_test"] == 120 and 0 < info["sessions_held_out"] == \
        info["sessions_test"] < 30  # heldout_fraction 0.1 of the pages
    rank_ctr = results["trials_info"][0]["click_perplexity_rank_ctr"]
    em = results["algorithms"]["regression_em"]["trials"][0]["click_perplexity"]
    assert em["sessions"] == rank_ctr["sessions"] == [info["sessions_held_out"]] * 10
    assert all(p >= 1.0 for p in rank_ctr["perplexity"] + em["perplexity"])
    assert "click_perplexity" not in results["algorithms"]["dla"]["trials"][0]  # no click probability
    for name in ALL_ESTIMATORS:
        trial = results["algorithms"][name]["trials"][0]
        assert 0.0 < trial["ndcg@10"] <= 1.0 and trial["dcg@10"] > 0.0, name
    assert set(results["by_frequency_bucket"]["naive"]) == set(range(10))


def test_cli_writes_results_per_frequency_bucket(generated, tmp_path):
    root, _, _ = generated
    proc = run_cli(tmp_path, "experiment=offline", "+dataset=baidu_ultr", f"dataset.path={root}", "trials=1",
                   "experiment.estimators=[naive,regression_em]", "experiment.train.max_epochs=2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "out"
    md = (out / "results.md").read_text()
    assert "### Per frequency_bucket" in md and "| frequency_bucket | queries | dcg@1 | dcg@3 | dcg@5 | dcg@10 | " \
        "mrr@10 |" in md
    results = json.loads((out / "results.json").read_text())
    assert results["measures"]["mrr@10"]["ir_measures"] == "RR@10"
    assert "### Click perplexity per rank (held-out sessions)" in md and "| rank_ctr |" in md
    assert (out / "per_query.parquet").exists()


def test_reading_memory_benchmark_smoke(capsys):
    """benchmarks/read_memory.py --smoke: generated parts read in a child process; its peak resident memory above
    the imports is reported beside the stated budget (256 MiB + 400 B a document) and stays under it."""
    from tests.scripts import last_json, run_main

    returned, stdout = run_main("benchmarks/read_memory.py", ["--smoke", "--json"], capsys)
    out = last_json(stdout)
    assert out == returned
    assert out["files_bytes"] >= 20e6 and out["click_rows"] == 10 * out["sessions"] > 0
    assert out["budget"] == 256 * 2**20 + 400 * out["documents"]
    assert 0 < out["peak_rss_above_imports"] <= out["budget"] and out["under_budget"]


def test_an_online_experiment_on_baidu_ultr_is_refused(generated, tmp_path):
    """Online runs simulate clicks from every query's labels; Baidu-ULTR's training queries have none: exit 2, one
    paragraph naming the dataset, before any data is read."""
    root, _, _ = generated
    proc = run_cli(tmp_path, "+dataset=baidu_ultr", f"dataset.path={root}", "trials=1")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "baidu_ultr" in proc.stderr and "experiment=offline" in proc.stderr and "Traceback" not in proc.stderr
