"""Float32 matrix products on every backend.

JAX's default precision for a float32 matrix product is the backend's fastest: full float32 on a CPU, but on an
NVIDIA GPU (Ampere and later) TensorFloat-32, a 10-bit mantissa. Measured on an H100: EBRank's prior alpha through
a batched product differed from the same product computed one member at a time by up to 3.8e-4 relative
(docs/results/gpu_h100/), so results would depend on the backend by more than float32 rounding. The entry points
(``python -m ltrjax.run``: ``jax.matmul_precision``, the benchmarks and experiment scripts, the tests) set
``"highest"``: float32 products everywhere (no change on a CPU, where the results were bit for bit the same).
Python-API users on a GPU call ``set_matmul_precision()`` themselves; importing ltrjax changes no JAX setting.
"""

from __future__ import annotations

import jax

MATMUL_PRECISIONS = ("highest", "high", "default")  # float32; bf16x3 (GPU); the backend's fastest (TF32 on a GPU)
DEFAULT_MATMUL_PRECISION = "highest"  # jax.matmul_precision's default (ltrjax.schema.JaxConfig)


def set_matmul_precision(precision: str = DEFAULT_MATMUL_PRECISION) -> None:
    """Set JAX's default precision of float32 matrix products for this process (``jax_default_matmul_precision``)."""
    if precision not in MATMUL_PRECISIONS:
        raise ValueError(f"matmul precision {precision!r}: expected one of {MATMUL_PRECISIONS}")
    jax.config.update("jax_default_matmul_precision", precision)
