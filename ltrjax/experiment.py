"""Dispatch a Hydra config to its experiment, after checking it and loading the dataset it names."""

from __future__ import annotations

import importlib
import logging
from pathlib import Path

from omegaconf import DictConfig

from ltrjax.schema import JaxConfig, ResolvedRun, resolve, write_resolved_config

log = logging.getLogger("ltrjax")


def configure_process(matmul_precision: str | None = None) -> None:
    """The process-wide settings of every entry point, the compilation cache aside: float32 matrix products at
    ``matmul_precision`` (default: the ``jax`` block's, ``ltrjax.precision``) and Python's garbage collector run
    less often while programs are traced (``ltrjax.gc_tuning``). The benchmarks and the tests call it directly."""
    from ltrjax.gc_tuning import relax_garbage_collection
    from ltrjax.precision import set_matmul_precision

    set_matmul_precision(matmul_precision or JaxConfig().matmul_precision)
    relax_garbage_collection()


def configure_jax(run: ResolvedRun | None = None) -> None:
    """The ``jax`` block: ``configure_process`` at ``jax.matmul_precision``, and compiled XLA programs persisted
    between runs (``jax.compilation_cache``) under the data cache's ``xla`` folder (``ltrjax.compile_cache``, the
    one switch every script uses). Without a run (the experiment scripts): the block's defaults, and the cache
    folder this process already uses, if any (``ensure_compilation_cache``)."""
    from ltrjax.compile_cache import default_cache_dir, enable_compilation_cache, ensure_compilation_cache

    configure_process(None if run is None else run.jax.matmul_precision)
    if run is None:
        ensure_compilation_cache()
        return
    if run.jax.compilation_cache:
        enable_compilation_cache(default_cache_dir(run.data.cache_dir or None))


def output_folders(run: ResolvedRun) -> list[str]:
    """The folders ``run`` writes into inside its run folder (``record.check_output_folders`` refuses a file there)."""
    from ltrjax.offline.config import OfflineConfig
    from ltrjax.record import ONLINE_KINDS

    names = [".hydra"]
    exp = run.experiment
    if run.kind in ONLINE_KINDS:
        names += ["arrays", "models"] + (["click_logs"] if run.save_click_logs else [])
        names += ["eta_sweep"] if getattr(exp, "eta_sweep", None) is not None else []
    elif isinstance(exp, OfflineConfig):
        names += (["models"] if exp.save_models else []) + (["click_logs"] if exp.save_click_logs else [])
    return names


def check_run_folder(run: ResolvedRun, out_dir: Path) -> None:
    """Refuse (``RunFolderError``) a run folder whose results.json another kind of experiment wrote, or whose
    finished rows (online) or experiment (offline, fidelity) were made with other settings; before any data is
    loaded. ``experiment.resume=false`` (online) starts the rows afresh, so only the kind is checked."""
    from ltrjax.offline.config import as_mapping
    from ltrjax import record

    record.check_output_folders(out_dir, output_folders(run))
    kind = run.kind
    if kind in record.ONLINE_KINDS:
        from ltrjax.runner import row_settings

        if not run.experiment.resume:
            record.check_kind(out_dir, record.read_results(out_dir), kind)
            return
        record.check_rows(out_dir, kind, {key: row_settings(run, key) for key in run.algorithms})
    elif kind == "offline_fidelity":
        from ltrjax.offline_runner import FIDELITY_RESUME_IGNORES

        record.check_experiment(out_dir, kind, record.jsonable(as_mapping(run.experiment)), FIDELITY_RESUME_IGNORES)
    else:
        from ltrjax.offline_runner import RESUME_IGNORES

        old = record.check_experiment(out_dir, kind, record.jsonable(as_mapping(run.experiment)), RESUME_IGNORES)
        saved = ((old or {}).get("record") or {}).get("dataset")
        if saved is not None:
            diffs = record.differences({"dataset": saved}, {"dataset": run.dataset})
            if diffs:
                raise record.refusal(out_dir / record.RESULTS, "the results of an experiment", diffs)


def run_experiment(cfg: DictConfig, out_dir: Path, overrides=(), cwd: Path | None = None, on_accepted=None):
    """Check ``cfg`` (``ltrjax.schema.validate``: a ``ConfigError`` before any data is loaded), hold the run
    folder (``ltrjax.record.hold_run_folder``: one writer per folder), check its finished results
    (``check_run_folder``), record the resolved config in ``out_dir/resolved_config.yaml`` (and call
    ``on_accepted()``: the entry point's ``.hydra/`` copy) only once the run is accepted, load the dataset and run
    the experiment; returns its objective. ``overrides`` are the command line's (``validate`` refuses groups the
    experiment does not read); relative data paths are taken from ``cwd`` (default: the working directory)."""
    from ltrjax.data.registry import load_dataset
    from ltrjax.record import ONLINE_KINDS, hold_run_folder

    # no "Unable to initialize backend 'tpu'" line in every run's log: resolving the run probes the backends
    logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)
    run = resolve(cfg, overrides, cwd=cwd or Path.cwd())
    out_dir = Path(out_dir)
    # the run's modules (matplotlib's C extensions among them) are imported before the folder is held: a Ctrl-C that
    # lands inside an extension's initialisation aborts the interpreter, and once the folder is held an interrupt
    # must end in the resume message (tests/test_run_record.py::test_ctrl_c_says_how_to_resume)
    importlib.import_module("ltrjax.runner" if run.kind in ONLINE_KINDS else "ltrjax.offline_runner")
    with hold_run_folder(out_dir):
        check_run_folder(run, out_dir)

        def accepted(final_run=run) -> None:
            write_resolved_config(final_run, out_dir)
            if on_accepted is not None:
                on_accepted()

        configure_jax(run)
        kind = run.kind
        if kind in ("online", "online_table"):
            from ltrjax.online.simulator import release_free_heap
            from ltrjax.runner import padded_data, run_online

            queryset = load_dataset(run.dataset, seed=run.seed, cache_dir=run.data.cache_dir or None)
            # the run reads the buckets' per-document features only: the layout takes the flat matrix and frees it
            features = [queryset.features]
            queryset = queryset.without_features()
            release_free_heap()  # what loading freed
            data = padded_data(run, queryset, features)
            release_free_heap()
            return run_online(run, out_dir, queryset, on_accepted=accepted, data=data)
        accepted()
        if kind == "offline_fidelity":  # Vectorization / PRS fidelity (docs/fidelity.md)
            from ltrjax.offline_runner import run_fidelity

            return run_fidelity(run, out_dir)
        from ltrjax.offline_runner import run_offline

        return run_offline(run, out_dir)
