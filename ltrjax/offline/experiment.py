"""The offline protocol (SPEC §6): production ranker, logging, every estimator, test metrics.

A trial is ``prepare_trial`` (splits, padded evaluation lists, production ranker, the presented list of every
logged training query: the whole candidate list by default, PRS §5.2; the labeled skyline's lists) followed by
``run_setting`` (log clicks up to the budget with one click model, train and evaluate each estimator on one
schedule); sweeps reuse a prepared trial across settings. Both take the typed ``OfflineConfig``
(``ltrjax.offline.config``). The runner of ``experiment=offline`` (trials, resume, results.json) is
``ltrjax.offline_runner``; its tables are ``ltrjax.report.offline_tables``.
"""

from __future__ import annotations

import dataclasses
import json
import time
import types

import jax
import jax.numpy as jnp
import numpy as np

from ltrjax.clicks import check_click_model_data, make_click_model, relevance
from ltrjax.data.layout import quantile_widths
from ltrjax.offline import click_likelihood, estimator_api
from ltrjax.offline.config import OfflineConfig, is_oracle
from ltrjax.offline.estimators import ClickBatch, LabeledBatch, Propensities
from ltrjax.offline.evaluate import KS, jitted_score, make_evaluator, make_validator
from ltrjax.offline.lists import bucket_queries, pad_queries
from ltrjax.offline.logging import (LoggedLists, log_click_stats, pad_positions, randomization_propensities,
                                    top_k_lists)
from ltrjax.offline.train import fit

# the table's columns (test split); results.json's trials hold every key of ``evaluate.query_metrics``
METRICS = tuple(f"ndcg@{k}" for k in KS) + ("map",) + tuple(f"dcg@{k}" for k in KS) + ("mrr@10", "err@10", "p@10")


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
    info = getattr(qs, "info", None) or {}
    graded = exp.eval.binarize == "auto" and info.get("graded_evaluation")  # real clicks: grades as they are
    eval_view = types.SimpleNamespace(features=qs.features, query_offsets=qs.query_offsets,
                                      labels=np.asarray(qs.labels, np.int32) if graded
                                      else evaluation_labels(qs.labels, exp, y_max))
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
                                  drop_no_relevant=exp.eval.drop_no_relevant, per_query=True)(prod.params, prod.state)
    prod_per_query = prod_metrics.pop("_per_query")

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
                     production_metrics=prod_metrics, info=info, cache={"production_per_query": prod_per_query})


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
                on_fit=None, per_query: bool = False) -> dict:
    """Log clicks with ``exp.click_model`` up to the budget and train/evaluate ``estimators`` (default: all).

    Estimators named ``*_oracle`` are told the true click model; the others what ``exp.propensities`` says.
    ``click_data`` = (LoggedLists, ClickStats, info) of a click log (``offline.click_data``) replaces the
    logging; ``on_chunk`` receives the logged sessions (``log_click_stats``); ``on_fit(name, estimator,
    FitResult)`` every trained model. ``per_query``: each result also holds ``"_per_query"`` (``make_evaluator``'s
    per-query test metrics; the caller takes them out before recording).
    """
    estimators = list(estimators or exp.estimators)
    k = int(trial.logged.mask.shape[1])
    key = jax.random.fold_in(jax.random.PRNGKey(trial.seed), 7)
    out = {}
    timing = {}
    heldout = click_data[3] if click_data is not None and len(click_data) > 3 else None  # click_likelihood.HeldOut
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
        if heldout is not None:  # the position-only reference click model (ltrjax.offline.click_likelihood)
            ctr = click_likelihood.rank_ctr(stats, logged.mask)[: heldout.mask.shape[1]]
            out["_logging"]["click_perplexity_rank_ctr"] = click_likelihood.per_rank(
                np.broadcast_to(ctr, heldout.mask.shape), heldout.clicks, heldout.mask)
    evaluator_kw = {"map_threshold": exp.eval.map_threshold, "drop_no_relevant": exp.eval.drop_no_relevant,
                    "per_query": per_query}
    for name in estimators:
        t0 = time.perf_counter()
        cfg = exp.train_for(name)
        if name == "production":
            res = dict(trial.production_metrics)
            if per_query:
                res["_per_query"] = trial.cache["production_per_query"]
            res["epochs"] = trial.production.history["epochs"]
            res["schedule"] = fit_schedule(trial.production, exp.train_for("production"))
            if on_fit is not None:
                on_fit(name, trial.production_estimator, trial.production)
        elif name == "labeled":
            ck = ("labeled", per_query, exp.ranker, json.dumps(dataclasses.asdict(cfg), sort_keys=True),
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
            p = (click_likelihood.click_probabilities(name, est, fr.params, fr.state, heldout)
                 if heldout is not None else None)
            if p is not None:
                res["click_perplexity"] = click_likelihood.per_rank(p, heldout.clicks, heldout.mask)
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
