"""Random-k: show a uniformly random K-subset of the entered documents in random order."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ltrjax.data.layout import Bucket, PaddedDataset
from ltrjax.online.policies.base import Policy, QueryView


class RandomK(Policy):
    name = "random_k"

    def __init__(self, data: PaddedDataset, seed: int = 0):
        self.seed = seed

    def session_scores(self, view: QueryView, key):
        return jax.random.uniform(key, view.counters.clicks.shape)

    def test_scores(self, params, bucket: Bucket, counters, warm: bool):
        """A fixed random ranking per query (the deterministic view of a random ranker)."""
        base = jax.random.PRNGKey(self.seed)
        keys = jax.vmap(lambda q: jax.random.fold_in(base, q))(bucket.query_index)
        return jax.vmap(lambda k: jax.random.uniform(k, (bucket.width,)))(keys) * jnp.ones(())
