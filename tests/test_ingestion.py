"""Ingestion that tells the truth (issue 42, item 5): each defect a hostile test found, reproduced at a tiny size.
What cannot be trained on is refused with one paragraph naming the file and the counts (exit status 2 from
``python -m ltrjax.run``, no traceback); what a real log or file legitimately contains is accepted with a WARNING
and a count that results.json keeps."""

import logging

import numpy as np
import pytest

from ltrjax.schema import offline_run
from ltrjax.clicklog import ClickLog, ClickLogError, write_click_log
from ltrjax.data.errors import DataCheckError
from ltrjax.data.letor import parse_letor_bytes, read_letor
from ltrjax.data.registry import load_dataset
from ltrjax.offline.click_data import click_training_data, training_sessions
from ltrjax.offline_runner import run_offline
from tests.test_bad_input import folder, letor_cfg, letor_lines
from tests.shared_data import MQ2008, needs_mq2008
from tests.test_run import run_cli


def relevance(y):
    return np.asarray(y, np.float32)


def dataset(tmp_path, **kw):
    return load_dataset(letor_cfg(folder(tmp_path, **kw), min_docs=0), cache_dir=tmp_path / "cache")


def sessions(qs, n=40, clicks=None, split=0, seed=0, qids=None):
    """``n`` sessions on the training queries of ``qs`` (each shows its query's first 4 documents)."""
    rng = np.random.default_rng(seed)
    train = np.flatnonzero(qs.split == 0)
    qid = np.asarray(qids) if qids is not None else np.asarray(qs.qids)[rng.choice(train, n)]
    docs = np.tile(np.arange(4, dtype=np.int32), (len(qid), 1))
    click = rng.random(docs.shape) < 0.3 if clicks is None else np.broadcast_to(clicks, docs.shape).copy()
    return ClickLog(session_id=np.arange(len(qid)), time=np.arange(len(qid)), query_id=qid.astype(np.int64),
                    doc_ids=docs, clicks=click, split=np.full(len(qid), split, np.int8))


# --------------------------------------------------------------------------- click logs: refused
def test_a_log_without_clicks_is_refused_with_its_counts(tmp_path):
    qs = dataset(tmp_path)
    with pytest.raises(ClickLogError) as err:
        training_sessions(sessions(qs, clicks=False), qs, "zero.parquet")
    msg = str(err.value)
    assert msg.startswith("zero.parquet: expected at least one click among the training sessions")
    assert "40 training sessions, 160 shown documents, 0 clicks" in msg and "\n" not in msg


def test_a_log_where_every_shown_document_is_clicked_is_refused(tmp_path):
    qs = dataset(tmp_path)
    with pytest.raises(ClickLogError, match=r"all.parquet: expected at least one shown document without a click.*"
                                            r"got 40 training sessions, 160 shown documents, 160 clicks"):
        training_sessions(sessions(qs, clicks=True), qs, "all.parquet")


def test_a_log_of_one_training_session_is_refused(tmp_path):
    qs = dataset(tmp_path)
    log = sessions(qs, n=1, clicks=np.array([True, False, False, False]))
    with pytest.raises(ClickLogError, match=r"one.parquet: expected at least 2 usable training sessions to learn "
                                            r"from, got 1 training sessions, 4 shown documents, 1 clicks"):
        training_sessions(log, qs, "one.parquet")


# --------------------------------------------------------------------------- click logs: skipped and counted
def test_sessions_on_queries_preprocessing_dropped_are_skipped_and_counted(tmp_path, caplog):
    # test queries without a relevant document are purged (dataset.purge_test_without_relevant): a real log
    # has sessions on them; a query id the data never had is still refused
    root = folder(tmp_path) / "Fold1"
    (root / "test.txt").write_text((root / "test.txt").read_text() + letor_lines(2, labels=0, qid0=900))
    qs = load_dataset(letor_cfg(tmp_path / "data", min_docs=0), cache_dir=tmp_path / "cache")
    assert qs.preprocess_report.test_queries_purged == 2 and 900 not in qs.qids
    base = sessions(qs, n=30)
    extra = sessions(qs, n=3, split=0, qids=[900, 901, 900])
    log = ClickLog(**{f: np.concatenate([getattr(base, f), getattr(extra, f)])
                      for f in ("session_id", "time", "query_id", "doc_ids", "clicks", "split")})
    with caplog.at_level(logging.WARNING, logger="ltrjax"):
        _, stats, info = click_training_data(log, qs, relevance, path="real.parquet")
    assert info["skipped_dropped_query"] == 3 and float(stats.n_sessions.sum()) == 30.0
    assert "real.parquet: skipped 3 training sessions on queries that preprocessing of dataset tiny dropped" \
        in caplog.text
    write_click_log(tmp_path / "real.parquet", log)
    cfg = {"experiment": {"trials": 1, "progress": False, "estimators": ["naive"], "eval_buckets": 1,
                          "train": {"max_epochs": 2, "patience": 1}, "save_models": False,
                          "click_log": str(tmp_path / "real.parquet")}}
    results = run_offline(offline_run(cfg), tmp_path / "run", queryset=qs)
    assert results["trials_info"][0]["click_log"]["skipped_dropped_query"] == 3
    assert results["data"]["test_queries_purged"] == 2
    unknown = sessions(qs, n=3, qids=[12345, 12345, 12345])
    with pytest.raises(ClickLogError, match="row 0: expected a query_id of dataset 'tiny'"):
        training_sessions(unknown, qs, "unknown.parquet")


def test_sessions_showing_a_document_twice_are_skipped_and_counted(tmp_path, caplog):
    qs = dataset(tmp_path)
    log = sessions(qs, n=30)
    doc_ids = log.doc_ids.copy()
    doc_ids[[3, 7], 2] = doc_ids[[3, 7], 0]  # document 0 at positions 1 and 3
    log = ClickLog(**{**log.__dict__, "doc_ids": doc_ids})
    with caplog.at_level(logging.WARNING, logger="ltrjax"):
        _, stats, info = click_training_data(log, qs, relevance, path="twice.parquet")
    assert info["skipped_repeated_document"] == 2 and float(stats.n_sessions.sum()) == 28.0
    assert "twice.parquet: skipped 2 training sessions that show one document at two positions" in caplog.text


# --------------------------------------------------------------------------- LETOR files
def test_carriage_return_only_line_endings_are_named(tmp_path):
    path = tmp_path / "mac.txt"
    path.write_bytes(letor_lines(3, docs=4).replace("\n", "\r").encode())
    with pytest.raises(DataCheckError) as err:
        read_letor(path, use_cache=False)
    msg = str(err.value)
    assert msg.startswith(f"{path}: its lines end in a carriage return only") and "12 lines and no '\\n'" in msg
    assert "min_docs" not in msg
    # Windows line endings (\r\n) are read as they always were
    windows = parse_letor_bytes(letor_lines(3, docs=4).replace("\n", "\r\n").encode())
    assert windows.n_queries == 3 and windows.labels.size == 12


def test_duplicated_lines_are_counted_and_warned(tmp_path, caplog):
    root = folder(tmp_path)
    train = root / "Fold1" / "train.txt"
    lines = train.read_text().splitlines()
    train.write_text("\n".join(lines + lines[:3] + [lines[0]]) + "\n")
    with caplog.at_level(logging.WARNING, logger="ltrjax"):
        qs = load_dataset(letor_cfg(root), cache_dir=tmp_path / "cache")
    assert qs.preprocess_report.duplicate_lines == 4
    assert "kept 4 lines that repeat an earlier line of their file exactly" in caplog.text
    # equal features under two docids are two documents, not a duplicated line
    same = b"1 qid:1 1:0.5 2:0.1 #docid = GX1\n1 qid:1 1:0.5 2:0.1 #docid = GX2\n1 qid:1 1:0.5 2:0.1 #docid = GX1\n"
    assert parse_letor_bytes(same).duplicate_lines == 1


def test_per_split_label_ranges_are_reported(tmp_path, caplog):
    root = folder(tmp_path)
    test = root / "Fold1" / "test.txt"
    test.write_text(test.read_text() + letor_lines(1, labels=4, qid0=777))
    with caplog.at_level(logging.WARNING, logger="ltrjax"):
        qs = load_dataset(letor_cfg(root), cache_dir=tmp_path / "cache")
    assert qs.preprocess_report.label_ranges == {"train": [0, 2], "vali": [0, 2], "test": [0, 4]}
    assert "the splits' label ranges differ (train 0-2, vali 0-2, test 0-4)" in caplog.text
    assert load_dataset(letor_cfg(folder(tmp_path / "same")), cache_dir=tmp_path / "cache").preprocess_report \
        .label_ranges is None


def test_identical_features_are_refused_before_training(tmp_path):
    root = folder(tmp_path)
    for split in ("train", "vali", "test"):
        f = root / "Fold1" / f"{split}.txt"
        f.write_text("".join(" ".join(line.split()[:2]) + " 1:0.5 2:0.5 3:0.5\n"
                             for line in f.read_text().splitlines()))
    with pytest.raises(DataCheckError, match=r"no feature is left to rank by: all 3 features read are constant "
                                             r"within every training query"):
        load_dataset(letor_cfg(root), cache_dir=tmp_path / "cache")


# --------------------------------------------------------------------------- the entry point end to end
def test_cli_zero_click_log_and_identical_features_exit_2(tmp_path):
    root = folder(tmp_path)
    qs = load_dataset(letor_cfg(root, min_docs=0), cache_dir=tmp_path / "cache")
    write_click_log(tmp_path / "zero.parquet", sessions(qs, clicks=False))
    proc = run_cli(tmp_path, "experiment=offline", "+dataset=letor", f"dataset.path={root}", "trials=1",
                   f"click_log={tmp_path / 'zero.parquet'}", "experiment.estimators=[naive]")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert f"{tmp_path / 'zero.parquet'}: expected at least one click among the training sessions" in proc.stderr
    assert "40 training sessions, 160 shown documents, 0 clicks" in proc.stderr
    assert not (tmp_path / "out" / "results.json").exists()
    for split in ("train", "vali", "test"):  # every document with the same features: refused, no ZeroDivisionError
        f = root / "Fold1" / f"{split}.txt"
        f.write_text("".join(" ".join(line.split()[:2]) + " 1:0.5 2:0.5\n" for line in f.read_text().splitlines()))
    proc = run_cli(tmp_path, "experiment=offline", "+dataset=letor", f"dataset.path={root}", "trials=1",
                   "experiment.estimators=[naive]")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "ZeroDivisionError" not in proc.stderr
    assert "no feature is left to rank by: all 2 features read are constant within every training query" \
        in proc.stderr


# --------------------------------------------------------------------------- document ids (issue 42, item 4)
@needs_mq2008
def test_mq2008_run_files_carry_the_gx_ids(tmp_path, capsys):
    from ltrjax import score
    from ltrjax.saved import save_model

    meta = {"kind": "online", "algorithm": "bm25", "key": "bm25", "trial": 0, "seed": 0,
            "config": {"_target_": "ltrjax.online.policies.bm25.BM25"}, "chosen": {},
            "features": {"feature_ids": list(range(1, 47)), "n_features": 46, "normalize": "none",
                         "bm25_feature": 25, "y_max": 2, "dataset": "mq2008"}}
    model = save_model(tmp_path / "bm25.msgpack", meta, ())
    vali = MQ2008 / "Fold1" / "vali.txt"
    status = score.main([str(model), str(vali), "--out", str(tmp_path / "run.txt"), "--qrels",
                         str(tmp_path / "qrels.txt"), "--cache-dir", str(tmp_path / "cache")])
    assert status == 0, capsys.readouterr().err
    lines = [line.split("#docid = ")[1].split()[0] for line in vali.read_text().splitlines()]
    run = [line.split() for line in (tmp_path / "run.txt").read_text().splitlines()]
    assert len(run) == len(lines) and {r[2] for r in run} == set(lines) and all(r[2].startswith("GX") for r in run)
    qrels = [line.split() for line in (tmp_path / "qrels.txt").read_text().splitlines()]
    assert [q[2] for q in qrels] == lines  # file order: the line's own GX id beside its label
    raw = read_letor(vali, use_cache=False)
    assert raw.docids is not None and raw.docids[0] == lines[0]
    # a file without docid comments keeps line indexes
    plain = parse_letor_bytes(b"1 qid:1 1:0.5\n0 qid:1 1:0.2\n")
    assert plain.docids is None
