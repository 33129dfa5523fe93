"""The vectorized online simulation loop (SPEC §2.1, §5; EBRank §5.1).

One trial: BM25 warm-up sessions, then ``refreshes`` segments (default ``n_updates``). Inside a
segment the policy's model and its refreshed behaviour features are frozen, so every query's
sessions run in order in their own lane of a ``lax.scan`` (``schedule.lane_schedule``), all lanes
at once. Each session: maybe a new document enters, the policy scores the entered documents, the
top K are shown, clicks are drawn from the click model, counters are updated, the NDCG of the
shown list is recorded at its global time, and the policy may keep a per-session record (an
online learner's gradient or multileaving outcome). After each segment the policy is evaluated
(Warm/Cold NDCG); at every ``refreshes / n_updates``-th segment it retrains from the counters and
the log of the sessions since its last retrain (UCBRank: 100 feature refreshes, 20 retrains).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from ltrjax import clicks as click_lib
from ltrjax import metrics
from ltrjax.data.layout import Bucket, PaddedDataset
from ltrjax.online.policies.base import Policy, QueryView, SessionLog
from ltrjax.online.schedule import SessionDraws, draw_sessions, lane_schedule, padded_steps, update_points
from ltrjax.online.state import (
    BucketState,
    DocCounters,
    counters_in_dataset_order,
    entered_mask,
    init_bucket_state,
    to_entry_order,
)

SPLITS = ("train", "vali", "test")


@dataclasses.dataclass(frozen=True)
class SimConfig:
    """Protocol constants (defaults: EBRank §5.1, seed-code.md §1.3)."""

    top_k: int = 5
    initial_docs: tuple[int, int] = (5, 9)
    entry_prob: float = 1.0
    sessions: int | None = None  # None: #queries x (mean docs - 5) / entry_prob (EBRank Eq. 29)
    warmup_sessions_per_query: int = 20
    n_updates: int = 20
    refreshes: int | None = None  # segments = behaviour-feature refreshes; None: n_updates (UCBRank: 100)
    train_after_warmup: bool = False
    gamma: float = 0.995
    relevance: str = "ebrank"
    relevance_eps_min: float = 0.1
    # NDCG discount: "auto" = the examination curve theta_k of a position-based click model under
    # the EBRank mapping (EBRank's gain/discount convention), else 1/log2(k+1); or "log2"/"examination".
    discount: str = "auto"
    lanes_per_query: float = 0.1  # lanes = clip(queries * this, min_lanes, max_lanes)
    min_lanes: int = 32
    max_lanes: int = 1024

    @classmethod
    def from_mapping(cls, cfg) -> "SimConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in dict(cfg).items() if k in known}
        if "initial_docs" in values:
            values["initial_docs"] = tuple(int(v) for v in values["initial_docs"])
        config = cls(**values)
        if config.n_segments % config.n_updates:
            raise ValueError(f"sim.refreshes ({config.refreshes}) must be a multiple of sim.n_updates "
                             f"({config.n_updates}): models retrain at every refreshes/n_updates-th refresh")
        return config

    @property
    def n_segments(self) -> int:
        return int(self.refreshes or self.n_updates)

    def retrains_after(self, segment: int) -> bool:
        """Whether the policy retrains after ``segment`` (never after the last one)."""
        per = max(self.n_segments // self.n_updates, 1)
        return (segment + 1) % per == 0 and segment < self.n_segments - 1


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
    final_states: tuple[BucketState, ...] | None = None
    logs: list[SessionLog] | None = None
    query_ndcg: dict[str, np.ndarray] | None = None  # final per-query "warm"/"cold" NDCG@K [n_queries]
    warmup_query: np.ndarray | None = None  # i32 [n_warm] query of every warm-up session
    final_params: object = None

    @property
    def warm_ndcg(self) -> float:
        return float(self.eval_history[-1]["test"]["warm"])

    @property
    def cold_ndcg(self) -> float:
        return float(self.eval_history[-1]["test"]["cold"])


def ndcg_discount(config: SimConfig, click_model: click_lib.ClickModel) -> jax.Array:
    """The per-position NDCG discount of the protocol (see ``SimConfig.discount``)."""
    theta = jnp.asarray(click_model.examination[: config.top_k])
    if config.discount == "examination":
        return theta
    if config.discount == "log2":
        return metrics.log2_discount(config.top_k)
    if config.discount != "auto":
        raise ValueError(f"unknown discount {config.discount!r}; expected auto, log2 or examination")
    if config.relevance == "ebrank" and click_model.kind == "affine" and bool(jnp.all(theta > 0)):
        return theta
    return metrics.log2_discount(config.top_k)


class TrialKeys(NamedTuple):
    init: jax.Array  # entry orders and initial candidate sets
    plan: jax.Array  # the session sequence
    run: jax.Array  # per-session randomness (clicks, policy noise)
    policy: jax.Array  # model initialization
    train: jax.Array  # retraining (folded with the segment index)


def trial_keys(key: jax.Array) -> TrialKeys:
    return TrialKeys(*jax.random.split(key, 5))


def policy_key(run_key: jax.Array, session) -> jax.Array:
    """The key of one session's policy noise (Random-k scores, exploration samples)."""
    return jax.random.fold_in(run_key, session)


def click_uniforms(run_key: jax.Array, first_session: int, n_sessions: int, n_rows: int, top_k: int) -> np.ndarray:
    """Uniforms ``[n, n_rows, K]`` deciding the clicks of sessions first_session..first_session+n-1.

    Drawn in bulk on the host with NumPy's PCG64, seeded from the trial key and the first session
    index (threefry costs ~60 ns per number on a CPU; this ~1 ns). Shared verbatim with the reference.
    """
    words = np.asarray(jax.random.key_data(run_key), np.uint32).ravel().tolist()
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


def default_session_count(data: PaddedDataset, entry_prob: float) -> int:
    """#queries x (average documents - 5) / eta_new (EBRank Eq. 29)."""
    mean_docs = float(np.mean(np.concatenate([np.asarray(b.n_docs) for b in data.buckets])))
    return max(1, int(round(data.n_queries * max(mean_docs - 5.0, 1.0) / entry_prob)))


_init_bucket_state = jax.jit(init_bucket_state, static_argnums=2)


class Simulator:
    """Runs trials of one dataset and click model; compiled functions are cached per policy."""

    def __init__(self, data: PaddedDataset, click_model: click_lib.ClickModel, config: SimConfig,
                 warmup_policy: Policy | None = None):
        if click_model.n_positions < config.top_k:
            raise ValueError(f"click model has {click_model.n_positions} positions, top_k is {config.top_k}")
        self.data = data
        self.click_model = click_model
        self.config = config
        self.warmup_policy = warmup_policy
        self.discount = ndcg_discount(config, click_model)
        self.gains = tuple(
            click_lib.relevance(b.labels, data.y_max, config.relevance, eps_min=config.relevance_eps_min)
            * b.doc_mask for b in data.buckets
        )
        self.idcg = tuple(
            metrics.ideal_dcg(g, b.doc_mask, self.discount) for g, b in zip(self.gains, data.buckets)
        )
        self.n_lanes = tuple(
            int(np.clip(int(b.n_queries * config.lanes_per_query), min(config.min_lanes, b.n_queries),
                        config.max_lanes)) for b in data.buckets
        )
        self.uniform_rows = 2 if click_model.kind == "cascade" else 1
        self._steps: dict[str, int] = {}
        self._segment_fns: dict[int, Callable] = {}
        self._eval_fns: dict[int, Callable] = {}

    # ------------------------------------------------------------------ compiled pieces
    def _segment_fn(self, policy: Policy) -> Callable:
        if id(policy) not in self._segment_fns:
            # bucket states are donated: the scan updates their buffers in place instead of copying them
            self._segment_fns[id(policy)] = jax.jit(self._build_segment(policy), donate_argnums=1)
        return self._segment_fns[id(policy)]

    def _bucket_step(self, policy: Policy, b: int) -> tuple[Callable, Callable]:
        """(prepare, step) of one bucket: per-segment constants, and one scan step of its lanes."""
        bucket = self.data.buckets[b]
        cm, k_top, discount = self.click_model, self.config.top_k, self.discount
        width = bucket.width
        theta = cm.examination[:k_top]
        alpha_k, beta_k = (x[:k_top] for x in click_lib.affine_terms(cm))
        inv_theta = jnp.where(theta > 0, 1.0 / jnp.where(theta > 0, theta, 1.0), 0.0)
        n_docs = jnp.concatenate([bucket.n_docs, jnp.zeros((1,), jnp.int32)])

        def one_session(view: QueryView, gains_row, labels_row, idcg, n_docs_row, enter, session, uniforms, valid,
                        run_key):
            n_new = jnp.where(enter & valid, jnp.minimum(view.n_entered + 1, n_docs_row), view.n_entered)
            view = view._replace(n_entered=n_new, issue_count=view.issue_count + valid)
            key = policy_key(run_key, session)
            scores = policy.session_scores(view, key)
            shown, slot_valid = metrics.top_k_ranking(scores, jnp.arange(width) < n_new, k_top)
            clicked = click_lib.sample_clicks(cm, uniforms, gains_row[shown], labels_row[shown], slot_valid & valid)
            ndcg = metrics.ndcg_of_ranking(shown, slot_valid, gains_row, idcg, discount)
            record = policy.session_record(view, key, scores, shown, slot_valid & valid, clicked)
            return n_new, shown, slot_valid & valid, clicked, ndcg, record

        def prepare(params, state: BucketState, bucket: Bucket, gains, idcg):
            behaviour = counters_in_dataset_order(state)  # dropped by XLA unless the policy reads it
            return {
                "aux": jax.tree_util.tree_map(lambda a: to_entry_order(a, state),
                                              policy.prepare(params, bucket, behaviour)),
                "hyper": policy.hyper(params),
                "gains": to_entry_order(gains, state),
                "labels": to_entry_order(bucket.labels, state),
                "idcg": jnp.concatenate([idcg, jnp.zeros((1,), idcg.dtype)]),
                "order": state.order,
            }

        def step(const, carry, xs, run_key):
            stats, n_entered, issue_count, entry_session = carry
            rows, enter, session, uniforms, valid = xs
            # contiguous row gathers; XLA reads only the counter planes the policy uses
            view = QueryView(
                aux=jax.tree_util.tree_map(lambda a: a[rows], const["aux"]),
                hyper=const["hyper"],
                counters=DocCounters.unpack(stats[:, rows]),
                n_entered=n_entered[rows],
                issue_count=issue_count[rows],
            )
            view_axes = QueryView(aux=0, hyper=None, counters=0, n_entered=0, issue_count=0)
            n_new, shown, on, clicked, ndcg, record = jax.vmap(
                one_session, in_axes=(view_axes, 0, 0, 0, 0, 0, 0, 0, 0, None)
            )(view, const["gains"][rows], const["labels"][rows], const["idcg"][rows], n_docs[rows], enter, session,
              uniforms, valid, run_key)
            c = clicked.astype(jnp.float32)
            w = on.astype(jnp.float32)
            # one scatter of all counters, in STAT_NAMES order
            delta = jnp.stack([c, c * inv_theta, w, w * theta, w * alpha_k, w * beta_k])
            stats = stats.at[:, rows[:, None], shown].add(delta)
            entered_now = n_new > view.n_entered
            slot = jnp.maximum(n_new - 1, 0)
            entry_session = entry_session.at[rows, slot].set(
                jnp.where(entered_now, session, entry_session[rows, slot]))
            n_entered = n_entered.at[rows].set(n_new)
            issue_count = issue_count.at[rows].add(valid.astype(jnp.int32))
            shown_docs = jnp.where(on, const["order"][rows[:, None], shown], -1)
            return (stats, n_entered, issue_count, entry_session), (ndcg, shown_docs, clicked, record)

        return prepare, step

    def _build_segment(self, policy: Policy) -> Callable:
        """One scan per segment whose every step advances the lanes of all buckets: one program per
        policy, and per-step overhead shared by the buckets."""
        pieces = [self._bucket_step(policy, b) for b in range(len(self.data.buckets))]

        def segment(params, states, buckets, gains, idcg, schedules, run_key):
            consts = [prep(params, st, bk, g, i) for (prep, _), st, bk, g, i in zip(pieces, states, buckets, gains, idcg)]

            def step(carry, xs):
                out = [fn(const, c, x, run_key) for (_, fn), const, c, x in zip(pieces, consts, carry, xs)]
                return tuple(o[0] for o in out), tuple(o[1] for o in out)

            carry = tuple((st.stats, st.n_entered, st.issue_count, st.entry_session) for st in states)
            carry, ys = jax.lax.scan(step, carry, schedules)
            new_states = tuple(st.replace(stats=c[0], n_entered=c[1], issue_count=c[2], entry_session=c[3])
                               for st, c in zip(states, carry))
            return new_states, ys

        return segment

    def _eval_fn(self, policy: Policy) -> Callable:
        """Warm/Cold NDCG@K per query of one bucket. The bucket's arrays are arguments, not closed-over
        constants: constants would be embedded into the program (minutes of compilation and a copy of the
        feature array per bucket at MSLR scale)."""
        if id(policy) not in self._eval_fns:
            discount, top_k = self.discount, self.config.top_k

            def evaluate(params, state: BucketState, bucket: Bucket, gains, idcg):
                counters = counters_in_dataset_order(state)
                gains_e = to_entry_order(gains, state)[:-1]
                entered = jnp.arange(bucket.width)[None, :] < state.n_entered[:-1, None]
                out = []
                for warm in (True, False):
                    scores = to_entry_order(policy.test_scores(params, bucket, counters, warm), state)[:-1]
                    ranking, slot_valid = metrics.top_k_ranking(scores, entered, top_k)
                    out.append(metrics.ndcg_of_ranking(ranking, slot_valid, gains_e, idcg, discount))
                return out[0], out[1]

            self._eval_fns[id(policy)] = jax.jit(evaluate)
        return self._eval_fns[id(policy)]

    # ------------------------------------------------------------------ host-side driver
    def plan(self, segments: list[SessionDraws], phase: str = "main") -> list[list[np.ndarray | None]]:
        """Lane schedules of every segment and bucket, padded to one step count: entry ``[step, lane]``
        is the segment-local index of the session that lane runs, or -1 when it is idle.

        One shape means one compilation per policy; the step count is also remembered per phase,
        so later trials (other draws) reuse the shape instead of recompiling.
        """
        plans = []
        for draws in segments:
            bucket_of = self.data.bucket_of_query[draws.query]
            plan = []
            for b in range(len(self.data.buckets)):
                members = np.flatnonzero(bucket_of == b)
                if members.size == 0:
                    plan.append(None)
                    continue
                schedule = lane_schedule(self.data.row_of_query[draws.query[members]], self.n_lanes[b])
                plan.append(np.where(schedule >= 0, members[np.maximum(schedule, 0)], -1))  # segment-local
            plans.append(plan)
        needed = max((p[b].shape[0] for p in plans for b in range(len(p)) if p[b] is not None), default=1)
        if needed > self._steps.get(phase, 0):
            self._steps[phase] = padded_steps(needed)  # the ladder leaves headroom for other trials' draws
        steps = self._steps[phase]
        for p in plans:
            for b, schedule in enumerate(p):
                if schedule is None:
                    p[b] = np.full((steps, self.n_lanes[b]), -1, np.int64)
                elif schedule.shape[0] < steps:
                    pad = np.full((steps - schedule.shape[0], schedule.shape[1]), -1, schedule.dtype)
                    p[b] = np.concatenate([schedule, pad])
        return plans

    def run_segment(self, policy: Policy, params, states: list[BucketState], draws: SessionDraws,
                    run_key: jax.Array, plan: list[np.ndarray | None] | None = None,
                    ) -> tuple[list[BucketState], np.ndarray, np.ndarray, np.ndarray, object]:
        """Simulate ``draws`` with a frozen policy; returns states and per-session NDCG, shown, clicks and
        the policy's session records (a pytree of ``[n, ...]`` host arrays, or None)."""
        plan = self.plan([draws], phase=f"single-{len(draws)}")[0] if plan is None else plan
        n = len(draws)
        k_top = self.config.top_k
        ndcg = np.zeros(n, np.float32)
        shown = np.full((n, k_top), -1, np.int32)
        clicked = np.zeros((n, k_top), bool)
        uniforms = click_uniforms(run_key, int(draws.session[0]) if n else 0, n, self.uniform_rows, k_top)
        schedules, targets = [], []
        for b, bucket in enumerate(self.data.buckets):
            valid = plan[b] >= 0
            idx = np.where(valid, plan[b], 0)
            rows = np.where(valid, self.data.row_of_query[draws.query[idx]], bucket.n_queries).astype(np.int32)
            schedules.append((rows, valid & draws.enter[idx], draws.session[idx], uniforms[idx], valid))
            targets.append((idx[valid], valid))
        new_states, ys = self._segment_fn(policy)(params, tuple(states), self.data.buckets, self.gains, self.idcg,
                                                  tuple(schedules), run_key)
        states = list(new_states)
        records = None
        for (target, valid), (nd, sh, cl, rec) in zip(targets, ys):
            ndcg[target] = np.asarray(nd)[valid]
            shown[target] = np.asarray(sh)[valid]
            clicked[target] = np.asarray(cl)[valid]
            if rec is not None:
                if records is None:
                    records = jax.tree_util.tree_map(lambda r: np.zeros((n,) + r.shape[2:], r.dtype), rec)
                jax.tree_util.tree_map(lambda out, r: out.__setitem__(target, np.asarray(r)[valid]), records, rec)
        return states, ndcg, shown, clicked, records

    def evaluate_per_query(self, policy: Policy, params, states: list[BucketState]) -> dict[str, np.ndarray]:
        """Warm/Cold NDCG@K of the deterministic ranker over entered documents, per global query index."""
        out = {name: np.zeros(self.data.n_queries, np.float32) for name in ("warm", "cold")}
        for b, bucket in enumerate(self.data.buckets):
            warm, cold = self._eval_fn(policy)(params, states[b], bucket, self.gains[b], self.idcg[b])
            out["warm"][np.asarray(bucket.query_index)] = np.asarray(warm)
            out["cold"][np.asarray(bucket.query_index)] = np.asarray(cold)
        return out

    def evaluate(self, policy: Policy, params, states: list[BucketState]) -> dict[str, dict[str, float]]:
        """Warm/Cold NDCG@K of the deterministic ranker over entered documents, mean per split."""
        per_query = self.evaluate_per_query(policy, params, states)
        warm, cold, split = per_query["warm"], per_query["cold"], self.data.split_of_query
        return {name: {"warm": float(warm[split == i].mean()) if np.any(split == i) else float("nan"),
                       "cold": float(cold[split == i].mean()) if np.any(split == i) else float("nan")}
                for i, name in enumerate(SPLITS)}

    def init_states(self, key: jax.Array) -> list[BucketState]:
        return [_init_bucket_state(jax.random.fold_in(key, b), bucket, self.config.initial_docs)
                for b, bucket in enumerate(self.data.buckets)]

    def session_counts(self) -> tuple[int, int]:
        """(warm-up, main) sessions of a trial."""
        cfg = self.config
        n_main = cfg.sessions or default_session_count(self.data, cfg.entry_prob)
        return cfg.warmup_sessions_per_query * self.data.n_queries, n_main

    def session_plan(self, key: jax.Array) -> tuple[SessionDraws, SessionDraws]:
        """Warm-up and main session draws of a trial."""
        cfg = self.config
        n_warm, n_main = self.session_counts()
        k_warm, k_main = jax.random.split(key)
        warm = draw_sessions(k_warm, n_warm, self.data.n_queries, 0.0, first_session=0)
        main = draw_sessions(k_main, n_main, self.data.n_queries, cfg.entry_prob, first_session=n_warm)
        return warm, main

    def run(self, policy: Policy, key: jax.Array, *, hyper: dict | None = None, progress: bool = True,
            keep_logs: bool = False, on_segment: Callable[[int, dict], None] | None = None) -> TrialResult:
        """One trial of ``policy``: warm-up, then segments of sessions, evaluations and retrains."""
        cfg = self.config
        k_init, k_plan, k_run, k_policy, k_train = trial_keys(key)
        timings = {"simulate": 0.0, "train": 0.0, "evaluate": 0.0}
        states = self.init_states(k_init)
        params = policy.with_hyper(policy.init(k_policy, self.data), **(hyper or {}))
        warm, main = self.session_plan(k_plan)

        tic = time.perf_counter()
        if len(warm) and self.warmup_policy is not None:
            states, *_ = self.run_segment(self.warmup_policy, self.warmup_policy.init(k_policy, self.data),
                                          states, warm, k_run, self.plan([warm], phase="warmup")[0])
        timings["simulate"] += time.perf_counter() - tic
        train_info = []
        if cfg.train_after_warmup and policy.trains:
            params, info = self._update(policy, jax.random.fold_in(k_train, -1), params, states, None)
            train_info.append(info)

        points = update_points(len(main), cfg.n_segments)
        starts = np.concatenate([[0], points[:-1] + 1])
        segments = [main.slice(int(a), int(b)) for a, b in zip(starts, points + 1)]
        plans = self.plan(segments)
        n_main = len(main)
        session_ndcg = np.zeros(n_main, np.float32)
        logs, history, pending = [], [], []
        k_refresh = jax.random.fold_in(k_policy, 1)
        bar = tqdm(total=n_main, desc=f"{policy.name}", unit="sess", disable=not progress, leave=False)
        for i, (start, stop, seg, plan) in enumerate(zip(starts, points + 1, segments, plans)):
            tic = time.perf_counter()
            params = policy.refresh(jax.random.fold_in(k_refresh, i), params)
            states, nd, shown, clicked, record = self.run_segment(policy, params, states, seg, k_run, plan)
            timings["simulate"] += time.perf_counter() - tic
            session_ndcg[start:stop] = nd
            tic = time.perf_counter()
            history.append(self.evaluate(policy, params, states))
            timings["evaluate"] += time.perf_counter() - tic
            log = SessionLog(query=seg.query, shown=shown, clicks=clicked, session=seg.session, record=record)
            if keep_logs:
                logs.append(log)
            pending.append(log)
            if cfg.retrains_after(i) and policy.trains:
                tic = time.perf_counter()
                params, info = self._update(policy, jax.random.fold_in(k_train, i), params, states,
                                            concat_logs(pending))
                timings["train"] += time.perf_counter() - tic
                train_info.append(info)
            if cfg.retrains_after(i):
                pending = []
            bar.update(int(stop - start))
            if on_segment is not None:
                on_segment(i, history[-1])
        bar.close()

        session_split = self.data.split_of_query[main.query]
        cum = {name: metrics.cumulative_ndcg(session_ndcg[session_split == s], cfg.gamma)
               for s, name in enumerate(SPLITS)}
        tic = time.perf_counter()
        query_ndcg = self.evaluate_per_query(policy, params, states)
        timings["evaluate"] += time.perf_counter() - tic
        return TrialResult(session_ndcg=session_ndcg, session_split=session_split, session_query=main.query,
                           eval_points=points, eval_history=history, cum_ndcg=cum, train_info=train_info,
                           timings=timings, final_states=tuple(states), logs=logs if keep_logs else None,
                           query_ndcg=query_ndcg, warmup_query=warm.query if self.warmup_policy is not None
                           else warm.query[:0], final_params=params)

    def _update(self, policy: Policy, key, params, states, log):
        counters = tuple(counters_in_dataset_order(s) for s in states)
        entered = tuple(entered_mask(s) for s in states)
        return policy.update(key, params, self.data, counters, entered, log)
