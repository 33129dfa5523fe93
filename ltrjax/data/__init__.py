"""Data layer: LETOR reader and cache, dataset registry, preprocessing, synthetic generator."""

from .errors import DataFormatError, DatasetNotFoundError
from .letor import LetorFile, parse_letor_bytes, read_letor
from .preprocess import preprocess, query_minmax_normalize
from .queryset import SPLIT_NAMES, QuerySet, random_split
from .registry import dataset_config, load_dataset, project_root, resolve_data_path
from .synthetic import PRESETS, SyntheticParams, generate_synthetic

__all__ = [
    "DataFormatError",
    "DatasetNotFoundError",
    "LetorFile",
    "PRESETS",
    "QuerySet",
    "SPLIT_NAMES",
    "SyntheticParams",
    "dataset_config",
    "generate_synthetic",
    "load_dataset",
    "parse_letor_bytes",
    "preprocess",
    "project_root",
    "query_minmax_normalize",
    "random_split",
    "read_letor",
    "resolve_data_path",
]
