"""Shared test set-up: a persistent XLA cache so identical programs compile once per machine."""

import os

import jax
import pytest

jax.config.update(
    "jax_compilation_cache_dir",
    os.environ.get("LTRJAX_TEST_XLA_CACHE", os.path.expanduser("~/.cache/ltrjax/xla-tests")),
)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    """A fresh LETOR cache directory for one test (no hits from earlier runs)."""
    monkeypatch.setenv("LTRJAX_CACHE", str(tmp_path / "cache"))
