"""Paired comparison of two online runs of the same protocol (e.g. two retraining settings).

For every row both runs have, over the trials both finished: mean ± std of Cold/Warm/Cum-NDCG@5 in each
run, the mean paired difference (B - A), and Fisher randomization (paired sign-flip) p-values over the
(trial, test query) units of Warm/Cold-NDCG and the (trial, test session) discounted contributions of
Cum-NDCG, read from each run's ``arrays/ROW/trialT.npz``. Writes ``results.md`` and ``results.json``.

    python experiments/compare_runs.py RUN_A RUN_B --labels papers fast --out docs/results/retrain_mq2008
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
from ltrjax.report.results import atomic_write, same_protocol  # noqa: E402


def units(run: Path, name: str, trial: int, gamma: float) -> dict[str, np.ndarray]:
    with np.load(run / "arrays" / safe_name(name) / f"trial{trial}.npz") as z:
        return {"warm_ndcg": z["query_warm"].astype(np.float64), "cold_ndcg": z["query_cold"].astype(np.float64),
                "cum_ndcg": stats.discounted_contributions(z["session_ndcg"].astype(np.float64), gamma)}


def compare(run_a: Path, run_b: Path, labels: tuple[str, str], n_samples: int = 10000) -> dict:
    a, b = (json.loads((r / "results.json").read_text()) for r in (run_a, run_b))
    for key in ("dataset", "sessions", "sim", "click_model"):
        if not same_protocol(key, a.get(key), b.get(key)):
            raise SystemExit(f"compare_runs: the runs differ in {key!r}: {a.get(key)!r} vs {b.get(key)!r}")
    gamma = float(a["sim"]["gamma"])
    rows = {}
    for name in [n for n in a["algorithms"] if n in b["algorithms"]]:
        trials = sorted({t["seed"] for t in a["algorithms"][name]["trials"]}
                        & {t["seed"] for t in b["algorithms"][name]["trials"]})
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
                      "p_value": stats.paired_randomization_test(ub, ua, n_samples=n_samples)}
        rows[name] = row
    return {"runs": {labels[0]: str(run_a), labels[1]: str(run_b)}, "dataset": a["dataset"],
            "sessions": a["sessions"], "rows": rows}


def markdown(result: dict, labels: tuple[str, str]) -> str:
    names = {"cold_ndcg": "Cold-NDCG@5", "warm_ndcg": "Warm-NDCG@5", "cum_ndcg": "Cum-NDCG@5"}
    lines = [f"# {labels[1]} vs {labels[0]} on {result['dataset']} ({result['sessions']} sessions per trial)", "",
             f"| row | metric | {labels[0]} | {labels[1]} | difference ({labels[1]} − {labels[0]}) | p |",
             "|---|---|---:|---:|---:|---:|"]
    for name, row in result["rows"].items():
        for m in ("cold_ndcg", "warm_ndcg", "cum_ndcg"):
            cell = row[m]
            fmt = "{:.2f}" if abs(cell[labels[0]]["mean"]) >= 10 else "{:.4f}"
            lines.append(f"| {name} | {names[m]} | {fmt.format(cell[labels[0]]['mean'])} ± "
                         f"{fmt.format(cell[labels[0]]['std'])} | {fmt.format(cell[labels[1]]['mean'])} ± "
                         f"{fmt.format(cell[labels[1]]['std'])} | {cell['mean_difference']:+.4f} | "
                         f"{cell['p_value']:.3f} |")
    walls = "; ".join(f"{name}: " + ", ".join(f"{k} {v:.0f} s" for k, v in row["population_seconds"].items())
                      for name, row in result["rows"].items())
    lines += ["", f"{len(next(iter(result['rows'].values()))['trials'])} trials; mean ± std over trials; p: Fisher "
              "randomization (paired sign-flip) test over (trial, test query) units for Warm/Cold and (trial, test "
              f"session) discounted contributions for Cum-NDCG. Wall time of each row's populations: {walls}."]
    return "\n".join(lines) + "\n"


def smoke_runs(tmp: Path) -> tuple[Path, Path]:
    from hydra import compose, initialize_config_dir

    from ltrjax.data.toy import toy_queryset
    from ltrjax.runner import run_online

    queryset = toy_queryset(n_queries=30, n_features=5, docs=(6, 14), y_max=2, seed=2, recipe="latent")
    out = []
    for label, batch in (("a", 32), ("b", 64)):
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
            cfg = compose("config", overrides=[
                "experiment=online_table", "trials=2", "progress=false", "sim.sessions=300",
                "sim.warmup_sessions_per_query=2", "sim.n_updates=2", "sim.min_lanes=4", "experiment.tune=false",
                "experiment.eta_sweep.values=[]", "experiment.only=[ebrank]", "experiment.permutations=200",
                "algorithms.ebrank.fit.max_epochs=3", f"algorithms.ebrank.fit.batch_size={batch}",
                "algorithms.ebrank.min_impressions=1"])
        run_online(cfg, tmp / label, queryset)
        out.append(tmp / label)
    return out[0], out[1]


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", type=Path, help="two run directories (A, B)")
    parser.add_argument("--labels", nargs=2, default=["A", "B"])
    parser.add_argument("--out", type=Path, default=None, help="where to write results.md/json (default: B)")
    parser.add_argument("--permutations", type=int, default=10000)
    parser.add_argument("--smoke", action="store_true", help="compare two tiny runs made on the fly")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        runs = smoke_runs(Path(tmp)) if args.smoke else args.runs
        if len(runs) != 2:
            parser.error("give two run directories (or --smoke)")
        labels = tuple(args.labels)
        result = compare(runs[0], runs[1], labels, 200 if args.smoke else args.permutations)
        out = args.out or (Path(tmp) / "out" if args.smoke else runs[1])
        out.mkdir(parents=True, exist_ok=True)
        text = markdown(result, labels)
        atomic_write(out / "results.md", text)
        atomic_write(out / "results.json", json.dumps(result, indent=1))
    print(text)
    print(json.dumps({"rows": len(result["rows"]), "out": str(out)}))
    return result


if __name__ == "__main__":
    main()
