"""The offline experiment (SPEC §6): production ranker, logging, every estimator, test metrics.

``run_offline(cfg, out_dir, queryset=None)`` runs ``cfg.experiment.trials`` trials (seeds
``seed + t``) and writes ``results.json`` (after every trial) and ``results.md``. A trial is
``prepare_trial`` (splits, padded evaluation lists, production ranker, the production top-K of
every logged training query, the labeled skyline's lists) followed by ``run_setting`` (log
sessions with one click model, train and evaluate each estimator); sweeps reuse a prepared
trial across settings.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import pathlib
import time
import types

import jax
import jax.numpy as jnp
import numpy as np

from ltrjax.clicks import check_click_model_data, make_click_model, relevance
from ltrjax.offline.estimators import ClickBatch, LabeledBatch, Propensities, make_estimator, options_from_flat
from ltrjax.offline.evaluate import KS, jitted_score, make_evaluator, make_validator
from ltrjax.offline.lists import bucket_queries, bucket_widths, pad_queries
from ltrjax.offline.logging import LoggedLists, log_click_stats, pad_positions, top_k_lists
from ltrjax.offline.train import TrainConfig, fit
from ltrjax.report.record import experiment_record, write_results
from ltrjax.saved import feature_spec, model_path, save_model

METRICS = tuple(f"ndcg@{k}" for k in KS) + ("map",)

DEFAULTS = {
    "kind": "offline", "name": "offline", "seed": 0, "trials": 5,
    "estimators": ["naive", "ips", "pns", "prs", "prs_lambda", "dla", "regression_em", "pair_debias",
                   "affine", "vectorization", "production", "labeled"],
    "n_sessions": 1_000_000, "list_size": 10, "production_fraction": 0.01, "logging_chunk": 1 << 17,
    # the logging policy ranks by the production score (divided by its std) + weight x the z-scored feature
    # ``column`` (0-based): a business rule promoting documents on a feature the labels do not reward
    "logging_boost": {"column": None, "weight": 0.0},
    "ranker": "linear", "hidden": [64, 32], "max_docs": 256, "eval_buckets": 4, "progress": True,
    "click_model": {"kind": "pbm", "examination": "inverse", "eta": 1.0, "relevance": "binary",
                    "threshold": None, "noise": 0.1, "eps_minus_scale": 0.65, "preset": "navigational"},
    "assumed_eta": None,
    "eval": {"binarize": "auto", "map_threshold": 1, "drop_no_relevant": True},
    "estimator_options": {"naive_form": "pairwise", "ips_form": "pairwise", "ips_clip": None, "prs_gamma": 1.0,
                          "dla_clip": None, "em_step": 0.05, "pd_step": 0.05, "pd_p": 1.0, "vec_dim": 2,
                          "vec_freeze": 500, "vec_joint_steps": 4000, "vec_l2": 1e-3, "vec_base_hidden": [256, 64],
                          "affine_clip_negative": True, "labeled_form": "pairwise"},
    "train": {"batch_size": 64, "optimizer": "adam", "learning_rate": 0.01, "clip_norm": 5.0,
              "weight_decay": 0.0, "max_epochs": 300, "patience": 30, "eval_every": 1},
    "train_overrides": {"vectorization": {"eval_every": 5}},
    # a Parquet click log (ltrjax.clicklog) to train the click estimators from instead of logging sessions;
    # write every trial's logged sessions to RUN/click_logs/trialT.parquet (null: the top-level keys of
    # conf/config.yaml, `click_log=PATH`, `save_click_logs=true`); final parameters to RUN/models/
    "click_log": None, "save_click_logs": None, "save_models": True,
    "resume": True,  # a rerun into the same directory skips the trials already in its results.json
}
TOP_LEVEL = ("seed", "trials", "progress", "click_log", "save_click_logs")  # keys conf/config.yaml may set


def _merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in (over or {}).items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


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


def experiment_config(cfg) -> dict:
    """The experiment mapping (``cfg.experiment``) merged over ``DEFAULTS``, as plain dicts.

    ``seed``, ``trials`` and ``progress`` left null in ``cfg.experiment`` come from the top level of
    ``cfg`` (the project's ``conf/config.yaml``), else from ``DEFAULTS``.
    """
    exp = {k: v for k, v in plain_experiment(cfg).items() if v is not None or k not in TOP_LEVEL}
    top = {k: cfg.get(k) for k in TOP_LEVEL} if hasattr(cfg, "get") else {}
    defaults = _merge(DEFAULTS, {k: v for k, v in top.items() if v is not None})
    return _merge(defaults, exp)


def binarize_threshold(exp: dict, y_max: int) -> int:
    thr = exp["click_model"].get("threshold")
    return int(thr) if thr is not None else (1 if y_max <= 2 else 3)


def evaluation_labels(labels, exp: dict, y_max: int) -> np.ndarray:
    """Labels used for evaluation and labeled training: binarized iff the click relevance is."""
    mode = exp["eval"].get("binarize", "auto")
    binarize = exp["click_model"].get("relevance") == "binary" if mode == "auto" else bool(mode)
    labels = np.asarray(labels)
    return (labels >= binarize_threshold(exp, y_max)).astype(np.int32) if binarize else labels.astype(np.int32)


def click_relevance(labels, exp: dict, y_max: int):
    cm = exp["click_model"]
    mapping = cm.get("relevance", "binary")
    return relevance(labels, y_max, mapping, threshold=binarize_threshold(exp, y_max),
                     noise=float(cm.get("noise", 0.0) or 0.0))


def _estimator(exp: dict, name: str):
    """Estimator ``name`` with the experiment's ranker; the flat ``estimator_options`` mapped onto its keyword
    arguments (transitional, until the typed offline configuration)."""
    return make_estimator(name, ranker=exp["ranker"], hidden=tuple(exp["hidden"]),
                          **options_from_flat(name, exp["estimator_options"], exp["ranker"]))


# --------------------------------------------------------------------------- propensities
def estimator_propensities(exp: dict, logged: LoggedLists, y_max: int) -> Propensities:
    """What the estimators are told: theta_k (with ``assumed_eta``) and the affine alpha_k, beta_k.

    PBM / trust bias: the model's own curves at the assumed eta; with binary relevance and noise mu
    the affine terms are relative to R in {0, 1}: alpha = a (1 - 2 mu), beta = b + a mu.
    TianGong (or any explicit ``matrix``) M[y, k]: theta_k = label-frequency-weighted CTR at k over the same at position 1 (what a
    result-randomization experiment measures); alpha_k, beta_k = weighted least squares of M[y, k]
    on the relevance mapping R(y). Cascade: theta = 1, alpha = 1, beta = 0.
    """
    cm = dict(exp["click_model"])
    k = int(logged.mask.shape[1])
    kind = cm.get("kind", "pbm")
    if kind in ("pbm", "trust_bias"):
        if exp.get("assumed_eta") is not None:
            cm["eta"] = float(exp["assumed_eta"])
        model = make_click_model(cm, k)
        theta, alpha, beta = (np.asarray(model.examination), np.asarray(model.alpha), np.asarray(model.beta))
        if cm.get("relevance") == "binary":
            mu = float(cm.get("noise", 0.0) or 0.0)
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


def _train_cfg(exp: dict, name: str) -> TrainConfig:
    return TrainConfig.from_mapping(_merge(exp["train"], exp.get("train_overrides", {}).get(name, {})))


def logging_scores(qs, exp: dict, buckets, scores) -> list:
    """The logging policy's scores per bucket: the production ranker's, or with ``logging_boost`` = {column c,
    weight w} the production score over its standard deviation (over the logged documents) plus w times the
    z-scored feature c. Only the order within a query matters; w = 0 leaves the production order unchanged."""
    boost = exp.get("logging_boost") or {}
    col, weight = boost.get("column"), float(boost.get("weight") or 0.0)
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


def prepare_trial(qs, exp: dict, seed: int) -> TrialData:
    """Splits, evaluation lists, the production ranker and its top-K lists for the logged queries."""
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    key = jax.random.PRNGKey(seed)
    y_max = int(qs.y_max)
    k = int(exp["list_size"])
    eval_view = types.SimpleNamespace(features=qs.features, query_offsets=qs.query_offsets,
                                      labels=evaluation_labels(qs.labels, exp, y_max))
    split = np.asarray(qs.split)
    train_ids, vali_ids, test_ids = (np.flatnonzero(split == s) for s in (0, 1, 2))
    sizes = np.diff(np.asarray(qs.query_offsets))
    widths = bucket_widths(sizes[np.concatenate([vali_ids, test_ids])], int(exp["eval_buckets"]))
    vali = bucket_queries(eval_view, vali_ids, rng, widths=widths)
    test = bucket_queries(eval_view, test_ids, rng, widths=widths)
    n_prod = max(1, int(round(exp["production_fraction"] * len(train_ids))))
    perm = rng.permutation(train_ids)
    prod_ids, logged_ids = np.sort(perm[:n_prod]), np.sort(perm[n_prod:])

    prod_est = make_estimator("production")
    prod_data = _labeled_batch(pad_queries(eval_view, prod_ids, rng, max_docs=exp["max_docs"]))
    prod = fit(prod_est, prod_data, jax.random.fold_in(key, 1), qs.n_features, _train_cfg(exp, "production"),
               validate=make_validator(prod_est, vali))
    prod_metrics = make_evaluator(prod_est, test, map_threshold=exp["eval"]["map_threshold"],
                                  drop_no_relevant=exp["eval"]["drop_no_relevant"])(prod.params, prod.state)

    parts = []
    prod_score = jitted_score(prod_est)
    buckets = bucket_queries(qs, logged_ids, rng, n_buckets=int(exp["eval_buckets"]))
    scores = [prod_score(prod.params, prod.state, jnp.asarray(b.features), jnp.asarray(b.mask)) for b in buckets]
    scores = logging_scores(qs, exp, buckets, scores)
    for b, s in zip(buckets, scores):
        rel = click_relevance(b.labels, exp, y_max)
        parts.append(pad_positions(top_k_lists(b, s, rel, k), k))
    logged = jax.tree_util.tree_map(lambda *a: jnp.concatenate(a, axis=0), *parts)
    order = jnp.argsort(logged.query_index)  # rows in query order, as a click log read back has them
    logged = jax.tree_util.tree_map(lambda a: a[order], logged)
    labeled_train = _labeled_batch(pad_queries(eval_view, train_ids, rng, max_docs=exp["max_docs"]))
    info = {"n_train": int(len(train_ids)), "n_vali": int(len(vali_ids)), "n_test": int(len(test_ids)),
            "n_production_queries": int(n_prod), "n_logged_queries": int(len(logged_ids)),
            "prepare_seconds": time.perf_counter() - t0, "production_epochs": prod.history["epochs"]}
    return TrialData(seed=seed, n_features=int(qs.n_features), y_max=y_max, vali=vali, test=test, logged=logged,
                     labeled_train=labeled_train, production=prod, production_estimator=prod_est,
                     production_metrics=prod_metrics, info=info)


def run_setting(trial: TrialData, exp: dict, estimators=None, log=print, click_data=None, on_chunk=None,
                on_fit=None) -> dict:
    """Log sessions with ``exp['click_model']`` and train/evaluate ``estimators`` (default: all).

    ``click_data`` = (LoggedLists, ClickStats, info) of a click log (``offline.click_data``) replaces the
    logging; ``on_chunk`` receives the logged sessions (``log_click_stats``); ``on_fit(name, estimator,
    FitResult)`` every trained model.
    """
    estimators = list(estimators or exp["estimators"])
    k = int(exp["list_size"])
    key = jax.random.fold_in(jax.random.PRNGKey(trial.seed), 7)
    out = {}
    timing = {}
    click_names = [e for e in estimators if e not in ("production", "labeled")]
    if click_names:
        source = trial.logged if click_data is None else click_data[0]
        logged = source.replace(relevance=jnp.where(source.mask, click_relevance(source.labels, exp, trial.y_max), 0.0))
        t0 = time.perf_counter()
        if click_data is None:
            check_click_model_data(exp["click_model"], trial.y_max)  # ClickModelDataMismatch: untestable here
            model = make_click_model(exp["click_model"], k)
            stats = log_click_stats(jax.random.fold_in(key, 2), model, logged, int(exp["n_sessions"]),
                                    chunk=int(exp["logging_chunk"]), progress=exp.get("progress", False),
                                    on_chunk=on_chunk)
        else:
            stats = click_data[1]
        timing["logging"] = time.perf_counter() - t0
        data = ClickBatch(features=logged.features, mask=logged.mask, n_sessions=stats.n_sessions,
                          clicks=stats.clicks, pairs=stats.pairs, pairs_lambda=stats.pairs_lambda)
        props = estimator_propensities(exp, logged, trial.y_max)
        out["_logging"] = {"sessions": stats.total_sessions, "clicks": stats.total_clicks,
                           **({"click_log": click_data[2]} if click_data is not None else {})}
    evaluator_kw = {"map_threshold": exp["eval"]["map_threshold"], "drop_no_relevant": exp["eval"]["drop_no_relevant"]}
    for name in estimators:
        t0 = time.perf_counter()
        if name == "production":
            res = dict(trial.production_metrics)
            res["epochs"] = trial.production.history["epochs"]
            if on_fit is not None:
                on_fit(name, trial.production_estimator, trial.production)
        elif name == "labeled":
            ck = ("labeled", exp["ranker"], json.dumps(exp["train"], sort_keys=True),
                  exp["estimator_options"]["labeled_form"])
            if ck not in trial.cache:
                est = _estimator(exp, "labeled")
                fr = fit(est, trial.labeled_train, jax.random.fold_in(key, 100), trial.n_features,
                         _train_cfg(exp, name), validate=make_validator(est, trial.vali))
                res = make_evaluator(est, trial.test, **evaluator_kw)(fr.params, fr.state)
                res.update(epochs=fr.history["epochs"], best_vali=fr.history["best_vali"])
                trial.cache[ck] = res
                if on_fit is not None:
                    on_fit(name, est, fr)
            res = dict(trial.cache[ck])
        else:
            est = _estimator(exp, name)
            fr = fit(est, data, jax.random.fold_in(key, 100), trial.n_features, _train_cfg(exp, name),
                     validate=make_validator(est, trial.vali), props=props)
            res = make_evaluator(est, trial.test, **evaluator_kw)(fr.params, fr.state)
            res.update(epochs=fr.history["epochs"], best_vali=fr.history["best_vali"])
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
    lines = [f"### {title}", ""] if title else []
    lines.append("| estimator | " + " | ".join(METRICS) + " | train s |")
    lines.append("|---|" + "---|" * (len(METRICS) + 1))
    for name, e in algos.items():
        cells = [f"{e[m]:.4f} ± {e['std'][m]:.4f}" for m in METRICS]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {e['seconds']:.1f} |")
    return "\n".join(lines) + "\n"


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


def enable_compilation_cache(path=None) -> None:
    """Persistent XLA compilation cache (repeated runs and sweeps recompile much less)."""
    path = path or pathlib.Path(__file__).resolve().parents[2] / ".cache" / "jax"
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def load_queryset(cfg, exp: dict):
    """The dataset of ``cfg.dataset`` (registry mapping) with every query kept (``min_docs: 0``)."""
    from ltrjax.data.registry import load_dataset

    ds = cfg.get("dataset") if hasattr(cfg, "get") else None
    if ds is None:
        from omegaconf import OmegaConf

        from ltrjax.schema import conf_dir

        ds = OmegaConf.load(conf_dir() / "dataset" / "synthetic.yaml")
    try:
        from omegaconf import OmegaConf

        ds = OmegaConf.to_container(ds, resolve=True) if OmegaConf.is_config(ds) else dict(ds)
    except ImportError:  # pragma: no cover
        ds = dict(ds)
    ds["min_docs"] = 0
    data = (cfg.get("data") if hasattr(cfg, "get") else None) or {}
    return load_dataset(ds, seed=int(exp["seed"]), cache_dir=data.get("cache_dir") or None)


RESUME_IGNORES = ("trials", "progress", "resume", "save_click_logs", "save_models")


def finished_trials(out_dir: pathlib.Path, exp: dict, qs) -> tuple[list[dict], list[dict]]:
    """(per-trial results, trial infos) already in ``out_dir/results.json`` for this configuration.

    A file written for another dataset or configuration (other than the trial count) is refused
    (``ltrjax.report.record.RunFolderError``).
    """
    from ltrjax.report.record import check_experiment

    old = check_experiment(out_dir, exp.get("kind", "offline"), _jsonable(exp), RESUME_IGNORES, getattr(qs, "name", "?"))
    if old is None:
        return [], []
    infos = list(old.get("trials_info") or [])
    trials = [{name: entry["trials"][t] for name, entry in old["algorithms"].items() if t < len(entry["trials"])}
              for t in range(len(infos))]
    return trials, infos


def _run_trial(trial: TrialData, exp: dict, qs, out_dir: pathlib.Path, t: int, click_log) -> dict:
    """``run_setting`` of one trial of ``run_offline``: from the click log if given, with its models saved
    under ``out_dir/models/`` and its logged sessions under ``out_dir/click_logs/`` when asked."""
    click_data, on_chunk, writer = None, None, None
    if click_log is not None:
        from ltrjax.offline.click_data import click_training_data

        click_data = click_training_data(click_log, qs, lambda y: click_relevance(y, exp, trial.y_max),
                                         chunk=int(exp["logging_chunk"]), path=str(exp["click_log"]))
    elif exp.get("save_click_logs"):
        from ltrjax.clicklog import ClickLogWriter
        from ltrjax.offline.click_data import logged_sessions

        writer = ClickLogWriter(out_dir / "click_logs" / f"trial{t}.parquet",
                                {"source": "offline", "dataset": getattr(qs, "name", "?"), "seed": trial.seed,
                                 "click_model": exp["click_model"]})
        on_chunk = lambda first, q, c: writer.write(logged_sessions(trial.logged, qs, first, q, c))  # noqa: E731
    on_fit = None
    if exp.get("save_models", True):
        spec = feature_spec(qs)

        def on_fit(name, est, fr):
            meta = {"kind": "offline", "estimator": name, "options": exp["estimator_options"],
                    "ranker": "linear" if name == "production" else exp["ranker"], "hidden": exp["hidden"],
                    "trial": t, "seed": trial.seed, "n_features": trial.n_features, "features": spec}
            save_model(model_path(out_dir, name, t), meta, fr.params, fr.state)
    try:
        return run_setting(trial, exp, click_data=click_data, on_chunk=on_chunk, on_fit=on_fit)
    finally:
        if writer is not None:
            writer.close()


def run_offline(cfg, out_dir, queryset=None) -> dict:
    """Run the offline table: every estimator, ``trials`` seeds; writes results.json and results.md."""
    exp = experiment_config(cfg)
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    qs = queryset if queryset is not None else load_queryset(cfg, exp)
    trials, infos = finished_trials(out_dir, exp, qs) if exp.get("resume", True) else ([], [])
    click_log = None
    if exp.get("click_log"):
        from ltrjax.clicklog import read_click_log

        click_log = read_click_log(exp["click_log"])
    from tqdm import tqdm

    results = None
    for t in tqdm(range(int(exp["trials"])), desc="offline trials", disable=not exp.get("progress", False)):
        seed = int(exp["seed"]) + t
        if t < len(trials):
            print(f"trial {t} (seed {seed}): finished in {out_dir / 'results.json'}, skipped", flush=True)
            continue
        print(f"trial {t} (seed {seed})", flush=True)
        trial = prepare_trial(qs, exp, seed)
        res = _run_trial(trial, exp, qs, out_dir, t, click_log)
        trials.append(res)
        infos.append({"seed": seed, **trial.info, **res.get("_logging", {}), "timing": res.get("_timing", {})})
        results = {"algorithms": summarize(trials, exp["estimators"]), "dataset": getattr(qs, "name", "?"),
                   "n_queries": int(qs.n_queries), "config": exp, "trials_info": infos,
                   "record": experiment_record(exp.get("kind", "offline"), cfg)}
        write_results(out_dir, _jsonable(results))
    if results is None:  # every trial was already there
        results = {"algorithms": summarize(trials, exp["estimators"]), "dataset": getattr(qs, "name", "?"),
                   "n_queries": int(qs.n_queries), "config": exp, "trials_info": infos,
                   "record": experiment_record(exp.get("kind", "offline"), cfg)}
    source = f"click log {exp['click_log']}" if exp.get("click_log") else f"n_sessions={exp['n_sessions']}"
    md = markdown_table(results["algorithms"], f"{results['dataset']}: {exp['click_model']} "
                        f"{source}, {len(trials)} trials")
    (out_dir / "results.md").write_text(md)
    print(md)
    return _jsonable(results)
