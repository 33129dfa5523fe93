"""An MLP with Monte Carlo dropout on its last hidden layer (UCBRank §5.2.1, Eq. 15-16).

``Dense(32, sigmoid) -> Dense(32, sigmoid) -> Dropout(0.5) -> Dense(1)`` as in the UCBRank code
(``utils/nnmodel.py``, seed-code.md §2.2). Dropout masks are explicit arrays (inverted dropout:
entries 0 or 1/keep, keep = 1 - rate), drawn from explicit keys:

- MC dropout (Eq. 16): ONE mask of shape (hidden,) per forward pass, shared by every document
  (the code's ``dropout_fixed`` layer), so a pass is one sub-network scoring all documents;
  N passes give N scores per document, whose mean and std (1/N, Eq. 16) estimate f and es.
  Dropout sits after the last hidden layer only, so the hidden features are computed once and
  the N passes are one [.., hidden] x [hidden, N] product.
- Training: ordinary dropout, an independent mask per example and step (the code trains with
  ``tf.keras.layers.Dropout``); see ``MCDropoutMLP.loss`` for where its randomness comes from.
- Serving/evaluation without exploration: the deterministic forward (no mask; inverted dropout
  needs no rescaling at inference).
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

ACTIVATIONS = ("sigmoid", "tanh", "relu", "elu", "gelu", "silu", "softplus", "leaky_relu")  # flax.linen names
N_PASSES = 10  # UCBRank §6.1.4: N = 10 inference trials


class DropoutMLP(nn.Module):
    """x -> score with an optional dropout mask (broadcastable to [..., hidden[-1]]) on the last hidden layer."""

    hidden: Sequence[int] = (32, 32)
    activation: str = "sigmoid"

    def setup(self):
        if not tuple(self.hidden):
            raise ValueError("MC dropout needs at least one hidden layer")
        self.layers = [nn.Dense(int(w)) for w in self.hidden]
        self.out = nn.Dense(1)

    def features(self, x):
        """The last hidden layer's activations [..., hidden[-1]] (what dropout masks)."""
        act = getattr(nn, self.activation)
        for layer in self.layers:
            x = act(layer(x))
        return x

    def __call__(self, x, mask=None):
        h = self.features(x)
        if mask is not None:
            h = h * mask
        return self.out(h)[..., 0]


def dropout_masks(key: jax.Array, n: int, width: int, rate: float) -> jax.Array:
    """``n`` inverted-dropout masks [n, width]: 0 with probability ``rate``, else 1 / (1 - rate)."""
    keep = 1.0 - rate
    return jax.random.bernoulli(key, keep, (n, width)).astype(jnp.float32) / keep


def mc_moments(samples: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Mean and std over the last axis (passes), std with 1/N as in Eq. 16."""
    mean = jnp.mean(samples, axis=-1)
    return mean, jnp.sqrt(jnp.mean((samples - mean[..., None]) ** 2, axis=-1))


def mc_samples(module: DropoutMLP, params, x: jax.Array, masks: jax.Array) -> jax.Array:
    """Scores of every pass [..., N]: pass i uses ``masks[i]`` for every row of ``x``."""
    h = module.apply(params, x, method=DropoutMLP.features)
    out = params["params"]["out"]
    return jnp.einsum("...h,nh->...n", h, masks * out["kernel"][:, 0]) + out["bias"][0]


def mc_dropout_scores(params, x: jax.Array, key: jax.Array, n_passes: int = N_PASSES, rate: float = 0.5,
                      module: DropoutMLP | None = None) -> tuple[jax.Array, jax.Array]:
    """(mean, std) of the MC-dropout scores (Eq. 15-16) of ``x`` [..., n_in] over ``n_passes`` shared masks."""
    module = module or DropoutMLP()
    masks = dropout_masks(key, n_passes, int(tuple(module.hidden)[-1]), rate)
    return mc_moments(mc_samples(module, params, x, masks))


_SEED_BASE = 0x5EED


def example_masks(seed: jax.Array, width: int, rate: float) -> jax.Array:
    """Independent training masks [B, width], one per example, fresh at every optimizer step.

    ``seed`` (uint32 [B]) is drawn per example from the retrain's key. The shared fit loop passes
    no key to a loss, so the step enters through the minibatch itself: its (randomly shuffled)
    composition and order, hashed as sum_j seed_j (j + 1) mod 2^32, differ from step to step and
    key one [B, width] Bernoulli draw.
    """
    seed = seed.astype(jnp.uint32)
    step = jnp.sum(seed * (jnp.arange(seed.shape[0], dtype=jnp.uint32) + jnp.uint32(1)), dtype=jnp.uint32)
    keep = 1.0 - rate
    key = jax.random.fold_in(jax.random.PRNGKey(_SEED_BASE), step)
    return jax.random.bernoulli(key, keep, (seed.shape[0], width)).astype(jnp.float32) / keep


class MCDropoutMLP:
    """A ``DropoutMLP`` with its input size, dropout rate and number of MC passes, and the MSE loss."""

    def __init__(self, n_in: int, hidden: Sequence[int] = (32, 32), activation: str = "sigmoid",
                 rate: float = 0.5, n_passes: int = N_PASSES):
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"dropout rate must be in [0, 1), got {rate}")
        self.n_in = int(n_in)
        self.module = DropoutMLP(hidden=tuple(int(h) for h in hidden), activation=activation)
        self.width = int(self.module.hidden[-1])
        self.rate = float(rate)
        self.n_passes = int(n_passes)

    def init(self, key):
        return self.module.init(key, jnp.zeros((1, self.n_in), jnp.float32))

    def __call__(self, params, x):
        """Deterministic f(x) (no dropout): serving without exploration and evaluation."""
        return self.module.apply(params, x)

    def masks(self, key):
        """The ``n_passes`` shared MC masks [N, width] of one refresh."""
        return dropout_masks(key, self.n_passes, self.width, self.rate)

    def samples(self, params, x, masks):
        return mc_samples(self.module, params, x, masks)

    def mc_scores(self, params, x, key):
        """(mean, std) over ``n_passes`` masks drawn from ``key`` (Eq. 15-16)."""
        return mc_moments(self.samples(params, x, self.masks(key)))

    def loss(self, params, batch):
        """Per-example squared error; with dropout when the batch carries per-example ``seed``s
        (training), deterministic otherwise (validation, as Keras evaluates val_mse)."""
        if "seed" in batch:
            mask = example_masks(batch["seed"], self.width, self.rate)
            pred = self.module.apply(params, batch["features"], mask)
        else:
            pred = self(params, batch["features"])
        return (pred - batch["target"]) ** 2
