"""Flax scorers for the offline estimators: linear and MLP, scalar or d-dimensional output; the
pass-through ``ScoreInput`` of the tree ensembles (``ranker: lambdamart``, ``ltrjax.offline.gbdt``).

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


RANKERS = ("linear", "mlp", "lambdamart")


class ScoreInput(nn.Module):
    """The pass-through scorer of the tree ensembles (``ltrjax.offline.gbdt``): its input already is the score,
    ``[..., 1] -> [..., 1]``, so an estimator's loss on it is a function of the scores alone."""

    @nn.compact
    def __call__(self, x):
        return x


def make_scorer(kind: str, out_dim: int = 1, hidden: Sequence[int] = (64, 32)) -> nn.Module:
    """``linear``, ``mlp`` (ELU MLP with the given hidden widths) or ``lambdamart`` (scalar only: the
    ``ScoreInput`` its estimators' losses are written on; the trees live in ``ltrjax.offline.gbdt``)."""
    if kind == "linear":
        return Scorer(hidden=(), out_dim=out_dim)
    if kind == "mlp":
        return Scorer(hidden=tuple(hidden), out_dim=out_dim)
    if kind == "lambdamart":
        if out_dim != 1:
            raise ValueError(f"ranker 'lambdamart' scores scalars; a {out_dim}-dimensional output needs linear or mlp")
        return ScoreInput()
    raise ValueError(f"unknown ranker {kind!r}; expected one of {RANKERS}")


def kernel_l2(params) -> jnp.ndarray:
    """sum ||W||^2 / 2 over Dense kernels (biases excluded)."""
    leaves = jax.tree_util.tree_leaves_with_path(params)
    total = jnp.float32(0.0)
    for path, leaf in leaves:
        if any(getattr(p, "key", None) == "kernel" for p in path):
            total = total + 0.5 * jnp.sum(leaf**2)
    return total
