"""A phase's segments produced on the device (``sim.trial_setup=device``): the second way to make the segment phase's
inputs (``segment.PreparedSegment``) and to bring its outputs back, beside the host's (``segment.host_producer`` /
``segment.collect``).

``setup_phase`` draws the phase's sessions of every trial on the device (``device_setup``), reads back only the
small summaries that fix the static shapes (per bucket the busiest lane, the most sessions and the most entries of
one query), and keeps per segment a device scalar; ``device_producer(phase)(i)`` then builds segment ``i``'s scan
inputs with one program launch and no host-to-device transfer, and ``device_collect`` puts the outputs back in
session order on the device before one fetch. What the set-up puts on the device is counted
(``transfers.TransferMeter``); a segment puts nothing.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING

import jax
import numpy as np

from ltrjax.online import device_setup as ds
from ltrjax.online import memory
from ltrjax.online.transfers import put
from ltrjax.online.segment import PreparedSegment

if TYPE_CHECKING:
    from ltrjax.online.context import SimContext


@dataclasses.dataclass
class DevicePhase:
    """One phase (warm-up or main) of a population, set up on the device.

    Attributes:
      draws: the trials' sessions (``device_setup.PhaseDraws``).
      layout: the dataset's query layout on the device.
      seg: the phase's segments (host constants).
      shape: lanes per bucket and steps per segment (static).
      widths: per bucket, the entry slots a narrowing policy scans (the phase's reachable widths).
      segment_ids: per segment, its index as a device scalar (a segment program's traced argument).
      trial_of: i64 [M] host, each member's trial; ``trial_of_device`` the same on the device.
      run_keys: uint32 [M, 2] device, each member's trial run key.
    """

    draws: ds.PhaseDraws
    layout: ds.Layout
    seg: ds.Segmentation
    shape: ds.PhaseShape
    widths: tuple[int, ...]
    segment_ids: tuple
    trial_of: np.ndarray
    trial_of_device: jax.Array
    run_keys: jax.Array


def setup_phase(ctx: SimContext, layout: ds.Layout, draw_keys: jax.Array, n_sessions: int, entry_prob: float,
                first_session: int, points: np.ndarray, trial_of: np.ndarray, trial_of_device: jax.Array,
                run_keys: jax.Array, widths_of, known: ds.PhaseShape | None = None) -> DevicePhase:
    """A phase of ``n_sessions`` sessions per trial (keys ``draw_keys`` [T, 2], device) cut at ``points`` (each
    segment's last session) for the members ``trial_of`` (host and device copies; ``run_keys`` [T, 2] the trials'
    run keys, device): draws and summaries on the device, the static shape fixed from the summaries
    (``device_setup.fit_shape``, keeping ``known`` when it fits). ``widths_of(entering)`` maps the most entering
    sessions of every query (i64 [Q]) to the scanned widths per bucket (``plan.widths_from_entering``)."""
    seg = ds.Segmentation.of(points)
    draws = ds.draw_phase(draw_keys, n_sessions, ctx.data.n_queries, entry_prob, first_session, seg.window)
    loads, entering = jax.device_get(ds.phase_loads(draws, layout, seg, ctx.n_lanes))
    shape = ds.fit_shape(loads, ctx.n_lanes, known)
    segment_ids = tuple(put(np.int32(i), "setup") for i in range(len(seg.starts)))
    return DevicePhase(draws=draws, layout=layout, seg=seg, shape=shape, widths=widths_of(entering.max(axis=0)),
                       segment_ids=segment_ids, trial_of=np.asarray(trial_of), trial_of_device=trial_of_device,
                       run_keys=ds.take_members(run_keys, trial_of_device))


def device_producer(phase: DevicePhase):
    """``produce(i)`` for ``segment.run_segments``: segment ``i``'s ``PreparedSegment`` built on the device
    (``device_setup.segment_plan``); its ``targets`` are the schedules, per bucket ``[M, steps, lanes]``."""
    def produce(i: int) -> PreparedSegment:
        inputs, schedules = ds.segment_plan(phase.draws, phase.layout, phase.seg, phase.shape,
                                            phase.segment_ids[i], phase.trial_of_device)
        return PreparedSegment(schedules=memory.shard(inputs), keys=memory.shard(phase.run_keys),
                               targets=schedules, n_sessions=phase.seg.lengths[i], trial_of=phase.trial_of,
                               widths=phase.widths, window=phase.seg.window)

    return produce


@functools.partial(jax.jit, static_argnames=("window", "logs"))
def session_outputs(ys: tuple, schedules: tuple, window: int, logs: bool):
    """A segment's outputs (per bucket ``step.SessionOutputs`` ``[M, steps, lanes, ...]``) in session order
    ``[M, window, ...]``: NDCG, and with ``logs`` the shown slots (-1 where none), clicks and session records."""
    ndcg = ds.to_session_order(tuple(y.ndcg for y in ys), schedules, window)
    if not logs:
        return ndcg, None, None, None
    shown = ds.to_session_order(tuple(y.shown for y in ys), schedules, window, fill=-1)
    clicks = ds.to_session_order(tuple(y.clicks for y in ys), schedules, window, fill=False)
    records = None
    if ys[0].record is not None:
        records = jax.tree_util.tree_map(lambda *r: ds.to_session_order(r, schedules, window), *(y.record for y in ys))
    return ndcg, shown, clicks, records


def device_collect(ys, segment: PreparedSegment, logs: bool = True):
    """``segment.collect`` for a device-produced segment: the outputs put in session order on the device. With
    ``logs`` one fetch of the segment's sessions (NDCG ``[M, n]``, shown, clicks and records: a retrain or the kept
    logs read them now); without, the NDCG stays on the device (``[M, window]``, its first ``n`` sessions the
    segment's: ``trial.flush`` fetches it when the phase ends)."""
    out = session_outputs(tuple(ys), tuple(segment.targets), segment.window, logs)
    if not logs:
        return out
    n = segment.n_sessions
    return jax.tree_util.tree_map(lambda a: np.asarray(a)[:, :n], jax.device_get(out))


@jax.jit
def refresh_keys(policy_keys: jax.Array, segment_id: jax.Array) -> jax.Array:
    """Every member's refresh key of a segment, ``fold_in(fold_in(policy_key, 1), segment)`` (``trial``'s refresh
    on the host: ``protocol.fold_member_keys(..., "policy", 1, i)``), from device keys and a device index."""
    return jax.vmap(lambda k: jax.random.fold_in(jax.random.fold_in(k, 1), segment_id))(policy_keys)
