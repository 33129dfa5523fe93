"""Paired comparison of two online runs of the same protocol (e.g. two retraining settings, or two commits).

For every row both runs have, over the trials both finished (paired by trial seed): mean ± std of
Cold/Warm/Cum-NDCG@5 in each run, the mean paired difference (B - A), and two tests of "no difference":

* unit level (``p_value``): Fisher randomization (paired sign-flip) over the (trial, test query) units of
  Warm/Cold-NDCG and the (trial, test session) discounted contributions of Cum-NDCG, read from each run's
  ``arrays/ROW/trialT.npz``. It treats a trial's sessions as independent, so it overstates the evidence when
  the two runs' trials follow different trajectories (another commit, another shuffle);
* trial level (``trial_p_value``): the same sign-flip test over the per-trial differences of the trials' own
  figures (exact: all 2^n sign patterns for n <= 16 trials), and a paired t-test (``trial_t_p_value``) beside
  it. The verdict reads this one: a metric is ``within_noise`` when ``trial_p_value >= alpha`` (default 0.05),
  a row when all three of its metrics are. With n trials the smallest possible p is 2 / 2^n (n >= 6 can
  reject at 0.05): with fewer, ``within_noise`` is None ("too few trials"), a test that cannot fail. Runs
  with no trial of a row in common are refused.

Writes ``results.md`` and ``results.json``.

    python experiments/compare_runs.py RUN_A RUN_B --labels papers fast --out docs/results/retrain_mq2008
    python experiments/compare_runs.py RUN_A RUN_B --labels 93b7d10 HEAD --alpha 0.05
    python experiments/compare_runs.py --smoke      # two tiny runs made on the fly, compared
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ltrjax.report import stats  # noqa: E402
from ltrjax.report.online_report import METRICS, safe_name  # noqa: E402
from ltrjax.record import NON_PROTOCOL_KEYS, protocol_of  # noqa: E402
from ltrjax.report.results import atomic_write, same_protocol  # noqa: E402


def units(run: Path, name: str, trial: int, gamma: float) -> dict[str, np.ndarray]:
    with np.load(run / "arrays" / safe_name(name) / f"trial{trial}.npz") as z:
        return {"warm_ndcg": z["query_warm"].astype(np.float64), "cold_ndcg": z["query_cold"].astype(np.float64),
                "cum_ndcg": stats.discounted_contributions(z["session_ndcg"].astype(np.float64), gamma)}


PROTOCOL_KEYS = ("dataset", "sessions", "sim", "click_model")


def protocol_check(a: dict, b: dict, labels: tuple[str, str]) -> dict:
    """Refuses runs of different protocols (``PROTOCOL_KEYS`` of their headers; ``sim`` without its reporting and
    performance keys). A setting that only one run records (a ``sim`` key added by a later commit, e.g.
    ``segment_widths``) is not a difference: it is returned, {"sim.segment_widths": {label: value}}, and reported
    with the results; so is a reporting or performance key whose values differ ({label: value, label: value})."""
    only = {}
    for key in PROTOCOL_KEYS:
        va, vb = a.get(key), b.get(key)
        if isinstance(va, dict) and isinstance(vb, dict):
            if key == "sim":
                for k in sorted(NON_PROTOCOL_KEYS):  # recorded by one run only, or with two values
                    by = {lab: run[k] for lab, run in zip(labels, (va, vb)) if k in run}
                    if len(by) == 1 or (len(by) == 2 and va[k] != vb[k]):
                        only[f"{key}.{k}"] = by
                va, vb = protocol_of(va), protocol_of(vb)
            for k in sorted(va.keys() ^ vb.keys()):
                lab, value = (labels[0], va[k]) if k in va else (labels[1], vb[k])
                only[f"{key}.{k}"] = {lab: value}
            common = va.keys() & vb.keys()
            va, vb = {k: va[k] for k in common}, {k: vb[k] for k in common}
        if not same_protocol(key, va, vb):
            raise SystemExit(f"compare_runs: the runs differ in {key!r}: {va!r} vs {vb!r}")
    return only


def trial_level(va: np.ndarray, vb: np.ndarray, alpha: float) -> dict:
    """The trial-level paired tests of one metric: sign-flip randomization over the per-trial differences
    (exact up to 16 trials) and a paired t-test, both two-sided; ``within_noise``: sign-flip p >= ``alpha``, or
    None where too few trials can reach p < ``alpha`` at all (smallest p: 2 / 2^n)."""
    from scipy import stats as scipy_stats

    d = vb - va
    if not len(d):
        raise ValueError("trial_level: no trials to compare")
    p = stats.paired_randomization_test(vb, va)
    if len(d) < 2 or not np.any(d != d[0]):  # t is undefined: no spread of the differences
        t_p = 1.0 if not np.any(d) else (0.0 if len(d) >= 2 else None)
    else:
        t_p = float(scipy_stats.ttest_rel(vb, va).pvalue)
    return {"trial_p_value": float(p), "trial_t_p_value": t_p, "trials_higher": int(np.sum(d > 0)),
            "trials_lower": int(np.sum(d < 0)),
            "within_noise": None if too_few_trials(len(d), alpha) else bool(p >= alpha)}


def too_few_trials(n: int, alpha: float) -> bool:
    """Whether ``n`` paired trials cannot reject at ``alpha``: the smallest two-sided sign-flip p is 2 / 2^n."""
    return 2.0 / 2.0 ** n >= alpha


def all_within(verdicts) -> bool | None:
    """A row's (or the comparison's) verdict from its parts: False if any moved, else None if any could not be
    tested (too few trials), else True."""
    verdicts = list(verdicts)
    return False if any(v is False for v in verdicts) else (None if any(v is None for v in verdicts) else True)


def compare(run_a: Path, run_b: Path, labels: tuple[str, str], n_samples: int = 10000, alpha: float = 0.05) -> dict:
    a, b = (json.loads((r / "results.json").read_text()) for r in (run_a, run_b))
    only = protocol_check(a, b, labels)
    gamma = float(a["sim"]["gamma"])
    rows = {}
    for name in [n for n in a["algorithms"] if n in b["algorithms"]]:
        trials = sorted({t["seed"] for t in a["algorithms"][name]["trials"]}
                        & {t["seed"] for t in b["algorithms"][name]["trials"]})
        if not trials:
            raise SystemExit(f"compare_runs: {run_a} and {run_b} have no trial of {name!r} in common (paired by "
                             "seed): nothing to compare")
        per = {lab: {t["seed"]: t for t in run["algorithms"][name]["trials"]} for lab, run in zip(labels, (a, b))}
        row = {"trials": trials, "population_seconds": {
            lab: sum({(t.get("population") or {}).get("wall_seconds", 0.0) for t in run["algorithms"][name]["trials"]})
            for lab, run in zip(labels, (a, b))}}
        for m in METRICS:
            va = np.array([per[labels[0]][t][m] for t in trials])
            vb = np.array([per[labels[1]][t][m] for t in trials])
            ua = np.concatenate([units(run_a, name, t, gamma)[m] for t in trials])
            ub = np.concatenate([units(run_b, name, t, gamma)[m] for t in trials])
            row[m] = {labels[0]: {"mean": float(va.mean()), "std": float(va.std(ddof=1)) if len(va) > 1 else 0.0},
                      labels[1]: {"mean": float(vb.mean()), "std": float(vb.std(ddof=1)) if len(vb) > 1 else 0.0},
                      "mean_difference": float((vb - va).mean()), "per_trial_difference": (vb - va).tolist(),
                      "p_value": stats.paired_randomization_test(ub, ua, n_samples=n_samples),
                      **trial_level(va, vb, alpha)}
        row["within_noise"] = all_within(row[m]["within_noise"] for m in METRICS)
        rows[name] = row
    made_by = {lab: sorted({(t.get("made_by") or {}).get("commit") or "not recorded"
                            for e in run["algorithms"].values() for t in e["trials"]})
               for lab, run in zip(labels, (a, b))}
    return {"runs": {labels[0]: str(run_a), labels[1]: str(run_b)}, "commits": made_by, "dataset": a["dataset"],
            "sessions": a["sessions"], "recorded_by_one_run_only": only, "alpha": alpha,
            "rule": f"a metric is within noise when its trial-level paired sign-flip p >= {alpha:g} (two-sided, "
                    "over the per-trial differences of trials paired by seed); a row when all its metrics are; none "
                    f"with fewer than {min_trials(alpha)} trials (too few trials: p cannot fall below {alpha:g})",
            "within_noise": all_within(r["within_noise"] for r in rows.values()), "rows": rows}


def markdown(result: dict, labels: tuple[str, str]) -> str:
    names = {"cold_ndcg": "Cold-NDCG@5", "warm_ndcg": "Warm-NDCG@5", "cum_ndcg": "Cum-NDCG@5"}
    lines = [f"# {labels[1]} vs {labels[0]} on {result['dataset']} ({result['sessions']} sessions per trial)", "",
             f"| row | trials | metric | {labels[0]} | {labels[1]} | difference ({labels[1]} − {labels[0]}) | "
             "p (session / query level) | p (trial level, sign-flip) | p (trial level, paired t) | higher / lower | "
             "within noise |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for name, row in result["rows"].items():
        for m in ("cold_ndcg", "warm_ndcg", "cum_ndcg"):
            cell = row[m]
            fmt = "{:.2f}" if abs(cell[labels[0]]["mean"]) >= 10 else "{:.4f}"
            t_p = "–" if cell["trial_t_p_value"] is None else p_text(cell["trial_t_p_value"])
            lines.append(f"| {name} | {len(row['trials'])} | {names[m]} | {fmt.format(cell[labels[0]]['mean'])} ± "
                         f"{fmt.format(cell[labels[0]]['std'])} | {fmt.format(cell[labels[1]]['mean'])} ± "
                         f"{fmt.format(cell[labels[1]]['std'])} | {cell['mean_difference']:+.4f} | "
                         f"{p_text(cell['p_value'])} | {p_text(cell['trial_p_value'])} | {t_p} | "
                         f"{cell['trials_higher']} / {cell['trials_lower']} | "
                         f"{NOISE_TEXT[cell['within_noise']]} |")
    walls = "; ".join(f"{name}: " + ", ".join(f"{k} {v:.0f} s" for k, v in row["population_seconds"].items())
                      for name, row in result["rows"].items())
    if result["within_noise"] is False:
        verdict = ("not every row is within noise: "
                   + ", ".join(n for n, r in result["rows"].items() if r["within_noise"] is False) + " moved")
    elif result["within_noise"] is None:
        verdict = (f"too few trials to tell (with n trials the smallest trial-level p is 2 / 2^n, not below "
                   f"{result['alpha']:g} for n < {min_trials(result['alpha'])}): "
                   + ", ".join(n for n, r in result["rows"].items() if r["within_noise"] is None))
    else:
        verdict = "every row is within noise"
    commits = "; ".join(f"{k}: {', '.join(v)}" for k, v in result.get("commits", {}).items())
    lines += ["", "Mean ± std over trials, trials paired by seed. Session / query level p: Fisher randomization "
              "(paired sign-flip) test over (trial, test query) units for Warm/Cold and (trial, test session) "
              "discounted contributions for Cum-NDCG (treats a trial's sessions as independent). Trial level p: the "
              "same test over the per-trial differences of the trials' own figures (exact up to 16 trials), and a "
              f"paired t-test; higher / lower: trials where {labels[1]}'s figure is above / below {labels[0]}'s.", "",
              f"**Verdict** (rule: {result['rule']}): {verdict}.", "",
              f"Commits that made the trials: {commits}. Wall time of each row's populations: {walls}."]
    if result.get("recorded_by_one_run_only"):
        lines += ["", "Settings only one run records, or that change no result (not compared): " + "; ".join(
            f"`{k}` = {', '.join(f'{v!r} ({lab})' for lab, v in by.items())}"
            for k, by in result["recorded_by_one_run_only"].items()) + "."]
    return "\n".join(lines) + "\n"


NOISE_TEXT = {True: "yes", False: "**no**", None: "too few trials"}


def min_trials(alpha: float) -> int:
    """The fewest paired trials whose trial-level test can reject at ``alpha``."""
    n = 1
    while too_few_trials(n, alpha) and n < 64:
        n += 1
    return n


def p_text(p: float) -> str:
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def smoke_runs(tmp: Path) -> tuple[Path, Path]:
    from hydra import compose, initialize_config_dir

    from ltrjax.data.toy import toy_queryset
    from ltrjax.runner import run_online
    from ltrjax.schema import as_run

    queryset = toy_queryset(n_queries=30, n_features=5, docs=(6, 14), y_max=2, seed=2, recipe="latent")
    out = []
    # the runs differ in EBRank's epsilon, a traced hyper-parameter: both run the same compiled programs
    for label, epsilon in (("a", 20.0), ("b", 10.0)):
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
            cfg = compose("config", overrides=[
                "experiment=online_table", "trials=2", "progress=false", "sim.sessions=300",
                "sim.warmup_sessions_per_query=2", "sim.n_updates=2", "sim.min_lanes=4", "experiment.tune=false",
                "experiment.eta_sweep.values=[]", "experiment.only=[ebrank]", "experiment.permutations=200",
                "algorithms.ebrank.fit.max_epochs=3", "algorithms.ebrank.fit.batch_size=32",
                f"algorithms.ebrank.epsilon={epsilon}", "algorithms.ebrank.min_impressions=1"])
        run_online(as_run(cfg), tmp / label, queryset)  # the runner takes the typed run
        out.append(tmp / label)
    return out[0], out[1]


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", type=Path, help="two run directories (A, B)")
    parser.add_argument("--labels", nargs=2, default=["A", "B"])
    parser.add_argument("--out", type=Path, default=None, help="where to write results.md/json (default: B)")
    parser.add_argument("--permutations", type=int, default=10000, help="sign patterns of the unit-level test")
    parser.add_argument("--alpha", type=float, default=0.05,
                        help="a metric is within noise when its trial-level sign-flip p is at least this")
    parser.add_argument("--smoke", action="store_true", help="compare two tiny runs made on the fly")
    args = parser.parse_args(argv)
    from ltrjax.experiment import configure_jax

    configure_jax()  # as ltrjax.run: float32 products, compiled programs persist between runs
    with tempfile.TemporaryDirectory() as tmp:
        runs = smoke_runs(Path(tmp)) if args.smoke else args.runs
        if len(runs) != 2:
            parser.error("give two run directories (or --smoke)")
        labels = tuple(args.labels)
        result = compare(runs[0], runs[1], labels, 200 if args.smoke else args.permutations, args.alpha)
        out = args.out or (Path(tmp) / "out" if args.smoke else runs[1])
        out.mkdir(parents=True, exist_ok=True)
        text = markdown(result, labels)
        atomic_write(out / "results.md", text)
        atomic_write(out / "results.json", json.dumps(result, indent=1))
    print(text)
    print(json.dumps({"rows": len(result["rows"]), "within_noise": result["within_noise"], "out": str(out)}))
    return result


if __name__ == "__main__":
    main()
