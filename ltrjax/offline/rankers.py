"""Flax scorers for the offline estimators: linear and MLP, scalar or d-dimensional output.

``Scorer`` maps features ``[..., F]`` to ``[..., out_dim]``; a scalar ranker squeezes the last
axis. ``GaussianBaseModel`` is Vectorization's base model v(x) = (mu(x), log sigma^2(x))
(Vectorization §5.1, Eq. 10).
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp


class Scorer(nn.Module):
    """Linear (``hidden=()``) or ELU MLP scorer with ``out_dim`` outputs."""

    hidden: Sequence[int] = ()
    out_dim: int = 1
    layer_norm: bool = False

    @nn.compact
    def __call__(self, x):
        for width in self.hidden:
            if self.layer_norm:
                x = nn.LayerNorm()(x)
            x = nn.elu(nn.Dense(width)(x))
        # A scalar linear scorer starts at zero (every score ties; ties are broken by the shuffled
        # document order). A d-dimensional embedding must start random: with identical columns the
        # d outputs, and Vectorization's observation vectors, would stay identical forever.
        zero = not self.hidden and self.out_dim == 1
        return nn.Dense(self.out_dim, kernel_init=nn.initializers.zeros if zero
                        else nn.initializers.lecun_normal())(x)


class GaussianBaseModel(nn.Module):
    """v(x) -> (mu, log sigma^2) in R^d x R^d (Vectorization Eq. 10; 256-elu, 64-elu, 2d)."""

    dim: int
    hidden: Sequence[int] = (256, 64)

    @nn.compact
    def __call__(self, x):
        for width in self.hidden:
            x = nn.elu(nn.Dense(width)(x))
        out = nn.Dense(2 * self.dim)(x)
        return out[..., : self.dim], out[..., self.dim :]


def make_scorer(kind: str, out_dim: int = 1, hidden: Sequence[int] = (64, 32)) -> Scorer:
    """``linear`` or ``mlp`` (ELU MLP with the given hidden widths)."""
    if kind == "linear":
        return Scorer(hidden=(), out_dim=out_dim)
    if kind == "mlp":
        return Scorer(hidden=tuple(hidden), out_dim=out_dim)
    raise ValueError(f"unknown ranker {kind!r}; expected linear or mlp")


def kernel_l2(params) -> jnp.ndarray:
    """sum ||W||^2 / 2 over Dense kernels (biases excluded)."""
    leaves = jax.tree_util.tree_leaves_with_path(params)
    total = jnp.float32(0.0)
    for path, leaf in leaves:
        if any(getattr(p, "key", None) == "kernel" for p in path):
            total = total + 0.5 * jnp.sum(leaf**2)
    return total
