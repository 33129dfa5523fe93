"""The vectorized online simulation of a population of members (SPEC §2.1, §5; EBRank §5.1).

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
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Annotated, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from tqdm.auto import tqdm

from ltrjax import clicks as click_lib
from ltrjax import metrics
from ltrjax.constraints import (ConfigError, Each, Length, NonNegativeInt, OneOf, Positive, PositiveInt, Probability,
                                Range, check_fields, strict_fields)
from ltrjax.data.layout import PaddedDataset
from ltrjax.data.queryset import TEST
from ltrjax.models.blocks import map_in_blocks
from ltrjax.online import host_random
from ltrjax.online import step as step_lib
from ltrjax.online.step import policy_key  # noqa: F401  (re-exported: the reference loop shares it)
from ltrjax.online.policies.base import MemberViews, Policy, SessionLog, member, stack_members
from ltrjax.online.member_blocks import MemberBlocks
from ltrjax.online.retrain_documents import DocumentCells, RetrainDocuments, document_cells
from ltrjax.online.schedule import (SessionDraws, doc_slot_occupancy, draw_sessions, entered_counts, lane_schedule,
                                    padded_steps, update_points, width_ladder)
from ltrjax.online.state import (STAT_NAMES, BucketState, DocCounters, init_bucket_state_host, kept_counters,
                                 member_in_dataset_order)

log = logging.getLogger("ltrjax")

SPLITS = ("train", "vali", "test")


RELEVANCE_MAPPINGS = click_lib.RELEVANCE_MAPPINGS  # one list, next to the mappings (ltrjax.clicks)
DISCOUNTS = ("auto", "log2", "examination")
CLICK_RNGS = ("auto", "host", "device")
HISTORY_SPLITS = ("test", "all")
SEGMENT_WIDTHS = ("phase", "ladder", "classes")
SESSION_COUNTS = ("ebrank", "ucbrank")
RETRAIN_EXAMPLES = ("auto", "host", "device")
CLASS_STEPS = 64  # sim.segment_widths=classes: lanes per bucket sized for about this many steps per segment
# the sim keys that change only what is reported (history_splits) or how fast (segment_widths, retrain_examples):
# ltrjax.record.REPORTING_KEYS, PERFORMANCE_KEYS


@dataclasses.dataclass(frozen=True)
class SimConfig:
    """Protocol constants (defaults: EBRank §5.1, seed-code.md §1.3); also the schema of the ``sim`` config
    block (``ltrjax.schema``): annotations give the types and allowed values, ``__post_init__`` checks them."""

    top_k: PositiveInt = 5
    initial_docs: Annotated[tuple[int, int], Length(2), Each(Range(1))] = (5, 9)
    entry_prob: Probability = 1.0
    sessions: PositiveInt | None = None  # None: counted by ``session_count`` (``default_session_count``)
    # how sessions=None counts the main phase's sessions: "ebrank" = #queries x (mean docs - 5) / entry_prob (EBRank
    # Eq. 28), "ucbrank" = #queries x mean docs / entry_prob (UCBRank §6.1.2: 134k, 30k, 2.4M, 7.6M sessions)
    session_count: Annotated[str, OneOf(SESSION_COUNTS)] = "ebrank"
    warmup_sessions_per_query: NonNegativeInt = 20
    n_updates: PositiveInt = 20
    refreshes: PositiveInt | None = None  # segments = behaviour-feature refreshes; None: n_updates (UCBRank: 100)
    train_after_warmup: bool = False
    gamma: Annotated[float, Range(0, 1, lo_open=True)] = 0.995
    relevance: Annotated[str, OneOf(RELEVANCE_MAPPINGS)] = "ebrank"
    relevance_eps_min: Probability = 0.1
    # NDCG discount: "auto" = the examination curve theta_k of a position-based click model under
    # the EBRank mapping (EBRank's gain/discount convention), else 1/log2(k+1); or "log2"/"examination".
    discount: Annotated[str, OneOf(DISCOUNTS)] = "auto"
    lanes_per_query: Positive = 0.1  # lanes = clip(queries * this, min_lanes, max_lanes)
    min_lanes: PositiveInt = 32
    max_lanes: PositiveInt = 1024
    # click uniforms: "host" = NumPy PCG64 per segment (reference-exact), "device" = jax.random inside the compiled
    # step (no host work or transfer per segment; for GPUs), "auto" = "device" on a GPU, else "host" (``resolved``)
    click_rng: Annotated[str, OneOf(CLICK_RNGS)] = "auto"
    # queries evaluated (Warm/Cold NDCG) at the intermediate evaluation points: "test" (what the reports show
    # over time; ~1/5 of the evaluation work) or "all" splits; the final point always evaluates every query
    history_splits: Annotated[str, OneOf(HISTORY_SPLITS)] = "test"
    # entry slots a narrowing policy scans: "phase" = one width per bucket for the whole phase (multiple of 32; one
    # segment program), "ladder" = per segment on a geometric ladder (fewer padded slots, but one program per
    # width set: 7-9 compiles at the synthetic MQ2007/MSLR shapes), "classes" = per segment and query, the
    # smallest of a few class widths that holds its documents (one program per phase). Same results either way.
    segment_widths: Annotated[str, OneOf(SEGMENT_WIDTHS)] = "phase"
    # segment_widths=classes: at most this many class widths per bucket, the ladder rungs that scan the fewest slots
    # for the phase's sessions (``choose_class_widths``; each class is one more copy of the session step to
    # compile); null: every rung from K to the phase's width
    width_classes: PositiveInt | None = 3
    # where a retrain filters its eligible documents out of the counters: "host" = every counter brought to the host
    # and filtered by NumPy (faster on a 2-core CPU), "device" = filtered and compacted on the device, only the
    # eligible documents brought back (``retrain_documents``); "auto" = "device" on a GPU, else "host". Same examples
    retrain_examples: Annotated[str, OneOf(RETRAIN_EXAMPLES)] = "auto"

    def __post_init__(self):
        object.__setattr__(self, "initial_docs", tuple(self.initial_docs))
        check_fields(self)
        lo, hi = self.initial_docs
        if lo > hi:
            raise ConfigError("initial_docs", list(self.initial_docs), "expected [min, max] with min <= max")
        if self.entry_prob == 0 and self.sessions is None:
            raise ConfigError("entry_prob", self.entry_prob, "expected a number in (0, 1] when sessions is null "
                              "(the default session count divides by it)")
        if self.max_lanes < self.min_lanes:
            raise ConfigError("max_lanes", self.max_lanes, f"expected at least min_lanes ({self.min_lanes})")
        if self.n_segments % self.n_updates:
            raise ConfigError("refreshes", self.refreshes, f"expected a multiple of n_updates ({self.n_updates}): "
                              "models retrain at every refreshes/n_updates-th refresh")

    @classmethod
    def from_mapping(cls, cfg) -> "SimConfig":
        """A SimConfig from a mapping (the ``sim`` block); a key it does not have is refused (``ConfigError``)."""
        return cls(**strict_fields(cls, cfg, "sim"))  # __post_init__ makes initial_docs a tuple

    def resolved(self, backend: str | None = None) -> "SimConfig":
        """This config with ``click_rng="auto"`` and ``retrain_examples="auto"`` made concrete for ``backend``
        (default JAX's): ``"device"`` on a GPU, ``"host"`` elsewhere. The runner resolves before it records the
        settings, so a results folder names the draws it used, and a rerun on another backend is refused rather
        than mixing them (``retrain_examples`` changes no result: resume ignores it)."""
        gpu = (backend or jax.default_backend()) == "gpu"
        auto = {k: "device" if gpu else "host" for k in ("click_rng", "retrain_examples") if getattr(self, k) == "auto"}
        return dataclasses.replace(self, **auto) if auto else self

    @property
    def n_segments(self) -> int:
        return int(self.refreshes or self.n_updates)

    def retrains_after(self, segment: int) -> bool:
        """Whether the policy retrains after ``segment`` (never after the last one): with one segment per update,
        after every segment; with ``per`` = segments / updates > 1, after the middle segment of every ``per``
        (segments per//2, per//2 + per, ...), the UCBRank code's ``update_points = points[n_d//2::n_d]``
        (seed-code.md §2.1): 100 refreshes and 20 updates retrain after segments 2, 7, ..., 97, 20 times."""
        per = max(self.n_segments // self.n_updates, 1)
        return segment % per == per // 2 and segment < self.n_segments - 1


class PerfectDocs(NamedTuple):
    """A trial's final state of its perfect documents (label = y_max; real documents of every bucket, in bucket
    order and row-major dataset order): what ``ltrjax.measure.perfect_click_rates`` reads (UCBRank Fig. 1). A few
    percent of the documents, so a run keeps it for every member instead of the whole final state."""

    doc_query: np.ndarray  # i32 global query of each document
    clicks: np.ndarray  # f32 raw clicks
    entry_session: np.ndarray  # i32 global session index at which it entered (-1: initial)
    entered: np.ndarray  # bool whether it has entered


def perfect_documents(data: PaddedDataset, states) -> PerfectDocs:
    """``PerfectDocs`` of one member's final ``states`` (per bucket, host or device arrays): the counters and entry
    sessions put back into dataset order (``state.to_dataset_order``, here a NumPy gather) at the perfect documents."""
    parts = []
    for bucket, state in zip(data.buckets, states):
        perfect = np.asarray(bucket.doc_mask) & (np.asarray(bucket.labels) == data.y_max)
        rank = np.asarray(state.rank)[:-1]

        def at_perfect(entry_order, rank=rank, perfect=perfect):
            return np.take_along_axis(np.asarray(entry_order)[:-1], rank, axis=1)[perfect]

        entered = np.arange(rank.shape[1])[None, :] < np.asarray(state.n_entered)[:, None]
        parts.append(PerfectDocs(
            doc_query=np.broadcast_to(np.asarray(bucket.query_index)[:, None], perfect.shape)[perfect],
            clicks=at_perfect(state.counters.clicks), entry_session=at_perfect(state.entry_session),
            entered=at_perfect(entered)))
    return PerfectDocs(*(np.concatenate(leaves) for leaves in zip(*parts)))


@dataclasses.dataclass
class TrialResult:
    """Everything a trial measured (host arrays)."""

    session_ndcg: np.ndarray  # f32 [n_main] NDCG@K of the shown list of every main session
    session_split: np.ndarray  # i8 [n_main]
    session_query: np.ndarray  # i32 [n_main]
    eval_points: np.ndarray  # i64 [n_updates] session index of each evaluation
    eval_history: list[dict]  # per evaluation point: {split: {"warm": x, "cold": y}}
    cum_ndcg: dict[str, float]  # per split
    train_info: list[dict]
    timings: dict[str, float]
    final_states: tuple[BucketState, ...] | None = None  # None when the run did not keep them (``keep_states``)
    perfect_docs: PerfectDocs | None = None
    logs: list[SessionLog] | None = None
    query_ndcg: dict[str, np.ndarray] | None = None  # final per-query "warm"/"cold" NDCG@K [n_queries]
    warmup_query: np.ndarray | None = None  # i32 [n_warm] query of every warm-up session
    final_params: object = None
    hyper: object = None  # the member's typed hyper-parameters

    @property
    def warm_ndcg(self) -> float:
        return float(self.eval_history[-1]["test"]["warm"])

    @property
    def cold_ndcg(self) -> float:
        return float(self.eval_history[-1]["test"]["cold"])


@functools.partial(jax.jit, static_argnames=("y_max", "mapping", "eps_min"))
def bucket_gains(labels: tuple, masks: tuple, discount: jax.Array, y_max: int, mapping: str, eps_min: float
                 ) -> tuple[tuple, tuple]:
    """Every bucket's gains g(R) (0 where padded) and ideal DCGs, in one program: computed eagerly, each
    operation of each bucket shape was a program of its own to compile (about 30, 1.5 s, at synthetic_mq2007)."""
    gains = tuple(click_lib.relevance(y, y_max, mapping, eps_min=eps_min) * m for y, m in zip(labels, masks))
    return gains, tuple(metrics.ideal_dcg(g, m, discount) for g, m in zip(gains, masks))


def ndcg_discount(config: SimConfig, click_model: click_lib.ClickModel) -> jax.Array:
    """The per-position NDCG discount of the protocol (see ``SimConfig.discount``)."""
    theta_host = np.asarray(click_model.examination)[: config.top_k]  # sliced and tested by NumPy: no program
    theta = jax.device_put(theta_host)  # jnp.asarray would compile a program (lax.stage)
    if config.discount == "examination":
        return theta
    if config.discount == "log2":
        return metrics.log2_discount(config.top_k)
    if config.discount != "auto":
        raise ValueError(f"unknown discount {config.discount!r}; expected auto, log2 or examination")
    if config.relevance == "ebrank" and click_model.kind == "affine" and bool(np.all(theta_host > 0)):
        return theta
    return metrics.log2_discount(config.top_k)


class TrialKeys(NamedTuple):
    init: jax.Array  # entry orders and initial candidate sets
    plan: jax.Array  # the session sequence
    run: jax.Array  # per-session randomness (clicks, policy noise)
    policy: jax.Array  # model initialization
    train: jax.Array  # retraining (folded with the segment index)


@dataclasses.dataclass
class PreparedSegment:
    """One segment of every member, ready to launch (``Simulator._prepare``)."""

    schedules: tuple  # per bucket: step_lib.SessionInputs with leading [members, steps, lanes] axes
    keys: jax.Array  # [members] run keys
    targets: list  # per trial, per bucket: (session index of every valid slot, valid mask)
    n_sessions: int  # sessions of the segment per member
    trial_of: np.ndarray  # trial index of every member
    widths: tuple | None = None  # per bucket: entry slots the segment program advances (None: every slot)
    bounds: tuple | None = None  # width classes: per bucket the first step of every class and the end ([C+1])


class ClassPlan(list):
    """One trial's lane schedules of a segment planned in width classes (``sim.segment_widths=classes``), per
    bucket, with what every trial of the segment shares: ``widths[b]`` the class widths (static, one set per
    phase) and ``bounds[b]`` the first step of every class and the last step's end (``[C+1]``)."""

    def __init__(self, schedules, widths: tuple, bounds: tuple):
        super().__init__(schedules)
        self.widths, self.bounds = widths, bounds


def class_rungs(cap: int, top_k: int) -> tuple[int, ...]:
    """The class widths of a bucket whose phase can fill ``cap`` entry slots: the ``width_ladder`` rungs from the
    one holding K up to ``cap`` (8, 12, 16, 24, ...; the last is ``cap``)."""
    rungs = [width_ladder(top_k, cap)]
    while rungs[-1] < cap:
        rungs.append(width_ladder(rungs[-1] + 1, cap))
    return tuple(rungs)


def choose_class_widths(rungs: tuple[int, ...], counts: np.ndarray, n_classes: int | None) -> tuple[int, ...]:
    """At most ``n_classes`` of ``rungs`` (ascending; the last, the phase's width, always kept) that scan the fewest
    slots: ``counts[i]`` sessions need rung ``i`` at least, and each is scanned at the smallest kept rung that holds
    it (a dynamic programme over the rungs; ties keep fewer classes). ``n_classes=None``: every rung."""
    rungs = tuple(int(r) for r in rungs)
    if n_classes is None or len(rungs) <= n_classes:
        return rungs
    cum = np.concatenate([[0], np.cumsum(np.asarray(counts, np.int64))])
    n = len(rungs)
    # cost[k][j]: fewest slots for the sessions needing rungs 0..j with k classes, the largest being rung j
    cost = np.full((n_classes + 1, n), np.inf)
    back = np.zeros((n_classes + 1, n), np.int64)
    cost[1] = [rungs[j] * cum[j + 1] for j in range(n)]
    for k in range(2, n_classes + 1):
        for j in range(n):
            for i in range(j):
                c = cost[k - 1][i] + rungs[j] * (cum[j + 1] - cum[i + 1])
                if c < cost[k][j]:
                    cost[k][j], back[k][j] = c, i
    k = min(range(1, n_classes + 1), key=lambda m: (cost[m][n - 1], m))
    chosen, j = [n - 1], n - 1
    while k > 1:
        j = int(back[k][j])
        chosen.append(j)
        k -= 1
    return tuple(rungs[i] for i in sorted(chosen))


def class_step_widths(plan: ClassPlan, full: list[int] | None = None) -> list[np.ndarray]:
    """Per bucket, the width each step of a ``ClassPlan`` scans (0 past the last class: those steps are not run);
    ``full``: per bucket the width every run step scans instead (a policy without ``narrow_rows``)."""
    out = []
    for b, (schedule, rungs, bounds) in enumerate(zip(plan, plan.widths, plan.bounds)):
        per_step = np.zeros(schedule.shape[0], np.int64)
        for c, w in enumerate(rungs):
            per_step[bounds[c]:bounds[c + 1]] = w if full is None else full[b]
        out.append(per_step)
    return out


def fitted_lanes(segment_rows: list[np.ndarray], most: int, steps: int) -> int:
    """The fewest lanes (at most ``most``) whose ``lane_schedule`` of every segment's sessions (their bucket rows)
    fits into ``steps`` steps: from the sessions per step of the busiest segment upwards."""
    busiest = max((len(r) for r in segment_rows), default=0)
    lanes = max(1, min(most, -(-busiest // max(steps, 1))))
    while lanes < most and any(len(r) and lane_schedule(r, lanes).shape[0] > steps for r in segment_rows):
        lanes = min(most, max(lanes + 1, int(lanes * 1.05)))
    return lanes


def trial_keys(key) -> TrialKeys:
    """The trial's keys, ``jax.random.split(key, 5)`` computed on the host (raw ``uint32[2]`` NumPy keys)."""
    return TrialKeys(*host_random.split(key, 5))


def click_uniforms(run_key: jax.Array, first_session: int, n_sessions: int, n_rows: int, top_k: int) -> np.ndarray:
    """Uniforms ``[n, n_rows, K]`` deciding the clicks of sessions first_session..first_session+n-1.

    Drawn in bulk on the host with NumPy's PCG64, seeded from the trial key and the first session
    index (threefry costs ~60 ns per number on a CPU; this ~1 ns). Shared verbatim with the reference.
    """
    words = host_random.key_words(run_key).ravel().tolist()
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(words + [int(first_session)])))
    return rng.random((n_sessions, n_rows, top_k), dtype=np.float32)


def concat_logs(logs: list[SessionLog]) -> SessionLog:
    """One log of consecutive segments (records concatenated leaf by leaf)."""
    if len(logs) == 1:
        return logs[0]
    records = [log.record for log in logs]
    record = None if records[0] is None else jax.tree_util.tree_map(lambda *r: np.concatenate(r), *records)
    return SessionLog(*(np.concatenate([getattr(log, f) for log in logs]) for f in ("query", "shown", "clicks",
                                                                                     "session")), record=record)


def default_session_count(data: PaddedDataset, entry_prob: float, rule: str = "ebrank") -> int:
    """The main phase's sessions when ``sim.sessions`` is null: ``rule="ebrank"``, #queries x (average documents - 5)
    / eta_new (EBRank Eq. 28); ``"ucbrank"``, #queries x average documents / eta_new (UCBRank §6.1.2: "roughly
    134k, 30k, 2.4M, and 7.6M sessions for MQ2007, MQ2008, MSLR-10K, and MSLR-30K"; the code's ``n_iteration``)."""
    mean_docs = float(np.mean(np.concatenate([np.asarray(b.n_docs) for b in data.buckets])))
    docs = mean_docs - 5.0 if rule == "ebrank" else mean_docs
    return max(1, int(round(data.n_queries * max(docs, 1.0) / entry_prob)))


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


def resolve_hyper(policy: Policy, hyper) -> Any:
    """A member's typed hyper-parameters from None (the configured ones), a {name: value} dict or a ``Hyper``."""
    if hyper is None:
        return policy.default_hyper()
    if isinstance(hyper, dict):
        return policy.make_hyper(**hyper)
    if not isinstance(hyper, policy.Hyper):
        raise TypeError(f"{policy.name} takes hyper-parameters of type {policy.Hyper.__name__} (or a dict of "
                        f"its fields), got {type(hyper).__name__}")
    return hyper


def resolve_hypers(policy: Policy, hypers: Sequence | None, n_members: int) -> list:
    """``resolve_hyper`` of every member (None: the configured values for all ``n_members``)."""
    hypers = [resolve_hyper(policy, h) for h in (list(hypers) if hypers is not None else [None] * n_members)]
    if len(hypers) != n_members:
        raise ValueError(f"{n_members} keys but {len(hypers)} hyper-parameter sets")
    return hypers


def _key_id(key: jax.Array) -> tuple[int, ...]:
    return tuple(host_random.key_words(key).ravel().tolist())


def group_trials(keys: Sequence[jax.Array]) -> tuple[np.ndarray, list[TrialKeys]]:
    """(trial index of every member, the keys of every distinct trial): members with equal keys share a trial."""
    trial_index: dict[tuple, int] = {}
    trial_of = np.asarray([trial_index.setdefault(_key_id(k), len(trial_index)) for k in keys])
    return trial_of, [trial_keys(keys[int(np.flatnonzero(trial_of == t)[0])]) for t in range(len(trial_index))]


# the retrain after the warm-up (sim.train_after_warmup) folds this into the train key: -1 as a uint32, the value
# jax < 0.10 made of the -1 it was given (jax 0.10 refuses negative fold_in data); segment i's retrain folds in i
WARMUP_RETRAIN = 0xFFFFFFFF


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


def fold_member_keys(trials: list[TrialKeys], trial_of: np.ndarray, field: str, *data: int) -> np.ndarray:
    """[M] keys: every member's ``field`` key of its trial (``TrialKeys``) folded with ``data`` in turn
    (``jax.random.fold_in`` computed on the host: ``host_random``), once per trial."""
    folded = {}
    for t in dict.fromkeys(int(t) for t in trial_of):
        key = getattr(trials[t], field)
        for d in data:
            key = host_random.fold_in(key, d)
        folded[t] = key
    return np.stack([folded[int(t)] for t in trial_of])


@dataclasses.dataclass
class MainPhase:
    """The main phase of one population run (``Simulator._run_members``): what it runs and what it accumulates,
    segment by segment (``Simulator._after_segment``). M members (leading axis), T distinct trials.

    Attributes:
      policy: the policy of every member.
      hyper: its stacked typed hyper-parameters, [M, ...] leaves.
      trials: the T distinct trials' keys.
      trial_of: i64 [M], each member's trial.
      n_real: members that are not device padding (the first ``n_real``).
      segments, plans: per segment and trial, its sessions (``SessionDraws``) and their schedule.
      starts, points: per segment, its first and last main session (the evaluation point).
      widths: per segment and bucket, the entry slots it scans (``Simulator.segment_widths``).
      session_ndcg: f32 [M, main sessions], NDCG@K of every session's shown list, filled segment by segment.
      history: per member, the split means of each evaluation so far.
      train_info: per member, one dict per retrain.
      logs: per member, every segment's ``SessionLog`` (None unless the logs are kept).
      pending: per member, the ``SessionLog`` of each segment since the last retrain (the next retrain's data).
      collect_logs: whether the sessions' shown lists, clicks and records come to the host (the logs are kept, or
        the policy retrains from them: ``Policy.reads_logs``); without them a retrain gets None logs.
      timings: seconds spent simulating, training and evaluating (shared with the warm-up).
      bar: the progress bar (main sessions x real members).
      per_query: the last evaluation's per-query NDCG, {"warm"/"cold": [M, Q]}.
    """

    policy: Policy
    hyper: Any
    trials: list
    trial_of: np.ndarray
    n_real: int
    segments: list
    plans: list
    starts: np.ndarray
    points: np.ndarray
    widths: list
    session_ndcg: np.ndarray
    history: list
    train_info: list
    logs: list | None
    pending: list
    collect_logs: bool
    timings: dict
    bar: Any
    per_query: dict | None = None


def per_bucket(fn: Callable, protocol, params, *per_bucket_args):
    """``fn(protocol, params, *args)`` for every bucket, ``per_bucket_args`` tuples over the buckets: one program
    evaluates them all (a program per bucket shape would be compiled, and traced, once each)."""
    return tuple(fn(protocol, params, *args) for args in zip(*per_bucket_args))


def member_by_member(fn: Callable, in_axes: tuple) -> Callable:
    """``fn`` over the leading member axis of the arguments whose ``in_axes`` is 0 (the others shared), one member
    after another (``map_in_blocks`` with blocks of one, a ``lax.map``) where ``jax.vmap`` would hold every member's transients at once: an evaluation
    puts each member's counters in dataset order and sorts its scores, about 0.08 GB per EBRank member at
    MSLR-30K shape (vmapped, the peak of a 14-member chunk of a short protocol: docs/performance.md#memory)."""
    mapped = tuple(i for i, axis in enumerate(in_axes) if axis == 0)

    def over_members(*args):
        def one(member_args):
            full = list(args)
            for i, value in zip(mapped, member_args):
                full[i] = value
            return fn(*full)

        return map_in_blocks(one, tuple(args[i] for i in mapped), 1)

    return over_members


def compiled(policy: Policy) -> dict[str, Callable]:
    """The policy's population programs (segment, evaluation, refresh), built once per policy object and
    kept on it, so they are freed with the policy. Shapes (members, buckets, lanes) are traced arguments:
    one program serves every simulator and population size of the same shapes."""
    programs = policy.__dict__.get("_ltrjax_programs")
    if programs is None:
        segment = functools.partial(step_lib.population_segment, policy)
        evaluate = functools.partial(step_lib.evaluate_bucket, policy)
        evaluate_rows = functools.partial(step_lib.evaluate_rows, policy)
        programs = {
            # states are donated: the scan updates their buffers in place instead of copying them
            "segment": jax.jit(segment, donate_argnums=3, static_argnames=("widths",)),
            "class_segment": jax.jit(functools.partial(step_lib.population_class_segment, policy), donate_argnums=3,
                                     static_argnames=("widths",)),
            # every bucket in one program (tuples over the buckets: states, buckets, gains, idcg, [rows,] aux)
            "evaluate": jax.jit(functools.partial(
                per_bucket, member_by_member(evaluate, in_axes=(None, 0, 0, None, None, None, 0)))),
            "evaluate_rows": jax.jit(functools.partial(
                per_bucket, member_by_member(evaluate_rows, in_axes=(None, 0, 0, None, None, None, None, 0)))),
            "refresh": jax.jit(jax.vmap(policy.refresh)),
        }
        policy.__dict__["_ltrjax_programs"] = programs
    return programs


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
    """

    def __init__(self, data: PaddedDataset, click_model: click_lib.ClickModel, config: SimConfig,
                 warmup_policy: Policy | None = None, max_members: int | None = None,
                 memory_budget: int | None = None, state_budget: int | None = None):
        if click_model.n_positions < config.top_k:
            raise ValueError(f"click model has {click_model.n_positions} positions, top_k is {config.top_k}")
        if max_members is not None and int(max_members) < 1:
            raise ValueError(f"max_members must be >= 1, got {max_members}")
        self.data = data
        self.click_model = click_model
        self.config = config = config.resolved()
        self.warmup_policy = warmup_policy
        self.max_members = None if max_members is None else int(max_members)
        self.memory_budget = int(memory_budget) if memory_budget else memory_budget_default()
        self.state_budget = int(state_budget) if state_budget and jax.default_backend() == "cpu" else None
        self.discount = ndcg_discount(config, click_model)
        self.uniform_rows = 2 if click_model.kind == "cascade" else 1
        self.protocol = step_lib.Protocol(click_model=click_model, discount=self.discount, top_k=config.top_k,
                                          uniform_rows=self.uniform_rows, device_rng=config.click_rng == "device")
        self.gains, self.idcg = bucket_gains(tuple(b.labels for b in data.buckets),
                                             tuple(b.doc_mask for b in data.buckets), self.discount, data.y_max,
                                             config.relevance, config.relevance_eps_min)
        # the same padded with a zero scratch row, as the session step reads them (``step.QueryConstants``): once
        self.queries = tuple(step_lib.query_constants(b, g, i) for b, g, i in zip(data.buckets, self.gains, self.idcg))
        self.docs_per_query = np.zeros(data.n_queries, np.int64)  # documents of every query (dataset order)
        for b in data.buckets:
            self.docs_per_query[np.asarray(b.query_index)] = np.asarray(b.n_docs)
        self.n_lanes = tuple(
            int(np.clip(int(b.n_queries * config.lanes_per_query), min(config.min_lanes, b.n_queries),
                        config.max_lanes)) for b in data.buckets
        )
        self._steps: dict[str, int] = {}
        self._lanes: dict[str, tuple[int, ...]] = {}  # per phase: lanes per bucket (``plan``)
        self._widths: dict[int, list[tuple[int, ...]]] = {}  # per segment count: widths (``segment_widths``)
        self._classes: tuple | None = None  # width classes: (phase width per bucket, class widths per bucket)
        self._width_shapes: set[tuple[int, ...]] = set()
        self.trims_heap = sum(int(np.prod(b.labels.shape)) for b in data.buckets) >= HEAP_TRIM_SLOTS
        self._cum_weights = np.ones(0)  # Cum-NDCG's weights (``metrics.cumulative_weights``), the longest so far
        self._aux_bytes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # per policy (``aux_bytes``)
        self.test_rows = tuple(np.flatnonzero(np.asarray(b.split) == TEST).astype(np.int32) for b in data.buckets)
        self._document_cells: DocumentCells | None = None  # ``document_cells``, when a retrain first needs them

    # ------------------------------------------------------------------ plans and draws
    def init_states(self, key: jax.Array, names: tuple[str, ...] = STAT_NAMES) -> list[BucketState]:
        """Every bucket's initial state (``state.init_bucket_state``), on the device."""
        return jax.device_put(self.host_init_states(key, names))

    def host_init_states(self, key: jax.Array, names: tuple[str, ...] = STAT_NAMES) -> list[BucketState]:
        """``init_states`` computed on the host with NumPy (``state.init_bucket_state_host``: the same arrays, and
        no program per bucket shape to compile); the simulator stacks and uploads them per population. Only the
        counters ``names`` are kept (a policy's: ``kept_counters(policy.counters_read)``)."""
        return [init_bucket_state_host(host_random.fold_in(key, b), bucket, self.config.initial_docs, names)
                for b, bucket in enumerate(self.data.buckets)]

    def document_cells(self) -> DocumentCells:
        """The layout's cells for retrains that filter their documents on the device (made once)."""
        if self._document_cells is None:
            self._document_cells = document_cells(self.data)
        return self._document_cells

    def session_counts(self) -> tuple[int, int]:
        """(warm-up, main) sessions of a trial."""
        cfg = self.config
        n_main = cfg.sessions or default_session_count(self.data, cfg.entry_prob, cfg.session_count)
        return cfg.warmup_sessions_per_query * self.data.n_queries, n_main

    def session_plan(self, key: jax.Array) -> tuple[SessionDraws, SessionDraws]:
        """Warm-up and main session draws of a trial."""
        cfg = self.config
        n_warm, n_main = self.session_counts()
        k_warm, k_main = host_random.split(key)
        warm = draw_sessions(k_warm, n_warm, self.data.n_queries, 0.0, first_session=0)
        main = draw_sessions(k_main, n_main, self.data.n_queries, cfg.entry_prob, first_session=n_warm)
        return warm, main

    def plan(self, segments: list[SessionDraws], phase: str = "main") -> list[list[np.ndarray]]:
        """Lane schedules of every segment and bucket, padded to one step count: entry ``[step, lane]``
        is the segment-local index of the session that lane runs, or -1 when it is idle.

        One shape means one compilation per policy; the step count and the lanes per bucket are also remembered
        per phase, so later trials (other draws) reuse the shape instead of recompiling. The step count comes from
        the configured lanes (``n_lanes``); then every bucket keeps only as many lanes as its busiest segment needs
        to fit into that step count (``fitted_lanes``), so small buckets do not scan idle lanes.
        """
        rows = [[self.data.row_of_query[draws.query[np.flatnonzero(self.data.bucket_of_query[draws.query] == b)]]
                 for b in range(len(self.data.buckets))] for draws in segments]
        lanes = self._lanes.get(phase)
        steps = self._steps.get(phase, 0)
        known = {}  # (segment, bucket) -> its schedule with the remembered lanes, computed once
        if lanes is not None:
            known = {(i, b): lane_schedule(r[b], lanes[b]) for i, r in enumerate(rows) for b in range(len(r))
                     if len(r[b])}
        if lanes is None or any(schedule.shape[0] > steps for schedule in known.values()):
            needed = max((lane_schedule(r[b], self.n_lanes[b]).shape[0] for r in rows for b in range(len(r))
                          if len(r[b])), default=1)
            steps = max(steps, padded_steps(needed))  # the ladder leaves headroom for other trials' draws
            lanes = tuple(fitted_lanes([r[b] for r in rows], self.n_lanes[b], steps)
                          for b in range(len(self.data.buckets)))
            self._steps[phase], self._lanes[phase] = steps, lanes
            known = {}
        plans = []
        for i, (draws, per_bucket) in enumerate(zip(segments, rows)):
            bucket_of = self.data.bucket_of_query[draws.query]
            plan = []
            for b in range(len(self.data.buckets)):
                members = np.flatnonzero(bucket_of == b)
                if members.size == 0:
                    plan.append(None)
                    continue
                schedule = known[i, b] if (i, b) in known else lane_schedule(per_bucket[b], lanes[b])
                plan.append(np.where(schedule >= 0, members[np.maximum(schedule, 0)], -1))  # segment-local
            plans.append(plan)
        for p in plans:
            for b, schedule in enumerate(p):
                if schedule is None:
                    p[b] = np.full((steps, lanes[b]), -1, np.int64)
                elif schedule.shape[0] < steps:
                    pad = np.full((steps - schedule.shape[0], schedule.shape[1]), -1, schedule.dtype)
                    p[b] = np.concatenate([schedule, pad])
        return plans

    def main_segments(self, mains: list[SessionDraws], n_main: int) -> tuple[np.ndarray, np.ndarray, list, list]:
        """(last session of each segment, first session of each segment, per segment the trials' draws, per
        segment the trials' lane plans) of the first ``n_main`` main sessions of every trial; all trials are
        planned together, so their schedules share one step count."""
        points = update_points(n_main, self.config.n_segments)
        starts = np.concatenate([[0], points[:-1] + 1])
        segments = [[m.slice(int(a), int(b)) for m in mains] for a, b in zip(starts, points + 1)]
        if self.config.segment_widths == "classes":
            return points, starts, segments, self.class_plans(mains, segments, points)
        plans = self.plan([s for per_trial in segments for s in per_trial])
        plans = [plans[i * len(mains):(i + 1) * len(mains)] for i in range(len(segments))]
        return points, starts, segments, plans

    def class_plans(self, mains: list[SessionDraws], segments: list[list[SessionDraws]], points: np.ndarray
                    ) -> list[list[ClassPlan]]:
        """Per segment and trial, the lane schedules of a main phase planned in width classes
        (``sim.segment_widths=classes``). A query's class in a segment is the smallest of the bucket's class widths
        (``segment_widths``: at most ``width_classes`` of the ``class_rungs`` up to the phase's width) that holds
        every document it can have entered by the segment's end (the most initial documents plus its entries so
        far, at most its documents; at least K).
        Each class's sessions are packed into the bucket's lanes (``lane_schedule``) and the classes follow each
        other in time; every trial of a segment gets the same class bounds (the longest trial's). The lanes per
        bucket are sized from the bucket's sessions per segment (about ``CLASS_STEPS`` steps, at most
        ``n_lanes``) and the schedules padded to one step count per bucket (``padded_steps``): with the class
        widths remembered per phase, one segment program serves the phase; the bounds are its arguments."""
        data = self.data
        widths = self.segment_widths(mains, points)[0]
        bucket_of = [data.bucket_of_query[d.query] for d in mains]
        lanes = self._lanes.get("classes")
        if lanes is None:
            busiest = [max(int(np.sum(bucket_of[t][a:z + 1] == b)) for t in range(len(mains))
                           for a, z in zip(np.r_[0, points[:-1] + 1], points)) for b in range(len(data.buckets))]
            lanes = tuple(max(1, min(n, -(-m // CLASS_STEPS))) for n, m in zip(self.n_lanes, busiest))
            self._lanes["classes"] = lanes
        entering = [np.zeros(data.n_queries, np.int64) for _ in mains]
        out = []
        for s, per_trial in enumerate(segments):
            for t, draws in enumerate(per_trial):
                entering[t] += np.bincount(draws.query[draws.enter], minlength=data.n_queries)
            per_bucket = [[] for _ in mains]  # per trial, per bucket: the class schedules
            bounds = []
            for b in range(len(data.buckets)):
                rungs = np.asarray(widths[b])
                blocks = [[] for _ in mains]
                for t, draws in enumerate(per_trial):
                    members = np.flatnonzero(data.bucket_of_query[draws.query] == b)
                    q = draws.query[members]
                    need = self.class_need(q, entering[t])
                    if len(need) and need.max() > rungs[-1]:  # segment_widths covers the phase: never here
                        raise AssertionError(f"bucket {b}: a query can fill {need.max()} slots > {rungs[-1]}")
                    cls = np.searchsorted(rungs, need)
                    for c in range(len(rungs)):
                        pick = members[cls == c]
                        if pick.size == 0:
                            blocks[t].append(np.zeros((0, lanes[b]), np.int64))
                            continue
                        schedule = lane_schedule(data.row_of_query[draws.query[pick]], lanes[b], level=True)
                        blocks[t].append(np.where(schedule >= 0, pick[np.maximum(schedule, 0)], -1))
                steps = [max(blocks[t][c].shape[0] for t in range(len(mains))) for c in range(len(rungs))]
                bounds.append(tuple(int(x) for x in np.r_[0, np.cumsum(steps)]))
                for t in range(len(mains)):
                    per_bucket[t].append(np.concatenate(
                        [np.concatenate([blk, np.full((n - blk.shape[0], lanes[b]), -1, np.int64)])
                         for blk, n in zip(blocks[t], steps)]))
            out.append((per_bucket, tuple(bounds)))
        total = self._steps.get("classes", ())
        need = tuple(max(bnd[b][-1] for _, bnd in out) for b in range(len(data.buckets)))
        if not total or any(n > m for n, m in zip(need, total)):
            # headroom for other trials' draws: steps past the bounds are not run, so it costs only their inputs
            total = tuple(max(padded_steps(max(-(-5 * n // 4), 1)), m) for n, m in zip(need, total or (0,) * len(need)))
            self._steps["classes"] = total
        plans = []
        for per_bucket, bnd in out:
            plans.append([ClassPlan([np.concatenate([sch, np.full((total[b] - sch.shape[0], lanes[b]), -1, np.int64)])
                                     for b, sch in enumerate(trial)], widths, bnd) for trial in per_bucket])
        return plans

    def schedule_inputs(self, draws: SessionDraws, plan: list[np.ndarray], run_key: jax.Array
                        ) -> tuple[list[step_lib.SessionInputs], list[tuple[np.ndarray, np.ndarray]]]:
        """Per bucket: the scan inputs ``[steps, lanes, ...]`` of one trial's segment, and (session index of
        every valid slot, valid mask) to put the outputs back into session order."""
        n = len(draws)
        uniforms = None
        if not self.protocol.device_rng:
            uniforms = click_uniforms(run_key, int(draws.session[0]) if n else 0, n, self.uniform_rows,
                                      self.config.top_k)
        inputs, targets = [], []
        for b, bucket in enumerate(self.data.buckets):
            valid = plan[b] >= 0
            idx = np.where(valid, plan[b], 0)
            rows = np.where(valid, self.data.row_of_query[draws.query[idx]], bucket.n_queries).astype(np.int32)
            inputs.append(step_lib.SessionInputs(rows=rows, enter=valid & draws.enter[idx],
                                                 session=draws.session[idx].astype(np.int32),
                                                 uniforms=None if uniforms is None else uniforms[idx], valid=valid))
            targets.append((idx[valid], valid))
        return inputs, targets

    # ------------------------------------------------------------------ memory
    def aux_bytes(self, policy: Policy) -> int:
        """The bytes of one member's ``prepare`` output over every bucket (shapes only: ``jax.eval_shape``, nothing
        is computed). A population keeps one per member (stacked, in entry order), so it counts per member. Kept per
        policy: tracing ``prepare`` over every bucket again for every population would cost seconds."""
        known = self._aux_bytes.get(policy)
        if known is not None:
            return known
        params = jax.eval_shape(lambda key: policy.init(key, self.data), jax.ShapeDtypeStruct((2,), jnp.uint32))
        total = 0
        for bucket in self.data.buckets:
            def laid_out(p, b=bucket):  # the entry-order layout a population stacks (per document: on slots)
                aux = policy.prepare(p, b, DocCounters.zeros(b.labels.shape))
                return jax.tree_util.tree_map(lambda a: b.on_slots(a, axis=0), aux) if policy.prepared_per_document \
                    else aux

            aux = jax.eval_shape(laid_out, params)
            total += sum(int(np.prod(a.shape)) * a.dtype.itemsize for a in jax.tree_util.tree_leaves(aux))
        self._aux_bytes[policy] = total
        return total

    def member_bytes(self, policy: Policy | None = None) -> int:
        """A rough upper bound of the memory one member needs (state, one segment's inputs and outputs, and,
        given the policy, twice its ``prepare`` output: the stacked entry-order copy the scan reads and the one the
        segment returns for evaluation, or the values it was laid out from)."""
        k = self.config.top_k
        n_main = self.session_counts()[1]
        per_segment = n_main / max(self.config.n_segments, 1)
        state = self.state_bytes(policy)
        steps = max(self._steps.get("main", 0), int(per_segment / max(sum(self.n_lanes), 1)) + 1)
        segment = sum(steps * lanes * (4 * self.uniform_rows * k + 16 + 4 + 5 * k) for lanes in self.n_lanes)
        # x4.5: calibrated on synthetic_mslr30k at 3,000 queries (1 vs 7 EBRank members: 108 MB more per member,
        # with x3 this estimated 72 MB)
        aux = 2 * self.aux_bytes(policy) if policy is not None else 0
        return int(4.5 * (state + segment) + 64 * per_segment) + aux

    def state_bytes(self, policy: Policy | None = None) -> int:
        """One member's ``BucketState`` bytes over every bucket: the counters the policy keeps (all six without
        a policy) and the order, rank and entry-session planes, 4 bytes per ``[query, slot]``."""
        planes = len(kept_counters(policy.counters_read)) if policy is not None else len(STAT_NAMES)
        return sum(b.n_queries * b.width * (planes + 3) * 4 for b in self.data.buckets)

    def chunk_size(self, n_members: int, max_members: int | None = None, policy: Policy | None = None) -> int:
        """Members per compiled chunk: within the cap, the memory budget (``member_bytes``, with the policy's
        per-member values when it is given) and, on a CPU, the state budget (``state_bytes``), and balanced, so the
        padded last chunk wastes at most one member per chunk (21 members that fit 13 at a time run as 11 + 10,
        not 13 + 8 padded to 13)."""
        cap = max_members or self.max_members or n_members
        fits = max(1, self.memory_budget // max(self.member_bytes(policy), 1))
        if self.state_budget is not None:
            fits = min(fits, max(1, self.state_budget // max(self.state_bytes(policy), 1)))
        most = int(max(1, min(n_members, cap, fits)))
        n_chunks = -(-n_members // most)
        return -(-n_members // n_chunks)

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
        keys = list(keys)
        hypers = resolve_hypers(policy, hypers, len(keys))
        size = self.chunk_size(len(keys), max_members, policy)
        self.announce(policy, len(keys), size)
        results = []
        tic = time.perf_counter()
        for start in range(0, len(keys), size):
            chunk_keys, chunk_hypers = keys[start:start + size], hypers[start:start + size]
            n_real = len(chunk_keys)
            if start and n_real < size:  # a short last chunk: pad with copies of its last member, one shape
                chunk_keys = chunk_keys + [chunk_keys[-1]] * (size - n_real)
                chunk_hypers = chunk_hypers + [chunk_hypers[-1]] * (size - n_real)
            results += self._run_members(policy, chunk_keys, chunk_hypers, progress, keep_logs, keep_states)[:n_real]
            if on_chunk is not None:
                on_chunk(results)
            self.release_heap()
            if start == 0 and len(keys) > size:
                spent = time.perf_counter() - tic  # the first chunk includes compiling: a pessimistic ETA
                left = spent * (len(keys) - size) / size
                log.info("%s: first chunk of %d members in %.0f s; about %.0f s (%.1f min) left for the other %d "
                         "members", policy.name, size, spent, left, left / 60, len(keys) - size)
        return results

    def release_heap(self) -> None:
        """``release_free_heap`` after a warm-up, retrain or chunk, for a simulator of at least ``HEAP_TRIM_SLOTS``
        document slots (``trims_heap``); below that a trim returns little and costs more."""
        if self.trims_heap:
            release_free_heap()

    def check_fits(self, policy: Policy) -> int:
        """The estimated bytes of one member of ``policy`` (``member_bytes``); ``ConfigError`` on
        ``population.memory_gb`` when even the smallest chunk, a single member, does not fit the memory budget."""
        per_member = self.member_bytes(policy)
        gib = 1 << 30
        if per_member > self.memory_budget:
            raise ConfigError("population.memory_gb", float(f"{self.memory_budget / gib:.3g}"),
                              f"one member of {policy.name} needs about {per_member / (1 << 20):.1f} MiB (estimated: "
                              f"simulator state, one segment of sessions and the policy's per-member values) and "
                              f"the smallest chunk is one member; raise population.memory_gb (null: half the "
                              f"available memory), or reduce the dataset or sim.sessions")
        return per_member

    def announce(self, policy: Policy, n_members: int, size: int) -> None:
        """Log a population's plan (members, chunks, memory per member and per chunk against the budget);
        refuse one whose smallest chunk does not fit (``check_fits``)."""
        per_member = self.check_fits(policy)
        n_chunks = -(-n_members // size)
        state = (f"; state {size_text(self.state_bytes(policy))} per member (CPU chunk state budget "
                 f"{size_text(self.state_budget)})" if self.state_budget is not None else "")
        log.info("%s: %d members in %d chunk%s of %d; about %s per member, %s per chunk (budget %s)%s", policy.name,
                 n_members, n_chunks, "" if n_chunks == 1 else "s", size, size_text(per_member),
                 size_text(per_member * size), size_text(self.memory_budget), state)

    def simulate_frozen(self, policy: Policy, keys: Sequence[jax.Array], hypers: Sequence | None = None,
                        n_sessions: int | None = None) -> tuple[list[BucketState], int]:
        """The main-phase sessions of every member with the policy frozen at its initial parameters: no
        warm-up, retraining or evaluation (the simulation core, for throughput benchmarks). Returns the
        final states (leading member axis, blocked until ready) and the sessions simulated per member."""
        keys = list(keys)
        hypers = resolve_hypers(policy, hypers, len(keys))
        trial_of, trials = group_trials(keys)
        mains = [self.session_plan(t.plan)[1] for t in trials]
        n_main = min(len(mains[0]), n_sessions or len(mains[0]))
        points, _, segments, plans = self.main_segments(mains, n_main)
        params = self._shard(stack_members([policy.init(trials[t].policy, self.data) for t in trial_of]))
        hyper = self._shard(stack_members(hypers))
        names = kept_counters(policy.counters_read)
        initial = [stack_members(s) for s in zip(*(self.host_init_states(t.init, names) for t in trials))]
        states = [jax.tree_util.tree_map(lambda a: a[trial_of], s) for s in initial]
        _, states = self._run_segments(policy, params, hyper, states, segments, plans, [t.run for t in trials],
                                       trial_of, self.segment_widths(mains, points))
        return states, n_main

    def _run_segments(self, policy: Policy, params, hyper, states, segments: list, plans: list, run_keys: list,
                      trial_of: np.ndarray, widths: list | None, before: Callable | None = None,
                      after: Callable | None = None, timings: dict | None = None, logs: bool = True):
        """Every segment of a phase (warm-up or main), for every member: the one simulation loop (``_run_members``;
        ``simulate_frozen`` and the warm-up use it without hooks). The next segment's host work (``_prepare``) runs
        while the device runs the current one. ``before(i, params) -> params`` runs before segment i is launched
        (e.g. a new dropout mask), ``after(i, params, states, outputs) -> params`` once its outputs are collected
        (evaluation, logging, retraining); the time of everything but ``after`` is added to
        ``timings["simulate"]``. ``widths[i]``: segment i's entry slots per bucket (``segment_widths``; None: all).
        Without ``after`` no output comes to the host; ``logs=False`` brings only the sessions' NDCG (``_collect``).
        Returns the final (params, states)."""
        widths = widths or [None] * len(segments)
        upcoming = self._prepare(segments[0], plans[0], run_keys, trial_of, widths[0])
        for i in range(len(segments)):
            tic = time.perf_counter()
            if before is not None:
                params = before(i, params)
            segment = upcoming
            states, ys, prepared = self._launch(policy, params, hyper, states, segment)
            states = list(states)
            if i + 1 < len(segments):  # host work for the next segment while the device runs this one
                upcoming = self._prepare(segments[i + 1], plans[i + 1], run_keys, trial_of, widths[i + 1])
            if after is None:  # nothing to collect; still one segment in flight at a time
                outputs = jax.block_until_ready(ys)
            else:
                outputs = self._collect(ys, segment, logs)
            if timings is not None:
                timings["simulate"] += time.perf_counter() - tic
            if after is not None:
                params = after(i, params, states, outputs, prepared)
        return params, jax.block_until_ready(states)

    def _shard(self, tree):
        """Place a member-leading pytree sharded over the devices (unchanged on one device, or when the
        member count does not divide evenly, e.g. a warm-up population of fewer trials than devices)."""
        sharding = member_sharding()
        leaves = jax.tree_util.tree_leaves(tree)
        if sharding is None or not leaves or leaves[0].shape[0] % jax.device_count():
            return tree
        return jax.device_put(tree, sharding)

    def reachable_widths(self, runs: list[SessionDraws]) -> tuple[int, ...]:
        """Per bucket, how many entry slots the documents of any query can fill in these sessions (each trial's
        whole phase): the most initial documents plus the most entering sessions of one query, at least K (a list
        of fewer than K entered documents shows empty slots, and ``lax.top_k`` gives them the lowest masked
        indices, ``entered .. K-1``: within the first K, so they index the same slots narrowed or not), rounded up
        to a multiple of 32 (few shapes to compile), at most the bucket's width."""
        entering = np.zeros(self.data.n_queries, np.int64)
        for draws in runs:
            entering = np.maximum(entering, np.bincount(draws.query[draws.enter], minlength=self.data.n_queries))
        widths = []
        for b, bucket in enumerate(self.data.buckets):
            queries = np.asarray(bucket.query_index)
            most = int(entering[queries].max()) if len(queries) else 0
            need = max(self.config.initial_docs[1] + most, self.config.top_k)
            widths.append(int(min(bucket.width, -(-need // 32) * 32)))
        return tuple(widths)

    def segment_widths(self, runs: list[SessionDraws], stops: np.ndarray) -> list[tuple[int, ...]]:
        """Per segment (``stops[s]``: its last session, inclusive) and bucket, how many entry slots the documents of
        any query can fill by the segment's end in these sessions (each trial's phase): the most initial documents
        plus the most entering sessions of one query so far, at least K (``reachable_widths``), on the
        ``width_ladder`` (few shapes to compile), at most the bucket's width. A segment scans only these slots
        (``step.scan_segment``). Like the step count, the widths are remembered per segment count and only ever
        grow, so later trials reuse the compiled shapes unless their draws need wider rows. With
        ``sim.segment_widths=phase`` (the default) every segment gets the phase's ``reachable_widths`` instead (one
        program); with ``classes`` every segment gets per bucket the class widths (``class_rungs``) up to the
        phase's ``reachable_widths``, remembered and only growing (``class_plans``)."""
        if self.config.segment_widths == "phase":
            out = [self.reachable_widths(runs)] * len(stops)
            self._width_shapes.update(out)
            return out
        if self.config.segment_widths == "classes":  # the class widths, one set per phase (``class_plans``)
            before = self._classes[0] if self._classes else (0,) * len(self.data.buckets)
            reach = tuple(max(a, b) for a, b in zip(self.reachable_widths(runs), before))
            if self._classes is None or self._classes[0] != reach:  # chosen once per phase width, for these sessions
                counts = self.class_need_counts(runs, stops, reach)
                self._classes = reach, tuple(
                    choose_class_widths(class_rungs(w, self.config.top_k), c, self.config.width_classes)
                    for w, c in zip(reach, counts))
            out = [self._classes[1]] * len(stops)
            self._width_shapes.update(out)
            return out
        queries = [np.asarray(b.query_index) for b in self.data.buckets]
        out = []
        for stop in stops:
            entering = np.zeros(self.data.n_queries, np.int64)
            for draws in runs:
                upto = draws.slice(0, int(stop) + 1)
                entering = np.maximum(entering, np.bincount(upto.query[upto.enter], minlength=self.data.n_queries))
            out.append(tuple(
                width_ladder(max(self.config.initial_docs[1] + (int(entering[q].max()) if len(q) else 0),
                                 self.config.top_k), bucket.width)
                for q, bucket in zip(queries, self.data.buckets)))
        before = self._widths.get(len(stops), out)
        out = [tuple(max(a, b) for a, b in zip(x, y)) for x, y in zip(out, before)]
        self._widths[len(stops)] = out
        self._width_shapes.update(out)
        return out

    def class_need(self, queries: np.ndarray, entering: np.ndarray) -> np.ndarray:
        """Entry slots each of ``queries``' sessions needs with width classes: the most documents its query can have
        entered (the most initial documents plus ``entering[query]``, its entries so far), at most its documents,
        at least K."""
        cfg = self.config
        return np.maximum(np.minimum(cfg.initial_docs[1] + entering[queries], self.docs_per_query[queries]), cfg.top_k)

    def class_need_counts(self, runs: list[SessionDraws], stops: np.ndarray, reach: tuple[int, ...]
                          ) -> list[np.ndarray]:
        """Per bucket, how many of these sessions need each ``class_rungs`` width of the bucket's phase width
        ``reach[b]`` at least: a session needs the most documents its query can have entered by its segment's end
        (``stops[s]``: the last session, inclusive), the initial documents plus its entries so far, at most its
        documents, at least K (as ``class_plans`` assigns them)."""
        cfg, data = self.config, self.data
        rungs = [np.asarray(class_rungs(w, cfg.top_k)) for w in reach]
        counts = [np.zeros(len(r), np.int64) for r in rungs]
        for draws in runs:
            entering = np.zeros(data.n_queries, np.int64)
            for start, stop in zip(np.r_[0, stops[:-1] + 1], stops):
                seg = draws.slice(int(start), int(stop) + 1)
                entering += np.bincount(seg.query[seg.enter], minlength=data.n_queries)
                need = self.class_need(seg.query, entering)
                bucket = data.bucket_of_query[seg.query]
                for b, r in enumerate(rungs):
                    idx = np.minimum(np.searchsorted(r, need[bucket == b]), len(r) - 1)
                    counts[b] += np.bincount(idx, minlength=len(r))
        return counts

    def width_sets(self) -> list[tuple]:
        """The distinct per-segment width tuples runs and plans used so far, sorted: per bucket one width, or with
        width classes the bucket's class widths (each a copy of the session step in the segment program)."""
        return sorted(self._width_shapes)

    def width_shapes(self) -> int:
        """How many distinct per-segment width tuples (segment programs of a narrowing policy) runs used so far."""
        return len(self._width_shapes)

    def doc_slot_occupancy(self, policy: Policy, keys: Sequence[jax.Array]) -> float:
        """Entered-document evaluations / scanned document slots (lanes x steps x width, every bucket and segment)
        of the main phase of ``keys``' trials, from their plans and initial states (``schedule.doc_slot_occupancy``;
        deterministic, nothing is simulated). A policy without ``narrow_rows`` scans every slot."""
        _, trials = group_trials(keys)
        mains = [self.session_plan(t.plan)[1] for t in trials]
        n_main = len(mains[0])
        points, starts, segments, plans = self.main_segments(mains, n_main)
        widths = (self.segment_widths(mains, points) if policy.narrow_rows
                  else [tuple(b.width for b in self.data.buckets)] * len(points))
        all_plans, all_entered, all_widths = [], [], []
        for t, trial in enumerate(trials):
            initial = np.zeros(self.data.n_queries, np.int64)
            for b, state in zip(self.data.buckets, self.host_init_states(trial.init)):
                initial[np.asarray(b.query_index)] = np.asarray(state.n_entered)[:-1]
            entered = entered_counts(mains[t].slice(0, n_main), initial, self.docs_per_query)
            for s in range(len(points)):
                all_plans.append(plans[s][t])
                all_entered.append(entered[starts[s]:points[s] + 1])
                all_widths.append(class_step_widths(plans[s][t], None if policy.narrow_rows else
                                                    [b.width for b in self.data.buckets])
                                  if isinstance(plans[s][t], ClassPlan) else widths[s])
        return doc_slot_occupancy(all_plans, all_entered, all_widths)

    def _prepare(self, draws: list[SessionDraws], plans: list, run_keys: list[jax.Array], trial_of: np.ndarray,
                 widths: tuple | None = None) -> PreparedSegment:
        """The host side of one segment of every member (``draws``/``plans``/``run_keys`` per trial): scan
        inputs (with the click uniforms) stacked per member, and where each output goes. It does not depend
        on the simulation state, so the next segment is prepared while the device runs the current one."""
        per_trial = [self.schedule_inputs(d, p, k) for d, p, k in zip(draws, plans, run_keys)]
        bounds = None
        if isinstance(plans[0], ClassPlan):
            widths, bounds = plans[0].widths, tuple(np.asarray(b, np.int32) for b in plans[0].bounds)
        schedules = tuple(  # one copy per member of its trial's inputs
            jax.tree_util.tree_map(lambda *xs: np.stack([xs[t] for t in trial_of]),
                                   *(inputs[b] for inputs, _ in per_trial))
            for b in range(len(self.data.buckets)))
        return PreparedSegment(schedules=self._shard(schedules),
                               keys=self._shard(np.stack([host_random.key_words(run_keys[t]) for t in trial_of])),
                               targets=[targets for _, targets in per_trial], n_sessions=len(draws[0]),
                               trial_of=trial_of, widths=widths, bounds=bounds)

    def _launch(self, policy: Policy, params, hyper, states, segment: PreparedSegment):
        """Dispatch one prepared segment (asynchronously): returns the new states, the device outputs and the
        segment's ``prepare`` output for evaluation (``step.population_segment``)."""
        if segment.bounds is not None:
            widths = (segment.widths if policy.narrow_rows
                      else tuple((None,) * len(w) for w in segment.widths))
            return compiled(policy)["class_segment"](self.protocol, params, hyper, self._shard(tuple(states)),
                                                     self.data.buckets, self.queries, segment.schedules,
                                                     segment.keys, segment.bounds, widths=widths)
        widths = segment.widths if policy.narrow_rows else None
        return compiled(policy)["segment"](self.protocol, params, hyper, self._shard(tuple(states)),
                                           self.data.buckets, self.queries, segment.schedules, segment.keys,
                                           widths=widths)

    def _collect(self, ys, segment: PreparedSegment, logs: bool = True):
        """A launched segment's outputs in session order: per member NDCG ``[P, n]``, shown ``[P, n, K]``,
        clicks and session records (leaves ``[P, n, ...]``); blocks until the device is done. With ``logs=False``
        only the NDCG comes to the host (shown, clicks and records are None)."""
        trial_of, n, k_top = segment.trial_of, segment.n_sessions, self.config.top_k
        n_members = len(trial_of)
        ndcg = np.zeros((n_members, n), np.float32)
        if not logs:
            ys = [out.replace(shown=None, clicks=None, record=None) for out in ys]
        shown = np.full((n_members, n, k_top), -1, np.int32) if logs else None
        clicked = np.zeros((n_members, n, k_top), bool) if logs else None
        records = None
        groups = [np.flatnonzero(trial_of == t) for t in range(len(segment.targets))]
        for b, out in enumerate(jax.device_get(ys)):
            for t, rows in enumerate(groups):
                target, valid = segment.targets[t][b]
                sel = (rows[:, None], target[None, :])
                ndcg[sel] = out.ndcg[rows][:, valid]
                if not logs:
                    continue
                shown[sel] = out.shown[rows][:, valid]
                clicked[sel] = out.clicks[rows][:, valid]
                if out.record is not None:
                    if records is None:
                        records = jax.tree_util.tree_map(
                            lambda r: np.zeros((n_members, n) + r.shape[3:], r.dtype), out.record)
                    jax.tree_util.tree_map(lambda acc, r: acc.__setitem__(sel, r[rows][:, valid]), records, out.record)
        return ndcg, shown, clicked, records

    def _evaluate(self, policy: Policy, params, states, test_only: bool = False, prepared=None
                  ) -> dict[str, np.ndarray]:
        """Warm/Cold NDCG@K per member and global query ``[P, n_queries]``; with ``test_only`` only the test
        queries are evaluated (the others are NaN). ``prepared``: per bucket the last segment's ``prepare`` output
        for these ``params`` (``_launch``), reused instead of recomputed (None: recomputed)."""
        return self._evaluated(self._launch_evaluation(policy, params, states, test_only, prepared))

    def _launch_evaluation(self, policy: Policy, params, states, test_only: bool = False, prepared=None) -> tuple:
        """``_evaluate``'s program, launched (the device computes it while the host goes on); ``_evaluated`` brings
        its results."""
        n_members = jax.tree_util.tree_leaves(states[0])[0].shape[0]
        picked = [b for b in range(len(self.data.buckets)) if not test_only or len(self.test_rows[b])]
        pick = lambda xs: tuple(xs[b] for b in picked)  # noqa: E731
        aux = (None,) * len(picked) if prepared is None else pick(prepared)
        args = (self.protocol, params, pick(states), pick(self.data.buckets), pick(self.gains), pick(self.idcg))
        if test_only:  # one program for every bucket
            results = compiled(policy)["evaluate_rows"](*args, pick(self.test_rows), aux)
        else:
            results = compiled(policy)["evaluate"](*args, aux)
        return n_members, picked, test_only, results

    def _evaluated(self, launched: tuple) -> dict[str, np.ndarray]:
        """The per-query Warm/Cold NDCG of a ``_launch_evaluation``."""
        n_members, picked, test_only, results = launched
        out = {name: np.full((n_members, self.data.n_queries), np.nan, np.float32) for name in ("warm", "cold")}
        for b, (warm, cold) in zip(picked, jax.device_get(results)):
            query = np.asarray(self.data.buckets[b].query_index)
            query = query[self.test_rows[b]] if test_only else query
            out["warm"][:, query] = warm
            out["cold"][:, query] = cold
        return out

    def split_means(self, per_query: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
        """Mean Warm/Cold NDCG per split of one member's per-query values."""
        split = self.data.split_of_query
        return {name: {m: float(per_query[m][split == i].mean()) if np.any(split == i) else float("nan")
                       for m in ("warm", "cold")} for i, name in enumerate(SPLITS)}

    def _retrain_views(self, policy: Policy, states, n_members: int, launch: bool = False
                       ) -> tuple[MemberViews, MemberViews]:
        """A retrain's ``retrain_views`` of the counters it reads (``launch``: its first block launched at once)."""
        names = tuple(n for n in STAT_NAMES if n in policy.retrain_counters or n == "impressions")
        cells = self.document_cells() if self.config.retrain_examples == "device" else None
        return retrain_views(states, names, n_members, cells, launch)

    def _retrain(self, policy: Policy, keys, params, hyper, states, logs, views=None):
        counters, entered = views if views is not None else self._retrain_views(policy, states, len(logs))
        return policy.update_population(keys, params, hyper, self.data, counters, entered, logs)

    def _run_members(self, policy: Policy, keys: list, hypers: list, progress: bool, keep_logs: bool,
                     keep_states: bool = True) -> list[TrialResult]:
        """One population through the protocol: the warm-up, an optional retrain after it, the main phase
        segment by segment (``_refresh`` before each, ``_after_segment`` after it), then one ``TrialResult`` per
        real member (the members padded to a multiple of the device count are dropped)."""
        n_real = len(keys)
        keys, hypers = pad_to_devices(keys, hypers, jax.device_count())
        trial_of, trials = group_trials(keys)
        timings = {"simulate": 0.0, "train": 0.0, "evaluate": 0.0}
        draws = [self.session_plan(t.plan) for t in trials]
        params = self._shard(stack_members([policy.init(trials[t].policy, self.data) for t in trial_of]))
        hyper = self._shard(stack_members(hypers))
        states = self._warm_up(trials, trial_of, draws, timings, kept_counters(policy.counters_read))
        train_info: list[list[dict]] = [[] for _ in range(len(keys))]
        if self.config.train_after_warmup and policy.trains:
            warm_keys = fold_member_keys(trials, trial_of, "train", WARMUP_RETRAIN)
            params, infos = self._retrain(policy, warm_keys, params, hyper, states, [None] * len(keys))
            for acc, info in zip(train_info, infos):
                acc.append(info)
        run = self._main_phase(policy, hyper, trials, trial_of, draws, train_info, timings, keep_logs, progress,
                               n_real)
        params, states = self._run_segments(policy, params, hyper, states, run.segments, run.plans,
                                            [t.run for t in trials], trial_of, run.widths,
                                            before=functools.partial(self._refresh, run),
                                            after=functools.partial(self._after_segment, run), timings=timings,
                                            logs=run.collect_logs)
        run.bar.close()
        return self._trial_results(run, draws, params, states, n_real, keep_states)

    def _warm_up(self, trials: list[TrialKeys], trial_of: np.ndarray, draws: list, timings: dict,
                 names: tuple[str, ...] = STAT_NAMES) -> list:
        """Every trial's initial states, after its BM25 warm-up sessions (if any), one copy per member; the states
        keep the counters ``names`` (the main policy's), which the warm-up counts too."""
        initial = [stack_members(s) for s in zip(*(self.host_init_states(t.init, names) for t in trials))]
        tic = time.perf_counter()
        warm_policy = self.warmup_policy
        if warm_policy is not None and len(draws[0][0]):
            every = np.arange(len(trials))
            warm_params = stack_members([warm_policy.init(t.policy, self.data) for t in trials])
            warm_hyper = stack_members([warm_policy.default_hyper()] * len(trials))
            warmups = [d[0] for d in draws]
            _, initial = self._run_segments(warm_policy, warm_params, warm_hyper, initial, [warmups],
                                            [self.plan(warmups, phase="warmup")], [t.run for t in trials], every,
                                            [self.reachable_widths(warmups)])
        # one copy per member, leaf by leaf (nothing to copy when every member is its own trial)
        if np.array_equal(trial_of, np.arange(len(trials))):
            states = list(initial)
        else:
            states = [per_member([initial.pop(0)], trial_of) for _ in range(len(initial))]
        self.release_heap()
        timings["simulate"] += time.perf_counter() - tic
        return states

    def _main_phase(self, policy: Policy, hyper, trials: list[TrialKeys], trial_of: np.ndarray, draws: list,
                    train_info: list[list[dict]], timings: dict, keep_logs: bool, progress: bool, n_real: int
                    ) -> MainPhase:
        """The main phase's segments and empty accumulators (``MainPhase``)."""
        n_members, n_main = len(trial_of), len(draws[0][1])
        points, starts, segments, plans = self.main_segments([d[1] for d in draws], n_main)
        bar = tqdm(total=n_main * n_real, desc=f"{policy.name} x{n_real}" if n_real > 1 else policy.name,
                   unit="sess", disable=None if progress else True, leave=False)  # None: off on non-TTY
        return MainPhase(policy=policy, hyper=hyper, trials=trials, trial_of=trial_of, n_real=n_real,
                         segments=segments, plans=plans, starts=starts, points=points,
                         widths=self.segment_widths([d[1] for d in draws], points),
                         session_ndcg=np.zeros((n_members, n_main), np.float32),
                         history=[[] for _ in range(n_members)], train_info=train_info,
                         logs=[[] for _ in range(n_members)] if keep_logs else None,
                         pending=[[] for _ in range(n_members)],
                         collect_logs=keep_logs or (policy.trains and policy.reads_logs), timings=timings, bar=bar)

    def _refresh(self, run: MainPhase, i: int, params):
        """Before segment ``i``: the policy's per-segment refresh (e.g. a new dropout mask)."""
        keys = fold_member_keys(run.trials, run.trial_of, "policy", 1, i)
        return compiled(run.policy)["refresh"](keys, params)

    def _after_segment(self, run: MainPhase, i: int, params, states, outputs, prepared):
        """After segment ``i``: record its sessions' NDCG and logs, evaluate every member, and retrain when the
        protocol says so; returns the (retrained) parameters."""
        nd, shown, clicked, record = outputs
        start, stop = run.starts[i], run.points[i] + 1
        run.session_ndcg[:, start:stop] = nd
        # a retrain from the counters (not the logs) has its views launched first, then the evaluation: the host
        # builds the retrain's examples from the views while the device evaluates (the same programs and results)
        from_counters = self.config.retrains_after(i) and run.policy.trains and not run.policy.reads_logs
        views = self._retrain_views(run.policy, states, len(run.trial_of), launch=True) if from_counters else None
        evaluation = self._launch_evaluation_members(run, i, params, states, prepared)
        if run.collect_logs:
            for m in range(len(run.trial_of)):
                seg = run.segments[i][run.trial_of[m]]
                log = SessionLog(query=seg.query, shown=shown[m], clicks=clicked[m], session=seg.session,
                                 record=None if record is None else member(record, m))
                if run.logs is not None:
                    run.logs[m].append(log)
                run.pending[m].append(log)
        if self.config.retrains_after(i):
            params = self._retrain_segment(run, i, params, states, views)
        self._evaluated_members(run, evaluation)
        run.bar.update(int(stop - start) * run.n_real)
        return params

    def _launch_evaluation_members(self, run: MainPhase, i: int, params, states, prepared) -> tuple:
        """Every member's per-query NDCG after segment ``i`` (only the test queries before the last segment with
        ``history_splits=test``), launched; ``_evaluated_members`` brings it."""
        tic = time.perf_counter()
        last = i == len(run.segments) - 1
        launched = self._launch_evaluation(run.policy, params, states, prepared=prepared,
                                           test_only=not last and self.config.history_splits == "test")
        run.timings["evaluate"] += time.perf_counter() - tic
        return launched

    def _evaluated_members(self, run: MainPhase, launched: tuple) -> None:
        """A ``_launch_evaluation_members``' per-query NDCG, and its split means appended to the members' history."""
        tic = time.perf_counter()
        run.per_query = self._evaluated(launched)
        for m in range(len(run.trial_of)):
            run.history[m].append(self.split_means({k: v[m] for k, v in run.per_query.items()}))
        run.timings["evaluate"] += time.perf_counter() - tic

    def _retrain_segment(self, run: MainPhase, i: int, params, states, views=None):
        """The retrain after segment ``i`` on the sessions since the last one (a policy that does not train keeps
        its parameters; one that does not read logs gets None logs); the pending logs start afresh."""
        if run.policy.trains:
            tic = time.perf_counter()
            logs = [concat_logs(p) if run.collect_logs else None for p in run.pending]
            params, infos = self._retrain(run.policy, fold_member_keys(run.trials, run.trial_of, "train", i), params,
                                          run.hyper, states, logs, views)
            params = self._shard(params)
            self.release_heap()
            run.timings["train"] += time.perf_counter() - tic
            for acc, info in zip(run.train_info, infos):
                acc.append(info)
        run.pending = [[] for _ in range(len(run.trial_of))]
        return params

    def _trial_results(self, run: MainPhase, draws: list, params, states, n_real: int, keep_states: bool = True
                       ) -> list[TrialResult]:
        """One ``TrialResult`` per real member (host arrays; ``final_states`` only with ``keep_states``)."""
        cfg = self.config
        results = []
        final_states = jax.device_get(states)
        if self._cum_weights.size < run.session_ndcg.shape[1]:  # once per simulator, for every member and split
            self._cum_weights = metrics.cumulative_weights(run.session_ndcg.shape[1], cfg.gamma)
        weights = self._cum_weights
        for m in range(n_real):
            main = draws[run.trial_of[m]][1]
            split = self.data.split_of_query[main.query]
            cum = {name: metrics.cumulative_ndcg(run.session_ndcg[m][split == s], cfg.gamma, weights)
                   for s, name in enumerate(SPLITS)}
            warm_query = draws[run.trial_of[m]][0].query
            results.append(TrialResult(
                session_ndcg=run.session_ndcg[m], session_split=split, session_query=main.query,
                eval_points=run.points, eval_history=run.history[m], cum_ndcg=cum, train_info=run.train_info[m],
                timings={**run.timings, "members": n_real},
                final_states=tuple(member(s, m) for s in final_states) if keep_states else None,
                perfect_docs=perfect_documents(self.data, [member(s, m) for s in final_states]),
                logs=run.logs[m] if run.logs is not None else None,
                query_ndcg={k: v[m] for k, v in run.per_query.items()},
                warmup_query=warm_query if self.warmup_policy is not None else warm_query[:0],
                final_params=member(jax.device_get(params), m), hyper=member(jax.device_get(run.hyper), m)))
        return results
