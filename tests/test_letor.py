"""LETOR/SVMlight parser, its errors and its cache."""

import gzip
import time

import numpy as np
import pytest

from ltrjax.data import letor
from ltrjax.data.errors import DataFormatError
from ltrjax.data.letor import parse_letor_bytes, read_letor

from tests.shared_data import MQ2008, needs_mq2008

pytestmark = pytest.mark.usefixtures("private_cache")


def reference_parse(text: str, n_features: int | None = None):
    """A deliberately simple line-by-line parser to check the fast one against."""
    order, rows = [], {}
    for line in text.splitlines():
        tokens = line.split("#", 1)[0].split()
        if not tokens:
            continue
        qid = int(tokens[1].split(":")[1])
        feats = {int(k): float(v) for k, v in (t.split(":") for t in tokens[2:])}
        if qid not in rows:
            order.append(qid)
            rows[qid] = []
        rows[qid].append((int(tokens[0]), feats))
    width = n_features or max((max(f, default=0) for r in rows.values() for _, f in r), default=0)
    labels, features, counts = [], [], []
    for qid in order:
        counts.append(len(rows[qid]))
        for label, feats in rows[qid]:
            labels.append(label)
            dense = np.zeros(width, np.float32)
            for k, v in feats.items():
                dense[k - 1] = v
            features.append(dense)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    return np.array(features, np.float32), np.array(labels), np.array(order), offsets


def assert_same(parsed, reference):
    features, labels, qids, offsets = reference
    np.testing.assert_array_equal(parsed.features, features)
    np.testing.assert_array_equal(parsed.labels, labels)
    np.testing.assert_array_equal(parsed.qids, qids)
    np.testing.assert_array_equal(parsed.query_offsets, offsets)
    assert parsed.features.dtype == np.float32 and parsed.labels.dtype == np.int32
    assert parsed.qids.dtype == np.int64 and parsed.query_offsets.dtype == np.int64


def test_values_and_dtypes():
    f = parse_letor_bytes(b"2 qid:7 1:0.5 2:-1.25e2 3:3\n0 qid:7 1:0 2:1 3:.5\n")
    np.testing.assert_array_equal(f.features, [[0.5, -125, 3], [0, 1, 0.5]])
    np.testing.assert_array_equal(f.labels, [2, 0])
    np.testing.assert_array_equal(f.qids, [7])
    np.testing.assert_array_equal(f.query_offsets, [0, 2])


def test_sparse_lines_fill_zeros_and_width():
    text = b"1 qid:1 2:0.5\n0 qid:1 5:1 1:2\n1 qid:2\n"
    f = parse_letor_bytes(text)
    np.testing.assert_array_equal(f.features, [[0, 0.5, 0, 0, 0], [2, 0, 0, 0, 1], [0, 0, 0, 0, 0]])
    assert parse_letor_bytes(text, n_features=8).features.shape == (3, 8)


def test_comments_blank_lines_tabs_and_crlf():
    text = (
        b"# header comment\n\n"
        b"1 qid:3 1:1 2:2 # docid = GX1\r\n"
        b"   \n"
        b"0\tqid:3\t1:3  2:4#no space before the comment\n"
        b"# trailing comment"
    )
    f = parse_letor_bytes(text)
    np.testing.assert_array_equal(f.features, [[1, 2], [3, 4]])
    np.testing.assert_array_equal(f.labels, [1, 0])


def test_queries_grouped_by_first_appearance_stably():
    text = b"0 qid:9 1:1\n1 qid:4 1:2\n2 qid:9 1:3\n0 qid:4 1:4\n1 qid:1 1:5\n"
    f = parse_letor_bytes(text)
    np.testing.assert_array_equal(f.qids, [9, 4, 1])
    np.testing.assert_array_equal(f.query_offsets, [0, 2, 4, 5])
    np.testing.assert_array_equal(f.features[:, 0], [1, 3, 2, 4, 5])
    np.testing.assert_array_equal(f.labels, [0, 2, 1, 0, 1])


def random_letor_text(rng, n_lines=300, n_features=12, dense=False):
    lines = []
    for i in range(n_lines):
        ids = np.arange(1, n_features + 1) if dense else np.flatnonzero(rng.random(n_features) < 0.5) + 1
        pairs = " ".join(f"{k}:{v:.6g}" for k, v in zip(ids, rng.normal(size=ids.size) * 10))
        comment = " # doc" if rng.random() < 0.3 else ""
        lines.append(f"{rng.integers(0, 3)} qid:{rng.integers(0, 40)} {pairs}{comment}")
        if rng.random() < 0.05:
            lines.append("")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("dense", [False, True])
@pytest.mark.parametrize("chunk_bytes", [letor.CHUNK_BYTES, 97])
def test_matches_reference_parser(dense, chunk_bytes):
    text = random_letor_text(np.random.default_rng(int(dense)), dense=dense)
    parsed = parse_letor_bytes(text.encode(), chunk_bytes=chunk_bytes)
    assert_same(parsed, reference_parse(text))


def test_well_formed_input_stays_on_the_fast_path(monkeypatch):
    def slow(*args, **kwargs):
        raise AssertionError("the slow parser should only run on malformed chunks")

    monkeypatch.setattr(letor, "_parse_chunk_slow", slow)
    for dense in (False, True):
        text = random_letor_text(np.random.default_rng(7), dense=dense)
        assert_same(parse_letor_bytes(text.encode(), chunk_bytes=500), reference_parse(text))
    parse_letor_bytes(b"1 qid:3 1:1 2:2 # c\r\n\n0\tqid:3\t1:3  2:4\n")
    if (MQ2008 / "Fold1" / "vali.txt").is_file():
        letor._parse_file(str(MQ2008 / "Fold1" / "vali.txt"), 46, 2)


def test_gzip_detected_by_magic_bytes(tmp_path):
    text = random_letor_text(np.random.default_rng(5))
    path = tmp_path / "train.txt"  # no .gz extension on purpose
    path.write_bytes(gzip.compress(text.encode()))
    assert_same(read_letor(path, use_cache=False), reference_parse(text))
    assert_same(parse_letor_bytes(gzip.compress(text.encode())), reference_parse(text))


MALFORMED = [
    ("0 qid:1 1:0.5\n1 qid:1 3:abc\n", 2, "a finite number as the value of feature 3", "abc"),
    ("0 qid:1 1:0.5\n0 1:0.5 2:1\n", 2, "'qid:<id>' as the second token", "1:0.5"),
    ("1 qid:1 1:1\n2\n", 2, "'qid:<id>' as the second token", "end of line"),
    ("0 qid:x 1:1\n", 1, "an integer query id in 'qid:<id>'", "qid:x"),
    ("1.5 qid:1 1:1\n", 1, "an integer relevance label in 0..2", "1.5"),
    ("-1 qid:1 1:1\n", 1, "an integer relevance label in 0..2", "-1"),
    ("0 qid:1 1:1\n\n3 qid:1 1:1\n", 3, "an integer relevance label in 0..2", "3"),
    ("0 qid:1 0:1\n", 1, "a feature index in 1..4", "0"),
    ("0 qid:1 5:1\n", 1, "a feature index in 1..4", "5"),
    ("0 qid:1 1:1 2\n", 1, "a feature '<index>:<value>'", "2"),
    ("0 qid:1 1:1:2\n", 1, "a feature '<index>:<value>'", "1:1:2"),
    ("0 qid:1 1:nan\n", 1, "a finite number as the value of feature 1", "nan"),
    ("0 qid:1 2:1 2:3\n", 1, "feature 2 at most once per line", "2:3"),
    ("# c\n0 qid:1 1:1 # ok\n0 qid:1 1:\n", 3, "a finite number as the value of feature 1", ""),
]


@pytest.mark.parametrize("text, line, expected, got", MALFORMED)
def test_malformed_lines_name_file_line_and_expectation(text, line, expected, got):
    with pytest.raises(DataFormatError) as info:
        parse_letor_bytes(text.encode(), path="data.txt", n_features=4, y_max=2)
    err = info.value
    assert (err.path, err.line, err.expected, err.got) == ("data.txt", line, expected, got)
    assert str(err) == f"data.txt:{line}: expected {expected}, got {got!r}"


def test_without_limits_only_structural_checks_apply():
    f = parse_letor_bytes(b"7 qid:1 9:1\n")
    assert f.labels[0] == 7 and f.features.shape == (1, 9)
    with pytest.raises(DataFormatError, match="a feature index >= 1"):
        parse_letor_bytes(b"0 qid:1 0:1\n")
    with pytest.raises(DataFormatError, match="pass n_features"):  # no accidental huge matrix
        parse_letor_bytes(b"0 qid:1 1:1 123456789:1\n")


def test_error_line_number_counts_lines_of_earlier_chunks():
    good = "".join(f"1 qid:{i // 5} 1:{i} 2:0.5 # comment {i}\n" for i in range(200))
    text = (good + "1 qid:99 1:oops\n" + good).encode()
    with pytest.raises(DataFormatError) as info:
        parse_letor_bytes(text, path="big.txt", chunk_bytes=256)
    assert info.value.line == 201


@pytest.mark.parametrize("text, got", [(b"", ""), (b"# only a comment\n\n", "only blank or comment lines")])
def test_empty_file(text, got, tmp_path):
    path = tmp_path / "empty.txt"
    path.write_bytes(text)
    with pytest.raises(DataFormatError) as info:
        read_letor(path)
    assert info.value.line == 1
    assert info.value.expected == "at least one line 'label qid:<id> <index>:<value> ...'"
    assert info.value.got == got
    assert info.value.path == str(path)


def test_cache_hit_returns_identical_arrays_without_parsing(tmp_path, monkeypatch):
    text = random_letor_text(np.random.default_rng(3))
    path = tmp_path / "train.txt"
    path.write_text(text)
    cache = tmp_path / "my-cache"
    first = read_letor(path, cache_dir=cache, y_max=2)
    assert list(cache.rglob("*.npz")) and not list(cache.rglob("*.tmp"))

    def no_parsing(*args, **kwargs):
        raise AssertionError("the cache should have been used")

    monkeypatch.setattr(letor, "_parse_file", no_parsing)
    second = read_letor(path, cache_dir=cache, y_max=2)
    for name in ("features", "labels", "qids", "query_offsets"):
        np.testing.assert_array_equal(getattr(second, name), getattr(first, name))
        assert getattr(second, name).dtype == getattr(first, name).dtype
    with pytest.raises(AssertionError, match="cache"):  # other arguments: another cache entry
        read_letor(path, cache_dir=cache, y_max=3)


def test_cache_key_follows_file_content(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("1 qid:1 1:1\n")
    assert read_letor(path).features[0, 0] == 1
    path.write_text("1 qid:1 1:2 2:5\n")
    assert read_letor(path).features.tolist() == [[2, 5]]


def test_remembered_digest_is_not_reused_after_a_rewrite(tmp_path):
    import os

    path = tmp_path / "train.txt"
    path.write_text("1 qid:1 1:1\n")
    os.utime(path, ns=(10**18, 10**18))  # settled long ago: its digest may be remembered
    cache = tmp_path / "cache-dir"
    assert read_letor(path, cache_dir=cache).features[0, 0] == 1
    assert list((cache / "digests").glob("*.json"))
    time.sleep(0.05)
    path.write_text("1 qid:1 1:7\n")  # same size, same mtime; the ctime moves on
    os.utime(path, ns=(10**18, 10**18))
    assert read_letor(path, cache_dir=cache).features[0, 0] == 7


def test_cache_dir_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("LTRJAX_CACHE", str(tmp_path / "env-cache"))
    path = tmp_path / "train.txt"
    path.write_text("1 qid:1 1:1\n")
    read_letor(path)
    assert list((tmp_path / "env-cache").rglob("*.npz"))


@needs_mq2008
def test_mq2008_file_matches_reference_parser():
    path = MQ2008 / "Fold1" / "train.txt"
    parsed = read_letor(path, n_features=46, y_max=2)
    assert_same(parsed, reference_parse(path.read_text(), n_features=46))
    assert parsed.features.shape == (9630, 46) and parsed.n_queries == 471
