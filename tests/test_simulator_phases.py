"""The named phases of ``trial.run_members`` (warm-up, retrain after the warm-up, main segments) and their
helpers; that a population run equals its members run alone is tests/test_population.py's."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from ltrjax.online import evaluate
from ltrjax.online import retrain as retrain_lib
from ltrjax.online.simulator import (WARMUP_RETRAIN, Simulator, fold_member_keys, group_trials, pad_to_devices,
                                     per_member)
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


def test_per_member_copies_each_members_trial_leaf_and_empties_the_box():
    trial_of = np.array([1, 0, 1, 1])
    tree = {"a": jnp.arange(12.0).reshape(2, 3, 2), "b": np.arange(4, dtype=np.int32).reshape(2, 2),
            "n": None}
    box = [tree]
    got = per_member(box, trial_of)
    assert box == [] and got["n"] is None
    for k in ("a", "b"):
        assert isinstance(got[k], jax.Array) and got[k].dtype == tree[k].dtype
        np.testing.assert_array_equal(np.asarray(got[k]), np.asarray(tree[k])[trial_of])


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


def test_a_retrain_gets_the_session_logs_only_when_its_policy_reads_them(monkeypatch):
    """``Policy.reads_logs``: EBRank retrains from the counters, so a run that keeps no click logs brings no shown
    list or click to the host and its retrains get None logs, with every result as in the same run with the logs
    kept (and passed to the retrains); a policy that reads logs (the base default) gets them without kept logs."""
    sim = toy_sims.small_sim()
    policy = toy_sims.small_ebrank(sim.data)
    assert not policy.reads_logs
    seen = []
    update = type(policy).update_population

    def spy(self, keys, params, hyper, data, counters, entered, logs):
        seen.append(list(logs))
        return update(self, keys, params, hyper, data, counters, entered, logs)

    monkeypatch.setattr(type(policy), "update_population", spy)
    runs = {}
    for keep in (False, True):
        seen.clear()
        runs[keep] = (sim.run(policy, toy_sims.KEYS[0], progress=False, keep_logs=keep), [logs[0] for logs in seen])
    (lean, lean_logs), (kept, kept_logs) = runs[False], runs[True]
    assert len(lean_logs) == len(kept_logs) >= 2
    assert all(log is None for log in lean_logs)
    n_k = sim.config.top_k
    assert all(log.shown.shape == (len(log.query), n_k) and log.clicks.any() for log in kept_logs)
    assert lean.logs is None and len(kept.logs) == len(kept.eval_points)
    np.testing.assert_array_equal(lean.session_ndcg, kept.session_ndcg)
    assert lean.cum_ndcg == kept.cum_ndcg
    np.testing.assert_equal(lean.eval_history, kept.eval_history)  # NaN (no train/vali evaluation) equals NaN
    for a, b in zip(jax.tree_util.tree_leaves(lean.final_params), jax.tree_util.tree_leaves(kept.final_params)):
        np.testing.assert_array_equal(a, b)

    monkeypatch.setattr(type(policy), "reads_logs", True)
    seen.clear()
    sim.run(policy, toy_sims.KEYS[0], progress=False)
    got = [logs[0] for logs in seen]
    assert len(got) == len(kept_logs)
    for a, b in zip(got, kept_logs):
        np.testing.assert_array_equal(a.shown, b.shown)
        np.testing.assert_array_equal(a.clicks, b.clicks)


def test_heap_is_trimmed_only_for_large_simulators(monkeypatch):
    """``release_free_heap`` (glibc's ``malloc_trim``, ~6 ms) runs after the warm-up, every retrain and every chunk
    only for a simulator with at least ``HEAP_TRIM_SLOTS`` document slots (MSLR-30K shape), not at toy size."""
    from ltrjax.online import memory

    calls = []
    monkeypatch.setattr(memory, "release_free_heap", lambda: calls.append(1))
    small = toy_sims.small_sim()
    policy = toy_sims.small_ebrank(small.data)
    assert not small.trims_heap
    small.run(policy, toy_sims.KEYS[0], progress=False)
    assert calls == []
    monkeypatch.setattr(memory, "HEAP_TRIM_SLOTS", 1)
    large = Simulator(small.data, small.click_model, small.config, warmup_policy=small.warmup_policy)
    assert large.trims_heap
    result = large.run(policy, toy_sims.KEYS[0], progress=False)
    assert len(calls) == 1 + len(result.train_info) + 1  # the warm-up, each retrain, the chunk


def test_retrain_views_in_blocks_are_each_members_views(monkeypatch):
    """``retrain_views`` computes and copies blocks of members at once (as many as ``VIEW_BLOCK_BYTES`` holds, the
    last block starting early so all have one width): with blocks of 2 of 5 members, and with all 5 in one block,
    member i's counters and entered masks are its own state's in dataset order (``counters_in_dataset_order``,
    ``entered_mask``) whatever the order they are read in."""
    from ltrjax.online.policies.base import member
    from ltrjax.online.state import counters_in_dataset_order, entered_mask

    sim = toy_sims.small_sim()
    rng = np.random.default_rng(0)

    def with_counts(state):  # every member's counters its own random numbers
        counts = {name: None if c is None else jnp.asarray(rng.random(c.shape, np.float32))
                  for name, c in dataclasses.asdict(state.counters).items()}
        return state.replace(counters=state.counters.replace(**counts))

    members = [[with_counts(st) for st in sim.init_states(jax.random.PRNGKey(s))] for s in range(5)]
    stacked = [jax.tree_util.tree_map(lambda *a: jnp.stack(a), *per_bucket) for per_bucket in zip(*members)]
    names = ("clicks", "impressions")
    slots = sum(int(np.prod(s.order.shape[1:])) for s in stacked)
    for per_block in (2, 5):
        monkeypatch.setattr(retrain_lib, "VIEW_BLOCK_BYTES", per_block * slots * (4 * len(names) + 1))
        counters, entered = retrain_lib.retrain_views(stacked, names, 5)
        for i in (4, 0, 3, 1, 2):
            for b, state in enumerate(members[i]):
                want = counters_in_dataset_order(state, names)
                got = member(counters, i)[b]
                for name in names:
                    np.testing.assert_array_equal(getattr(got, name), np.asarray(getattr(want, name)))
                assert got.exposure is None
                np.testing.assert_array_equal(member(entered, i)[b], np.asarray(entered_mask(state)))


def test_an_evaluation_point_scores_the_parameters_before_its_retrain(monkeypatch):
    """Evaluate, then retrain (EBRank Alg. 1): the Warm/Cold NDCG recorded after a segment that is followed by a
    retrain are those of the parameters that ran the segment, not the retrained ones, although the simulator
    launches the retrain's counter views before the evaluation and fetches the evaluation after the retrain. Each
    retrain's inputs are evaluated on the side (the same program) and must equal that point's history; the retrain
    changed the priors, so the check fails when a point is evaluated after its retrain."""
    sim = toy_sims.small_sim()
    policy = toy_sims.small_ebrank(sim.data)
    expected, retrained = [], []
    original = retrain_lib.retrain

    def retrain(ctx, policy, keys, params, hyper, states, logs, views=None):
        per_query = evaluate.evaluate(ctx, policy, params, states, test_only=ctx.config.history_splits == "test")
        expected.append(evaluate.split_means(ctx.data, {k: v[0] for k, v in per_query.items()}))
        new, infos = original(ctx, policy, keys, params, hyper, states, logs, views)
        retrained.append(any(not np.array_equal(np.asarray(a), np.asarray(b)) for a, b in
                             zip(jax.tree_util.tree_leaves(new["prior"]), jax.tree_util.tree_leaves(params["prior"]))))
        return new, infos

    monkeypatch.setattr(retrain_lib, "retrain", retrain)
    result = sim.run(policy, toy_sims.KEYS[0], progress=False)
    points = [i for i in range(sim.config.n_segments) if sim.config.retrains_after(i)]
    assert len(expected) == len(points) == 2 and all(retrained)
    for point, want in zip(points, expected):
        assert np.isfinite(want["test"]["warm"]) and np.isfinite(want["test"]["cold"])
        np.testing.assert_equal(result.eval_history[point], want)  # the other splits: NaN (test queries only)
