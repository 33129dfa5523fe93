"""The persistent XLA compilation cache: one place that turns it on, for ``ltrjax.run``, benchmarks and experiments.

A program compiled once is read back from disk by later processes with the same shapes, JAX version and
flags, so a user's second run (and every benchmark or experiment after the first) skips most compilation.
"""

from __future__ import annotations

import os

import jax

from ltrjax.data.cache import cache_root

# Every program is written, however fast it compiles: a run compiles ~100 small programs (eager ops, RNG draws)
# that together cost as much as the big ones. At 0.5 s, a second end_to_end run still compiled 106 of its 114
# programs and took 0.46x the first; at 0 it compiled none and took 0.27x (docs/performance.md).
MIN_COMPILE_SECONDS = 0.0


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


def ensure_compilation_cache(path: str | os.PathLike | None = None) -> str:
    """The persistent cache for a script (experiments, benchmarks): the folder this process already uses (a test
    session's, a caller's), else ``enable_compilation_cache(path)``. Returns the folder."""
    current = getattr(jax.config, "jax_compilation_cache_dir", None)
    if current and path is None:
        return str(current)
    return enable_compilation_cache(path)
