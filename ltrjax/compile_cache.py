"""The persistent XLA compilation cache: one place that turns it on, for ``ltrjax.run``, benchmarks and experiments.

A program compiled once is read back from disk by later processes with the same shapes, JAX version and
flags, so a user's second run (and every benchmark or experiment after the first) skips most compilation.
"""

from __future__ import annotations

import logging
import os

import jax

from ltrjax.data.cache import cache_root

# Every program is written, however fast it compiles: a run compiles ~100 small programs (eager ops, RNG draws)
# that together cost as much as the big ones. At 0.5 s, a second end_to_end run still compiled 106 of its 114
# programs and took 0.46x the first; at 0 it compiled none and took 0.27x (docs/performance.md).
MIN_COMPILE_SECONDS = 0.0
log = logging.getLogger("ltrjax")
_warned: list = []  # the first cache entry a write failed for (remove_failed_cache_writes says it once)


def default_cache_dir(cache_dir: str | os.PathLike | None = None) -> str:
    """``<data cache root>/xla``: the data cache's root (``cache_dir``, else ``$LTRJAX_CACHE``, else
    ``~/.cache/ltrjax``) with an ``xla`` folder for the compiled programs."""
    return str(cache_root(cache_dir) / "xla")


def enable_compilation_cache(path: str | os.PathLike | None = None,
                             min_compile_seconds: float = MIN_COMPILE_SECONDS) -> str:
    """Persist compiled XLA programs under ``path`` (None: ``default_cache_dir()``); returns the folder used."""
    folder = str(path) if path is not None else default_cache_dir()
    remove_failed_cache_writes()
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


def remove_failed_cache_writes() -> None:
    """JAX's file cache writes an entry in place (``jax._src.lru_cache.LRUCache.put``: ``Path.write_bytes``), so a
    write the disk refuses (full, a file size limit) leaves a truncated entry that every later run reads and warns
    about. Wrapped here (once, when the class is there): a failed write removes its partial entry and says so in one
    log line, once per process; the run goes on without caching that program (the run's own next write then
    reports the disk: ``ltrjax.run``)."""
    try:
        from jax._src import lru_cache
    except ImportError:  # another JAX layout: its own writes stand
        return
    cls = getattr(lru_cache, "LRUCache", None)
    suffix = getattr(lru_cache, "_CACHE_SUFFIX", None)
    if cls is None or suffix is None or getattr(cls.put, "removes_failed_writes", False):
        return
    put = cls.put

    def put_or_remove(self, key: str, value: bytes) -> None:
        entry = self.path / f"{key}{suffix}"
        existed = entry.exists()
        try:
            put(self, key, value)
        except OSError as err:
            if not existed:
                entry.unlink(missing_ok=True)
            if not _warned:
                _warned.append(entry)
                log.warning("the compilation cache could not write %s (%s): removed; programs that are not cached "
                            "compile again in later runs", entry, err.strerror or err)

    put_or_remove.removes_failed_writes = True
    cls.put = put_or_remove
