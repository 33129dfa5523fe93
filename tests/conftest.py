"""Shared test set-up: a persistent XLA cache so identical programs compile once per machine."""

import os

import jax

jax.config.update(
    "jax_compilation_cache_dir",
    os.environ.get("LTRJAX_TEST_XLA_CACHE", os.path.expanduser("~/.cache/ltrjax/xla-tests")),
)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
