"""A retrain's documents filtered on the device (``sim.retrain_examples=device``, ``ltrjax/online/
retrain_documents.py``) are the host path's arrays: the same documents, counters, order and capped subset, in
blocks of members read in any order, and a whole population run gives the same results bit for bit."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ltrjax.online import retrain as retrain_lib
from ltrjax.online import simulator as sim_lib
from ltrjax.online.retrain_documents import document_cells
from ltrjax.online.training_data import member_splits
from tests import toy_sims


def random_states(sim, n_members: int, seed: int = 0):
    """(per-member bucket states, their stack): each member's counters its own random whole numbers 0-5 (so an
    impression filter of 2 keeps some documents and drops others) and a random number of entered documents."""
    rng = np.random.default_rng(seed)

    def randomized(state, n_docs):
        counts = {name: None if c is None else jnp.asarray(rng.integers(0, 6, c.shape).astype(np.float32))
                  for name, c in dataclasses.asdict(state.counters).items()}
        n_entered = np.append(rng.integers(0, np.asarray(n_docs) + 1), 0).astype(np.int32)  # scratch row last
        return state.replace(counters=state.counters.replace(**counts), n_entered=jnp.asarray(n_entered))

    members = [[randomized(st, b.n_docs) for st, b in zip(sim.init_states(jax.random.PRNGKey(s)), sim.data.buckets)]
               for s in range(n_members)]
    return members, [jax.tree_util.tree_map(lambda *a: jnp.stack(a), *per_bucket) for per_bucket in zip(*members)]


@pytest.mark.parametrize("per_block", [2, 5])
def test_documents_filtered_on_the_device_are_the_host_paths(monkeypatch, per_block):
    """With blocks of 2 of 5 members and one block of 5: member_splits over the device-filtered documents equals
    member_splits over the host views (ids, counters, dtypes, order), uncapped and with a cap that binds (the same
    NumPy subset); members read out of order give their own documents."""
    sim = toy_sims.small_sim()
    data = sim.data
    _, stacked = random_states(sim, 5)
    names = ("clicks", "impressions")
    cells = document_cells(data)
    keys = jax.random.split(jax.random.PRNGKey(3), 5)
    monkeypatch.setattr(retrain_lib, "VIEW_BLOCK_BYTES", per_block * sum(cells.capacity) * 4 * 3)
    host_views = retrain_lib.retrain_views(stacked, names, 5)
    device_views = retrain_lib.retrain_views(stacked, names, 5, cells)
    assert host_views[0].documents is None and device_views[0].documents is not None
    for limit in (None, 7):
        want = member_splits(data, *host_views, 5, 2.0, keys, limit)
        got = member_splits(data, *device_views, 5, 2.0, keys, limit)
        for w, g in zip(want, got):
            for w_split, g_split in zip(w, g):
                assert sorted(w_split) == sorted(g_split) == ["clicks", "doc", "impressions"]
                for name in w_split:
                    assert w_split[name].dtype == g_split[name].dtype
                    np.testing.assert_array_equal(g_split[name], w_split[name])
        sizes = np.asarray([[len(s["doc"]) for s in pair] for pair in want])
        if limit is None:  # the filter keeps some documents and drops others: the check can fail
            assert sizes.min() > 0 and sizes.max() < max(cells.capacity)
            uncapped, everyone = sizes, want
        else:
            assert np.all(sizes == np.minimum(uncapped, limit)) and np.any(uncapped > limit)
    for i in (4, 0, 3, 1, 2):  # out of order: each read returns its member's documents
        for got, want in zip(device_views[0].documents(i, 2.0), everyone[i]):
            for name in want:
                np.testing.assert_array_equal(got[name], want[name])


def test_a_population_filtering_on_the_device_gives_the_same_run():
    """EBRank's population (two trials x two epsilons, retrains after two segments) with ``retrain_examples=device``
    and ``host``: the same Cum-NDCG, Warm/Cold NDCG, fits and final parameters, bit for bit; ``auto`` resolves per
    backend."""
    assert sim_lib.SimConfig().resolved("gpu").retrain_examples == "device"
    assert sim_lib.SimConfig().resolved("cpu").retrain_examples == "host"
    base = toy_sims.small_sim()
    runs = {}
    for where in ("host", "device"):
        sim = sim_lib.Simulator(base.data, base.click_model,
                                dataclasses.replace(base.config, retrain_examples=where), base.warmup_policy)
        assert sim.config.retrain_examples == where
        runs[where] = sim.run_population(toy_sims.small_ebrank(base.data), list(toy_sims.KEYS),
                                         list(toy_sims.EBRANK_HYPERS), progress=False)
    for host, device in zip(runs["host"], runs["device"]):
        assert host.cum_ndcg == device.cum_ndcg and host.warm_ndcg == device.warm_ndcg
        assert [i.get("n_train") for i in host.train_info] == [i.get("n_train") for i in device.train_info]
        assert any(i.get("n_train") for i in host.train_info)
        for a, b in zip(jax.tree_util.tree_leaves(host.final_params), jax.tree_util.tree_leaves(device.final_params)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
