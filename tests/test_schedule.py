"""Session schedules (ltrjax.online.schedule) and the padded bucket layout (ltrjax.data.layout)."""

import jax
import numpy as np
import pytest

from ltrjax.data.layout import bucket_widths, pad_and_bucket, padded_cells
from ltrjax.online.schedule import balance_lanes, draw_sessions, lane_schedule, level_lanes, padded_steps, update_points
from ltrjax.data.toy import toy_queryset


def _check_schedule(rows, n_lanes):
    schedule = lane_schedule(rows, n_lanes)
    assert schedule.ndim == 2 and schedule.shape[1] == n_lanes
    used = schedule[schedule >= 0]
    # every session exactly once, idle entries are -1
    np.testing.assert_array_equal(np.sort(used), np.arange(rows.shape[0]))
    assert np.all((schedule >= 0) | (schedule == -1))
    counts = np.bincount(rows) if rows.size else np.zeros(1, int)
    assert schedule.shape[0] >= counts.max()
    lane_load = (schedule >= 0).sum(0)
    assert schedule.shape[0] == max(int(lane_load.max()), 1)  # unpadded: the simulator pads once
    for lane in range(n_lanes):  # a lane's sessions are packed at its start
        assert np.all(schedule[: lane_load[lane], lane] >= 0)
    lane_of_query = {}
    for lane in range(n_lanes):
        sessions = schedule[:, lane]
        sessions = sessions[sessions >= 0]
        for q in np.unique(rows[sessions]):
            # all sessions of a query sit in one lane ...
            assert lane_of_query.setdefault(int(q), lane) == lane
            # ... in time order
            mine = sessions[rows[sessions] == q]
            assert np.all(np.diff(mine) > 0)
    # one step never runs two sessions of the same query
    for step in schedule:
        active = rows[step[step >= 0]]
        assert len(np.unique(active)) == len(active)
    return schedule


@pytest.mark.parametrize("n, n_queries, n_lanes", [(1, 1, 4), (50, 3, 8), (1000, 37, 8), (5000, 400, 32)])
def test_lane_schedule(n, n_queries, n_lanes):
    rows = np.random.default_rng(n).integers(0, n_queries, n)
    schedule = _check_schedule(rows, n_lanes)
    counts = np.bincount(rows)
    # balanced: no more steps than the padded ideal load (sessions / lanes or the biggest query)
    ideal = max(counts.max(), -(-n // n_lanes))
    assert schedule.shape[0] <= int(1.5 * ideal) + 1


@pytest.mark.parametrize("level", [False, True])
def test_lane_schedule_is_the_lane_by_lane_loop(level):
    """Each query's lane from ``balance_lanes``/``level_lanes`` over the queries in increasing row order; then lane
    by lane, its queries in increasing row order and each query's sessions in time order, from step 0 (rows with
    gaps: rows absent from the segment take no lane)."""
    rng = np.random.default_rng(7)
    rows = rng.choice(np.array([0, 3, 4, 9, 10, 11, 40, 41, 57]), 300, p=np.linspace(1, 3, 9) / 18)
    n_lanes = 4
    queries = sorted(set(rows.tolist()))
    lane_of = (level_lanes if level else balance_lanes)(np.array([np.sum(rows == q) for q in queries]), n_lanes)
    columns = [[] for _ in range(n_lanes)]
    for q, lane in zip(queries, lane_of):
        columns[lane] += [t for t in range(rows.size) if rows[t] == q]
    want = np.full((max(map(len, columns)), n_lanes), -1)
    for lane, sessions in enumerate(columns):
        want[: len(sessions), lane] = sessions
    np.testing.assert_array_equal(lane_schedule(rows, n_lanes, level), want)


def test_lane_schedule_skewed_and_empty():
    rows = np.array([0] * 40 + [1] * 3 + [2] * 2 + [3])
    rows = np.random.default_rng(0).permutation(rows)
    schedule = _check_schedule(rows, 4)
    assert schedule.shape[0] >= 40
    empty = lane_schedule(np.zeros(0, np.int64), 3)
    assert empty.shape == (1, 3) and np.all(empty == -1)


def test_update_points():
    for n in (21, 100, 57_505, 1_000_003):
        np.testing.assert_array_equal(update_points(n, 20), np.linspace(0, n - 1, 21)[1:].astype(int))
    pts = update_points(1000, 20)
    assert len(pts) == 20 and pts[-1] == 999 and np.all(np.diff(pts) > 0)


def test_padded_steps_monotone_and_not_smaller():
    values = [padded_steps(s) for s in range(0, 5000)]
    assert all(v >= max(s, 1) for s, v in zip(range(0, 5000), values))
    assert all(b >= a for a, b in zip(values, values[1:]))
    assert len(set(values[9:])) < 70  # a geometric ladder (growth 1.1): few distinct shapes
    assert all(v <= 1.1 * s + 1 for s, v in zip(range(9, 5000), values[9:]))  # at most ~10 % idle padding


def test_draw_sessions():
    n, n_queries, p = 40_000, 17, 0.3
    draws = draw_sessions(jax.random.PRNGKey(0), n, n_queries, p, first_session=123)
    assert len(draws) == n
    np.testing.assert_array_equal(draws.session, np.arange(123, 123 + n))
    assert draws.query.min() >= 0 and draws.query.max() < n_queries
    counts = np.bincount(draws.query, minlength=n_queries)
    assert np.all(np.abs(counts / n - 1 / n_queries) <= 4 * np.sqrt((1 / n_queries) * (1 - 1 / n_queries) / n))
    assert abs(draws.enter.mean() - p) <= 4 * np.sqrt(p * (1 - p) / n)
    assert not draw_sessions(jax.random.PRNGKey(0), 100, 5, 0.0).enter.any()
    assert draw_sessions(jax.random.PRNGKey(0), 100, 5, 1.0).enter.all()
    part = draws.slice(10, 20)
    np.testing.assert_array_equal(part.query, draws.query[10:20])
    np.testing.assert_array_equal(part.session, draws.session[10:20])


# --------------------------------------------------------------------------- layout
@pytest.mark.parametrize("n_buckets", [1, 3])
def test_pad_and_bucket_recovers_every_query(n_buckets):
    qs = toy_queryset(n_queries=30, n_features=4, docs=(5, 60), y_max=2, seed=1, recipe="latent")
    data = pad_and_bucket(qs, n_buckets=n_buckets)
    sizes = np.diff(qs.query_offsets)
    assert data.n_queries == 30 and data.n_features == 4 and data.y_max == qs.y_max
    assert len(data.buckets) <= n_buckets
    seen = np.zeros(30, int)
    for b, bucket in enumerate(data.buckets):
        bucket = jax.tree_util.tree_map(np.asarray, bucket)  # host copies: no per-element dispatch
        qi = np.asarray(bucket.query_index)
        seen[qi] += 1
        assert bucket.width % 8 == 0
        np.testing.assert_array_equal(np.asarray(bucket.n_docs), sizes[qi])
        mask = np.asarray(bucket.doc_mask)
        np.testing.assert_array_equal(mask.sum(1), sizes[qi])
        np.testing.assert_array_equal(mask, np.arange(bucket.width)[None, :] < sizes[qi][:, None])
        np.testing.assert_array_equal(np.asarray(bucket.split), qs.split[qi])
        for r, q in enumerate(qi):
            assert data.bucket_of_query[q] == b and data.row_of_query[q] == r
            lo, hi = qs.query_offsets[q], qs.query_offsets[q + 1]
            np.testing.assert_array_equal(np.asarray(bucket.labels[r, : hi - lo]), qs.labels[lo:hi])
            np.testing.assert_array_equal(np.asarray(bucket.features[r, : hi - lo]), qs.features[lo:hi])
            assert np.all(np.asarray(bucket.labels[r, hi - lo:]) == 0)
            assert np.all(np.asarray(bucket.features[r, hi - lo:]) == 0)
    np.testing.assert_array_equal(seen, 1)
    np.testing.assert_array_equal(data.split_of_query, qs.split)


def test_bucket_widths_merge():
    uniform = np.full(500, 40)
    np.testing.assert_array_equal(bucket_widths(uniform, 4), [40])
    rng = np.random.default_rng(0)
    skewed = np.minimum(np.round(rng.lognormal(4.0, 1.0, 5000)).astype(int) + 1, 1251)  # MSLR-like
    widths = bucket_widths(skewed, 4)
    assert len(widths) >= 3
    assert widths[-1] >= skewed.max() and np.all(np.diff(widths) > 0) and np.all(widths % 8 == 0)
    # merging keeps the padded cells within the tolerance of the unmerged quantile buckets
    one = bucket_widths(skewed, 1)
    assert padded_cells(np.sort(skewed), widths) < 0.5 * padded_cells(np.sort(skewed), one)
