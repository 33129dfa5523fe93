"""The online comparison: algorithms x trials on one dataset, results written as they finish."""

from __future__ import annotations

import dataclasses
import fnmatch
import itertools
import logging
import time
from pathlib import Path

import jax
import numpy as np
from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf

from ltrjax.clicks import make_click_model
from ltrjax.data.layout import pad_and_bucket
from ltrjax.data.queryset import TEST, QuerySet
from ltrjax.online.plots import plot_ndcg_over_time
from ltrjax.online.policies.bm25 import BM25
from ltrjax.online.simulator import SimConfig, Simulator, TrialResult
from ltrjax.results import ResultsWriter

log = logging.getLogger("ltrjax")
METRICS = ("cum_ndcg", "warm_ndcg", "cold_ndcg")
LABELS = {"cum_ndcg": "Cum-NDCG@5", "warm_ndcg": "Warm-NDCG@5", "cold_ndcg": "Cold-NDCG@5"}


def tune_grid(tune: dict | None) -> list[dict]:
    """All combinations of a ``tune`` mapping {hyper: [values]}; [{}] when there is none."""
    if not tune:
        return [{}]
    names = sorted(tune)
    return [dict(zip(names, combo)) for combo in itertools.product(*(list(tune[n]) for n in names))]


def binned_curve(values: np.ndarray, n_points: int) -> list[float]:
    """Mean of ``values`` in ``n_points`` consecutive bins (for NDCG-over-time plots)."""
    if values.size == 0:
        return []
    bins = np.array_split(values, min(n_points, values.size))
    return [float(b.mean()) for b in bins]


SETTING_SUFFIXES = ("_wo_behav", "_concat", "_ie")


def result_name(key: str, acfg) -> str:
    """``ALGORITHM@SETTING`` for algorithms with a feature setting (``cftopk_concat`` -> ``cftopk@concat``,
    ``ucbrank_ctr`` with setting concat -> ``ucbrank_ctr@concat``); others (ebrank, bm25) keep their key."""
    setting = acfg.get("setting") if hasattr(acfg, "get") else None
    if not setting:
        return key
    base = key
    for suffix in SETTING_SUFFIXES:
        if base.endswith(suffix):
            base = base[: -len(suffix)]
            break
    return f"{base}@{setting}"


def trial_record(result: TrialResult, seed: int, chosen: dict, n_points: int, grid_scores: dict) -> dict:
    test = result.session_split == TEST
    return {
        "seed": seed,
        "cum_ndcg": result.cum_ndcg["test"],
        "warm_ndcg": result.warm_ndcg,
        "cold_ndcg": result.cold_ndcg,
        "cum_ndcg_vali": result.cum_ndcg["vali"],
        "cum_ndcg_train": result.cum_ndcg["train"],
        "chosen": chosen,
        "tuning": grid_scores,
        "eval_points": result.eval_points,
        "warm_history": [h["test"]["warm"] for h in result.eval_history],
        "cold_history": [h["test"]["cold"] for h in result.eval_history],
        "test_session_ndcg_curve": binned_curve(result.session_ndcg[test], n_points),
        "timings": result.timings,
        "retrains": len([i for i in result.train_info if not i.get("skipped")]),
        "train_last": result.train_info[-1] if result.train_info else None,
    }


def fit_override(key: str, overrides) -> dict:
    """The ``fit`` fields that ``overrides`` ({glob of algorithm keys: {field: value}}, conf/fit_overrides/)
    sets for algorithm ``key``; later globs win."""
    if isinstance(overrides, DictConfig):
        overrides = OmegaConf.to_container(overrides, resolve=True)
    out = {}
    for pattern, fields in (overrides or {}).items():
        if fnmatch.fnmatchcase(key, pattern):
            out.update(fields)
    return out


def make_policy(name: str, acfg: DictConfig, data, fit_overrides: dict | None = None, key: str | None = None):
    """The policy of algorithm config ``acfg`` (result name ``name``, config key ``key``) and its tune grid;
    ``fit_overrides`` replaces retraining settings of algorithms that have a ``fit`` block."""
    cfg = OmegaConf.to_container(acfg, resolve=True)
    override = fit_override(key or name, fit_overrides)
    if override and "fit" in cfg:
        cfg["fit"] = {**(cfg["fit"] or {}), **override}
    tune = cfg.pop("tune", None)
    policy_class = get_class(cfg.pop("_target_"))  # data is passed directly: Hydra would convert the dataclass
    policy = policy_class(data, **cfg)
    policy.name = name
    return policy, tune


def padded_data(cfg: DictConfig, queryset: QuerySet):
    return pad_and_bucket(queryset, int(cfg.layout.n_buckets), merge_tolerance=float(cfg.layout.merge_tolerance),
                          single_bucket_cells=int(cfg.layout.single_bucket_cells))


def build_simulator(cfg: DictConfig, data, **sim_overrides) -> Simulator:
    """The simulator of ``cfg.sim`` / ``cfg.click_model`` (BM25 warm-up when the data has a BM25 column)."""
    sim_cfg = SimConfig.from_mapping({**OmegaConf.to_container(cfg.sim, resolve=True), **sim_overrides})
    click_model = make_click_model(OmegaConf.to_container(cfg.click_model, resolve=True), sim_cfg.top_k,
                                   y_max=data.y_max)
    warmup = BM25(data) if data.bm25_column >= 0 else None
    if warmup is None and sim_cfg.warmup_sessions_per_query:
        log.warning("dataset %s has no BM25 column: the warm-up phase is skipped", data.name)
    return Simulator(data, click_model, sim_cfg, warmup_policy=warmup)


def run_header(cfg: DictConfig, sim: Simulator, queryset: QuerySet | None) -> dict:
    data = sim.data
    n_warm, n_main = sim.session_counts()
    return {
        "dataset": data.name,
        "sessions": n_main,
        "warmup_sessions": n_warm if sim.warmup_policy is not None else 0,
        "queries": data.n_queries,
        "queries_per_split": {s: int(np.sum(data.split_of_query == i)) for i, s in enumerate(("train", "vali", "test"))},
        "data_info": queryset.info if queryset is not None else None,
        "trials": int(cfg.trials),
        "click_model": OmegaConf.to_container(cfg.click_model, resolve=True),
        "sim": dataclasses.asdict(sim.config),
        "buckets": [list(b.labels.shape) for b in data.buckets],
    }


def trial_key(cfg: DictConfig, trial: int) -> jax.Array:
    """Trial t of every algorithm uses the same key: algorithms share their session and click draws."""
    return jax.random.fold_in(jax.random.PRNGKey(int(cfg.seed)), trial)


def tuned_trial(sim: Simulator, policy, grid: list[dict], key, tune_split: str, progress: bool):
    """Run every grid value; keep the best by Cum-NDCG on ``tune_split`` sessions.

    Returns (best result, chosen values, {grid label: validation and test metrics of that value}).
    """
    best, best_score, chosen, scores = None, -np.inf, {}, {}
    for hyper in grid:
        result = sim.run(policy, key, hyper=hyper, progress=progress)
        score = result.cum_ndcg[tune_split]
        scores[",".join(f"{k}={v}" for k, v in hyper.items()) or "default"] = {
            "values": hyper, "tune_score": score, "cum_ndcg": result.cum_ndcg["test"],
            "warm_ndcg": result.warm_ndcg, "cold_ndcg": result.cold_ndcg}
        if best is None or score > best_score:
            best, best_score, chosen = result, score, hyper
    return best, chosen, scores


def run_online(cfg: DictConfig, out_dir: Path, queryset: QuerySet) -> float:
    """Run every configured algorithm for ``cfg.trials`` trials; returns EBRank's (or the first) test Cum-NDCG."""
    tic = time.perf_counter()
    data = padded_data(cfg, queryset)
    sim = build_simulator(cfg, data)
    header = run_header(cfg, sim, queryset)
    n_main = header["sessions"]
    log.info("%s: %d queries (%s), %d warm-up + %d sessions per trial, buckets %s", data.name, data.n_queries,
             header["queries_per_split"], header["warmup_sessions"], n_main, header["buckets"])
    writer = ResultsWriter(out_dir, header, METRICS)
    tune_enabled = bool(cfg.experiment.get("tune", True))
    tune_split = str(cfg.experiment.get("tune_split", "vali"))
    n_points = int(cfg.experiment.get("curve_points", 200))
    progress = bool(cfg.get("progress", True))

    for key_name, acfg in cfg.algorithms.items():
        name = result_name(key_name, acfg)
        policy, tune = make_policy(name, acfg, data, cfg.get("fit_overrides"), key_name)
        grid = tune_grid(tune if tune_enabled else None)
        for trial in range(int(cfg.trials)):
            best, chosen, scores = tuned_trial(sim, policy, grid, trial_key(cfg, trial), tune_split, progress)
            record = trial_record(best, trial, chosen, n_points, scores if len(grid) > 1 else {})
            writer.add_trial(name, record)
            log.info("%-20s trial %d: Cum-NDCG %.2f  Warm %.4f  Cold %.4f  %s(%.1fs)", name, trial,
                     record["cum_ndcg"], record["warm_ndcg"], record["cold_ndcg"],
                     f"chosen {chosen} " if chosen else "", sum(best.timings.values()))
    wall = time.perf_counter() - tic
    writer.header["wall_seconds"] = wall
    writer.write()
    table = writer.write_markdown(
        f"Online results on {data.name} ({n_main} sessions, {int(cfg.trials)} trials)", LABELS,
        extra=f"Mean ± std over trials; test-split metrics. Wall time {wall:.1f} s.")
    plot_ndcg_over_time(writer.as_dict(), out_dir / "ndcg_over_time.png")
    print(table)
    print(f"results written to {out_dir}")
    algos = writer.algorithms
    return algos.get("ebrank", next(iter(algos.values())))["cum_ndcg"] if algos else float("nan")
