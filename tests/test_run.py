"""The entry point end to end: ``python -m ltrjax.run ...`` in a subprocess, as a user runs it."""

import json
from pathlib import Path

import pytest

from tests.tiny_run import TINY, run_ltrjax

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run_cli(tmp_path, *overrides, timeout=600, cpu_only=True):
    """Run the entry point with its outputs and data caches under ``tmp_path``; compiled programs go to the suite's
    persistent XLA cache (``tests.tiny_run.run_ltrjax``, ``cpu_only`` as there)."""
    return run_ltrjax(*overrides, f"hydra.run.dir={tmp_path / 'out'}", f"data.cache_dir={tmp_path / 'cache'}",
                      timeout=timeout, cpu_only=cpu_only)


# --------------------------------------------------------------------------- a tiny full run
@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tiny_run")
    proc = run_cli(tmp, *TINY, "trials=2")
    return proc, tmp / "out"


def test_tiny_run_writes_results(tiny_run):
    proc, out = tiny_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    results = json.loads((out / "results.json").read_text())
    assert results["dataset"] == "synthetic"
    assert results["sessions"] == 200
    algorithms = results["algorithms"]
    assert {"random_k", "ebrank"} <= set(algorithms)  # whatever else conf/experiment/online.yaml adds later
    for name, entry in algorithms.items():
        assert name == name.lower()
        assert len(entry["trials"]) == 2
        for metric in ("cum_ndcg", "warm_ndcg", "cold_ndcg"):
            trials = [t[metric] for t in entry["trials"]]
            assert all(isinstance(v, float) for v in trials), (name, metric, trials)
            assert entry[metric] == pytest.approx(sum(trials) / 2, rel=1e-9)
        assert all(0 <= t["warm_ndcg"] <= 1 and 0 <= t["cold_ndcg"] <= 1 for t in entry["trials"])
        # Cum-NDCG is a discounted sum of at most 1/(1 - 0.995) = 200 per-session NDCGs
        assert all(0 < t["cum_ndcg"] < 200 for t in entry["trials"])
        assert [t["seed"] for t in entry["trials"]] == [0, 1]
    # the median gradient passes over the training examples per retrain (issue 22); null without a fitted retrain
    # (this tiny run's EBRank retrains are skipped: too few documents pass min_impressions)
    for t in algorithms["ebrank"]["trials"]:
        assert t["fit_passes_per_retrain"] is None if t["retrains"] == 0 else t["fit_passes_per_retrain"] >= 1
    assert all(t["fit_passes_per_retrain"] is None for t in algorithms["random_k"]["trials"])
    # trials share their random draws across algorithms, but differ from each other
    assert algorithms["random_k"]["trials"][0]["cum_ndcg"] != algorithms["random_k"]["trials"][1]["cum_ndcg"]

    table = (out / "results.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    assert rows[0].startswith("| algorithm |")
    assert [r.split("|")[1].strip() for r in rows[1:]] == list(algorithms)
    ebrank_row = rows[1 + list(algorithms).index("ebrank")]
    assert f"{algorithms['ebrank']['cum_ndcg']:.2f}" in ebrank_row

    png = (out / "ndcg_over_time.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 1000
    assert png[12:16] == b"IHDR"


# --------------------------------------------------------------------------- missing data
def test_missing_dataset_exits_2_with_one_paragraph(tmp_path):
    # as a user runs it: without JAX_PLATFORMS, so JAX probes its backends (the run quiets "Unable to initialize
    # backend 'tpu'" before it resolves the configuration)
    proc = run_cli(tmp_path, "+dataset=mslr30k", "dataset.path=/nonexistent/mslr", cpu_only=False)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ltrjax:"), proc.stderr
    assert "Unable to initialize backend" not in proc.stdout + proc.stderr
    message = lines[0]
    assert "/nonexistent/mslr" in message
    assert "https://www.microsoft.com/en-us/research/project/mslr/" in message
    assert "dataset.path" in message and "LTRJAX_MSLR30K" in message
    assert not (tmp_path / "out" / "results.json").exists()


# --------------------------------------------------------------------------- malformed data
GOOD = "".join(f"{i % 3} qid:{1 + i // 6} 1:{i / 10:.1f} 2:0.5 3:{(i * 7) % 5}\n" for i in range(36))
GOOD_LINES = GOOD.count("\n")

# (file holding the bad line, bad line, extra overrides, what the message says)
MALFORMED = {
    "bad_value": ("vali.txt", "1 qid:9 1:0.3 3:abc\n", [], "abc"),
    "missing_qid": ("train.txt", "1 1:0.3 2:0.1\n", [], "qid:"),
    "bad_label": ("test.txt", "x qid:9 1:0.3\n", [], "label"),
    "feature_index_out_of_range": ("train.txt", "0 qid:9 1:0.3 7:1\n", ["dataset.n_features=3"], "1..3"),
    "empty_file": ("vali.txt", None, [], "at least one line"),
}


def write_letor_folder(root: Path, bad_file, bad_line):
    root.mkdir()
    for name in ("train.txt", "vali.txt", "test.txt"):
        text = GOOD
        if name == bad_file:
            text = "" if bad_line is None else GOOD + bad_line + GOOD
        (root / name).write_text(text)


@pytest.mark.parametrize("case", [
    "bad_value",
    *(pytest.param(c, marks=pytest.mark.slow) for c in MALFORMED if c != "bad_value"),
])
def test_malformed_letor_exits_2_naming_file_and_line(tmp_path, case):
    bad_file, bad_line, overrides, says = MALFORMED[case]
    folder = tmp_path / "letor"
    write_letor_folder(folder, bad_file, bad_line)
    proc = run_cli(tmp_path, "+dataset=letor", f"dataset.path={folder}", *overrides)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("ltrjax:")]
    assert len(lines) == 1, proc.stderr
    line_number = 1 if bad_line is None else GOOD_LINES + 1
    assert f"{folder / bad_file}:{line_number}:" in lines[0]
    assert says in lines[0]
