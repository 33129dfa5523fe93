"""Baidu-ULTR (Zou et al., NeurIPS 2022) as processed by Hager et al. (SIGIR 2024): Arrow Feather parts read with
pyarrow in record batches (``+dataset=baidu_ultr``; docs/click-logs.md).

Click parts (``parts/part-{p}_split-{s}.feather``) have one row per shown document; the rows of one result page
share ``query_no`` and are contiguous. Each page is a session of the click log this module writes (Parquet,
``ltrjax.clicklog``); its query is the page's ``query_md5`` (a training query, label 0: unlabelled) and its
documents are keyed by (``query_md5``, ``url_md5``), each with one feature row (the first seen): the 12 LTR features
``FEATURES`` and, with ``embedding: true``, the 768 float16 values of ``query_document_embedding``. The annotation
file (``parts/validation.feather``) has one row per judged document with ``label`` 0-4 and ``frequency_bucket`` 0-9;
each ``query_no`` is a query, split into vali and test by a seeded draw within each frequency bucket (Hager et al.).

Memory: the click parts are read one stored record batch at a time (only the columns used) and processed
``batch_rows`` rows at a time, the sessions written as they complete; what stays in memory is one feature row per
distinct document and the key tables (budget: 256 MiB + 400 bytes a document, ``benchmarks/read_memory.py``). A
fraction ``heldout_fraction`` of the pages (by a hash of ``query_no``) is written with split ``test``: held out of
training, scored by the click perplexity. A missing file is a ``DatasetNotFoundError``, a missing or malformed
column a ``DataCheckError`` naming the file and the column (exit status 2).
"""

from __future__ import annotations

import array
import dataclasses
import glob
import hashlib
import os
import pathlib
from typing import Annotated, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ltrjax.constraints import PositiveInt, Range, check_fields

from .errors import DataCheckError, DatasetNotFoundError
from .queryset import QuerySet

FEATURES = ("bm25", "bm25_title", "bm25_abstract", "tf_idf", "tf", "idf", "ql_jelinek_mercer_short",
            "ql_jelinek_mercer_long", "ql_dirichlet", "document_length", "title_length", "abstract_length")
EMBEDDING = "query_document_embedding"
EMBEDDING_DIM = 768
CLICK_KEYS = ("query_no", "query_md5", "url_md5", "position", "click")
ANNOTATION_KEYS = ("query_no", "query_md5", "label", "frequency_bucket")
LAYOUT = ("a folder with the click parts (click_files, default parts/part-*_split-*.feather) and the annotations "
          "(annotation_file, default parts/validation.feather): Arrow Feather v2 files with the columns of "
          "docs/click-logs.md")
PUBLISHED = "https://huggingface.co/datasets/philipphager/baidu-ultr_uva-mlm-ctr (Hager et al., SIGIR 2024)"


@dataclasses.dataclass(frozen=True)
class BaiduSettings:
    """The Baidu-ULTR keys of ``conf/dataset/baidu_ultr.yaml`` (beside ``DatasetConfig``'s)."""

    click_files: str = "parts/part-*_split-*.feather"  # glob under the dataset folder
    annotation_file: str = "parts/validation.feather"
    max_click_files: PositiveInt | None = None  # read only the first n click parts (sorted by name)
    embedding: bool = False  # append the 768 embedding values to the 12 features
    batch_rows: PositiveInt = 1 << 16  # rows per record batch read
    # share of each frequency bucket's annotated queries in vali (the rest: test)
    vali_fraction: Annotated[float, Range(0, 1, lo_open=True, hi_open=True)] = 0.5
    # share of the result pages held out of training (split test in the click log: the click perplexity's), by a
    # hash of query_no
    heldout_fraction: Annotated[float, Range(0, 1, hi_open=True)] = 0.1

    def __post_init__(self):
        check_fields(self)


BAIDU_KEYS = tuple(f.name for f in dataclasses.fields(BaiduSettings))


# --------------------------------------------------------------------------- files and columns
def data_root(c: dict) -> pathlib.Path:
    """The dataset folder: ``dataset.path``, else ``$LTRJAX_BAIDU_ULTR`` (``path_env``)."""
    raw = c["path"] or (os.environ.get(c["path_env"]) if c["path_env"] else None)
    if not raw:
        raise _not_found(c, "", "no path is configured")
    path = pathlib.Path(os.path.expanduser(str(raw))).resolve()
    if not path.is_dir():
        raise _not_found(c, path, f"expected a folder at {path}, which does not exist")
    return path


def data_files(c: dict, root: pathlib.Path) -> tuple[list[pathlib.Path], pathlib.Path]:
    """(click parts sorted by name, at most ``max_click_files``; the annotation file); missing ones raise."""
    parts = sorted(pathlib.Path(p) for p in glob.glob(str(root / c["click_files"])))
    if c["max_click_files"] is not None:
        parts = parts[: int(c["max_click_files"])]
    if not parts:
        raise _not_found(c, root, f"no click part matches {root / c['click_files']}")
    annotations = root / c["annotation_file"]
    if not annotations.is_file():
        raise _not_found(c, root, f"the annotation file {annotations} is missing")
    return parts, annotations


def _not_found(c: dict, path, reason: str) -> DatasetNotFoundError:
    return DatasetNotFoundError(c["name"], str(path), reason=reason, layout=c["layout"] or LAYOUT,
                                path_env=c["path_env"], published=c["published"] or PUBLISHED)


def _kind_ok(column: str, t: pa.DataType) -> bool:
    if column in ("query_md5", "url_md5"):
        return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or \
            pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)
    if column == "click":
        return pa.types.is_integer(t) or pa.types.is_boolean(t)
    if column == EMBEDDING:
        return (pa.types.is_list(t) or pa.types.is_fixed_size_list(t) or pa.types.is_large_list(t)) and \
            pa.types.is_floating(t.value_type)
    if column in FEATURES:
        return pa.types.is_floating(t) or pa.types.is_integer(t)
    return pa.types.is_integer(t)  # query_no, position, label, frequency_bucket


def record_batches(path: pathlib.Path, columns: tuple[str, ...], batch_rows: int) -> Iterator[pa.RecordBatch]:
    """``columns`` of a Feather v2 (Arrow IPC) file, one stored record batch read at a time (only ``columns``) and
    handed on ``batch_rows`` rows at a time; a file that is
    not one, or lacks a column or has it of another type, is a ``DataCheckError`` naming the file and column."""
    try:
        with pa.OSFile(str(path)) as f:
            schema = pa.ipc.open_file(f).schema
    except (pa.ArrowException, OSError) as err:
        raise DataCheckError(str(path), f"not an Arrow Feather v2 (IPC) file ({type(err).__name__}: {err})",
                             "write the parts with pyarrow.feather.write_feather (version 2)") from None
    for column in columns:
        if column not in schema.names:
            raise DataCheckError(str(path), f"column {column!r} is missing (columns: {', '.join(schema.names)})",
                                 "the expected columns are in docs/click-logs.md")
        t = schema.field(column).type
        if not _kind_ok(column, t):
            raise DataCheckError(str(path), f"column {column!r} has type {t}, which is not what it holds")
    options = pa.ipc.IpcReadOptions(included_fields=[schema.get_field_index(c) for c in columns])
    with pa.OSFile(str(path)) as f:  # read, not memory-mapped: a batch's buffers are freed once it is used
        reader = pa.ipc.open_file(f, options=options)
        for i in range(reader.num_record_batches):
            batch = reader.get_batch(i)
            for start in range(0, batch.num_rows, batch_rows):  # (a batch of no rows yields nothing)
                yield batch.slice(start, batch_rows)


def _ints(path, batch: pa.RecordBatch, column: str, lo: int | None = None, hi: int | None = None) -> np.ndarray:
    col = batch.column(column)
    if col.null_count:
        raise DataCheckError(str(path), f"column {column!r} has {col.null_count} null values in a batch")
    values = np.asarray(col.cast(pa.int64()).to_numpy(zero_copy_only=False), np.int64)
    bad = ((values < lo) if lo is not None else False) | ((values > hi) if hi is not None else False)
    if np.any(bad):
        raise DataCheckError(str(path), f"column {column!r} holds {values[np.argmax(bad)]}, expected values in "
                             f"{lo}..{hi if hi is not None else ''}")
    return values


def feature_rows(path, batch: pa.RecordBatch, embedding: bool) -> np.ndarray:
    """float32 [rows, 12 (+ 768)]: the LTR features of a batch (and the embedding); nulls are an error."""
    cols = []
    for name in FEATURES:
        col = batch.column(name)
        if col.null_count:
            raise DataCheckError(str(path), f"column {name!r} has {col.null_count} null values in a batch")
        cols.append(np.asarray(col.to_numpy(zero_copy_only=False), np.float32))
    x = np.stack(cols, axis=1)
    if embedding:
        col = batch.column(EMBEDDING)
        lengths = np.asarray(pc.list_value_length(col).fill_null(-1))
        if (lengths != EMBEDDING_DIM).any():
            raise DataCheckError(str(path), f"column {EMBEDDING!r} has a row of {lengths[lengths != EMBEDDING_DIM][0]} "
                                 f"values, expected {EMBEDDING_DIM} (float16)")
        emb = np.asarray(col.flatten().to_numpy(zero_copy_only=False), np.float32).reshape(-1, EMBEDDING_DIM)
        x = np.concatenate([x, emb], axis=1)
    return x


def _keys(batch: pa.RecordBatch, *columns: str) -> list:
    """One hashable key per row: the columns' values joined (bytes)."""
    arrays = [batch.column(c).cast(pa.binary()) if not pa.types.is_binary(batch.column(c).type)
              else batch.column(c) for c in columns]
    if len(arrays) == 1:
        return arrays[0].to_pylist()
    return pc.binary_join_element_wise(*arrays, b"\x00").to_pylist()


# --------------------------------------------------------------------------- click parts -> sessions and documents
@dataclasses.dataclass
class _Index:
    """Training queries (by query_md5) and their documents (by query_md5, url_md5), in order of first appearance."""

    query_of: dict = dataclasses.field(default_factory=dict)  # query_md5 -> query index
    doc_of: dict = dataclasses.field(default_factory=dict)  # (query_md5 \0 url_md5) -> global document index
    doc_query: array.array = dataclasses.field(default_factory=lambda: array.array("q"))  # per document: its query
    doc_rank: array.array = dataclasses.field(default_factory=lambda: array.array("q"))  # its index in its query
    docs_per_query: list = dataclasses.field(default_factory=list)
    features: list = dataclasses.field(default_factory=list)  # float32 chunks, one row per document

    def add(self, path, batch: pa.RecordBatch, embedding: bool) -> tuple[np.ndarray, np.ndarray]:
        """(query index, document index within its query) of every row; new queries and documents appended."""
        qkeys, dkeys = _keys(batch, "query_md5"), _keys(batch, "query_md5", "url_md5")
        query = np.fromiter((self._query(k) for k in qkeys), np.int64, len(qkeys))
        n_before = len(self.doc_of)
        doc = np.empty(len(dkeys), np.int64)
        new_rows = []
        for i, k in enumerate(dkeys):
            d = self.doc_of.get(k)
            if d is None:
                d = self.doc_of[k] = len(self.doc_of)
                q = int(query[i])
                self.doc_query.append(q)
                self.doc_rank.append(self.docs_per_query[q])
                self.docs_per_query[q] += 1
                new_rows.append(i)
            doc[i] = d
        if new_rows:
            self.features.append(feature_rows(path, batch.take(pa.array(new_rows)), embedding))
        assert len(self.doc_of) - n_before == len(new_rows)
        return query, np.frombuffer(self.doc_rank, np.int64)[doc]

    def feature_matrix(self, extra: np.ndarray) -> np.ndarray:
        """float32 [documents + len(extra), F]: every document's row, grouped by query (queries in order of first
        appearance, documents in theirs), then ``extra``; the key table and feature chunks are released first."""
        self.doc_of = {}
        dest = np.frombuffer(self.doc_rank, np.int64).copy()
        dest += np.concatenate([[0], np.cumsum(self.docs_per_query)[:-1]]).astype(np.int64)[
            np.frombuffer(self.doc_query, np.int64)]
        out = np.empty((dest.size + extra.shape[0], extra.shape[1]), np.float32)
        start = 0
        while self.features:
            chunk = self.features.pop(0)
            out[dest[start:start + chunk.shape[0]]] = chunk
            start += chunk.shape[0]
        out[dest.size:] = extra
        return out

    def _query(self, key) -> int:
        q = self.query_of.get(key)
        if q is None:
            q = self.query_of[key] = len(self.query_of)
            self.docs_per_query.append(0)
        return q


def _sessions(path, qno, query, rank, position, click, carry):
    """Complete result pages (contiguous runs of ``query_no``) of a batch with the rows ``carry``d from the last one,
    as (rows of each complete page, the rows carried on). A page with two query_md5 values is an error."""
    if carry is not None:
        qno, query, rank, position, click = (np.concatenate([a, b]) for a, b in
                                             zip(carry, (qno, query, rank, position, click)))
    starts = np.flatnonzero(np.r_[True, qno[1:] != qno[:-1]])
    ends = np.r_[starts[1:], qno.size]
    first_of_row = np.repeat(starts, ends - starts)
    mixed = query != query[first_of_row]
    if mixed.any():
        raise DataCheckError(str(path), f"the rows of query_no {qno[np.argmax(mixed)]} have two query_md5 values "
                             "(column query_md5): a result page is one query")
    done = slice(0, starts[-1])
    rest = tuple(a[starts[-1]:] for a in (qno, query, rank, position, click))
    return (qno[done], query[done], rank[done], position[done], click[done]), rest


def held_out(qno: np.ndarray, fraction: float) -> np.ndarray:
    """bool: the pages held out of training, a fixed ``fraction`` of query_no values by a multiplicative hash."""
    h = (qno.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(40)
    return (h % np.uint64(1 << 20)).astype(np.float64) < fraction * (1 << 20)


def _page_log(path, qno, query, rank, position, click, heldout_fraction: float = 0.0):
    """Complete pages as a ``ClickLog`` (query_id = training-query index; doc_ids: index within the query; split
    test for the held-out pages)."""
    from ltrjax.clicklog import ClickLog

    starts = np.flatnonzero(np.r_[True, qno[1:] != qno[:-1]])
    owner = np.repeat(np.arange(starts.size), np.diff(np.r_[starts, qno.size]))
    k = int(position.max(initial=1))
    taken = np.zeros((starts.size, k), np.int32)
    np.add.at(taken, (owner, position - 1), 1)
    if (taken > 1).any():
        page = int(qno[starts][np.argmax((taken > 1).any(axis=1))])
        raise DataCheckError(path, f"query_no {page} shows two documents at one position (column position)")
    docs = np.full((starts.size, k), -1, np.int32)
    clicks = np.zeros((starts.size, k), bool)
    docs[owner, position - 1] = rank
    clicks[owner, position - 1] = click > 0
    return ClickLog(session_id=qno[starts], time=qno[starts], query_id=query[starts], doc_ids=docs,
                    clicks=clicks, split=np.where(held_out(qno[starts], heldout_fraction), 2, 0).astype(np.int8))


def read_clicks(c: dict, parts: list[pathlib.Path], log_path: pathlib.Path) -> tuple[_Index, dict]:
    """Read every click part batch by batch: documents into the index, complete pages into the click log at
    ``log_path``. Returns the index and counts."""
    from ltrjax.clicklog import ClickLogWriter

    index = _Index()
    columns = CLICK_KEYS + FEATURES + ((EMBEDDING,) if c["embedding"] else ())
    counts = {"click_rows": 0, "sessions": 0, "clicks": 0}
    with ClickLogWriter(log_path, {"source": "baidu_ultr", "parts": [p.name for p in parts]}) as writer:
        for path in parts:
            carry = None
            for batch in record_batches(path, columns, int(c["batch_rows"])):
                query, rank = index.add(path, batch, bool(c["embedding"]))
                qno = _ints(path, batch, "query_no")
                position = _ints(path, batch, "position", 1, 1000)
                click = _ints(path, batch, "click", 0, 1)
                pages, carry = _sessions(path, qno, query, rank, position, click, carry)
                if pages[0].size:
                    log = _page_log(str(path), *pages, float(c["heldout_fraction"]))
                    writer.write(log)
                    counts["sessions"] += log.n_sessions
                counts["click_rows"] += batch.num_rows
                counts["clicks"] += int(click.sum())
            if carry is not None and carry[0].size:  # the file's last page
                log = _page_log(str(path), *carry, float(c["heldout_fraction"]))
                writer.write(log)
                counts["sessions"] += log.n_sessions
    return index, counts


# --------------------------------------------------------------------------- annotations
def read_annotations(c: dict, path: pathlib.Path):
    """(features [N, F], labels [N], query of each row [N] (0-based, by query_no in order of appearance),
    frequency_bucket per query [Q], query_no per query [Q])."""
    columns = ANNOTATION_KEYS + FEATURES + ((EMBEDDING,) if c["embedding"] else ())
    feats, labels, qnos, buckets = [], [], [], []
    for batch in record_batches(path, columns, int(c["batch_rows"])):
        feats.append(feature_rows(path, batch, bool(c["embedding"])))
        labels.append(_ints(path, batch, "label", 0, 4))
        qnos.append(_ints(path, batch, "query_no"))
        buckets.append(_ints(path, batch, "frequency_bucket", 0, 9))
    if not qnos:
        raise DataCheckError(str(path), "the annotation file has no row")
    qno, bucket = np.concatenate(qnos), np.concatenate(buckets)
    order = np.argsort(qno, kind="stable")  # rows grouped by query_no (stable: file order within a query)
    uniq, first, inverse = np.unique(qno[order], return_index=True, return_inverse=True)
    per_query_bucket = bucket[order][first]
    mixed = bucket[order] != per_query_bucket[inverse]
    if mixed.any():
        raise DataCheckError(str(path), f"query_no {qno[order][np.argmax(mixed)]} has two frequency_bucket values "
                             "(column frequency_bucket)")
    return (np.concatenate(feats)[order], np.concatenate(labels)[order].astype(np.int32), inverse.reshape(-1),
            per_query_bucket, uniq)


def stratified_split(buckets: np.ndarray, vali_fraction: float, seed: int) -> np.ndarray:
    """int8 [Q]: 1 (vali) for round(vali_fraction n_b) seeded-random queries of each bucket b, else 2 (test)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xBA1D]))
    split = np.full(buckets.size, 2, np.int8)
    for b in np.unique(buckets):
        members = rng.permutation(np.flatnonzero(buckets == b))
        split[members[: int(round(vali_fraction * members.size))]] = 1
    return split


# --------------------------------------------------------------------------- the dataset
def log_location(c: dict, parts, cache_dir) -> pathlib.Path:
    """Where the click log of these parts and settings is written (the data cache, keyed by files and settings)."""
    from .cache import cache_root

    stamp = [(str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in parts]
    key = hashlib.blake2b(repr((stamp, c["batch_rows"], c["heldout_fraction"])).encode(), digest_size=10).hexdigest()
    return cache_root(cache_dir) / "baidu_ultr" / f"sessions-{key}.parquet"


def read_baidu_ultr(c: dict, seed: int, cache_dir=None) -> QuerySet:
    """The QuerySet of a Baidu-ULTR folder (training queries from the click parts, unlabelled; vali/test from the
    annotations) with ``info["click_log"]``: the Parquet log of the click parts' sessions."""
    root = data_root(c)
    parts, annotations = data_files(c, root)
    log_path = log_location(c, parts, cache_dir)
    tmp = log_path.with_suffix(f".{os.getpid()}.tmp")
    index, counts = read_clicks(c, parts, tmp)
    os.replace(tmp, log_path)
    a_feats, a_labels, a_query, a_bucket, a_qno = read_annotations(c, annotations)
    n_train = len(index.query_of)
    n_train_docs = len(index.doc_rank)
    features = index.feature_matrix(a_feats)
    width = features.shape[1]
    del a_feats
    counts_per_query = np.concatenate([np.asarray(index.docs_per_query, np.int64), np.bincount(a_query)])
    from .queryset import offsets_from_counts

    qids = np.arange(n_train + a_qno.size, dtype=np.int64)
    split = np.concatenate([np.zeros(n_train, np.int8), stratified_split(a_bucket, float(c["vali_fraction"]), seed)])
    names = list(FEATURES) + ([f"{EMBEDDING}[{i}]" for i in range(EMBEDDING_DIM)] if c["embedding"] else [])
    return QuerySet(
        name=c["name"], features=features,
        labels=np.concatenate([np.zeros(n_train_docs, np.int32), a_labels]),
        query_offsets=offsets_from_counts(counts_per_query), qids=qids, split=split, y_max=4,
        bm25_column=0, feature_ids=np.arange(1, width + 1, dtype=np.int32),
        info={"source": str(root), "files": {"clicks": [str(p) for p in parts], "annotations": str(annotations)},
              "split_by": f"annotated queries: vali/test {c['vali_fraction']:g} within each frequency_bucket, "
                          f"seed {seed}", "click_log": str(log_path), "unlabelled_train": True,
              "graded_evaluation": True, "feature_names": names, **counts,
              "frequency_bucket": {int(n_train + i): int(b) for i, b in enumerate(a_bucket)},
              "annotated_query_no": {int(n_train + i): int(q) for i, q in enumerate(a_qno)}})
