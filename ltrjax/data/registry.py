"""Dataset registry: turn a ``conf/dataset/*.yaml`` entry into a preprocessed QuerySet."""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import pathlib
import typing
from typing import Annotated, Any, Mapping

import numpy as np

from ltrjax.constraints import ConfigError, NonNegativeInt, OneOf, PositiveInt, check_fields, unknown_key

from .checks import check_queryset
from .errors import DatasetNotFoundError
from .letor import LetorFile, read_letor
from .preprocess import NORMALIZATIONS, preprocess
from .queryset import SPLIT_NAMES, QuerySet, offsets_from_counts, random_split
from .synthetic import PRESETS, SyntheticParams, generate_synthetic, synthetic_params

log = logging.getLogger("ltrjax")

@dataclasses.dataclass(frozen=True)
class DatasetConfig:
    """The schema of a ``conf/dataset/*.yaml`` entry (``check_dataset``); a synthetic entry also takes
    ``preset`` and any field of ``SyntheticParams`` (``SYNTHETIC_KEYS``)."""

    name: str = "letor"
    kind: Annotated[str, OneOf(("letor", "synthetic", "baidu_ultr"))] = "letor"
    path: str | None = None  # relative: to the working directory
    path_env: str | None = None
    default_path: str | None = None  # relative: to the source checkout (else the working directory)
    fold: PositiveInt | None = 1
    files: dict[str, str] | None = None  # {train, vali, test: file pattern} ("{fold}" is replaced)
    y_max: PositiveInt | None = None
    n_features: PositiveInt | None = None
    bm25_feature: PositiveInt | None = None  # 1-based id of the BM25 feature (synthetic: null = the preset's)
    warmup_feature: PositiveInt | None = None  # without a BM25 feature: the feature that stands in for it
    drop_features: list[int] = dataclasses.field(default_factory=list)
    normalize: Annotated[str, OneOf(NORMALIZATIONS)] = "query_minmax"
    drop_constant_features: bool = True
    min_docs: NonNegativeInt = 5
    purge_test_without_relevant: bool = True
    published: str | None = None
    layout: str | None = None

    def __post_init__(self):
        check_fields(self)
        if self.files is not None and set(self.files) != set(SPLIT_NAMES):
            raise ConfigError("files", dict(self.files), "expected a mapping with exactly the keys train, vali, test")
        if self.n_features is not None:
            for key in ("bm25_feature", "warmup_feature"):
                value = getattr(self, key)
                if value is not None and value > self.n_features:
                    raise ConfigError(key, value, f"expected a feature id in 1..{self.n_features} (n_features)")


DEFAULTS: dict[str, Any] = dataclasses.asdict(DatasetConfig())
# what a synthetic entry takes besides DatasetConfig's keys (null: the preset's value)
SYNTHETIC_KEYS = ("preset", *(f.name for f in dataclasses.fields(SyntheticParams) if f.name not in DEFAULTS))
GENERIC_LAYOUT = (
    "a folder with Fold{fold}/train.txt, Fold{fold}/vali.txt and Fold{fold}/test.txt, "
    "or a folder with train.txt, vali.txt and test.txt, or a single LETOR file "
    "(split 60/20/20 by query); files may be gzip-compressed"
)


def load_dataset(cfg: Mapping | str, *, seed: int = 0, cache_dir: str | None = None, **overrides) -> QuerySet:
    """Read or generate the dataset a config describes, preprocess and check it.

    ``cfg`` is a shipped dataset name (``"mq2008"``: ``conf/dataset/mq2008.yaml`` with ``overrides`` such as
    ``path=...`` or ``n_queries=...``, checked as ``python -m ltrjax.run +dataset=mq2008 dataset.KEY=...``
    checks them, so the data equals the command line's) or a dataset mapping (defaults for missing keys:
    ``DatasetConfig``'s). ``seed`` drives synthetic generation and the 60/20/20 split of single-file and
    synthetic data (the command line passes its ``seed``). What preprocessing dropped or merged is logged as
    a WARNING and kept in ``preprocess_report``. Raises DatasetNotFoundError when the files are missing,
    ConfigError for a bad setting, DataFormatError (DataCheckError) for data that cannot be used.
    """
    if isinstance(cfg, str):
        cfg = dataset_settings(cfg, **overrides)
    elif overrides:
        cfg = {**dict(cfg), **overrides}
    c = dataset_config(cfg)
    if c["kind"] == "synthetic":
        raw = _generate(c, seed)
    elif c["kind"] == "letor":
        raw = _read_letor_dataset(c, seed, cache_dir)
    elif c["kind"] == "baidu_ultr":
        from .baidu_ultr import read_baidu_ultr

        raw = read_baidu_ultr(c, seed, cache_dir)
    else:
        raise ConfigError("dataset.kind", c["kind"], "expected letor or synthetic")
    qs = preprocess(
        raw,
        normalize=c["normalize"],
        drop_features=c["drop_features"] or (),
        drop_constant_features=bool(c["drop_constant_features"]),
        min_docs=int(c["min_docs"]),
        purge_test_without_relevant=bool(c["purge_test_without_relevant"]),
    )
    summary = qs.preprocess_report.summary()
    if summary:
        log.warning("dataset %s: %s", qs.name, summary)
    check_queryset(qs)
    return qs


def shipped_datasets() -> tuple[str, ...]:
    """The dataset names of ``conf/dataset/*.yaml`` (``+dataset=NAME`` on the command line)."""
    from ltrjax.structured import conf_dir

    return tuple(sorted(p.stem for p in (conf_dir() / "dataset").glob("*.yaml")))


def dataset_settings(name: str, **overrides) -> dict[str, Any]:
    """The checked settings of shipped dataset ``name`` with ``overrides``: what ``python -m ltrjax.run
    +dataset=NAME dataset.KEY=VALUE ...`` resolves (a relative ``path`` is taken from the working directory).
    Raises ConfigError for an unknown name, key or value."""
    from omegaconf import OmegaConf

    from ltrjax.structured import conf_dir

    names = shipped_datasets()
    if name not in names:
        raise ConfigError("dataset", name, f"expected a shipped dataset name ({', '.join(names)}) or a mapping")
    mapping = OmegaConf.to_container(OmegaConf.load(conf_dir() / "dataset" / f"{name}.yaml"), resolve=True)
    for key, value in overrides.items():
        if key not in mapping:
            raise unknown_key(f"dataset.{key}", value, mapping, f"dataset {name}")
        mapping[key] = value
    return check_dataset(mapping, pathlib.Path.cwd())


def default_dataset() -> dict[str, Any]:
    """The dataset of a run without ``+dataset=NAME``: ``conf/dataset/synthetic.yaml``, as a plain mapping."""
    from omegaconf import OmegaConf

    from ltrjax.structured import conf_dir

    return OmegaConf.to_container(OmegaConf.load(conf_dir() / "dataset" / "synthetic.yaml"))


@functools.lru_cache(maxsize=None)
def synthetic_schema() -> type:
    """DatasetConfig plus ``preset`` and every SyntheticParams field (null: the preset's value)."""
    hints = typing.get_type_hints(SyntheticParams)
    extra = [("preset", Annotated[str, OneOf(PRESETS)], dataclasses.field(default="synthetic"))]
    for name in SYNTHETIC_KEYS[1:]:
        hint = hints[name]
        if typing.get_origin(hint) is tuple:
            hint = typing.List[typing.get_args(hint)[0]]
        extra.append((name, typing.Optional[hint], dataclasses.field(default=None)))
    return dataclasses.make_dataclass("SyntheticDatasetConfig", extra, bases=(DatasetConfig,), frozen=True)


@functools.lru_cache(maxsize=None)
def baidu_schema() -> type:
    """DatasetConfig plus the Baidu-ULTR keys (``ltrjax.data.baidu_ultr.BaiduSettings``)."""
    from .baidu_ultr import BaiduSettings

    return dataclasses.make_dataclass("BaiduDatasetConfig", [], bases=(DatasetConfig, BaiduSettings), frozen=True)


def check_dataset(mapping, cwd: pathlib.Path | None = None) -> dict:
    """The ``dataset`` mapping (default: ``conf/dataset/synthetic.yaml``) typed and checked, a relative
    ``dataset.path`` made absolute against ``cwd`` (the directory the user ran from)."""
    from omegaconf import DictConfig

    from ltrjax.structured import typed

    if mapping is None:
        mapping = default_dataset()
    kind = (mapping or {}).get("kind", DatasetConfig.kind) if isinstance(mapping, (dict, DictConfig)) else None
    if kind == "baidu_ultr":
        data = typed(baidu_schema(), mapping, "dataset", label="dataset")
        values = dataclasses.asdict(data)
        bm25 = data.bm25_feature
    elif kind == "synthetic":
        data = typed(synthetic_schema(), mapping, "dataset", label="dataset")
        values = dataclasses.asdict(data)
        try:  # the preset with the overrides: ranges and consistency (SyntheticParams.__post_init__)
            params = synthetic_params(values)
        except ValueError as err:
            raise ConfigError("dataset", None, str(err), show_value=False) from None
        bm25 = params.bm25_feature
    else:
        data = typed(DatasetConfig, mapping, "dataset", label="dataset")
        values = dataclasses.asdict(data)
        bm25 = data.bm25_feature
    if values["warmup_feature"] is not None and bm25 is not None:
        raise ConfigError("dataset.warmup_feature", values["warmup_feature"],
                          f"only read when the data has no BM25 feature, but dataset.bm25_feature is {bm25}; "
                          "set dataset.bm25_feature=null to rank by another feature")
    if values["path"] and cwd is not None and not pathlib.Path(values["path"]).expanduser().is_absolute():
        values["path"] = str((cwd / values["path"]).resolve())
    return values




def dataset_config(cfg: Mapping) -> dict[str, Any]:
    """A plain dict of a dataset config (OmegaConf or mapping) with defaults filled in; a key that neither
    ``DatasetConfig`` nor (for synthetic data) ``SYNTHETIC_KEYS`` has is refused (``ConfigError``)."""
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(cfg, DictConfig):
            cfg = OmegaConf.to_container(cfg, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf is a dependency
        pass
    kind = dict(cfg).get("kind")
    extra = {}
    if kind == "baidu_ultr":
        from .baidu_ultr import BaiduSettings

        extra = dataclasses.asdict(BaiduSettings())
    known = {*DEFAULTS, *(SYNTHETIC_KEYS if kind == "synthetic" else ()), *extra}
    for key, value in dict(cfg).items():
        if key not in known:
            raise unknown_key(f"dataset.{key}", value, known, "dataset")
    merged = {**DEFAULTS, **extra, **dict(cfg)}
    for key, default in DEFAULTS.items():  # null means "default", except for fold (no folds)
        if merged[key] is None and key != "fold":
            merged[key] = default
    return merged


def project_root() -> pathlib.Path | None:
    """The source checkout this package runs from (the folder holding ``pyproject.toml`` and ``conf/``), or
    None for an installed package. A dataset's relative ``default_path`` is taken from it."""
    here = pathlib.Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "conf" / "dataset").is_dir() and (parent / "pyproject.toml").is_file():
            return parent
    return None


def resolve_data_path(cfg: Mapping, *, root: pathlib.Path | None = None) -> pathlib.Path:
    """Where a LETOR dataset lives: config ``path``, else ``$<path_env>``, else ``default_path``.

    A relative ``path`` or ``$<path_env>`` is taken from the working directory, as a user typing it
    expects; a relative ``default_path`` (the shipped configs' ``../shared/data/...``) from the source
    checkout, or the working directory for an installed package; ``root`` overrides both. Checks that the
    expected files exist."""
    c = dataset_config(cfg)
    if c["kind"] != "letor":
        raise ValueError(f"dataset {c['name']!r} is {c['kind']}: it has no data path")
    env_value = os.environ.get(c["path_env"]) if c["path_env"] else None
    raw = c["path"] or env_value or c["default_path"]
    if not raw:
        raise _not_found(c, "", "no path is configured")
    path = pathlib.Path(os.path.expanduser(str(raw)))
    if not path.is_absolute():
        from_default = not (c["path"] or env_value)
        base = root or ((project_root() if from_default else None) or pathlib.Path.cwd())
        path = base / path
    path = pathlib.Path(os.path.normpath(path))
    if not path.exists():
        raise _not_found(c, path, f"expected it at {path}, which does not exist")
    split_files(c, path)  # raises if a file is missing
    return path


def split_files(cfg: Mapping, path: pathlib.Path) -> dict[str, pathlib.Path]:
    """The files of each split (keys train/vali/test), or ``{"all": file}`` for a single file."""
    c = dataset_config(cfg)
    if c["files"]:
        patterns = {split: c["files"][split] for split in SPLIT_NAMES}
        return _existing(c, path, patterns)
    if path.is_file():
        return {"all": path}
    fold_dir = f"Fold{c['fold']}/" if c["fold"] is not None else None
    if fold_dir and _find(path / f"{fold_dir}train.txt"):
        return _existing(c, path, {s: f"{fold_dir}{s}.txt" for s in SPLIT_NAMES})
    if _find(path / "train.txt"):
        return _existing(c, path, {s: f"{s}.txt" for s in SPLIT_NAMES})
    raise _not_found(
        c, path, f"expected it at {path}, which has neither Fold{c['fold']}/train.txt nor train.txt"
    )


def _existing(c: dict, root: pathlib.Path, patterns: Mapping[str, str]) -> dict[str, pathlib.Path]:
    found, missing = {}, []
    for split, pattern in patterns.items():
        if "{fold}" in pattern and c["fold"] is None:
            raise ValueError(f"dataset {c['name']!r}: file pattern {pattern!r} needs a fold")
        candidate = root / pattern.format(fold=c["fold"])
        hit = _find(candidate)
        if hit is None:
            missing.append(str(candidate))
        else:
            found[split] = hit
    if missing:
        raise _not_found(c, root, f"expected it at {root}, but " + ", ".join(missing) + " is missing")
    return found


def _find(candidate: pathlib.Path) -> pathlib.Path | None:
    for option in (candidate, candidate.with_name(candidate.name + ".gz")):
        if option.is_file():
            return option
    return None


def _not_found(c: dict, path, reason: str) -> DatasetNotFoundError:
    layout = c["layout"] or GENERIC_LAYOUT
    return DatasetNotFoundError(
        c["name"],
        str(path),
        reason=reason,
        layout=layout.replace("{fold}", str(c["fold"])),
        path_env=c["path_env"],
        published=c["published"],
    )


def _generate(c: dict, seed: int) -> QuerySet:
    params = synthetic_params(c)
    if c["y_max"] is not None and int(c["y_max"]) != params.y_max:
        raise ConfigError("dataset.y_max", c["y_max"], f"expected {params.y_max} or null: the preset of dataset "
                          f"{c['name']} has {len(params.label_probs)} label grades")
    return generate_synthetic(params, seed=seed)


def _read_letor_dataset(c: dict, seed: int, cache_dir: str | None) -> QuerySet:
    path = resolve_data_path(c)
    files = split_files(c, path)
    parsed = {
        split: read_letor(f, n_features=c["n_features"], y_max=c["y_max"], cache_dir=cache_dir)
        for split, f in files.items()
    }
    if "all" in parsed:
        whole = parsed["all"]
        split = random_split(whole.n_queries, seed)
        split_by = f"random 60/20/20 by query, seed {seed}"
    else:
        whole = _concatenate([parsed[s] for s in SPLIT_NAMES])
        split = np.repeat(np.arange(3, dtype=np.int8), [parsed[s].n_queries for s in SPLIT_NAMES])
        split_by = "files" if c["files"] else f"fold {c['fold']}"
    n_features = whole.features.shape[1]
    bm25 = c["bm25_feature"]
    if bm25 is not None and not 1 <= int(bm25) <= n_features:
        raise ConfigError("dataset.bm25_feature", bm25, f"expected a feature id in 1..{n_features} (the files of "
                          f"dataset {c['name']} have {n_features} features)")
    y_max = int(c["y_max"]) if c["y_max"] is not None else int(whole.labels.max(initial=0))
    ranges = {s: [int(p.labels.min(initial=0)), int(p.labels.max(initial=0))] for s, p in parsed.items()}
    docids = whole.docids if all(p.docids is not None for p in parsed.values()) else None
    return QuerySet(
        name=c["name"],
        features=whole.features,
        labels=whole.labels,
        query_offsets=whole.query_offsets,
        qids=whole.qids,
        split=split,
        y_max=y_max,
        bm25_column=-1 if bm25 is None else int(bm25) - 1,
        feature_ids=np.arange(1, n_features + 1, dtype=np.int32),
        info={
            "source": str(path),
            "files": {s: str(f) for s, f in files.items()},
            "split_by": split_by,
            "queries_merged": sum(p.queries_merged for p in parsed.values()),
            "duplicate_lines": sum(p.duplicate_lines for p in parsed.values()),
            "label_ranges": ranges if len({tuple(r) for r in ranges.values()}) > 1 else None,
        },
        docids=docids,
    )


def _concatenate(parts: list[LetorFile]) -> LetorFile:
    width = max(p.features.shape[1] for p in parts)
    n_docs = sum(p.labels.size for p in parts)
    features = np.zeros((n_docs, width), dtype=np.float32)
    row = 0
    for p in parts:
        features[row : row + p.labels.size, : p.features.shape[1]] = p.features
        row += p.labels.size
    counts = np.concatenate([np.diff(p.query_offsets) for p in parts])
    return LetorFile(
        features=features,
        labels=np.concatenate([p.labels for p in parts]),
        qids=np.concatenate([p.qids for p in parts]),
        query_offsets=offsets_from_counts(counts),
        path="+".join(p.path for p in parts),
        docids=np.concatenate([p.docids for p in parts]) if all(p.docids is not None for p in parts) else None,
    )
