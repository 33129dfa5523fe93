"""Members mapped in fixed blocks: a population's per-member function computed the same way at any population size.

A vmapped product or reduction rounds differently from an unbatched one, and from one of another batch width. So the
members of a population go through ``fn`` in blocks of exactly ``block``: the population is padded (with copies of its
first member, whose results are dropped) to whole blocks, and ``jax.lax.map`` runs one block after another, each
block ``vmap``-ped. Every member is then computed by the same batched program, alone or at any place of any
population. The block's inputs and outputs are fenced with ``jax.lax.optimization_barrier``: without it XLA fused
the block with its surroundings, which differ between a population of exactly one block (no padding) and others,
and a GPU rounded 7 of 8 members of EBRank's prior differently (docs/results/gpu_h100/). ``block=1`` maps ``fn``
over the members unbatched (no padding, no fence): the CPU default.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

PyTree = Any


def map_in_blocks(fn: Callable, members: PyTree, block: int, *shared: PyTree) -> PyTree:
    """``fn(member, *shared)`` for every member of ``members`` (a pytree with a leading member axis), ``block``
    members vmapped at a time; ``shared`` (e.g. the dataset's features) is the same for every member."""
    if block == 1:
        return jax.lax.map(lambda member: fn(member, *shared), members)
    n = jax.tree_util.tree_leaves(members)[0].shape[0]
    padded = -(-n // block) * block
    blocks = jax.tree_util.tree_map(
        lambda a: jnp.concatenate([a, jnp.repeat(a[:1], padded - n, axis=0)]).reshape((-1, block) + a.shape[1:]),
        members)

    def one_block(members_of_block):
        members_of_block, fenced = jax.lax.optimization_barrier((members_of_block, shared))
        out = jax.vmap(lambda member: fn(member, *fenced))(members_of_block)
        return jax.lax.optimization_barrier(out)

    out = jax.lax.map(one_block, blocks)
    return jax.tree_util.tree_map(lambda a: a.reshape((-1,) + a.shape[2:])[:n], out)
