"""The offline experiment (SPEC §6): production ranker, logging, every estimator, test metrics.

``run_offline(cfg, out_dir, queryset=None)`` runs ``trials`` trials (seeds ``seed + t``) of an
``OfflineConfig`` (``ltrjax.offline.config``) and writes ``results.json`` (after every trial) and
``results.md``. A trial is ``prepare_trial`` (splits, padded evaluation lists, production ranker, the
presented list of every logged training query: the whole candidate list by default, PRS §5.2; the labeled
skyline's lists) followed by ``run_setting`` (log clicks up to the budget with one click model, train and
evaluate each estimator on one schedule); sweeps reuse a prepared trial across settings.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import time
import types
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from ltrjax.clicks import check_click_model_data, make_click_model, relevance
from ltrjax.data.layout import quantile_widths
from ltrjax.offline import estimator_api
from ltrjax.offline.config import TOP_LEVEL, OfflineConfig, as_mapping, from_mapping, is_oracle
from ltrjax.offline.estimators import ClickBatch, LabeledBatch, Propensities
from ltrjax.offline.evaluate import KS, jitted_score, make_evaluator, make_validator
from ltrjax.offline.lists import bucket_queries, pad_queries
from ltrjax.offline.logging import (LoggedLists, chunk_size, log_click_stats, pad_positions,
                                    randomization_propensities, top_k_lists)
from ltrjax.offline.train import fit
from ltrjax.record import check_experiment, experiment_record, write_results
from ltrjax.saved import feature_spec, model_path, save_model

METRICS = tuple(f"ndcg@{k}" for k in KS) + ("map",)


def plain_experiment(cfg) -> dict:
    """``cfg.experiment`` (or ``cfg`` itself when it has none) as a plain, resolved dict."""
    exp = cfg.get("experiment", cfg) if hasattr(cfg, "get") else cfg
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(exp):
            exp = OmegaConf.to_container(exp, resolve=True)
    except ImportError:  # pragma: no cover
        pass
    return dict(exp or {})


def experiment_config(cfg) -> OfflineConfig:
    """The run's ``OfflineConfig``: ``cfg`` itself, or built from ``cfg.experiment`` (a run config) or from a
    plain experiment mapping; the run-level keys it leaves null come from the top level of ``cfg``."""
    if isinstance(cfg, OfflineConfig):
        return cfg.resolved()
    if isinstance(getattr(cfg, "experiment", None), OfflineConfig):  # a typed run (ltrjax.schema.ResolvedRun)
        return cfg.experiment
    top = {}
    if hasattr(cfg, "get") and cfg.get("experiment") is not None:
        top = {k: cfg.get(k) for k in TOP_LEVEL}
    return from_mapping(OfflineConfig, plain_experiment(cfg)).resolved(top)


def binarize_threshold(exp: OfflineConfig, y_max: int) -> int:
    thr = exp.click_model.threshold
    return int(thr) if thr is not None else (1 if y_max <= 2 else 3)


def evaluation_labels(labels, exp: OfflineConfig, y_max: int) -> np.ndarray:
    """Labels used for evaluation and labeled training: binarized iff the click relevance is."""
    mode = exp.eval.binarize
    binarize = exp.click_model.relevance == "binary" if mode == "auto" else bool(mode)
    labels = np.asarray(labels)
    return (labels >= binarize_threshold(exp, y_max)).astype(np.int32) if binarize else labels.astype(np.int32)


def click_relevance(labels, exp: OfflineConfig, y_max: int):
    cm = exp.click_model
    return relevance(labels, y_max, cm.relevance, threshold=binarize_threshold(exp, y_max), noise=float(cm.noise))


# --------------------------------------------------------------------------- propensities
def model_propensities(exp: OfflineConfig, logged: LoggedLists, y_max: int, eta: float | None = None) -> Propensities:
    """The click model's own theta_k, alpha_k, beta_k (``eta``: the examination exponent told instead).

    PBM / trust bias: the model's curves; with binary relevance and noise mu the affine terms are relative
    to R in {0, 1}: alpha = a (1 - 2 mu), beta = b + a mu. TianGong (or any ``matrix``) M[y, k]: theta_k =
    label-frequency-weighted CTR at k over the same at position 1 (what a result-randomization experiment
    measures); alpha_k, beta_k = weighted least squares of M[y, k] on R(y). Cascade: theta = 1, alpha = 1.
    """
    cm = exp.click_model.mapping()
    k = int(logged.mask.shape[1])
    kind = cm["kind"]
    if kind in ("pbm", "trust_bias"):
        if eta is not None:
            cm["eta"] = float(eta)
        model = make_click_model(cm, k)
        theta, alpha, beta = (np.asarray(model.examination), np.asarray(model.alpha), np.asarray(model.beta))
        if cm["relevance"] == "binary":
            mu = float(cm["noise"])
            alpha, beta = alpha * (1 - 2 * mu), beta + alpha * mu
        return Propensities(*(jnp.asarray(a, jnp.float32) for a in (theta, alpha, beta)))
    if kind in ("tiangong", "matrix"):
        m = np.asarray(make_click_model(cm, k).matrix, np.float64)
        labels = np.asarray(logged.labels)[np.asarray(logged.mask)]
        freq = np.bincount(np.clip(labels, 0, m.shape[0] - 1), minlength=m.shape[0]).astype(np.float64)
        freq = freq / freq.sum()
        ctr = freq @ m
        theta = ctr / ctr[0]
        r = np.asarray(click_relevance(np.arange(m.shape[0]), exp, y_max), np.float64)
        alpha, beta = np.zeros(k), np.zeros(k)
        for pos in range(k):
            a = np.stack([r, np.ones_like(r)], 1) * np.sqrt(freq)[:, None]
            sol, *_ = np.linalg.lstsq(a, m[:, pos] * np.sqrt(freq), rcond=None)
            alpha[pos], beta[pos] = max(sol[0], 1e-3), sol[1]
        return Propensities(*(jnp.asarray(a, jnp.float32) for a in (theta, alpha, beta)))
    ones = jnp.ones((k,), jnp.float32)
    return Propensities(theta=ones, alpha=ones, beta=jnp.zeros_like(ones))


def told_propensities(exp: OfflineConfig, logged: LoggedLists, y_max: int, key) -> tuple[Propensities, dict]:
    """What the non-oracle estimators are told (PRS Figs. 3-6: the true theta, at ``assumed_eta`` when set; PRS
    Table 1, ``propensities: randomization``: theta estimated by a simulated result-randomization experiment)
    and a description of it for the report."""
    if exp.propensities == "randomization":
        model = make_click_model(exp.click_model.mapping(), int(logged.mask.shape[1]))
        theta = randomization_propensities(key, model, logged, int(exp.randomization_sessions))
        theta = jnp.asarray(theta, jnp.float32)
        return (Propensities(theta=theta, alpha=theta, beta=jnp.zeros_like(theta)),
                {"source": "randomization", "sessions": int(exp.randomization_sessions),
                 "theta": np.asarray(theta).round(4).tolist()})
    props = model_propensities(exp, logged, y_max, eta=exp.assumed_eta)
    return props, {"source": "known", "eta": exp.assumed_eta if exp.assumed_eta is not None else exp.click_model.eta}


# backwards-compatible name: what every estimator was told before the oracle / told split
def estimator_propensities(exp: OfflineConfig, logged: LoggedLists, y_max: int) -> Propensities:
    return model_propensities(exp, logged, y_max, eta=exp.assumed_eta)


# --------------------------------------------------------------------------- a trial
@dataclasses.dataclass
class TrialData:
    seed: int
    n_features: int
    y_max: int
    vali: list
    test: list
    logged: LoggedLists
    labeled_train: LabeledBatch
    production: object  # FitResult
    production_estimator: object
    production_metrics: dict
    info: dict
    cache: dict = dataclasses.field(default_factory=dict)


def _labeled_batch(lists) -> LabeledBatch:
    return LabeledBatch(features=jnp.asarray(lists.features), labels=jnp.asarray(lists.labels, jnp.float32),
                        mask=jnp.asarray(lists.mask))


def make_named_estimator(exp: OfflineConfig, name: str, ranker: str | None = None):
    """Estimator ``name`` with the run's ranker (``ranker`` overrides it) and its ``estimator_options``."""
    return estimator_api.make(name, ranker=ranker or exp.ranker, hidden=tuple(exp.hidden), **exp.options_for(name))


def logging_scores(qs, exp: OfflineConfig, buckets, scores) -> list:
    """The logging policy's scores per bucket: the production ranker's, or with ``logging_boost`` = {column c,
    weight w} the production score over its standard deviation (over the logged documents) plus w times the
    z-scored feature c. Only the order within a query matters; w = 0 leaves the production order unchanged."""
    col, weight = exp.logging_boost.column, float(exp.logging_boost.weight)
    if col is None or weight == 0.0:
        return scores
    col = int(col)
    if not 0 <= col < qs.n_features:
        raise ValueError(f"logging_boost.column: expected a feature index in [0, {qs.n_features}), got {col}")
    feats = np.asarray(qs.features)[:, col].astype(np.float64)
    mean, sd = feats.mean(), max(feats.std(), 1e-12)
    valid = np.concatenate([np.asarray(s)[np.asarray(b.mask)] for b, s in zip(buckets, scores)])
    prod_sd = max(float(valid.std()), 1e-12)
    return [jnp.where(jnp.asarray(b.mask), s / prod_sd + weight * (jnp.asarray(b.features)[..., col] - mean) / sd, s)
            for b, s in zip(buckets, scores)]


def presented_size(exp: OfflineConfig, sizes) -> int:
    """K, the presented list's length: ``list_size``, else the longest logged candidate list up to ``list_cap``."""
    if exp.list_size is not None:
        return int(exp.list_size)
    return int(min(exp.list_cap, max(int(np.max(sizes, initial=1)), 1)))


def prepare_trial(qs, exp: OfflineConfig, seed: int) -> TrialData:
    """Splits, evaluation lists, the production ranker and the presented lists of the logged queries."""
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    key = jax.random.PRNGKey(seed)
    y_max = int(qs.y_max)
    eval_view = types.SimpleNamespace(features=qs.features, query_offsets=qs.query_offsets,
                                      labels=evaluation_labels(qs.labels, exp, y_max))
    split = np.asarray(qs.split)
    train_ids, vali_ids, test_ids = (np.flatnonzero(split == s) for s in (0, 1, 2))
    sizes = np.diff(np.asarray(qs.query_offsets))
    widths = quantile_widths(sizes[np.concatenate([vali_ids, test_ids])], int(exp.eval_buckets))
    vali = bucket_queries(eval_view, vali_ids, rng, widths=widths)
    test = bucket_queries(eval_view, test_ids, rng, widths=widths)
    n_prod = max(1, int(round(exp.production_fraction * len(train_ids))))
    perm = rng.permutation(train_ids)
    prod_ids, logged_ids = np.sort(perm[:n_prod]), np.sort(perm[n_prod:])
    k = presented_size(exp, sizes[logged_ids])

    prod_est = make_named_estimator(exp, "production", ranker="linear")
    prod_data = _labeled_batch(pad_queries(eval_view, prod_ids, rng, max_docs=exp.max_docs))
    prod = fit(prod_est, prod_data, jax.random.fold_in(key, 1), qs.n_features, exp.train_for("production"),
               validate=make_validator(prod_est, vali))
    prod_metrics = make_evaluator(prod_est, test, map_threshold=exp.eval.map_threshold,
                                  drop_no_relevant=exp.eval.drop_no_relevant)(prod.params, prod.state)

    parts = []
    prod_score = jitted_score(prod_est)
    buckets = bucket_queries(qs, logged_ids, rng, n_buckets=int(exp.eval_buckets))
    scores = [prod_score(prod.params, prod.state, jnp.asarray(b.features), jnp.asarray(b.mask)) for b in buckets]
    scores = logging_scores(qs, exp, buckets, scores)
    for b, s in zip(buckets, scores):
        rel = click_relevance(b.labels, exp, y_max)
        parts.append(pad_positions(top_k_lists(b, s, rel, k), k))
    logged = jax.tree_util.tree_map(lambda *a: jnp.concatenate(a, axis=0), *parts)
    order = jnp.argsort(logged.query_index)  # rows in query order, as a click log read back has them
    logged = jax.tree_util.tree_map(lambda a: a[order], logged)
    labeled_train = _labeled_batch(pad_queries(eval_view, train_ids, rng, max_docs=exp.max_docs))
    shown = np.asarray(logged.mask).sum(1)
    info = {"n_train": int(len(train_ids)), "n_vali": int(len(vali_ids)), "n_test": int(len(test_ids)),
            "n_production_queries": int(n_prod), "n_logged_queries": int(len(logged_ids)),
            "list_size": k, "mean_presented": float(shown.mean()), "max_candidates": int(sizes[logged_ids].max()),
            "prepare_seconds": time.perf_counter() - t0, "production_epochs": prod.history["epochs"]}
    return TrialData(seed=seed, n_features=int(qs.n_features), y_max=y_max, vali=vali, test=test, logged=logged,
                     labeled_train=labeled_train, production=prod, production_estimator=prod_est,
                     production_metrics=prod_metrics, info=info)


def logging_budget(exp: OfflineConfig, n_logged_queries: int) -> dict:
    """``log_click_stats``'s budget: {"n_sessions": n} or {"n_clicks": n} (clicks per query x logged queries)."""
    unit, amount = exp.budget
    if unit == "sessions":
        return {"n_sessions": int(amount)}
    if unit == "clicks_per_query":
        return {"n_clicks": max(1, int(round(amount * n_logged_queries)))}
    return {"n_clicks": int(amount)}


def fit_schedule(fr, cfg) -> dict:
    """The schedule a fit ran under (steps; a tree ensemble's in boosting rounds) and what it used of it."""
    h = fr.history
    if "schedule" in h:
        return {**h["schedule"], "steps_run": h["steps"], "best_step": h["best_step"]}
    return {"max_rounds": max(cfg.max_epochs, cfg.min_epochs), "eval_every_rounds": cfg.eval_every,
            "patience_rounds": cfg.patience, "rounds_run": h["epochs"], "best_round": h["best_epoch"]}


def run_setting(trial: TrialData, exp: OfflineConfig, estimators=None, log=print, click_data=None, on_chunk=None,
                on_fit=None) -> dict:
    """Log clicks with ``exp.click_model`` up to the budget and train/evaluate ``estimators`` (default: all).

    Estimators named ``*_oracle`` are told the true click model; the others what ``exp.propensities`` says.
    ``click_data`` = (LoggedLists, ClickStats, info) of a click log (``offline.click_data``) replaces the
    logging; ``on_chunk`` receives the logged sessions (``log_click_stats``); ``on_fit(name, estimator,
    FitResult)`` every trained model.
    """
    estimators = list(estimators or exp.estimators)
    k = int(trial.logged.mask.shape[1])
    key = jax.random.fold_in(jax.random.PRNGKey(trial.seed), 7)
    out = {}
    timing = {}
    click_names = [e for e in estimators if e not in ("production", "labeled")]
    if click_names:
        source = trial.logged if click_data is None else click_data[0]
        logged = source.replace(relevance=jnp.where(source.mask, click_relevance(source.labels, exp, trial.y_max), 0.0))
        t0 = time.perf_counter()
        if click_data is None:
            check_click_model_data(exp.click_model.mapping(), trial.y_max)  # ClickModelDataMismatch: untestable here
            model = make_click_model(exp.click_model.mapping(), k)
            budget = logging_budget(exp, int(logged.mask.shape[0]))
            stats = log_click_stats(jax.random.fold_in(key, 2), model, logged, chunk=exp.logging_chunk,
                                    progress=bool(exp.progress), on_chunk=on_chunk, **budget)
        else:
            stats = click_data[1]
        timing["logging"] = time.perf_counter() - t0
        data = ClickBatch(features=logged.features, mask=logged.mask, n_sessions=stats.n_sessions,
                          clicks=stats.clicks, pairs=stats.pairs, pairs_lambda=stats.pairs_lambda)
        told, told_info = told_propensities(exp, logged, trial.y_max, jax.random.fold_in(key, 3))
        truth = model_propensities(exp, logged, trial.y_max)
        n_queries = int(np.unique(np.asarray(logged.query_index)).size)
        out["_logging"] = {"sessions": stats.total_sessions, "clicks": stats.total_clicks,
                           "clicks_per_query": stats.total_clicks / max(n_queries, 1), "list_size": k,
                           "propensities": told_info,
                           **({"click_log": click_data[2]} if click_data is not None else {})}
    evaluator_kw = {"map_threshold": exp.eval.map_threshold, "drop_no_relevant": exp.eval.drop_no_relevant}
    for name in estimators:
        t0 = time.perf_counter()
        cfg = exp.train_for(name)
        if name == "production":
            res = dict(trial.production_metrics)
            res["epochs"] = trial.production.history["epochs"]
            res["schedule"] = fit_schedule(trial.production, exp.train_for("production"))
            if on_fit is not None:
                on_fit(name, trial.production_estimator, trial.production)
        elif name == "labeled":
            ck = ("labeled", exp.ranker, json.dumps(dataclasses.asdict(cfg), sort_keys=True),
                  json.dumps(exp.options_for("labeled"), sort_keys=True))
            if ck not in trial.cache:
                est = make_named_estimator(exp, "labeled")
                fr = fit(est, trial.labeled_train, jax.random.fold_in(key, 100), trial.n_features, cfg,
                         validate=make_validator(est, trial.vali))
                res = make_evaluator(est, trial.test, **evaluator_kw)(fr.params, fr.state)
                res.update(epochs=fr.history["epochs"], best_vali=fr.history["best_vali"],
                           schedule=fit_schedule(fr, cfg))
                trial.cache[ck] = res
                if on_fit is not None:
                    on_fit(name, est, fr)
            res = dict(trial.cache[ck])
        else:
            est = make_named_estimator(exp, name)
            fr = fit(est, data, jax.random.fold_in(key, 100), trial.n_features, cfg,
                     validate=make_validator(est, trial.vali), props=truth if is_oracle(name) else told)
            res = make_evaluator(est, trial.test, **evaluator_kw)(fr.params, fr.state)
            res.update(epochs=fr.history["epochs"], best_vali=fr.history["best_vali"], schedule=fit_schedule(fr, cfg),
                       told="true click model" if is_oracle(name) else told_info["source"])
            if on_fit is not None:
                on_fit(name, est, fr)
            if "theta" in fr.state:
                res["learned_theta"] = np.asarray(fr.state["theta"]).round(4).tolist()
            if "propensity" in fr.params:
                lp = jax.nn.log_softmax(fr.params["propensity"])
                res["learned_theta"] = np.exp(lp - lp[0]).round(4).tolist()
        res["seconds"] = time.perf_counter() - t0
        out[name] = res
        log(f"  [{name}] ndcg@10={res['ndcg@10']:.4f} map={res['map']:.4f} ({res['seconds']:.1f}s)")
    out["_timing"] = timing
    return out


# --------------------------------------------------------------------------- aggregation and files
def summarize(trials: list[dict], names) -> dict:
    algos = {}
    for name in names:
        rows = [t[name] for t in trials if name in t]
        if not rows:
            continue
        entry = {m: float(np.mean([r[m] for r in rows])) for m in METRICS}
        entry["std"] = {m: float(np.std([r[m] for r in rows])) for m in METRICS}
        entry["seconds"] = float(np.mean([r["seconds"] for r in rows]))
        entry["trials"] = rows
        algos[name] = entry
    return algos


def markdown_table(algos: dict, title: str = "") -> str:
    """The estimators' test metrics: mean ± std over trials (the mean alone for one trial), and the trial count."""
    lines = [f"### {title}", ""] if title else []
    lines.append("| estimator | " + " | ".join(METRICS) + " | trials | train s |")
    lines.append("|---|" + "---|" * (len(METRICS) + 2))
    for name, e in algos.items():
        n = len(e["trials"])
        cells = [f"{e[m]:.4f} ± {e['std'][m]:.4f}" if n > 1 else f"{e[m]:.4f}" for m in METRICS]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {n} | {e['seconds']:.1f} |")
    return "\n".join(lines) + "\n"


def markdown_header(exp: OfflineConfig, dataset: str, source: str, n_trials: int) -> str:
    """The opening lines of results.md: dataset, click model, protocol, seed, trials, commit."""
    from ltrjax.record import git_commit

    return "\n".join([f"# Offline results on {dataset}", "",
                      f"- **Dataset**: {dataset}", f"- **Click model**: {exp.click_model.mapping()}",
                      f"- **Protocol**: {source}; ranker {exp.ranker}",
                      f"- **Seed** {exp.seed}, **{n_trials} trial{'s' if n_trials != 1 else ''}** (trial t uses seed + t)",
                      f"- **Commit**: {git_commit() or 'unknown (not a git checkout)'}", "", ""])


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    if isinstance(x, (np.ndarray, jax.Array)):
        return np.asarray(x).tolist()
    return x


def run_dataset(cfg) -> tuple[Mapping | None, str | None]:
    """(``dataset`` block, ``data.cache_dir``) of ``run_offline``'s ``cfg``: read from a typed run
    (``ltrjax.schema.ResolvedRun``); a run config given as a mapping or ``DictConfig`` (the Python API, scripts)
    is read once here, and an experiment config alone has neither (None, None)."""
    if isinstance(cfg, Mapping):  # a DictConfig is a Mapping too
        data = cfg["data"] if "data" in cfg and cfg["data"] is not None else {}
        return (cfg["dataset"] if "dataset" in cfg else None), (data["cache_dir"] if "cache_dir" in data else None)
    data = cfg.data if hasattr(cfg, "data") else None
    return (cfg.dataset if hasattr(cfg, "dataset") else None), (data.cache_dir if data is not None else None)


def load_queryset(dataset, cache_dir: str | None = None, *, seed: int):
    """The dataset of registry mapping ``dataset`` (a run's ``dataset`` block: ``ltrjax.schema.resolve`` fills in
    the synthetic default) with every query kept (``min_docs: 0``); ``cache_dir``: ``data.cache_dir``."""
    from ltrjax.data.registry import load_dataset

    if dataset is None:
        raise ValueError("no dataset: pass a queryset, or a run config with a dataset block (python -m ltrjax.run "
                         "+dataset=NAME; ltrjax.schema.resolve fills in the synthetic default)")
    try:
        from omegaconf import OmegaConf

        ds = OmegaConf.to_container(dataset, resolve=True) if OmegaConf.is_config(dataset) else dict(dataset)
    except ImportError:  # pragma: no cover
        ds = dict(dataset)
    ds["min_docs"] = 0
    return load_dataset(ds, seed=int(seed), cache_dir=cache_dir or None)


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


def _run_trial(trial: TrialData, exp: OfflineConfig, qs, out_dir: pathlib.Path, t: int, click_log) -> dict:
    """``run_setting`` of one trial of ``run_offline``: from the click log if given, with its models saved
    under ``out_dir/models/`` and its logged sessions under ``out_dir/click_logs/`` when asked."""
    click_data, on_chunk, writer = None, None, None
    if click_log is not None:
        from ltrjax.offline.click_data import click_training_data

        click_data = click_training_data(click_log, qs, lambda y: click_relevance(y, exp, trial.y_max),
                                         chunk=chunk_size(int(click_log.doc_ids.shape[1]), exp.logging_chunk),
                                         path=str(exp.click_log))
    elif exp.save_click_logs:
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
        return run_setting(trial, exp, click_data=click_data, on_chunk=on_chunk, on_fit=on_fit)
    finally:
        if writer is not None:
            writer.close()


def _results(trials, infos, exp: OfflineConfig, qs, cfg=None) -> dict:
    return {"algorithms": summarize(trials, exp.estimators), "dataset": getattr(qs, "name", "?"),
            "n_queries": int(qs.n_queries), "config": as_mapping(exp), "trials_info": infos,
            "record": experiment_record(exp.kind, cfg),
            "training": {name: trials[-1][name].get("schedule") for name in exp.estimators
                         if trials and name in trials[-1]}}


def protocol_line(exp: OfflineConfig, infos: list[dict]) -> str:
    """One line: the presented list, the budget and the clicks per query the run logged."""
    unit, amount = exp.budget
    lists = f"top-{exp.list_size}" if exp.list_size else f"whole candidate lists (at most {exp.list_cap})"
    cpq = [i["clicks_per_query"] for i in infos if "clicks_per_query" in i]
    per_q = f", {np.mean(cpq):.1f} clicks per logged query" if cpq else ""
    return f"{lists}, budget {amount} {unit.replace('_', ' ')}{per_q}"


def run_offline(cfg, out_dir, queryset=None) -> dict:
    """Run the offline table: every estimator, ``trials`` seeds; writes results.json and results.md. ``cfg`` is the
    typed run (``ltrjax.schema.resolve``), an ``OfflineConfig``, or a run or experiment mapping."""
    exp = experiment_config(cfg)
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    qs = queryset if queryset is not None else load_queryset(*run_dataset(cfg), seed=exp.seed)
    trials, infos = finished_trials(out_dir, exp, qs) if exp.resume else ([], [])
    click_log = None
    if exp.click_log:
        from ltrjax.clicklog import read_click_log

        click_log = read_click_log(exp.click_log)
    from tqdm import tqdm

    # disable=None: the bar is off when stderr is not a terminal
    for t in tqdm(range(int(exp.trials)), desc="offline trials", disable=None if exp.progress else True):
        seed = int(exp.seed) + t
        if t < len(trials):
            print(f"trial {t} (seed {seed}): finished in {out_dir / 'results.json'}, skipped", flush=True)
            continue
        print(f"trial {t} (seed {seed})", flush=True)
        trial = prepare_trial(qs, exp, seed)
        res = _run_trial(trial, exp, qs, out_dir, t, click_log)
        trials.append(res)
        infos.append({"seed": seed, **trial.info, **res.get("_logging", {}), "timing": res.get("_timing", {})})
        write_results(out_dir, _results(trials, infos, exp, qs, cfg))  # write_results makes it JSON
    results = _results(trials, infos, exp, qs, cfg)
    source = f"click log {exp.click_log}" if exp.click_log else protocol_line(exp, infos)
    md = markdown_header(exp, results["dataset"], source, len(trials)) + markdown_table(results["algorithms"])
    (out_dir / "results.md").write_text(md)
    print(md)
    return _jsonable(results)
