"""Dataset registry: configs, data paths, loading MQ2008 and generic LETOR data, preprocessing."""

import os
import pathlib

import numpy as np
import pytest
from omegaconf import OmegaConf

from ltrjax.data import (
    DatasetNotFoundError,
    QuerySet,
    load_dataset,
    preprocess,
    project_root,
    resolve_data_path,
)
from ltrjax.data.registry import DEFAULTS

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONF = ROOT / "conf" / "dataset"
from tests.shared_data import MQ2008, needs_mq2008

pytestmark = pytest.mark.usefixtures("private_cache")


def config(name: str) -> dict:
    return OmegaConf.to_container(OmegaConf.load(CONF / f"{name}.yaml"))


def write_letor(path: pathlib.Path, n_queries: int, seed: int, docs=(3, 12), n_features=5, qid0=0):
    rng = np.random.default_rng(seed)
    lines = []
    for q in range(n_queries):
        for _ in range(rng.integers(*docs)):
            pairs = " ".join(f"{k}:{rng.random():.4f}" for k in range(1, n_features + 1))
            lines.append(f"{rng.integers(0, 3)} qid:{qid0 + q} {pairs}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


# --- configs ---------------------------------------------------------------------------------

ALL = ["synthetic", "synthetic_mq2007", "synthetic_mq2008", "synthetic_mslr10k", "synthetic_mslr30k",
       "letor", "mq2007", "mq2008", "mslr10k", "mslr30k", "yahoo", "istella_s"]


@pytest.mark.parametrize("name", ALL)
def test_every_config_has_every_key(name):
    cfg = config(name)
    assert set(DEFAULTS) <= set(cfg), set(DEFAULTS) - set(cfg)
    assert cfg["name"] == name and cfg["kind"] in ("letor", "synthetic")
    if cfg["kind"] == "synthetic":
        assert cfg["preset"] == name


@pytest.mark.parametrize(
    "name, y_max, n_features, bm25, drop",
    [("mq2007", 2, 46, 25, []), ("mq2008", 2, 46, 25, []), ("mslr10k", 4, 136, 110, [134, 135, 136]),
     ("mslr30k", 4, 136, 110, [134, 135, 136]), ("yahoo", 4, 700, None, []), ("istella_s", 4, 220, None, [])],
)
def test_real_dataset_entries(name, y_max, n_features, bm25, drop):
    cfg = config(name)
    assert (cfg["y_max"], cfg["n_features"], cfg["bm25_feature"], cfg["drop_features"]) == (
        y_max, n_features, bm25, drop)
    assert cfg["path_env"].startswith("LTRJAX_") and cfg["published"] and cfg["layout"]
    assert cfg["min_docs"] == 5 and cfg["purge_test_without_relevant"] is True


# --- data paths ------------------------------------------------------------------------------

def folded(tmp_path: pathlib.Path, name: str) -> pathlib.Path:
    for i, split in enumerate(("train", "vali", "test")):
        write_letor(tmp_path / name / "Fold1" / f"{split}.txt", 4, i, qid0=100 * i)
    return tmp_path / name


def test_path_precedence_config_then_env_then_default(tmp_path, monkeypatch):
    a, b, c = folded(tmp_path, "a"), folded(tmp_path, "b"), folded(tmp_path, "c")
    cfg = dict(config("mq2008"), default_path=str(c))
    monkeypatch.delenv("LTRJAX_MQ2008", raising=False)
    assert resolve_data_path(cfg) == c
    monkeypatch.setenv("LTRJAX_MQ2008", str(b))
    assert resolve_data_path(cfg) == b
    assert resolve_data_path(dict(cfg, path=str(a))) == a


def test_relative_paths_resolve_against_project_root_not_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LTRJAX_MQ2008", raising=False)
    assert project_root() == ROOT
    with pytest.raises(DatasetNotFoundError) as info:
        resolve_data_path(dict(config("mq2008"), default_path="no/such/folder"))
    assert str(ROOT / "no" / "such" / "folder") in str(info.value)


def test_missing_dataset_message_names_path_layout_env_and_publisher(monkeypatch):
    monkeypatch.delenv("LTRJAX_MSLR30K", raising=False)
    cfg = config("mslr30k")
    with pytest.raises(DatasetNotFoundError) as info:
        load_dataset(cfg)
    message = str(info.value)
    expected_path = os.path.normpath(ROOT / cfg["default_path"])  # as the registry builds it: symlinks kept
    assert isinstance(info.value, FileNotFoundError) and "\n" not in message
    for part in ("mslr30k", expected_path, "Fold1/train.txt", "Fold1/vali.txt", "Fold1/test.txt",
                 "LTRJAX_MSLR30K", "dataset.path", "https://www.microsoft.com/en-us/research/project/mslr/"):
        assert part in message, part


def test_missing_split_file_is_named(tmp_path):
    root = folded(tmp_path, "data")
    (root / "Fold1" / "test.txt").unlink()
    with pytest.raises(DatasetNotFoundError, match="Fold1/test.txt"):
        resolve_data_path(dict(config("mq2008"), path=str(root)))


def test_unset_generic_path(monkeypatch):
    monkeypatch.delenv("LTRJAX_LETOR", raising=False)
    with pytest.raises(DatasetNotFoundError, match="LTRJAX_LETOR"):
        load_dataset(config("letor"))


# --- generic LETOR data ----------------------------------------------------------------------

def test_generic_fold_and_flat_layouts(tmp_path):
    root = folded(tmp_path, "folded")
    qs = load_dataset(dict(config("letor"), path=str(root), min_docs=0, drop_constant_features=False))
    assert qs.n_features == 5 and qs.y_max == 2 and qs.bm25_column == -1
    np.testing.assert_array_equal(np.bincount(qs.split, minlength=3), [4, 4, 4])
    for split in ("train", "vali", "test"):
        (root / "Fold1" / f"{split}.txt").rename(root / f"{split}.txt")
    flat = load_dataset(dict(config("letor"), path=str(root), min_docs=0, drop_constant_features=False))
    np.testing.assert_array_equal(flat.features, qs.features)


def test_single_file_is_split_60_20_20_by_seed(tmp_path):
    write_letor(tmp_path / "all.txt", 50, 0, docs=(6, 10))
    cfg = dict(config("letor"), path=str(tmp_path / "all.txt"), purge_test_without_relevant=False)
    a, b, c = (load_dataset(cfg, seed=s) for s in (0, 0, 1))
    np.testing.assert_array_equal(np.bincount(a.split, minlength=3), [30, 10, 10])
    np.testing.assert_array_equal(a.split, b.split)
    assert not np.array_equal(a.split, c.split)
    assert a.info["split_by"].startswith("random 60/20/20")


def test_omegaconf_config_with_gzip_files(tmp_path):
    import gzip

    root = folded(tmp_path, "gz")
    for split in ("train", "vali", "test"):
        plain = root / "Fold1" / f"{split}.txt"
        (root / "Fold1" / f"{split}.txt.gz").write_bytes(gzip.compress(plain.read_bytes()))
        plain.unlink()
    cfg = OmegaConf.create(dict(config("letor"), path=str(root), min_docs=0))
    assert load_dataset(cfg).n_queries == 12 - load_dataset(cfg).info["test_queries_purged"]


# --- MQ2008 through the registry -------------------------------------------------------------

def reference_queries(path: pathlib.Path):
    """qid -> (labels, dense features) in order of first appearance, by a slow Python loop."""
    queries: dict[int, list] = {}
    for line in path.read_text().splitlines():
        tokens = line.split("#", 1)[0].split()
        if tokens:
            dense = np.zeros(46, np.float32)
            for t in tokens[2:]:
                k, v = t.split(":")
                dense[int(k) - 1] = float(v)
            queries.setdefault(int(tokens[1][4:]), []).append((int(tokens[0]), dense))
    return queries


@needs_mq2008
def test_mq2008_fold1_through_load_dataset():
    qs = load_dataset(config("mq2008"))
    raw = {s: reference_queries(MQ2008 / "Fold1" / f"{s}.txt") for s in ("train", "vali", "test")}
    kept = {}
    for s, queries in raw.items():
        kept[s] = [q for q, docs in queries.items() if len(docs) > 5
                   and (s != "test" or max(label for label, _ in docs) > 0)]
        assert qs.info["queries_read"][s] == len(queries)
        assert qs.info["queries_dropped_min_docs"][s] == sum(len(d) <= 5 for d in queries.values())
    assert qs.info["test_queries_purged"] == sum(
        len(d) > 5 and max(label for label, _ in d) == 0 for d in raw["test"].values())
    np.testing.assert_array_equal(qs.qids, kept["train"] + kept["vali"] + kept["test"])
    np.testing.assert_array_equal(np.bincount(qs.split, minlength=3), [len(kept[s]) for s in kept])
    assert qs.docs_per_query.min() > 5

    train_x = [np.array([x for _, x in raw["train"][q]]) for q in kept["train"]]
    constant = np.all([(x.max(0) == x.min(0)) for x in train_x], axis=0)
    np.testing.assert_array_equal(qs.feature_ids, np.flatnonzero(~constant) + 1)
    assert qs.info["features_dropped_constant"] == list(np.flatnonzero(constant) + 1)
    assert qs.y_max == 2 and qs.feature_ids[qs.bm25_column] == 25

    order = [(s, q) for s in kept for q in kept[s]]
    labels = np.concatenate([[label for label, _ in raw[s][q]] for s, q in order])
    features = np.concatenate([np.array([x for _, x in raw[s][q]]) for s, q in order])
    np.testing.assert_array_equal(qs.labels, labels)
    np.testing.assert_array_equal(qs.features, features[:, ~constant])  # normalize: none


@needs_mq2008
def test_mq2008_is_idempotent_under_query_minmax():
    plain = load_dataset(config("mq2008"))
    scaled = load_dataset(dict(config("mq2008"), normalize="query_minmax"))
    np.testing.assert_allclose(scaled.features, plain.features, atol=1e-6)


# --- preprocessing ---------------------------------------------------------------------------

def small_queryset() -> QuerySet:
    # q10: 6 docs train; q11: 7 docs train; q12: 3 docs vali; q13: 6 docs test, no relevant; q14: 7 docs test
    counts = np.array([6, 7, 3, 6, 7])
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    rng = np.random.default_rng(0)
    x = rng.random((offsets[-1], 5)).astype(np.float32) * 10
    x[:, 1] = 4.0  # constant everywhere
    x[:6, 3] = 2.0  # constant within q10 only
    labels = rng.integers(1, 3, offsets[-1]).astype(np.int32)
    labels[offsets[3] : offsets[4]] = 0
    return QuerySet(name="small", features=x, labels=labels, query_offsets=offsets,
                    qids=np.arange(10, 15), split=np.array([0, 0, 1, 2, 2], np.int8), y_max=2,
                    bm25_column=4, feature_ids=np.arange(1, 6, dtype=np.int32))


def test_preprocess_filters_drops_and_normalizes():
    qs = small_queryset()
    out = preprocess(qs, drop_features=[1], min_docs=5)
    np.testing.assert_array_equal(out.qids, [10, 11, 14])
    np.testing.assert_array_equal(out.split, [0, 0, 2])
    np.testing.assert_array_equal(out.feature_ids, [3, 4, 5])
    assert out.bm25_column == 2 and out.n_docs == 20
    np.testing.assert_array_equal(out.labels, qs.labels[np.r_[0:13, 22:29]])
    assert out.features.min() >= 0 and out.features.max() <= 1
    np.testing.assert_array_equal(out.features[:6, 1], 0)  # feature 4 constant within q10
    for i in range(out.n_queries):
        block = out.features[out.query_slice(i)]
        np.testing.assert_allclose(block.min(0), 0)
        np.testing.assert_allclose(block.max(0), [1, 0 if i == 0 else 1, 1])
    raw = qs.features[22:29, 2]
    np.testing.assert_allclose(out.features[13:, 0], (raw - raw.min()) / (raw.max() - raw.min()), rtol=1e-6)
    assert out.info["queries_dropped_min_docs"] == {"train": 0, "vali": 1, "test": 0}
    assert out.info["queries_kept"] == {"train": 2, "vali": 0, "test": 1}
    assert out.info["test_queries_purged"] == 1
    assert out.info["features_dropped_config"] == [1]
    assert out.info["features_dropped_constant"] == [2]
    assert qs.features[0, 1] == 4.0  # input untouched


def test_preprocess_switches():
    qs = small_queryset()
    out = preprocess(qs, normalize="none", drop_constant_features=False, min_docs=0,
                     purge_test_without_relevant=False)
    np.testing.assert_array_equal(out.features, qs.features)
    assert out.info["test_queries_without_relevant"] == 1 and out.info["test_queries_purged"] == 0
    dropped_bm25 = preprocess(qs, drop_features=[5])
    assert dropped_bm25.bm25_column == -1 and dropped_bm25.info["bm25_dropped"]
