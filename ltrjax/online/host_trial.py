"""A population's trial set up on the host (``sim.trial_setup=host``): ``HostSetup``, the NumPy way to make what the
phases read (``trial.run_members``), beside ``device_trial.DeviceSetup``.

Per trial: its session draws (``protocol.session_plan``: ``host_random``'s threefry in NumPy), initial states
(``protocol.host_init_states``) and lane plans (``plan.plan``, longest-processing-time balancing); per member its
parameters (``policy.init``, one call each); per segment the scan inputs with the click uniforms, stacked member by
member (``segment.prepare``). Everything depends on the trial keys only; the reference loop reads the same draws.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ltrjax.online import memory, plan, protocol, segment
from ltrjax.online.policies.base import Policy, stack_members
from ltrjax.online.protocol import TrialKeys

if TYPE_CHECKING:
    from ltrjax.online.context import SimContext
    from ltrjax.online.plan import PlanMemory


class HostSetup:
    """A population's trials (``trials``, members' ``trial_of``) set up on the host, phase by phase."""

    collect = None  # ``segment.collect``: the outputs put back in session order by NumPy
    defers = False  # every segment's sessions' NDCG and evaluation come to the host after it (``trial.flush``)

    def __init__(self, ctx: SimContext, memo: PlanMemory, trials: list[TrialKeys], trial_of: np.ndarray):
        self.ctx, self.memo, self.trials, self.trial_of = ctx, memo, trials, np.asarray(trial_of)

    def draws(self) -> list:
        """Every trial's (warm-up, main) ``SessionDraws``."""
        return [protocol.session_plan(self.ctx, t.plan) for t in self.trials]

    def init_members(self, policy: Policy, hypers: list):
        """(parameters, typed hyper-parameters) of every member, stacked ([M, ...] leaves) and sharded: each member's
        policy initialised from its trial's policy key."""
        params = stack_members([policy.init(self.trials[t].policy, self.ctx.data) for t in self.trial_of])
        return memory.shard(params), memory.shard(stack_members(hypers))

    def initial_states(self, names: tuple[str, ...]) -> list:
        """Every trial's initial states (per bucket, leading trial axis; NumPy)."""
        return [stack_members(s) for s in zip(*(protocol.host_init_states(self.ctx, t.init, names)
                                                for t in self.trials))]

    def warmup_members(self, warm_policy: Policy):
        """The warm-up population's (one member per trial) parameters and hyper-parameters."""
        params = stack_members([warm_policy.init(t.policy, self.ctx.data) for t in self.trials])
        return params, stack_members([warm_policy.default_hyper()] * len(self.trials))

    def warmup_producer(self, draws: list):
        """``produce`` of the warm-up's one segment (every trial once)."""
        warmups = [d[0] for d in draws]
        return segment.host_producer(self.ctx, [warmups], [plan.plan(self.ctx, self.memo, warmups, phase="warmup")],
                                     [t.run for t in self.trials], np.arange(len(self.trials)),
                                     [plan.reachable_widths(self.ctx, warmups)])

    def member_states(self, initial: list) -> list:
        """One copy per member, leaf by leaf (nothing to copy when every member is its own trial)."""
        if np.array_equal(self.trial_of, np.arange(len(self.trials))):
            return list(initial)
        return [memory.per_member([initial.pop(0)], self.trial_of) for _ in range(len(initial))]

    def main_plan(self, mains: list, n_main: int):
        """(points, starts, per segment the trials' draws, per segment the trials' lane plans, per segment widths)."""
        points, starts, segments, plans = plan.main_segments(self.ctx, self.memo, mains, n_main)
        return points, starts, segments, plans, plan.segment_widths(self.ctx, self.memo, mains, points)

    def main_producer(self, segments: list, plans: list, widths: list):
        return segment.host_producer(self.ctx, segments, plans, [t.run for t in self.trials], self.trial_of, widths)

    def refresh_keys(self, i: int) -> np.ndarray:
        """Every member's refresh key before segment ``i`` (``fold_in(fold_in(policy key, 1), i)``, NumPy)."""
        return protocol.fold_member_keys(self.trials, self.trial_of, "policy", 1, i)

    def retrained(self, params):
        """A retrain's parameters as the segments read them (as they are: host leaves move with each call)."""
        return params
