"""Hydra entry point: ``python -m ltrjax.run [+dataset=NAME] [experiment=NAME] [key=value ...]``.

The configs are ``conf/`` of the source checkout, or the same files installed as the package data
``ltrjax/conf`` (``ltrjax.structured.conf_dir``), so the command works from any directory. A config that
the schemas refuse (``ltrjax.schema``), missing or malformed data, a run folder that cannot take the run
(``ltrjax.record``: empty, the source checkout, not writable, held by another run, a file where the run writes a
folder, or holding results made with other settings) exit with status 2 and one paragraph on stderr, also appended
to the folder's ``run.log``; so do a write the disk refuses (full, a file size limit: at the first failed write,
which leaves no temporary file and the finished rows as they were) and a composition error Hydra reports itself
(an unknown group option, or an override of a key that does not exist without ``+``). In a multirun (``-m``) a job
that fails records its paragraph in its folder (``.ltrjax.failed``) and the sweep's other jobs go on; the sweep
then names every failed job and exits 2. Hydra's ``.hydra/`` copy of the config (``hydra.output_subdir: null`` in ``conf/config.yaml``) is
written here, once the run is accepted, so a refused rerun leaves a finished run's record as it was.
"""

from __future__ import annotations

import errno
import gc
import logging
import os
import signal
import sys
import threading
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from ltrjax.constraints import ConfigError
from ltrjax.data.errors import DataFormatError, DatasetNotFoundError
from ltrjax.record import RunFolderError, WriteError, atomic_write
from ltrjax.structured import conf_dir

log = logging.getLogger("ltrjax")
_task_started = False  # set once Hydra has composed a config and called the task
USER_ERRORS = (ConfigError, DatasetNotFoundError, DataFormatError, RunFolderError)
# a write the disk or its limits refused, wherever it happened: one paragraph and status 2, not a traceback
DISK_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS)
FAILED = ".ltrjax.failed"  # a multirun job that failed writes its paragraph here; the sweep names them at its end
CHECKOUT = Path(__file__).resolve().parents[1]


def folder_error(folder: str) -> str | None:
    """Why ``folder`` cannot be a run folder (empty, the source checkout, or it cannot be created or written),
    else None."""
    if not str(folder).strip():
        return (f"the run folder is empty (hydra.run.dir='', what an unset shell variable gives), so the run would "
                f"write its results, models, .hydra/ and lock into the current folder {Path.cwd()}")
    folder = Path(folder)
    if folder.resolve() == CHECKOUT and (CHECKOUT / "pyproject.toml").is_file():
        return f"the run folder {folder} is the ltrjax source checkout; a run's files would mix with the code"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        return f"the run folder {folder} cannot be created ({err.strerror or err})"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"the run folder {folder} is not writable"
    return None


class RunFolderCheck(Callback):
    """Hydra callback (``hydra.callbacks.run_folder`` in ``conf/config.yaml``): refuses an unwritable run or sweep
    folder with one paragraph and status 2 before Hydra opens its log file there (which would end in a traceback)."""

    def _check(self, folder: str) -> None:
        why = folder_error(folder)
        if why:
            print(f"ltrjax: {why}; choose another with hydra.run.dir=FOLDER (hydra.sweep.dir=FOLDER with -m). "
                  f"Nothing was run.", file=sys.stderr)
            sys.exit(2)

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        self._check(str(config.hydra.run.dir))

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        self._check(str(config.hydra.sweep.dir))
        for stale in Path(str(config.hydra.sweep.dir)).rglob(FAILED):  # an earlier sweep's into the same folder
            stale.unlink(missing_ok=True)

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        """Name every job of the sweep that failed (each ran to its end or its own refusal; the others are kept) and
        exit 2 when there is one."""
        failed = sorted(Path(str(config.hydra.sweep.dir)).rglob(FAILED))
        if not failed:
            return
        jobs = "; ".join(f"{f.parent}: {f.read_text().strip().removeprefix('ltrjax: ')}" for f in failed)
        print(f"ltrjax: {len(failed)} job(s) of the sweep failed, the others finished and are kept: {jobs}",
              file=sys.stderr)
        sys.exit(2)


def write_hydra_copy(cfg: DictConfig, out_dir: Path) -> None:
    """What Hydra itself writes to ``OUT/.hydra/`` (config.yaml, hydra.yaml, overrides.yaml), atomically."""
    hydra_cfg = HydraConfig.get()
    folder = out_dir / ".hydra"
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write(folder / "config.yaml", OmegaConf.to_yaml(cfg))
    atomic_write(folder / "hydra.yaml", OmegaConf.to_yaml(OmegaConf.create({"hydra": hydra_cfg})))
    atomic_write(folder / "overrides.yaml", OmegaConf.to_yaml(hydra_cfg.overrides.task))


def to_run_log(message: str) -> None:
    """Append ``message`` to the run's log file(s) (Hydra's ``run.log`` handler), not to the console again; a log
    that cannot be written (a full disk) is skipped without logging's own traceback."""
    record = log.makeRecord(log.name, logging.ERROR, __file__, 0, message, None, None)
    raise_exceptions, logging.raiseExceptions = logging.raiseExceptions, False
    try:
        for handler in logging.getLogger().handlers + log.handlers:
            if isinstance(handler, logging.FileHandler):
                handler.handle(record)
    finally:
        logging.raiseExceptions = raise_exceptions


def disk_error(err: OSError, out_dir: Path) -> WriteError | None:
    """An ``OSError`` of a write the disk refused (full, a file size limit, read-only) as a ``WriteError`` naming
    the file (or the run folder), else None."""
    if err.errno not in DISK_ERRNOS:
        return None
    where = err.filename or f"a file of the run folder {out_dir}"
    return WriteError(f"cannot write {where}: {err.strerror or err}; what the run had finished before is kept in "
                      f"{out_dir}: make room and rerun the same command into the same folder to resume.")


def refuse(message: str, out_dir: Path, multirun: bool) -> None:
    """Say ``message`` (one paragraph) on stderr and in the run's log; exit 2, or in a multirun record it in the
    job's folder (``FAILED``) and return, so that the sweep's other jobs go on (``on_multirun_end`` names it)."""
    print(message, file=sys.stderr)
    to_run_log(message)
    if not multirun:
        sys.exit(2)
    try:
        (out_dir / FAILED).write_text(message + "\n")
    except OSError:
        print(f"ltrjax: could not record the failure in {out_dir / FAILED}", file=sys.stderr)


def _send_interrupt_again() -> None:
    threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT)).start()


def on_interrupt(signum, frame) -> None:
    """Ctrl-C (SIGINT) as ``KeyboardInterrupt``, except inside a garbage-collector callback (JAX registers one,
    ``_xla_gc_callback``): Python swallows an exception raised there ("Exception ignored in ...") and the run would
    go on to the end with status 0. There the interrupt is sent again 50 ms later, so a Ctrl-C is never lost."""
    callbacks = {getattr(cb, "__code__", None) for cb in gc.callbacks}
    while frame is not None:
        if frame.f_code in callbacks:
            _send_interrupt_again()
            return
        frame = frame.f_back
    raise KeyboardInterrupt


@hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    """Run the configured experiment; returns its objective (for Hydra sweepers)."""
    global _task_started
    _task_started = True
    from ltrjax.clicks import ClickModelDataMismatch  # a click model the data cannot host (TianGong on < 5 grades)
    from ltrjax.experiment import run_experiment

    hydra_cfg = HydraConfig.get()
    out_dir = Path(hydra_cfg.runtime.output_dir)
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    if multirun:
        (out_dir / FAILED).unlink(missing_ok=True)  # a job's failure is recorded anew on every run
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, on_interrupt)
    try:
        return run_experiment(cfg, out_dir, overrides=list(hydra_cfg.overrides.task), cwd=Path(hydra_cfg.runtime.cwd),
                              on_accepted=lambda: write_hydra_copy(cfg, out_dir))
    except (*USER_ERRORS, ClickModelDataMismatch) as err:
        refuse(f"ltrjax: {err}", out_dir, multirun)
    except OSError as err:
        user_error = disk_error(err, out_dir)
        if user_error is None and not multirun:
            raise
        refuse(f"ltrjax: {user_error or err}", out_dir, multirun)
    except KeyboardInterrupt:
        interrupted(out_dir)
    except SystemError as err:
        if not raised_by_interrupt(err):
            raise
        interrupted(out_dir)
    except Exception as err:  # a bug, not the user's: a single run shows the traceback; a sweep's other jobs go on
        if not multirun:
            raise
        logging.getLogger("ltrjax").exception("the job failed")
        refuse(f"ltrjax: the job failed with {type(err).__name__}: {err} (a bug: the traceback is in its run.log)",
               out_dir, multirun)


def raised_by_interrupt(err: BaseException) -> bool:
    """Whether ``err`` was raised because of a ``KeyboardInterrupt`` (in its cause or context chain): Ctrl-C while C
    code runs a Python callback (NumPy asking a JAX scalar type for its dtype) surfaces as ``SystemError: ...
    returned a result with an exception set``, the interrupt as its context."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, KeyboardInterrupt):
            return True
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return False


def interrupted(out_dir: Path) -> None:
    """Say where the finished trials are and how to resume; exit 130."""
    line = (f"ltrjax: interrupted; the finished trials are kept in {out_dir}: rerun the same command with "
            f"hydra.run.dir={out_dir} to resume")
    print(f"\n{line}", file=sys.stderr)
    to_run_log(line)
    sys.exit(130)


def cli() -> None:
    """``main`` with Hydra's own composition errors (reported before the task starts) exiting 2, not 1."""
    try:
        main()
    except BrokenPipeError:  # `... --help | head`: the reader left; no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    except SystemExit as exit_:
        multirun = any(a in ("-m", "--multirun") for a in sys.argv[1:])  # jobs may run in other processes
        if exit_.code == 1 and not _task_started and not multirun:
            print("ltrjax: the configuration could not be composed (see above); status 2", file=sys.stderr)
            sys.exit(2)
        raise


if __name__ == "__main__":
    cli()
