"""Committed results are records, not a notebook (issue 43).

* ``docs/committed-runs.md`` and each measure's table over commits equal what ``docs/make_committed_runs.py``
  writes from the folders' records;
* every committed run folder has the command that regenerates it (``command.txt``, its own or its enclosing
  folder's) and a record (``results.md`` or a JSON record);
* no tracked file is over 1 MB (outside a short allow-list of test data), the tracked tree is at most 20 MB, and
  the arrays, saved models and logs a run writes are ignored by git.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_FILE_BYTES = 1_000_000
MAX_TREE_BYTES = 20_000_000
LARGE_TEST_DATA: tuple[str, ...] = ()  # tracked files allowed over 1 MB (test data only); none today


def _generator(monkeypatch=None, docs: Path | None = None):
    spec = importlib.util.spec_from_file_location("make_committed_runs", ROOT / "docs" / "make_committed_runs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if docs is not None:
        monkeypatch.setattr(module, "DOCS", docs)
        monkeypatch.setattr(module, "RESULTS", docs / "results")
        monkeypatch.setattr(module, "PAGE", docs / "committed-runs.md")
    return module


def _tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [ROOT / name for name in out.decode().split("\0") if name and (ROOT / name).is_file()]


def test_committed_runs_page_and_tables_are_generated_from_the_records():
    gen = _generator()
    stale = [str(p.relative_to(ROOT)) for p, text in gen.expected_files().items() if p.read_text() != text]
    assert not stale, f"{stale} differ from the folders' records: run python docs/make_committed_runs.py"
    assert gen.main(["--check"]) == 0


def test_the_check_fails_on_a_folder_the_page_does_not_list(tmp_path, monkeypatch, capsys):
    run = tmp_path / "results" / "some_run"
    run.mkdir(parents=True)
    (run / "results.md").write_text("# A run\n")
    (run / "command.txt").write_text("python -m ltrjax.run\n")
    gen = _generator(monkeypatch, tmp_path)
    assert gen.main([]) == 0 and gen.main(["--check"]) == 0
    assert "`some_run/`" in (tmp_path / "committed-runs.md").read_text()
    (tmp_path / "results" / "later_run").mkdir()
    assert gen.main(["--check"]) == 0  # an empty folder is nothing a clone has
    (tmp_path / "results" / "later_run" / "results.md").write_text("# A later run\n")
    assert gen.main(["--check"]) == 1
    assert "committed-runs.md differs" in capsys.readouterr().out


def test_a_measure_table_is_one_row_per_commit_record(tmp_path, monkeypatch):
    measure = tmp_path / "results" / "sweep_vs_x"
    src = ROOT / "docs" / "results" / "sweep_vs_93b7d10"
    for commit in ("0297e01", "2d055d0"):
        shutil.copytree(src / commit, measure / commit)
    gen = _generator(monkeypatch, tmp_path)
    (measure / "results.md").write_text(f"# Sweep\n\n{gen.TABLE_BEGIN}\n{gen.TABLE_END}\n")
    gen.main([])
    table = (measure / "results.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| [")]
    assert [r.split("]")[0] for r in rows] == ["| [0297e01", "| [2d055d0"]  # in the order they ran
    assert "**0.320** (0.384, 0.255)" in rows[0]  # 0297e01's record: wall ratio, cold and warm repeats


def test_every_committed_run_folder_has_its_command_and_a_record():
    gen = _generator()
    folders = gen.run_folders()
    assert len(folders) > 20
    no_command = [f.relative_to(gen.RESULTS).as_posix() for f in folders if gen.command_of(f) is None]
    assert not no_command, f"run folders without a command.txt (their own or an enclosing folder's): {no_command}"
    top = [f for f in folders if f.parent == gen.RESULTS]
    assert all((f / "command.txt").is_file() for f in top)
    no_record = [f.name for f in top if not ((f / "results.md").is_file() or any(f.glob("*.json")))]
    assert not no_record, f"run folders without results.md or a JSON record: {no_record}"


def test_no_tracked_file_over_1_mb_and_the_tree_under_20_mb():
    files = _tracked()
    assert len(files) > 100
    large = [str(p.relative_to(ROOT)) for p in files
             if p.stat().st_size > MAX_FILE_BYTES and str(p.relative_to(ROOT)) not in LARGE_TEST_DATA]
    assert not large, f"tracked files over 1 MB (arrays and models are regenerated, not tracked): {large}"
    total = sum(p.stat().st_size for p in files)
    assert total <= MAX_TREE_BYTES, f"the tracked tree is {total / 1e6:.1f} MB"


@pytest.mark.parametrize("path", ["docs/results/some_run/arrays/bm25/trial0.npz",
                                  "docs/results/some_run/models/bm25/trial0.msgpack",
                                  "docs/results/some_run/run.log", "docs/results/a/b/trial0.npz"])
def test_run_outputs_under_docs_results_are_ignored(path):
    assert subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT).returncode == 0, path


def test_records_under_docs_results_are_not_ignored():
    for path in ("docs/results/some_run/results.json", "docs/results/some_run/command.txt",
                 "docs/results/some_run/ndcg_over_time.png"):
        assert subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT).returncode == 1, path


def test_a_measure_folder_with_a_record_of_its_own_keeps_it(tmp_path, monkeypatch):
    """A run folder that later measurements joined (``gpu_h100/a34da24/``): its table is generated, its own
    results.json is left as it is."""
    folder = tmp_path / "results" / "gpu_x"
    (folder / "a34da24").mkdir(parents=True)
    (folder / "a34da24" / "results.md").write_text("# Later run\n")
    (folder / "results.json").write_text('{"the": "first run"}')
    gen = _generator(monkeypatch, tmp_path)
    (folder / "results.md").write_text(f"# First run\n\n{gen.TABLE_BEGIN}\n{gen.TABLE_END}\n")
    (folder / "command.txt").write_text("python x.py\n")
    assert gen.main([]) == 0
    assert (folder / "results.json").read_text() == '{"the": "first run"}'
    assert "| [a34da24](a34da24/results.md) | Later run |" in (folder / "results.md").read_text()
