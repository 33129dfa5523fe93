"""Click logs as Parquet files: one row per session, written by the simulators and read back with checks.

Schema (``SCHEMA``, what the writers write; the user manual's page docs/click-logs.md):

============  ===================  ===========================================================
column        type                 meaning
============  ===================  ===========================================================
session_id    int64                id of the session (optional when reading: the row number)
time          int64                order of the sessions (optional: the row number)
query_id      int64                the query's ``qid`` in the LETOR data
doc_ids       list<int32>          shown documents: 0-based index of the document among its
                                   query's lines in the LETOR data (file order); read also
                                   under the name ``query_doc_ids``
positions     list<int16>          1-based display position of each shown document (optional:
                                   list order)
clicks        list<bool>           whether each shown document was clicked (0/1 integers read)
split         string               ``train``, ``vali`` or ``test`` (optional: ``train``)
============  ===================  ===========================================================

``doc_ids``, ``positions`` and ``clicks`` have equal lengths in every row; positions are unique
within a row and may leave gaps (an empty slot). File metadata ``ltrjax.*`` records the schema
version and the writer's facts (dataset, click model). Reading goes by record batches
(``iter_click_log``); in memory a log is a ``ClickLog`` of host arrays with one column per display
position (``doc_ids`` -1 where a position is empty).
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ltrjax.data.errors import DataFormatError
from ltrjax.data.queryset import SPLIT_NAMES

SCHEMA_VERSION = "1"
SCHEMA = pa.schema([
    ("session_id", pa.int64()),
    ("time", pa.int64()),
    ("query_id", pa.int64()),
    ("doc_ids", pa.list_(pa.int32())),
    ("positions", pa.list_(pa.int16())),
    ("clicks", pa.list_(pa.bool_())),
    ("split", pa.string()),
])
LIST_COLUMNS = ("doc_ids", "positions", "clicks")
MAX_POSITIONS = 1000


class ClickLogError(DataFormatError):
    """A click-log file does not follow ``SCHEMA``; ``str(e)`` names the file, the row (0-based) and what
    was expected. A ``DataFormatError``, so the entry point exits with status 2 and this one line."""

    def __init__(self, path, row: int | None, expected: str, got: str = ""):
        super().__init__(path, -1 if row is None else row, expected, got)
        self.row = row
        where = f"{self.path}" + (f", row {row}" if row is not None else "")
        self.args = (f"{where}: expected {expected}" + (f", got {got}" if got else ""),)

    def __str__(self) -> str:
        return self.args[0]


@dataclasses.dataclass(frozen=True)
class ClickLog:
    """Sessions as host arrays; column k of the ``[S, K]`` arrays is display position k + 1."""

    session_id: np.ndarray  # i64 [S]
    time: np.ndarray  # i64 [S]
    query_id: np.ndarray  # i64 [S]
    doc_ids: np.ndarray  # i32 [S, K] document index within its query, -1: position empty
    clicks: np.ndarray  # bool [S, K] (False where empty)
    split: np.ndarray  # i8 [S] 0 train, 1 vali, 2 test
    metadata: dict = dataclasses.field(default_factory=dict)

    @property
    def n_sessions(self) -> int:
        return int(self.query_id.shape[0])

    @property
    def n_positions(self) -> int:
        return int(self.doc_ids.shape[1])


# --------------------------------------------------------------------------- writing
def to_table(log: ClickLog) -> pa.Table:
    """The log as an Arrow table of ``SCHEMA`` (empty positions left out of the lists)."""
    shown = log.doc_ids >= 0
    lengths = shown.sum(axis=1)
    offsets = np.zeros(len(lengths) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    positions = np.broadcast_to(np.arange(1, log.n_positions + 1, dtype=np.int16), shown.shape)[shown]
    lists = {"doc_ids": log.doc_ids[shown].astype(np.int32), "positions": positions,
             "clicks": log.clicks[shown].astype(bool)}
    arrays = [pa.array(np.asarray(log.session_id, np.int64)), pa.array(np.asarray(log.time, np.int64)),
              pa.array(np.asarray(log.query_id, np.int64))]
    arrays += [pa.ListArray.from_arrays(pa.array(offsets), pa.array(lists[c], SCHEMA.field(c).type.value_type))
               for c in LIST_COLUMNS]
    arrays.append(pa.array(np.asarray(SPLIT_NAMES, object)[np.asarray(log.split, np.int64)], pa.string()))
    return pa.Table.from_arrays(arrays, schema=SCHEMA)


def _metadata(extra: dict | None) -> dict[bytes, bytes]:
    meta = {"ltrjax.schema_version": SCHEMA_VERSION}
    meta.update({f"ltrjax.{k}": v if isinstance(v, str) else json.dumps(v) for k, v in (extra or {}).items()})
    return {k.encode(): str(v).encode() for k, v in meta.items()}


class ClickLogWriter:
    """Streams sessions into one Parquet file (``write`` per chunk; use as a context manager)."""

    def __init__(self, path, metadata: dict | None = None):
        self.path = os.fspath(path)
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        self._writer = pq.ParquetWriter(self.path, SCHEMA.with_metadata(_metadata(metadata)))
        self.rows = 0

    def write(self, log: ClickLog) -> None:
        if log.n_sessions:
            self._writer.write_table(to_table(log))
            self.rows += log.n_sessions

    def close(self) -> None:
        self._writer.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def write_click_log(path, log: ClickLog, metadata: dict | None = None) -> None:
    """Write ``log`` to ``path`` (Parquet, ``SCHEMA``)."""
    with ClickLogWriter(path, {**log.metadata, **(metadata or {})}) as writer:
        writer.write(log)


# --------------------------------------------------------------------------- reading
REQUIRED = ("query_id", "clicks")  # and doc_ids (or its alias query_doc_ids)
OPTIONAL = ("session_id", "time", "positions", "split")  # row order, row order, list order, "train"
DOC_ALIASES = ("doc_ids", "query_doc_ids")
BATCH_SESSIONS = 1 << 16  # sessions per record batch when reading


def _first(mask: np.ndarray) -> int | None:
    bad = np.flatnonzero(mask)
    return int(bad[0]) if bad.size else None


def _check(path, mask, expected: str, got, row0: int = 0) -> None:
    row = _first(mask)
    if row is not None:
        raise ClickLogError(path, row0 + row, expected, got(row))


def _open(path) -> pq.ParquetFile:
    if not os.path.exists(path):
        raise ClickLogError(path, None, "an existing Parquet click-log file (the schema: docs/click-logs.md)",
                            "no such file")
    try:
        return pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as err:
        raise ClickLogError(path, None, "a Parquet file (the schema: docs/click-logs.md)",
                            f"{type(err).__name__}: {err}") from err


def log_columns(path, schema: pa.Schema) -> dict[str, str]:
    """{ltrjax column: the file's column} of a log's schema: ``doc_ids`` or its alias ``query_doc_ids``
    (the same meaning), the optional columns that are present; missing required columns are an error."""
    names = schema.names
    docs = [c for c in DOC_ALIASES if c in names]
    missing = [c for c in REQUIRED if c not in names] + ([] if docs else ["doc_ids (or query_doc_ids)"])
    if missing:
        raise ClickLogError(path, None, f"columns {list(REQUIRED)} and doc_ids or query_doc_ids (optional: "
                            f"{list(OPTIONAL)})", f"columns {names} (missing {missing})")
    if len(docs) > 1:
        raise ClickLogError(path, None, "one of doc_ids and query_doc_ids (the same column under two names)",
                            f"both, in columns {names}")
    return {"doc_ids": docs[0], **{c: c for c in (*REQUIRED, *OPTIONAL) if c in names}}


def _column(path, batch: pa.RecordBatch, name: str, source: str, row0: int):
    """Column ``source`` of ``batch`` checked against ``SCHEMA``'s type of ``name`` (nulls: an error naming the row)."""
    col = batch.column(source)
    field = SCHEMA.field(name)
    want = field.type.value_type if pa.types.is_list(field.type) else field.type
    is_list = pa.types.is_list(col.type) or pa.types.is_large_list(col.type)
    if pa.types.is_list(field.type) and not is_list:
        raise ClickLogError(path, None, f"column {source} of type list<{want}>", str(col.type))
    inner = col.type.value_type if is_list else col.type
    ok = (pa.types.is_integer(inner) if pa.types.is_integer(want) else
          pa.types.is_boolean(inner) or (name == "clicks" and pa.types.is_integer(inner))
          if pa.types.is_boolean(want) else
          pa.types.is_string(inner) or pa.types.is_large_string(inner) or pa.types.is_dictionary(inner))
    if not ok:
        raise ClickLogError(path, None, f"column {source} of type {field.type}", str(col.type))
    _check(path, np.asarray(col.is_null()), f"a value in column {source}", lambda r: "null", row0)
    if is_list:
        lengths = np.asarray(pc.list_value_length(col), np.int64)
        _check(path, lengths > MAX_POSITIONS, f"at most {MAX_POSITIONS} shown documents",
               lambda r: f"{lengths[r]}", row0)
        flat = col.flatten()
        if flat.null_count:
            owner = np.repeat(np.arange(len(col)), lengths)
            _check(path, np.bincount(owner[np.asarray(flat.is_null())], minlength=len(col)) > 0,
                   f"no null inside column {source}", lambda r: str(col[r]), row0)
    return col


def _lists(path, cols: dict, names: dict, row0: int):
    """(owner row, position, doc id, click) of every shown document of a batch, checked."""
    lengths = {c: np.asarray(pc.list_value_length(cols[c]), np.int64) for c in LIST_COLUMNS if c in cols}
    listed = [names[c] for c in lengths]
    _check(path, np.any([lengths[c] != lengths["doc_ids"] for c in lengths], axis=0),
           f"{', '.join(listed[:-1])} and {listed[-1]} of equal length",
           lambda r: ", ".join(f"{names[c]} of length {lengths[c][r]}" for c in lengths), row0)
    n = len(lengths["doc_ids"])
    owner = np.repeat(np.arange(n), lengths["doc_ids"])
    flat = {c: cols[c].flatten().to_numpy(zero_copy_only=False) for c in lengths}
    if "positions" in flat:
        positions = flat["positions"].astype(np.int64)
    else:  # positions implied by list order
        starts = np.concatenate([[0], np.cumsum(lengths["doc_ids"])[:-1]])
        positions = np.arange(owner.size) - starts[owner] + 1
    doc_ids = flat["doc_ids"].astype(np.int64)
    row_has = lambda bad: np.bincount(owner[bad], minlength=n) > 0  # noqa: E731
    _check(path, row_has((positions < 1) | (positions > MAX_POSITIONS)), f"positions in 1..{MAX_POSITIONS}",
           lambda r: str(cols["positions"][r]), row0)
    _check(path, row_has((doc_ids < 0) | (doc_ids > np.iinfo(np.int32).max)), f"{names['doc_ids']} >= 0 (int32)",
           lambda r: str(cols["doc_ids"][r]), row0)
    clicks = flat["clicks"].astype(np.int64)
    _check(path, row_has((clicks < 0) | (clicks > 1)), "clicks of 0/1 or false/true", lambda r: str(cols["clicks"][r]),
           row0)
    return n, owner, positions, doc_ids, clicks.astype(bool)


def _batch_log(path, batch: pa.RecordBatch, names: dict, row0: int, meta: dict) -> ClickLog:
    """One record batch as a ``ClickLog`` (rows ``row0``...: the defaults of the optional columns count from it)."""
    cols = {c: _column(path, batch, c, src, row0) for c, src in names.items()}
    n, owner, positions, doc_ids, clicks = _lists(path, cols, names, row0)
    k = int(positions.max(initial=1))
    doc_matrix = np.full((n, k), -1, np.int32)
    click_matrix = np.zeros((n, k), bool)
    taken = np.zeros((n, k), np.int32)
    np.add.at(taken, (owner, positions - 1), 1)
    _check(path, (taken > 1).any(axis=1), "each position at most once per row", lambda r: str(cols["positions"][r]),
           row0)
    doc_matrix[owner, positions - 1] = doc_ids
    click_matrix[owner, positions - 1] = clicks
    split = np.zeros(n, np.int8)
    if "split" in cols:
        split_text = np.asarray(cols["split"].cast(pa.string()).to_numpy(zero_copy_only=False), object)
        split[:] = -1
        for code, name in enumerate(SPLIT_NAMES):
            split[split_text == name] = code
        _check(path, split < 0, f"split one of {list(SPLIT_NAMES)}", lambda r: repr(split_text[r]), row0)
    rows = np.arange(row0, row0 + n, dtype=np.int64)
    ints = {c: (np.asarray(cols[c].to_numpy(zero_copy_only=False), np.int64) if c in cols else rows)
            for c in ("session_id", "time", "query_id")}
    return ClickLog(**ints, doc_ids=doc_matrix, clicks=click_matrix, split=split, metadata=meta)


def iter_click_log(path, batch_sessions: int = BATCH_SESSIONS):
    """The sessions of a click-log file as ``ClickLog`` chunks of at most ``batch_sessions`` rows, read with
    ``ParquetFile.iter_batches`` (a file larger than memory is read chunk by chunk), each checked as it comes;
    an error names the file and the row (0-based, in the whole file)."""
    path = os.fspath(path)
    pf = _open(path)
    schema = pf.schema_arrow
    names = log_columns(path, schema)
    meta = {k.decode()[len("ltrjax."):]: v.decode() for k, v in (schema.metadata or {}).items()
            if k.startswith(b"ltrjax.")}
    row0 = 0
    try:
        for batch in pf.iter_batches(batch_size=int(batch_sessions), columns=list(names.values())):
            if batch.num_rows:
                yield _batch_log(path, batch, names, row0, meta)
            row0 += batch.num_rows
    except (pa.ArrowException, OSError) as err:
        raise ClickLogError(path, row0, "a readable Parquet record batch", f"{type(err).__name__}: {err}") from err


def concatenate_logs(parts: list[ClickLog], metadata: dict | None = None) -> ClickLog:
    """One log of ``parts`` in order; the position columns padded to the widest part (-1: empty)."""
    k = max((p.n_positions for p in parts), default=1)
    pad = lambda a, fill: np.pad(a, [(0, 0), (0, k - a.shape[1])], constant_values=fill)  # noqa: E731
    cat = lambda f: np.concatenate([getattr(p, f) for p in parts]) if parts else np.zeros(0, np.int64)  # noqa: E731
    return ClickLog(session_id=cat("session_id"), time=cat("time"), query_id=cat("query_id"),
                    doc_ids=(np.concatenate([pad(p.doc_ids, -1) for p in parts]) if parts
                             else np.zeros((0, k), np.int32)),
                    clicks=np.concatenate([pad(p.clicks, False) for p in parts]) if parts else np.zeros((0, k), bool),
                    split=cat("split").astype(np.int8),
                    metadata=dict(metadata if metadata is not None else (parts[0].metadata if parts else {})))


def read_click_log(path, batch_sessions: int = BATCH_SESSIONS) -> ClickLog:
    """Read and check a whole click-log file (``iter_click_log``'s chunks, concatenated); raises ``ClickLogError``
    naming the file, row and expectation."""
    path = os.fspath(path)
    parts = list(iter_click_log(path, batch_sessions))
    if not parts:
        meta = {k.decode()[len("ltrjax."):]: v.decode() for k, v in (_open(path).schema_arrow.metadata or {}).items()
                if k.startswith(b"ltrjax.")}
        return concatenate_logs([], meta)
    return concatenate_logs(parts)


# --------------------------------------------------------------------------- from the simulators
def from_online_logs(logs, queryset, split_of_query) -> ClickLog:
    """Sessions of an online trial (``TrialResult.logs``: global query index, shown dataset-order slots)."""
    query = np.concatenate([np.asarray(log.query) for log in logs]).astype(np.int64)
    session = np.concatenate([np.asarray(log.session) for log in logs]).astype(np.int64)
    shown = np.concatenate([np.asarray(log.shown) for log in logs]).astype(np.int32)
    clicks = np.concatenate([np.asarray(log.clicks) for log in logs]).astype(bool) & (shown >= 0)
    return ClickLog(session_id=session, time=session, query_id=np.asarray(queryset.qids, np.int64)[query],
                    doc_ids=np.where(shown >= 0, shown, -1), clicks=clicks,
                    split=np.asarray(split_of_query, np.int8)[query])
