"""The trial set up on the device (ltrjax.online.device_setup) against the host path's NumPy: the same draws and
initial states bit for bit, and lane plans that are valid (every session once, a query's sessions in time order in
one lane, no two lanes on one query in a step) and as tight as the host's balance within the LPT bound."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ltrjax.online import device_setup as ds
from ltrjax.online import host_random
from ltrjax.online.schedule import draw_sessions, lane_schedule, update_points
from ltrjax.online.state import STAT_NAMES, init_bucket_state_host
from tests.toy_sims import small_data

KEYS = np.stack([host_random.fold_in(host_random.prng_key(5), t) for t in range(3)])


def test_draws_equal_the_host_draws():
    n, first, pad = 333, 40, 7
    draws = ds.draw_phase(jnp.asarray(KEYS), n, 29, 0.4, first, pad)
    for t, key in enumerate(KEYS):
        host = draw_sessions(key, n, 29, 0.4, first_session=first)
        np.testing.assert_array_equal(np.asarray(draws.query[t, :n]), host.query)
        np.testing.assert_array_equal(np.asarray(draws.enter[t, :n]), host.enter)
        assert not np.asarray(draws.enter[t, n:]).any() and draws.query.shape == (3, n + pad)
    warm, main = ds.split_plan_keys(jnp.asarray(KEYS))
    for t, key in enumerate(KEYS):
        np.testing.assert_array_equal(np.stack([warm[t], main[t]]), host_random.split(key))


def test_initial_states_equal_the_host_states():
    data = small_data()
    names = ("clicks", "impressions")
    states = ds.init_states(jnp.asarray(KEYS), tuple(data.buckets), (2, 4), names)
    for t, key in enumerate(KEYS):
        for b, bucket in enumerate(data.buckets):
            host = init_bucket_state_host(host_random.fold_in(key, b), bucket, (2, 4), names)
            device = jax.tree_util.tree_map(lambda a: np.asarray(a[t]), states[b])
            for got, want in zip(jax.tree_util.tree_leaves(device), jax.tree_util.tree_leaves(host)):
                np.testing.assert_array_equal(got, want)
    assert STAT_NAMES  # the counters not kept are None on both sides (tree_leaves skip them)


def check_valid(schedule: np.ndarray, rows: np.ndarray, n_rows: int):
    """Every session of the bucket exactly once; a lane's sessions in time order; a query in one lane only."""
    mine = np.flatnonzero(rows < n_rows)
    placed = schedule[schedule >= 0]
    np.testing.assert_array_equal(np.sort(placed), mine)
    lane_of = {}
    for lane in range(schedule.shape[1]):
        column = schedule[:, lane][schedule[:, lane] >= 0]
        assert np.all(np.diff(column) > 0), "a lane runs its sessions in time order"
        for r in rows[column]:
            assert lane_of.setdefault(int(r), lane) == lane, "a query in two lanes"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lane_plan_is_valid_and_balanced(seed):
    rng = np.random.default_rng(seed)
    n_rows, n_lanes, n = 57, 6, 400
    rows = rng.choice(np.r_[np.arange(n_rows), [n_rows] * 20], size=n, p=None)  # some sessions of other buckets
    counts = np.bincount(rows[rows < n_rows], minlength=n_rows)
    busiest_bound = -(-counts.sum() // n_lanes) + counts.max()
    schedule, busiest = ds.lane_plan(jnp.asarray(rows, jnp.int32), n_rows, n_lanes, int(busiest_bound))
    schedule = np.asarray(schedule)
    check_valid(schedule, rows, n_rows)
    loads = (schedule >= 0).sum(axis=0)
    assert int(busiest) == loads.max() <= busiest_bound
    assert loads.max() - loads.min() <= counts.max(), "lanes within one query's count of each other"
    host = lane_schedule(rows[rows < n_rows], n_lanes)  # the host's LPT, for scale
    assert loads.max() <= host.shape[0] + counts.max()


def test_a_phase_plan_puts_every_session_in_its_slot_once():
    data = small_data()
    n = 250
    seg = ds.Segmentation.of(update_points(n, 4))
    draws = ds.draw_phase(jnp.asarray(KEYS), n, data.n_queries, 0.5, 100, seg.window)
    layout = ds.device_layout(data)
    configured = (5, 4)
    loads, entering = ds.phase_loads(draws, layout, seg, configured)
    shape = ds.fit_shape(np.asarray(loads), configured)
    trial_of = jnp.asarray([0, 0, 1, 2])
    for s in range(len(seg.starts)):
        inputs, schedules = ds.segment_plan(draws, layout, seg, shape, jnp.int32(s), trial_of)
        for m, t in enumerate([0, 0, 1, 2]):
            query = np.asarray(draws.query[t])[seg.starts[s]:seg.starts[s] + seg.lengths[s]]
            enter = np.asarray(draws.enter[t])[seg.starts[s]:seg.starts[s] + seg.lengths[s]]
            placed = []
            for b, bucket in enumerate(data.buckets):
                schedule = np.asarray(schedules[b][m])
                rows = np.where(data.bucket_of_query[query] == b, data.row_of_query[query], bucket.n_queries)
                check_valid(schedule, np.r_[rows, [bucket.n_queries] * (seg.window - len(rows))], bucket.n_queries)
                x = jax.tree_util.tree_map(lambda a: np.asarray(a[m]), inputs[b])
                on = schedule >= 0
                np.testing.assert_array_equal(x.valid, on)
                np.testing.assert_array_equal(x.rows[on], rows[schedule[on]])
                np.testing.assert_array_equal(x.enter[on], enter[schedule[on]])
                np.testing.assert_array_equal(x.session[on], 100 + seg.starts[s] + schedule[on])
                assert np.all(x.rows[~on] == bucket.n_queries) and not x.enter[~on].any()
                placed += schedule[on].tolist()
            assert sorted(placed) == list(range(seg.lengths[s]))
    host_entering = [np.bincount(np.asarray(draws.query[t, :n])[np.asarray(draws.enter[t, :n])],
                                 minlength=data.n_queries) for t in range(3)]
    np.testing.assert_array_equal(np.asarray(entering), np.stack(host_entering))


def test_fit_shape_keeps_a_known_shape_that_fits_and_grows_otherwise():
    loads = np.zeros((1, 2, 2, 3), np.int64)
    loads[..., 0], loads[..., 1], loads[..., 2] = [[30, 6], [28, 5]], [[200, 20], [190, 18]], [[9, 3], [8, 3]]
    shape = ds.fit_shape(loads, (8, 8))
    assert shape.steps >= 30
    for b, lanes in enumerate(shape.lanes):
        n, h = loads[..., b, 1].max(), loads[..., b, 2].max()
        assert lanes == 8 or -(-n // lanes) + h <= shape.steps
    assert shape.lanes[1] < 8, "a small bucket keeps only the lanes it needs"
    assert ds.fit_shape(loads // 2, (8, 8), shape) == shape
    bigger = loads.copy()
    bigger[..., 0, 0] = 3 * shape.steps
    assert ds.fit_shape(bigger, (8, 8), shape).steps > shape.steps


def test_to_session_order_places_each_slot_at_its_session():
    schedules = (jnp.asarray([[[0, 2], [3, -1]]]), jnp.asarray([[[1], [-1]]]))
    values = (jnp.asarray([[[10.0, 12.0], [13.0, 99.0]]]), jnp.asarray([[[11.0], [98.0]]]))
    out = ds.to_session_order(values, schedules, window=5, fill=-1.0)
    np.testing.assert_array_equal(np.asarray(out), [[10.0, 11.0, 12.0, 13.0, -1.0]])
