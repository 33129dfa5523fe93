"""A population's trial set up on the device (``sim.trial_setup=device``): ``DeviceSetup``, the second
``TrialSetup`` beside the host's (``host_trial.HostSetup``), for the same phases (``trial.run_members``).

The host path makes each trial's draws, initial states, lane plans and segment inputs in NumPy, per trial and per
member, before and between its programs; here every one is a jitted function of the trial keys for all trials at
once (``device_setup``, ``device_phase``), and the members' parameters are initialised by one vmapped program. The
host keeps a copy of the draws (one fetch per phase) for what it records per session (queries, splits, logs).
Same results bit for bit (tests/test_device_trial.py).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import jax
import numpy as np

from ltrjax.online import device_setup as ds
from ltrjax.online import memory, plan, protocol
from ltrjax.online.device_phase import DevicePhase, device_collect, device_producer, refresh_keys, setup_phase
from ltrjax.online.transfers import put
from ltrjax.online.policies.base import Policy, stack_members
from ltrjax.online.protocol import TrialKeys
from ltrjax.online.schedule import SessionDraws

if TYPE_CHECKING:
    from ltrjax.online.context import SimContext
    from ltrjax.online.plan import PlanMemory


def _init_params(ctx: SimContext, policy: Policy, keys: jax.Array):
    """Every member's ``policy.init(key, data)``, vmapped: one program per policy and simulator (kept in
    ``Caches.init_programs``), the same draws as one call per member."""
    program = ctx.caches.init_programs.get(policy)
    if program is None:
        data = ctx.data
        program = ctx.caches.init_programs[policy] = jax.jit(jax.vmap(lambda k: policy.init(k, data)))
    return program(keys)


def _host_draws(phase: DevicePhase) -> list[SessionDraws]:
    """Every trial's draws of a device phase, fetched once (what the host records per session)."""
    query, enter = jax.device_get((phase.draws.query, phase.draws.enter))
    n, first = phase.draws.n_sessions, phase.draws.first_session
    session = np.arange(first, first + n, dtype=np.int32)
    return [SessionDraws(q[:n], e[:n], session) for q, e in zip(query, enter)]


class DeviceSetup:
    """A population's trials (``trials``, members' ``trial_of``) set up on the device: the keys put once, each
    phase's draws, plan shape and per-segment inputs made by programs (``device_phase.setup_phase``)."""

    collect = staticmethod(device_collect)
    defers = True  # sessions' NDCG and evaluations stay on the device until the phase ends (``trial.flush``)

    def __init__(self, ctx: SimContext, memo: PlanMemory, trials: list[TrialKeys], trial_of: np.ndarray):
        self.ctx, self.memo, self.trials, self.trial_of = ctx, memo, trials, np.asarray(trial_of)
        self.keys = TrialKeys(*(put(np.stack([getattr(t, f) for t in trials]).astype(np.uint32), "setup")
                                for f in TrialKeys._fields))
        self.trial_of_device = put(self.trial_of.astype(np.int32), "setup")
        self.member_policy_keys = ds.take_members(self.keys.policy, self.trial_of_device)
        if ctx.caches.device_layout is None:
            ctx.caches.device_layout = ds.device_layout(ctx.data)
        self.layout = ctx.caches.device_layout
        self.warm_keys, self.main_keys = ds.split_plan_keys(self.keys.plan)
        self.phases: dict[str, DevicePhase] = {}

    def _phase(self, name: str, n_cut: int | None = None) -> DevicePhase:
        """The warm-up's (one segment) or the main phase's ``DevicePhase``, set up when first asked for; the main
        phase's segments cut from its first ``n_cut`` sessions (None: all, the protocol's)."""
        if name not in self.phases:
            ctx, (n_warm, n_main) = self.ctx, protocol.session_counts(self.ctx)
            warm = name == "warmup"
            n = n_warm if warm else n_main
            points = np.asarray([n - 1]) if warm else protocol.segment_bounds(n_cut or n, ctx.config.n_segments)[0]
            trial_of = np.arange(len(self.trials)) if warm else self.trial_of
            trial_of_device = put(trial_of.astype(np.int32), "setup") if warm else self.trial_of_device
            self.phases[name] = setup_phase(
                ctx, self.layout, self.warm_keys if warm else self.main_keys, n, 0.0 if warm else ctx.config.entry_prob,
                0 if warm else n_warm, points, trial_of, trial_of_device, self.keys.run,
                functools.partial(plan.widths_from_entering, ctx), self.memo.device_shapes.get(name))
            self.memo.device_shapes[name] = self.phases[name].shape
            self.memo.width_shapes.add(self.phases[name].widths)
        return self.phases[name]

    def draws(self) -> list[tuple[SessionDraws, SessionDraws]]:
        """Every trial's (warm-up, main) draws on the host (drawn on the device, fetched once per phase)."""
        main = _host_draws(self._phase("main"))
        none = SessionDraws(np.zeros(0, np.int32), np.zeros(0, bool), np.zeros(0, np.int32))
        warm = _host_draws(self._phase("warmup")) if protocol.session_counts(self.ctx)[0] else [none] * len(main)
        return list(zip(warm, main))

    def init_members(self, policy: Policy, hypers: list):
        """Every member's parameters (one vmapped ``init``) and stacked hyper-parameters, on the device."""
        params = _init_params(self.ctx, policy, self.member_policy_keys)
        return memory.shard(params), memory.shard(put(stack_members(hypers), "setup"))

    def initial_states(self, names: tuple[str, ...]) -> list:
        """Every trial's initial states (per bucket, leading trial axis), on the device."""
        return list(ds.init_states(self.keys.init, tuple(self.ctx.data.buckets), tuple(self.ctx.config.initial_docs),
                                   names))

    def warmup_members(self, warm_policy: Policy):
        """The warm-up population's (one member per trial) parameters and hyper-parameters."""
        params = _init_params(self.ctx, warm_policy, self.keys.policy)
        return params, put(stack_members([warm_policy.default_hyper()] * len(self.trials)), "setup")

    def warmup_producer(self, draws: list):
        """``produce`` of the warm-up's one segment (every trial once)."""
        return device_producer(self._phase("warmup"))

    def member_states(self, initial: list) -> list:
        """Every member's copy of its trial's states (nothing copied when every member is its own trial)."""
        if np.array_equal(self.trial_of, np.arange(len(self.trials))):
            return list(initial)
        return list(ds.take_members(tuple(initial), self.trial_of_device))

    def main_plan(self, mains: list[SessionDraws] | None, n_main: int):
        """(points, starts, per segment the trials' draws (None without ``mains``: they stay on the device), plans
        (None: made per segment on the device), per segment widths)."""
        phase = self._phase("main", n_main)
        if sum(phase.seg.lengths) != n_main:
            raise ValueError(f"the main phase was set up for {sum(phase.seg.lengths)} sessions, not {n_main}")
        starts = np.asarray(phase.seg.starts, np.int64)
        points = starts + np.asarray(phase.seg.lengths, np.int64) - 1
        segments = [None if mains is None else [m.slice(int(a), int(b) + 1) for m in mains]
                    for a, b in zip(starts, points)]
        return points, starts, segments, [None] * len(segments), [phase.widths] * len(segments)

    def main_producer(self, segments, plans, widths):
        return device_producer(self._phase("main"))

    def refresh_keys(self, i: int) -> jax.Array:
        """Every member's refresh key before segment ``i`` (on the device, from the segment's device index)."""
        return refresh_keys(self.member_policy_keys, self._phase("main").segment_ids[i])

    def retrained(self, params):
        """A retrain's parameters on the device (a retrain is made on the host: a declared transfer)."""
        return put(params, "retrain")
