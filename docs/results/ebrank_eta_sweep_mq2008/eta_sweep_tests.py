"""EBRank Fig. 4 (robustness to the entry probability η): at every η of the run's sweep, every row against the
column's best by a two-sided paired t-test over the trials (ltrjax.report.stats.trial_level_vs_best); the paper's
claim: "EBRank consistently significantly outperforms all other algorithms under different item entering speeds".
Usage: python docs/results/ebrank_eta_sweep_mq2008/eta_sweep_tests.py RUN_DIR OUT_DIR   (reads RUN_DIR/results.json and RUN_DIR/eta_sweep/eta_*/results.json;
writes OUT_DIR/eta_sweep.json and .md)"""
import json
import sys
from pathlib import Path

import numpy as np

from ltrjax.report import stats
from ltrjax.report.online_report import per_trial_values

METRICS = ("cum_ndcg", "warm_ndcg", "cold_ndcg")


def main(run_dir: str, out_dir: str) -> None:
    run = Path(run_dir)
    main_json = json.load(open(run / "results.json"))
    sweep = {float(main_json["sim"]["entry_prob"]): main_json}
    for f in sorted(run.glob("eta_sweep/eta_*/results.json")):
        sweep[float(f.parent.name.removeprefix("eta_"))] = json.load(open(f))
    rows = list(json.load(open(run / "results.json"))["algorithms"])
    out, lines = {}, ["# EBRank Fig. 4 on MQ2008: every row against the best at each entry probability", "",
                      "Mean ± std over trials (unit: trial); marks from two-sided paired t-tests over the trials "
                      "against the column's best at that η (`ltrjax.report.stats.trial_level_vs_best`): ▾ "
                      "significantly below the best (p < .05), * the best is significantly above every other row.", ""]
    for m in METRICS:
        lines += [f"## {m}", "", "| row | " + " | ".join(f"η = {e:g}" for e in sorted(sweep)) + " |",
                  "|---|" + "---:|" * len(sweep)]
        tests = {}
        for eta in sorted(sweep):
            vals = per_trial_values(sweep[eta]["algorithms"])[m]
            tests[eta] = stats.trial_level_vs_best({k: vals[k] for k in rows if k in vals})
        for k in rows:
            cells = []
            for eta in sorted(sweep):
                t = tests[eta].get(k)
                if t is None:
                    cells.append("—")
                    continue
                v = np.array(list(per_trial_values(sweep[eta]["algorithms"])[m][k].values()), np.float64)
                mark = ("*" if t.get("best_significant") else "") if t["best"] else (
                    f" ▾ (p = {t['p_value']:.2g})" if t["significantly_worse"] else f" (p = {t['p_value']:.2g})")
                fmt = "{:.2f}" if m == "cum_ndcg" else "{:.4f}"
                cells.append(fmt.format(v.mean()) + " ± " + fmt.format(v.std(ddof=1)) + mark)
            lines.append(f"| {k} | " + " | ".join(cells) + " |")
        lines.append("")
        out[m] = {f"{eta:g}": tests[eta] for eta in sorted(sweep)}
    best = {m: {f"{eta:g}": next(k for k, x in out[m][f"{eta:g}"].items() if x["best"]) for eta in sorted(sweep)}
            for m in METRICS}
    out["best_row"] = best
    out["sessions"] = {f"{eta:g}": sweep[eta]["sessions"] for eta in sorted(sweep)}
    out["trials"] = {f"{eta:g}": max(len(e["trials"]) for e in sweep[eta]["algorithms"].values()) for eta in sorted(sweep)}
    lines += ["Sessions per trial by η (EBRank Eq. 28): " + ", ".join(f"{e}: {n}" for e, n in out["sessions"].items())
              + "; trials by η: " + ", ".join(f"{e}: {n}" for e, n in out["trials"].items()) + "."]
    Path(out_dir, "eta_sweep.json").write_text(json.dumps(out, indent=1))
    Path(out_dir, "eta_sweep.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(*sys.argv[1:3])
