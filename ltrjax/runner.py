"""The one runner of the online experiments (``experiment=online``, ``online_table``, ``ucbrank_table``).

Per algorithm it forms one *population* — every unfinished trial x every value of the algorithm's
validation grid — and runs it as one compiled program (``Simulator.run_population``; chunked when
it would not fit in memory, ``population.max_members`` caps a chunk). Each trial keeps the grid
value with the best Cum-NDCG on validation-split sessions (``experiment.tune_split``); the trial's
record (test-split metrics of that value, and every grid value's scores) is written as soon as its
population finishes, so an interrupted run loses nothing finished and a rerun into the same
directory resumes. The run returns the *validation* objective (never a test-split figure), so a
Hydra sweeper tunes honestly.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import logging
import time
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from ltrjax.clicks import make_click_model
from ltrjax.data.checks import check_list_width
from ltrjax.data.layout import pad_and_bucket
from ltrjax.data.queryset import TEST, QuerySet
from ltrjax.online import host_random
from ltrjax.online.policies.bm25 import BM25
from ltrjax.online.simulator import Simulator, TrialResult, default_session_count
from ltrjax.measure import exploitation_ratios, memory_record, perfect_click_rates, save_units
from ltrjax.report.online_report import METRICS, safe_name, write_report, write_simple_report
from ltrjax.record import git_commit, protocol_of, run_record
from ltrjax.report.results import ResultsWriter
from ltrjax.report.tables import trials_phrase
from ltrjax.constraints import ConfigError
from ltrjax.schema import SETTING_SUFFIXES, row_name  # noqa: F401  (re-exported: the runner's row names)
from ltrjax.schema import (RESOLVED_CONFIG, UNSET, AlgorithmSpec, ResolvedRun, algorithm_spec,  # noqa: F401
                           check_segments, fit_override, write_resolved_config)
from ltrjax.saved import feature_spec, model_path, save_model

log = logging.getLogger("ltrjax")


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


def result_name(key: str, acfg) -> str:
    """``row_name`` of algorithm ``key``: ``acfg`` is its ``AlgorithmSpec`` or an algorithm mapping (``setting``
    read when written)."""
    if isinstance(acfg, AlgorithmSpec):
        return acfg.name
    return row_name(key, acfg["setting"] if "setting" in acfg else None)


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
        "fit_passes_per_retrain": fit_passes_per_retrain(result.train_info),
    }


def fit_passes_per_retrain(train_info: list[dict]) -> float | None:
    """Median over a run's retrains of the gradient passes over the training examples (``fit_passes`` of each
    fit's info); None when no retrain reports it."""
    passes = [i["fit_passes"] for i in train_info if not i.get("skipped") and "fit_passes" in i]
    return float(np.median(passes)) if passes else None


def make_policy(name: str, acfg, data, fit_overrides: dict | None = None, key: str | None = None):
    """The policy of algorithm ``acfg`` (result name ``name``, config key ``key``) and its tune grid.

    ``acfg`` is a row of the typed run (``ResolvedRun.algorithms[key]``, an ``AlgorithmSpec``: used as it is, its
    ``fit_overrides`` applied at the door) or, for scripts and tests, an algorithm mapping, resolved here once
    (``ltrjax.schema.algorithm_spec``: an unknown key or a value out of range raises ``ConfigError``;
    ``fit_overrides`` replaces retraining settings). ``data`` is passed directly (Hydra's instantiate would convert
    the dataclass)."""
    spec = algorithm_spec(key or name, acfg, fit_overrides)
    return spec.build(data, name), spec.tune


def bm25_fallback(run: ResolvedRun, data) -> ResolvedRun:
    """``run`` for data without a BM25 column (``dataset.bm25_feature`` null): every BM25 row (a ``BM25`` algorithm
    without ``feature``) ranks by ``dataset.warmup_feature`` instead, renamed ``feature_ID``, or is left out when
    that is null too; ``experiment.only``, ``objective``, ``click_rate_algorithms`` and ``eta_sweep.algorithms``
    follow. The warm-up (``build_simulator``) uses the same feature, or is skipped. Logs a warning naming
    ``dataset.bm25_feature``."""
    if data.bm25_column >= 0:
        return run
    feature = run.dataset["warmup_feature"]
    algorithms = run.algorithms
    rows = [k for k, a in algorithms.items()  # BM25 rows that set no feature (UNSET: not written)
            if a.cls is BM25 and a.options.feature in (UNSET, None)]
    new_key = {k: (None if feature is None else (f"feature_{feature}" if len(rows) == 1 else f"{k}_feature_{feature}"))
               for k in rows}
    if feature is None:
        log.warning("dataset %s has no BM25 feature (dataset.bm25_feature is null): the BM25 warm-up is skipped%s; "
                    "set dataset.warmup_feature=ID to rank them by another feature instead", data.name,
                    f" and the rows {rows} are left out" if rows else "")
    else:
        log.warning("dataset %s has no BM25 feature (dataset.bm25_feature is null): feature %d "
                    "(dataset.warmup_feature) ranks the warm-up sessions%s", data.name, feature,
                    f" and replaces the rows {rows} (now {list(new_key.values())})" if rows else "")
    if not rows:
        return run
    kept = {new_key.get(k, k): (a.with_options(new_key[k], feature=feature) if k in new_key else a)
            for k, a in algorithms.items() if new_key.get(k, k) is not None}
    if not kept:
        raise ConfigError("dataset.bm25_feature", None, "the only algorithm of this run is BM25 and the data has no "
                          "BM25 feature; set dataset.warmup_feature=ID to rank by another feature", show_value=False)
    exp = run.experiment
    names = {f.name for f in dataclasses.fields(exp)}

    def follow(keys):
        return None if keys is None else [new_key.get(k, k) for k in keys if new_key.get(k, k) is not None]

    changes = {}
    for field in ("only", "click_rate_algorithms"):
        keys = getattr(exp, field) if field in names else None
        if keys is not None:
            changes[field] = follow(keys)
            if keys and not changes[field]:
                raise ConfigError(f"experiment.{field}", keys, "names only BM25 rows, but the data has no BM25 "
                                  "feature (dataset.bm25_feature is null); set dataset.warmup_feature=ID to rank by "
                                  "another feature instead")
    if exp.objective in new_key:
        changes["objective"] = new_key[exp.objective]
    sweep = exp.eta_sweep if "eta_sweep" in names else None
    if sweep is not None and sweep.algorithms is not None:
        changes["eta_sweep"] = dataclasses.replace(sweep, algorithms=follow(sweep.algorithms))
    return run.replace(algorithms=kept, experiment=dataclasses.replace(exp, **changes))


def padded_data(run: ResolvedRun, queryset: QuerySet, features: list | None = None):
    """``queryset`` padded into ``run.layout``'s size buckets, at least ``run.sim.top_k`` wide (``features``: its
    feature matrix handed over, ``pad_and_bucket``'s)."""
    check_list_width(int(queryset.docs_per_query.max(initial=0)), run.sim.top_k, queryset.name)
    return pad_and_bucket(queryset, run.layout.n_buckets, merge_tolerance=run.layout.merge_tolerance,
                          single_bucket_cells=run.layout.single_bucket_cells, min_width=run.sim.top_k,
                          features=features)


def build_simulator(run: ResolvedRun, data, **sim_overrides) -> Simulator:
    """The simulator of ``run.sim`` (with ``sim_overrides``) and ``run.click_model`` (BM25 warm-up when the data has
    a BM25 column, else ``dataset.warmup_feature``'s ranking, else none)."""
    sim_cfg = dataclasses.replace(run.sim, **sim_overrides) if sim_overrides else run.sim
    click_model = make_click_model(run.click_model, sim_cfg.top_k, y_max=data.y_max)
    feature = run.dataset["warmup_feature"]
    warmup = BM25(data) if data.bm25_column >= 0 else (BM25(data, feature=int(feature)) if feature else None)
    if warmup is None and sim_cfg.warmup_sessions_per_query:
        log.info("dataset %s has no BM25 feature (dataset.bm25_feature) and no dataset.warmup_feature: the warm-up "
                 "phase is skipped", data.name)
    budget_gb, state_gb = run.population.memory_gb, run.population.cpu_state_gb
    return Simulator(data, click_model, sim_cfg, warmup_policy=warmup, max_members=run.population.max_members,
                     memory_budget=int(float(budget_gb) * (1 << 30)) if budget_gb else None,
                     state_budget=int(float(state_gb) * (1 << 30)) if state_gb else None)


def run_header(run: ResolvedRun, sim: Simulator, queryset: QuerySet | None) -> dict:
    data = sim.data
    n_warm, n_main = sim.session_counts()
    return {
        "dataset": data.name,
        "sessions": n_main,
        "warmup_sessions": n_warm if sim.warmup_policy is not None else 0,
        "queries": data.n_queries,
        "queries_per_split": {s: int(np.sum(data.split_of_query == i)) for i, s in enumerate(("train", "vali", "test"))},
        "data_info": queryset.info if queryset is not None else None,
        "trials": run.trials,
        "seed": run.seed,
        "click_model": run.click_model.settings(),
        "sim": dataclasses.asdict(sim.config),
        "buckets": [list(b.labels.shape) for b in data.buckets],
    }


ROW_EXPERIMENT_KEYS = ("kind", "tune", "tune_split", "curve_points", "entry_bins")  # what shapes a row's records


def row_settings(run: ResolvedRun, key: str, **sim_overrides) -> dict:
    """The fully resolved settings that make row ``key`` of ``run.algorithms`` (``resolve``'s run): the
    algorithm's options and ``_target_`` (its ``fit`` with ``fit_overrides`` applied), the click model, the
    protocol (``run.sim`` with ``sim_overrides``, without the reporting-only keys), the dataset, the seed and the
    experiment keys that shape a trial's record. Stored with the row in results.json; a rerun resumes the row only
    when these are identical (``ltrjax.record``). Trials, progress, caches and memory settings are not part
    of it: they do not change a trial."""
    sim = {**dataclasses.asdict(run.sim), **sim_overrides}
    return {"key": key, "experiment": {k: getattr(run.experiment, k) for k in ROW_EXPERIMENT_KEYS},
            "algorithm": run.algorithms[key].settings(), "click_model": run.click_model.settings(),
            "sim": protocol_of(sim), "dataset": copy.deepcopy(run.dataset), "seed": run.seed}


def trial_key(run: ResolvedRun, trial: int) -> np.ndarray:
    """Trial t of every algorithm uses the same key: algorithms share their session and click draws.
    ``jax.random.fold_in(jax.random.PRNGKey(seed), trial)``, computed on the host (``host_random``: a raw key)."""
    return host_random.fold_in(host_random.prng_key(int(run.seed)), trial)


def grid_label(values: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in values.items()) or "default"


def choose(results: list[TrialResult], grid: list[dict], tune_split: str) -> tuple[TrialResult, dict, dict]:
    """The grid value of one trial with the best Cum-NDCG on ``tune_split`` sessions (first on ties).

    Returns (its result, its values, {grid label: validation and test metrics of every value}).
    """
    scores = {grid_label(values): {"values": values, "tune_score": r.cum_ndcg[tune_split],
                                   "cum_ndcg": r.cum_ndcg["test"], "warm_ndcg": r.warm_ndcg,
                                   "cold_ndcg": r.cold_ndcg} for r, values in zip(results, grid)}
    best = int(np.argmax([r.cum_ndcg[tune_split] for r in results]))
    return results[best], grid[best], scores


def member_identity(cls: type, kwargs: dict, trial: int, values: dict) -> tuple:
    """What determines one member's simulation: the policy class, its constructor options ``kwargs`` (from
    ``AlgorithmSpec.kwargs``) other than its ``Hyper`` fields (which only set the default hyper-parameters), the
    member's hyper-parameters ``values`` over those defaults (float32, as the simulator traces them) and its trial.
    Two rows' members with equal identities simulate the same trial the same way (``ebrank_wo_explore`` is
    EBRank's epsilon=0 grid member), so the runner simulates such a member once (``OnlineRun.run``). Options
    compare as written: an option set in one row and left to its default in the other makes the identities
    differ (no sharing, never a wrong share)."""
    hyper_fields = {f.name: f.default for f in dataclasses.fields(cls.Hyper)}
    options = {k: v for k, v in kwargs.items() if k not in hyper_fields and k != "name"}

    def traced(value):
        return "unset" if value is dataclasses.MISSING else np.asarray(value, np.float32).tolist()

    hyper = tuple((n, traced(values.get(n, kwargs.get(n, default)))) for n, default in sorted(hyper_fields.items()))
    return f"{cls.__module__}.{cls.__qualname__}", repr(sorted(options.items())), hyper, int(trial)


class OnlineRun:
    """Runs (or resumes) every algorithm x trial of one protocol into one output directory."""

    def __init__(self, run: ResolvedRun, out_dir: Path, sim: Simulator, header: dict, algorithms: dict,
                 trials: int, label: str, queryset: QuerySet | None = None, sim_overrides: dict | None = None):
        self.cfg, self.out_dir, self.sim, self.trials, self.label = run, Path(out_dir), sim, int(trials), label
        self.algorithms = algorithms
        self.queryset = queryset  # with it, every trial's final parameters go to out_dir/models/ (ltrjax.saved)
        self.save_click_logs = run.save_click_logs and queryset is not None
        ecfg = run.experiment
        self.tune = ecfg.tune
        self.tune_split = ecfg.tune_split
        self.n_points = ecfg.curve_points
        self.entry_bins = ecfg.entry_bins
        self.progress = run.progress
        settings = {a.name: row_settings(run, k, **(sim_overrides or {})) for k, a in algorithms.items()}
        header = {**header, "record": run_record(ecfg.kind)}
        self.writer = ResultsWriter(self.out_dir, header, METRICS, settings)
        if ecfg.resume:
            n = self.writer.resume()
            if n:
                log.info("%s: resuming, %d finished trials found in %s", label, n, self.out_dir / "results.json")

    def units_path(self, name: str, trial: int) -> Path:
        return self.out_dir / "arrays" / safe_name(name) / f"trial{trial}.npz"

    def todo(self, key: str) -> list[int]:
        name = self.algorithms[key].name
        return [t for t in range(self.trials)
                if not (self.writer.has_trial(name, t) and self.units_path(name, t).exists())]

    def _members(self, todo: dict) -> dict:
        """Per row: its grid and each trial's member identities (``member_identity``)."""
        plan = {}
        for key, trials in todo.items():
            spec = self.algorithms[key]
            grid, kwargs = spec.grid(self.tune), spec.kwargs()
            plan[key] = (grid, {t: [member_identity(spec.cls, kwargs, t, v) for v in grid] for t in trials})
        return plan

    def run(self) -> ResultsWriter:
        """Every unfinished trial of every row, one population per row. A trial whose members all equal members
        of an earlier row of this run (``member_identity``) reuses their results instead of simulating them
        again; its record says so (``shared_with``)."""
        todo = {key: self.todo(key) for key in self.algorithms}
        plan = self._members(todo)
        wanted = {}  # identity -> the later rows that reuse it
        for i, key in enumerate(todo):
            for t, ids in plan[key][1].items():
                for j in list(todo)[:i]:
                    if t in plan[j][1] and all(m in plan[j][1][t] for m in ids):
                        for m in ids:
                            wanted.setdefault(m, set()).add(key)
                        break
        shared: dict = {}  # identity -> (row name, TrialResult), kept while a later row needs it
        bar = tqdm(total=sum(len(t) for t in todo.values()), desc=self.label, unit="trial",
                   disable=None if self.progress else True)  # None: off when stderr is not a terminal
        policies = {}  # every row's policy, checked to fit in memory before any simulation
        for key, trials in todo.items():
            if trials:
                policies[key] = self.algorithms[key].build(self.sim.data)
                self.sim.check_fits(policies[key])
        for key, trials in todo.items():
            if not trials:
                continue
            name = self.algorithms[key].name
            policy = policies.pop(key)
            grid, ids = plan[key]
            reused = [t for t in trials if all(m in shared for m in ids[t])]
            simulate = [t for t in trials if t not in reused]
            keys = [trial_key(self.cfg, t) for t in simulate for _ in grid]
            for trial in reused:
                lender = shared[ids[trial][0]][0]
                log.info("%s %-24s trial %d: the same members as %s's (same policy, options, hyper-parameters "
                         "and trial): reused, not simulated again", self.label, name, trial, lender)
                self._write_trial(key, name, policy, trial, [shared[m][1] for m in ids[trial]], grid, {
                    "shared_with": lender, "wall_seconds": 0.0,
                    "population": {"members": 0, "trials": 0, "grid": len(grid), "wall_seconds": 0.0}})
                bar.update(1)
            written = {}  # simulated trial -> its record, written as soon as its members have all run
            tic = time.perf_counter()

            def population(wall: float, **extra) -> dict:
                return {"members": len(keys), "trials": len(simulate), "grid": len(grid), "wall_seconds": wall,
                        **extra}

            def on_chunk(results: list) -> None:
                """After each chunk: every simulated trial whose members have now all run is written (an
                interrupted row keeps them); its time is the population's so far, shared by the trials written."""
                for i, t in enumerate(simulate):
                    members = results[i * len(grid):(i + 1) * len(grid)]
                    if t in written or len(members) < len(grid):
                        continue
                    for m, r in zip(ids[t], members):
                        if m in wanted:
                            shared[m] = (name, r)
                    elapsed = time.perf_counter() - tic
                    written[t] = self._write_trial(key, name, policy, t, members, grid, {
                        "wall_seconds": elapsed / (len(written) + 1),
                        "population": population(elapsed, finished=False)})
                    bar.update(1)

            if keys:
                self.sim.run_population(policy, keys, [values for _ in simulate for values in grid],
                                        progress=self.progress, keep_logs=self.save_click_logs, keep_states=False,
                                        on_chunk=on_chunk)  # records read perfect_docs
            wall = time.perf_counter() - tic
            for record in written.values():  # the whole population ran: its time, shared by its trials
                record["wall_seconds"] = wall / len(simulate)
                record["population"] = population(wall)
            if written:
                self.writer.write()
            if keys:
                log.info("%s %-24s %s x %d grid value%s = %d member%s in %.1f s", self.label, name,
                         trials_phrase(len(simulate)), len(grid), "s" * (len(grid) != 1), len(keys),
                         "s" * (len(keys) != 1), wall)
            for m in [m for t in trials for m in ids[t]]:  # drop what no later row needs
                if m in wanted:
                    wanted[m].discard(key)
                    if not wanted[m]:
                        shared.pop(m, None)
                        del wanted[m]
        bar.close()
        return self.writer

    def _write_trial(self, key: str, name: str, policy, trial: int, members: list[TrialResult], grid: list[dict],
                     timing: dict) -> dict:
        """One trial of row ``key``: the tuned choice among its ``members`` (one per grid value), its record (with
        ``timing``: wall time, population, or the lender of reused members) in ``results.json``, its paired units,
        model and click log; returns the record (kept in the writer: the population's final time goes into it)."""
        best, chosen, scores = choose(members, grid, self.tune_split)
        record = trial_record(best, trial, chosen, self.n_points, scores if len(grid) > 1 else {})
        record.update(timing)
        record["made_by"] = {"version": self.writer.header["record"]["version"], "commit": git_commit()}
        record["exploitation_ratio"] = exploitation_ratios(policy, best.final_params)
        record["click_rate_by_entry"] = perfect_click_rates(self.sim, best, self.entry_bins)
        save_units(self.units_path(name, trial), self.sim, best)
        self.save_outputs(key, name, trial, best, chosen)
        self.writer.add_trial(name, record)
        log.info("%s %-24s trial %d: Cum %.2f  Warm %.4f  Cold %.4f  %s", self.label, name, trial,
                 record["cum_ndcg"], record["warm_ndcg"], record["cold_ndcg"],
                 f"chosen {chosen}" if chosen else "")
        return record

    def save_outputs(self, key: str, name: str, trial: int, best: TrialResult, chosen: dict) -> None:
        """The trial's final parameters (``models/NAME/trialT.msgpack``) and, if asked, its main-phase
        sessions (``click_logs/NAME/trialT.parquet``)."""
        if self.queryset is None:
            return
        meta = {"kind": "online", "algorithm": name, "key": key, "trial": trial, "seed": self.cfg.seed,
                "config": self.algorithms[key].settings(), "chosen": chosen,
                "features": feature_spec(self.queryset)}
        save_model(model_path(self.out_dir, name, trial), meta, best.final_params)
        if self.save_click_logs:
            from ltrjax.clicklog import from_online_logs, write_click_log

            path = self.out_dir / "click_logs" / safe_name(name) / f"trial{trial}.parquet"
            write_click_log(path, from_online_logs(best.logs, self.queryset, self.sim.data.split_of_query),
                            {"source": "online", "algorithm": name, "trial": trial, "dataset": self.sim.data.name,
                             "click_model": self.cfg.click_model.settings()})

    def objective(self, key: str | None = None) -> float:
        """Mean over trials of the validation-split Cum-NDCG of ``key`` (default: ebrank, else the first row)."""
        rows = self.writer.algorithms
        if not rows:
            return float("nan")
        name = key if key in rows else ("ebrank" if "ebrank" in rows else next(iter(rows)))
        return float(np.mean([t["cum_ndcg_vali"] for t in rows[name]["trials"]]))


def eta_sweep(run: ResolvedRun, out_dir: Path, data, main: OnlineRun) -> dict | None:
    """EBRank Fig. 4: selected algorithms rerun at other entry probabilities (the main run's value reused)."""
    scfg = run.experiment.eta_sweep
    if scfg is None or not scfg.values or not scfg.algorithms:
        return None
    keys = [k for k in scfg.algorithms if k in run.algorithms]
    missing = sorted(set(scfg.algorithms) - set(keys))
    if missing:
        log.warning("eta sweep: %s are not algorithms of this table; skipped", missing)
    if not keys:
        return None
    trials = scfg.trials
    series = {run.algorithms[k].name: {m: [] for m in METRICS} for k in keys}
    values = sorted(float(v) for v in scfg.values)
    for eta in values:
        if eta == main.sim.config.entry_prob and main.trials >= trials:
            rows = main.writer.algorithms
        else:
            sim = build_simulator(run, data, entry_prob=eta)
            header = {**run_header(run, sim, None), "entry_prob": eta}
            algorithms = {k: run.algorithms[k] for k in keys}
            rerun = OnlineRun(run, out_dir / "eta_sweep" / f"eta_{eta:g}", sim, header, algorithms, trials,
                              f"η={eta:g}", queryset=main.queryset, sim_overrides={"entry_prob": eta})
            rows = rerun.run().algorithms
        for name in series:
            for m in METRICS:
                series[name][m].append([t[m] for t in rows[name]["trials"][:trials]])
    return {"x": values, "series": series}


def check_session_counts(run: ResolvedRun, sim: Simulator) -> None:
    """``ConfigError`` before any simulation when the main phase counted from the data (``sim.sessions`` null), of
    the run or of an η-sweep rerun, has fewer sessions than segments (``schema.check_segments``)."""
    cfg = sim.config
    if cfg.sessions is not None:
        return  # resolve checked it
    sweep = getattr(run.experiment, "eta_sweep", None)
    etas = [cfg.entry_prob, *(float(v) for v in (sweep.values if sweep is not None and sweep.algorithms else ()))]
    for eta in etas:
        n_main = default_session_count(sim.data, eta, cfg.session_count)
        check_segments(cfg, n_main, f" (sim.sessions null: {cfg.session_count}'s count for {sim.data.name} at "
                                    f"entry probability {eta:g})")


def selected_algorithms(run: ResolvedRun) -> dict:
    """``run.algorithms``, or the keys listed in ``experiment.only`` (in that order; ``resolve`` checked them)."""
    only = run.experiment.only
    if not only:
        return dict(run.algorithms)
    return {k: run.algorithms[k] for k in only}


def run_online(run: ResolvedRun, out_dir: Path, queryset: QuerySet, on_accepted=None, data=None) -> float:
    """Every algorithm of ``run.algorithms`` (``experiment.only``) x ``run.trials`` under ``run.sim``.

    ``run`` is ``ltrjax.schema.resolve``'s typed run (Python callers convert a config first:
    ``ltrjax.schema.as_run``). ``experiment.kind == "online"`` writes the plain comparison table, the table kinds
    the papers' report (significance, exploitation ratios, click rates, sweeps). Returns the validation objective
    (``experiment.objective``: an algorithm key; default ebrank, else the first row). ``on_accepted`` (if given)
    is called with the run (the BM25 fallback's rows included) once the run folder's finished rows are checked
    (``ResultsWriter.resume``), before any simulation: ``run_experiment`` records the resolved config there, so a
    refused run rewrites nothing. ``data``: ``queryset`` already laid out (``padded_data(run, queryset)``), so that
    the caller can release the flat features first (``QuerySet.without_features``; ``run_experiment`` does); None:
    laid out here.
    """
    if not isinstance(run, ResolvedRun):
        raise TypeError(f"run_online takes the typed run (ltrjax.schema.ResolvedRun), got {type(run).__name__}: "
                        "convert it with ltrjax.schema.as_run")
    tic = time.perf_counter()
    data = padded_data(run, queryset) if data is None else data
    run = bm25_fallback(run, data)
    sim = build_simulator(run, data)
    check_session_counts(run, sim)
    header = {**run_header(run, sim, queryset), "experiment": dataclasses.asdict(run.experiment)}
    algorithms = selected_algorithms(run)
    log.info("%s: %d queries (%s), %d warm-up + %d sessions per trial, %d rows x %d trials", data.name,
             data.n_queries, header["queries_per_split"], header["warmup_sessions"], header["sessions"],
             len(algorithms), run.trials)
    main = OnlineRun(run, out_dir, sim, header, algorithms, run.trials, data.name, queryset=queryset)
    if on_accepted is not None:
        on_accepted(run)  # the resolved config with the BM25 fallback's rows
    main.run()
    wall = time.perf_counter() - tic
    main.writer.header["wall_seconds"] = wall
    objective = main.objective(run.experiment.objective)
    main.writer.header["objective"] = {"metric": f"cum_ndcg_{main.tune_split}", "value": objective}
    if run.experiment.kind == "online":
        title = f"Online results on {data.name} ({header['sessions']} sessions, {trials_phrase(run.trials)})"
        main.writer.header.update(memory_record(queryset))  # peak_rss_bytes, feature_bytes and their ratio
        main.writer.write()
        table = write_simple_report(main, title, wall)
    else:
        eta = eta_sweep(run, out_dir, data, main)
        main.writer.header.update(memory_record(queryset))
        order = [spec.name for spec in run.algorithms.values()]  # the table's row order, even when resumed
        table = write_report(main, run.experiment.title, wall, eta, order)
    print(table)
    print(f"results written to {out_dir}; validation objective {objective:.4f}")
    return objective
