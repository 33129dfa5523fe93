"""The examples run (``--smoke``) and report sane numbers: examples are code too.

Run in this process through their ``main(argv)``, as tests/test_benchmarks.py runs the benchmarks.
"""

import json
import math

from tests.scripts import last_json, load_script, run_main


def test_custom_policy_example(capsys):
    returned, stdout = run_main("examples/custom_policy.py", ["--smoke", "--json"], capsys)
    out = last_json(stdout)
    assert out == json.loads(json.dumps(returned))
    assert set(out["policies"]) == {"ucb_click_rate", "ebrank"} and out["trials"] == 1
    for name, row in out["policies"].items():
        assert 0 < row["cum_ndcg"] < 200, name  # a discounted sum of <= 1/(1 - 0.995) NDCGs
        assert 0 <= row["warm_ndcg"] <= 1 and 0 <= row["cold_ndcg"] <= 1, name
    assert out["policies"]["ucb_click_rate"]["cum_ndcg"] != out["policies"]["ebrank"]["cum_ndcg"]
    assert "ucb_click_rate" in stdout and "Cum-NDCG" in stdout and "1 trial)" in stdout


def test_offline_from_click_log_example(capsys, tmp_path):
    returned, stdout = run_main("examples/offline_from_click_log.py", ["--smoke", "--json", "--out", str(tmp_path)],
                                capsys)
    out = last_json(stdout)
    assert out == json.loads(json.dumps(returned))
    assert out["click_log"]["sessions"] == out["click_log"]["sessions_train"] == 20_000
    assert set(out["estimators"]) == {"naive", "ips", "prs", "labeled"}
    for name, row in out["estimators"].items():
        assert all(0 <= v <= 1 and math.isfinite(v) for v in row.values()), name
    assert (tmp_path / "click_log.parquet").exists() and (tmp_path / "models" / "ips" / "trial0.msgpack").exists()
    assert "click log" in (tmp_path / "results.md").read_text()


def test_custom_estimator_example(capsys):
    """An estimator registered from outside the package trains and is evaluated like the built-in ones."""
    from ltrjax.offline import estimators

    returned, stdout = run_main("examples/custom_estimator.py", ["--smoke", "--json"], capsys)
    out = last_json(stdout)
    assert out == json.loads(json.dumps(returned))
    assert set(out["estimators"]) == {"naive", "ips", "propensity_svm", "production"}
    for name, row in out["estimators"].items():
        assert all(0 <= v <= 1 and math.isfinite(v) for v in row.values()), name
    assert out["estimators"]["propensity_svm"]["ndcg@10"] != out["estimators"]["ips"]["ndcg@10"]
    assert "propensity_svm" in estimators.ALL_ESTIMATORS and "'clip': 100.0" in stdout


def test_custom_click_model_example(capsys):
    """A click model built outside the package: its simulated click rates match its formula, and it drives an online
    comparison. The same check on a model without the distraction term fails, so it can."""
    returned, stdout = run_main("examples/custom_click_model.py", ["--smoke", "--json"], capsys)
    out = last_json(stdout)
    assert out == json.loads(json.dumps(returned))
    assert out["click_rates"]["max_gap_in_se"] < 4.5  # 5 positions, 20,000 lists: far below by chance
    assert set(out["policies"]) == {"ebrank", "random_k"} and out["trials"] == 1
    for name, row in out["policies"].items():
        assert 0 < row["cum_ndcg"] < 200 and 0 <= row["cold_ndcg"] <= 1, name
    assert "1 trial)" in stdout and "1 trials" not in stdout

    example = load_script("examples/custom_click_model.py")
    wrong = example.click_rate_check(example.distracted_user(5, 0.0), 20_000, distraction=0.1)
    assert wrong["max_gap_in_se"] > 10
