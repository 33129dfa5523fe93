"""A trial set up on the device (``sim.trial_setup=device``): draws, initial states, lane plans and segment inputs.

Everything the simulator's host path makes in NumPy before and between its segment programs (``schedule``,
``state.init_bucket_state_host``, ``Simulator.plan`` / ``_prepare`` / ``_collect``) depends only on the trial keys,
not on the simulation state; here it is made by jitted functions of the keys, for every trial of a population at
once (PureJaxRL's ``make_train``: ``reset``, rollouts and updates drawn under ``jit`` from the key). The draws are
the host path's bit for bit (``jax.random`` is what ``host_random`` reproduces); the lane plan is another valid
plan (a query's sessions in time order in one lane, lanes never sharing a query within a step), and any valid plan
gives the same trial bit for bit (sessions are keyed by their global index, queries share nothing in a segment).

The host reads only small summaries to fix the static shapes (per bucket the busiest lane, the most sessions and
the most entries of one query: ``PhaseShape``); inside the segment loop nothing goes from the host to the device.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from ltrjax.online.schedule import padded_steps
from ltrjax.online.state import init_bucket_state
from ltrjax.online.step import SessionInputs


@struct.dataclass
class PhaseDraws:
    """One phase's sessions of every trial, on the device (``schedule.draw_sessions``'s numbers).

    Attributes:
      query: i32 [T, n + pad] global query of each session, ``pad`` zeros after the phase (a segment's window is
        read with one fixed-size slice, which must not run past the end).
      enter: bool [T, n + pad] whether a new document of that query enters first (False in the padding).
      first_session: the global index of the phase's first session (static).
      n_sessions: the phase's sessions per trial (static).
    """

    query: jax.Array
    enter: jax.Array
    first_session: int = struct.field(pytree_node=False)
    n_sessions: int = struct.field(pytree_node=False)


@functools.partial(jax.jit, static_argnames=("n_sessions", "n_queries", "entry_prob", "pad"))
def _draw(keys: jax.Array, n_sessions: int, n_queries: int, entry_prob: float, pad: int):
    def one(key):
        k_query, k_enter = jax.random.split(key)
        query = jax.random.randint(k_query, (n_sessions,), 0, n_queries, dtype=jnp.int32)
        enter = jax.random.uniform(k_enter, (n_sessions,)) < jnp.float32(entry_prob)
        return (jnp.concatenate([query, jnp.zeros((pad,), jnp.int32)]),
                jnp.concatenate([enter, jnp.zeros((pad,), bool)]))

    return jax.vmap(one)(keys)


def draw_phase(keys: jax.Array, n_sessions: int, n_queries: int, entry_prob: float, first_session: int,
               pad: int) -> PhaseDraws:
    """``schedule.draw_sessions(keys[t], ...)`` of every trial ``t`` (keys ``uint32 [T, 2]``), padded by ``pad``."""
    query, enter = _draw(keys, int(n_sessions), int(n_queries), float(entry_prob), int(pad))
    return PhaseDraws(query=query, enter=enter, first_session=int(first_session), n_sessions=int(n_sessions))


@jax.jit
def split_plan_keys(plan_keys: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Every trial's (warm-up, main) draw keys: ``jax.random.split(plan_key)`` (``Simulator.session_plan``)."""
    halves = jax.vmap(jax.random.split)(plan_keys)
    return halves[:, 0], halves[:, 1]


@functools.partial(jax.jit, static_argnames=("initial_docs", "names"))
def init_states(init_keys: jax.Array, buckets: tuple, initial_docs: tuple[int, int], names: tuple[str, ...]):
    """Every trial's initial state of every bucket (leading trial axis): ``state.init_bucket_state`` of
    ``fold_in(init_key, b)``, the host path's ``init_bucket_state_host`` bit for bit."""
    return tuple(jax.vmap(lambda k, b=b, bucket=bucket: init_bucket_state(jax.random.fold_in(k, b), bucket,
                                                                          initial_docs, names))(init_keys)
                 for b, bucket in enumerate(buckets))


def lpt_lanes(counts: jax.Array, n_lanes: int) -> tuple[jax.Array, jax.Array]:
    """(lane of every query, sessions per lane): queries in decreasing ``counts`` (i32 [Q]), dealt ``n_lanes`` at a
    time to the lanes in increasing load (longest processing time first in rounds). Each round gives the lighter
    lanes the heavier queries, so the lanes end within one query's count of each other: the busiest lane holds at
    most the mean load plus the largest count (the bound ``fitted_lanes`` uses)."""
    n_queries = counts.shape[0]
    rounds = -(-n_queries // n_lanes)
    order = jnp.argsort(-counts, stable=True).astype(jnp.int32)
    order = jnp.concatenate([order, jnp.full((rounds * n_lanes - n_queries,), n_queries, jnp.int32)])
    sizes = jnp.concatenate([counts, jnp.zeros((1,), counts.dtype)])

    def deal(r, carry):
        lane_of, loads = carry
        chunk = jax.lax.dynamic_slice(order, (r * n_lanes,), (n_lanes,))
        lanes = jnp.argsort(loads, stable=True).astype(jnp.int32)
        return lane_of.at[chunk].set(lanes), loads.at[lanes].add(sizes[chunk])

    lane_of, loads = jax.lax.fori_loop(0, rounds, deal, (jnp.zeros((n_queries + 1,), jnp.int32),
                                                         jnp.zeros((n_lanes,), counts.dtype)))
    return lane_of[:n_queries], loads


def row_counts(rows: jax.Array, n_rows: int) -> jax.Array:
    """Sessions per bucket row (i32 [n_rows]) of ``rows`` (i32 [S]; ``n_rows`` for a session of another bucket)."""
    return jnp.zeros((n_rows + 1,), jnp.int32).at[rows].add(1)[:n_rows]


@jax.jit
def take_members(tree, trial_of: jax.Array):
    """Every member's copy (``leaf[trial_of]``) of per-trial leaves, in one program."""
    return jax.tree_util.tree_map(lambda a: a[trial_of], tree)


def lane_plan(rows: jax.Array, n_rows: int, n_lanes: int, n_steps: int) -> tuple[jax.Array, jax.Array]:
    """(schedule i32 [n_steps, n_lanes], busiest lane's load) of one bucket's sessions in a segment.

    ``rows`` (i32 [S]) is each session's bucket row in time order, ``n_rows`` for a session of another bucket or
    none. Every query goes to one lane (``lpt_lanes``); a lane runs its sessions in time order, one per step, so
    entry ``[step, lane]`` is the index into ``rows`` of the session it runs, or -1 when idle. Sessions beyond
    ``n_steps`` are dropped: the caller checks the load against ``n_steps`` first (``PhaseShape``)."""
    counts = row_counts(rows, n_rows)
    lane_of, loads = lpt_lanes(counts, n_lanes)
    lane = jnp.where(rows < n_rows, lane_of[jnp.minimum(rows, n_rows - 1)], n_lanes)  # n_lanes: not this bucket's
    by_lane = jnp.argsort(lane, stable=True).astype(jnp.int32)  # stable: time order within a lane
    lane_sorted = lane[by_lane]
    first = jnp.searchsorted(lane_sorted, jnp.arange(n_lanes + 1), side="left")
    step = jnp.arange(rows.shape[0]) - first[lane_sorted]
    schedule = jnp.full((n_steps, n_lanes + 1), -1, jnp.int32).at[step, lane_sorted].set(by_lane, mode="drop")
    return schedule[:, :n_lanes], loads.max()


class Segmentation(NamedTuple):
    """A phase's segments as host constants: ``starts[s]`` the first session (phase-local) and ``lengths[s]`` the
    sessions of segment ``s``; ``window`` the longest segment, the fixed size every segment is read with."""

    starts: tuple[int, ...]
    lengths: tuple[int, ...]

    @property
    def window(self) -> int:
        return max(max(self.lengths, default=1), 1)

    @classmethod
    def of(cls, points: np.ndarray) -> "Segmentation":
        """From the segments' last sessions (``schedule.update_points``, inclusive)."""
        points = np.asarray(points, np.int64)
        starts = np.concatenate([[0], points[:-1] + 1])
        return cls(tuple(int(a) for a in starts), tuple(int(b - a + 1) for a, b in zip(starts, points)))


@struct.dataclass
class Layout:
    """The dataset's query layout as device arrays (``PaddedDataset.row_of_query`` / ``bucket_of_query``), and
    each bucket's query count (static)."""

    row_of_query: jax.Array  # i32 [Q]
    bucket_of_query: jax.Array  # i32 [Q]
    rows_per_bucket: tuple[int, ...] = struct.field(pytree_node=False)


def device_layout(data) -> Layout:
    return Layout(jax.device_put(np.asarray(data.row_of_query, np.int32)),
                  jax.device_put(np.asarray(data.bucket_of_query, np.int32)),
                  tuple(int(b.n_queries) for b in data.buckets))


def _window(draws: PhaseDraws, seg: Segmentation, s):
    """Segment ``s``'s sessions of every trial: (query, enter, valid), each [T, window]; ``s`` may be traced."""
    starts = jnp.asarray(seg.starts, jnp.int32)
    lengths = jnp.asarray(seg.lengths, jnp.int32)
    start = starts[s]
    take = lambda a: jax.vmap(lambda row: jax.lax.dynamic_slice(row, (start,), (seg.window,)))(a)  # noqa: E731
    valid = jnp.arange(seg.window) < lengths[s]
    return take(draws.query), take(draws.enter) & valid, jnp.broadcast_to(valid, draws.query.shape[:1] + valid.shape)


def _bucket_rows(layout: Layout, query: jax.Array, valid: jax.Array, b: int) -> jax.Array:
    """Bucket ``b``'s row of every session (``rows_per_bucket[b]`` where another bucket's or invalid)."""
    n_rows = layout.rows_per_bucket[b]
    mine = valid & (layout.bucket_of_query[query] == b)
    return jnp.where(mine, layout.row_of_query[query], n_rows)


@functools.partial(jax.jit, static_argnames=("seg", "lanes"))
def phase_loads(draws: PhaseDraws, layout: Layout, seg: Segmentation, lanes: tuple[int, ...]):
    """Per trial, segment and bucket (i32 [T, S, B] each): the busiest lane's sessions with ``lanes[b]`` lanes, the
    bucket's sessions and the most sessions of one of its queries; and per trial and query the entering sessions of
    the whole phase (i32 [T, Q], for the scanned widths). What the host reads to fix the phase's static shapes."""
    def segment(s):
        query, enter, valid = _window(draws, seg, s)

        def trial(q, v):
            out = []
            for b, n_rows in enumerate(layout.rows_per_bucket):
                rows = _bucket_rows(layout, q, v, b)
                counts = row_counts(rows, n_rows)
                _, loads = lpt_lanes(counts, lanes[b])
                out.append(jnp.stack([loads.max(), counts.sum(), counts.max()]))
            return jnp.stack(out)  # [B, 3]

        return jax.vmap(trial)(query, valid)  # [T, B, 3]

    per_segment = jax.lax.map(segment, jnp.arange(len(seg.starts)))  # [S, T, B, 3]
    n_queries = layout.row_of_query.shape[0]
    live = jnp.arange(draws.query.shape[1]) < draws.n_sessions
    entering = jax.vmap(lambda q, e: jnp.zeros((n_queries,), jnp.int32).at[q].add((e & live).astype(jnp.int32)))(
        draws.query, draws.enter)
    return jnp.moveaxis(per_segment, 0, 1), entering


class PhaseShape(NamedTuple):
    """A phase's static plan shape: lanes per bucket and the steps every segment's scan runs."""

    lanes: tuple[int, ...]
    steps: int


def fit_shape(loads: np.ndarray, configured: tuple[int, ...], known: PhaseShape | None = None) -> PhaseShape:
    """The phase's ``PhaseShape`` from ``phase_loads``' first output (host ``[T, S, B, 3]``) with the ``configured``
    lanes: the steps on the ``padded_steps`` ladder that hold the busiest lane, then per bucket the fewest lanes
    whose worst case (mean load rounded up plus the heaviest query: ``lpt_lanes``' bound) still fits, else the
    configured ones (whose busiest lane was measured). A ``known`` shape of an earlier population is kept when
    these draws fit it (steps only grow: one compiled program serves later trials)."""
    busiest, sessions, heaviest = (np.asarray(loads)[..., i].max(axis=(0, 1)) for i in range(3))

    def fits(lanes: int, b: int, steps: int) -> bool:
        bound = math.ceil(int(sessions[b]) / lanes) + int(heaviest[b])
        return bound <= steps or (lanes == configured[b] and int(busiest[b]) <= steps)

    if known is not None and all(fits(lanes, b, known.steps) for b, lanes in enumerate(known.lanes)):
        return known
    steps = max(padded_steps(max(int(busiest.max()), 1)), known.steps if known is not None else 0)
    lanes = tuple(next((m for m in range(1, c) if fits(m, b, steps)), c) for b, c in enumerate(configured))
    return PhaseShape(lanes, int(steps))


@functools.partial(jax.jit, static_argnames=("seg", "shape"))
def segment_plan(draws: PhaseDraws, layout: Layout, seg: Segmentation, shape: PhaseShape, s: jax.Array,
                 trial_of: jax.Array):
    """Segment ``s``'s scan inputs of every member (``step.SessionInputs`` per bucket, ``[M, steps, lanes]``,
    ``uniforms`` None: drawn in the step) and its schedules (i32 ``[M, steps, lanes]`` per bucket, the
    window-local session of every slot, -1 idle) to put the outputs back in session order (``to_session_order``).
    Members share their trial's plan (``trial_of``)."""
    query, enter, valid = _window(draws, seg, s)
    first = draws.first_session + jnp.asarray(seg.starts, jnp.int32)[s]
    inputs, schedules = [], []
    for b, n_rows in enumerate(layout.rows_per_bucket):
        def trial(q, e, v, b=b, n_rows=n_rows):
            rows = _bucket_rows(layout, q, v, b)
            schedule, _ = lane_plan(rows, n_rows, shape.lanes[b], shape.steps)
            on = schedule >= 0
            idx = jnp.maximum(schedule, 0)
            return SessionInputs(rows=jnp.where(on, rows[idx], n_rows).astype(jnp.int32), enter=on & e[idx],
                                 session=(first + idx).astype(jnp.int32), uniforms=None, valid=on), schedule

        x, schedule = jax.vmap(trial)(query, enter, valid)
        inputs.append(jax.tree_util.tree_map(lambda a: a[trial_of], x))
        schedules.append(schedule[trial_of])
    return tuple(inputs), tuple(schedules)


def to_session_order(values: tuple, schedules: tuple, window: int, fill=0) -> jax.Array:
    """Per-slot outputs (per bucket ``[M, steps, lanes, ...]``) in session order ``[M, window, ...]``: each slot's
    value at its session (``schedules``: window-local session per slot, -1 idle); a session no slot ran keeps
    ``fill``."""
    first = values[0]
    out = jnp.full((first.shape[0], window) + first.shape[3:], fill, first.dtype)
    member = jnp.arange(first.shape[0])[:, None, None]
    for v, schedule in zip(values, schedules):
        out = out.at[member, jnp.where(schedule >= 0, schedule, window)].set(v, mode="drop")
    return out
