"""The named phases of ``Simulator._run_members`` (warm-up, retrain after the warm-up, main segments) and their
helpers; that a population run equals its members run alone is tests/test_population.py's."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from ltrjax.online.simulator import WARMUP_RETRAIN, Simulator, fold_member_keys, group_trials, pad_to_devices
from tests import toy_sims


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
    # tests/test_population.py's simulator and EBRank: the run without the extra retrain is its first trial's
    sim = toy_sims.small_sim()
    policy = toy_sims.small_ebrank(sim.data)
    runs = {}
    for after_warmup in (False, True):
        config = dataclasses.replace(sim.config, train_after_warmup=after_warmup)
        runs[after_warmup] = Simulator(sim.data, sim.click_model, config, warmup_policy=sim.warmup_policy).run(
            policy, jax.random.PRNGKey(1), progress=False)
    assert len(runs[True].train_info) == len(runs[False].train_info) + 1
    assert np.all(np.isfinite(runs[True].session_ndcg))
