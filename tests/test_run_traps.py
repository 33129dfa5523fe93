"""No run-folder trap (issue 43): each case, reproduced at a small size, exits 2 with one paragraph naming the path,
before any work (or, for a full disk, at the first failed write), leaves no temporary file and no partial cache
entry, and never loses a finished row; a joblib sweep names each failed job and keeps the others."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from ltrjax import record
from ltrjax.constraints import ConfigError
from tests.tiny_run import DATA_CACHE, REPO, TINY, ltrjax_run, run_ltrjax, suite_cache_env


def refused(proc, *named: str) -> str:
    """The one ``ltrjax: `` paragraph of a run that exited 2 without a traceback; it names each of ``named``."""
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("ltrjax: ")]
    assert len(lines) == 1, proc.stderr
    for text in named:
        assert text in lines[0], (text, lines[0])
    return lines[0]


def leftovers(folder: Path) -> list[str]:
    return [str(p) for p in folder.rglob("*") if p.name.endswith(".tmp") or ".tmp." in p.name]


def test_an_empty_run_folder_is_refused_before_anything_is_written(tmp_path):
    """``hydra.run.dir=''`` (an unset shell variable) would write the run into the current folder."""
    proc = run_ltrjax(*TINY, "trials=1", "hydra.run.dir=", f"data.cache_dir={DATA_CACHE}", cwd=tmp_path)
    refused(proc, "hydra.run.dir=''", str(tmp_path))
    assert list(tmp_path.iterdir()) == []  # no results, models, .hydra/, lock or log in the current folder


def test_the_source_checkout_is_refused_as_a_run_folder(tmp_path):
    """Checked in this process (a run that got past the check would write into the checkout)."""
    from ltrjax.run import folder_error

    assert "source checkout" in folder_error(str(REPO)) and str(REPO) in folder_error(str(REPO))
    assert "is empty" in folder_error("") and "is empty" in folder_error("  ")
    assert folder_error(str(tmp_path / "run")) is None


@pytest.mark.parametrize("name, extra", [("models", ()), ("click_logs", ("save_click_logs=true",))])
def test_a_file_where_the_run_writes_a_folder_is_refused_before_any_work(tmp_path, name, extra):
    out = tmp_path / "run"
    out.mkdir()
    (out / name).write_text("not a folder")
    proc = run_ltrjax(*TINY, "trials=1", *extra, f"hydra.run.dir={out}", f"data.cache_dir={DATA_CACHE}")
    refused(proc, str(out / name), "is a file")
    assert not (out / "results.json").exists() and not (out / "resolved_config.yaml").exists()  # nothing ran
    assert (out / name).read_text() == "not a folder"


def test_more_updates_than_sessions_is_refused_at_the_door(tmp_path):
    """``sim.n_updates=301`` with 300 sessions ended in an IndexError in ``schedule_inputs`` after the warm-up."""
    out = tmp_path / "run"
    overrides = [o for o in TINY if not o.startswith(("sim.sessions=", "sim.n_updates="))]
    proc = run_ltrjax(*overrides, "sim.sessions=300", "sim.n_updates=301", "trials=1", f"hydra.run.dir={out}",
                      f"data.cache_dir={DATA_CACHE}")
    refused(proc, "sim.n_updates = 301", "300 sessions")
    assert not (out / "results.json").exists()


def test_check_segments_refuses_empty_segments_only():
    from ltrjax.online.simulator import SimConfig
    from ltrjax.schema import check_segments

    check_segments(SimConfig(n_updates=300), 300)  # one session per segment
    with pytest.raises(ConfigError, match=r"sim.n_updates = 301: expected at most the main phase's 300 sessions"):
        check_segments(SimConfig(n_updates=301), 300)
    with pytest.raises(ConfigError, match=r"sim.refreshes = 400.*200 sessions \(counted\)"):
        check_segments(SimConfig(n_updates=20, refreshes=400), 200, " (counted)")


def test_score_refuses_to_write_over_its_inputs(tmp_path, capsys):
    from ltrjax import score

    model, letor = tmp_path / "trial0.msgpack", tmp_path / "test.txt"
    model.write_bytes(b"a saved model")
    letor.write_text("0 qid:1 1:0.5\n")
    for argv, named in (([str(model), str(letor), "--out", str(model)], "is the model"),
                        ([str(model), str(letor), "--out", str(letor)], "is the LETOR file"),
                        ([str(model), str(letor), "--out", str(tmp_path / "r.txt"), "--qrels", str(tmp_path / "r.txt")],
                         "the same file")):
        assert score.main(argv) == 2
        err = capsys.readouterr().err
        assert named in err and err.count("\n") == 1 and "Traceback" not in err
    assert model.read_bytes() == b"a saved model" and letor.read_text() == "0 qid:1 1:0.5\n"
    assert not (tmp_path / "r.txt").exists() and not leftovers(tmp_path)


def test_a_failed_atomic_write_keeps_the_old_file_and_leaves_no_temporary_one(tmp_path, monkeypatch):
    path = tmp_path / "results.json"
    path.write_text('{"finished": "rows"}')
    real = Path.write_text

    def half_then_full(self, text, *args, **kwargs):
        real(self, text[: len(text) // 2], *args, **kwargs)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", half_then_full)
    with pytest.raises(record.WriteError, match=f"cannot write {path}: No space left on device"):
        record.atomic_write(path, '{"finished": "rows", "and": "one more"}')
    monkeypatch.undo()
    assert path.read_text() == '{"finished": "rows"}' and not leftovers(tmp_path)


def _limit_file_size(limit: int):
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))


def test_a_failed_cache_write_leaves_no_partial_entry(tmp_path):
    """JAX's cache writes entries in place; under a file size limit the entry is removed, not left truncated."""
    code = ("import sys; from ltrjax.compile_cache import enable_compilation_cache; "
            "from jax._src.lru_cache import LRUCache; enable_compilation_cache(sys.argv[1]); "
            "c = LRUCache(sys.argv[1], max_size=-1); c.put('small', b'x' * 1000); c.put('big', b'y' * 200_000)")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=suite_cache_env(), capture_output=True,
                          text=True, timeout=120, preexec_fn=_limit_file_size(64 * 1024))
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small-cache"]  # no truncated "big-cache"
    assert "could not write" in proc.stderr and "big-cache" in proc.stderr


def test_a_full_disk_exits_2_at_the_first_failed_write_and_keeps_the_finished_rows(tmp_path):
    """A file size limit of 48 KiB (``ulimit -f 48``): the run's rows fit, its figure does not. The run uses a cache
    of its own (the suite's must not meet the limit), then runs again without the limit: it resumes the kept rows
    and JAX reads no truncated cache entry."""
    out, cache = tmp_path / "run", tmp_path / "cache"
    args = [*TINY, "trials=1", f"hydra.run.dir={out}", f"data.cache_dir={cache}"]
    env = {k: v for k, v in suite_cache_env().items() if not k.startswith("JAX_PERSISTENT_CACHE")}
    env.pop("JAX_COMPILATION_CACHE_DIR")
    cmd = [a for a in ltrjax_run(*args) if a != "jax.compilation_cache=false"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
                          preexec_fn=_limit_file_size(48 * 1024))
    refused(proc, f"cannot write {out}", "File too large", "is kept", "rerun the same command")
    assert not leftovers(out) and not leftovers(cache)
    rows = json.loads((out / "results.json").read_text())["algorithms"]
    assert sorted(rows) == ["ebrank", "random_k"] and all(len(r["trials"]) == 1 for r in rows.values())

    again = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resuming, 2 finished trials" in again.stdout + again.stderr
    assert "persistent compilation cache" not in again.stderr  # no truncated entry to warn about
    assert json.loads((out / "results.json").read_text())["algorithms"] == rows


def test_a_joblib_sweep_names_the_failed_job_and_keeps_the_others(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    sweep = tmp_path / "multirun"
    tiny = [o for o in TINY if not o.startswith("sim.top_k=")]
    proc = run_ltrjax("-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "sim.top_k=4,0", *tiny, "trials=1",
                      f"hydra.sweep.dir={sweep}", f"data.cache_dir={DATA_CACHE}", cwd=tmp_path, timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    summary = [line for line in proc.stderr.splitlines() if "job(s) of the sweep failed" in line]
    assert len(summary) == 1 and f"{sweep / '1'}: invalid configuration: sim.top_k = 0" in summary[0]
    rows = json.loads((sweep / "0" / "results.json").read_text())["algorithms"]  # the valid sibling finished
    assert sorted(rows) == ["ebrank", "random_k"]
    assert not (sweep / "1" / "results.json").exists()
    assert not (sweep / "0" / ".ltrjax.failed").exists() and (sweep / "1" / ".ltrjax.failed").is_file()
