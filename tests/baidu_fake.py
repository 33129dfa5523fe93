"""Generated Baidu-ULTR files (issue 42): Feather v2 parts with the column names of the processed release (Hager et
al., SIGIR 2024) and plausible dtypes, small enough for tests and the reading benchmark. Nothing is downloaded.

Click parts: one row per shown document, the rows of a result page sharing ``query_no``; ``query_id`` is a string
that repeats (several pages per query). Annotations: the same columns minus url/click/SERP ones, plus ``label`` 0-4
and ``frequency_bucket`` 0-9. ``truth`` of ``write`` holds what a reader must find.
"""

from __future__ import annotations

import hashlib
import pathlib

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather

from ltrjax.data.baidu_ultr import EMBEDDING, EMBEDDING_DIM, FEATURES

TOKENS = pa.list_(pa.int32())
EMBEDDING_TYPE = pa.list_(pa.float16(), EMBEDDING_DIM)  # fixed-size list of 768 float16


def _md5(prefix: str, i) -> str:
    return hashlib.md5(f"{prefix}{int(i)}".encode()).hexdigest()


def _text_columns(rng, n, query_md5, query_id):
    return {"query_id": pa.array(query_id, pa.string()), "query_md5": pa.array(query_md5, pa.string()),
            "query": pa.array([rng.integers(1, 9000, 3).tolist() for _ in range(n)], TOKENS),
            "query_length": pa.array(np.full(n, 3, np.int32))}


def _doc_columns(rng, n, feats, embedding):
    cols = {"text_md5": pa.array([_md5("t", rng.integers(1 << 40)) for _ in range(n)], pa.string()),
            "title": pa.array([rng.integers(1, 9000, 5).tolist() for _ in range(n)], TOKENS),
            "abstract": pa.array([rng.integers(1, 9000, 8).tolist() for _ in range(n)], TOKENS),
            EMBEDDING: pa.FixedSizeListArray.from_arrays(pa.array(embedding.reshape(-1).astype(np.float16)),
                                                         EMBEDDING_DIM)}
    return cols, {name: pa.array(feats[:, j].astype(np.float32)) for j, name in enumerate(FEATURES)}


def click_part(rng, pages, qno0, n_queries, docs_per_query, shown, truth, click_type, query0=0):
    """One part: ``pages`` result pages of random training queries (named ``query0 + q``: other parts can have
    other queries); ``truth`` collects the pages."""
    rows = []
    for p in range(pages):
        q = int(rng.integers(n_queries))
        urls = rng.choice(docs_per_query, shown, replace=False)
        clicks = rng.random(shown) < 0.25 / (1 + np.arange(shown) * 0.3)
        truth["pages"].append((qno0 + p, q, urls.tolist(), clicks.tolist()))
        for pos, (u, c) in enumerate(zip(urls, clicks), start=1):
            rows.append((qno0 + p, q, int(u), pos, bool(c)))
    qno, q, u, pos, c = (np.asarray(col) for col in zip(*rows))
    n = qno.size
    feats, emb = truth["features"][q, u], truth["embedding"][q, u]
    cols = {"query_no": pa.array(qno.astype(np.int64)),
            **_text_columns(rng, n, [_md5("q", x + query0) for x in q], [f"qid{x + query0}" for x in q])}
    doc, ltr = _doc_columns(rng, n, feats, emb)
    cols.update({"url_md5": pa.array([_md5(f"u{x + query0}-", y) for x, y in zip(q, u)], pa.string()), **doc,
                 "click": pa.array(c) if click_type == "bool" else pa.array(c.astype(click_type)),
                 "position": pa.array(pos.astype(np.int32)),
                 "media_type": pa.array(rng.integers(0, 5, n).astype(np.int32)),
                 "displayed_time": pa.array(rng.random(n).astype(np.float32) * 10),
                 "serp_height": pa.array(rng.integers(100, 900, n).astype(np.int32)),
                 "slipoff_count_after_click": pa.array(rng.integers(0, 3, n).astype(np.int32)), **ltr})
    return pa.table(cols)


def annotations(rng, n_queries, docs, truth):
    """Annotated queries (query_no 10**6 + i), ``docs`` judged documents each, frequency buckets 0-9."""
    qno = np.repeat(10**6 + np.arange(n_queries), docs)
    bucket = np.repeat(np.arange(n_queries) % 10, docs)
    labels = rng.choice(5, qno.size, p=[0.4, 0.25, 0.15, 0.12, 0.08])
    feats = rng.random((qno.size, len(FEATURES))).astype(np.float32) * 10
    emb = rng.normal(size=(qno.size, EMBEDDING_DIM)).astype(np.float16)
    truth.update(a_qno=qno, a_bucket=bucket, a_labels=labels, a_features=feats, a_embedding=emb)
    doc, ltr = _doc_columns(rng, qno.size, feats, emb)
    cols = {"query_no": pa.array(qno.astype(np.int64)),
            **_text_columns(rng, qno.size, [_md5("a", x) for x in qno], [f"aq{x}" for x in qno]), **doc, **ltr,
            "label": pa.array(labels.astype(np.int8)), "frequency_bucket": pa.array(bucket.astype(np.int8))}
    return pa.table(cols)


def write(root, n_parts=3, pages=40, n_queries=10, docs_per_query=15, shown=10, annotated=30, judged=8, seed=0,
          chunksize=97):
    """Write ``root/parts/part-{p}_split-0.feather`` and ``root/parts/validation.feather``; returns the truth."""
    rng = np.random.default_rng(seed)
    parts = pathlib.Path(root) / "parts"
    parts.mkdir(parents=True, exist_ok=True)
    truth = {"pages": [], "features": rng.random((n_queries, docs_per_query, len(FEATURES))).astype(np.float32) * 10,
             "embedding": rng.normal(size=(n_queries, docs_per_query, EMBEDDING_DIM)).astype(np.float16)}
    for p in range(n_parts):
        click_type = ("bool", "int64", "int8")[p % 3]
        table = click_part(rng, pages, p * pages, n_queries, docs_per_query, shown, truth, click_type)
        feather.write_feather(table, parts / f"part-{p}_split-0.feather", chunksize=chunksize)
    feather.write_feather(annotations(rng, annotated, judged, truth), parts / "validation.feather",
                          chunksize=chunksize)
    return truth
