"""The retrain phase: a population's retrain inputs (``retrain_views``: every member's counters and entered masks
in dataset order, computed on the device block by block) and the retrain itself (``retrain``:
``Policy.update_population``), after the warm-up or after a segment (``retrain_after``)."""

from __future__ import annotations

import functools
import time
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

from ltrjax.online import memory, protocol, transfers
from ltrjax.online.member_blocks import MemberBlocks
from ltrjax.online.policies.base import MemberViews, Policy
from ltrjax.online.results import concat_logs
from ltrjax.online.retrain_documents import DocumentCells, RetrainDocuments, document_cells as layout_cells
from ltrjax.online.state import STAT_NAMES, member_in_dataset_order

if TYPE_CHECKING:
    from ltrjax.online.context import SimContext
    from ltrjax.online.trial import MainPhase


VIEW_BLOCK_BYTES = 1 << 26  # a retrain's dataset-order views are computed and copied at most this much at a time


@functools.partial(jax.jit, static_argnames=("names", "count"))
def _members_dataset_order_views(states, start, names, count):
    """Per bucket, members ``start .. start + count - 1``'s counters ``names`` (the others None) and entered masks
    in dataset order (a retrain's inputs), with a leading member axis; member after member (``lax.map``), one
    program for every block of ``count`` (``start`` is traced)."""
    return jax.lax.map(lambda i: member_in_dataset_order(states, i, names), start + jnp.arange(count))


def retrain_views(states, names: tuple[str, ...], n_members: int, cells: DocumentCells | None = None,
                  launch: bool = False) -> tuple[MemberViews, MemberViews]:
    """A retrain's per-member counters ``names`` and entered masks in dataset order, as ``MemberViews``: computed
    on the device and brought to the host when read, as many members at once as ``VIEW_BLOCK_BYTES`` holds
    (``MemberBlocks``: all of a population at MQ2007 size, one member at MSLR-30K size; one program per population).
    With the layout's ``cells`` (``sim.retrain_examples=device``) the counters also carry ``documents``: the eligible documents filtered on the device
    (``RetrainDocuments``). With ``launch`` the first block's program is launched at once (the device computes it
    while the host goes on), else when first read; not with ``cells``, whose retrain reads the documents instead."""
    slots = sum(int(np.prod(s.order.shape[1:])) for s in states)
    launched = {}  # start -> a block launched before it is read (dropped once fetched)

    def launch_block(start: int, count: int):
        return _members_dataset_order_views(tuple(states), np.int32(start), names, count)

    def fetch(start: int, count: int):
        return jax.device_get(launched.pop(start) if start in launched else launch_block(start, count))

    blocks = MemberBlocks(fetch, n_members, slots * (4 * len(names) + 1), VIEW_BLOCK_BYTES)
    if launch and cells is None:
        launched[0] = launch_block(0, blocks.count)

    def read(i: int, part: int):  # part 0: the counters, 1: the entered masks (only that part is sliced)
        block, at = blocks.read(i)
        return jax.tree_util.tree_map(lambda a: a[at], block[part])

    documents = (None if cells is None
                 else RetrainDocuments(states, names, n_members, cells, VIEW_BLOCK_BYTES).read)
    return (MemberViews(functools.partial(read, part=0), n_members, documents),
            MemberViews(functools.partial(read, part=1), n_members))


def document_cells(ctx: SimContext) -> DocumentCells:
    """The layout's cells for retrains that filter their documents on the device (made once: ``Caches``)."""
    if ctx.caches.document_cells is None:
        ctx.caches.document_cells = layout_cells(ctx.data)
    return ctx.caches.document_cells


def policy_views(ctx: SimContext, policy: Policy, states, n_members: int, launch: bool = False
                 ) -> tuple[MemberViews, MemberViews]:
    """A retrain's ``retrain_views`` of the counters ``policy`` reads (``launch``: its first block launched at once);
    with ``sim.retrain_examples=device`` the eligible documents are filtered on the device."""
    names = tuple(n for n in STAT_NAMES if n in policy.retrain_counters or n == "impressions")
    cells = document_cells(ctx) if ctx.config.retrain_examples == "device" else None
    return retrain_views(states, names, n_members, cells, launch)


def retrain(ctx: SimContext, policy: Policy, keys, params, hyper, states, logs, views=None):
    """Every member retrained at once (``Policy.update_population``) from its counters (``views``, else
    ``policy_views`` of ``states``) and ``logs``; returns (parameters, per-member train infos)."""
    counters, entered = views if views is not None else policy_views(ctx, policy, states, len(logs))
    return policy.update_population(keys, params, hyper, ctx.data, counters, entered, logs)


def retrain_after(ctx: SimContext, run: MainPhase, i: int, params, states, views=None):
    """The retrain after segment ``i`` on the sessions since the last one (a policy that does not train keeps
    its parameters; one that does not read logs gets None logs); the pending logs start afresh."""
    if run.policy.trains:
        tic = time.perf_counter()
        logs = [concat_logs(p) if run.collect_logs else None for p in run.pending]
        with transfers.declared_transfers():  # the examples are made on the host by design
            params, infos = retrain(ctx, run.policy, protocol.fold_member_keys(run.trials, run.trial_of, "train", i),
                                    params, run.hyper, states, logs, views)
            params = memory.shard(run.setup.retrained(params))
        memory.release_heap(ctx)
        run.timings["train"] += time.perf_counter() - tic
        for acc, info in zip(run.train_info, infos):
            acc.append(info)
    run.pending = [[] for _ in range(len(run.trial_of))]
    return params
