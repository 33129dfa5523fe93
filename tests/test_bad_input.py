"""Degenerate data and bad scoring input are refused before any work, with one paragraph naming the file or
split and the counts (issue 21, "Why" 5, 6, 7, 10). Most cases call the checks directly; one run of each
entry point shows the exit status 2 and the absence of a traceback end to end."""

import gzip
import logging
import pickle
import re
import subprocess
import sys

import numpy as np
import pytest

import ltrjax
from ltrjax.constraints import ConfigError
from ltrjax.data.errors import DataCheckError, DataFormatError
from ltrjax.data.letor import read_letor
from ltrjax.data.registry import load_dataset
from ltrjax.saved import save_model
from ltrjax import score
from tests.test_run import run_cli
from tests.tiny_run import REPO


def letor_lines(n_queries, docs=8, n_features=5, seed=0, labels=None, qid0=0):
    rng = np.random.default_rng(seed)
    lines = []
    for q in range(n_queries):
        for d in range(docs):
            label = int(rng.integers(0, 3)) if labels is None else labels
            pairs = " ".join(f"{k}:{rng.random():.4f}" for k in range(1, n_features + 1))
            lines.append(f"{label} qid:{qid0 + q} {pairs}")
    return "\n".join(lines) + "\n"


def folder(tmp_path, splits=None, **kw):
    """Fold1/{train,vali,test}.txt of 6 queries each (``splits``: per-split keyword overrides)."""
    root = tmp_path / "data"
    (root / "Fold1").mkdir(parents=True)
    for i, split in enumerate(("train", "vali", "test")):
        args = {"n_queries": 6, "seed": i, "qid0": 100 * i, **kw, **(splits or {}).get(split, {})}
        (root / "Fold1" / f"{split}.txt").write_text(letor_lines(**args))
    return root


def letor_cfg(root, **kw):
    return {"kind": "letor", "name": "tiny", "path": str(root), **kw}


# --------------------------------------------------------------------------- data checks (direct)
@pytest.mark.parametrize("split", ["train", "vali", "test"])
def test_a_split_without_a_relevant_document_is_refused(tmp_path, split):
    root = folder(tmp_path, {split: {"labels": 0}})
    with pytest.raises(DataCheckError) as info:
        load_dataset(letor_cfg(root), cache_dir=tmp_path / "cache")
    message = str(info.value)
    assert f"split {split}" in message and "\n" not in message
    if split == "test":  # test queries without a relevant document are purged: the split is left empty
        assert "split test has no query (6 read, 6 purged without a relevant document)" in message
    else:
        assert f"no relevant document (all 48 labels of its 6 queries are 0)" in message
        assert f"Fold1/{split}.txt" in message


def test_no_query_longer_than_min_docs_is_refused(tmp_path):
    root = folder(tmp_path, docs=5)
    with pytest.raises(DataCheckError, match=r"no query has more than dataset.min_docs = 5 documents \(all 18 "
                                             r"queries read were dropped; the longest has 5\); set dataset.min_docs=4"):
        load_dataset(letor_cfg(root), cache_dir=tmp_path / "cache")


def test_one_query_of_one_document_is_refused(tmp_path):
    path = tmp_path / "one.txt"
    path.write_text("1 qid:7 1:0.5 2:0.1\n")
    with pytest.raises(DataCheckError, match=r"split vali has no query \(0 read\).*1 queries in all"):
        load_dataset(letor_cfg(path, min_docs=0), cache_dir=tmp_path / "cache")


def test_too_few_queries_for_the_splits_is_refused():
    with pytest.raises(DataCheckError, match="dataset synthetic, split vali.*has no query.*dataset.n_queries"):
        ltrjax.load_dataset("synthetic", n_queries=1)


def test_an_empty_validation_split_is_refused(tmp_path):
    root = folder(tmp_path, {"vali": {"docs": 4}})  # every validation query has <= min_docs documents
    with pytest.raises(DataCheckError, match=r"split vali has no query \(6 read, 6 dropped with <= 5 documents\)"):
        load_dataset(letor_cfg(root), cache_dir=tmp_path / "cache")


@pytest.mark.parametrize("damage", ["truncated", "corrupt"])
def test_a_damaged_gzip_file_is_named(tmp_path, damage):
    data = gzip.compress(letor_lines(40).encode())
    data = data[: len(data) // 2] if damage == "truncated" else data[:12] + bytes(len(data) - 12)
    path = tmp_path / "train.txt.gz"
    path.write_bytes(data)
    with pytest.raises(DataCheckError) as info:
        read_letor(path, cache_dir=tmp_path / "cache")
    message = str(info.value)
    assert message.startswith(f"{path}: the gzip-compressed file ({len(data)} bytes) is truncated or corrupt")
    assert "gzip -t" in message and isinstance(info.value, DataFormatError)


@pytest.mark.parametrize("lines", [1, 300])  # the line-by-line parser, and the vectorised one's fallback
def test_a_value_beyond_float32_is_refused_with_its_line(tmp_path, lines):
    text = letor_lines(lines, docs=1).splitlines()
    text[-1] = re.sub(r" 2:[0-9.]+", " 2:1e39", text[-1])
    path = tmp_path / "big.txt"
    path.write_text("\n".join(text) + "\n")
    with pytest.raises(DataFormatError, match=rf"big.txt:{len(text)}: expected a value of feature 2 within float32 "
                                              r"range .*got '1e39'"):
        read_letor(path, use_cache=False)
    text[-1] = text[-1].replace("1e39", "3e38")  # within range: read as is
    path.write_text("\n".join(text) + "\n")
    assert read_letor(path, use_cache=False).features[-1, 1] == np.float32(3e38)


def test_sim_top_k_above_the_longest_list_is_refused():
    from ltrjax.data.checks import check_list_width

    check_list_width(10, 10, "tiny")
    with pytest.raises(ConfigError, match="sim.top_k = 11: expected at most 10, the most documents of any query of "
                                          "dataset tiny"):
        check_list_width(10, 11, "tiny")


def test_buckets_are_at_least_top_k_wide():
    from ltrjax.data.layout import pad_and_bucket
    from ltrjax.data.toy import toy_queryset

    qs = toy_queryset(n_queries=80, docs=(6, 60), seed=0)
    narrow = pad_and_bucket(qs, 4, single_bucket_cells=0)
    narrowest = min(b.width for b in narrow.buckets)
    assert len(narrow.buckets) > 1 and narrowest < max(qs.docs_per_query)
    wide = pad_and_bucket(qs, 4, single_bucket_cells=0, min_width=narrowest + 1)
    assert min(b.width for b in wide.buckets) >= narrowest + 1 and wide.n_queries == qs.n_queries
    np.testing.assert_array_equal(sorted(np.concatenate([np.asarray(b.query_index) for b in wide.buckets])),
                                  np.arange(qs.n_queries))


def test_dropped_and_merged_queries_and_constant_features_are_logged_and_recorded(tmp_path, caplog):
    root = folder(tmp_path, {"train": {"docs": 8}, "vali": {"docs": 9}})
    train = root / "Fold1" / "train.txt"
    lines = train.read_text().splitlines()
    lines = lines[8:16] + lines[:4] + lines[16:] + lines[4:8]  # query 0's lines in two blocks
    lines += [re.sub(r"qid:\d+", "qid:900", line) for line in lines[:3]]  # a query of 3 documents: dropped
    train.write_text("\n".join(re.sub(r" 5:[0-9.]+", " 5:1.0", line) for line in lines) + "\n")  # 5 constant
    with caplog.at_level(logging.WARNING, logger="ltrjax"):
        qs = load_dataset(letor_cfg(root), cache_dir=tmp_path / "cache")
    report = qs.preprocess_report
    assert report.queries_merged == 1 and report.queries_dropped_min_docs == {"train": 1, "vali": 0, "test": 0}
    assert report.features_dropped_constant == (5,) and report.queries_read["train"] == 7
    assert report.as_dict()["features_dropped_constant"] == [5] and qs.info["queries_merged"] == 1
    warning = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warning) == 1, warning
    assert len(list((tmp_path / "cache" / "letor").glob("*.npz"))) == 3  # the merged count survives the cache
    assert load_dataset(letor_cfg(root), cache_dir=tmp_path / "cache").preprocess_report == report
    for part in ("dataset tiny", "dropped 1 of 19 queries with <= 5 documents (dataset.min_docs; train 1)",
                 "merged the lines of 1 queries", "dropped 1 of 5 features as constant", "ids 5"):
        assert part in warning[0], part


def test_data_errors_survive_pickling():  # (multirun workers send them across processes)
    err = DataCheckError("dataset x, split vali", "split vali has no query", "use more")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is DataCheckError and str(back) == str(err)


def test_a_shipped_name_with_a_bad_override_is_a_config_error():
    with pytest.raises(ConfigError, match="dataset.min_doc = 3: dataset mq2008 has no key 'min_doc'; did you mean "
                                          "min_docs"):
        ltrjax.load_dataset("mq2008", min_doc=3)
    with pytest.raises(ConfigError, match="dataset = 'mq2009': expected a shipped dataset name"):
        ltrjax.load_dataset("mq2009")


# --------------------------------------------------------------------------- the entry point end to end
def test_cli_all_zero_labels_exit_2_before_any_simulation(tmp_path):
    root = folder(tmp_path, {"vali": {"labels": 0}})
    proc = run_cli(tmp_path, "+dataset=letor", f"dataset.path={root}", "trials=1")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert "split vali has no relevant document (all 48 labels of its 6 queries are 0)" in proc.stderr
    assert not (tmp_path / "out" / "results.json").exists()


def test_cli_top_k_above_the_longest_list_exit_2(tmp_path):
    root = folder(tmp_path)
    proc = run_cli(tmp_path, "+dataset=letor", f"dataset.path={root}", "trials=1", "sim.top_k=9",
                   "click_model=ebrank_pbm")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert "sim.top_k = 9: expected at most 8, the most documents of any query of dataset letor" in proc.stderr


# --------------------------------------------------------------------------- python -m ltrjax.score
BM25_META = {"kind": "online", "algorithm": "bm25", "key": "bm25", "trial": 0, "seed": 0,
             "config": {"_target_": "ltrjax.online.policies.bm25.BM25"}, "chosen": {},
             "features": {"feature_ids": [1, 2, 3, 4, 5], "n_features": 5, "normalize": "query_minmax",
                          "bm25_feature": 3, "y_max": 2, "dataset": "tiny"}}


@pytest.fixture
def bm25_model(tmp_path):
    return save_model(tmp_path / "models" / "bm25" / "trial0.msgpack", BM25_META, ())


def score_main(capsys, *argv):
    status = score.main([str(a) for a in argv])
    out = capsys.readouterr()
    return status, out.out, out.err


def test_score_refuses_a_file_with_other_features(tmp_path, bm25_model, capsys):
    wide = tmp_path / "wide.txt"
    wide.write_text(letor_lines(3, n_features=46))
    narrow = tmp_path / "narrow.txt"
    narrow.write_text(letor_lines(3, n_features=4))
    status, out, err = score_main(capsys, bm25_model, wide)
    assert status == 2 and out == "" and "Traceback" not in err
    assert "wide.txt has 46 features, but the model was trained on files with 5 features" in err
    assert "--allow-feature-mismatch" in err
    status, out, err = score_main(capsys, bm25_model, narrow)
    assert status == 2 and "narrow.txt has 4 features, but the model was trained on files with 5 features" in err
    assert "reads 1 feature ids the file does not have (5)" in err
    status, out, err = score_main(capsys, bm25_model, wide, "--allow-feature-mismatch")
    assert status == 0 and len(out.splitlines()) == 24
    status, out, err = score_main(capsys, bm25_model, narrow, "--allow-feature-mismatch")
    assert status == 0 and len(out.splitlines()) == 24
    sparse = tmp_path / "sparse.txt"  # trailing feature 5 left out, and the model does not read it
    sparse.write_text(letor_lines(3, n_features=4))
    save_model(tmp_path / "four.msgpack", {**BM25_META, "features": {**BM25_META["features"],
                                                                     "feature_ids": [1, 2, 3, 4]}}, ())
    status, out, err = score_main(capsys, tmp_path / "four.msgpack", sparse)
    assert status == 0 and len(out.splitlines()) == 24, err


def test_score_matching_file_and_missing_output_folder(tmp_path, bm25_model, capsys):
    path = tmp_path / "same.txt"
    path.write_text(letor_lines(3, n_features=5))
    status, out, err = score_main(capsys, bm25_model, path)
    assert status == 0 and len(out.splitlines()) == 24
    status, out, err = score_main(capsys, bm25_model, path, "--out", tmp_path / "missing" / "x.run")
    assert status == 2 and "Traceback" not in err
    assert f"cannot write {tmp_path / 'missing' / 'x.run'}: the folder {tmp_path / 'missing'} does not exist" in err


def test_score_refuses_a_model_that_cannot_rank_cold_documents(tmp_path, capsys):
    meta = {**BM25_META, "algorithm": "ebrank_only_behav", "key": "ebrank_only_behav",
            "config": {"_target_": "ltrjax.online.policies.ebrank.EBRankOnlyBehaviour", "statistic": "exposure"}}
    model = save_model(tmp_path / "only_behav.msgpack", meta, ())
    path = tmp_path / "same.txt"
    path.write_text(letor_lines(3, n_features=5))
    status, out, err = score_main(capsys, model, path)
    assert status == 2 and out == ""
    assert "model ebrank_only_behav (EBRankOnlyBehaviour) scores every document of all 3 queries" in err
    assert "cannot rank cold documents" in err


def test_score_into_a_closed_pipe_ends_quietly(tmp_path, bm25_model):
    path = tmp_path / "many.txt"
    path.write_text(letor_lines(400, docs=10, n_features=5))  # ~4,000 run lines: more than a pipe buffer
    cmd = (f"{sys.executable} -m ltrjax.score {bm25_model} {path} --cache-dir {tmp_path / 'cache'} "
           f"2>{tmp_path / 'err.txt'} | head -n 2")
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env={"PATH": "/usr/bin:/bin", "JAX_PLATFORMS": "cpu",
                                            "PYTHONPATH": str(REPO)})
    assert len(proc.stdout.splitlines()) == 2
    err = (tmp_path / "err.txt").read_text()
    assert "Traceback" not in err and "Error" not in err, err
    assert proc.returncode == 0
