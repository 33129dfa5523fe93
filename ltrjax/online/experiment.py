"""The online comparison: algorithms x trials on one dataset, results written as they finish."""

from __future__ import annotations

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
from ltrjax.data.queryset import QuerySet
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


def trial_record(result: TrialResult, seed: int, chosen: dict, n_points: int, grid_scores: dict) -> dict:
    test = result.session_split == 2
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


def make_policy(name: str, acfg: DictConfig, data):
    cfg = OmegaConf.to_container(acfg, resolve=True)
    tune = cfg.pop("tune", None)
    policy_class = get_class(cfg.pop("_target_"))  # data is passed directly: Hydra would convert the dataclass
    policy = policy_class(data, **cfg)
    policy.name = name
    return policy, tune


def run_online(cfg: DictConfig, out_dir: Path, queryset: QuerySet) -> float:
    """Run every configured algorithm for ``cfg.trials`` trials; returns EBRank's (or the first) test Cum-NDCG."""
    tic = time.perf_counter()
    data = pad_and_bucket(queryset, int(cfg.layout.n_buckets), merge_tolerance=float(cfg.layout.merge_tolerance),
                          single_bucket_cells=int(cfg.layout.single_bucket_cells))
    sim_cfg = SimConfig.from_mapping(cfg.sim)
    click_model = make_click_model(OmegaConf.to_container(cfg.click_model, resolve=True), sim_cfg.top_k,
                                   y_max=data.y_max)
    warmup = BM25(data) if data.bm25_column >= 0 else None
    if warmup is None:
        log.warning("dataset %s has no BM25 column: the warm-up phase is skipped", data.name)
    sim = Simulator(data, click_model, sim_cfg, warmup_policy=warmup)
    n_warm, n_main = sim.session_counts()
    header = {
        "dataset": data.name,
        "sessions": n_main,
        "warmup_sessions": n_warm if warmup is not None else 0,
        "queries": data.n_queries,
        "queries_per_split": {s: int(np.sum(data.split_of_query == i)) for i, s in enumerate(("train", "vali", "test"))},
        "data_info": queryset.info,
        "trials": int(cfg.trials),
        "click_model": OmegaConf.to_container(cfg.click_model, resolve=True),
        "sim": OmegaConf.to_container(cfg.sim, resolve=True),
        "buckets": [list(b.labels.shape) for b in data.buckets],
    }
    log.info("%s: %d queries (%s), %d warm-up + %d sessions per trial, buckets %s", data.name, data.n_queries,
             header["queries_per_split"], header["warmup_sessions"], n_main, header["buckets"])
    writer = ResultsWriter(out_dir, header, METRICS)
    tune_enabled = bool(cfg.experiment.get("tune", True))
    tune_split = str(cfg.experiment.get("tune_split", "vali"))
    n_points = int(cfg.experiment.get("curve_points", 200))
    progress = bool(cfg.get("progress", True))

    for name, acfg in cfg.algorithms.items():
        policy, tune = make_policy(name, acfg, data)
        grid = tune_grid(tune if tune_enabled else None)
        for trial in range(int(cfg.trials)):
            key = jax.random.fold_in(jax.random.PRNGKey(int(cfg.seed)), trial)
            best, best_score, scores = None, -np.inf, {}
            for hyper in grid:
                result = sim.run(policy, key, hyper=hyper, progress=progress)
                score = result.cum_ndcg[tune_split]
                scores[",".join(f"{k}={v}" for k, v in hyper.items()) or "default"] = score
                if score > best_score:
                    best, best_score, chosen = result, score, hyper
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
