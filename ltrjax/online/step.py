"""One session, as a pure function of named state (SPEC §2.1; EBRank §5.1).

``session_step`` advances every lane of one bucket by one session: maybe a new document enters,
the policy scores the entered documents, the top K are shown, clicks are drawn from the click
model, the counters are updated, and the NDCG of the shown list and the policy's session record
are returned. ``scan_segment`` scans it over a segment's lane schedule for every bucket at once,
with the policy's model frozen; ``population_segment`` does so for every member of a population.
All are module-level pure functions; the simulator ``jit``s ``population_segment`` with the policy
bound as a static argument.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from ltrjax import clicks as click_lib
from ltrjax import metrics
from ltrjax.data.layout import Bucket
from ltrjax.online.policies.base import Policy, QueryView
from ltrjax.online.state import (BucketState, DocCounters, counters_in_dataset_order, documents_in_entry_order,
                                 to_entry_order)


CLICK_STREAM = 0x7FFFFFFF  # folded into a session's policy key for its on-device click uniforms


@struct.dataclass
class Protocol:
    """What every session of a simulation shares: the click model, the NDCG discount and K."""

    click_model: click_lib.ClickModel
    discount: jax.Array  # f32 [K] NDCG discount of each position
    top_k: int = struct.field(pytree_node=False, default=5)
    uniform_rows: int = struct.field(pytree_node=False, default=1)  # 2 for cascade (click, stop)
    device_rng: bool = struct.field(pytree_node=False, default=False)  # draw click uniforms with jax.random

    @property
    def examination(self) -> jax.Array:
        return self.click_model.examination[: self.top_k]


@struct.dataclass
class SegmentConstants:
    """One member's per-bucket values frozen for a segment, in entry order with one scratch row
    (``[Qb+1, Db, ...]``)."""

    aux: Any  # the policy's ``prepare`` output
    hyper: Any  # the policy's typed hyper-parameters (``Policy.Hyper``)
    params: Any  # the policy's frozen parameters
    order: jax.Array  # i32 [Qb+1, Db] entry slot -> dataset slot


@struct.dataclass
class QueryConstants:
    """One bucket's per-query values that every member shares, in dataset order with one zero scratch row (idle
    lanes read row ``Qb``): the session step reads the shown documents' gains and labels through the member's
    ``order``, so no member holds an entry-order copy of them."""

    gains: jax.Array  # f32 [Qb+1, Db] relevance R used for NDCG and clicks
    labels: jax.Array  # i32 [Qb+1, Db]
    idcg: jax.Array  # f32 [Qb+1]
    n_docs: jax.Array  # i32 [Qb+1] documents per query (0 for the scratch row)


def query_constants(bucket: Bucket, gains: jax.Array, idcg: jax.Array) -> QueryConstants:
    """The bucket's ``QueryConstants``: its gains, labels, ideal DCGs and document counts with a zero row. Built
    once per simulator, on the host (NumPy, then one device copy each: no program to compile; ``jnp.asarray`` of a
    NumPy array would be one, ``lax.stage``)."""
    def pad(a):
        a = np.asarray(a)
        return jax.device_put(np.concatenate([a, np.zeros((1,) + a.shape[1:], a.dtype)]))

    return QueryConstants(gains=pad(gains), labels=pad(bucket.labels), idcg=pad(idcg), n_docs=pad(bucket.n_docs))


@struct.dataclass
class SessionInputs:
    """One scan step of a bucket: the session each lane runs (``[lanes]``; ``valid`` False = idle lane)."""

    rows: jax.Array  # i32 bucket row of the query (the scratch row Qb when idle)
    enter: jax.Array  # bool a new document enters first
    session: jax.Array  # i32 global session index (keys the policy noise)
    uniforms: jax.Array | None  # f32 [lanes, rows, K] click uniforms (None: drawn in the step, ``device_rng``)
    valid: jax.Array  # bool


@struct.dataclass
class SessionOutputs:
    """What a step records per lane."""

    ndcg: jax.Array  # f32 NDCG@K of the shown list
    shown: jax.Array  # i32 [K] dataset slot per position, -1 for empty slots and idle lanes
    clicks: jax.Array  # bool [K]
    record: Any  # the policy's ``session_record`` (None: none)


def policy_key(run_key: jax.Array, session) -> jax.Array:
    """The key of one session's policy noise (Random-k scores, exploration samples)."""
    return jax.random.fold_in(run_key, session)


def prepared_in_entry_order(policy: Policy, prepared, bucket: Bucket, state: BucketState):
    """The ``prepare`` output laid out ``[Qb+1, Db, ...]`` in entry order (scratch row zero): from dataset order
    (``to_entry_order``), or from one value per document for a policy with ``prepared_per_document``
    (``documents_in_entry_order``, one gather)."""
    if policy.prepared_per_document:
        return jax.tree_util.tree_map(lambda a: documents_in_entry_order(a, bucket, state), prepared)
    return jax.tree_util.tree_map(lambda a: to_entry_order(a, state), prepared)


def segment_constants(policy: Policy, params, hyper, state: BucketState, bucket: Bucket,
                      prepared=None) -> SegmentConstants:
    """The frozen per-segment values of one bucket; ``prepare`` sees the counters at the segment start.
    ``prepared``: the policy's ``prepare`` output (dataset order, or per document for a policy with
    ``prepared_per_document``) when already computed (a population's ``prepare_population``); None: ``prepare`` is
    called here. Either way it is laid out in entry order (``aux``)."""
    if prepared is None:
        behaviour = counters_in_dataset_order(state)  # dropped by XLA unless the policy reads it
        prepared = policy.prepare(params, bucket, behaviour)
    aux = prepared_in_entry_order(policy, prepared, bucket, state)
    return SegmentConstants(aux=aux, hyper=hyper, params=params, order=state.order)


def rank_session(policy: Policy, protocol: Protocol, view: QueryView, n_docs, enter, session, valid, run_key):
    """One query's session up to the shown list (all arrays are that query's row): maybe a document enters,
    the policy scores the entered documents, the top K are shown. Returns (entered count, key, scores,
    shown, slot_valid)."""
    n_entered = jnp.where(enter & valid, jnp.minimum(view.n_entered + 1, n_docs), view.n_entered)
    view = view._replace(n_entered=n_entered, issue_count=view.issue_count + valid)
    key = policy_key(run_key, session)
    scores = policy.session_scores(view, key)
    width = scores.shape[-1]
    shown, slot_valid = metrics.top_k_ranking(scores, jnp.arange(width) < n_entered, protocol.top_k)
    return n_entered, key, scores, shown, slot_valid


def gather_rows(a: jax.Array, rows: jax.Array, width: int | None = None) -> jax.Array:
    """``a[rows]``, or only the first ``width`` entry slots of each row (``[lanes, width, ...]``: a gather of row
    slices, so the slots beyond are never read)."""
    if width is None or width >= a.shape[1]:
        return a[rows]
    size = (1, width) + a.shape[2:]
    return jax.vmap(lambda r: jax.lax.dynamic_slice(a, (r,) + (0,) * (a.ndim - 1), size)[0])(rows)


def lane_features(bucket: Bucket | None, order: jax.Array, rows: jax.Array) -> jax.Array | None:
    """The lanes' document features ``[lanes, Db, F]`` in entry order, from the bucket's per-document features
    (``Bucket.doc_features``, shared by every member) and the member's ``order`` ``[Qb+1, Db]`` (entry slot ->
    dataset slot, possibly narrowed): one gather of document rows; idle lanes (the scratch row ``Qb``) get the
    zero row, as ``to_entry_order``'s scratch row."""
    if bucket is None:
        return None
    n_queries, zero_row = bucket.doc_row.shape[0], bucket.doc_features.shape[0] - 1
    doc_rows = bucket.doc_row[jnp.minimum(rows, n_queries - 1)[:, None], order[rows]]
    return bucket.doc_features[jnp.where((rows < n_queries)[:, None], doc_rows, zero_row)]


def counted(protocol: Protocol, state: BucketState, inputs: SessionInputs, rows: jax.Array, shown: jax.Array,
            clicked: jax.Array, on: jax.Array, n_new: jax.Array, n_before: jax.Array) -> BucketState:
    """``session_step``'s state after one session: the shown slots' counters updated (one scatter per counter the
    state keeps), the new entry counts, issue counts and entry sessions (``n_before``: entry counts before it)."""
    theta = protocol.examination
    inv_theta = jnp.where(theta > 0, 1.0 / jnp.where(theta > 0, theta, 1.0), 0.0)
    alpha_k, beta_k = (x[: protocol.top_k] for x in click_lib.affine_terms(protocol.click_model))
    c, w = clicked.astype(jnp.float32), on.astype(jnp.float32)
    delta = {"clicks": c, "ips_clicks": c * inv_theta, "impressions": w, "exposure": w * theta,
             "alpha_sum": w * alpha_k, "beta_sum": w * beta_k}
    # one scatter per counter the state keeps (``Policy.counters_read``); the others are None and not touched
    delta = DocCounters(**{n: v if getattr(state.counters, n) is not None else None for n, v in delta.items()})
    entered_now = n_new > n_before
    slot = jnp.maximum(n_new - 1, 0)
    state = state.replace(
        counters=jax.tree_util.tree_map(lambda a, d: a.at[rows[:, None], shown].add(d), state.counters, delta),
        n_entered=state.n_entered.at[rows].set(n_new),
        issue_count=state.issue_count.at[rows].add(inputs.valid.astype(jnp.int32)),
        entry_session=state.entry_session.at[rows, slot].set(
            jnp.where(entered_now, inputs.session, state.entry_session[rows, slot])),
    )
    return state


def session_step(policy: Policy, protocol: Protocol, consts: SegmentConstants, queries: QueryConstants,
                 state: BucketState, inputs: SessionInputs, run_key: jax.Array, features: Bucket | None = None,
                 width: int | None = None) -> tuple[BucketState, SessionOutputs]:
    """Advance every lane of one bucket by one session: state in, state out.

    Lanes never share a query within a step (``schedule.lane_schedule``), so their counter updates
    are one scatter per counter without conflicts; idle lanes write into the scratch row. Only the
    shown documents' gains and labels are gathered (``[lanes, K]``, from the shared ``queries`` through the
    member's entry order), never whole rows. ``features``
    (the bucket, whose per-document features are one copy for all members) reaches the policy as
    ``QueryView.features``, gathered per lane only if the policy reads it. ``width``: the lanes see only the
    first ``width`` entry slots of their rows (the slots a run can reach, ``scan_segment``, or a width class,
    ``population_class_segment``; None: whole rows); the state stays whole and only shown slots are written.
    """
    rows = inputs.rows
    view = QueryView(
        aux=jax.tree_util.tree_map(lambda a: gather_rows(a, rows, width), consts.aux),
        hyper=consts.hyper,
        params=consts.params,
        # XLA drops the unused gathers
        counters=jax.tree_util.tree_map(lambda a: gather_rows(a, rows, width), state.counters),
        n_entered=state.n_entered[rows],
        issue_count=state.issue_count[rows],
        features=lane_features(features, consts.order if width is None else consts.order[:, :width], rows),
    )
    view_axes = QueryView(aux=0, hyper=None, params=None, counters=0, n_entered=0, issue_count=0,
                          features=None if features is None else 0)
    rank = jax.vmap(functools.partial(rank_session, policy, protocol), in_axes=(view_axes, 0, 0, 0, 0, None))
    n_new, keys, scores, shown, slot_valid = rank(view, queries.n_docs[rows], inputs.enter, inputs.session,
                                                  inputs.valid, run_key)
    new_view = view._replace(n_entered=n_new, issue_count=view.issue_count + inputs.valid)  # as the policy saw it
    on = slot_valid & inputs.valid[:, None]
    shown_slots = consts.order[rows[:, None], shown]  # [lanes, K] dataset slots (the scratch row's are 0)
    gains = queries.gains[rows[:, None], shown_slots]
    labels = queries.labels[rows[:, None], shown_slots]
    uniforms = inputs.uniforms
    if protocol.device_rng:
        uniforms = jax.vmap(lambda k: jax.random.uniform(jax.random.fold_in(k, CLICK_STREAM),
                                                         (protocol.uniform_rows, protocol.top_k)))(keys)
    clicked = click_lib.sample_clicks(protocol.click_model, uniforms, gains, labels, on)
    ndcg = metrics.ndcg_of_shown_gains(gains, slot_valid, queries.idcg[rows], protocol.discount)
    record = jax.vmap(policy.session_record, in_axes=(view_axes, 0, 0, 0, 0, 0))(
        new_view, keys, scores, shown, on, clicked)

    state = counted(protocol, state, inputs, rows, shown, clicked, on, n_new, view.n_entered)
    shown_docs = jnp.where(on, shown_slots, -1)
    return state, SessionOutputs(ndcg=ndcg, shown=shown_docs, clicks=clicked, record=record)


def _scan_body(policy: Policy, protocol: Protocol, consts: tuple[SegmentConstants, ...],
               queries: tuple[QueryConstants, ...], run_key: jax.Array, features: tuple, widths: tuple,
               states: tuple[BucketState, ...], inputs: tuple[SessionInputs, ...]):
    """One scan step: every bucket's lanes advance by one session."""
    out = [session_step(policy, protocol, c, q, s, x, run_key, f, w)
           for c, q, s, x, f, w in zip(consts, queries, states, inputs, features, widths)]
    return tuple(o[0] for o in out), tuple(o[1] for o in out)


def all_segment_constants(policy: Policy, params, hyper, states: tuple[BucketState, ...],
                          buckets: tuple[Bucket, ...], prepared: tuple | None = None) -> tuple[SegmentConstants, ...]:
    """``segment_constants`` of every bucket (``prepared``: per bucket the ``prepare`` output, or None)."""
    prepared = prepared if prepared is not None else (None,) * len(states)
    return tuple(segment_constants(policy, params, hyper, s, b, p) for s, b, p in zip(states, buckets, prepared))


def scan_segment(policy: Policy, protocol: Protocol, consts: tuple[SegmentConstants, ...],
                 states: tuple[BucketState, ...], schedules: tuple[SessionInputs, ...], run_key: jax.Array,
                 queries: tuple[QueryConstants, ...], features: tuple | None = None, widths: tuple | None = None):
    """The segment's ``lax.scan``: every step advances the lanes of every bucket by one session.

    ``schedules[b]`` holds ``[steps, lanes, ...]`` inputs; returns the new states and per-step outputs.
    ``queries[b]``: bucket b's shared ``QueryConstants``. ``features[b]``: bucket b, whose document features the
    lanes read (``session_step``; None: not offered). ``widths[b]``: the entry slots bucket b's lanes see
    (``session_step``'s ``width``; None: whole rows).

    Documents enter in entry order, so a query's entered documents are always its first ``n_entered`` slots;
    when no query can have more than ``width`` entered by the end of the run, the slots beyond never score, show
    or count, and the session step may skip them (a policy with ``narrow_rows``): it reads only a row's first
    ``width`` slots and writes the shown ones, so the state is carried whole and never copied narrower.
    """
    features = features if features is not None else (None,) * len(states)
    widths = widths if widths is not None else (None,) * len(states)
    body = functools.partial(_scan_body, policy, protocol, consts, tuple(queries), run_key, tuple(features),
                             tuple(widths))
    return jax.lax.scan(body, tuple(states), tuple(schedules))


def population_segment(policy: Policy, protocol: Protocol, params, hyper, states: tuple[BucketState, ...],
                       buckets: tuple[Bucket, ...], queries: tuple[QueryConstants, ...],
                       schedules: tuple[SessionInputs, ...], run_keys: jax.Array, widths: tuple | None = None):
    """One segment of a population (leading member axis on params, hyper, states, schedules, run_keys).

    The per-segment model values (matrix products) come from ``policy.prepare_population``, which rounds each
    member exactly as in a population of one (member by member by default; EBRank in fixed member blocks that
    read the features once per block); the rest of the constants, the session scan, elementwise and
    gather/scatter work that rounds the same way batched or not, is ``vmap``ped. ``widths`` (static, per bucket;
    None: full rows) restricts the scan to the entry slots documents can reach in this run (``scan_segment``).

    Returns (new states, per-step outputs, prepared): ``prepared`` is per bucket the segment's ``prepare`` output
    in entry order ``[P, Qb+1, Db]`` for a policy with ``test_from_prepare`` (evaluation reuses it), else None.
    """
    behaviour = tuple(jax.vmap(counters_in_dataset_order)(s) for s in states)  # dropped unless read
    prepared = tuple(policy.prepare_population(params, b, h) for b, h in zip(buckets, behaviour))
    consts = jax.vmap(lambda p, h, s, a: all_segment_constants(policy, p, h, s, buckets, a))(
        params, hyper, tuple(states), prepared)
    # the per-query constants (``queries[b]``: bucket b's ``QueryConstants``) and the features are closed over, not
    # mapped: one dataset-order copy serves every member (``session_step``, ``lane_features``)
    scan = functools.partial(scan_segment, policy, protocol, queries=tuple(queries), features=tuple(buckets),
                             widths=widths)
    new, ys = jax.vmap(scan)(tuple(consts), tuple(states), tuple(schedules), run_keys)
    aux = tuple(c.aux for c in consts) if policy.test_from_prepare else None
    return tuple(new), ys, aux


def class_loop(policy: Policy, protocol: Protocol, consts: SegmentConstants, state: BucketState,
               schedule: SessionInputs, run_key: jax.Array, bounds: jax.Array, queries: QueryConstants,
               features: Bucket | None, widths: tuple):
    """One member's bucket through a segment planned in width classes: steps ``bounds[c]`` to ``bounds[c+1]`` of
    ``schedule`` (``[steps, lanes, ...]``) run with width ``widths[c]`` (None: whole rows). The bounds are traced
    (one program serves every segment); steps past ``bounds[-1]`` are not run and output zeros."""
    step = functools.partial(session_step, policy, protocol, consts, queries, run_key=run_key, features=features)
    first = jax.tree_util.tree_map(lambda a: a[0], schedule)
    shapes = jax.eval_shape(lambda s, x: step(s, x, width=widths[-1])[1], state, first)
    n_steps = jax.tree_util.tree_leaves(schedule)[0].shape[0]
    ys = jax.tree_util.tree_map(lambda a: jnp.zeros((n_steps,) + a.shape, a.dtype), shapes)
    for c, width in enumerate(widths):
        def body(i, carry, width=width):
            st, out = carry
            st, y = step(st, jax.tree_util.tree_map(lambda a: a[i], schedule), width=width)
            return st, jax.tree_util.tree_map(lambda buf, v: buf.at[i].set(v), out, y)
        state, ys = jax.lax.fori_loop(bounds[c], bounds[c + 1], body, (state, ys))
    return state, ys


def population_class_segment(policy: Policy, protocol: Protocol, params, hyper, states: tuple[BucketState, ...],
                             buckets: tuple[Bucket, ...], queries: tuple[QueryConstants, ...],
                             schedules: tuple[SessionInputs, ...], run_keys: jax.Array, bounds: tuple,
                             widths: tuple):
    """``population_segment`` for a segment planned in width classes (``sim.segment_widths=classes``): per bucket,
    the queries whose entered documents fit into ``widths[b][c]`` entry slots run in steps ``bounds[b][c]`` to
    ``bounds[b][c+1]`` (traced ``[C+1]`` int32, shared by every member) seeing only those slots, each bucket in its
    own loop. Queries never share state within a segment, so the order of classes and buckets changes nothing."""
    behaviour = tuple(jax.vmap(counters_in_dataset_order)(s) for s in states)  # dropped unless read
    prepared = tuple(policy.prepare_population(params, b, h) for b, h in zip(buckets, behaviour))
    consts = jax.vmap(lambda p, h, s, a: all_segment_constants(policy, p, h, s, buckets, a))(
        params, hyper, tuple(states), prepared)
    new, ys = [], []
    for c, s, x, bnd, bucket, q, w in zip(consts, states, schedules, bounds, buckets, queries, widths):
        loop = functools.partial(class_loop, policy, protocol, queries=q, features=bucket, widths=w)
        st, y = jax.vmap(loop, in_axes=(0, 0, 0, 0, None))(c, s, x, run_keys, bnd)
        new.append(st)
        ys.append(y)
    aux = tuple(c.aux for c in consts) if policy.test_from_prepare else None
    return tuple(new), tuple(ys), aux


def evaluate_bucket(policy: Policy, protocol: Protocol, params, state: BucketState, bucket: Bucket, gains, idcg,
                    aux=None):
    """Warm and Cold NDCG@K per query of one bucket: the deterministic ranker over the entered documents
    with (warm) and without (cold) behaviour information. ``aux``: the segment's ``prepare`` output in entry
    order (``population_segment``, same parameters) for a policy with ``test_from_prepare``; None: recomputed."""
    counters = counters_in_dataset_order(state)
    gains_e = to_entry_order(gains, state)[:-1]
    entered = jnp.arange(bucket.width)[None, :] < state.n_entered[:-1, None]
    out = []
    for warm in (True, False):
        if aux is not None:
            scores = policy.scores_from_prepared(aux, state.counters, warm)[:-1]
        else:
            scores = to_entry_order(policy.test_scores(params, bucket, counters, warm), state)[:-1]
        ranking, slot_valid = metrics.top_k_ranking(scores, entered, protocol.top_k)
        out.append(metrics.ndcg_of_ranking(ranking, slot_valid, gains_e, idcg, protocol.discount))
    return out[0], out[1]


def evaluate_rows(policy: Policy, protocol: Protocol, params, state: BucketState, bucket: Bucket, gains, idcg, rows,
                  aux=None):
    """``evaluate_bucket`` of the bucket's queries ``rows`` only (e.g. the test split at intermediate points):
    the bucket, the state (with its scratch row), the per-query constants and ``aux`` are gathered first."""
    sub_bucket = bucket.take_queries(rows)
    with_scratch = jnp.concatenate([rows, jnp.full((1,), state.n_entered.shape[0] - 1, rows.dtype)])
    sub_state = jax.tree_util.tree_map(lambda a: a[with_scratch], state)
    sub_aux = jax.tree_util.tree_map(lambda a: a[with_scratch], aux)
    return evaluate_bucket(policy, protocol, params, sub_state, sub_bucket, gains[rows], idcg[rows], sub_aux)
