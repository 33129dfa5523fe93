"""The runner of the offline experiments (``experiment=offline``, ``offline_fidelity``), beside ``ltrjax.runner``
(the online one).

It takes the typed run (``ltrjax.schema.resolve``'s; the Python API, scripts and tests convert what they have with
``ltrjax.schema.offline_run``), loads the dataset, runs the trials of the protocol
(``ltrjax.offline.experiment``: ``prepare_trial`` then ``run_setting``; ``ltrjax.offline.fidelity_experiment``:
the parts and claims), resumes a run folder, and writes results.json (``ltrjax.record``) and results.md
(``ltrjax.report.offline_tables``, ``ltrjax.report.fidelity_report``).

``run_offline(cfg, out_dir, queryset=None)`` runs ``trials`` trials (seeds ``seed + t``) and rewrites
``results.json`` after every trial (a rerun into the same folder skips the finished ones), then ``results.md``.
``run_fidelity(cfg, out_dir, queryset=None)`` runs every part of ``experiment.parts``.
"""

from __future__ import annotations

import pathlib
import time
from collections.abc import Mapping

from ltrjax.offline import fidelity as F
from ltrjax.offline import fidelity_experiment as FE
from ltrjax.offline.config import FidelityConfig, OfflineConfig, as_mapping, from_mapping
from ltrjax.offline.estimators import ORACLE_ESTIMATORS
from ltrjax.offline.experiment import METRICS, TrialData, click_relevance, prepare_trial, run_setting
from ltrjax.offline import click_likelihood, per_query
from ltrjax.offline.logging import chunk_size
from ltrjax.record import check_experiment, experiment_record, git_commit, jsonable, read_results, write_results
from ltrjax.report import fidelity_report
from ltrjax.report.offline_tables import (markdown_header, markdown_table, markdown_vs_baseline, protocol_line,
                                          significance, summarize, vs_baseline)
from ltrjax.saved import feature_spec, model_path, save_model
from ltrjax.schema import ResolvedRun
# the door's conversions (ltrjax.schema.offline_run) under the names scripts and tests import them by
from ltrjax.schema import fidelity_experiment_config as fidelity_config  # noqa: F401
from ltrjax.schema import offline_dataset as run_dataset  # noqa: F401
from ltrjax.schema import offline_experiment_config as experiment_config  # noqa: F401


# --------------------------------------------------------------------------- the typed run and its data
def offline_experiment(run: ResolvedRun, schema: type):
    """``run.experiment``, checked to be a ``schema`` (``run_offline`` and ``run_fidelity`` take the typed run only:
    ``ltrjax.schema.resolve`` or, for Python callers, ``ltrjax.schema.offline_run``)."""
    if not (isinstance(run, ResolvedRun) and isinstance(run.experiment, schema)):
        raise TypeError(f"expected a typed run (ltrjax.schema.ResolvedRun) with a {schema.__name__} experiment, got "
                        f"{type(run).__name__}: convert it with ltrjax.schema.offline_run")
    return run.experiment


def load_queryset(dataset, cache_dir: str | None = None, *, seed: int):
    """The dataset of registry mapping ``dataset`` (a typed run's ``dataset`` block: ``ltrjax.schema.resolve`` fills
    in the synthetic default) with every query kept (``min_docs: 0``); ``cache_dir``: ``data.cache_dir``."""
    from ltrjax.data.registry import load_dataset

    if dataset is None:
        raise ValueError("no dataset: pass a queryset, or a run config with a dataset block (python -m ltrjax.run "
                         "+dataset=NAME; ltrjax.schema.resolve fills in the synthetic default)")
    return load_dataset({**dataset, "min_docs": 0}, seed=int(seed), cache_dir=cache_dir or None)


# --------------------------------------------------------------------------- experiment=offline
GROUP_METRICS = ("dcg@1", "dcg@3", "dcg@5", "dcg@10", "mrr@10", "ndcg@10")  # per frequency bucket (Hager et al.)
RESUME_IGNORES = ("trials", "progress", "resume", "save_click_logs", "save_models")


def finished_trials(out_dir: pathlib.Path, exp: OfflineConfig, qs) -> tuple[list[dict], list[dict]]:
    """(per-trial results, trial infos) already in ``out_dir/results.json`` for this configuration.

    A file written for another dataset or configuration (other than the trial count) is refused
    (``ltrjax.record.RunFolderError``).
    """
    old = check_experiment(out_dir, exp.kind, as_mapping(exp), RESUME_IGNORES, getattr(qs, "name", "?"))
    if old is None:
        return [], []
    infos = list(old.get("trials_info") or [])
    trials = [{name: entry["trials"][t] for name, entry in old["algorithms"].items() if t < len(entry["trials"])}
              for t in range(len(infos))]
    return trials, infos


def _run_trial(trial: TrialData, exp: OfflineConfig, qs, out_dir: pathlib.Path, t: int, click_data) -> dict:
    """``run_setting`` of one trial of ``run_offline``: from a click log's ``click_data`` (``stream_training_data``,
    read once for every trial) if given, with its models saved under ``out_dir/models/`` and its logged sessions
    under ``out_dir/click_logs/`` when asked."""
    on_chunk, writer = None, None
    if click_data is None and exp.save_click_logs:
        from ltrjax.clicklog import ClickLogWriter
        from ltrjax.offline.click_data import logged_sessions

        writer = ClickLogWriter(out_dir / "click_logs" / f"trial{t}.parquet",
                                {"source": "offline", "dataset": getattr(qs, "name", "?"), "seed": trial.seed,
                                 "click_model": exp.click_model.mapping()})
        on_chunk = lambda first, q, c: writer.write(logged_sessions(trial.logged, qs, first, q, c))  # noqa: E731
    on_fit = None
    if exp.save_models:
        spec = feature_spec(qs)

        def on_fit(name, est, fr):
            meta = {"kind": "offline", "estimator": name, "options": exp.options_for(name),
                    "ranker": "linear" if name == "production" else exp.ranker, "hidden": list(exp.hidden),
                    "trial": t, "seed": trial.seed, "n_features": trial.n_features, "features": spec}
            save_model(model_path(out_dir, name, t), meta, fr.params, fr.state)
    try:
        return run_setting(trial, exp, click_data=click_data, on_chunk=on_chunk, on_fit=on_fit, per_query=True)
    finally:
        if writer is not None:
            writer.close()


def _results(trials, infos, exp: OfflineConfig, qs, dataset=None) -> dict:
    return {"algorithms": summarize(trials, exp.estimators, METRICS), "significance": significance(
                trials, exp.estimators, METRICS), "baseline": exp.baseline,
            "vs_baseline": vs_baseline(trials, exp.estimators, METRICS, exp.baseline),
            "dataset": getattr(qs, "name", "?"),
            "n_queries": int(qs.n_queries), "config": as_mapping(exp), "trials_info": infos,
            "data": qs.preprocess_report.as_dict() if getattr(qs, "preprocess_report", None) else None,
            "measures": per_query.measures(METRICS, exp.eval.map_threshold), "per_query": per_query.FILE,
            "record": experiment_record(exp.kind, dataset),
            "training": {name: trials[-1][name].get("schedule") for name in exp.estimators
                         if trials and name in trials[-1]}}


def offline_markdown(results: dict, exp: OfflineConfig) -> str:
    """results.md of ``run_offline``: the header (dataset, click model, protocol, seed, trials, commit) and the
    table."""
    infos = results["trials_info"]
    source = (f"click log {exp.click_log}" if exp.click_log
              else "the dataset's click sessions" if infos and "click_log" in infos[0]
              else protocol_line(exp.budget, exp.list_size, exp.list_cap, infos))
    header = markdown_header(results["dataset"], exp.click_model.mapping(), exp.ranker, exp.seed, source, len(infos),
                             results["record"]["commit"])
    return (header + markdown_table(results["algorithms"], METRICS, sig=results.get("significance"))
            + markdown_vs_baseline(results.get("vs_baseline"), results.get("baseline"))
            + per_query.markdown_measures(results["measures"])
            + per_query.markdown_groups(results.get("by_frequency_bucket"), GROUP_METRICS)
            + click_likelihood.markdown(click_likelihood.rows_of(results)))


def run_offline(run: ResolvedRun, out_dir, queryset=None) -> dict:
    """Run the offline table: every estimator, ``trials`` seeds; writes results.json and results.md. ``run`` is the
    typed run (``ltrjax.schema.resolve``; Python callers: ``ltrjax.schema.offline_run``)."""
    exp = offline_experiment(run, OfflineConfig)
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    qs = queryset if queryset is not None else load_queryset(run.dataset, run.data.cache_dir, seed=exp.seed)
    trials, infos = finished_trials(out_dir, exp, qs) if exp.resume else ([], [])
    click_data = None
    log_path = exp.click_log or qs.info.get("click_log")  # a real-click dataset (baidu_ultr) brings its log
    if log_path:  # read in batches, twice; refused or warned before any work
        from ltrjax.offline.click_stream import stream_training_data

        click_data = stream_training_data(log_path, qs, lambda y: click_relevance(y, exp, int(qs.y_max)),
                                          chunk=lambda k: chunk_size(k, exp.logging_chunk))
    from tqdm import tqdm

    # disable=None: the bar is off when stderr is not a terminal
    for t in tqdm(range(int(exp.trials)), desc="offline trials", disable=None if exp.progress else True):
        seed = int(exp.seed) + t
        if t < len(trials):
            print(f"trial {t} (seed {seed}): finished in {out_dir / 'results.json'}, skipped", flush=True)
            continue
        print(f"trial {t} (seed {seed})", flush=True)
        trial = prepare_trial(qs, exp, seed)
        res = _run_trial(trial, exp, qs, out_dir, t, click_data)
        per_query.write(out_dir, per_query.table(per_query.take(res), qs.qids, t), t)
        trials.append(res)
        infos.append({"seed": seed, **trial.info, **res.get("_logging", {}), "timing": res.get("_timing", {})})
        write_results(out_dir, _results(trials, infos, exp, qs, run.dataset))  # write_results makes it JSON
    results = jsonable(_results(trials, infos, exp, qs, run.dataset))
    groups = qs.info.get("frequency_bucket")  # {query_id: bucket} (Baidu-ULTR's annotated queries)
    if groups:
        results["by_frequency_bucket"] = per_query.group_means(out_dir, groups, GROUP_METRICS)
        write_results(out_dir, results)
    md = offline_markdown(results, exp)
    (out_dir / "results.md").write_text(md)
    print(md)
    return results


# --------------------------------------------------------------------------- experiment=offline_fidelity
FIDELITY_RESUME_IGNORES = ("trials", "progress")  # a rerun recomputes every part; other settings are refused


def fidelity_header(fx: FidelityConfig, qs, vec_reason) -> dict:
    """The opening of a fidelity run's results (dataset, click models, protocol, seed, trials, commit), naming only
    the parts that run (the Vectorization part only when ``vec_reason`` is None: the data can host it)."""
    vec = "vectorization" in fx.parts and vec_reason is None
    eh = "vector_eh" in fx.parts and fx.vector_eh.seeds
    return {"dataset": f"{getattr(qs, 'name', '?')} ({int(qs.n_queries)} queries, {int(qs.y_max) + 1} grades)",
            "click_models": "; ".join(
                ([f"PRS: PBM theta_k = 1/k (eta = 1), binarized relevance with noise mu {fx.prs.noise}"]
                 if "prs" in fx.parts else [])
                + ([f"Vectorization: {', '.join(fx.vectorization.settings)} (Eq. 13 relevance)"] if vec else [])
                + ([f"vector EH bed {fx.vector_eh.bed}"] if eh else [])),
            "protocol": "; ".join(
                ([f"PRS: whole candidate lists (at most {fx.list_cap}), {fx.prs.clicks_per_query:g} clicks per "
                  f"logged query, {fx.prs.max_steps} steps for every estimator"] if "prs" in fx.parts else [])
                + ([f"Vectorization: production top-{fx.vectorization.list_size}, {fx.vectorization.n_sessions} "
                    f"sessions, {fx.vectorization.ranker} ranker, {fx.train.max_steps} steps for every estimator"]
                   if vec else [])
                + ([f"vector-EH bed: {fx.vector_eh.seeds} seeds, {fx.vector_eh.n_queries} queries, "
                    f"{fx.vector_eh.n_sessions} sessions"] if eh else [])
                + [f"best validation NDCG@10 every {fx.train.eval_every_steps} steps (results.json 'training')"]),
            "seed": fx.seed, "trials": fx.trials, "commit": git_commit() or "unknown (not a git checkout)"}


def fidelity_markdown(results: dict) -> str:
    """results.md of ``run_fidelity`` (``ltrjax.report.fidelity_report.markdown`` with the papers' numbers)."""
    return fidelity_report.markdown(results, FE.VEC_SETTINGS, FE.PAPER, ORACLE_ESTIMATORS)


def run_fidelity(run: ResolvedRun, out_dir, queryset=None, log=print) -> dict:
    """Run every part of ``experiment.parts`` on the run's dataset; write results.json / results.md / figures.
    ``run`` is the typed run (``ltrjax.schema.resolve``; Python callers: ``ltrjax.schema.offline_run``)."""
    fx = offline_experiment(run, FidelityConfig)
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    qs = queryset if queryset is not None else load_queryset(run.dataset, run.data.cache_dir, seed=fx.seed)
    check_experiment(out_dir, "offline_fidelity", as_mapping(fx), FIDELITY_RESUME_IGNORES, getattr(qs, "name", "?"))
    t0 = time.perf_counter()
    vec_reason = FE.vectorization_untestable(qs)
    results = {"dataset": getattr(qs, "name", "?"), "header": fidelity_header(fx, qs, vec_reason), "claims": [],
               "config": as_mapping(fx), "record": experiment_record("offline_fidelity", run.dataset),
               "training": {}, "sizes": {"trials": int(fx.trials), "n_queries": int(qs.n_queries)}}
    parts = {}

    def save():
        results["seconds"] = time.perf_counter() - t0
        results["claims"] = (FE.prs_claims(parts.get("prs"), fx, qs)
                             + FE.vectorization_claims(parts.get("vectorization"), fx, qs, vec_reason if
                                                       "vectorization" in fx.parts else "the Vectorization part was "
                                                                                        "not run (experiment.parts)")
                             + [FE.vector_eh_claim(parts.get("vector_eh"), fx)])
        write_results(out_dir, results)  # write_results makes it JSON
        (out_dir / "results.md").write_text(fidelity_markdown(jsonable(results)))

    if "prs" in fx.parts and fx.prs.estimators:
        parts["prs"] = FE.prs_part(qs, fx, log)
        exp0 = parts["prs"].pop("exp0")
        results["prs"] = parts["prs"]
        results["training"]["prs_table"] = parts["prs"]["training"]["table"]
        save()  # the sweeps are on disk before the (slow) tree pair starts
        if fx.prs.table1:
            parts["prs"]["table1"] = FE.prs_table1(qs, fx, exp0, log)
            if "table" in parts["prs"]["table1"]:
                results["training"]["prs_table1"] = parts["prs"]["table1"]["training"]
            save()
    if "vectorization" in fx.parts and vec_reason is None and fx.vectorization.settings:
        parts["vectorization"] = FE.vectorization_part(qs, fx, log)
        results["vectorization"] = parts["vectorization"]
        for name, plan in parts["vectorization"]["training"].items():
            results["training"][f"vectorization_{name}"] = plan
        save()
    vx = fx.vector_eh
    if "vector_eh" in fx.parts and vx.seeds > 0:
        seeds = range(vx.first_seed, vx.first_seed + vx.seeds)
        chk = F.run_checks(vx.bed, seeds, vx.n_queries, vx.n_sessions, tuple(vx.dims), float(fx.margin),
                           tuple(vx.old_schedule), log=log, over={"train": as_mapping(fx.train)}, pbm=False,
                           trust=False)  # the Vectorization part runs PBM and trust bias on the papers' models
        parts["vector_eh"] = chk
        results["vector_eh"] = {"claims": chk["claims"], "raw": chk["raw"]}
    save()
    results = jsonable(results)
    fidelity_report.plot(results, out_dir)
    print(fidelity_markdown(results))
    return results


def _float_keys(sweeps: dict) -> dict:
    """A results.json sweep ({"1.0": row}: JSON writes keys as text) with its keys back as numbers."""
    return {k: {float(x): row for x, row in sw.items()} for k, sw in sweeps.items()}


def recompute_claims(out_dir, config: Mapping | None = None) -> dict:
    """Recompute a finished fidelity run's claims from the per-trial values its results.json holds (today's
    verdict rules, ``config``'s overrides of its experiment settings, e.g. ``{"margin_fraction": 0.5}``), and
    rewrite its results.json and results.md. A claim whose part the run lacks keeps its old row."""
    out_dir = pathlib.Path(out_dir)
    results = read_results(out_dir)
    if results is None:
        raise FileNotFoundError(f"{out_dir}: no results.json to recompute claims from")
    fx = from_mapping(FidelityConfig, {**results["config"], **dict(config or {})})
    qs = type("Named", (), {"name": results["dataset"]})()
    old = {c["id"]: c for c in results["claims"]}
    new = []
    if "prs" in results:
        new += FE.prs_claims({**results["prs"], "sweeps": _float_keys(results["prs"]["sweeps"])}, fx, qs)
    if "vectorization" in results:
        new += FE.vectorization_claims(results["vectorization"], fx, qs, None)
    if "vector_eh" in results:
        new.append(FE.vector_eh_claim(results["vector_eh"], fx))
    fresh = {c["id"]: c for c in new}
    results["claims"] = [fresh.get(cid, old[cid]) for cid in old]
    results["config"] = as_mapping(fx)
    write_results(out_dir, results)
    (out_dir / "results.md").write_text(fidelity_markdown(jsonable(results)))
    return results
