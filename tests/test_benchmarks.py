"""Every benchmark and experiment script runs (``--smoke``) and reports sane numbers: benchmarks that cannot rot.

The scripts run in this process through their ``main(argv)`` (no interpreter start-up per script, and the
tests' persistent XLA cache of tests/conftest.py applies). The sweep runs before the end-to-end run: their
single-member programs have the same shapes, so the second finds them in that cache.
"""

import json
import math
import statistics
import subprocess
import time
from pathlib import Path

import jax
import pytest

from tests.scripts import last_json, run_main

ROOT = Path(__file__).resolve().parent.parent
CACHE_OPTIONS = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
                 "jax_persistent_cache_min_entry_size_bytes")


@pytest.fixture(autouse=True)
def keep_jax_cache_options():
    """The offline scripts point JAX's persistent cache at .cache/jax; the rest of the session keeps its own."""
    saved = {name: getattr(jax.config, name) for name in CACHE_OPTIONS}
    yield
    for name, value in saved.items():
        jax.config.update(name, value)


def positive(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


# --------------------------------------------------------------------------- online benchmarks
def test_sweep_smoke_population_equals_serial(capsys):
    returned, stdout = run_main("benchmarks/sweep.py", ["--smoke", "--json"], capsys)
    out = last_json(stdout)
    assert out == json.loads(json.dumps(returned))
    assert out["members"] == out["seeds"] * len(out["grid"]) == 4
    assert out["sessions_per_trial"] == 1500 and out["queries"] == 60
    for k in ("population_seconds", "serial_seconds", "speedup", "population_seconds_excluding_compile",
              "serial_seconds_excluding_compile"):
        assert positive(out[k]), (k, out[k])
    assert out["population_compile_seconds"] >= 0 and out["serial_compile_seconds"] >= 0
    assert 0 <= out["max_abs_diff"] <= 1e-4, out["max_abs_diff_by_metric"]
    assert out["same_choice"] is True
    assert out["chosen"]["population"] == out["chosen"]["serial"] and len(out["chosen"]["serial"]) == 2
    cums = out["cum_ndcg_test"]["population"] + out["cum_ndcg_test"]["serial"]
    assert len(cums) == 8 and all(0 < c < 200 for c in cums)  # discounted sums of <= 1/(1 - 0.995) NDCGs
    assert out["chunks"] >= 1
    assert out["population_retrains"] == out["serial_retrains"] > 0  # the comparison covers a retrain
    assert_work_measures(out)
    assert out["compiles"] == out["population_compiles"] + out["serial_compiles"]
    assert out["compile_seconds"] == pytest.approx(out["population_compile_seconds"] + out["serial_compile_seconds"])
    gpu = jax.default_backend() == "gpu"  # the backend's defaults, as resolved (a GPU's: docs/cluster.md)
    assert out["member_batch"] == (8 if gpu else 1) and out["overrides"] == []
    assert out["click_rng"] == out["retrain_examples"] == ("device" if gpu else "host")
    assert out["backend"] == jax.default_backend() and out["jax_version"] == jax.__version__


def assert_work_measures(out):
    """The issue-22 measures every online benchmark reports: compiles, doc-slot occupancy, alpha sharing."""
    assert isinstance(out["compiles"], int) and out["compiles"] >= 0 and out["compile_seconds"] >= 0
    assert isinstance(out["compile_cache_hits"], int) and out["compile_cache_hits"] >= 0
    assert out["compiles"] + out["compile_cache_hits"] > 0  # the run asked XLA for programs
    assert out["compilation_cache"]  # the persistent cache is on (the tests' folder, tests/conftest.py)
    assert 0 < out["doc_slot_occupancy"] <= 1
    assert out["segment_width_shapes"] >= 1
    sharing = out["alpha_sharing"]
    assert sharing["members"] == 7 and positive(sharing["one_member_seconds"]) and positive(sharing["members_seconds"])
    assert out["alpha_seconds_7_over_1"] == pytest.approx(sharing["members_seconds"] / sharing["one_member_seconds"])
    laid = sharing["with_layout"]  # the same with each member's alpha laid out in entry order, reported beside it
    assert positive(laid["one_member_seconds"]) and positive(laid["members_seconds"])
    assert laid["ratio"] == pytest.approx(laid["members_seconds"] / laid["one_member_seconds"])


def test_retrain_smoke(capsys):
    returned, stdout = run_main("benchmarks/retrain.py", ["--smoke", "--json"], capsys)
    out = last_json(stdout)
    assert out == json.loads(json.dumps(returned))
    assert out["examples"] == 2048 and out["members"] == 2
    for name in ("reference", "new"):
        assert positive(out["shuffle_ms"][name]) and positive(out["fit_seconds"][name])
        assert out["epochs"][name] >= out["members"]  # every member ran at least one epoch
        assert positive(out["ms_per_epoch"][name])
    assert positive(out["shuffle_speedup"]) and positive(out["epoch_speedup"])
    assert out["fit"]["batch_size"] == 256  # conf/algorithm/ebrank.yaml's fit
    assert {k: out["fit"][k] for k in ("patience", "grace", "min_delta")} == {"patience": 0, "grace": 0,
                                                                            "min_delta": 1e-4}  # FitConfig's
    # the loss alone: Eq. 14's lgamma/digamma form against a linear-MSE pass, and its gradient against betaln's
    assert positive(out["ebrank_loss_over_mse"])
    assert out["ebrank_loss_over_mse"] == out["loss_cost"]["ebrank_loss_over_mse"]
    assert 0 <= out["ebrank_grad_rel_err_vs_betaln"] <= 1e-5
    assert all(positive(v) for v in out["loss_cost"]["ns_per_example"].values())
    # the stop rule on a warm start: the configured rule (the default, no forced epochs) and the old one
    warm = out["warm_restart"]
    assert out["fit_passes_per_retrain"] == warm["configured"]["fit_passes_per_retrain"]
    assert 1 <= out["fit_passes_per_retrain"] <= 2 and out["cold_fit_passes"] >= 1
    assert warm["old"]["fit_passes_per_retrain"] >= 5 + 2 and warm["old_stop"]["patience"] == 5  # patience 5, grace 1
    assert out["default_vs_old_val_loss_rel_diff"] == warm["default_vs_old_val_loss_rel_diff"]
    # a tiny smoke fit; issue 22's bar (1e-3) is for full runs
    assert abs(warm["default_vs_old_val_loss_rel_diff"]) < 1e-2
    # the step-cost scan (--smoke: minibatch 256 only) one member at a time, then 256 with both members vmapped
    scan = out["step_cost"]
    assert [(r["batch"], r["member_batch"]) for r in scan] == [(256, 1), (256, 2)]
    for r in scan:
        assert len(r["epochs"]) == 2 and min(r["epochs"]) >= 1
        assert r["member_steps"] == sum(r["epochs"]) * (2048 // r["batch"])  # every example is real
        assert positive(r["fit_seconds"]) and positive(r["us_per_member_step"])
        assert r["us_per_example"] == pytest.approx(r["us_per_member_step"] / r["batch"])
        assert r["us_per_member_step"] == pytest.approx(1e6 * r["fit_seconds"] / r["member_steps"])


def test_end_to_end_smoke(capsys):
    _, stdout = run_main("benchmarks/end_to_end.py", ["--smoke", "--json"], capsys)
    out = last_json(stdout)
    assert out["sessions"] == 1500 and out["queries"] == 60 and out["warmup_sessions"] > 0
    assert positive(out["run_seconds"]) and positive(out["wall_seconds"])
    split = [out[f"{k}_seconds"] for k in ("simulate", "train", "evaluate")]
    assert all(positive(s) for s in split)
    assert sum(split) <= out["run_seconds"] + 1e-6
    assert out["wall_seconds"] >= out["run_seconds"]
    assert 0 < out["cum_ndcg"] < 200
    assert 0 <= out["warm_ndcg"] <= 1 and 0 <= out["cold_ndcg"] <= 1
    assert_work_measures(out)
    assert out["compile_share"] == pytest.approx(out["compile_seconds"] / out["wall_seconds"])


def test_end_to_end_occupancy_only_smoke(capsys):
    """``--occupancy-only``: the plans' occupancy and widths, nothing compiled; width classes (at most
    ``sim.width_classes`` per bucket, one copy of the session step each) scan fewer padded slots than one width."""
    out = {}
    for mode in ("phase", "classes"):
        _, stdout = run_main("benchmarks/end_to_end.py", ["--smoke", "--json", "--occupancy-only",
                                                          f"sim.segment_widths={mode}", "sim.width_classes=2"], capsys)
        out[mode] = json.loads(stdout.strip().splitlines()[-1])
        assert 0 < out[mode]["doc_slot_occupancy"] <= 1 and out[mode]["segment_width_shapes"] == 1
        assert "compile_seconds" not in out[mode]
    (phase,), (classes,) = out["phase"]["widths"], out["classes"]["widths"]
    assert out["phase"]["step_copies"] == len(phase) and all(isinstance(w, int) for w in phase)
    assert out["classes"]["step_copies"] == sum(len(w) for w in classes) and all(len(w) <= 2 for w in classes)
    assert out["classes"]["doc_slot_occupancy"] > out["phase"]["doc_slot_occupancy"]


def test_sessions_per_sec_smoke(capsys):
    _, stdout = run_main("benchmarks/sessions_per_sec.py", ["--smoke", "--json"], capsys)
    out = last_json(stdout)
    for k in ("sessions_per_sec", "reference_sessions_per_sec", "speedup", "cpu_time_speedup",
              "reference_cpu_sessions_per_sec", "population_sessions_per_sec", "population_speedup"):
        assert positive(out[k]), (k, out[k])
    assert out["population_speedup"] == pytest.approx(out["population_sessions_per_sec"]
                                                      / out["reference_sessions_per_sec"])
    assert out["population_members"] == 2 and out["populations"] == [1, 2]
    assert {"ebrank", "pdgd"} <= set(out["families"])
    for family, rates in out["families"].items():
        assert set(rates) == {"1", "2"}, family
        for population, rate in rates.items():
            assert positive(rate), (family, population)
            d = out["detail"][family][population]
            assert d["sessions_per_sec"] == rate
            assert d["members"] == int(population)
            assert d["total_sessions"] == d["members"] * d["sessions_per_member"] > 0
            assert d["program_calls"] == d["segments"]  # one compiled segment program call per segment
            # the Stopwatch reached the phase functions that draw, set up and plan (protocol.*, plan.plan)
            assert d["setup_seconds"] > 0 and d["planning_seconds"] > 0
            # everything >= simulation (setup and planning excluded) >= the compiled program alone, each within one
            # run: the program's own time comes from another run (blocking after each call), which on a loaded
            # machine can be slower than the best timed run (0.0081 s against 0.0054 s beside other jobs)
            assert d["wall_seconds"] >= d["simulation_seconds"] > 0
            assert d["program_run_simulation_seconds"] >= d["program_seconds"] > 0
            assert d["host_fraction_of_wall"] < 1 and 0 <= d["setup_and_planning_fraction_of_wall"] < 1
    assert out["sessions_per_sec"] == out["families"]["ebrank"]["1"]
    assert out["population_sessions_per_sec"] == out["families"]["ebrank"]["2"]
    assert out["overrides"] == [] and out["backend"] == jax.default_backend()
    assert out["click_rng"] == ("device" if jax.default_backend() == "gpu" else "host")  # resolved for the backend


def test_settings_ab_smoke_times_each_value_and_checks_results(capsys):
    """settings_ab.py: a performance setting (where a retrain filters its documents) gives the same results in every
    run, each value's timed runs compile nothing (the untimed first run did), and the ratios are the medians'; a
    setting that changes the draws (the click stream) is reported as changing the results."""
    returned, stdout = run_main("benchmarks/settings_ab.py",
                                ["sim.retrain_examples", "host,device", "--smoke", "--json", "--members", "2"], capsys)
    out = last_json(stdout)
    assert out == json.loads(json.dumps(returned))
    assert out["values"] == ["host", "device"] and out["resolved"] == {"host": "host", "device": "device"}
    assert out["same_results"] is True and out["max_abs_diff"] == 0.0
    assert len(out["cum_ndcg_test"]) == 2 == out["members"]
    assert all(0 < c < 200 for c in out["cum_ndcg_test"])
    for v in out["values"]:
        assert len(out["runs"][v]) == out["rounds"] == 1
        run = out["runs"][v][0]
        assert run["compiles"] == 0 and run["seconds"] >= run["simulate"] + run["train"] > 0
        assert out["median"][v]["seconds"] == run["seconds"]
    assert out["over_first"]["device"]["seconds"] == pytest.approx(
        out["median"]["device"]["seconds"] / out["median"]["host"]["seconds"])
    changed = last_json(run_main("benchmarks/settings_ab.py", ["sim.click_rng", "host,device", "--smoke", "--json"],
                                 capsys)[1])
    assert changed["same_results"] is False and changed["cum_ndcg_test"] is None and changed["max_abs_diff"] > 0


def test_compile_meter_reports_none_without_compile_events(monkeypatch):
    """A JAX whose compile events the meter cannot see (renamed in a new version) gives None, not a wrong 0,
    and the benchmarks' arithmetic on the figures passes None on instead of failing."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import benchlib

    # A constant no earlier run used: the program is compiled here, never read from the suite's persistent cache
    # (which outlives a run; JAX decides once per process whether to use it, so turning it off here would not do).
    fresh = float(time.time_ns() % 10 ** 9) + 0.5
    with benchlib.CompileMeter() as meter:
        jax.jit(lambda x: x - fresh)(1.0).block_until_ready()
    assert meter.compiles >= 1 and meter.seconds > 0  # this JAX's events are seen
    monkeypatch.setattr(benchlib.CompileMeter, "available", False)
    assert meter.seconds is None and meter.compiles is None and meter.cache_hits is None
    assert benchlib.minus(2.0, None) is None and benchlib.plus(1, None) is None and benchlib.ratio(None, 2) is None
    assert benchlib.minus(3.0, 1.0) == 2.0 and benchlib.plus(1, 2) == 3 and benchlib.ratio(1.0, 0.0) is None


def test_baseline_smoke_runs_each_tree_with_its_own_code(tmp_path, capsys):
    """benchmarks/baseline.py --smoke: a worktree of HEAD (history a clean clone has), the tiny command run in both
    trees back to back, alternating, each importing ltrjax from its own tree; the worktree is removed after."""
    if subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    out_dir = tmp_path / "out"
    result, stdout = run_main("benchmarks/baseline.py", ["--smoke", "--json", "--out", str(out_dir)], capsys)
    summary = last_json(stdout)
    runs = result["runs"]
    assert [(r["repeat"], r["label"]) for r in runs] == [(0, "baseline"), (0, "current"), (1, "current"),
                                                         (1, "baseline")]
    base_tree = Path(result["baseline"]["tree"])
    for r in runs:
        assert r["returncode"] == 0 and positive(r["wall_seconds"]) and r["peak_rss_bytes"] > 2 ** 20
        tree = base_tree if r["label"] == "baseline" else ROOT
        assert Path(r["json"]["ltrjax_file"]).resolve().is_relative_to(tree.resolve()), (r["label"], r["json"])
        assert (Path(r["run_dir"]) / "stdout.txt").is_file()
        assert Path(r["ltrjax_cache"]).name == f"{r['label']}-{r['repeat']}"  # --xla-cache fresh: one per run
    assert result["baseline"]["commit"] == result["current"]["commit"] == summary["current_commit"]
    assert summary["baseline_ratio"] == pytest.approx(statistics.median(summary["current_wall_seconds"])
                                                      / statistics.median(summary["baseline_wall_seconds"]))
    assert len(summary["pair_ratios"]) == 2 and all(positive(p) for p in summary["pair_ratios"])
    assert positive(summary["peak_rss_ratio"])
    for name in ("results.json", "results.md", "command.txt"):
        assert (out_dir / name).is_file(), name
    assert "baseline_ratio" in (out_dir / "results.md").read_text()
    assert not base_tree.exists()  # the temporary worktree is gone
    assert str(base_tree) not in subprocess.run(["git", "worktree", "list"], cwd=ROOT, capture_output=True,
                                                text=True).stdout


def test_baseline_fails_clearly_when_the_baseline_refuses_the_command(tmp_path, capsys):
    """A command one tree does not accept stops the script with that tree's named and its stderr's last lines."""
    if subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    failing = ["-c", "import sys; sys.exit('unrecognized arguments: --cache-dir')"]
    with pytest.raises(SystemExit) as exc:
        run_main("benchmarks/baseline.py", ["--smoke", "--out", str(tmp_path), "--", *failing], capsys)
    message = str(exc.value.code)
    assert "failed in the baseline tree" in message and "unrecognized arguments: --cache-dir" in message
    saved = json.loads((tmp_path / "results.json").read_text())
    assert len(saved["runs"]) == 1 and saved["runs"][0]["returncode"] == 1 and saved["failed"]


def test_baseline_summarizes_an_offline_run(tmp_path):
    """Rows without Cum/Warm/Cold-NDCG (``-- -m ltrjax.run experiment=offline``): no row difference, and a
    results.md all the same (it used to format None and leak the temporary worktree)."""
    from tests.scripts import load_script

    baseline = load_script("benchmarks/baseline.py")
    results = {"dataset": "toy", "trials": 1, "wall_seconds": 2.0, "peak_rss_bytes": 10**8,
               "algorithms": {"naive": {"ndcg@10": 0.5, "map": 0.4, "trials": [{}]}}}
    runs = []
    for repeat, label in [(0, "baseline"), (0, "current")]:
        run_dir = tmp_path / f"{label}-{repeat}"
        run_dir.mkdir()
        (run_dir / "results.json").write_text(json.dumps(results))
        runs.append({"label": label, "repeat": repeat, "returncode": 0, "wall_seconds": 3.0 if repeat else 2.0,
                     "peak_rss_bytes": 10**8, "peak_tree_rss_bytes": None, "user_seconds": 1.0,
                     "system_seconds": 0.1, "load_average_before": [0.5], "load_average_after": [0.6],
                     "run_record": baseline.run_record_of(run_dir)})
    assert runs[0]["run_record"]["rows"] == {"naive": {}}
    summary = baseline.summarize(runs)
    assert summary["row_metrics_max_abs_diff"] is None and summary["baseline_ratio"] is not None
    tree = {"commit": "0" * 40, "dirty": False, "revision": "HEAD"}
    text = baseline.markdown({"baseline": tree, "current": tree, "invocation": "python benchmarks/baseline.py",
                              "command": ["-m", "ltrjax.run", "experiment=offline"], "repeat": 1,
                              "order": "alternate", "xla_cache": "fresh", "started": "s", "finished": "f",
                              "machine": {"cpu": "x", "cpu_count": 2, "memory_bytes": None, "jax": "0"},
                              "runs": runs, "summary": summary})
    assert "baseline_ratio" in text and "Cum/Warm/Cold" not in text


def test_gpu_check_script_parses():
    """benchmarks/gpu_check.sh (run on a lent GPU machine, rarely) is at least valid bash here."""
    subprocess.run(["bash", "-n", str(ROOT / "benchmarks" / "gpu_check.sh")], check=True)


def test_gpu_check_smoke_runs_its_trial_setup_steps(tmp_path):
    """``SMOKE=1 bash benchmarks/gpu_check.sh`` as it stands, with the issue-40 steps (sessions per second and the
    end-to-end breakdown, trials set up on the host and on the device) and the summary; the sweep, the exactness
    tests and trial_setup_check (tests/test_device_trial.py runs its smoke) left out for time."""
    import os
    import sys

    env = {**os.environ, "SMOKE": "1", "PYTHON": sys.executable, "OUT": str(tmp_path), "SWEEP": "0", "TESTS": "",
           "CHECK": "0", "CACHE": str(tmp_path / "xla")}
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh")], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    sps = json.loads((tmp_path / "sessions_per_sec.json").read_text())
    by_setup = sps["detail"]["ebrank"]["2"]["by_trial_setup"]
    assert by_setup["device"]["h2d_bytes_per_segment"] == 0 < by_setup["host"]["h2d_bytes_per_segment"]
    assert by_setup["device"]["trial_setup"] == "device" and by_setup["host"]["trial_setup"] == "host"
    ends = [json.loads((tmp_path / f"end_to_end_{s}.json").read_text()) for s in ("host", "device")]
    assert ends[0]["cum_ndcg"] == ends[1]["cum_ndcg"]
    assert [e["trial_setup"] for e in ends] == ["host", "device"]
    assert "wall sessions/s device / host" in done.stdout


# --------------------------------------------------------------------------- offline scripts
def in_unit(x) -> bool:
    return isinstance(x, float) and 0.0 <= x <= 1.0


def test_offline_throughput_smoke(tmp_path, capsys):
    path = tmp_path / "bench.json"
    run_main("benchmarks/offline_throughput.py", ["--smoke", "--out", str(path)], capsys)
    res = json.loads(path.read_text())
    assert res["smoke"] is True
    for tag in ("logging_first_call", "logging_compiled", "numpy_reference"):
        assert positive(res[tag]["sessions_per_s"]), tag
    assert {"prs", "production", "labeled"} <= set(res["estimators"])
    assert all(in_unit(e["ndcg@10"]) for e in res["estimators"].values())


def test_offline_table_smoke(tmp_path, capsys):
    run_main("experiments/offline_table.py", ["--smoke", "--out", str(tmp_path)], capsys)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert set(saved["algorithms"]) == {"prs", "production", "labeled"}
    for entry in saved["algorithms"].values():
        assert len(entry["trials"]) == 1
        assert all(in_unit(entry[m]) for m in ("ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "map"))
    assert (tmp_path / "results.md").exists()


def test_offline_sweeps_smoke(tmp_path, capsys):
    run_main("experiments/offline_sweeps.py", ["--smoke", "--out", str(tmp_path)], capsys)
    saved = json.loads((tmp_path / "eta.json").read_text())
    assert saved["sweep"] == "eta" and saved["trials"] == 1
    assert len(saved["table"]) == 2
    for row in saved["table"].values():
        assert {"naive", "prs"} == set(row)
        assert all(in_unit(e["ndcg@10"]) for e in row.values())
    assert (tmp_path / "eta.png").read_bytes().startswith(b"\x89PNG")


def test_compare_runs_smoke(capsys):
    result, out = run_main("experiments/compare_runs.py", ["--smoke"], capsys)
    row = result["rows"]["ebrank"]
    assert row["trials"] == [0, 1]
    for metric in ("cum_ndcg", "warm_ndcg", "cold_ndcg"):
        cell = row[metric]
        assert 0.0 < cell["p_value"] <= 1.0
        assert cell["mean_difference"] == pytest.approx(cell["B"]["mean"] - cell["A"]["mean"])
        # trial level, 2 trials paired by seed: the exact sign-flip p is 0.5 or 1, never below 0.05: no verdict
        assert cell["trial_p_value"] in (0.5, 1.0) and cell["within_noise"] is None
        assert cell["trials_higher"] + cell["trials_lower"] <= 2
        assert cell["trial_t_p_value"] is None or 0.0 <= cell["trial_t_p_value"] <= 1.0
    assert row["within_noise"] is None and result["within_noise"] is None and result["alpha"] == 0.05
    assert "| ebrank | 2 | Warm-NDCG@5 |" in out and "**Verdict** (rule: a metric is within noise when" in out
    assert "| too few trials |" in out and "too few trials to tell" in out


def test_compare_runs_trial_level_test_and_verdict():
    """The trial-level paired tests: exact sign-flip over per-trial differences, paired t beside it, the verdict."""
    import numpy as np

    from tests.scripts import load_script

    trial_level = load_script("experiments/compare_runs.py").trial_level
    a = np.arange(10, dtype=float)
    moved = trial_level(a, a + 1.0 + 0.01 * np.arange(10), 0.05)  # every trial higher: p = 2 / 2^10
    assert moved["trial_p_value"] == pytest.approx(2 / 1024) and moved["within_noise"] is False
    assert moved["trials_higher"] == 10 and moved["trial_t_p_value"] < 1e-6
    noise = trial_level(a, a + np.array([1, -1] * 5, dtype=float), 0.05)  # differences that cancel
    assert noise["trial_p_value"] == pytest.approx(1.0) and noise["within_noise"] is True
    assert noise["trials_higher"] == noise["trials_lower"] == 5 and noise["trial_t_p_value"] == pytest.approx(1.0)
    same = trial_level(a, a.copy(), 0.05)
    assert same["trial_p_value"] == 1.0 and same["trial_t_p_value"] == 1.0 and same["within_noise"] is True
    # fewer than 6 trials cannot reach p < 0.05 (smallest p 2 / 2^n): no verdict; 6 can
    assert trial_level(a[:5], a[:5] + 1.0, 0.05)["within_noise"] is None
    assert trial_level(a[:6], a[:6] + 1.0, 0.05)["within_noise"] is False
    with pytest.raises(ValueError):
        trial_level(a[:0], a[:0], 0.05)


def test_compare_runs_refuses_runs_without_common_trials(tmp_path):
    from tests.scripts import load_script

    compare = load_script("experiments/compare_runs.py").compare
    header = {"dataset": "toy", "sessions": 10, "click_model": {"kind": "pbm"}, "sim": {"gamma": 0.995}}
    for name, seed in (("a", 0), ("b", 1)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(
            {**header, "algorithms": {"ebrank": {"trials": [{"seed": seed}]}}}))
    with pytest.raises(SystemExit, match="no trial of 'ebrank' in common") as exc:
        compare(tmp_path / "a", tmp_path / "b", ("A", "B"))
    assert str(tmp_path / "a") in str(exc.value) and str(tmp_path / "b") in str(exc.value)


def test_compare_runs_protocol_check_reports_settings_one_run_lacks():
    """A sim key a later commit added (segment_widths), or a reporting or performance key with two values, is
    reported, not a difference; another changed value is refused."""
    from tests.scripts import load_script

    check = load_script("experiments/compare_runs.py").protocol_check
    old = {"dataset": "mq2008", "sessions": 100, "click_model": {"kind": "pbm"},
           "sim": {"top_k": 5, "gamma": 0.995, "history_splits": "test"}}
    new = {**old, "sim": {**old["sim"], "segment_widths": "phase", "history_splits": "all"}}
    assert check(old, new, ("base", "head")) == {"sim.segment_widths": {"head": "phase"},
                                                 "sim.history_splits": {"base": "test", "head": "all"}}
    classes = {**new, "sim": {**new["sim"], "segment_widths": "classes"}}  # performance only: reported, not refused
    assert check(new, classes, ("phase", "classes")) == {
        "sim.segment_widths": {"phase": "phase", "classes": "classes"}}
    with pytest.raises(SystemExit, match="differ in 'sim'"):
        check(old, {**new, "sim": {**new["sim"], "top_k": 4}}, ("base", "head"))


@pytest.mark.parametrize("probes", [
    ("position_rankings", "convergence", "linear", "oracle_o"),
    pytest.param(("oracle_features", "mlp"), marks=pytest.mark.slow),  # thin wrappers of compare(): ~30 s more
])
def test_fidelity_probes_smoke(tmp_path, capsys, probes):
    """experiments/fidelity_probes.py (the issue-11 probes behind docs/fidelity.md) at toy size."""
    returned, _ = run_main("experiments/fidelity_probes.py", ["--smoke", str(tmp_path), *probes], capsys)
    assert set(returned) == set(probes)
    for name, res in returned.items():
        assert (tmp_path / f"{name}.json").exists()
        assert res["sizes"]["queries"] == 40
    for res in returned.values():
        if isinstance(res.get("vectorization"), list):
            assert len(res["vectorization"]) == 1 and 0.0 <= res["vectorization"][0] <= 1.0  # one seed
    if "convergence" in returned:
        assert all(0.0 <= v <= 1.0 for v in returned["convergence"]["dla"]["final"])
        assert 0.0 < returned["position_rankings"]["d3"]["bayes_gain"] <= 1.0
