"""Tight padding (issue 22): per-segment widths on a short ladder, lanes fitted to each bucket's sessions per step,
and the doc-slot occupancy that measures them (``ltrjax.online.schedule``, ``plan.plan``)."""

import dataclasses
import itertools

import jax
import numpy as np
import pytest

from ltrjax.data.layout import pad_and_bucket
from ltrjax.online.policies.pdgd import PDGD
from ltrjax.online.schedule import (SessionDraws, doc_slot_occupancy, entered_counts, lane_schedule, update_points,
                                    width_ladder)
from ltrjax.online.simulator import Simulator, choose_class_widths, class_rungs, fitted_lanes
from ltrjax.data.toy import toy_queryset
from tests.toy_sims import EBRANK_HYPERS, KEYS, wide_ebrank_run, wide_sim


def test_entered_counts_by_hand():
    # queries 0, 1, 0, 2, 0, 1 with entries at sessions 0, 2, 3, 4; initial (3, 4, 5), documents (4, 9, 6)
    draws = SessionDraws(query=np.array([0, 1, 0, 2, 0, 1]), enter=np.array([1, 0, 1, 1, 1, 0], bool),
                         session=np.arange(6))
    got = entered_counts(draws, initial=np.array([3, 4, 5]), n_docs=np.array([4, 9, 6]))
    # q0: 3+1=4, then 3+2 capped at 4, 3+3 capped at 4; q1: 4, 4; q2: 5+1=6
    np.testing.assert_array_equal(got, [4, 4, 4, 6, 4, 4])


def test_doc_slot_occupancy_by_hand():
    """Two segments, two buckets: useful = entered counts of the sessions the lanes run; scanned = every lane of
    every step times the bucket's width in that segment."""
    plans = [[np.array([[0, 1], [2, -1]]), np.array([[3], [-1]])],  # 2 steps x 2 lanes, 2 steps x 1 lane
             [np.array([[1, -1], [-1, -1]]), np.array([[0], [-1]])]]
    entered = [np.array([5, 6, 7, 10]), np.array([8, 12])]
    widths = [(8, 16), (12, 16)]
    useful = (5 + 6 + 7) + 10 + 12 + 8
    scanned = 4 * 8 + 2 * 16 + 4 * 12 + 2 * 16
    assert doc_slot_occupancy(plans, entered, widths) == pytest.approx(useful / scanned)
    assert np.isnan(doc_slot_occupancy([], [], []))


def test_width_ladder():
    rungs = sorted({width_ladder(n, 10_000) for n in range(1, 400)})
    assert rungs == [8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512]
    for need in range(1, 400):
        w = width_ladder(need, 10_000)
        assert need <= w < 1.5 * max(need, 6)  # within 1.5x of the need (8 is the smallest rung)
    assert width_ladder(70, 40) == 40  # never wider than the bucket


def test_level_lanes_pack_within_one_query():
    """``lane_schedule(level=True)`` (width classes) is a valid schedule whose busiest lane exceeds the mean load by
    less than the biggest query."""
    rng = np.random.default_rng(1)
    for n, n_queries, n_lanes in [(1700, 900, 90), (600, 40, 16), (50, 3, 8)]:
        rows = rng.integers(0, n_queries, n)
        level = lane_schedule(rows, n_lanes, level=True)
        idx = np.sort(level[level >= 0])
        np.testing.assert_array_equal(idx, np.arange(n))  # every session once
        for lane in level.T:  # each query's sessions stay in time order within its lane
            mine = lane[lane >= 0]
            for q in np.unique(rows[mine]):
                assert np.all(np.diff(mine[rows[mine] == q]) > 0)
        assert level.shape[0] < -(-n // n_lanes) + np.bincount(rows).max()


def test_class_rungs():
    assert class_rungs(64, 5) == (8, 12, 16, 24, 32, 48, 64)
    assert class_rungs(40, 5) == (8, 12, 16, 24, 32, 40)
    assert class_rungs(8, 5) == (8,) and class_rungs(6, 5) == (6,)


def test_choose_class_widths_scans_the_fewest_slots():
    """``choose_class_widths`` keeps the phase's width and at most ``n`` rungs, and no other such subset scans fewer
    slots (every subset tried by brute force); ``None`` keeps every rung."""
    def scanned(kept, rungs, counts):
        return sum(c * min(w for w in kept if w >= r) for r, c in zip(rungs, counts))

    rng = np.random.default_rng(3)
    rungs = class_rungs(192, 5)  # 8 .. 192: 10 rungs
    for trial in range(30):
        counts = rng.integers(0, 50, len(rungs)) * (rng.random(len(rungs)) < 0.7)
        for n in (1, 2, 3, 4):
            kept = choose_class_widths(rungs, counts, n)
            assert kept[-1] == rungs[-1] and len(kept) <= n and list(kept) == sorted(set(kept))
            best = min(scanned(sub + (rungs[-1],), rungs, counts)
                       for m in range(n) for sub in itertools.combinations(rungs[:-1], m))
            assert scanned(kept, rungs, counts) == best
    assert choose_class_widths(rungs, np.ones(len(rungs)), None) == rungs
    assert choose_class_widths(rungs, np.r_[np.zeros(9), 5], 3) == (192,)  # every session needs the widest


def test_class_widths_follow_the_sessions_needs(sim):
    """With ``width_classes`` the classes are the rungs the phase's sessions need (``class_need_counts``: one count
    per session, per bucket), at most that many per bucket, the same for a later trial (one program per phase),
    and the occupancy grows with the classes allowed."""
    keys = list(KEYS)
    mains = [sim.session_plan(jax.random.fold_in(jax.random.PRNGKey(4), t))[1] for t in range(2)]
    points = update_points(len(mains[0]), sim.config.n_segments)
    reach = sim.reachable_widths(mains)
    counts = sim.class_need_counts(mains, points, reach)
    in_bucket = np.bincount(np.concatenate([sim.data.bucket_of_query[m.query] for m in mains]),
                            minlength=len(reach))
    assert [int(c.sum()) for c in counts] == list(in_bucket)
    policy, _ = wide_ebrank_run()
    occupancy = []
    for n in (1, 2, None):
        classes = Simulator(sim.data, sim.click_model,
                            dataclasses.replace(sim.config, segment_widths="classes", width_classes=n),
                            warmup_policy=sim.warmup_policy)
        widths = classes.segment_widths(mains, points)[0]
        assert all(w[-1] == r and (n is None or len(w) <= n) for w, r in zip(widths, reach))
        assert classes.segment_widths(mains[:1], points)[0] == widths  # a later trial: the same classes
        occupancy.append(classes.doc_slot_occupancy(policy, keys))
    assert occupancy[0] < occupancy[1] <= occupancy[2]


def test_fitted_lanes_are_the_fewest_that_fit():
    rng = np.random.default_rng(0)
    segments = [rng.integers(0, 50, size=n) for n in (300, 340, 280)]
    most, steps = 64, 20
    lanes = fitted_lanes(segments, most, steps)
    assert all(lane_schedule(r, lanes).shape[0] <= steps for r in segments)
    assert lanes >= -(-340 // steps)  # at least the busiest segment's sessions per step
    assert lanes < most
    assert fitted_lanes(segments, most, 10_000) == 1


@pytest.fixture(scope="module")
def sim():
    return wide_sim()


def assert_same_runs(got, want):
    """Member by member (one result per key of ``KEYS``): the same shown lists, clicks, session NDCG, cumulative
    NDCG and evaluations (NaN, a split not evaluated, equals NaN)."""
    assert len(got) == len(want) == len(KEYS)
    for g, w in zip(got, want):
        for a, b in zip(g.logs, w.logs):
            np.testing.assert_array_equal(a.shown, b.shown)
            np.testing.assert_array_equal(a.clicks, b.clicks)
        np.testing.assert_array_equal(g.session_ndcg, w.session_ndcg)
        assert g.cum_ndcg == w.cum_ndcg
        np.testing.assert_equal(g.eval_history, w.eval_history)


def ladder(sim):
    """``sim`` with ``sim.segment_widths=ladder`` (per-segment widths; the default is one width per phase)."""
    return Simulator(sim.data, sim.click_model, dataclasses.replace(sim.config, segment_widths="ladder"),
                     warmup_policy=sim.warmup_policy)


def test_phase_widths_are_one_per_phase(sim):
    """The default (``segment_widths=phase``): every segment scans the phase's ``reachable_widths``."""
    mains = [sim.session_plan(jax.random.fold_in(jax.random.PRNGKey(4), t))[1] for t in range(2)]
    points = update_points(len(mains[0]), sim.config.n_segments)
    assert sim.config.segment_widths == "phase"
    assert sim.segment_widths(mains, points) == [sim.reachable_widths(mains)] * len(points)


def test_ladder_widths_give_the_same_run(sim):
    """Per-segment ladder widths change only how many padded slots are scanned: shown lists, clicks and NDCG equal
    the default's (one width per phase) on the same keys, member by member."""
    policy, want = wide_ebrank_run()
    tight = ladder(sim)
    got = tight.run_population(policy, list(KEYS), list(EBRANK_HYPERS), progress=False, keep_logs=True)
    assert tight.width_shapes() > 1  # it did use several width sets
    assert_same_runs(got, want)


# Width classes are opt-in (the default is one width per phase): by default the EBRank case on the host runs; the
# device-drawn clicks and PDGD (which scans every slot) run under -m slow. Device clicks in the default mode are
# checked by tests/test_device_rng.py and PDGD's population by tests/test_population.py.
@pytest.mark.parametrize("learner, click_rng", [("ebrank", "host"),
                                                pytest.param("ebrank", "device", marks=pytest.mark.slow),
                                                pytest.param("pdgd", "host", marks=pytest.mark.slow)])
def test_class_widths_give_the_same_run(sim, learner, click_rng):
    """Width classes (``segment_widths=classes``: per segment every query scans the smallest class width that holds
    its documents, one program per phase) change only the schedule and the scanned slots: a population of two
    trials gives the shown lists, clicks, NDCG and evaluations of the default, each member as alone; the plans scan
    fewer slots. With clicks drawn on the device (``sim.click_rng=device``) too, and for PDGD, a policy that scans
    every slot (no ``narrow_rows``) and learns from its ``session_record`` in session order."""
    keys = list(KEYS)
    if learner == "ebrank":
        policy, want = wide_ebrank_run()  # the default on the host: the run the other tests here read
        hypers = list(EBRANK_HYPERS)
    else:
        policy, hypers = PDGD(sim.data), None
        assert not policy.narrow_rows
    assert sim.config.click_rng == "host" and sim.config.segment_widths == "phase"
    if learner != "ebrank" or click_rng != "host":
        phase = Simulator(sim.data, sim.click_model, dataclasses.replace(sim.config, click_rng=click_rng),
                          warmup_policy=sim.warmup_policy)
        want = phase.run_population(policy, keys, hypers, progress=False, keep_logs=True)
    classes = Simulator(sim.data, sim.click_model,
                        dataclasses.replace(sim.config, segment_widths="classes", click_rng=click_rng),
                        warmup_policy=sim.warmup_policy)
    got = classes.run_population(policy, keys, hypers, progress=False, keep_logs=True)
    assert classes.width_shapes() == 1
    assert_same_runs(got, want)
    if learner == "ebrank" and click_rng == "host":
        assert classes.doc_slot_occupancy(policy, keys) > sim.doc_slot_occupancy(policy, keys)


def test_segment_widths_cover_every_entered_document(sim):
    """Per-segment widths (``segment_widths=ladder``) grow with the run, stay on the ladder and within the bucket,
    and hold every document entered by the segment's end, and at least K slots (so narrowing is exact,
    tests/test_population.py)."""
    sim = ladder(sim)
    mains = [sim.session_plan(jax.random.fold_in(jax.random.PRNGKey(4), t))[1] for t in range(2)]
    points = update_points(len(mains[0]), sim.config.n_segments)
    widths = sim.segment_widths(mains, points)
    assert len(widths) == len(points)
    n_docs = np.zeros(sim.data.n_queries, np.int64)
    for b in sim.data.buckets:
        n_docs[np.asarray(b.query_index)] = np.asarray(b.n_docs)
    initial = np.full(sim.data.n_queries, sim.config.initial_docs[1])
    for b, bucket in enumerate(sim.data.buckets):
        per_segment = [w[b] for w in widths]
        assert per_segment == sorted(per_segment) and per_segment[-1] <= bucket.width
        assert all(w == bucket.width or w == width_ladder(w, 10_000) for w in per_segment)
        assert per_segment[0] < per_segment[-1] or per_segment[0] == bucket.width  # they do grow here
        queries = np.asarray(bucket.query_index)
        for draws in mains:
            entered = entered_counts(draws, initial, n_docs)
            in_bucket = np.isin(draws.query, queries)
            for s, stop in enumerate(points):
                most = entered[:stop + 1][in_bucket[:stop + 1]].max()
                assert per_segment[s] >= min(max(most, sim.config.top_k), bucket.width)


def test_fitted_lanes_raise_occupancy_and_keep_results(sim):
    """The plans' lanes fit each bucket's sessions per step (no bucket keeps the configured minimum when it needs
    fewer), the occupancy is a fraction, and a run is unchanged by the lane count (same shown lists and NDCG as
    with every configured lane, member by member)."""
    policy, got = wide_ebrank_run()
    keys, hypers = list(KEYS), list(EBRANK_HYPERS)
    occupancy = sim.doc_slot_occupancy(policy, keys)
    assert 0 < occupancy <= 1
    lanes = sim.memo.lanes["main"]
    assert all(1 <= f <= n for f, n in zip(lanes, sim.n_lanes)) and lanes != sim.n_lanes
    wide = Simulator(sim.data, sim.click_model, sim.config, warmup_policy=sim.warmup_policy)
    wide.memo.lanes["main"] = wide.n_lanes  # the configured lanes, as before fitting
    wide.memo.steps["main"] = 10_000
    want = wide.run_population(policy, keys, hypers, progress=False, keep_logs=True)
    assert wide.memo.lanes["main"] == wide.n_lanes
    assert_same_runs(got, want)


def test_buckets_hold_each_documents_features_once():
    """Each bucket keeps its documents' features once (``doc_features``: its documents and a zero row) and the padded
    view ``features`` gathered through ``doc_row`` equals padding the flat matrix by hand, whether the layout reads
    the query set's matrix or takes a handed-over one (freed bucket by bucket); ``on_slots`` of per-document values
    equals the values computed per padded cell, and ``take_queries`` keeps the shared documents."""
    qs = toy_queryset(n_queries=40, n_features=3, docs=(1, 60), y_max=2, seed=3)
    sizes = np.diff(qs.query_offsets)
    for handed in (False, True):
        data = (pad_and_bucket(qs.without_features(), n_buckets=3, single_bucket_cells=0,
                               features=[qs.features.copy()]) if handed
                else pad_and_bucket(qs, n_buckets=3, single_bucket_cells=0))
        assert len(data.buckets) > 1
        for bucket in data.buckets:
            q = np.asarray(bucket.query_index)
            n_docs, width = sizes[q], bucket.width
            mask = np.arange(width)[None, :] < n_docs[:, None]
            flat = np.where(mask, qs.query_offsets[q][:, None] + np.arange(width)[None, :], 0)
            want = np.where(mask[..., None], qs.features[flat], 0.0).astype(np.float32)
            assert bucket.doc_features.shape == (n_docs.sum() + 1, 3)  # once per document, one zero row
            np.testing.assert_array_equal(np.asarray(bucket.doc_features[-1]), 0.0)
            np.testing.assert_array_equal(np.asarray(bucket.features), want)
            np.testing.assert_array_equal(np.asarray(bucket.doc_mask), mask)
            w = np.array([0.5, -2.0, 1.0], np.float32)
            np.testing.assert_allclose(np.asarray(bucket.on_slots(bucket.doc_features @ w)), want @ w, rtol=1e-6)
            rows = np.arange(bucket.n_queries)[::-2]
            sub = bucket.take_queries(rows)
            assert sub.doc_features is bucket.doc_features
            np.testing.assert_array_equal(np.asarray(sub.features), want[rows])
            np.testing.assert_array_equal(np.asarray(sub.labels), np.asarray(bucket.labels)[rows])


def test_query_set_without_features_keeps_everything_else():
    """``QuerySet.without_features``: a NaN placeholder of the same shape that holds no memory (zero strides), the
    rest unchanged, the original untouched."""
    qs = toy_queryset(n_queries=8, n_features=5, docs=(6, 9), y_max=2, seed=1)
    lean = qs.without_features()
    assert lean.features.shape == qs.features.shape and lean.n_features == qs.n_features == 5
    assert lean.features.strides == (0, 0) and np.isnan(lean.features).all() and not lean.features.flags.writeable
    assert not np.isnan(qs.features).any()
    for field in ("labels", "query_offsets", "qids", "split", "feature_ids"):
        assert getattr(lean, field) is getattr(qs, field)


def test_handed_over_features_give_the_same_layout():
    """``pad_and_bucket(..., features=[matrix])`` with the query set's placeholder (``without_features``): the list
    is emptied and every bucket equals the layout from the query set itself."""
    qs = toy_queryset(n_queries=80, n_features=3, docs=(2, 120), y_max=2, seed=4)
    want = pad_and_bucket(qs, 4, merge_tolerance=0.0, single_bucket_cells=0)
    assert len(want.buckets) > 2  # rows of two finished buckets are dropped on the way
    box = [qs.features.copy()]
    got = pad_and_bucket(qs.without_features(), 4, merge_tolerance=0.0, single_bucket_cells=0, features=box)
    assert box == []
    for a, b in zip(got.buckets, want.buckets):
        for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    for field in ("bucket_of_query", "row_of_query", "split_of_query", "feature_ids"):
        np.testing.assert_array_equal(getattr(got, field), getattr(want, field))
    assert got.n_features == want.n_features == 3
