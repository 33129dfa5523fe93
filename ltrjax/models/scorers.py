"""Flax scorers: linear and MLP document scorers, and EBRank's Beta-prior model."""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp


def uniform_init(high: float):
    """U(0, high) kernel initializer (EBRank's TorchLinearModel uses U(0, 4 * 5 / n_features))."""

    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, 0.0, high)

    return init


class MLPScorer(nn.Module):
    """x -> score; ``hidden=()`` is a linear model."""

    hidden: Sequence[int] = ()
    activation: str = "relu"
    kernel_high: float | None = None  # U(0, high) init for the output layer when set
    bias_init: float = 0.0

    @nn.compact
    def __call__(self, x):
        act = getattr(nn, self.activation)
        for width in self.hidden:
            x = act(nn.Dense(width)(x))
        kernel_init = uniform_init(self.kernel_high) if self.kernel_high else nn.initializers.lecun_normal()
        out = nn.Dense(1, kernel_init=kernel_init, bias_init=nn.initializers.constant(self.bias_init))(x)
        return out[..., 0]


class BetaPrior(nn.Module):
    """EBRank's prior: alpha = softplus(f_theta(x_nb)) + alpha_min > 0 (EBRank §4.3, Eq. 14).

    The paper's code uses an unconstrained linear alpha and drops alpha <= 0 from the loss; a
    softplus link keeps alpha positive everywhere so no NaN or negative alpha reaches scoring.
    """

    hidden: Sequence[int] = ()
    n_features: int = 1
    alpha_min: float = 1e-4

    @nn.compact
    def __call__(self, x):
        logits = MLPScorer(hidden=self.hidden, kernel_high=20.0 / max(self.n_features, 1), bias_init=0.01)(x)
        return jax.nn.softplus(logits) + self.alpha_min
