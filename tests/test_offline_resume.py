"""experiment=offline resumes: a rerun into the same directory skips the finished trials and ends where a
fresh run ends; a directory written for another configuration is refused."""

import json

import pytest

from ltrjax.schema import offline_run
from ltrjax import offline_runner as runner
from ltrjax.data.toy import toy_queryset


def _cfg(trials, **extra):
    return {"experiment": {"trials": trials, "n_sessions": 5_000, "progress": False, "estimators": ["ips", "production"],
                           "click_model": {"threshold": 2}, "train": {"max_epochs": 3, "patience": 2},
                           "logging_chunk": 4096, "eval_buckets": 1, **extra}}


def test_offline_rerun_skips_finished_trials(tmp_path, monkeypatch):
    qs = toy_queryset(n_queries=60, seed=3)
    runner.run_offline(offline_run(_cfg(1)), tmp_path / "run", queryset=qs)
    first = json.loads((tmp_path / "run" / "results.json").read_text())
    seeds = []
    original = runner.prepare_trial
    monkeypatch.setattr(runner, "prepare_trial", lambda q, e, seed: seeds.append(seed) or original(q, e, seed))
    resumed = runner.run_offline(offline_run(_cfg(2)), tmp_path / "run", queryset=qs)
    assert seeds == [1]  # trial 0 (seed 0) was not run again
    assert resumed["algorithms"]["ips"]["trials"][0] == first["algorithms"]["ips"]["trials"][0]
    assert [info["seed"] for info in resumed["trials_info"]] == [0, 1]
    assert (tmp_path / "run" / "models" / "ips" / "trial1.msgpack").exists()
    fresh = runner.run_offline(offline_run(_cfg(2)), tmp_path / "fresh", queryset=qs)
    for name in ("ips", "production"):
        assert [t["ndcg@10"] for t in resumed["algorithms"][name]["trials"]] == \
            [t["ndcg@10"] for t in fresh["algorithms"][name]["trials"]]
    seeds.clear()
    runner.run_offline(offline_run(_cfg(2)), tmp_path / "run", queryset=qs)  # everything finished: nothing runs
    assert seeds == []
    with pytest.raises(ValueError, match="experiment.n_sessions: 5000 → 6000.*another folder"):
        runner.run_offline(offline_run(_cfg(2, n_sessions=6_000)), tmp_path / "run", queryset=qs)
