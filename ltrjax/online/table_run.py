"""The papers' online tables: algorithms x feature settings x trials, with significance and figures.

One run (``experiment=online_table`` or ``experiment=ucbrank_table``) writes to its output directory:

- ``results.json``  one entry per row (``ALGORITHM@SETTING``; EBRank and BM25 plain), per-trial values;
  rewritten after every finished trial, and read back by a rerun into the same directory (``resume``),
  which skips the trials already there — an interrupted run loses only the trial it was in;
- ``arrays/NAME/trialT.npz``  the paired units of the significance tests (per test query Warm/Cold NDCG,
  per test session NDCG);
- ``results.md``  the table (EBRank Table 3 layout) with Fisher randomization tests against the best row,
  the exploitation ratios (EBRank Table 4), the click rates of perfect documents by entry time
  (UCBRank Fig. 1) and the figures: ``ndcg_over_time.png`` (EBRank Fig. 3), ``click_rate_by_entry.png``,
  ``exploration_sweep.png`` (UCBRank Fig. 2, from the validation grids every trial runs anyway),
  ``eta_sweep.png`` (EBRank Fig. 4) and ``exploitation_ratio.png``.
"""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf
from tqdm.auto import tqdm

from ltrjax import stats
from ltrjax.data.queryset import TEST, QuerySet
from ltrjax.online import analysis, plots
from ltrjax.online.experiment import (
    LABELS,
    METRICS,
    build_simulator,
    make_policy,
    padded_data,
    result_name,
    run_header,
    trial_key,
    trial_record,
    tune_grid,
    tuned_trial,
)
from ltrjax.online.simulator import Simulator, TrialResult
from ltrjax.online.state import entered_mask, to_dataset_order
from ltrjax.online.table import exploitation_ratio_markdown, online_table_markdown
from ltrjax.results import ResultsWriter, atomic_write

log = logging.getLogger("ltrjax")
TABLE_METRICS = ("cold_ndcg", "warm_ndcg", "cum_ndcg")  # EBRank Table 3 column order


def safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


# --------------------------------------------------------------------------- per-trial measurements
def perfect_click_rates(sim: Simulator, result: TrialResult, n_bins: int) -> dict:
    """Click rate of perfect documents (label = y_max) by entry time (UCBRank Fig. 1), all splits."""
    clicks, entry, doc_query, perfect, entered = [], [], [], [], []
    for bucket, state in zip(sim.data.buckets, result.final_states):
        mask = np.asarray(bucket.doc_mask)
        entered.append(np.asarray(entered_mask(state))[mask])  # entry -1 means initial only for entered docs
        clicks.append(np.asarray(to_dataset_order(state.stats[0], state))[mask])
        entry.append(np.asarray(to_dataset_order(state.entry_session, state))[mask])
        doc_query.append(np.broadcast_to(np.asarray(bucket.query_index)[:, None], mask.shape)[mask])
        perfect.append((np.asarray(bucket.labels) == sim.data.y_max)[mask])
    clicks, entry, doc_query, perfect, entered = (np.concatenate(x) for x in (clicks, entry, doc_query, perfect,
                                                                             entered))
    warm_queries = np.asarray(result.warmup_query, np.int64)
    session_query = np.concatenate([warm_queries, np.asarray(result.session_query, np.int64)])
    n_warm = warm_queries.size
    candidates = analysis.candidate_sessions(session_query, entry, doc_query, entered=entered)
    return analysis.click_rate_by_entry(clicks, candidates, entry, perfect, first_main_session=n_warm,
                                        n_main_sessions=len(result.session_query), n_bins=n_bins, entered=entered)


def exploitation_ratios(policy, params) -> dict | None:
    """{"behaviour": |w_b| / sum |w|, "max_nonbehaviour": max_j |w_j| / sum |w|} of a linear model that
    sees the behaviour feature last (EBRank Table 4, Eq. 29), else None."""
    weights_of = getattr(policy, "linear_weights", None)
    weights = weights_of(params) if weights_of is not None else None
    if weights is None:
        return None
    ratios = analysis.exploitation_ratios(np.asarray(weights, np.float64), behaviour_index=-1)
    return {k: float(v) for k, v in ratios.items()}


def save_units(path: Path, sim: Simulator, result: TrialResult) -> None:
    """The paired units of the significance tests of one trial."""
    test_queries = np.flatnonzero(sim.data.split_of_query == TEST)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp.npz")
    np.savez_compressed(tmp, query=test_queries, query_warm=result.query_ndcg["warm"][test_queries],
                        query_cold=result.query_ndcg["cold"][test_queries],
                        session_ndcg=result.session_ndcg[result.session_split == TEST])
    tmp.replace(path)


# --------------------------------------------------------------------------- the runs
class TableRun:
    """Runs (or resumes) every algorithm x trial of one protocol into one output directory."""

    def __init__(self, cfg: DictConfig, out_dir: Path, sim: Simulator, header: dict, algorithms: dict,
                 trials: int, label: str):
        self.cfg, self.out_dir, self.sim, self.trials, self.label = cfg, Path(out_dir), sim, int(trials), label
        self.algorithms = algorithms
        ecfg = cfg.experiment
        self.tune = bool(ecfg.get("tune", True))
        self.tune_split = str(ecfg.get("tune_split", "vali"))
        self.n_points = int(ecfg.get("curve_points", 100))
        self.entry_bins = int(ecfg.get("entry_bins", 10))
        self.progress = bool(cfg.get("progress", True))
        self.writer = ResultsWriter(self.out_dir, header, METRICS)
        if bool(ecfg.get("resume", True)):
            n = self.writer.resume()
            if n:
                log.info("%s: resuming, %d finished trials found in %s", label, n, self.out_dir / "results.json")

    def units_path(self, name: str, trial: int) -> Path:
        return self.out_dir / "arrays" / safe_name(name) / f"trial{trial}.npz"

    def run(self) -> ResultsWriter:
        todo = [(key, trial) for key in self.algorithms for trial in range(self.trials)
                if not (self.writer.has_trial(result_name(key, self.algorithms[key]), trial)
                        and self.units_path(result_name(key, self.algorithms[key]), trial).exists())]
        bar = tqdm(total=len(todo), desc=self.label, unit="trial", disable=not self.progress)
        policies = {}
        for key, trial in todo:
            acfg = self.algorithms[key]
            name = result_name(key, acfg)
            if key not in policies:
                policies[key] = make_policy(name, acfg, self.sim.data, self.cfg.get("fit_overrides"), key)
            policy, tune = policies[key]
            grid = tune_grid(tune if self.tune else None)
            tic = time.perf_counter()
            best, chosen, scores = tuned_trial(self.sim, policy, grid, trial_key(self.cfg, trial), self.tune_split,
                                               progress=self.progress)
            record = trial_record(best, trial, chosen, self.n_points, scores if len(grid) > 1 else {})
            record["wall_seconds"] = time.perf_counter() - tic
            record["exploitation_ratio"] = exploitation_ratios(policy, best.final_params)
            record["click_rate_by_entry"] = perfect_click_rates(self.sim, best, self.entry_bins)
            save_units(self.units_path(name, trial), self.sim, best)
            self.writer.add_trial(name, record)
            bar.update(1)
            log.info("%s %-24s trial %d: Cum %.2f  Warm %.4f  Cold %.4f  %s(%.1f s)", self.label, name, trial,
                     record["cum_ndcg"], record["warm_ndcg"], record["cold_ndcg"],
                     f"chosen {chosen} " if chosen else "", record["wall_seconds"])
        bar.close()
        return self.writer


# --------------------------------------------------------------------------- the report
def paired_units(run: TableRun, names: list[str]) -> dict[str, dict[str, np.ndarray]]:
    """Per metric and row: the paired units over the trials every row finished."""
    trials = sorted(set.intersection(*({t["seed"] for t in run.writer.algorithms[n]["trials"]} for n in names)))
    gamma = run.sim.config.gamma
    units: dict[str, dict[str, np.ndarray]] = {m: {} for m in METRICS}
    for name in names:
        warm, cold, cum = [], [], []
        for trial in trials:
            with np.load(run.units_path(name, trial)) as z:
                warm.append(z["query_warm"])
                cold.append(z["query_cold"])
                cum.append(stats.discounted_contributions(z["session_ndcg"].astype(np.float64), gamma))
        units["warm_ndcg"][name], units["cold_ndcg"][name] = np.concatenate(warm), np.concatenate(cold)
        units["cum_ndcg"][name] = np.concatenate(cum)
    return units


def significance(run: TableRun, alpha: float, n_permutations: int) -> dict[str, dict[str, dict]]:
    names = [n for n in run.writer.algorithms if all(run.units_path(n, t["seed"]).exists()
                                                     for t in run.writer.algorithms[n]["trials"])]
    if len(names) < 2:
        return {}
    units = paired_units(run, names)
    return {m: stats.significance_vs_best(units[m], alpha=alpha, n_samples=n_permutations) for m in METRICS}


def sweep_series(algorithms: dict) -> dict[tuple, dict]:
    """Exploration-strength curves from the validation grids every trial runs anyway (rows tuning one
    hyper-parameter), grouped by (hyper-parameter, grid): {(hyper, grid): {row: {metric: per-point trials}}}."""
    groups: dict[tuple, dict] = {}
    for name, entry in algorithms.items():
        grids = [t.get("tuning") or {} for t in entry["trials"]]
        if not grids or not grids[0]:
            continue
        labels = list(grids[0])
        keys = {tuple(g["values"]) for g in grids[0].values()}
        if len(keys) != 1 or len(next(iter(keys))) != 1:
            continue
        hyper = next(iter(keys))[0]
        values = tuple(grids[0][lab]["values"][hyper] for lab in labels)
        groups.setdefault((hyper, values), {})[name] = {
            metric: [[g[lab][metric] for g in grids if lab in g] for lab in labels] for metric in METRICS}
    return groups


def click_rate_markdown(curves: dict[str, dict]) -> str:
    """UCBRank Fig. 1 as numbers: click rate of perfect documents per entry-time bin, mean over trials."""
    labels = next(iter(curves.values()))["labels"]
    lines = ["## Click rate of perfect documents by entry time (UCBRank Fig. 1)", "",
             "| method | " + " | ".join(str(x) for x in labels) + " |", "|---|" + "---:|" * len(labels)]
    for name, c in curves.items():
        cells = ["—" if not np.isfinite(r) else f"{r:.3f}" for r in np.asarray(c["rate"], np.float64)]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "#clicks / #sessions with the document as a candidate, for documents with the top label, by the "
                  "time they entered (first column: the initial candidates, whose clicks include the BM25 warm-up; "
                  "then equal bins of the main phase); mean over trials."]
    return "\n".join(lines)


def write_report(run: TableRun, title: str, wall: float, eta: dict | None) -> str:
    cfg = run.cfg.experiment
    order = [result_name(k, v) for k, v in run.cfg.algorithms.items()]  # the table's row order, even when resumed
    rank = {name: i for i, name in enumerate(order)}
    run.writer.algorithms = dict(sorted(run.writer.algorithms.items(), key=lambda kv: rank.get(kv[0], len(rank))))
    results = run.writer.as_dict()
    rows = results["algorithms"]
    sig = significance(run, float(cfg.get("alpha", 0.05)), int(cfg.get("permutations", 10000)))
    trial_wall = sum(t.get("wall_seconds", 0.0) for e in rows.values() for t in e["trials"])
    notes = (f"{results['dataset']}: {results['sessions']} sessions per trial "
             f"(+{results['warmup_sessions']} BM25 warm-up), {max(len(e['trials']) for e in rows.values())} trials; "
             f"test-split metrics, mean ± std over trials; wall time {wall:.0f} s for this invocation, "
             f"{trial_wall:.0f} s summed over the trials' own runs (a resumed run reuses earlier trials). "
             "Significance: Fisher "
             "randomization (paired sign-flip) tests against the best row over (trial, test query) units for "
             "Warm/Cold-NDCG and (trial, test session) discounted contributions for Cum-NDCG.")
    per_trial = {n: {m: [t[m] for t in e["trials"]] for m in METRICS} for n, e in rows.items()}
    parts = [online_table_markdown(per_trial, TABLE_METRICS, sig, title, notes, labels=LABELS)]
    ratios = {}
    for n, e in rows.items():
        found = [t["exploitation_ratio"] for t in e["trials"] if t.get("exploitation_ratio")]
        if found:
            ratios[n] = {k: [f[k] for f in found] for k in found[0]}
    if ratios:
        parts.append(exploitation_ratio_markdown(ratios, "Exploitation ratios of the linear models (EBRank Table 4)"))
        plots.plot_exploitation_ratio(ratios, run.out_dir / "exploitation_ratio.png",
                                      f"{results['dataset']}: exploitation ratios (EBRank Table 4)")
        parts.append("![exploitation ratios](exploitation_ratio.png)")
    curves = {n: analysis.average_click_rates([t["click_rate_by_entry"] for t in e["trials"]])
              for n, e in rows.items() if e["trials"] and all(t.get("click_rate_by_entry") for t in e["trials"])}
    if curves:
        plots.plot_click_rate_by_entry(curves, run.out_dir / "click_rate_by_entry.png",
                                       f"{results['dataset']}: click rate of perfect documents by entry time")
        parts.append(click_rate_markdown(curves))
        parts.append("![click rate of perfect documents by entry time](click_rate_by_entry.png)")
    for (hyper, values), series in sweep_series(rows).items():
        grid = "_".join(f"{v:g}" if isinstance(v, (int, float)) else str(v) for v in values)
        path = run.out_dir / f"exploration_sweep_{safe_name(hyper)}_{safe_name(grid)}.png"
        plots.plot_sweep(list(values), series, path, f"exploration strength ({hyper})", LABELS,
                         title=f"{results['dataset']}: test metrics against {hyper} (validation grid runs)")
        parts.append(f"![test metrics against {hyper}]({path.name})")
    plots.plot_ndcg_over_time(results, run.out_dir / "ndcg_over_time.png")
    parts.append("![NDCG over time](ndcg_over_time.png)")
    if eta:
        plots.plot_sweep(eta["x"], eta["series"], run.out_dir / "eta_sweep.png", "entry probability η", LABELS,
                         title=f"{results['dataset']}: metrics against the entry probability (EBRank Fig. 4)")
        parts.append("![metrics against the entry probability](eta_sweep.png)")
    text = "\n\n".join(parts) + "\n"
    atomic_write(run.out_dir / "results.md", text)
    run.writer.header["significance"] = sig
    run.writer.header["wall_seconds"] = wall
    run.writer.write()
    return text


def eta_sweep(cfg: DictConfig, out_dir: Path, data, main: TableRun) -> dict | None:
    """EBRank Fig. 4: selected algorithms rerun at other entry probabilities (the main run's value reused)."""
    scfg = cfg.experiment.get("eta_sweep")
    if not scfg or not scfg.get("values") or not scfg.get("algorithms"):
        return None
    keys = [k for k in scfg.algorithms if k in cfg.algorithms]
    missing = sorted(set(scfg.algorithms) - set(keys))
    if missing:
        log.warning("eta sweep: %s are not algorithms of this table; skipped", missing)
    trials = int(scfg.get("trials", 2))
    series = {result_name(k, cfg.algorithms[k]): {m: [] for m in METRICS} for k in keys}
    values = sorted(float(v) for v in scfg["values"])
    for eta in values:
        if eta == main.sim.config.entry_prob and main.trials >= trials:
            rows = main.writer.algorithms
        else:
            sim = build_simulator(cfg, data, entry_prob=eta)
            header = {**run_header(cfg, sim, None), "entry_prob": eta}
            algorithms = {k: cfg.algorithms[k] for k in keys}
            run = TableRun(cfg, out_dir / "eta_sweep" / f"eta_{eta:g}", sim, header, algorithms, trials,
                           f"η={eta:g}")
            rows = run.run().algorithms
        for name in series:
            for m in METRICS:
                series[name][m].append([t[m] for t in rows[name]["trials"][:trials]])
    return {"x": values, "series": series}


def selected_algorithms(cfg: DictConfig) -> dict:
    """``cfg.algorithms``, or the keys listed in ``experiment.only`` (in that order)."""
    only = cfg.experiment.get("only")
    if not only:
        return dict(cfg.algorithms)
    unknown = [k for k in only if k not in cfg.algorithms]
    if unknown:
        raise ValueError(f"experiment.only names {unknown}, which are not algorithms of this table; "
                         f"expected some of {list(cfg.algorithms)}")
    return {k: cfg.algorithms[k] for k in only}


def run_online_table(cfg: DictConfig, out_dir: Path, queryset: QuerySet) -> float:
    """The online table of ``cfg.algorithms`` under ``cfg.sim``; returns the best test Cum-NDCG."""
    tic = time.perf_counter()
    data = padded_data(cfg, queryset)
    sim = build_simulator(cfg, data)
    header = {**run_header(cfg, sim, queryset), "experiment": OmegaConf.to_container(cfg.experiment, resolve=True)}
    algorithms = selected_algorithms(cfg)
    log.info("%s: %d queries (%s), %d warm-up + %d sessions per trial, %d rows x %d trials", data.name,
             data.n_queries, header["queries_per_split"], header["warmup_sessions"], header["sessions"],
             len(algorithms), int(cfg.trials))
    main = TableRun(cfg, out_dir, sim, header, algorithms, int(cfg.trials), data.name)
    main.run()
    eta = eta_sweep(cfg, out_dir, data, main)
    table = write_report(main, str(cfg.experiment.get("title", "Online performance")), time.perf_counter() - tic,
                         eta)
    print(table)
    print(f"results written to {out_dir}")
    return max(entry["cum_ndcg"] for entry in main.writer.algorithms.values())
