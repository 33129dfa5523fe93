"""A run folder is a record (issue 21): reruns with other settings are refused before any work and leave the
finished run's files byte-identical; an identical rerun resumes; one writer per folder; honest errors; reports
that say what they are. Each case is a real ``python -m ltrjax.run`` at a small size."""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ltrjax import record
from tests.tiny_run import DATA_CACHE, REPO, TINY, run_ltrjax

OFFLINE = ("experiment=offline", "+dataset=synthetic", "dataset.n_queries=60", "experiment.trials=1",
           "experiment.n_sessions=3000", "experiment.estimators=[production]", "experiment.train.max_epochs=2",
           "experiment.train.patience=1", "experiment.logging_chunk=4096", "experiment.eval_buckets=1")


def cli(out: Path, *overrides, popen=False):
    """``python -m ltrjax.run`` into the run folder ``out``, with the suite's persistent XLA cache."""
    return run_ltrjax(*overrides, f"hydra.run.dir={out}", f"data.cache_dir={DATA_CACHE}", popen=popen)


def fingerprint(folder: Path) -> dict[str, str]:
    """sha256 of every file of a run folder but its log and lock (a refused run appends its message to run.log)."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name not in ("run.log", record.LOCK, record.LOCK_PID)}


def assert_refused(proc, *named: str) -> str:
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr + proc.stdout
    message = [line for line in proc.stderr.splitlines() if line.startswith("ltrjax: ")]
    assert len(message) == 1, proc.stderr
    for text in named:
        assert text in message[0], (text, message[0])
    return message[0]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished online run (random_k and ebrank, one trial, top-K 4: ``tests.tiny_run.TINY``) and the fingerprint
    of its files."""
    out = tmp_path_factory.mktemp("record") / "run"
    proc = cli(out, *TINY, "trials=1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, fingerprint(out)


# --------------------------------------------------------------------------- what a folder records
def test_results_record_each_rows_settings(finished):
    out, files = finished
    results = json.loads((out / "results.json").read_text())
    assert results["record"]["kind"] == "online" and results["record"]["version"]
    assert {".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml", "resolved_config.yaml"} <= set(files)
    assert "sim.top_k=4" in (out / ".hydra" / "overrides.yaml").read_text()
    ebrank = results["algorithms"]["ebrank"]["settings"]
    assert ebrank["key"] == "ebrank" and ebrank["algorithm"]["_target_"].endswith("EBRank")
    assert ebrank["algorithm"]["beta"] == 5.0 and "fit" in ebrank["algorithm"]
    assert ebrank["sim"]["top_k"] == 4 and ebrank["seed"] == 0 and ebrank["dataset"]["n_queries"] == 40
    assert ebrank["click_model"]["kind"] == "pbm" and ebrank["experiment"]["kind"] == "online"
    assert results["algorithms"]["ebrank"]["trials"][0]["made_by"]["version"] == results["record"]["version"]


def test_results_record_peak_memory_and_feature_bytes(finished):
    """Issue 22's memory line reads these: the process's peak resident memory and the float32 feature bytes."""
    out, _ = finished
    results = json.loads((out / "results.json").read_text())
    peak, features = results["peak_rss_bytes"], results["feature_bytes"]
    assert isinstance(peak, int) and peak > 50 * 2 ** 20  # a Python process with JAX loaded
    assert isinstance(features, int) and features > 0 and features % 4 == 0
    assert results["peak_rss_over_feature_bytes"] == pytest.approx(peak / features)
    assert "peak resident memory" in (out / "results.md").read_text()


def test_memory_record_counts_every_documents_float32_features():
    from ltrjax.measure import memory_record, peak_rss_bytes
    from ltrjax.data.toy import toy_queryset

    queryset = toy_queryset(n_queries=12, n_features=7)
    rec = memory_record(queryset)
    assert rec["feature_bytes"] == queryset.n_docs * 7 * 4
    assert 0 < rec["peak_rss_bytes"] <= peak_rss_bytes()  # the peak only grows
    assert rec["peak_rss_over_feature_bytes"] == pytest.approx(rec["peak_rss_bytes"] / rec["feature_bytes"])
    assert memory_record(None)["feature_bytes"] is None


def test_memory_record_without_the_resource_module(monkeypatch):
    """Windows has no ``resource``: the peak and the ratio are None, the feature bytes still counted."""
    from ltrjax.measure import memory_record, peak_rss_bytes
    from ltrjax.data.toy import toy_queryset

    monkeypatch.setitem(sys.modules, "resource", None)  # ``import resource`` raises ImportError
    assert peak_rss_bytes() is None
    rec = memory_record(toy_queryset(n_queries=12, n_features=7))
    assert rec["peak_rss_bytes"] is None and rec["peak_rss_over_feature_bytes"] is None and rec["feature_bytes"] > 0


def test_reports_say_what_they_are(finished):
    out, _ = finished
    text = (out / "results.md").read_text()
    assert "Cum-NDCG@4" in text and "Warm-NDCG@4" in text and "@5" not in text
    assert "±" not in text and "1 trials" not in text and "1 trial" in text
    assert "random_k                 1 trial x 1 grid value = 1 member in" in (out / "run.log").read_text()
    head = text.split("| algorithm |")[0]
    for words in ("**Dataset**: synthetic", "**Click model**: `click_model=ebrank_pbm` (pbm, examination log2", "**Protocol**: 200 sessions", "top-K 4",
                  "**Seed** 0", "commit "):
        assert words in head, words


# --------------------------------------------------------------------------- refused reruns ("Why" 1, 2, 3)
# Each case is a whole command (a Python process). By default: an algorithm option, a run that fails validation, and
# another experiment kind. Under -m slow, the other recorded keys; by default test_results_record_each_rows_settings
# checks that the record holds them (_target_, seed, click model, sim) and test_differences_and_refusal_name_every_key
# that a difference in any recorded key refuses.
@pytest.mark.parametrize("overrides, named", [
    (("algorithms.ebrank.beta=50",), ("algorithm.beta: 5.0 → 50.0",)),
    pytest.param(("algorithms.random_k._target_=ltrjax.online.policies.bm25.BM25",),
                 ('algorithm._target_: "ltrjax.online.policies.random_k.RandomK" → '
                  '"ltrjax.online.policies.bm25.BM25"',), marks=pytest.mark.slow),
    pytest.param(("seed=3",), ("seed: 0 → 3",), marks=pytest.mark.slow),
    pytest.param(("click_model=cascade",), ('click_model.kind: "pbm" → "cascade"',), marks=pytest.mark.slow),
    pytest.param(("sim.top_k=5",), ("sim.top_k: 4 → 5",), marks=pytest.mark.slow),
    (("trials=0",), ("trials",)),  # fails validation: nothing of the finished run is rewritten either
    (("experiment.kind=online_table",), ("experiment.kind: \"online\" → \"online_table\"",)),
])
def test_refused_rerun_leaves_the_record_byte_identical(finished, overrides, named):
    out, files = finished
    proc = cli(out, *TINY, "trials=1", *overrides)
    message = assert_refused(proc, *named)
    assert fingerprint(out) == files
    assert message in (out / "run.log").read_text()  # the message goes to the run's log too
    if "trials=0" not in overrides:
        assert str(out / "results.json") in message and "hydra.run.dir=" in message


@pytest.fixture(scope="module")
def finished_offline(tmp_path_factory):
    """A finished offline run (``OFFLINE``); each test works on its own copy (``offline_copy``)."""
    out = tmp_path_factory.mktemp("record_offline") / "offline"
    proc = cli(out, *OFFLINE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def offline_copy(finished_offline: Path, tmp_path: Path) -> Path:
    """A copy of the finished offline run folder, as a rerun finds it (its lock released)."""
    out = tmp_path / "offline"
    shutil.copytree(finished_offline, out)
    assert not (out / record.LOCK_PID).exists()
    return out


def test_online_run_into_an_offline_folder_is_refused_before_any_simulation(finished_offline, tmp_path):
    out = offline_copy(finished_offline, tmp_path)
    files = fingerprint(out)
    proc = cli(out, *TINY, "trials=1")
    assert_refused(proc, "experiment=offline", "experiment=online", str(out / "results.json"))
    assert "trial 0" not in proc.stdout + proc.stderr and "sessions per trial" not in proc.stdout + proc.stderr
    assert fingerprint(out) == files
    # and the other way round: an offline run into an online folder
    online = tmp_path / "online"
    shutil.copytree(out, online)
    (online / "results.json").write_text(json.dumps({"record": {"kind": "online"}, "sim": {}, "algorithms": {}}))
    assert_refused(cli(online, *OFFLINE), "experiment=online", "experiment=offline")


def test_offline_rerun_with_other_settings_is_refused(finished_offline, tmp_path):
    out = offline_copy(finished_offline, tmp_path)
    files = fingerprint(out)
    # one refused key (each is a whole command); any recorded key refuses: test_differences_and_refusal_name_every_key
    assert_refused(cli(out, *OFFLINE, "experiment.n_sessions=4000"), "experiment.n_sessions: 3000 → 4000")
    assert fingerprint(out) == files
    more = cli(out, *OFFLINE, "experiment.trials=2")  # more trials of the same experiment: resumed
    assert more.returncode == 0, more.stderr[-3000:]
    assert "trial 0 (seed 0): finished" in more.stdout


def test_fidelity_rerun_with_other_settings_is_refused_before_loading_data(tmp_path):
    from omegaconf import OmegaConf

    from ltrjax.offline.config import as_mapping
    from ltrjax.offline_runner import fidelity_config

    out = tmp_path / "fidelity"
    out.mkdir()
    settings = as_mapping(fidelity_config(OmegaConf.create(
        {"experiment": OmegaConf.load(REPO / "conf/experiment/offline_fidelity.yaml")})))
    old = {"record": {"kind": "offline_fidelity"}, "dataset": "synthetic", "claims": [],
           "config": {**settings, "margin": 7, "trials": 99}}  # trials may differ: a rerun recomputes all
    (out / "results.json").write_text(json.dumps(old))
    before = fingerprint(out)
    proc = cli(out, "experiment=offline_fidelity", "+dataset=synthetic")
    assert_refused(proc, f"experiment.margin: 7 → {settings['margin']}")
    assert "experiment.trials" not in proc.stderr
    assert fingerprint(out) == before
    assert_refused(cli(out, *TINY, "trials=1"), "experiment=offline_fidelity", "experiment=online")


# --------------------------------------------------------------------------- resume
def test_identical_rerun_resumes_and_equals_an_uninterrupted_run(finished, tmp_path):
    out, _ = finished
    resumed = tmp_path / "resumed"
    shutil.copytree(out, resumed)
    rows = (*TINY, "~algorithms.ebrank")  # TINY has population.max_members=1: 2 trials, 2 chunks
    proc = cli(resumed, *rows, "trials=2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resuming, 2 finished trials found" in proc.stderr + proc.stdout
    assert "random_k                 trial 0" not in proc.stderr + proc.stdout  # not simulated again
    fresh = tmp_path / "fresh"
    uninterrupted = cli(fresh, *rows, "trials=2")
    assert uninterrupted.returncode == 0, uninterrupted.stderr[-3000:]
    log = (fresh / "run.log").read_text()  # a population announces itself, and after its first chunk an ETA
    assert "random_k: 2 members in 2 chunks of 1; about " in log and " per chunk (budget " in log
    assert "random_k: first chunk of 1 members in " in log and "left for the other 1 members" in log
    a = json.loads((resumed / "results.json").read_text())["algorithms"]["random_k"]["trials"]
    b = json.loads((fresh / "results.json").read_text())["algorithms"]["random_k"]["trials"]
    old = json.loads((out / "results.json").read_text())["algorithms"]["random_k"]["trials"]
    assert a[0] == old[0]  # the finished trial's record, untouched
    for key in ("seed", "cum_ndcg", "warm_ndcg", "cold_ndcg", "cum_ndcg_vali", "test_session_ndcg_curve"):
        assert [t[key] for t in a] == [t[key] for t in b], key


# --------------------------------------------------------------------------- one writer per folder
def test_two_runs_into_one_folder_one_is_refused_naming_the_pid(tmp_path):
    out = tmp_path / "run"
    first = cli(out, *TINY, "trials=1", "~algorithms.ebrank", popen=True)
    try:
        deadline = time.monotonic() + 120
        while not (out / record.LOCK_PID).exists():
            assert first.poll() is None, first.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the first run never took the lock"
            time.sleep(0.05)
        # paused while the second run starts, so that it cannot finish first (a tiny run takes about as long as a
        # Python start-up); a stopped process still holds its lock
        os.kill(first.pid, signal.SIGSTOP)
        try:
            second = cli(out, *TINY, "trials=1", "~algorithms.ebrank")
        finally:
            os.kill(first.pid, signal.SIGCONT)
        assert_refused(second, f"pid {first.pid}", str(out))
        _, err = first.communicate(timeout=600)
        assert first.returncode == 0, err[-3000:]
    finally:
        if first.poll() is None:
            first.kill()
    assert set(json.loads((out / "results.json").read_text())["algorithms"]) == {"random_k"}
    assert not (out / record.LOCK_PID).exists()  # released: a later run may write again


def test_ctrl_c_says_how_to_resume(tmp_path):
    out = tmp_path / "run"
    proc = cli(out, *TINY, "trials=1", popen=True)
    try:
        deadline = time.monotonic() + 120
        while not (out / record.LOCK_PID).exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the run never took the lock"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err
    assert f"interrupted; the finished trials are kept in {out}: rerun the same command with hydra.run.dir={out} " \
           "to resume" in err
    assert "interrupted" in (out / "run.log").read_text()


def test_lock_is_released_and_taken_in_process(tmp_path):
    with record.hold_run_folder(tmp_path):
        assert (tmp_path / record.LOCK_PID).read_text().strip() == str(os.getpid())
        with pytest.raises(record.RunFolderError, match=f"pid {os.getpid()}"):
            with record.hold_run_folder(tmp_path):
                pass
    with record.hold_run_folder(tmp_path):  # released
        pass


# --------------------------------------------------------------------------- honest errors
def test_unwritable_run_folder_says_so(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    proc = cli(blocker / "run", *TINY, "trials=1")
    assert_refused(proc, str(blocker / "run"), "cannot be created")
    assert "could not be composed" not in proc.stderr


def test_population_that_cannot_fit_is_refused_before_any_simulation(tmp_path):
    proc = cli(tmp_path / "run", *TINY, "trials=1", "population.memory_gb=0.00001")
    assert_refused(proc, "population.memory_gb", "one member of random_k needs about")
    assert "trial 0" not in proc.stdout + proc.stderr
    assert not (tmp_path / "run" / "results.json").exists()


def test_help_starts_with_what_ltrjax_is():
    proc = subprocess.run([sys.executable, "-m", "ltrjax.run", "--help"], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert proc.returncode == 0
    first = proc.stdout.splitlines()[:10]
    assert first[0].startswith("ltrjax: a JAX-accelerated simulator for learning to rank")
    assert any("+dataset=NAME" in line for line in first) and any("experiment=NAME" in line for line in first)
    assert any("hydra.run.dir=FOLDER" in line for line in first)


# --------------------------------------------------------------------------- the generic machinery
def test_differences_and_refusal_name_every_key():
    old = {"algorithm": {"_target_": "a.B", "beta": 5.0}, "seed": 0, "sim": {"top_k": 5}}
    new = {"algorithm": {"_target_": "a.C", "beta": 5.0, "extra": 1}, "seed": 0, "sim": {"top_k": 5}}
    diffs = record.differences(old, new)
    assert diffs == [("algorithm._target_", "a.B", "a.C"), ("algorithm.extra", record.MISSING, 1)]
    assert record.differences(old, old) == []
    assert record.differences({"trials": 1, "a": 1}, {"trials": 2, "a": 1}, ignore=("trials",)) == []
    err = record.refusal(Path("/x/results.json"), "finished rows", [(*d, "ebrank") for d in diffs])
    assert 'algorithm._target_: "a.B" → "a.C"' in str(err) and "algorithm.extra: <absent> → 1" in str(err)
    assert "hydra.run.dir=NEW_FOLDER" in str(err) and "\n" not in str(err)


def test_rows_without_recorded_settings_are_not_resumed(tmp_path):
    """A results.json written before rows recorded their settings cannot prove they match: refused."""
    from ltrjax.report.online_report import METRICS
    from ltrjax.report.results import ResultsWriter

    old = {"dataset": "toy", "algorithms": {"ebrank": {"trials": [{"seed": 0, "cum_ndcg": 1.0}]}}}
    (tmp_path / "results.json").write_text(json.dumps(old))
    with pytest.raises(record.RunFolderError, match="settings: <not recorded>"):
        ResultsWriter(tmp_path, {"dataset": "toy"}, METRICS, {"ebrank": {"seed": 0}}).resume()
    assert ResultsWriter(tmp_path, {"dataset": "toy"}, METRICS, {"random_k": {"seed": 0}}).resume() == 1


def test_segment_widths_is_performance_only(tmp_path):
    """``sim.segment_widths`` changes how the same sessions are computed, not them (tests/test_padding.py): a folder
    written in one width mode resumes in another, also when its rows recorded the key (written before it was a
    performance key); it stays in the header. Another sim key of a row is still refused."""
    from ltrjax.report.online_report import METRICS
    from ltrjax.report.results import ResultsWriter

    assert "segment_widths" in record.PERFORMANCE_KEYS
    assert record.protocol_of({"top_k": 5, "segment_widths": "classes"}) == {"top_k": 5}
    sim = {"top_k": 5, "entry_prob": 1.0}
    row = {"key": "ebrank", "seed": 0, "sim": {**sim, "segment_widths": "phase"}}
    old = {"dataset": "toy", "sim": {**sim, "segment_widths": "phase"},
           "algorithms": {"ebrank": {"settings": row, "trials": [{"seed": 0, "cum_ndcg": 1.0}]}}}
    (tmp_path / "results.json").write_text(json.dumps(old))
    mine = {"key": "ebrank", "seed": 0, "sim": sim}  # ltrjax.runner.row_settings leaves it out now
    header = {"dataset": "toy", "sim": {**sim, "segment_widths": "classes"}}
    writer = ResultsWriter(tmp_path, header, METRICS, {"ebrank": mine})
    assert writer.resume() == 1 and writer.as_dict()["sim"]["segment_widths"] == "classes"
    assert record.check_rows(tmp_path, "online", {"ebrank": {**row, "sim": {**sim, "segment_widths": "ladder"}}})
    with pytest.raises(record.RunFolderError, match="sim.entry_prob"):
        ResultsWriter(tmp_path, header, METRICS, {"ebrank": {**mine, "sim": {**sim, "entry_prob": 0.5}}}).resume()


def test_ctrl_c_inside_a_gc_callback_is_sent_again_not_lost(monkeypatch):
    """Python swallows an exception raised in a garbage-collector callback (JAX registers one), so Ctrl-C there
    would be lost and the run would finish with status 0 (seen once in the suite under load): the handler sends
    it again instead of raising where it cannot propagate, and raises everywhere else."""
    import gc
    import signal
    import sys

    from ltrjax import run as run_module

    resent = []
    monkeypatch.setattr(run_module, "_send_interrupt_again", lambda: resent.append(True))
    seen = []

    def callback(phase, info):
        if phase == "start" and not seen:
            seen.append(True)
            run_module.on_interrupt(signal.SIGINT, sys._getframe())  # as if SIGINT arrived inside the callback

    gc.callbacks.append(callback)
    try:
        gc.collect()
    finally:
        gc.callbacks.remove(callback)
    assert seen and resent == [True]
    with pytest.raises(KeyboardInterrupt):
        run_module.on_interrupt(signal.SIGINT, sys._getframe())


def test_ctrl_c_surfacing_as_a_system_error_is_an_interrupt():
    """Ctrl-C while C code runs a Python callback (NumPy asking a JAX scalar type for its dtype, seen once in
    ``test_ctrl_c_says_how_to_resume``) reaches the run as ``SystemError: ... returned a result with an exception
    set`` with the ``KeyboardInterrupt`` as its context: the run then exits 130 as for any Ctrl-C
    (``raised_by_interrupt``); a SystemError of its own is not an interrupt."""
    from ltrjax.run import raised_by_interrupt

    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise SystemError("<function __numpy_dtype__> returned a result with an exception set")
    except SystemError as err:
        assert raised_by_interrupt(err)
    assert not raised_by_interrupt(SystemError("a bug of its own"))
    try:
        try:
            raise ValueError("not an interrupt")
        except ValueError as inner:
            raise SystemError("wrapped") from inner
    except SystemError as err:
        assert not raised_by_interrupt(err)


def test_fit_threads_is_performance_only(tmp_path):
    """``fit.threads`` changes which host threads fit the members, not the fits (tests/test_train.py): a row recorded
    before the key existed, or with another thread count (another machine), resumes; another fit key is refused."""
    from ltrjax.report.online_report import METRICS
    from ltrjax.report.results import ResultsWriter

    fit = {"member_batch": 1, "patience": 0}
    row = {"key": "ebrank", "seed": 0, "algorithm": {"epsilon": 1.0, "fit": fit}}
    old = {"dataset": "toy", "sim": {"top_k": 5},
           "algorithms": {"ebrank": {"settings": row, "trials": [{"seed": 0, "cum_ndcg": 1.0}]}}}
    (tmp_path / "results.json").write_text(json.dumps(old))
    for threads in (2, 16):
        mine = {**row, "algorithm": {"epsilon": 1.0, "fit": {**fit, "threads": threads}}}
        assert ResultsWriter(tmp_path, {"dataset": "toy", "sim": {"top_k": 5}}, METRICS, {"ebrank": mine}).resume() == 1
        assert record.check_rows(tmp_path, "online", {"ebrank": mine})
    other = {**row, "algorithm": {"epsilon": 1.0, "fit": {**fit, "threads": 2, "patience": 5}}}
    with pytest.raises(record.RunFolderError, match="algorithm.fit.patience"):
        record.check_rows(tmp_path, "online", {"ebrank": other})
