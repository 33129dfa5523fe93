"""Shared test set-up: a persistent XLA cache so identical programs compile once per machine."""

import os

# The suite is compile-bound (XLA compiles hundreds of programs, most run for milliseconds): LLVM's O0 backend
# compiles them about 30 % faster (measured on two of the longest tests, cold cache). XLA emits the arithmetic and no
# level reassociates floating point; the last float32 bit may still differ (e.g. where a multiply-add becomes a
# fused one), which is within every test's tolerance, and comparisons inside the suite run at one level. Set before
# JAX starts its backend; subprocesses inherit it.
# LTRJAX_TEST_XLA_OPT=default keeps XLA's own level (docs/testing.md).
if os.environ.get("LTRJAX_TEST_XLA_OPT", "0") != "default" and "xla_backend_optimization_level" not in os.environ.get(
        "XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0").strip()

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update(
    "jax_compilation_cache_dir",
    os.environ.get("LTRJAX_TEST_XLA_CACHE", os.path.expanduser("~/.cache/ltrjax/xla-tests")),
)
# Every program is written, however fast it compiles (as ltrjax.compile_cache does for runs): at O0 most programs
# compile in under 0.5 s, and the same program is built again by the other xdist worker and by every test that
# builds its own Simulator or policy; at 0 those later builds read it back from disk.
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    """A fresh LETOR cache directory for one test (no hits from earlier runs)."""
    monkeypatch.setenv("LTRJAX_CACHE", str(tmp_path / "cache"))
