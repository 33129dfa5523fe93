"""Shared test set-up: a persistent XLA cache so identical programs compile once per machine."""

import os

# The suite is compile-bound (XLA compiles thousands of programs, most run for milliseconds), so it compiles them the
# cheap way: LLVM's O0 backend (about 30 % faster than XLA's default level) and XLA's older CPU fusion emitters
# (`--xla_cpu_use_fusion_emitters=false`: on top of O0, about 25 % less time in a cold suite; docs/testing.md).
# Neither reassociates floating point; the last float32 bit may still differ from a run at XLA's defaults (e.g. where
# a multiply-add becomes a fused one), which is within every test's tolerance, and comparisons inside the suite run
# with one set of flags. Set before JAX starts its backend; subprocesses inherit them.
# LTRJAX_TEST_XLA_OPT=default keeps XLA's own settings (docs/testing.md).
SUITE_XLA_FLAGS = {"xla_backend_optimization_level": "0", "xla_cpu_use_fusion_emitters": "false"}
if os.environ.get("LTRJAX_TEST_XLA_OPT", "0") != "default":
    _flags = os.environ.get("XLA_FLAGS", "")
    os.environ["XLA_FLAGS"] = " ".join([_flags] + [f"--{name}={value}" for name, value in SUITE_XLA_FLAGS.items()
                                                   if name not in _flags]).strip()

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

from ltrjax.experiment import configure_process  # noqa: E402

configure_process()  # as the entry points: float32 products; tracing spends less time in Python's collector


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    """A fresh LETOR cache directory for one test (no hits from earlier runs)."""
    monkeypatch.setenv("LTRJAX_CACHE", str(tmp_path / "cache"))


# --------------------------------------------------------------------------- opt-in compile log
# LTRJAX_TEST_COMPILE_LOG=FILE: every JAX trace / lower / backend-compile event of the run, one JSON line each with
# the test that caused it (appended by every xdist worker), to find where a cold suite spends its compile time.
_COMPILE_LOG = os.environ.get("LTRJAX_TEST_COMPILE_LOG")
_CURRENT_TEST = ["(collection)"]

if _COMPILE_LOG:
    import json

    def _log_compile_event(event: str, duration: float, fun_name: str = "?", **_):
        if event.startswith("/jax/core/compile/"):
            with open(_COMPILE_LOG, "a") as f:
                f.write(json.dumps({"test": _CURRENT_TEST[0], "event": event.rsplit("/", 1)[-1],
                                    "fun": str(fun_name), "seconds": round(float(duration), 4)}) + "\n")

    jax.monitoring.register_event_duration_secs_listener(_log_compile_event)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        _CURRENT_TEST[0] = item.nodeid
        try:
            return (yield)
        finally:
            _CURRENT_TEST[0] = "(between tests)"
