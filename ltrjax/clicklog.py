"""Click logs as Parquet files: one row per session, written by the simulators and read back with checks.

Schema (``SCHEMA``; the user manual's page docs/click-logs.md):

============  ===================  ===========================================================
column        type                 meaning
============  ===================  ===========================================================
session_id    int64                unique id of the session
time          int64                order of the sessions (the simulators: global session index)
query_id      int64                the query's ``qid`` in the LETOR data
doc_ids       list<int32>          shown documents: 0-based index of the document among its
                                   query's lines in the LETOR data (file order)
positions     list<int16>          1-based display position of each shown document
clicks        list<bool>           whether each shown document was clicked
split         string               ``train``, ``vali`` or ``test``
============  ===================  ===========================================================

``doc_ids``, ``positions`` and ``clicks`` have equal lengths in every row; positions are unique
within a row and may leave gaps (an empty slot). File metadata ``ltrjax.*`` records the schema
version and the writer's facts (dataset, click model). In memory a log is a ``ClickLog`` of host
arrays with one column per display position (``doc_ids`` -1 where a position is empty).
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
def _first(mask: np.ndarray) -> int | None:
    bad = np.flatnonzero(mask)
    return int(bad[0]) if bad.size else None


def _check(path, mask, expected: str, got) -> None:
    row = _first(mask)
    if row is not None:
        raise ClickLogError(path, row, expected, got(row))


def read_click_log(path) -> ClickLog:
    """Read and check a click-log file; raises ``ClickLogError`` naming the file, row and expectation."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ClickLogError(path, None, "an existing Parquet click-log file (the schema: docs/click-logs.md)",
                            "no such file")
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as err:
        raise ClickLogError(path, None, "a Parquet file (the schema: docs/click-logs.md)",
                            f"{type(err).__name__}: {err}") from err
    missing = [n for n in SCHEMA.names if n not in table.column_names]
    if missing:
        raise ClickLogError(path, None, f"columns {SCHEMA.names}", f"columns {table.column_names} "
                            f"(missing {missing})")
    cols = {}
    for field in SCHEMA:
        col = table.column(field.name).combine_chunks()
        want = field.type.value_type if pa.types.is_list(field.type) else field.type
        have = col.type.value_type if pa.types.is_list(col.type) or pa.types.is_large_list(col.type) else None
        if pa.types.is_list(field.type) and have is None:
            raise ClickLogError(path, None, f"column {field.name} of type list<{want}>", str(col.type))
        inner = have if have is not None else col.type
        ok = (pa.types.is_integer(inner) if pa.types.is_integer(want) else
              pa.types.is_boolean(inner) if pa.types.is_boolean(want) else
              pa.types.is_string(inner) or pa.types.is_large_string(inner) or pa.types.is_dictionary(inner))
        if not ok:
            raise ClickLogError(path, None, f"column {field.name} of type {field.type}", str(col.type))
        _check(path, np.asarray(col.is_null()), f"a value in column {field.name}", lambda r: "null")
        if have is not None:
            flat = col.flatten()
            _check(path, np.asarray(pc.list_value_length(col)) > MAX_POSITIONS,
                   f"at most {MAX_POSITIONS} shown documents", lambda r: f"{len(col[r])}")
            if flat.null_count:
                owner = np.repeat(np.arange(len(col)), np.asarray(pc.list_value_length(col)))
                _check(path, np.bincount(owner[np.asarray(flat.is_null())], minlength=len(col)) > 0,
                       f"no null inside column {field.name}", lambda r: str(col[r]))
        cols[field.name] = col
    lengths = {c: np.asarray(pc.list_value_length(cols[c]), np.int64) for c in LIST_COLUMNS}
    _check(path, (lengths["doc_ids"] != lengths["positions"]) | (lengths["doc_ids"] != lengths["clicks"]),
           "doc_ids, positions and clicks of equal length",
           lambda r: ", ".join(f"{c} of length {lengths[c][r]}" for c in LIST_COLUMNS))
    n = len(lengths["doc_ids"])
    owner = np.repeat(np.arange(n), lengths["doc_ids"])
    flat = {c: cols[c].flatten().to_numpy(zero_copy_only=False) for c in LIST_COLUMNS}
    positions = flat["positions"].astype(np.int64)
    doc_ids = flat["doc_ids"].astype(np.int64)
    row_has = lambda bad: np.bincount(owner[bad], minlength=n) > 0  # noqa: E731
    _check(path, row_has((positions < 1) | (positions > MAX_POSITIONS)), f"positions in 1..{MAX_POSITIONS}",
           lambda r: str(cols["positions"][r]))
    _check(path, row_has((doc_ids < 0) | (doc_ids > np.iinfo(np.int32).max)), "doc_ids >= 0 (int32)",
           lambda r: str(cols["doc_ids"][r]))
    k = int(positions.max(initial=1))
    doc_matrix = np.full((n, k), -1, np.int32)
    click_matrix = np.zeros((n, k), bool)
    taken = np.zeros((n, k), np.int32)
    np.add.at(taken, (owner, positions - 1), 1)
    _check(path, (taken > 1).any(axis=1), "each position at most once per row", lambda r: str(cols["positions"][r]))
    doc_matrix[owner, positions - 1] = doc_ids
    click_matrix[owner, positions - 1] = flat["clicks"].astype(bool)
    split_text = np.asarray(cols["split"].cast(pa.string()).to_numpy(zero_copy_only=False), object)
    split = np.full(n, -1, np.int8)
    for code, name in enumerate(SPLIT_NAMES):
        split[split_text == name] = code
    _check(path, split < 0, f"split one of {list(SPLIT_NAMES)}", lambda r: repr(split_text[r]))
    meta = {k.decode()[len("ltrjax."):]: v.decode() for k, v in (table.schema.metadata or {}).items()
            if k.startswith(b"ltrjax.")}
    ints = {c: np.asarray(cols[c].to_numpy(zero_copy_only=False), np.int64) for c in ("session_id", "time", "query_id")}
    return ClickLog(**ints, doc_ids=doc_matrix, clicks=click_matrix, split=split, metadata=meta)


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
