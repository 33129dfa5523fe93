"""Click logs (Parquet): the offline round trip (simulate, export, import, train = training in memory),
the online export, and the errors of malformed files."""

import json

import jax
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ltrjax.schema import offline_run
from ltrjax.clicklog import SCHEMA, ClickLog, ClickLogError, iter_click_log, read_click_log, write_click_log
from ltrjax.offline.click_data import click_training_data
from ltrjax.offline_runner import run_offline
from ltrjax.data.toy import toy_queryset

ESTIMATORS = ["naive", "ips", "prs", "dla", "pair_debias"]


def _offline_cfg(**extra):
    return {"experiment": {"trials": 1, "n_sessions": 20_000, "progress": False, "estimators": ESTIMATORS,
                           "click_model": {"threshold": 2}, "train": {"max_epochs": 4, "patience": 2},
                           "eval_buckets": 1, "save_models": False, **extra}}


def test_offline_round_trip_trains_the_same_estimators(tmp_path):
    # the fidelity smoke's data and logging chunk (two chunks here): its PRS part compiled naive, ips and prs
    qs = toy_queryset(n_queries=60, seed=3)
    memory = run_offline(offline_run(_offline_cfg(save_click_logs=True)), tmp_path / "memory", queryset=qs)
    path = tmp_path / "memory" / "click_logs" / "trial0.parquet"
    log = read_click_log(path)
    assert log.n_sessions == 20_000 and set(np.unique(log.split)) == {0}
    assert log.metadata["source"] == "offline" and json.loads(log.metadata["click_model"])["threshold"] == 2
    assert int(log.clicks.sum()) == memory["trials_info"][0]["clicks"]
    replay = run_offline(offline_run(_offline_cfg(click_log=str(path))), tmp_path / "replay", queryset=qs)
    for name in ESTIMATORS:
        a, b = memory["algorithms"][name]["trials"][0], replay["algorithms"][name]["trials"][0]
        for key in ("ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "map", "epochs", "best_vali"):
            assert a[key] == b[key], (name, key, a[key], b[key])
    info = replay["trials_info"][0]["click_log"]
    assert info["sessions_train"] == 20_000 and info["lists"] == info["queries"]


def _log(n=4, k=3):
    rng = np.random.default_rng(0)
    docs = np.tile(np.arange(k, dtype=np.int32), (n, 1))
    docs[0, 2] = -1  # an empty position
    return ClickLog(session_id=np.arange(n), time=np.arange(n) * 10, query_id=np.array([1, 2, 1, 3]),
                    doc_ids=docs, clicks=(rng.random((n, k)) < 0.5) & (docs >= 0), split=np.array([0, 0, 1, 2], np.int8))


def test_write_read_preserves_every_column(tmp_path):
    log = _log()
    write_click_log(tmp_path / "log.parquet", log, {"dataset": "toy"})
    back = read_click_log(tmp_path / "log.parquet")
    for field in ("session_id", "time", "query_id", "doc_ids", "clicks", "split"):
        np.testing.assert_array_equal(getattr(back, field), getattr(log, field), err_msg=field)
    assert back.metadata == {"schema_version": "1", "dataset": "toy"}
    table = pq.read_table(tmp_path / "log.parquet")
    assert table.schema.remove_metadata() == SCHEMA
    assert table.column("positions").to_pylist()[0] == [1, 2]  # the empty position is left out


def _write_rows(path, **overrides):
    rows = {"session_id": [0, 1], "time": [0, 1], "query_id": [1, 2], "doc_ids": [[0, 1], [1, 0]],
            "positions": [[1, 2], [1, 2]], "clicks": [[True, False], [False, False]], "split": ["train", "train"]}
    rows.update(overrides)
    schema = pa.schema([f for f in SCHEMA if f.name in rows])
    pq.write_table(pa.table({k: v for k, v in rows.items()}, schema=schema), path)
    return str(path)


@pytest.mark.parametrize("overrides, message", [
    ({"positions": [[1, 2], [1, 1]]}, "row 1: expected each position at most once"),
    ({"clicks": [[True, False], [False]]}, "row 1: expected doc_ids, positions and clicks of equal length"),
    ({"split": ["train", "valid"]}, "row 1: expected split one of ['train', 'vali', 'test'], got 'valid'"),
    ({"positions": [[0, 1], [1, 2]]}, "row 0: expected positions in 1..1000"),
    ({"doc_ids": [[0, 1], [-3, 0]]}, "row 1: expected doc_ids >= 0"),
    ({"query_id": [1, None]}, "row 1: expected a value in column query_id, got null"),
])
def test_bad_rows_name_file_row_and_expectation(tmp_path, overrides, message):
    path = _write_rows(tmp_path / "bad.parquet", **overrides)
    with pytest.raises(ClickLogError) as err:
        read_click_log(path)
    assert str(err.value).startswith(f"{path}, {message}"), str(err.value)


def test_bad_files_and_columns(tmp_path):
    missing = tmp_path / "missing.parquet"
    pq.write_table(pa.table({"session_id": [0]}), missing)
    with pytest.raises(ClickLogError, match=r"missing.parquet: expected columns .* \(missing \['query_id', 'clicks', "
                                            r"'doc_ids \(or query_doc_ids\)'\]\)"):
        read_click_log(missing)
    wrong = _write_rows(tmp_path / "wrong.parquet")
    table = pq.read_table(wrong).set_column(2, "query_id", pa.array(["a", "b"]))
    pq.write_table(table, wrong)
    with pytest.raises(ClickLogError, match="expected column query_id of type int64, got string"):
        read_click_log(wrong)
    text = tmp_path / "log.txt"
    text.write_text("not parquet")
    with pytest.raises(ClickLogError, match="log.txt: expected a Parquet file"):
        read_click_log(text)
    with pytest.raises(ClickLogError, match="no such file"):
        read_click_log(tmp_path / "absent.parquet")


def test_sessions_must_match_the_dataset(tmp_path):
    qs = toy_queryset(n_queries=30, seed=1)
    train_q = int(np.flatnonzero(qs.split == 0)[0])
    vali_q = int(np.flatnonzero(qs.split == 1)[0])
    relevance = lambda y: y.astype(np.float32)  # noqa: E731

    def log_of(qid, docs, split=0):
        return ClickLog(session_id=np.arange(1), time=np.arange(1), query_id=np.array([qid]),
                        doc_ids=np.array([docs], np.int32), clicks=np.zeros((1, len(docs)), bool),
                        split=np.array([split], np.int8))

    with pytest.raises(ClickLogError, match="f.parquet, row 0: expected a query_id of dataset 'toy'"):
        click_training_data(log_of(10**9, [0, 1]), qs, relevance, path="f.parquet")
    n_docs = int(qs.docs_per_query[train_q])
    with pytest.raises(ClickLogError, match=f"row 0: expected doc_ids below {n_docs}"):
        click_training_data(log_of(int(qs.qids[train_q]), [0, n_docs]), qs, relevance)
    with pytest.raises(ClickLogError, match="split 'train' only for training queries"):
        click_training_data(log_of(int(qs.qids[vali_q]), [0, 1]), qs, relevance)
    two = log_of(int(qs.qids[train_q]), [1, -1, 0])
    two = ClickLog(session_id=np.arange(2), time=np.arange(2), query_id=np.repeat(two.query_id, 2),
                   doc_ids=np.repeat(two.doc_ids, 2, axis=0), clicks=np.array([[True, False, False]] * 2),
                   split=np.zeros(2, np.int8))
    logged, stats, info = click_training_data(two, qs, relevance)
    assert np.asarray(logged.mask).tolist() == [[True, False, True]]
    assert info["sessions_train"] == 2 and float(stats.n_sessions.sum()) == 2.0


def test_top_level_click_log_keys_reach_the_offline_experiment():
    """`python -m ltrjax.run experiment=offline click_log=PATH save_click_logs=true` sets top-level keys."""
    from ltrjax.offline_runner import experiment_config

    exp = experiment_config({"click_log": "log.parquet", "save_click_logs": True,
                             "experiment": {"trials": None, "seed": None, "progress": None}})
    assert exp.click_log == "log.parquet" and exp.save_click_logs is True
    assert not experiment_config({"experiment": {}}).save_click_logs


# --------------------------------------------------------------------------- the shared session shape (issue 42)
def test_a_log_read_in_batches_equals_one_read_whole(tmp_path):
    rng = np.random.default_rng(5)
    n, k = 4_500, 6
    docs = np.tile(np.arange(k, dtype=np.int32), (n, 1))
    docs[rng.random((n, k)) < 0.2] = -1  # empty positions, some rows narrower than others
    log = ClickLog(session_id=rng.permutation(n), time=np.arange(n) * 3, query_id=rng.integers(0, 50, n),
                   doc_ids=docs, clicks=(rng.random((n, k)) < 0.3) & (docs >= 0),
                   split=rng.integers(0, 3, n).astype(np.int8))
    path = tmp_path / "log.parquet"
    write_click_log(path, log, {"dataset": "x"})
    whole = read_click_log(path, batch_sessions=10**6)
    chunks = list(iter_click_log(path, batch_sessions=1_000))
    assert [c.n_sessions for c in chunks] == [1_000] * 4 + [500]
    batched = read_click_log(path, batch_sessions=1_000)
    for field in ("session_id", "time", "query_id", "doc_ids", "clicks", "split"):
        np.testing.assert_array_equal(getattr(batched, field), getattr(whole, field), err_msg=field)
        np.testing.assert_array_equal(getattr(whole, field), getattr(log, field), err_msg=field)
    assert batched.metadata == whole.metadata == {"schema_version": "1", "dataset": "x"}
    # an error in the fourth batch names its row in the whole file
    table = pq.read_table(path)
    bad = table.column("positions").to_pylist()
    bad[3_210] = [1] * len(bad[3_210])
    pq.write_table(table.set_column(4, "positions", pa.array(bad, pa.list_(pa.int16()))), tmp_path / "bad.parquet")
    with pytest.raises(ClickLogError, match="row 3210: expected each position at most once"):
        read_click_log(tmp_path / "bad.parquet", batch_sessions=1_000)


def clax_log(path, qs, n=2_000, seed=0):
    """A log in CLAX's / the Yandex log's shape: query_id, query_doc_ids, clicks (int), no session_id/time/
    positions/split (positions: list order; every session trains)."""
    rng = np.random.default_rng(seed)
    train = np.flatnonzero(qs.split == 0)
    q = rng.choice(train, n)
    sizes = np.diff(np.asarray(qs.query_offsets))[q]
    docs = [rng.permutation(int(s))[:5].tolist() for s in sizes]
    labels = [np.asarray(qs.labels)[qs.query_offsets[qq] + np.asarray(d)] for qq, d in zip(q, docs)]
    clicks = [((rng.random(len(d)) < 0.1 + 0.5 * (y > 0)) & (rng.random(len(d)) < 1 / (1 + np.arange(len(d)))))
              .astype(np.int8).tolist() for d, y in zip(docs, labels)]
    pq.write_table(pa.table({"query_id": pa.array(np.asarray(qs.qids)[q], pa.int64()),
                             "query_doc_ids": pa.array(docs, pa.list_(pa.int64())),
                             "clicks": pa.array(clicks, pa.list_(pa.int8()))}), path)
    return docs, clicks


def test_a_log_in_clax_shape_reads_and_trains(tmp_path):
    qs = toy_queryset(n_queries=60, seed=3)
    docs, clicks = clax_log(tmp_path / "clax.parquet", qs)
    log = read_click_log(tmp_path / "clax.parquet", batch_sessions=700)
    assert log.n_sessions == 2_000 and (log.split == 0).all()
    np.testing.assert_array_equal(log.session_id, np.arange(2_000))
    np.testing.assert_array_equal(log.time, np.arange(2_000))
    assert log.doc_ids[7, :len(docs[7])].tolist() == docs[7] and log.clicks[7, :len(docs[7])].tolist() == \
        [bool(c) for c in clicks[7]]
    res = run_offline(offline_run(_offline_cfg(click_log=str(tmp_path / "clax.parquet"), estimators=["naive", "ips"])),
                      tmp_path / "run", queryset=qs)
    info = res["trials_info"][0]["click_log"]
    assert info["sessions_train"] == 2_000 and info["clicks"] == int(log.clicks.sum())
    assert 0.0 < res["algorithms"]["naive"]["trials"][0]["ndcg@10"] <= 1.0
    both = pq.read_table(tmp_path / "clax.parquet")
    pq.write_table(both.append_column("doc_ids", both.column("query_doc_ids")), tmp_path / "both.parquet")
    with pytest.raises(ClickLogError, match="expected one of doc_ids and query_doc_ids"):
        read_click_log(tmp_path / "both.parquet")


def test_streamed_training_data_equals_the_log_read_whole(tmp_path):
    """A log read twice in batches of 1,000 sessions (``stream_training_data``: a log larger than memory trains)
    gives the lists, statistics and counts of the log held whole (``click_training_data``), with sessions on
    dropped queries and with a repeated document skipped the same way, and errors naming rows of the whole file."""
    from ltrjax.offline.click_stream import stream_training_data

    qs = toy_queryset(n_queries=60, seed=3)
    rng = np.random.default_rng(2)
    train = np.flatnonzero(qs.split == 0)
    n, k = 4_500, 6
    q = rng.choice(train, n)
    sizes = np.diff(np.asarray(qs.query_offsets))[q]
    docs = np.full((n, k), -1, np.int32)
    for i in range(n):
        shown = rng.permutation(sizes[i])[:rng.integers(2, k + 1)]
        docs[i, :len(shown)] = shown
    docs[17, 1] = docs[17, 0]  # one session shows a document twice
    log = ClickLog(session_id=np.arange(n), time=np.arange(n), query_id=np.asarray(qs.qids, np.int64)[q],
                   doc_ids=docs, clicks=(rng.random((n, k)) < 0.3) & (docs >= 0), split=np.zeros(n, np.int8))
    write_click_log(tmp_path / "log.parquet", log)
    relevance = lambda y: y.astype(np.float32)  # noqa: E731
    whole = click_training_data(read_click_log(tmp_path / "log.parquet"), qs, relevance, chunk=512)
    streamed = stream_training_data(tmp_path / "log.parquet", qs, relevance, chunk=lambda width: 512,
                                    batch_sessions=1_000)
    for a, b in zip(jax.tree_util.tree_leaves(whole[:2]), jax.tree_util.tree_leaves(streamed[:2])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert whole[2] == {k: v for k, v in streamed[2].items() if k != "sessions_held_out"}
    assert streamed[2]["skipped_repeated_document"] == 1 and streamed[3] is None  # no vali/test session
    assert streamed[2]["sessions_train"] == n and streamed[2]["lists"] == whole[0].mask.shape[0]
    bad = log.query_id.copy()
    bad[3_456] = 10**9
    write_click_log(tmp_path / "bad.parquet", ClickLog(**{**log.__dict__, "query_id": bad}))
    with pytest.raises(ClickLogError, match="row 3456: expected a query_id of dataset 'toy'"):
        stream_training_data(tmp_path / "bad.parquet", qs, relevance, batch_sessions=1_000)
