"""The vectorized online simulation of a population of members (SPEC §2.1, §5; EBRank §5.1): ``Simulator``, a thin
front over the phases.

A *member* is one (trial key, hyper-parameters) pair of one policy; a *population* is many members
advanced by one compiled program: every array of the simulation state, the policy parameters and
the typed hyper-parameters carries a leading member axis, and the segment program (``step.population_segment``)
is ``vmap``ped over it around the lanes. Members of one trial share its session plan and click
uniforms (a validation grid); members of different trials have their own plans, padded to one
step count, so one program serves both. A single trial is a population of one.

One trial: BM25 warm-up sessions, then ``refreshes`` segments (default ``n_updates``). Inside a
segment the policy's model and its refreshed behaviour features are frozen, so every query's
sessions run in order in their own lane of a ``lax.scan`` (``schedule.lane_schedule``), all lanes
at once. After each segment every member is evaluated (Warm/Cold NDCG); at every
``refreshes / n_updates``-th segment all members retrain at once (``Policy.update_population``)
from their counters and the log of their sessions since the last retrain (UCBRank: 100 feature
refreshes, 20 retrains).

The work is done by module-level phases over named state, each a module of ``ltrjax.online``: ``config``
(``SimConfig``), ``context`` (``SimContext``: the fixed values), ``protocol`` (keys, session counts and draws,
initial states), ``plan`` (lane plans and widths; ``PlanMemory``), ``memory`` (chunks, devices), ``segment``
(produce, launch, collect; the segment loop), ``evaluate``, ``retrain``, ``programs`` (the compiled programs),
``results`` (``TrialResult``) and ``trial`` (the phases composed). The names below are re-exported for the code
that imports them from here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import jax
import numpy as np

from ltrjax import clicks as click_lib
from ltrjax.data.layout import PaddedDataset
from ltrjax.online import evaluate, memory, plan as plan_lib, protocol, retrain, segment, trial
from ltrjax.online.config import (CLASS_STEPS, CLICK_RNGS, DISCOUNTS, HISTORY_SPLITS,  # noqa: F401  (re-exported)
                                  RELEVANCE_MAPPINGS, RETRAIN_EXAMPLES, SEGMENT_WIDTHS, SESSION_COUNTS, SPLITS,
                                  SimConfig)
from ltrjax.online.context import SimContext, bucket_gains, make_context, ndcg_discount  # noqa: F401
from ltrjax.online.memory import (HEAP_TRIM_SLOTS, available_memory, member_sharding,  # noqa: F401
                                  memory_budget_default, pad_to_devices, per_member, physical_memory,
                                  release_free_heap, size_text)
from ltrjax.online.plan import (ClassPlan, PlanMemory, choose_class_widths, class_rungs,  # noqa: F401
                                class_step_widths, fitted_lanes)
from ltrjax.online.policies.base import Policy
from ltrjax.online.programs import compiled, member_by_member, per_bucket  # noqa: F401
from ltrjax.online.protocol import (WARMUP_RETRAIN, TrialKeys, default_session_count,  # noqa: F401
                                    fold_member_keys, group_trials, resolve_hyper, resolve_hypers, trial_keys)
from ltrjax.online.results import PerfectDocs, TrialResult, concat_logs, perfect_documents  # noqa: F401
from ltrjax.online.retrain import VIEW_BLOCK_BYTES, retrain_views  # noqa: F401
from ltrjax.online.retrain_documents import DocumentCells
from ltrjax.online.schedule import SessionDraws
from ltrjax.online.segment import PreparedSegment, click_uniforms  # noqa: F401
from ltrjax.online.state import STAT_NAMES, BucketState
from ltrjax.online.step import policy_key  # noqa: F401  (re-exported: the reference loop shares it)
from ltrjax.online.trial import MainPhase  # noqa: F401


class Simulator:
    """Runs populations of one dataset and click model.

    ``max_members`` caps how many members one compiled program advances at once (a population is
    split into chunks of at most that many); by default the chunk is as large as fits into
    ``memory_budget`` bytes (``memory_budget_default``: half the memory still available when the simulator is
    built, so after the data — the host's, and on a GPU the smaller of it and the GPU's), estimated from the state
    and per-segment sizes. On a CPU, ``state_budget`` bytes (None: no cap) also cap the members' state one chunk
    holds (``state_bytes``): beyond about a gigabyte of it a chunk of MSLR-30K-shaped EBRank members ran no faster
    on a 2-core CPU while its memory grew with every member (docs/results/chunk_size_mslr/). ``config.click_rng="auto"``
    is resolved for JAX's backend (``SimConfig.resolved``).

    Its fixed values are ``context`` (``SimContext``; each field is also an attribute: ``sim.data``,
    ``sim.config``, ``sim.n_lanes``, ...) and the shapes its plans remembered are ``memo`` (``PlanMemory``); every
    method delegates to a phase module with them.
    """

    def __init__(self, data: PaddedDataset, click_model: click_lib.ClickModel, config: SimConfig,
                 warmup_policy: Policy | None = None, max_members: int | None = None,
                 memory_budget: int | None = None, state_budget: int | None = None):
        self.context = make_context(data, click_model, config, warmup_policy, max_members, memory_budget,
                                    state_budget)
        self.memo = PlanMemory()

    # ------------------------------------------------------------------ protocol: draws and initial states
    def init_states(self, key: jax.Array, names: tuple[str, ...] = STAT_NAMES) -> list[BucketState]:
        """Every bucket's initial state (``state.init_bucket_state``), on the device."""
        return jax.device_put(self.host_init_states(key, names))

    def host_init_states(self, key: jax.Array, names: tuple[str, ...] = STAT_NAMES) -> list[BucketState]:
        """``init_states`` computed on the host with NumPy (``protocol.host_init_states``)."""
        return protocol.host_init_states(self.context, key, names)

    def session_counts(self) -> tuple[int, int]:
        """(warm-up, main) sessions of a trial (``protocol.session_counts``)."""
        return protocol.session_counts(self.context)

    def session_plan(self, key: jax.Array) -> tuple[SessionDraws, SessionDraws]:
        """Warm-up and main session draws of a trial (``protocol.session_plan``)."""
        return protocol.session_plan(self.context, key)

    def document_cells(self) -> DocumentCells:
        """The layout's cells for retrains that filter their documents on the device (made once)."""
        return retrain.document_cells(self.context)

    # ------------------------------------------------------------------ plan: lanes and widths
    def plan(self, segments: list[SessionDraws], phase: str = "main") -> list[list[np.ndarray]]:
        """Lane schedules of every segment and bucket, padded to one step count (``plan.plan``)."""
        return plan_lib.plan(self.context, self.memo, segments, phase)

    def main_segments(self, mains: list[SessionDraws], n_main: int) -> tuple[np.ndarray, np.ndarray, list, list]:
        """(last sessions, first sessions, draws, lane plans) of every main segment (``plan.main_segments``)."""
        return plan_lib.main_segments(self.context, self.memo, mains, n_main)

    def class_plans(self, mains: list[SessionDraws], segments: list[list[SessionDraws]], points: np.ndarray
                    ) -> list[list[ClassPlan]]:
        """Per segment and trial, the lane schedules in width classes (``plan.class_plans``)."""
        return plan_lib.class_plans(self.context, self.memo, mains, segments, points)

    def reachable_widths(self, runs: list[SessionDraws]) -> tuple[int, ...]:
        """Per bucket, the entry slots any query can fill in these sessions (``plan.reachable_widths``)."""
        return plan_lib.reachable_widths(self.context, runs)

    def segment_widths(self, runs: list[SessionDraws], stops: np.ndarray) -> list[tuple[int, ...]]:
        """Per segment and bucket, the entry slots a segment scans (``plan.segment_widths``)."""
        return plan_lib.segment_widths(self.context, self.memo, runs, stops)

    def class_need(self, queries: np.ndarray, entering: np.ndarray) -> np.ndarray:
        """Entry slots each session needs with width classes (``plan.class_need``)."""
        return plan_lib.class_need(self.context, queries, entering)

    def class_need_counts(self, runs: list[SessionDraws], stops: np.ndarray, reach: tuple[int, ...]
                          ) -> list[np.ndarray]:
        """Per bucket, sessions needing each class rung (``plan.class_need_counts``)."""
        return plan_lib.class_need_counts(self.context, runs, stops, reach)

    def width_sets(self) -> list[tuple]:
        """The distinct per-segment width tuples used so far, sorted (``plan.width_sets``)."""
        return plan_lib.width_sets(self.memo)

    def width_shapes(self) -> int:
        """How many distinct per-segment width tuples (segment programs of a narrowing policy) runs used so far."""
        return len(self.memo.width_shapes)

    def doc_slot_occupancy(self, policy: Policy, keys: Sequence[jax.Array]) -> float:
        """Entered-document evaluations / scanned document slots of ``keys``' main phases (``plan.doc_slot_occupancy``)."""
        return plan_lib.doc_slot_occupancy(self.context, self.memo, policy, keys)

    def schedule_inputs(self, draws: SessionDraws, plan: list[np.ndarray], run_key: jax.Array) -> tuple:
        """Per bucket, one trial's scan inputs of a segment and its output targets (``segment.schedule_inputs``)."""
        return segment.schedule_inputs(self.context, draws, plan, run_key)

    # ------------------------------------------------------------------ memory
    def aux_bytes(self, policy: Policy) -> int:
        """One member's ``prepare`` output bytes over every bucket (``memory.aux_bytes``)."""
        return memory.aux_bytes(self.context, policy)

    def member_bytes(self, policy: Policy | None = None) -> int:
        """A rough upper bound of one member's memory (``memory.member_bytes``)."""
        return memory.member_bytes(self.context, self.memo, policy)

    def state_bytes(self, policy: Policy | None = None) -> int:
        """One member's ``BucketState`` bytes over every bucket (``memory.state_bytes``)."""
        return memory.state_bytes(self.context, policy)

    def chunk_size(self, n_members: int, max_members: int | None = None, policy: Policy | None = None) -> int:
        """Members per compiled chunk (``memory.chunk_size``)."""
        return memory.chunk_size(self.context, self.memo, n_members, max_members, policy)

    def check_fits(self, policy: Policy) -> int:
        """The estimated bytes of one member; ``ConfigError`` when one does not fit (``memory.check_fits``)."""
        return memory.check_fits(self.context, self.memo, policy)

    def announce(self, policy: Policy, n_members: int, size: int) -> None:
        """Log a population's chunks and memory; refuse one that does not fit (``memory.announce``)."""
        memory.announce(self.context, self.memo, policy, n_members, size)

    def release_heap(self) -> None:
        """``release_free_heap`` for a simulator of at least ``HEAP_TRIM_SLOTS`` slots (``memory.release_heap``)."""
        memory.release_heap(self.context)

    # ------------------------------------------------------------------ running
    def run(self, policy: Policy, key: jax.Array, *, hyper=None, progress: bool = True,
            keep_logs: bool = False, keep_states: bool = True) -> TrialResult:
        """One trial of ``policy`` (a population of one member)."""
        return self.run_population(policy, [key], [hyper], progress=progress, keep_logs=keep_logs,
                                   keep_states=keep_states)[0]

    def run_population(self, policy: Policy, keys: Sequence[jax.Array], hypers: Sequence | None = None, *,
                       progress: bool = True, keep_logs: bool = False, max_members: int | None = None,
                       keep_states: bool = True, on_chunk: Callable[[list[TrialResult]], None] | None = None
                       ) -> list[TrialResult]:
        """Run every member ``(keys[i], hypers[i])`` of ``policy``; members with equal keys share their trial's
        session plan and click draws. ``hypers[i]`` is None (the configured values), a {name: value} dict
        or a ``policy.Hyper``. Returns one ``TrialResult`` per member, in order; identical to running the
        members one by one. Populations larger than ``chunk_size`` run chunk by chunk. ``keep_states=False``
        leaves ``final_states`` out of the results (every counter of every document: at MSLR-30K shape ~0.2 GB per
        member, held until the caller drops the results); ``perfect_docs`` is always there. ``on_chunk(results)`` is
        called after every chunk with the results so far (members in order), e.g. to write the finished trials."""
        return trial.run_population(self.context, self.memo, policy, keys, hypers, progress=progress,
                                    keep_logs=keep_logs, max_members=max_members, keep_states=keep_states,
                                    on_chunk=on_chunk)

    def simulate_frozen(self, policy: Policy, keys: Sequence[jax.Array], hypers: Sequence | None = None,
                        n_sessions: int | None = None) -> tuple[list[BucketState], int]:
        """The main-phase sessions of every member with the policy frozen at its initial parameters: no
        warm-up, retraining or evaluation (the simulation core, for throughput benchmarks). Returns the
        final states (leading member axis, blocked until ready) and the sessions simulated per member."""
        return trial.simulate_frozen(self.context, self.memo, policy, keys, hypers, n_sessions)

    def split_means(self, per_query: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
        """Mean Warm/Cold NDCG per split of one member's per-query values."""
        return evaluate.split_means(self.context.data, per_query)


def _forward(name: str) -> property:
    return property(lambda self: getattr(self.context, name), doc=f"``SimContext.{name}`` (read only).")


for _field in dataclasses.fields(SimContext):
    if _field.name != "caches":
        setattr(Simulator, _field.name, _forward(_field.name))
