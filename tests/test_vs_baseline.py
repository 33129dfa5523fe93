"""Offline tables against a named baseline: paired over trials, Holm-corrected over the rows (issue 42, item 3)."""

import numpy as np
import pytest
from scipy import stats

from ltrjax.constraints import ConfigError
from ltrjax.offline.config import OfflineConfig
from ltrjax.report.offline_tables import markdown_vs_baseline, vs_baseline
from ltrjax.report.stats import holm, trial_level_vs_baseline


def test_holm_equals_a_hand_computation():
    # sorted .01, .03, .04 of m = 3: x3 = .03, x2 = .06, x1 = .04 -> running max .06; untested rows stay None
    assert holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": None}) == pytest.approx({"a": 0.03, "b": 0.06, "c": 0.06,
                                                                               "d": None})
    assert holm({"a": 0.6, "b": 0.9}) == {"a": 1.0, "b": 1.0}  # x2 capped at 1; the next never below it


def test_rows_against_the_baseline_are_paired_over_trials_and_holm_adjusted():
    base = [0.50, 0.52, 0.49, 0.51, 0.50]
    rows = {"naive": base, "up": [0.55, 0.58, 0.53, 0.56, 0.54], "same": [0.51, 0.51, 0.50, 0.50, 0.51],
            "down": [0.40, 0.43, 0.41, 0.42, 0.40]}
    out = trial_level_vs_baseline({k: dict(enumerate(v)) for k, v in rows.items()}, "naive")
    assert set(out) == {"up", "same", "down"}
    raw = {k: stats.ttest_rel(rows[k], base).pvalue for k in out}
    m = len(raw)
    order = sorted(raw, key=raw.get)
    expected, running = {}, 0.0
    for i, k in enumerate(order):
        running = max(running, min(1.0, (m - i) * raw[k]))
        expected[k] = running
    for k, row in out.items():
        assert row["p_value"] == pytest.approx(raw[k]) and row["p_holm"] == pytest.approx(expected[k])
        assert row["difference"] == pytest.approx(np.mean(rows[k]) - np.mean(base)) and row["n_trials"] == 5
    assert out["up"]["better"] and not out["up"]["worse"] and out["down"]["worse"] and not out["same"]["better"]
    assert trial_level_vs_baseline({"a": {0: 1.0}}, "naive") == {}


def test_the_table_section_names_the_baseline_and_the_unit():
    trials = [{"naive": {"ndcg@10": 0.5 + d}, "ips": {"ndcg@10": 0.55 + d}} for d in (0.0, 0.01, -0.01, 0.02)]
    comparison = vs_baseline(trials, ["naive", "ips"], ["ndcg@10"], "naive")
    text = markdown_vs_baseline(comparison, "naive")
    assert "### Against naive (paired over trials, Holm-corrected over the 1 rows)" in text and "| ips |" in text
    assert "unit: trial" in text
    assert vs_baseline(trials, ["ips"], ["ndcg@10"], "naive") == {} and markdown_vs_baseline({}, "naive") == ""


def test_the_baseline_is_an_estimator_or_null():
    assert OfflineConfig().baseline == "naive" and OfflineConfig(baseline=None).baseline is None
    with pytest.raises(ConfigError, match="baseline"):
        OfflineConfig(baseline="nope")
