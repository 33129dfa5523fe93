"""Python's cyclic garbage collector, run less often while JAX traces and lowers programs.

Tracing and lowering a program allocates hundreds of thousands of short-lived Python objects (tracers, jaxpr
equations, MLIR operations) beside a heap that already holds the imported libraries, and CPython's collector scans
its youngest generation every 700 net allocations (``gc.get_threshold()``'s first number), its older ones every
10 of those. Measured on the 2-core CPU (one MQ2007-sized EBRank trial, ``benchmarks/end_to_end.py``, alone):
with the persistent cache warm the run took 1.69-1.72 s with a first threshold of 50,000 against 1.98-2.02 s with
700, and 6.5-6.8 s against 7.1-7.4 s from a cold cache; results are the same (nothing depends on when cyclic garbage
is freed). Memory freed by reference counting, which is nearly all of it (arrays), is freed as before.

The entry points (``python -m ltrjax.run``, the benchmarks, the experiment scripts, the tests) call
``relax_garbage_collection``; importing ltrjax changes no global state, so a Python-API user may call it too.
"""

from __future__ import annotations

import gc

FIRST_GENERATION_THRESHOLD = 50_000  # CPython's default: 700


def relax_garbage_collection(first_generation: int = FIRST_GENERATION_THRESHOLD) -> None:
    """Raise the collector's first-generation threshold to ``first_generation`` (never lower it); the older
    generations' thresholds are kept."""
    current, older, oldest = gc.get_threshold()
    gc.set_threshold(max(int(first_generation), current), older, oldest)
