"""The persistent XLA compilation cache: one place that turns it on, for ``ltrjax.run``, benchmarks and experiments.

A program compiled once is read back from disk by later processes with the same shapes, JAX version and
flags, so a user's second run (and every benchmark or experiment after the first) skips most compilation.
"""

from __future__ import annotations

import os

import jax

from ltrjax.data.cache import cache_root

MIN_COMPILE_SECONDS = 0.5  # programs that compile faster are not worth a disk write


def default_cache_dir(cache_dir: str | os.PathLike | None = None) -> str:
    """``<data cache root>/xla``: the data cache's root (``cache_dir``, else ``$LTRJAX_CACHE``, else
    ``~/.cache/ltrjax``) with an ``xla`` folder for the compiled programs."""
    return str(cache_root(cache_dir) / "xla")


def enable_compilation_cache(path: str | os.PathLike | None = None,
                             min_compile_seconds: float = MIN_COMPILE_SECONDS) -> str:
    """Persist compiled XLA programs under ``path`` (None: ``default_cache_dir()``); returns the folder used."""
    folder = str(path) if path is not None else default_cache_dir()
    jax.config.update("jax_compilation_cache_dir", folder)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_seconds))
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return folder
