"""The protocol phase: a trial's keys (``trial_keys``; members with equal keys share a trial: ``group_trials``),
its session counts and draws (``session_counts``, ``session_plan``: warm-up and main), its initial states
(``host_init_states``), the segments' bounds (``segment_bounds``) and every member's keys and hyper-parameters.
None of it reads the simulation state: it depends only on the trial keys and the ``SimContext``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import numpy as np

from ltrjax.data.layout import PaddedDataset
from ltrjax.online import host_random
from ltrjax.online.policies.base import Policy
from ltrjax.online.schedule import SessionDraws, draw_sessions, update_points
from ltrjax.online.state import STAT_NAMES, BucketState, init_bucket_state_host

if TYPE_CHECKING:
    from ltrjax.online.context import SimContext


class TrialKeys(NamedTuple):
    init: jax.Array  # entry orders and initial candidate sets
    plan: jax.Array  # the session sequence
    run: jax.Array  # per-session randomness (clicks, policy noise)
    policy: jax.Array  # model initialization
    train: jax.Array  # retraining (folded with the segment index)


def trial_keys(key) -> TrialKeys:
    """The trial's keys, ``jax.random.split(key, 5)`` computed on the host (raw ``uint32[2]`` NumPy keys)."""
    return TrialKeys(*host_random.split(key, 5))


def group_trials(keys: Sequence[jax.Array]) -> tuple[np.ndarray, list[TrialKeys]]:
    """(trial index of every member, the keys of every distinct trial): members with equal keys share a trial,
    numbered in order of first appearance. The trials' keys are split in one batched call (``host_random``)."""
    words = np.stack([host_random.key_words(k).ravel() for k in keys]) if keys else np.zeros((0, 2), np.uint32)
    _, first, inverse = np.unique(words, axis=0, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # unique's sorted rows -> order of first appearance
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    trial_of = rank[np.asarray(inverse).ravel()]
    split = host_random.split(words[np.sort(first)], 5)  # [T, 5, 2]
    return trial_of, [TrialKeys(*keys_of) for keys_of in split]


# the retrain after the warm-up (sim.train_after_warmup) folds this into the train key: -1 as a uint32, the value
# jax < 0.10 made of the -1 it was given (jax 0.10 refuses negative fold_in data); segment i's retrain folds in i
WARMUP_RETRAIN = 0xFFFFFFFF


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


def default_session_count(data: PaddedDataset, entry_prob: float, rule: str = "ebrank") -> int:
    """The main phase's sessions when ``sim.sessions`` is null: ``rule="ebrank"``, #queries x (average documents - 5)
    / eta_new (EBRank Eq. 28); ``"ucbrank"``, #queries x average documents / eta_new (UCBRank §6.1.2: "roughly
    134k, 30k, 2.4M, and 7.6M sessions for MQ2007, MQ2008, MSLR-10K, and MSLR-30K"; the code's ``n_iteration``)."""
    mean_docs = float(np.mean(np.concatenate([np.asarray(b.n_docs) for b in data.buckets])))
    docs = mean_docs - 5.0 if rule == "ebrank" else mean_docs
    return max(1, int(round(data.n_queries * max(docs, 1.0) / entry_prob)))


def session_counts(ctx: SimContext) -> tuple[int, int]:
    """(warm-up, main) sessions of a trial."""
    cfg = ctx.config
    n_main = cfg.sessions or default_session_count(ctx.data, cfg.entry_prob, cfg.session_count)
    return cfg.warmup_sessions_per_query * ctx.data.n_queries, n_main


def session_plan(ctx: SimContext, key: jax.Array) -> tuple[SessionDraws, SessionDraws]:
    """Warm-up and main session draws of a trial (``key``: its ``TrialKeys.plan``)."""
    n_warm, n_main = session_counts(ctx)
    k_warm, k_main = host_random.split(key)
    warm = draw_sessions(k_warm, n_warm, ctx.data.n_queries, 0.0, first_session=0)
    main = draw_sessions(k_main, n_main, ctx.data.n_queries, ctx.config.entry_prob, first_session=n_warm)
    return warm, main


def host_init_states(ctx: SimContext, key: jax.Array, names: tuple[str, ...] = STAT_NAMES) -> list[BucketState]:
    """Every bucket's initial state (``state.init_bucket_state_host``: NumPy, no program per bucket shape to
    compile) of a trial (``key``: its ``TrialKeys.init``); only the counters ``names`` are kept (a policy's:
    ``kept_counters(policy.counters_read)``)."""
    return [init_bucket_state_host(host_random.fold_in(key, b), bucket, ctx.config.initial_docs, names)
            for b, bucket in enumerate(ctx.data.buckets)]


def segment_bounds(n_main: int, n_segments: int) -> tuple[np.ndarray, np.ndarray]:
    """(last session of each segment, first session of each segment) of ``n_main`` main sessions in ``n_segments``
    segments (``schedule.update_points``): the last session of a segment is its evaluation point."""
    points = update_points(n_main, n_segments)
    return points, np.concatenate([[0], points[:-1] + 1])


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
    """``resolve_hyper`` of every member (None: the configured values for all ``n_members``, made once)."""
    if hypers is None:
        return [resolve_hyper(policy, None)] * n_members
    hypers = [resolve_hyper(policy, h) for h in hypers]
    if len(hypers) != n_members:
        raise ValueError(f"{n_members} keys but {len(hypers)} hyper-parameter sets")
    return hypers
