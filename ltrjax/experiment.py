"""Dispatch a Hydra config to its experiment, after checking it and loading the dataset it names."""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import DictConfig

from ltrjax.schema import conf_dir, validate, write_resolved_config

CONF_DIR = conf_dir()
log = logging.getLogger("ltrjax")


def dataset_config(cfg: DictConfig) -> DictConfig:
    """The run's dataset config; without ``+dataset=...`` the embedded synthetic default."""
    from omegaconf import OmegaConf

    if cfg.get("dataset") is not None:
        return cfg.dataset
    return OmegaConf.load(CONF_DIR / "dataset" / "synthetic.yaml")


def cache_dir(cfg: DictConfig) -> str | None:
    return cfg.get("data", {}).get("cache_dir") or None


def enable_compilation_cache(cfg: DictConfig) -> None:
    """Persist compiled XLA programs between runs (``jax.compilation_cache``), under the data cache's ``xla`` folder
    (``ltrjax.compile_cache``, the one switch every script uses)."""
    if not cfg.get("jax", {}).get("compilation_cache", False):
        return
    from ltrjax.compile_cache import default_cache_dir
    from ltrjax.compile_cache import enable_compilation_cache as enable

    enable(default_cache_dir(cache_dir(cfg)))


def run_experiment(cfg: DictConfig, out_dir: Path, overrides=(), cwd: Path | None = None):
    """Check ``cfg`` (``ltrjax.schema.validate``: a ``ConfigError`` before any data is loaded), record the resolved
    config in ``out_dir/resolved_config.yaml``, load the dataset and run the experiment; returns its objective.
    ``overrides`` are the command line's (``validate`` refuses groups the experiment does not read); relative data
    paths are taken from ``cwd`` (default: the working directory)."""
    from ltrjax.data.registry import load_dataset

    cfg = validate(cfg, overrides, cwd=cwd or Path.cwd())
    write_resolved_config(cfg, out_dir)
    logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)  # no "no TPU found" noise
    enable_compilation_cache(cfg)
    kind = cfg.experiment.kind
    if kind in ("online", "online_table"):
        from ltrjax.runner import run_online

        queryset = load_dataset(cfg.dataset, seed=cfg.seed, cache_dir=cache_dir(cfg))
        return run_online(cfg, out_dir, queryset)
    if kind == "offline_fidelity":  # Vectorization / PRS fidelity (README "Offline fidelity")
        from ltrjax.offline.fidelity_experiment import run_fidelity

        return run_fidelity(cfg, out_dir)
    from ltrjax.offline.experiment import run_offline

    return run_offline(cfg, out_dir)
