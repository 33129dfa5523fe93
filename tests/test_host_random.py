"""The host threefry draws (``ltrjax.online.host_random``) equal ``jax.random``'s bit for bit, and the simulator's
host-side draws built on them (initial states, session plans, trial keys) equal their ``jax.random`` forms."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ltrjax.data.layout import pad_and_bucket
from ltrjax.data.toy import toy_queryset
from ltrjax.online import host_random
from ltrjax.online.schedule import draw_sessions
from ltrjax.online.state import init_bucket_state, init_bucket_state_host

KEY = jax.random.PRNGKey(3)


def same(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_key_operations_equal_jax_random():
    same(host_random.split(KEY, 5), jax.random.split(KEY, 5))
    same(host_random.split(KEY), jax.random.split(KEY))
    for data in (0, 7, 0xFFFFFFFF):
        same(host_random.fold_in(KEY, data), jax.random.fold_in(KEY, data))
    same(host_random.fold_in(KEY, np.arange(10)), jax.vmap(lambda d: jax.random.fold_in(KEY, d))(jnp.arange(10)))
    same(host_random.prng_key(12345), jax.random.PRNGKey(12345))
    same(host_random.fold_in(jax.random.key(3), 7), jax.random.key_data(jax.random.fold_in(jax.random.key(3), 7)))


@pytest.mark.parametrize("shape", [(), (1,), (7,), (1000,), (3, 4)])
def test_uniform_and_randint_equal_jax_random(shape):
    same(host_random.uniform(KEY, shape), jax.random.uniform(KEY, shape))
    same(host_random.randint(KEY, shape, 0, 1680), jax.random.randint(KEY, shape, 0, 1680))
    same(host_random.randint(KEY, shape, -3, 1 << 30), jax.random.randint(KEY, shape, -3, 1 << 30))
    same(host_random.randint(KEY, shape, 5, 5), jax.random.randint(KEY, shape, 5, 5))  # empty range: minval


def test_batched_keys_equal_vmapped_jax_random():
    keys = jax.random.split(KEY, 6)
    same(host_random.uniform(keys, (9,)), jax.vmap(lambda k: jax.random.uniform(k, (9,)))(keys))
    same(host_random.randint(keys, (), 5, 10), jax.vmap(lambda k: jax.random.randint(k, (), 5, 10))(keys))


def test_session_draws_equal_their_jax_random_form():
    draws = draw_sessions(KEY, 500, 37, 0.3, first_session=11)
    k_query, k_enter = jax.random.split(KEY)
    same(draws.query, jax.random.randint(k_query, (500,), 0, 37))
    same(draws.enter, jax.random.uniform(k_enter, (500,)) < 0.3)


def test_host_initial_state_equals_the_jax_one():
    data = pad_and_bucket(toy_queryset(n_queries=40, docs=(3, 30)), n_buckets=2)
    for b, bucket in enumerate(data.buckets):
        key = jax.random.fold_in(KEY, b)
        got, want = init_bucket_state_host(key, bucket, (5, 9)), init_bucket_state(key, bucket, (5, 9))
        jax.tree_util.tree_map(same, got, want)
