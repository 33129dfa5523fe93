"""Sweeps of the offline protocol (PRS Figs. 3-6, Vectorization Fig. 4), as tables and plots.

    python experiments/offline_sweeps.py --sweep eta --dataset mq2008 --trials 5
    python experiments/offline_sweeps.py --sweep dim_tiangong --dataset synthetic_mslr10k dataset.n_queries=3000

Sweeps (x values overridable with --values):
  clicks     experiment.n_clicks     (PRS Fig. 3; whole candidate lists; also reported as clicks per query)
  eta        click_model.eta         (PRS Fig. 4; position-bias severity, n_clicks fixed)
  noise      click_model.noise       (PRS Fig. 5; mu)
  misspec    assumed_eta             (PRS Fig. 6; true eta = 1)
  dim_tiangong / dim_trust           estimator_options.vectorization.dim (Vectorization Fig. 4) with the
             TianGong-ST matrix / graded trust bias on the production top-10 (5-grade data only); the scalar
             estimators (Affine learned, affine_oracle as a labelled upper reference) run once as references.
Each trial is prepared once (production ranker, logged lists) and reused across the x values.
Writes <out>/<sweep>.json, <sweep>.md and <sweep>.png after every x value.

``--smoke`` (for tests; seconds): the ``eta`` sweep unless ``--sweep`` is given, on the synthetic dataset
unless ``--dataset`` is given, 1 trial, the first two x values, two estimators (references: one), 100
queries, 20k sessions, 5 epochs; arguments given on the command line still win.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from offline_table import ROOT, SMOKE, SMOKE_DATASET, compose  # noqa: E402

PRS_ESTIMATORS = ["naive", "ips", "pns", "prs", "prs_lambda", "production"]
SWEEPS = {
    "clicks": {"key": "n_clicks", "values": [8000, 32000, 128000, 512000], "estimators": PRS_ESTIMATORS},
    "eta": {"key": "click_model.eta", "values": [0.0, 0.5, 1.0, 1.5, 2.0], "estimators": PRS_ESTIMATORS},
    "noise": {"key": "click_model.noise", "values": [0.0, 0.1, 0.2, 0.3, 0.4], "estimators": PRS_ESTIMATORS},
    "misspec": {"key": "assumed_eta", "values": [0.0, 0.5, 1.0, 1.5, 2.0], "estimators": PRS_ESTIMATORS},
    "dim_tiangong": {"key": "estimator_options.vectorization.dim", "values": [1, 2, 3, 4, 5],
                     "estimators": ["vectorization"],
                     "references": ["naive", "dla", "regression_em", "pair_debias", "affine", "affine_oracle",
                                    "production", "labeled"],
                     "base": {"click_model": {"kind": "tiangong", "relevance": "vectorization"}, "list_size": 10,
                              "n_sessions": 200_000, "eval": {"binarize": False},
                              "estimator_options": {"naive": {"form": "listwise"}}}},
    "dim_trust": {"key": "estimator_options.vectorization.dim", "values": [1, 2, 3, 4, 5],
                  "estimators": ["vectorization"],
                  "references": ["naive", "dla", "regression_em", "pair_debias", "affine", "affine_oracle",
                                 "production", "labeled"],
                  "base": {"click_model": {"kind": "trust_bias", "examination": "joachims", "eta": 1.0,
                                           "relevance": "vectorization", "noise": 0.0}, "list_size": 10,
                           "n_sessions": 200_000, "eval": {"binarize": False},
                           "estimator_options": {"naive": {"form": "listwise"}}}},
}


def _nested(dotted: str, value) -> dict:
    """{"a": {"b": value}} for "a.b"."""
    out = value
    for part in reversed(dotted.split(".")):
        out = {part: out}
    return out


def _plot(path, sweep, table, xlabel, logx, refs=None):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [float(x) for x in table]
    names = sorted({n for row in table.values() for n in row if not n.startswith("_")})
    for name in names:
        m = np.array([table[x][name]["ndcg@10"] if name in table[x] else np.nan for x in table])
        s = np.array([table[x][name]["std"]["ndcg@10"] if name in table[x] else np.nan for x in table])
        ax.plot(xs, m, marker="o", label=name)
        ax.fill_between(xs, m - s, m + s, alpha=0.15)
    for i, (name, ref) in enumerate((refs or {}).items()):
        ax.axhline(ref["ndcg@10"], ls="--", lw=1, color=f"C{(i + len(names)) % 10}", label=f"{name} (ref)")
    if logx:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("NDCG@10 (test)")
    ax.set_title(sweep)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


PAIRS = [("prs", "pns"), ("ips", "naive"), ("prs", "ips"), ("prs", "naive")]


def paired(a: dict, b: dict, metric: str = "ndcg@10"):
    """Mean and std over trials of the per-trial difference a - b (same seeds, same clicks)."""
    d = np.array([x[metric] for x in a["trials"]]) - np.array([y[metric] for y in b["trials"]])
    return float(d.mean()), float(d.std()), int((d > 0).sum()), len(d)


def markdown(sweep, key, table, refs, clicks) -> str:
    names = sorted({n for row in table.values() for n in row})
    lines = [f"### {sweep} ({key}); NDCG@10 mean ± std over trials", "",
             "| " + key + " | " + " | ".join(names) + " | mean logged clicks |",
             "|---|" + "---|" * (len(names) + 1)]
    for x, row in table.items():
        cells = [f"{row[n]['ndcg@10']:.4f} ± {row[n]['std']['ndcg@10']:.4f}" if n in row else "" for n in names]
        lines.append(f"| {x} | " + " | ".join(cells) + f" | {clicks.get(x, float('nan')):.0f} |")
    pairs = [(a, b) for a, b in PAIRS if a in names and b in names]
    if refs:
        pairs = [("vectorization", r) for r in refs if r not in ("production", "labeled")]
    if pairs:
        lines += ["", "Paired per-trial differences of NDCG@10 (mean ± std; trials where the first is ahead):", "",
                  "| " + key + " | " + " | ".join(f"{a} - {b}" for a, b in pairs) + " |",
                  "|---|" + "---|" * len(pairs)]
        for x, row in table.items():
            cells = []
            for a, b in pairs:
                ea, eb = row.get(a), row.get(b, refs.get(b))
                if ea is None or eb is None:
                    cells.append("")
                    continue
                m, sd, wins, n = paired(ea, eb)
                cells.append(f"{m:+.4f} ± {sd:.4f} ({wins}/{n})")
            lines.append(f"| {x} | " + " | ".join(cells) + " |")
    if refs:
        lines += ["", "Reference estimators (same click model, run once per trial):", "",
                  "| estimator | ndcg@1 | ndcg@3 | ndcg@5 | ndcg@10 | map |", "|---|---|---|---|---|---|"]
        for n, e in refs.items():
            lines.append(f"| {n} | " + " | ".join(f"{e[m]:.4f} ± {e['std'][m]:.4f}"
                                                  for m in ("ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "map")) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sweep", default=None, choices=sorted(SWEEPS), help="required unless --smoke (eta)")
    ap.add_argument("--dataset", default=None, help=f"conf/dataset/<name>.yaml (default: mq2008; --smoke: "
                                                    f"{SMOKE_DATASET})")
    ap.add_argument("--trials", type=int, default=None, help="default 5 (--smoke: 1)")
    ap.add_argument("--values", default=None, help="comma-separated x values")
    ap.add_argument("--estimators", default=None, help="comma-separated estimators")
    ap.add_argument("--references", default=None, help="comma-separated reference estimators (dim sweeps)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--smoke", action="store_true", help="a tiny sweep (seconds), for tests")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args(argv)
    from ltrjax.experiment import configure_jax

    configure_jax()  # as ltrjax.run: float32 products, compiled programs persist between runs
    if args.sweep is None:
        if not args.smoke:
            ap.error("--sweep is required (unless --smoke)")
        args.sweep = "eta"
    if args.smoke:
        spec = SWEEPS[args.sweep]
        args.dataset = args.dataset or SMOKE_DATASET
        args.trials = args.trials or 1
        args.values = args.values or ",".join(str(v) for v in spec["values"][:2])
        if "references" in spec:
            args.estimators = args.estimators or "vectorization"
            args.references = args.references or "naive"
        else:
            args.estimators = args.estimators or "naive,prs"
        args.overrides = [o for o in SMOKE if not o.startswith(("experiment.estimators", "experiment.trials"))
                          ] + args.overrides
    args.dataset = args.dataset or "mq2008"
    args.trials = args.trials or 5

    from ltrjax.offline.config import as_mapping, override
    from ltrjax.offline.experiment import METRICS, prepare_trial, run_setting
    from ltrjax.offline_runner import experiment_config, load_queryset, run_dataset
    from ltrjax.record import jsonable
    from ltrjax.report.offline_tables import summarize

    spec = SWEEPS[args.sweep]
    cfg = compose(args.dataset, args.overrides)
    base = override(experiment_config(cfg), {**spec.get("base", {}), "progress": False})
    values = [type(spec["values"][0])(v) for v in args.values.split(",")] if args.values else spec["values"]
    estimators = args.estimators.split(",") if args.estimators else spec["estimators"]
    out = pathlib.Path(args.out or ROOT / "outputs" / f"offline_sweeps_{args.dataset}{'_smoke' if args.smoke else ''}")
    out.mkdir(parents=True, exist_ok=True)
    qs = load_queryset(*run_dataset(cfg), seed=base.seed)
    from tqdm import tqdm

    trials = [prepare_trial(qs, base, int(base.seed) + t) for t in tqdm(range(args.trials), desc="prepare")]
    refs = {}
    ref_names = args.references.split(",") if args.references else spec.get("references")
    if ref_names:
        rows = [run_setting(tr, base, ref_names, log=lambda *_: None) for tr in trials]
        refs = summarize(rows, ref_names, METRICS)
    table, clicks = {}, {}
    for x in tqdm(values, desc=args.sweep):
        exp = override(base, _nested(spec["key"], x))
        rows = [run_setting(tr, exp, estimators, log=lambda *_: None) for tr in trials]
        table[x] = summarize(rows, estimators, METRICS)
        clicks[x] = float(np.mean([r["_logging"]["clicks"] for r in rows if "_logging" in r]))
        print(f"{spec['key']}={x}: " + ", ".join(f"{n} {e['ndcg@10']:.4f}" for n, e in table[x].items()), flush=True)
        (out / f"{args.sweep}.json").write_text(json.dumps(jsonable(
            {"sweep": args.sweep, "key": spec["key"], "dataset": qs.name, "trials": args.trials, "config": as_mapping(base),
             "table": {str(k): v for k, v in table.items()}, "references": refs, "clicks": clicks}), indent=1))
        (out / f"{args.sweep}.md").write_text(markdown(args.sweep, spec["key"], table, refs, clicks))
        _plot(out / f"{args.sweep}.png", f"{args.sweep} ({qs.name})", table, spec["key"], args.sweep == "clicks", refs)
    print(markdown(args.sweep, spec["key"], table, refs, clicks))


if __name__ == "__main__":
    main()
