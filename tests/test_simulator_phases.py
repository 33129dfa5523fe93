"""The named phases of ``Simulator._run_members`` (warm-up, retrain after the warm-up, main segments) and their
helpers; that a population run equals its members run alone is tests/test_population.py's."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from ltrjax import clicks
from ltrjax.data.layout import pad_and_bucket
from ltrjax.online.policies.bm25 import BM25
from ltrjax.online.policies.ebrank import EBRank
from ltrjax.online.simulator import (WARMUP_RETRAIN, SimConfig, Simulator, fold_member_keys, group_trials,
                                     pad_to_devices)
from ltrjax.data.toy import toy_queryset


def test_fold_member_keys_folds_each_members_trial_key_in_turn():
    keys = [jax.random.PRNGKey(1), jax.random.PRNGKey(2), jax.random.PRNGKey(1)]
    trial_of, trials = group_trials(keys)
    got = fold_member_keys(trials, trial_of, "policy", 1, 7)
    want = jnp.stack([jax.random.fold_in(jax.random.fold_in(trials[t].policy, 1), 7) for t in trial_of])
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(got[2]))  # members of one trial share it


def test_pad_to_devices_copies_the_last_member():
    assert pad_to_devices([1, 2, 3], ["a", "b", "c"], 1) == ([1, 2, 3], ["a", "b", "c"])
    assert pad_to_devices([1, 2, 3], ["a", "b", "c"], 2) == ([1, 2, 3, 3], ["a", "b", "c", "c"])
    assert pad_to_devices([1, 2], ["a", "b"], 2) == ([1, 2], ["a", "b"])


def test_train_after_warmup_retrains_once_more():
    """``sim.train_after_warmup=true`` retrains on the warm-up logs before the first segment (its key: the train
    key folded with -1 as a uint32, ``WARMUP_RETRAIN``), one more entry in ``train_info`` than without."""
    assert WARMUP_RETRAIN == np.uint32(-1 % 2**32)
    data = pad_and_bucket(toy_queryset(n_queries=12, n_features=4, docs=(6, 12), y_max=2, seed=2, recipe="latent"),
                          n_buckets=1)
    config = SimConfig(sessions=120, warmup_sessions_per_query=2, n_updates=2, entry_prob=0.5, min_lanes=4,
                       lanes_per_query=0.3)
    model = clicks.make_click_model({"kind": "pbm", "examination": "log2"}, 5)
    policy = EBRank(data, fit={"max_epochs": 2})
    runs = {}
    for after_warmup in (False, True):
        sim = Simulator(data, model, dataclasses.replace(config, train_after_warmup=after_warmup),
                        warmup_policy=BM25(data))
        runs[after_warmup] = sim.run(policy, jax.random.PRNGKey(0), progress=False)
    assert len(runs[True].train_info) == len(runs[False].train_info) + 1
    assert np.all(np.isfinite(runs[True].session_ndcg))
