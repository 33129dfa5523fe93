"""Reader for LETOR/SVMlight text files (``label qid:Q i:v i:v ... # comment``), plain or gzip.

The fast path works on whole chunks of lines at once: it locates tokens, colons and line
ends with NumPy on the raw bytes, checks the structure of every line with a few vectorised
comparisons, and parses all numbers of the chunk with one C-level call. A chunk that fails
any check is re-read line by line by a slow parser that names the first bad line; the slow
parser also produces the arrays, so the two paths can only differ in speed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import io
import math
import os
import re
import warnings
import zlib
from typing import BinaryIO, Iterator

import numpy as np

from .cache import cache_key, cache_root, file_digest, load_arrays, save_arrays
from .errors import DataCheckError, DataFormatError
from .queryset import offsets_from_counts

PARSER_VERSION = 3  # 2: float32 range checked, merged queries counted; 3: docids kept, duplicate lines counted
CHUNK_BYTES = 64 << 20
GZIP_MAGIC = b"\x1f\x8b"
MAX_INFERRED_FEATURES = 100_000  # widest dense matrix built without an explicit n_features
EXPECTED_DATA = "at least one line 'label qid:<id> <index>:<value> ...'"
_ARRAY_NAMES = ("features", "labels", "qids", "query_offsets", "queries_merged", "docids", "duplicate_lines")
FLOAT32_MAX = float(np.finfo(np.float32).max)
_CORRUPT_STREAM = (EOFError, gzip.BadGzipFile, zlib.error)  # a truncated or damaged gzip file
_COMMENT = re.compile(rb"#[^\n]*")
# the document id of a line's comment (``... #docid = GX008-86-4444840 inc = 1 ...``, MQ2007/MQ2008), on data lines only
_DOCID = re.compile(rb"^[ \t\r]*[^\s#][^#\n]*#[^\n]*?\bdocid[ \t]*=[ \t]*([^\s]+)", re.M)
_NUMBER = re.compile(rb"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_MAX_EXACT_INT = 2.0**53
_MAX_LABEL = 2**31 - 1  # labels are stored as int32
_SPACE_BYTES = np.array([9, 10, 11, 12, 13], dtype=np.uint8)  # below 32 and split on by bytes.split()
_BLANK_SEPARATORS = bytes.maketrans(b":\t\r\v\f", b"     ")


@dataclasses.dataclass(frozen=True, eq=False)
class LetorFile:
    """One parsed file; rows grouped by query in order of first appearance."""

    features: np.ndarray  # float32 [N, F]; missing features are 0
    labels: np.ndarray  # int32 [N]
    qids: np.ndarray  # int64 [Q]
    query_offsets: np.ndarray  # int64 [Q+1]
    path: str
    queries_merged: int = 0  # queries whose lines were not contiguous in the file (grouped into one query)
    docids: np.ndarray | None = None  # str [N]: the ``#docid = ...`` comment of each line ("" where absent); None: none
    duplicate_lines: int = 0  # lines equal to an earlier line (qid, label, features and docid)

    @property
    def n_queries(self) -> int:
        return int(self.qids.shape[0])


@dataclasses.dataclass
class _Rows:
    """Parsed rows of one chunk, in file order."""

    labels: np.ndarray  # int32 [n]
    qids: np.ndarray  # int64 [n]
    features: np.ndarray  # float32 [n, width]
    docids: np.ndarray | None = None  # bytes [n] ("" where a line has none); None: no line of the chunk has one


def read_letor(
    path: str | os.PathLike,
    *,
    n_features: int | None = None,
    y_max: int | None = None,
    cache_dir: str | os.PathLike | None = None,
    use_cache: bool = True,
) -> LetorFile:
    """Parse a LETOR file, or load it from the cache (see :mod:`ltrjax.data.cache`).

    ``n_features`` fixes the width and rejects larger indices (None: the largest index seen);
    ``y_max`` rejects larger labels. Raises :class:`DataFormatError` on malformed input.
    """
    path = os.fspath(path)
    if not use_cache:
        return _parse_file(path, n_features, y_max)
    root = cache_root(cache_dir)
    key = cache_key(
        file_digest(path, root), PARSER_VERSION, {"n_features": n_features, "y_max": y_max}
    )
    arrays = load_arrays(root, "letor", key, _ARRAY_NAMES)
    if arrays is not None:
        docids = arrays.pop("docids")
        return LetorFile(**{**arrays, "queries_merged": int(arrays["queries_merged"]),
                            "duplicate_lines": int(arrays["duplicate_lines"])},
                         docids=docids if docids.size else None, path=path)
    parsed = _parse_file(path, n_features, y_max)
    try:
        stored = {name: getattr(parsed, name) for name in _ARRAY_NAMES}
        stored["docids"] = parsed.docids if parsed.docids is not None else np.zeros(0, "U1")
        save_arrays(root, "letor", key, stored)
    except OSError as e:
        warnings.warn(f"could not write the LETOR cache under {root}: {e}", stacklevel=2)
    return parsed


def parse_letor_bytes(
    data: bytes,
    *,
    path: str = "<bytes>",
    n_features: int | None = None,
    y_max: int | None = None,
    chunk_bytes: int = CHUNK_BYTES,
) -> LetorFile:
    """Parse LETOR text (plain or gzip-compressed) held in memory; ``path`` names it in errors."""
    if data[:2] == GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except _CORRUPT_STREAM as err:
            raise _corrupt(path, len(data), err) from None
    return _parse_chunks(_split_whole_lines(io.BytesIO(data), chunk_bytes), path, n_features, y_max)


def open_maybe_gzip(path: str | os.PathLike) -> contextlib.AbstractContextManager[BinaryIO]:
    """Open a file for binary reading, decompressing if it starts with the gzip magic bytes."""
    stack = contextlib.ExitStack()
    raw = stack.enter_context(open(path, "rb"))
    if raw.read(2) == GZIP_MAGIC:
        raw.seek(0)
        stream: BinaryIO = stack.enter_context(gzip.GzipFile(fileobj=raw, mode="rb"))
    else:
        raw.seek(0)
        stream = raw

    @contextlib.contextmanager
    def managed() -> Iterator[BinaryIO]:
        with stack:
            yield stream

    return managed()


def _parse_file(path: str, n_features: int | None, y_max: int | None) -> LetorFile:
    try:
        with open_maybe_gzip(path) as stream:
            return _parse_chunks(_split_whole_lines(stream, CHUNK_BYTES), path, n_features, y_max)
    except _CORRUPT_STREAM as err:
        raise _corrupt(path, os.path.getsize(path), err) from None


def _corrupt(path: str, size: int, err: Exception) -> DataCheckError:
    return DataCheckError(path, f"the gzip-compressed file ({size} bytes) is truncated or corrupt ({err})",
                          f"check it with `gzip -t {path}` and download or unpack it again")


def _split_whole_lines(stream: BinaryIO, chunk_bytes: int) -> Iterator[bytes]:
    """Blocks of about ``chunk_bytes`` that end at a line end (the last one may not)."""
    rest = b""
    while block := stream.read(chunk_bytes):
        buf = rest + block if rest else block
        cut = buf.rfind(b"\n")
        if cut < 0:
            rest = buf
            continue
        rest = buf[cut + 1 :]
        yield buf[: cut + 1]
    if rest:
        yield rest


def _parse_chunks(
    chunks: Iterator[bytes], path: str, n_features: int | None, y_max: int | None
) -> LetorFile:
    parts: list[_Rows] = []
    first_line = 1
    saw_bytes = False
    for chunk in chunks:
        if not saw_bytes:
            _refuse_cr_only(chunk, path)
        saw_bytes = True
        rows = _parse_chunk_fast(chunk, n_features, y_max)
        if rows is None:
            rows = _parse_chunk_slow(chunk, path, first_line, n_features, y_max)
        rows.docids = _chunk_docids(chunk, rows.labels.size)
        if rows.labels.size:
            parts.append(rows)
        first_line += chunk.count(b"\n")
    if not parts:
        got = "only blank or comment lines" if saw_bytes else ""
        raise DataFormatError(path, 1, EXPECTED_DATA, got)
    return _group_by_query(parts, path, n_features)


def _refuse_cr_only(chunk: bytes, path: str) -> None:
    """A file whose lines end in a bare carriage return (classic Mac OS) would read as one long line: refused."""
    breaks = chunk.rstrip(b"\r").count(b"\r")
    if b"\n" not in chunk and breaks:
        raise DataCheckError(path, f"its lines end in a carriage return only ('\\r', classic Mac OS line endings: "
                             f"{breaks + 1} lines and no '\\n'), so it would read as one line",
                             f"convert it with `tr '\\r' '\\n' < {path} > {path}.unix` and read that file")


def _chunk_docids(chunk: bytes, n_rows: int) -> np.ndarray | None:
    """The ``docid`` of each data line of ``chunk`` (b"" where a line has none), or None when no line has one."""
    if b"docid" not in chunk:
        return None
    found = _DOCID.findall(chunk)
    if len(found) == n_rows:
        return np.asarray(found, dtype=bytes)
    out = []  # some lines without one: line by line (rare)
    for line in chunk.split(b"\n"):
        if line.split(b"#", 1)[0].split():
            hit = _DOCID.match(line)
            out.append(hit.group(1) if hit else b"")
    return np.asarray(out, dtype=bytes)


def _parse_chunk_fast(buf: bytes, n_features: int | None, y_max: int | None) -> _Rows | None:
    """Vectorised parse of whole lines; None when anything looks wrong.

    Structure check: on a line with data, tokens and colons must interleave as
    ``label qid:id index:value ...`` -- one token more than colons, colon ``j`` inside token
    ``j + 1`` (so each token but the label holds exactly one colon), the second token starting
    with ``qid:``. After blanking ``qid`` and the colons, a line then holds exactly
    ``2 * colons`` numbers unless a side of a colon is empty, which the count check catches.
    """
    if b"#" in buf:
        buf = _COMMENT.sub(b"", buf)
    buf = b"\n" + buf + (b"" if buf.endswith(b"\n") else b"\n")
    a = np.frombuffer(buf, dtype=np.uint8)
    newlines = np.flatnonzero(a == 10)  # newlines[0] == 0: the one prepended above
    if np.count_nonzero(a < 32) != newlines.size:  # tabs, CRs, or control bytes
        if not np.isin(a[a < 32], _SPACE_BYTES).all():
            return None
    nonws = a > 32
    token_start = np.zeros(a.size, dtype=bool)
    np.greater(nonws[1:], nonws[:-1], out=token_start[1:])
    del nonws
    starts = np.flatnonzero(token_start)
    del token_start
    colons = np.flatnonzero(a == 58)
    line_tokens = np.diff(np.searchsorted(starts, newlines))
    colon_cut = np.searchsorted(colons, newlines)
    line_colons = np.diff(colon_cut)
    data = line_tokens > 0
    colons_per_row = line_colons[data]
    n_rows = colons_per_row.size
    if n_rows == 0:
        return _empty_rows(n_features)
    if (colons_per_row == 0).any() or (line_tokens[data] != colons_per_row + 1).any():
        return None
    own_token = np.arange(colons.size) + np.repeat(np.arange(1, n_rows + 1), colons_per_row)
    starts = np.append(starts, a.size)
    if not ((starts[own_token] < colons) & (colons < starts[own_token + 1])).all():
        return None
    first = colon_cut[:-1][data]
    qid_colon = colons[first]
    if not (
        (starts[own_token[first]] == qid_colon - 3)
        & (a[qid_colon - 3] == ord("q"))
        & (a[qid_colon - 2] == ord("i"))
        & (a[qid_colon - 1] == ord("d"))
    ).all():
        return None
    del starts, own_token

    # One C-level parse of all numbers: label, qid, then index/value pairs.
    text = buf.translate(_BLANK_SEPARATORS).replace(b"qid", b"   ")
    uniform = bool((colons_per_row == colons_per_row[0]).all())
    try:
        with warnings.catch_warnings():  # older NumPy warns and stops early: the count check catches it
            warnings.simplefilter("ignore", DeprecationWarning)
            if uniform:
                numbers = np.loadtxt(io.BytesIO(text), dtype=np.float64, ndmin=2)
            else:
                numbers = np.fromstring(text, dtype=np.float64, sep=" ")
    except ValueError:
        return None
    del text
    if uniform:
        if numbers.shape != (n_rows, 2 * colons_per_row[0]):
            return None
        labels, qids = numbers[:, 0], numbers[:, 1]
        index_of, value_of = numbers[:, 2::2], numbers[:, 3::2]
        row_of = None
    else:
        if numbers.size != 2 * colons.size:
            return None
        row_start = offsets_from_counts(2 * colons_per_row)[:-1]
        labels, qids = numbers[row_start], numbers[row_start + 1]
        pair = np.ones(numbers.size, dtype=bool)
        pair[row_start] = False
        pair[row_start + 1] = False
        pairs = numbers[pair].reshape(-1, 2)
        index_of, value_of = pairs[:, 0], pairs[:, 1]
        row_of = np.repeat(np.arange(n_rows), colons_per_row - 1)

    if not _values_ok(labels, qids, index_of, value_of, n_features, y_max):
        return None
    width = n_features if n_features is not None else int(index_of.max(initial=0))
    features = _scatter(n_rows, width, index_of.astype(np.int64), value_of, row_of)
    if features is None:
        return None
    return _Rows(labels.astype(np.int32), qids.astype(np.int64), features)


def _values_ok(labels, qids, index_of, value_of, n_features, y_max) -> bool:
    label_max = _MAX_LABEL if y_max is None else y_max
    index_max = MAX_INFERRED_FEATURES if n_features is None else n_features
    return bool(
        (labels == np.floor(labels)).all()
        and (labels >= 0).all()
        and (labels <= label_max).all()
        and (qids == np.floor(qids)).all()
        and (np.abs(qids) < _MAX_EXACT_INT).all()
        and (index_of == np.floor(index_of)).all()
        and (index_of >= 1).all()
        and (index_of <= index_max).all()
        and (np.abs(value_of) <= FLOAT32_MAX).all()  # also false for inf and nan
    )


def _scatter(n_rows, width, index_of, value_of, row_of) -> np.ndarray | None:
    """Dense float32 [n_rows, width]; None if a line names a feature twice."""
    if row_of is None:  # every line has the same number of pairs: [n_rows, k] tables
        k = index_of.shape[1]
        if k == width and (index_of == np.arange(1, k + 1)).all():
            return value_of.astype(np.float32)
        row_of = np.repeat(np.arange(n_rows), k)
        index_of, value_of = index_of.ravel(), value_of.ravel()
    col = index_of - 1
    same_row = row_of[1:] == row_of[:-1]
    if not (col[1:][same_row] > col[:-1][same_row]).all():
        flat_pos = row_of * max(width, 1) + col
        if np.unique(flat_pos).size != flat_pos.size:
            return None
    features = np.zeros((n_rows, width), dtype=np.float32)
    features[row_of, col] = value_of
    return features


def _empty_rows(n_features: int | None) -> _Rows:
    return _Rows(
        np.zeros(0, np.int32), np.zeros(0, np.int64), np.zeros((0, n_features or 0), np.float32)
    )


def _parse_chunk_slow(
    buf: bytes, path: str, first_line: int, n_features: int | None, y_max: int | None
) -> _Rows:
    """Line-by-line parse; raises DataFormatError at the first bad line."""
    labels: list[int] = []
    qids: list[int] = []
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    for number, line in enumerate(buf.split(b"\n"), start=first_line):
        tokens = line.split(b"#", 1)[0].split()
        if not tokens:
            continue
        row = len(labels)
        labels.append(_parse_label(tokens[0], path, number, y_max))
        qids.append(_parse_qid(tokens[1] if len(tokens) > 1 else None, path, number))
        seen: set[int] = set()
        for token in tokens[2:]:
            index, value = _parse_pair(token, path, number, n_features)
            if index in seen:
                raise DataFormatError(
                    path, number, f"feature {index} at most once per line", _text(token)
                )
            seen.add(index)
            rows.append(row)
            cols.append(index - 1)
            vals.append(value)
    width = n_features if n_features is not None else (max(cols) + 1 if cols else 0)
    features = np.zeros((len(labels), width), dtype=np.float32)
    features[np.asarray(rows, np.int64), np.asarray(cols, np.int64)] = np.asarray(vals, np.float64)
    return _Rows(np.asarray(labels, np.int32), np.asarray(qids, np.int64), features)


def _parse_label(token: bytes, path: str, line: int, y_max: int | None) -> int:
    value = _integer(token)
    if value is None or value < 0 or value > (_MAX_LABEL if y_max is None else y_max):
        expected = (
            "an integer relevance label >= 0"
            if y_max is None and (value is None or value < 0)
            else f"an integer relevance label in 0..{_MAX_LABEL if y_max is None else y_max}"
        )
        raise DataFormatError(path, line, expected, _text(token))
    return value


def _parse_qid(token: bytes | None, path: str, line: int) -> int:
    if token is None or not token.startswith(b"qid:"):
        got = "end of line" if token is None else _text(token)
        raise DataFormatError(path, line, "'qid:<id>' as the second token", got)
    value = _integer(token[4:])
    if value is None:
        raise DataFormatError(path, line, "an integer query id in 'qid:<id>'", _text(token))
    return value


def _parse_pair(token: bytes, path: str, line: int, n_features: int | None) -> tuple[int, float]:
    if token.count(b":") != 1:
        raise DataFormatError(path, line, "a feature '<index>:<value>'", _text(token))
    index_text, value_text = token.split(b":")
    index = _integer(index_text)
    if n_features is not None:
        if index is None or not 1 <= index <= n_features:
            raise DataFormatError(path, line, f"a feature index in 1..{n_features}", _text(index_text))
    elif index is None or index < 1:
        raise DataFormatError(path, line, "a feature index >= 1", _text(index_text))
    elif index > MAX_INFERRED_FEATURES:
        expected = f"a feature index <= {MAX_INFERRED_FEATURES} (pass n_features for wider data)"
        raise DataFormatError(path, line, expected, _text(index_text))
    value = _finite(value_text)
    if value is None:
        raise DataFormatError(
            path, line, f"a finite number as the value of feature {index}", _text(value_text)
        )
    if abs(value) > FLOAT32_MAX:  # features are stored as float32: it would become inf
        raise DataFormatError(
            path, line, f"a value of feature {index} within float32 range (|v| <= {FLOAT32_MAX:.4g})",
            _text(value_text),
        )
    return index, value


def _finite(text: bytes) -> float | None:
    if not _NUMBER.fullmatch(text):
        return None
    value = float(text)
    return value if math.isfinite(value) else None


def _integer(text: bytes) -> int | None:
    value = _finite(text)
    if value is None or value != math.floor(value) or abs(value) >= _MAX_EXACT_INT:
        return None
    return int(value)


def _text(token: bytes) -> str:
    return token.decode("utf-8", errors="replace")


def _group_by_query(parts: list[_Rows], path: str, n_features: int | None) -> LetorFile:
    """Concatenate chunks and group rows by qid, queries in order of first appearance (stable)."""
    width = n_features if n_features is not None else max(p.features.shape[1] for p in parts)
    n_rows = sum(p.labels.size for p in parts)
    labels = np.concatenate([p.labels for p in parts])
    row_qids = np.concatenate([p.qids for p in parts])
    docids = None
    if any(p.docids is not None for p in parts):
        docids = np.concatenate([p.docids if p.docids is not None else np.full(p.labels.size, b"", "S1")
                                 for p in parts]).astype(str)
    if len(parts) == 1 and parts[0].features.shape[1] == width:
        features = parts.pop().features
    else:
        features = np.zeros((n_rows, width), dtype=np.float32)
        start = 0
        while parts:  # free each chunk as soon as it is copied
            part = parts.pop(0)
            features[start : start + part.labels.size, : part.features.shape[1]] = part.features
            start += part.labels.size

    unique, first_row, inverse = np.unique(row_qids, return_index=True, return_inverse=True)
    appearance = np.argsort(first_row, kind="stable")  # query rank -> unique index
    rank_of_unique = np.empty_like(appearance)
    rank_of_unique[appearance] = np.arange(appearance.size)
    query_of_row = rank_of_unique[inverse.ravel()]
    duplicates = duplicate_lines(row_qids, labels, features, docids)
    if (np.diff(query_of_row) < 0).any():  # a query's lines are not contiguous
        order = np.argsort(query_of_row, kind="stable")
        features, labels, query_of_row = features[order], labels[order], query_of_row[order]
        docids = docids[order] if docids is not None else None
    counts = np.bincount(query_of_row, minlength=appearance.size)
    return LetorFile(
        features=features,
        labels=labels,
        qids=unique[appearance].astype(np.int64),
        query_offsets=offsets_from_counts(counts),
        path=path,
        queries_merged=_queries_merged(row_qids),
        docids=docids,
        duplicate_lines=duplicates,
    )


def duplicate_lines(qids, labels, features, docids=None) -> int:
    """How many lines repeat an earlier line exactly (same qid, label, features and docid).

    Rows are ordered by two random projections of their features (float64; equal rows project equally) and
    their other keys, and each row is compared exactly with its predecessor in that order.
    """
    n = int(labels.size)
    if n < 2:
        return 0
    rng = np.random.default_rng(0x5EED)
    proj = np.empty((n, 2))
    for i in range(0, n, 1 << 16):
        proj[i:i + (1 << 16)] = features[i:i + (1 << 16)].astype(np.float64) @ rng.random((features.shape[1], 2))
    names = np.unique(docids, return_inverse=True)[1].reshape(-1) if docids is not None else np.zeros(n, np.int64)
    order = np.lexsort((proj[:, 1], proj[:, 0], names, labels, qids))
    same = np.ones(n - 1, bool)
    for key in (qids, labels, names):
        same &= key[order[1:]] == key[order[:-1]]
    cand = np.flatnonzero(same)
    if cand.size:
        same_rows = (features[order[cand + 1]] == features[order[cand]]).all(axis=1)
        return int(np.count_nonzero(same_rows))
    return 0


def _queries_merged(row_qids: np.ndarray) -> int:
    """How many queries have their lines in more than one contiguous block of the file."""
    block_start = np.ones(row_qids.size, dtype=bool)
    np.not_equal(row_qids[1:], row_qids[:-1], out=block_start[1:])
    _, blocks = np.unique(row_qids[block_start], return_counts=True)
    return int(np.count_nonzero(blocks > 1))
