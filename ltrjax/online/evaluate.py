"""The evaluate phase: every member's Warm/Cold NDCG@K per query from its parameters and state (one compiled
program over every bucket: ``programs.compiled(policy)["evaluate"]``), launched (``launch_evaluation``) and brought
to the host (``evaluated``) separately so the host can work in between, and the split means of a member's values
(``split_means``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import numpy as np

from ltrjax.data.layout import PaddedDataset
from ltrjax.online import programs
from ltrjax.online.config import SPLITS
from ltrjax.online.policies.base import Policy

if TYPE_CHECKING:
    from ltrjax.online.context import SimContext


def evaluate(ctx: SimContext, policy: Policy, params, states, test_only: bool = False, prepared=None
             ) -> dict[str, np.ndarray]:
    """Warm/Cold NDCG@K per member and global query ``[P, n_queries]``; with ``test_only`` only the test
    queries are evaluated (the others are NaN). ``prepared``: per bucket the last segment's ``prepare`` output
    for these ``params`` (``segment.launch``), reused instead of recomputed (None: recomputed)."""
    return evaluated(ctx, launch_evaluation(ctx, policy, params, states, test_only, prepared))


def launch_evaluation(ctx: SimContext, policy: Policy, params, states, test_only: bool = False, prepared=None
                      ) -> tuple:
    """``evaluate``'s program, launched (the device computes it while the host goes on); ``evaluated`` brings
    its results."""
    n_members = jax.tree_util.tree_leaves(states[0])[0].shape[0]
    picked = [b for b in range(len(ctx.data.buckets)) if not test_only or len(ctx.test_rows[b])]
    pick = lambda xs: tuple(xs[b] for b in picked)  # noqa: E731
    aux = (None,) * len(picked) if prepared is None else pick(prepared)
    args = (ctx.protocol, params, pick(states), pick(ctx.data.buckets), pick(ctx.gains), pick(ctx.idcg))
    if test_only:  # one program for every bucket
        results = programs.compiled(policy)["evaluate_rows"](*args, pick(ctx.test_rows_device), aux)
    else:
        results = programs.compiled(policy)["evaluate"](*args, aux)
    return n_members, picked, test_only, results


def evaluated(ctx: SimContext, launched: tuple) -> dict[str, np.ndarray]:
    """The per-query Warm/Cold NDCG of a ``launch_evaluation``."""
    n_members, picked, test_only, results = launched
    out = {name: np.full((n_members, ctx.data.n_queries), np.nan, np.float32) for name in ("warm", "cold")}
    for b, (warm, cold) in zip(picked, jax.device_get(results)):
        query = np.asarray(ctx.data.buckets[b].query_index)
        query = query[ctx.test_rows[b]] if test_only else query
        out["warm"][:, query] = warm
        out["cold"][:, query] = cold
    return out


def split_means(data: PaddedDataset, per_query: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    """Mean Warm/Cold NDCG per split of one member's per-query values."""
    split = data.split_of_query
    return {name: {m: float(per_query[m][split == i].mean()) if np.any(split == i) else float("nan")
                   for m in ("warm", "cold")} for i, name in enumerate(SPLITS)}
