"""``python -m ltrjax.collect``: merging the results.json of many runs (a Hydra multirun) into one table."""

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ltrjax.collect import main
from tests.tiny_run import DATA_CACHE, TINY, run_ltrjax


CUM = {"ebrank_pbm": {"bm25": [20.0, 22.0, 27.0], "ebrank": [30.0, 31.0, 35.0]},
       "trust_bias": {"bm25": [18.0, 19.0, 23.0], "ebrank": [25.0, 29.5, 26.0]}}


def write_run(folder: Path, overrides: list[str] | None, algorithms: dict, dataset="synthetic", **header):
    """A run folder as ``python -m ltrjax.run`` leaves it: results.json (+ .hydra/overrides.yaml)."""
    folder.mkdir(parents=True)
    if overrides is not None:
        (folder / ".hydra").mkdir()
        (folder / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    # the precomputed means are wrong on purpose: collect must recompute them from the trials
    entries = {name: {"cum_ndcg": -1.0, "cum_ndcg_std": -1.0, "trials": trials} for name, trials in algorithms.items()}
    (folder / "results.json").write_text(json.dumps({"dataset": dataset, **header, "algorithms": entries}))


def online_trials(cum: list[float]) -> list[dict]:
    return [{"seed": t, "cum_ndcg": c, "warm_ndcg": c / 100, "cold_ndcg": c / 200, "cum_ndcg_vali": c + 1,
             "chosen": {"epsilon": 20}, "eval_points": [1, 2], "timings": {"simulate": 1.0}, "retrains": 2,
             "train_last": None} for t, c in enumerate(cum)]


@pytest.fixture
def multirun(tmp_path):
    """Two jobs of ``-m click_model=ebrank_pbm,trust_bias`` with 3 trials each."""
    root = tmp_path / "multirun"
    for job, click_model in enumerate(CUM):
        write_run(root / str(job), [f"click_model={click_model}", "+dataset=synthetic", "trials=3",
                                    "~algorithms.random_k=null"],
                  {name: online_trials(cum) for name, cum in CUM[click_model].items()}, sessions=300)
    (root / "multirun.yaml").write_text("hydra: {}\n")
    return root


def read_csv(path: Path) -> list[dict]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_merges_jobs_with_their_overrides_and_recomputed_statistics(multirun, capsys):
    assert main([str(multirun)]) == 0
    assert "merged 2 runs (4 rows)" in capsys.readouterr().out
    rows = read_csv(multirun / "results.csv")
    assert [(r["run"], r["click_model"], r["algorithm"]) for r in rows] == [
        ("0", "ebrank_pbm", "bm25"), ("0", "ebrank_pbm", "ebrank"),
        ("1", "trust_bias", "bm25"), ("1", "trust_bias", "ebrank")]
    for row in rows:
        cum = np.array(CUM[row["click_model"]][row["algorithm"]])
        assert row["dataset"] == "synthetic" and row["+dataset"] == "synthetic" and row["trials"] == "3"
        assert row["~algorithms.random_k"] == "deleted"
        assert row["n_trials"] == "3"
        assert float(row["cum_ndcg_mean"]) == pytest.approx(cum.mean())
        assert float(row["cum_ndcg_std"]) == pytest.approx(cum.std(ddof=1))
        assert row["cum_ndcg_n"] == "3"
        assert float(row["warm_ndcg_mean"]) == pytest.approx(cum.mean() / 100)
        assert float(row["cold_ndcg_std"]) == pytest.approx(cum.std(ddof=1) / 200)
        assert float(row["cum_ndcg_vali_mean"]) == pytest.approx(cum.mean() + 1)
        assert float(row["retrains_mean"]) == 2.0
    header = list(rows[0])
    assert "seed_mean" not in header and not any(h.startswith(("chosen", "eval_points", "timings", "train_last"))
                                                 for h in header)

    table = (multirun / "results.md").read_text()
    lines = [line for line in table.splitlines() if line.startswith("|")]
    assert lines[0] == ("| run | click_model | dataset | algorithm | cum_ndcg | warm_ndcg | cold_ndcg | "
                        "cum_ndcg_vali | n_trials |")
    assert lines[1] == "|" + "---|" * 9
    cum = np.array(CUM["trust_bias"]["ebrank"])
    assert lines[5].startswith(f"| 1 | trust_bias | synthetic | ebrank | {cum.mean():.2f} ± {cum.std(ddof=1):.2f} |")
    assert lines[5].endswith("| 3 |")
    assert "`trials=3`" in table and "`~algorithms.random_k`" in table  # the overrides every job shares


def test_offline_results_one_trial_nulls_and_several_folders(tmp_path):
    """The offline layout (estimators, ndcg@k/map per trial, no seed), runs without .hydra, nulls."""
    offline = [{"ndcg@10": 0.5, "map": 0.4, "epochs": 3, "learned_theta": [1.0, 0.5]},
               {"ndcg@10": 0.7, "map": None, "epochs": 5, "learned_theta": [1.0, 0.4]}]
    write_run(tmp_path / "a" / "offline_run", None, {"ips": offline, "naive": offline[:1]}, dataset="mq2008")
    write_run(tmp_path / "b" / "job", ["trials=1"], {"bm25": online_trials([12.0])})
    out = tmp_path / "merged"
    assert main([str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out)]) == 0
    rows = {r["algorithm"]: r for r in read_csv(out / "results.csv")}
    assert rows["ips"]["run"] == "a/offline_run" and rows["bm25"]["run"] == "b/job"
    assert rows["ips"]["dataset"] == "mq2008" and rows["ips"]["trials"] == ""
    assert float(rows["ips"]["ndcg@10_mean"]) == pytest.approx(0.6)
    assert float(rows["ips"]["ndcg@10_std"]) == pytest.approx(np.std([0.5, 0.7], ddof=1))
    assert rows["ips"]["map_mean"] == "nan" and rows["ips"]["map_n"] == "2"  # a null (non-finite) trial shows
    assert rows["naive"]["ndcg@10_std"] == "" and rows["naive"]["ndcg@10_n"] == "1"
    assert float(rows["ips"]["epochs_mean"]) == 4.0 and "learned_theta_mean" not in rows["ips"]
    assert rows["ips"]["cum_ndcg_mean"] == "" and rows["ips"]["cum_ndcg_n"] == "0"
    assert float(rows["bm25"]["cum_ndcg_mean"]) == 12.0 and rows["bm25"]["cum_ndcg_std"] == ""
    table = (out / "results.md").read_text()
    assert "| run | trials | dataset | algorithm | cum_ndcg | warm_ndcg | cold_ndcg | cum_ndcg_vali | ndcg@10 | map " \
           "| n_trials |" in table
    assert f"| a/offline_run |  | mq2008 | ips |  |  |  |  | 0.6000 ± {np.std([0.5, 0.7], ddof=1):.4f} | nan ± nan | 2 |" \
        in table
    assert "| b/job | 1 | synthetic | bm25 | 12.00 | 0.1200 | 0.0600 | 13.00 |  |  | 1 |" in table


def test_jobs_sort_numerically(tmp_path):
    for job in (0, 2, 10):
        write_run(tmp_path / str(job), [f"seed={job}"], {"bm25": online_trials([float(job + 1)])})
    assert main([str(tmp_path)]) == 0
    assert [r["run"] for r in read_csv(tmp_path / "results.csv")] == ["0", "2", "10"]


def test_malformed_results_are_reported_by_name_and_left_out(multirun, capsys):
    bad_json = multirun / "2" / "results.json"
    bad_json.parent.mkdir()
    bad_json.write_text('{"dataset": "synthetic", "algorithms": {"bm25": {"trials": [')
    no_trials = multirun / "3" / "results.json"
    no_trials.parent.mkdir()
    no_trials.write_text(json.dumps({"algorithms": {"bm25": {"cum_ndcg": 3.0}}}))

    assert main([str(multirun)]) == 0
    err = capsys.readouterr().err
    assert f"skipped {bad_json}: not valid JSON" in err
    assert f'skipped {no_trials}: algorithm \'bm25\' has no per-trial list "trials"' in err
    assert "Traceback" not in err
    assert {r["run"] for r in read_csv(multirun / "results.csv")} == {"0", "1"}
    assert str(bad_json) in (multirun / "results.md").read_text()

    (multirun / "results.csv").unlink()
    assert main([str(multirun), "--strict"]) == 2
    assert "nothing written" in capsys.readouterr().err
    assert not (multirun / "results.csv").exists()


def test_malformed_overrides_yaml_is_reported(multirun, capsys):
    (multirun / "1" / ".hydra" / "overrides.yaml").write_text("- a: [unclosed\n")
    assert main([str(multirun)]) == 0
    assert f"skipped {multirun / '1' / 'results.json'}: {multirun / '1' / '.hydra' / 'overrides.yaml'}: cannot be read" \
        in capsys.readouterr().err


def test_no_results_exit_2(tmp_path, capsys):
    (tmp_path / "empty" / "0").mkdir(parents=True)
    assert main([str(tmp_path / "empty")]) == 2
    assert "no results.json under" in capsys.readouterr().err
    assert main([str(tmp_path / "missing")]) == 2
    assert "not a folder" in capsys.readouterr().err


def test_every_results_json_unreadable_exit_2(tmp_path, capsys):
    (tmp_path / "0").mkdir()
    (tmp_path / "0" / "results.json").write_text("[]")  # read by ltrjax.record.load_results, as a rerun reads it
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "results.json").write_text("{}")
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"skipped {tmp_path / '0' / 'results.json'}: not a results file (a JSON object)" in err
    assert f"skipped {tmp_path / '1' / 'results.json'}: no \"algorithms\" object" in err
    assert "no results.json could be merged" in err


def test_refuses_to_overwrite_a_runs_own_results_md(tmp_path, capsys):
    write_run(tmp_path / "run", ["trials=1"], {"bm25": online_trials([1.0])})
    (tmp_path / "run" / "results.md").write_text("the run's own table")
    assert main([str(tmp_path / "run")]) == 2
    assert "pass --out" in capsys.readouterr().err
    assert (tmp_path / "run" / "results.md").read_text() == "the run's own table"


def test_cli_module(multirun):
    proc = subprocess.run([sys.executable, "-m", "ltrjax.collect", str(multirun / "missing")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "not a folder" in proc.stderr and "Traceback" not in proc.stderr


def test_real_joblib_multirun_then_collect(tmp_path):
    """``python -m ltrjax.run -m hydra/launcher=joblib ...`` (two jobs in parallel), then collect. The jobs sweep the
    seed of the suite's tiny run (``tests.tiny_run.TINY``): they build its programs, compiled once per suite."""
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    sweep = tmp_path / "multirun"
    proc = run_ltrjax("-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "seed=0,1", *TINY, "trials=1",
                      f"hydra.sweep.dir={sweep}", f"data.cache_dir={DATA_CACHE}", cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (sweep / "multirun.yaml").is_file()

    assert main([str(sweep)]) == 0
    rows = read_csv(sweep / "results.csv")
    assert sorted((r["run"], r["seed"], r["algorithm"]) for r in rows) == [
        ("0", "0", "ebrank"), ("0", "0", "random_k"), ("1", "1", "ebrank"), ("1", "1", "random_k")]
    for row in rows:
        job = json.loads((sweep / row["run"] / "results.json").read_text())
        assert float(row["cum_ndcg_mean"]) == pytest.approx(job["algorithms"][row["algorithm"]]["cum_ndcg"])
        assert row["n_trials"] == "1" and row["dataset"] == "synthetic"
    assert "| seed |" in (sweep / "results.md").read_text()
