"""A run folder as a record: the one reader/writer of ``results.json``, the settings that made it, the check
that refuses a rerun with other settings, and the lock that keeps one writer per folder.

Every ``results.json`` carries a ``record`` block (``run_record``): the experiment kind, the package version and,
when the package runs from a git checkout, its commit. Online runs store per row the fully resolved settings that
made it (``ltrjax.runner``); offline and fidelity runs store their whole resolved experiment (``config``). A rerun
into the folder resumes only what was made with identical settings; anything else is refused before any work
(``RunFolderError``: one paragraph naming each differing key, old -> new, and suggesting another folder).
"""

from __future__ import annotations

import functools
import json
import math
import os
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np

RESULTS = "results.json"
LOCK = ".ltrjax.lock"          # the filelock file of a run folder
LOCK_PID = ".ltrjax.lock.pid"  # the pid of the run holding it, written beside it


class RunFolderError(ValueError):
    """A run folder that cannot take this run (other settings, another experiment kind, another writer, not
    writable); ``str(e)`` is one paragraph. A user error: ``python -m ltrjax.run`` exits with status 2."""


# --------------------------------------------------------------------------- provenance
@functools.lru_cache(maxsize=1)
def git_commit() -> str | None:
    """The commit of the checkout ``ltrjax`` is imported from (``+dirty`` with uncommitted changes), else None."""
    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "") if head else None


def run_record(kind: str) -> dict:
    """The ``record`` block of a results.json: experiment kind, package version, git commit (or None)."""
    from ltrjax import __version__

    return {"kind": kind, "version": __version__, "commit": git_commit()}


# --------------------------------------------------------------------------- reading and writing
def jsonable(value: Any) -> Any:
    """``value`` as plain JSON: NumPy/JAX arrays and scalars converted, non-finite floats as null."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "__array__") and not isinstance(value, (str, bytes)):
        arr = np.asarray(value)
        return jsonable(arr.tolist() if arr.ndim else arr.item())
    if isinstance(value, (np.floating, float)):
        return None if not math.isfinite(float(value)) else float(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


class WriteError(RunFolderError):
    """A run's file that could not be written (a full disk, a file size limit, a path that is not a folder);
    ``str(e)`` is one paragraph naming the file. The file is left as it was (no temporary file): exit status 2."""


@contextmanager
def writing(path: Path, tmp: Path | None = None) -> Iterator[None]:
    """Around the code that writes ``path`` (through ``tmp``, renamed to ``path`` at the end): an ``OSError``
    removes ``tmp`` and becomes a ``WriteError`` naming ``path``, so a failed write leaves no temporary file and
    the previous ``path`` (a finished run's rows) intact."""
    try:
        yield
    except OSError as err:
        if tmp is not None:
            try:
                Path(tmp).unlink(missing_ok=True)
            except OSError:
                pass
        raise WriteError(f"cannot write {path}: {err.strerror or err} (a full disk, a file size limit or a file "
                         f"where a folder should be); what the run had finished before is kept, unchanged: make "
                         f"room and rerun the same command into the same folder to resume.") from None


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename: readers see the old or the new file; a
    failed write raises ``WriteError`` and leaves the old file and no temporary one."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with writing(path, tmp):
        tmp.write_text(text)
        os.replace(tmp, path)


def check_output_folders(out_dir: Path, names: Iterable[str]) -> None:
    """``RunFolderError`` when a folder this run writes into (``OUT_DIR/NAME`` for each of ``names``: ``models``,
    ``arrays``, ``click_logs``, ...) exists as something else, a file: checked before any work, where the run would
    otherwise fail at its first save, after a whole population."""
    for name in names:
        path = Path(out_dir) / name
        if (path.exists() or path.is_symlink()) and not path.is_dir():
            raise RunFolderError(f"{path} is a file, but this run writes into a folder of that name; move the file "
                                 f"away, or run into another folder (hydra.run.dir=NEW_FOLDER). Nothing was run.")


class NotResultsFile(ValueError):
    """A results.json that is not valid JSON or not a JSON object; the message says which."""


def load_results(path: Path) -> dict:
    """The JSON object in the results file ``path``: the one reader of results.json (runs resuming, ``collect``).
    Raises ``NotResultsFile`` for a file that is not a results file, ``OSError`` for one that cannot be read."""
    try:
        data = json.loads(Path(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise NotResultsFile(f"not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise NotResultsFile("not a results file (a JSON object)")
    return data


def read_results(out_dir: Path) -> dict | None:
    """``OUT_DIR/results.json`` as a dict, or None when there is none; ``RunFolderError`` when it is not a JSON
    object."""
    path = Path(out_dir) / RESULTS
    if not path.exists():
        return None
    try:
        return load_results(path)
    except NotResultsFile as err:
        raise RunFolderError(f"{path} is {err}; move it away to start afresh, or run into another folder "
                             f"(hydra.run.dir=...)") from None


def write_results(out_dir: Path, data: dict) -> Path:
    """Write ``data`` (made ``jsonable``) as ``OUT_DIR/results.json``, atomically."""
    path = Path(out_dir) / RESULTS
    atomic_write(path, json.dumps(jsonable(data), indent=1))
    return path


def results_kind(results: dict) -> str:
    """The experiment kind that wrote a results.json: its ``record.kind``; for files written before the record
    existed, the offline/fidelity ``config.kind`` or ``online`` for a file with a ``sim`` block."""
    record = results.get("record")
    if isinstance(record, dict) and record.get("kind"):
        return str(record["kind"])
    config = results.get("config")
    if isinstance(config, dict) and config.get("kind"):
        return str(config["kind"])
    if "claims" in results:
        return "offline_fidelity"
    return "online" if "sim" in results else "unknown"


ONLINE_KINDS = ("online", "online_table", "ucbrank_table")


# --------------------------------------------------------------------------- comparing settings
# sim keys (``ltrjax.online.simulator.SimConfig``) that change only what is evaluated along the way, not the
# simulated sessions: results that differ only in them are the same protocol (a resumed run, compare_runs.py)
REPORTING_KEYS = ("history_splits",)
# sim keys that change only how the same sessions are computed (the scanned slots and the schedule, where a
# retrain filters its documents; results are bit for bit the same, tests/test_padding.py,
# tests/test_retrain_documents.py): recorded in the header, ignored by resume and compare_runs.py
PERFORMANCE_KEYS = ("segment_widths", "width_classes", "retrain_examples", "trial_setup")
NON_PROTOCOL_KEYS = REPORTING_KEYS + PERFORMANCE_KEYS
# algorithm keys that change only which host threads run the same fits (bit for bit the same fits,
# tests/test_train.py; the default is the machine's core count): recorded in a row, ignored by resume
ALGORITHM_PERFORMANCE_KEYS = ("fit.threads",)
ROW_IGNORED = (tuple(f"sim.{k}" for k in NON_PROTOCOL_KEYS)  # the same keys in a row's recorded settings
               + tuple(f"algorithm.{k}" for k in ALGORITHM_PERFORMANCE_KEYS))


def protocol_of(sim: dict | None) -> dict | None:
    """A results header's ``sim`` block without its ``REPORTING_KEYS`` and ``PERFORMANCE_KEYS``."""
    return None if sim is None else {k: v for k, v in sim.items() if k not in NON_PROTOCOL_KEYS}


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """A nested mapping as {dotted key: leaf}; lists are leaves."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, sub in value.items():
            out.update(flatten(sub, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


MISSING = "<absent>"


def differences(old: dict, new: dict, ignore: tuple[str, ...] = ()) -> list[tuple[str, Any, Any]]:
    """[(dotted key, old value, new value)] where the two settings differ (compared as JSON), sorted by key;
    keys equal to or under an ``ignore`` entry are left out."""
    a, b = flatten(jsonable(old)), flatten(jsonable(new))

    def ignored(key: str) -> bool:
        return any(key == i or key.startswith(i + ".") for i in ignore)

    return [(k, a.get(k, MISSING), b.get(k, MISSING)) for k in sorted(set(a) | set(b))
            if not ignored(k) and a.get(k, MISSING) != b.get(k, MISSING)]


def _shown(value: Any) -> str:
    return value if isinstance(value, str) and value.startswith("<") and value.endswith(">") else json.dumps(value)


def refusal(path: Path, what: str, diffs: list[tuple], limit: int = 8) -> RunFolderError:
    """The one-paragraph refusal of a rerun into ``path``'s folder: ``what`` was made with other settings.
    ``diffs``: (key, old, new) or (key, old, new, row); a difference shared by several rows is named once, with
    its rows; changed values come before keys only one side has."""
    grouped: dict[tuple, list[str]] = {}
    for diff in diffs:
        key, old, new = diff[:3]
        rows = grouped.setdefault((key, json.dumps(old), json.dumps(new)), [])
        if len(diff) > 3:
            rows.append(str(diff[3]))
    all_rows = {str(d[3]) for d in diffs if len(d) > 3}
    order = sorted(grouped, key=lambda g: (MISSING in (json.loads(g[1]), json.loads(g[2])), g[0]))
    shown = []
    for key, old, new in order[:limit]:
        rows = grouped[(key, old, new)]
        where = f" (row{'s' if len(rows) > 1 else ''} {', '.join(rows)})" if rows and len(all_rows) > 1 \
            and set(rows) != all_rows else ""
        shown.append(f"{key}: {_shown(json.loads(old))} → {_shown(json.loads(new))}{where}")
    more = f"; and {len(order) - limit} more" if len(order) > limit else ""
    return RunFolderError(f"{path} holds {what} made with other settings ({'; '.join(shown)}{more}); this run would "
                          f"mix them. Nothing was run or written. Run into another folder (hydra.run.dir=NEW_FOLDER), "
                          f"or move {Path(path).parent} away to start afresh.")


def check_kind(out_dir: Path, results: dict | None, kind: str) -> None:
    """Refuse a folder whose results.json an experiment of another family (online / offline / fidelity) wrote."""
    if results is None:
        return
    old = results_kind(results)
    family = {k: "online" for k in ONLINE_KINDS}
    if family.get(old, old) != family.get(kind, kind):
        raise RunFolderError(f"{Path(out_dir) / RESULTS} was written by an experiment={old} run; this is an "
                             f"experiment={kind} run, whose results cannot be added to it. Nothing was run or "
                             f"written. Run into another folder (hydra.run.dir=NEW_FOLDER).")


def check_experiment(out_dir: Path, kind: str, settings: dict, ignore: tuple[str, ...] = (),
                     dataset: str | None = None) -> dict | None:
    """The check of an experiment that records its whole resolved settings (``config``: offline, fidelity):
    returns the old results.json (None when there is none), or raises ``RunFolderError`` when it was written by
    another kind of experiment, for another dataset (``dataset``: its name, when known) or with other settings
    (``ignore``: keys that may differ, such as ``trials``)."""
    old = read_results(out_dir)
    if old is None:
        return None
    check_kind(out_dir, old, kind)
    path = Path(out_dir) / RESULTS
    diffs = differences({"experiment": old.get("config") or {}}, {"experiment": settings},
                        tuple(f"experiment.{key}" for key in ignore))
    if dataset is not None and old.get("dataset") not in (None, dataset):
        diffs.insert(0, ("dataset", old.get("dataset"), dataset))
    if diffs:
        raise refusal(path, "the results of an experiment", diffs)
    return old


def check_rows(out_dir: Path, kind: str, rows: dict[str, dict], ignore: tuple[str, ...] = ()) -> dict | None:
    """The check of an online run: ``rows`` = {algorithm config key: settings} of this run. Returns the old
    results.json (None when there is none), or raises ``RunFolderError`` when another kind of experiment wrote it
    or when a finished row of the same key was made with other settings (rows without ``settings``, written
    before the record existed, are compared by their header only, in ``ResultsWriter.resume``)."""
    old = read_results(out_dir)
    if old is None:
        return None
    check_kind(out_dir, old, kind)
    diffs = []
    for name, entry in (old.get("algorithms") or {}).items():
        saved = entry.get("settings") if isinstance(entry, dict) else None
        if not isinstance(saved, dict) or saved.get("key") not in rows:
            continue
        diffs += [(k, o, n, name) for k, o, n in differences(saved, rows[saved["key"]], ignore + ROW_IGNORED)]
    if diffs:
        raise refusal(Path(out_dir) / RESULTS, "finished rows", diffs)
    return old


# --------------------------------------------------------------------------- one writer per folder
@contextmanager
def hold_run_folder(out_dir: Path) -> Iterator[Path]:
    """Hold ``OUT_DIR/.ltrjax.lock`` (``filelock``) while the body runs, with this process's pid beside it
    (``.ltrjax.lock.pid``); a folder another run holds raises ``RunFolderError`` naming the folder and its pid,
    a folder that cannot be created or written one naming the folder. The lock is the operating system's (``flock``),
    so a run that dies releases it."""
    from filelock import FileLock, Timeout

    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(out_dir / LOCK), timeout=0)
        lock.acquire()
    except Timeout:
        try:
            holder = (out_dir / LOCK_PID).read_text().strip() or "unknown"
        except OSError:
            holder = "unknown"
        raise RunFolderError(f"another run (pid {holder}) is writing into {out_dir}; two runs in one folder would "
                             f"drop each other's rows. Wait for it to finish, or run into another folder "
                             f"(hydra.run.dir=NEW_FOLDER).") from None
    except OSError as err:
        raise RunFolderError(f"the run folder {out_dir} is not writable ({err.strerror or err}); choose another "
                             f"with hydra.run.dir=FOLDER.") from None
    try:
        (out_dir / LOCK_PID).write_text(f"{os.getpid()}\n")
        yield out_dir
    finally:
        try:
            (out_dir / LOCK_PID).unlink()
        except OSError:
            pass
        lock.release()


def experiment_record(kind: str, dataset) -> dict:
    """The ``record`` block of an offline or fidelity results.json: ``run_record`` and the typed run's resolved
    ``dataset`` block (None when the run names none)."""
    return {**run_record(kind), "dataset": jsonable(dataset)}
