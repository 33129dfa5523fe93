"""One tiny online run for the entry-point tests (test_run, test_run_record, test_collect, test_config,
test_sharding): the same dataset, sizes and static options everywhere, and the suite's persistent XLA cache
(tests/conftest.py) in every subprocess, so the programs of ``python -m ltrjax.run`` compile once per suite
(and are shared with in-process tests that build the same programs)."""

import os
import subprocess
import sys
from pathlib import Path

import jax

REPO = Path(__file__).resolve().parent.parent
# the data cache of the runs (parsed LETOR files) beside the suite's XLA cache
DATA_CACHE = Path(jax.config.jax_compilation_cache_dir) / "run"  # set by tests/conftest.py

# random_k and ebrank on 40 synthetic queries, top-K 4, one member per compiled chunk: a run of 1 trial and one of
# 2 trials (or 2 jobs of a sweep) build the same programs
TINY = ("+dataset=synthetic", "dataset.n_queries=40", "sim.sessions=200", "sim.n_updates=2",
        "sim.warmup_sessions_per_query=2", "sim.top_k=4", "experiment.tune=false", "layout.n_buckets=1",
        "population.max_members=1", "~algorithms.bm25", "~algorithms.ebrank_wo_explore",
        "~algorithms.ebrank_only_prior", "~algorithms.ebrank_only_behav")


def suite_cache_env() -> dict[str, str]:
    """The environment of a subprocess of the suite: none of the suite's ``LTRJAX_*`` variables, CPU only, this
    checkout on the path, and the suite's persistent XLA cache (read and written, every program; a
    ``python -m ltrjax.run`` keeps it with ``jax.compilation_cache=false``). XLA_FLAGS (the suite's optimisation
    level) is inherited, so the programs are the suite's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LTRJAX_")}
    env.update(JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO),
               JAX_COMPILATION_CACHE_DIR=str(jax.config.jax_compilation_cache_dir),
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0", JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
    return env


def ltrjax_run(*overrides: str) -> list[str]:
    """The command line of ``python -m ltrjax.run`` with ``overrides``, using the suite's XLA cache
    (``suite_cache_env``) and no progress bars."""
    return [sys.executable, "-m", "ltrjax.run", *overrides, "jax.compilation_cache=false", "progress=false"]


def run_ltrjax(*overrides: str, cwd: Path = REPO, timeout: float = 600, popen: bool = False, cpu_only: bool = True):
    """Run ``ltrjax_run(*overrides)`` in ``cwd`` with ``suite_cache_env()``, output captured as text: the finished
    ``CompletedProcess``, or with ``popen`` the running ``Popen`` (stdout and stderr piped). ``cpu_only=False``:
    without ``JAX_PLATFORMS``, as a user runs it (JAX probes every backend it knows)."""
    cmd = ltrjax_run(*overrides)
    env = suite_cache_env()
    if not cpu_only:
        env.pop("JAX_PLATFORMS")
    if popen:
        return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
