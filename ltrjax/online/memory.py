"""Memory and devices: how many members one compiled chunk holds (``chunk_size``: the bytes of a member's state,
segment and policy values against the budget), the members' placement over the devices (``shard``,
``pad_to_devices``, ``per_member``) and returning freed heap pages to the OS (``release_heap``)."""

from __future__ import annotations

import functools
import logging
import os
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ltrjax.constraints import ConfigError
from ltrjax.online import protocol
from ltrjax.online.policies.base import Policy
from ltrjax.online.state import STAT_NAMES, DocCounters, kept_counters

if TYPE_CHECKING:
    from ltrjax.online.context import SimContext
    from ltrjax.online.plan import PlanMemory

log = logging.getLogger("ltrjax")


def pad_to_devices(keys: list, hypers: list, n_devices: int) -> tuple[list, list]:
    """The members padded with copies of the last one to a multiple of ``n_devices`` (equal shards)."""
    if n_devices > 1 and len(keys) % n_devices:
        pad = n_devices - len(keys) % n_devices
        return keys + [keys[-1]] * pad, hypers + [hypers[-1]] * pad
    return keys, hypers


def per_member(box: list, trial_of: np.ndarray):
    """Every member's copy (``[M, ...]`` leaves, ``leaf[trial_of]``) of the per-trial pytree (``[T, ...]`` leaves) in
    the one-element list ``box``, which it empties: each trial leaf is dropped once its member leaf exists, so the
    expansion holds the members' copies and one trial leaf, not both whole trees (at MSLR-30K shape a state is 0.2 GB
    per trial or member). Host and CPU leaves are copied by NumPy (then put on the device): indexing a JAX array
    eagerly compiles a few small programs per leaf shape, ~3 s per MSLR-30K-shaped population on a 2-core CPU."""
    leaves, treedef = jax.tree_util.tree_flatten(box.pop())
    out = []
    while leaves:
        leaf = leaves.pop(0)
        on_host = isinstance(leaf, np.ndarray) or all(d.platform == "cpu" for d in leaf.devices())
        out.append(jax.device_put(np.asarray(leaf)[trial_of]) if on_host else leaf[trial_of])
    return jax.tree_util.tree_unflatten(treedef, out)


def member_sharding() -> NamedSharding | None:
    """Shards a leading member axis over all devices (None on one device)."""
    if jax.device_count() < 2:
        return None
    return NamedSharding(Mesh(np.asarray(jax.devices()), ("members",)), PartitionSpec("members"))


def physical_memory() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def size_text(n_bytes: float) -> str:
    """``n_bytes`` in MiB below a GiB, else in GiB."""
    return f"{n_bytes / (1 << 20):.1f} MiB" if n_bytes < 1 << 30 else f"{n_bytes / (1 << 30):.2f} GiB"


def available_memory() -> int:
    """Memory the OS can still give this process (``MemAvailable`` of /proc/meminfo; elsewhere a quarter of
    the physical memory)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return physical_memory() // 4


def memory_budget_default() -> int:
    """A population's default memory budget (``population.memory_gb=null``): half the memory still available —
    the host's (``available_memory``), and on an accelerator also its free device memory (``memory_stats``: the
    limit less what is in use), whichever is smaller, since the members' state and segment buffers live there."""
    free = available_memory()
    device = jax.devices()[0]
    if device.platform != "cpu":
        stats = device.memory_stats() or {}
        if "bytes_limit" in stats:
            free = min(free, int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0)))
    return free // 2


@functools.lru_cache(maxsize=None)
def _malloc_trim():
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc (macOS, musl, Windows)
        return None


# a simulator whose buckets hold at least this many document slots returns freed heap pages after its warm-ups, retrains
# and chunks (``release_free_heap``): MSLR-30K shape has 6.5M (about 0.5 GB returned per retrain), MQ2007 shape 0.1M,
# where a trim returns little and costs ~6 ms, 4.5 s of the 35-member sweep's 1,330 retrains
HEAP_TRIM_SLOTS = 1 << 20


def release_free_heap() -> None:
    """Give the C heap's free pages back to the OS (glibc's ``malloc_trim``; elsewhere nothing). A retrain's counters
    and examples, a segment's outputs and XLA's compile-time buffers are freed into the heap, which glibc keeps
    (measured: ~0.5 GB after a retrain at MSLR-30K shape) and the process's resident memory and peak count; called
    after the data is laid out, and after the warm-up, every retrain and every chunk of a simulator with at least
    ``HEAP_TRIM_SLOTS`` document slots (``Simulator.release_heap``)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def release_heap(ctx: SimContext) -> None:
    """``release_free_heap`` after a warm-up, retrain or chunk, for a simulator of at least ``HEAP_TRIM_SLOTS``
    document slots (``SimContext.trims_heap``); below that a trim returns little and costs more."""
    if ctx.trims_heap:
        release_free_heap()


def shard(tree):
    """Place a member-leading pytree sharded over the devices (unchanged on one device, or when the
    member count does not divide evenly, e.g. a warm-up population of fewer trials than devices)."""
    sharding = member_sharding()
    leaves = jax.tree_util.tree_leaves(tree)
    if sharding is None or not leaves or leaves[0].shape[0] % jax.device_count():
        return tree
    return jax.device_put(tree, sharding)


def aux_bytes(ctx: SimContext, policy: Policy) -> int:
    """The bytes of one member's ``prepare`` output over every bucket (shapes only: ``jax.eval_shape``, nothing
    is computed). A population keeps one per member (stacked, in entry order), so it counts per member. Kept per
    policy (``Caches.aux_bytes``): tracing ``prepare`` over every bucket again for every population would cost
    seconds."""
    known = ctx.caches.aux_bytes.get(policy)
    if known is not None:
        return known
    params = jax.eval_shape(lambda key: policy.init(key, ctx.data), jax.ShapeDtypeStruct((2,), jnp.uint32))
    total = 0
    for bucket in ctx.data.buckets:
        def laid_out(p, b=bucket):  # the entry-order layout a population stacks (per document: on slots)
            aux = policy.prepare(p, b, DocCounters.zeros(b.labels.shape))
            return jax.tree_util.tree_map(lambda a: b.on_slots(a, axis=0), aux) if policy.prepared_per_document \
                else aux

        aux = jax.eval_shape(laid_out, params)
        total += sum(int(np.prod(a.shape)) * a.dtype.itemsize for a in jax.tree_util.tree_leaves(aux))
    ctx.caches.aux_bytes[policy] = total
    return total


def member_bytes(ctx: SimContext, memo: PlanMemory, policy: Policy | None = None) -> int:
    """A rough upper bound of the memory one member needs (state, one segment's inputs and outputs, and,
    given the policy, twice its ``prepare`` output: the stacked entry-order copy the scan reads and the one the
    segment returns for evaluation, or the values it was laid out from)."""
    k = ctx.config.top_k
    n_main = protocol.session_counts(ctx)[1]
    per_segment = n_main / max(ctx.config.n_segments, 1)
    state = state_bytes(ctx, policy)
    steps = max(memo.steps.get("main", 0), int(per_segment / max(sum(ctx.n_lanes), 1)) + 1)
    segment = sum(steps * lanes * (4 * ctx.uniform_rows * k + 16 + 4 + 5 * k) for lanes in ctx.n_lanes)
    # x4.5: calibrated on synthetic_mslr30k at 3,000 queries (1 vs 7 EBRank members: 108 MB more per member,
    # with x3 this estimated 72 MB)
    aux = 2 * aux_bytes(ctx, policy) if policy is not None else 0
    return int(4.5 * (state + segment) + 64 * per_segment) + aux


def state_bytes(ctx: SimContext, policy: Policy | None = None) -> int:
    """One member's ``BucketState`` bytes over every bucket: the counters the policy keeps (all six without
    a policy) and the order, rank and entry-session planes, 4 bytes per ``[query, slot]``."""
    planes = len(kept_counters(policy.counters_read)) if policy is not None else len(STAT_NAMES)
    return sum(b.n_queries * b.width * (planes + 3) * 4 for b in ctx.data.buckets)


def chunk_size(ctx: SimContext, memo: PlanMemory, n_members: int, max_members: int | None = None,
               policy: Policy | None = None) -> int:
    """Members per compiled chunk: within the cap, the memory budget (``member_bytes``, with the policy's
    per-member values when it is given) and, on a CPU, the state budget (``state_bytes``), and balanced, so the
    padded last chunk wastes at most one member per chunk (21 members that fit 13 at a time run as 11 + 10,
    not 13 + 8 padded to 13)."""
    cap = max_members or ctx.max_members or n_members
    fits = max(1, ctx.memory_budget // max(member_bytes(ctx, memo, policy), 1))
    if ctx.state_budget is not None:
        fits = min(fits, max(1, ctx.state_budget // max(state_bytes(ctx, policy), 1)))
    most = int(max(1, min(n_members, cap, fits)))
    n_chunks = -(-n_members // most)
    return -(-n_members // n_chunks)


def check_fits(ctx: SimContext, memo: PlanMemory, policy: Policy) -> int:
    """The estimated bytes of one member of ``policy`` (``member_bytes``); ``ConfigError`` on
    ``population.memory_gb`` when even the smallest chunk, a single member, does not fit the memory budget."""
    one = member_bytes(ctx, memo, policy)
    gib = 1 << 30
    if one > ctx.memory_budget:
        raise ConfigError("population.memory_gb", float(f"{ctx.memory_budget / gib:.3g}"),
                          f"one member of {policy.name} needs about {one / (1 << 20):.1f} MiB (estimated: "
                          f"simulator state, one segment of sessions and the policy's per-member values) and "
                          f"the smallest chunk is one member; raise population.memory_gb (null: half the "
                          f"available memory), or reduce the dataset or sim.sessions")
    return one


def announce(ctx: SimContext, memo: PlanMemory, policy: Policy, n_members: int, size: int) -> None:
    """Log a population's plan (members, chunks, memory per member and per chunk against the budget);
    refuse one whose smallest chunk does not fit (``check_fits``)."""
    one = check_fits(ctx, memo, policy)
    n_chunks = -(-n_members // size)
    state = (f"; state {size_text(state_bytes(ctx, policy))} per member (CPU chunk state budget "
             f"{size_text(ctx.state_budget)})" if ctx.state_budget is not None else "")
    log.info("%s: %d member%s in %d chunk%s of %d; about %s per member, %s per chunk (budget %s)%s", policy.name,
             n_members, "" if n_members == 1 else "s", n_chunks, "" if n_chunks == 1 else "s", size, size_text(one),
             size_text(one * size), size_text(ctx.memory_budget), state)
