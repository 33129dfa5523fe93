"""Statistics, analyses, tables and figures of the online experiments (pure NumPy/matplotlib)."""

import itertools

import numpy as np
import pytest

from ltrjax import metrics
from ltrjax.report import analysis, plots, tables as table
from ltrjax.report.stats import discounted_contributions, paired_randomization_test, significance_vs_best


def brute_force_p(d):
    d = np.asarray(d, np.float64)
    obs = abs(d.sum())
    flips = [abs(np.dot(s, d)) >= obs - 1e-12 for s in itertools.product([1, -1], repeat=d.size)]
    return np.mean(flips)


# --- randomization test -------------------------------------------------------------------------

def test_exact_p_values_on_hand_examples():
    assert paired_randomization_test([1, 2, 3], [0, 0, 0]) == pytest.approx(2 / 8)
    assert paired_randomization_test([0, 0, 0], [1, 2, 3]) == pytest.approx(2 / 8)
    # d = (1, 1, -1): |sum| = 1, all 8 patterns reach |T| >= 1
    assert paired_randomization_test([1, 1, 0], [0, 0, 1]) == pytest.approx(1.0)
    # d = (3, 1, 1): sums 5, 3, 3, 1 (and negatives): |T| >= 5 only for +++ and ---
    assert paired_randomization_test([3, 1, 1], [0, 0, 0]) == pytest.approx(2 / 8)
    # zero differences carry no information: n = 5 with 2 zeros -> 2*4/32 = 2/8
    assert paired_randomization_test([1, 2, 3, 5, 5], [0, 0, 0, 5, 5]) == pytest.approx(2 / 8)
    assert paired_randomization_test([1, 2], [1, 2]) == 1.0
    rng = np.random.default_rng(3)
    d = rng.normal(0.3, 1.0, size=9)
    assert paired_randomization_test(d, np.zeros(9)) == pytest.approx(brute_force_p(d))
    # smallest p with 5 paired trials: 2/32 = 0.0625 > 0.05
    assert paired_randomization_test(np.arange(1, 6) + 10.0, np.zeros(5)) == pytest.approx(1 / 16)


def test_monte_carlo_matches_exact():
    rng = np.random.default_rng(0)
    a, b = rng.normal(0.5, 1.0, 12), rng.normal(0.0, 1.0, 12)
    exact = paired_randomization_test(a, b)
    mc = paired_randomization_test(a, b, n_samples=20000, seed=1, exact_max_units=0)
    assert 0.02 < exact < 0.98
    assert mc == pytest.approx(exact, abs=4 * np.sqrt(exact * (1 - exact) / 20000) + 1e-4)


def test_monte_carlo_shift_and_null():
    rng = np.random.default_rng(1)
    base = rng.normal(size=1000)
    shifted = base + 0.2 + rng.normal(0, 0.5, 1000)
    p = paired_randomization_test(shifted, base, n_samples=2000)
    assert p == pytest.approx(1 / 2001)  # +1 correction: never 0
    assert paired_randomization_test(base + rng.normal(0, 0.5, 1000), base, n_samples=2000, seed=4) > 0.05
    # p roughly uniform under the null: few rejections over 60 replicates
    pvals = [paired_randomization_test(rng.normal(size=200), rng.normal(size=200), n_samples=300, seed=i)
             for i in range(60)]
    assert np.mean(np.array(pvals) < 0.05) < 0.2
    assert 0.3 < np.mean(pvals) < 0.7


def test_monte_carlo_is_chunked_and_seeded(monkeypatch):
    from ltrjax.report import stats

    monkeypatch.setattr(stats, "_CHUNK_ELEMENTS", 1000)  # 1 sign pattern of 600 units per chunk... or a few
    rng = np.random.default_rng(2)
    a, b = rng.normal(0.05, 1, 600), rng.normal(0, 1, 600)
    p1 = stats.paired_randomization_test(a, b, n_samples=500, seed=7)
    p2 = stats.paired_randomization_test(a, b, n_samples=500, seed=7)
    assert p1 == p2 and 0 < p1 <= 1


def test_randomization_test_validates_shapes():
    with pytest.raises(ValueError, match="pair up"):
        paired_randomization_test([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="1-D"):
        paired_randomization_test(np.ones((2, 2)), np.ones((2, 2)))
    with pytest.raises(ValueError, match="no units"):
        paired_randomization_test([], [])
    with pytest.raises(ValueError, match="non-finite"):
        paired_randomization_test([1.0, np.nan], [0.0, 0.0])


def test_significance_vs_best():
    rng = np.random.default_rng(5)
    base = rng.uniform(size=400)
    noise = rng.normal(0, 0.02, 400)
    rows = {"worse": base - 0.1 + rng.normal(0, 0.02, 400), "best": base + 0.05,
            "tied": base + 0.05 - 1e-4 + (noise - noise.mean())}  # 0.1 standard errors below the best
    out = significance_vs_best(rows, n_samples=999)
    assert list(out) == list(rows)
    assert out["best"]["best"] and out["best"]["p_value"] is None
    assert out["worse"]["significantly_worse"] and out["worse"]["p_value"] < 0.01
    assert not out["tied"]["significantly_worse"]
    assert not out["best"]["best_significant"]
    assert out["worse"]["mean"] == pytest.approx(rows["worse"].mean())
    for k in ("worse", "tied"):  # one pass over shared sign patterns = the pairwise tests
        assert out[k]["p_value"] == paired_randomization_test(rows["best"], rows[k], n_samples=999)
    low = significance_vs_best({"a": base, "b": base + 1.0}, higher_is_better=False, n_samples=99)
    assert low["a"]["best"] and low["b"]["significantly_worse"]
    with pytest.raises(ValueError, match="same units"):
        significance_vs_best({"a": np.ones(3), "b": np.ones(4)})


def test_discounted_contributions_sum_to_cum_ndcg():
    x = np.random.default_rng(0).uniform(size=300)
    assert discounted_contributions(x, 0.995).sum() == pytest.approx(metrics.cumulative_ndcg(x, 0.995))


# --- analyses -------------------------------------------------------------------------------------

def test_exploitation_ratio():
    assert analysis.exploitation_ratio([1.0, -1.0, 2.0]) == pytest.approx(0.5)
    assert analysis.exploitation_ratio(np.array([[3.0], [-1.0]]), behaviour_index=0) == pytest.approx(0.75)
    assert analysis.exploitation_ratio([1.0, 1.0, 1.0, 1.0], behaviour_index=[2, 3]) == pytest.approx(0.5)
    assert np.isnan(analysis.exploitation_ratio([0.0, 0.0]))
    both = analysis.exploitation_ratios([0.5, -1.5, 2.0], behaviour_index=-1)
    assert both == pytest.approx({"behaviour": 0.5, "max_nonbehaviour": 0.375})


def test_candidate_sessions_matches_brute_force():
    rng = np.random.default_rng(0)
    n_sessions, n_queries, n_docs = 300, 7, 80
    session_query = rng.integers(0, n_queries, n_sessions).astype(np.int32)
    doc_query = rng.integers(0, n_queries + 1, n_docs).astype(np.int32)  # query 7 is never issued
    entry = rng.integers(-1, n_sessions + 2, n_docs).astype(np.int32)
    entered = rng.uniform(size=n_docs) < 0.9
    got = analysis.candidate_sessions(session_query, entry, doc_query, entered=entered)
    want = [sum(1 for s in range(n_sessions) if session_query[s] == doc_query[i] and s >= max(entry[i], 0))
            if entered[i] else 0 for i in range(n_docs)]
    np.testing.assert_array_equal(got, want)
    # a document entering in session t is a candidate in session t
    assert analysis.candidate_sessions([0, 1, 0, 0], [2, -1, 3], [0, 0, 1]).tolist() == [2, 3, 0]


def test_click_rate_by_entry_hand_example():
    # warm-up sessions 0..9, main phase 10..109, 2 bins (10..59, 60..109)
    entry = np.array([-1, -1, 5, 10, 59, 60, 109, 30, 70, -1])
    clicks = np.array([10, 4, 5, 5, 1, 2, 0, 9, 9, 0])
    cand = np.array([20, 8, 10, 10, 4, 8, 0, 10, 10, 10])
    perfect = np.array([1, 1, 1, 1, 1, 1, 1, 0, 0, 1], bool)
    entered = np.array([1, 1, 1, 1, 1, 1, 1, 1, 1, 0], bool)  # the last one never entered
    out = analysis.click_rate_by_entry(clicks, cand, entry, perfect, first_main_session=10, n_main_sessions=100,
                                       n_bins=2, entered=entered)
    assert out["labels"] == ["initial", "0–50%", "50–100%"]
    assert out["count"] == [3, 2, 1]
    assert out["skipped"] == [0, 0, 1]
    np.testing.assert_allclose(out["rate"], [0.5, (0.5 + 0.25) / 2, 0.25])
    np.testing.assert_allclose(out["rate_std"], [0.0, 0.125, 0.0], atol=1e-12)
    assert out["edges_session"] == [10.0, 60.0, 110.0]
    assert out["edges_fraction"] == [0.0, 0.5, 1.0]
    empty = analysis.click_rate_by_entry(clicks, cand, entry, np.zeros(10, bool), 10, 100, n_bins=2)
    assert np.all(np.isnan(empty["rate"])) and empty["count"] == [0, 0, 0]
    avg = analysis.average_click_rates([out, empty, out])
    np.testing.assert_allclose(avg["rate"], out["rate"])
    assert avg["count"] == [6, 4, 2] and avg["trials"] == 3


# --- tables ---------------------------------------------------------------------------------------

def test_online_table_markdown():
    rows = {
        "ebrank": {"cold_ndcg": [0.60, 0.62], "warm_ndcg": [0.85, 0.84], "cum_ndcg": [170.0, 172.0]},
        "cftopk@wo_behav": {"cold_ndcg": [0.61, 0.63], "warm_ndcg": [0.60, 0.61], "cum_ndcg": [116.0, 117.0]},
        "cftopk@concat": {"cold_ndcg": [0.38, 0.39], "warm_ndcg": [0.57, 0.58], "cum_ndcg": [113.0, 114.0]},
        "bm25": {"cold_ndcg": [0.47], "warm_ndcg": [0.47], "cum_ndcg": [94.0]},
    }
    sig = {"warm_ndcg": {"ebrank": {"best": True, "best_significant": True, "p_value": None,
                                    "significantly_worse": False},
                         "cftopk@wo_behav": {"best": False, "significantly_worse": True, "p_value": 0.001},
                         "cftopk@concat": {"best": False, "significantly_worse": True, "p_value": 0.001},
                         "bm25": {"best": False, "significantly_worse": True, "p_value": 0.001}},
           "cold_ndcg": {"ebrank": {"best": False, "significantly_worse": False, "p_value": 0.3}}}
    text = table.online_table_markdown(rows, significance=sig, title="Online", notes="MQ2007, 2 trials")
    lines = text.splitlines()
    assert lines[0] == "## Online"
    assert lines[2].startswith("| method | feature setting | Cold-NDCG@5 | Warm-NDCG@5 | Cum-NDCG@5 |")
    body = {l.split("|")[1].strip() + "/" + l.split("|")[2].strip(): l for l in lines[4:8]}
    assert set(body) == {"ebrank/—", "cftopk/W/o-Behav", "cftopk/W/-Behav (Concat)", "bm25/—"}
    assert "**0.8450 ± 0.0071** ∗" in body["ebrank/—"]
    assert "**171.00 ± 1.41**" in body["ebrank/—"]
    assert "**0.6200 ± 0.0141**" in body["cftopk/W/o-Behav"]
    assert "0.6050 ± 0.0071 ▾" in body["cftopk/W/o-Behav"]
    assert "▾" not in body["ebrank/—"]
    assert "| 0.4700 ▾ |" in body["bm25/—"] and body["bm25/—"].rstrip().endswith("| 1 |")  # one trial: no ± 0
    assert "±" not in body["bm25/—"]
    assert "▾: significantly worse" in text and "p < 0.05" in text and text.rstrip().endswith("MQ2007, 2 trials")


def test_exploitation_ratio_markdown():
    text = table.exploitation_ratio_markdown({"cfepsilon@concat": [0.6, 0.7], "pdgd@concat": [0.5]})
    assert "| cfepsilon | W/-Behav (Concat) | 0.650 ± 0.071 | 2 |" in text
    assert "| pdgd | W/-Behav (Concat) | 0.500 | 1 |" in text
    both = table.exploitation_ratio_markdown({"dbgd@concat": {"behaviour": [0.6], "max_nonbehaviour": [0.1]}})
    assert "x^b ratio | max x^nb ratio" in both and "| 0.600 | 0.100 | 1 |" in both


# --- figures --------------------------------------------------------------------------------------

def _png(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000
    assert not list(path.parent.glob(".*.tmp"))


def test_plots_write_pngs(tmp_path):
    rate = {"labels": ["initial", "0–50%", "50–100%"], "rate": [0.5, 0.3, float("nan")]}
    averaged = analysis.average_click_rates([{**rate, "count": [1, 1, 0], "skipped": [0, 0, 0],
                                              "edges_session": [0, 1, 2], "edges_fraction": [0, .5, 1], "n_bins": 2},
                                             {**rate, "rate": [0.4, 0.2, 0.1], "count": [1, 1, 1],
                                              "skipped": [0, 0, 0], "edges_session": [0, 1, 2],
                                              "edges_fraction": [0, .5, 1], "n_bins": 2}])
    plots.plot_click_rate_by_entry({"topk": rate, "ucbrank": averaged}, tmp_path / "click_rate.png", "Fig. 1")
    _png(tmp_path / "click_rate.png")

    lam = [0, 0.1, 1, 10, 100, 1000]
    series = {"ucbrank": {"warm": [[0.5, 0.52], [0.55, 0.56], [0.6, 0.61], [0.62, 0.6], [0.58, 0.57], [0.5, 0.5]],
                          "cold": [0.4, 0.41, 0.42, 0.43, 0.44, 0.45]},
              "ebrank": {"warm": [0.7] * 6}}
    plots.plot_sweep(lam, series, tmp_path / "sweep.png", "λ", {"warm": "Warm-NDCG@5", "cold": "Cold-NDCG@5"})
    _png(tmp_path / "sweep.png")
    plots.plot_sweep([0.1, 0.5, 1.0], {"ebrank": {"cum": [[100, 101], [110, 112], [120, 119]]}},
                     tmp_path / "sub" / "eta.png", "η", ["cum"])
    _png(tmp_path / "sub" / "eta.png")

    plots.plot_exploitation_ratio({"cftopk@concat": [0.6, 0.7], "pdgd@concat": [0.5, 0.55, 0.45]},
                                  tmp_path / "ratio.png")
    _png(tmp_path / "ratio.png")
    plots.plot_exploitation_ratio({"dbgd": {"behaviour": [0.6, 0.5], "max_nonbehaviour": [0.1, 0.2]}},
                                  tmp_path / "ratio2.png")
    _png(tmp_path / "ratio2.png")


def test_series_colours_are_distinct_for_a_full_table():
    from ltrjax.report.plots import series_color

    for n in (5, 16, 19, 30):
        assert len({str(series_color(i, n)) for i in range(n)}) == n
