"""UCBRank Tables 2-3, MQ2008 column: this run's rows against the paper's cells, and the paper's * marks (best of its
feature setting) tested at the trial level (ltrjax.report.stats.trial_level_vs_best over the setting's rows).
Usage: python docs/results/ucbrank_table_mq2008/paper_comparison.py RUN_DIR/results.json OUT_DIR   (writes OUT_DIR/paper_comparison.json and .md)"""
import json
import sys
from pathlib import Path

import numpy as np

from ltrjax.report import stats
from ltrjax.report.online_report import per_trial_values

# UCBRank (SIGIR'22) Table 2 (c-NDCG@5) and Table 3 (NDCG@5, warm / cold), MQ2008 column.
PAPER = {  # row: (setting, strategy, Cum, Warm, Cold)
    "ucb_topk@wo_behav": ("w/o-behav", "Top-k", 121.9, .610, .610),
    "ucb_randomk@wo_behav": ("w/o-behav", "Random-k", 76.42, .607, .607),
    "ucb_epsilon@wo_behav": ("w/o-behav", "EpsilonRank", 119.2, .618, .618),
    "pdgd@wo_behav": ("w/o-behav", "PDGD", 95.93, .632, .632),
    "ucbrank@wo_behav": ("w/o-behav", "UCBRank", 128.7, .643, .643),
    "ucb_topk_ctr@concat": ("w-ctr", "Top-k", 143.7, .717, .505),
    "ucb_randomk_ctr@concat": ("w-ctr", "Random-k", 76.27, .875, .445),
    "ucb_epsilon_ctr@concat": ("w-ctr", "EpsilonRank", 163.1, .839, .401),
    "pdgd_ctr@concat": ("w-ctr", "PDGD", 122.4, .830, .636),
    "ucbrank_ctr@concat": ("w-ctr", "UCBRank", 147.7, .747, .528),
    "ucb_topk@concat": ("w-Δ", "Top-k", 109.4, .541, .540),
    "ucb_randomk@concat": ("w-Δ", "Random-k", 78.42, .871, .552),
    "ucb_epsilon@concat": ("w-Δ", "EpsilonRank", 118.4, .632, .543),
    "pdgd@concat": ("w-Δ", "PDGD", 161.0, .836, .584),
    "ucbrank@concat": ("w-Δ", "UCBRank", 172.0, .885, .542),
    "ucb_topk@ie": ("IE", "Top-k", 149.1, .758, .617),
    "ucb_randomk@ie": ("IE", "Random-k", 77.18, .872, .625),
    "ucb_epsilon@ie": ("IE", "EpsilonRank", 165.0, .876, .619),
    "ucbrank@ie": ("IE", "UCBRank", 174.0, .893, .622),
}
# The paper's * (significantly above every other row of its setting) in the MQ2008 column; † (above all rows) on
# UCBRank-IE's Cum only. (metric, setting) -> starred strategy.
PAPER_STARS = {("cum_ndcg", "w/o-behav"): "UCBRank", ("cum_ndcg", "w-ctr"): "EpsilonRank",
               ("cum_ndcg", "w-Δ"): "UCBRank", ("cum_ndcg", "IE"): "UCBRank",
               ("warm_ndcg", "w/o-behav"): "UCBRank", ("warm_ndcg", "w-ctr"): "Random-k",
               ("warm_ndcg", "w-Δ"): "UCBRank", ("warm_ndcg", "IE"): "UCBRank",
               ("cold_ndcg", "w/o-behav"): "UCBRank", ("cold_ndcg", "w-ctr"): "PDGD",
               ("cold_ndcg", "w-Δ"): "PDGD", ("cold_ndcg", "IE"): None}
METRICS = ("cum_ndcg", "warm_ndcg", "cold_ndcg")


def main(results_json: str, out_dir: str) -> None:
    r = json.load(open(results_json))
    values = per_trial_values(r["algorithms"])
    rows = [k for k in PAPER if k in r["algorithms"]]
    cells = {}
    for k in rows:
        setting, strategy, *paper = PAPER[k]
        cells[k] = {"setting": setting, "strategy": strategy, "n_trials": len(values["cum_ndcg"][k])}
        for m, p in zip(METRICS, paper):
            v = np.array(list(values[m][k].values()), np.float64)
            cells[k][m] = {"mean": float(v.mean()), "std": float(v.std(ddof=1)) if v.size > 1 else None,
                           "paper": p, "diff": float(v.mean() - p), "rel_diff": float(v.mean() / p - 1)}
    stars = {}
    for (m, setting), star in PAPER_STARS.items():
        members = [k for k in rows if PAPER[k][0] == setting]
        if len(members) < 2:
            continue
        test = stats.trial_level_vs_best({k: values[m][k] for k in members})
        best = next(k for k, x in test.items() if x["best"])
        worst_p = max((x["p_value"] for x in test.values() if not x["best"] and x["p_value"] is not None),
                      default=None)
        stars[f"{m}|{setting}"] = {"paper_star": star, "rows": members, "complete": len(members) == sum(
            PAPER[k][0] == setting for k in PAPER), "our_best": PAPER[best][1], "our_best_row": best,
            "our_best_significant": test[best]["best_significant"], "largest_p_vs_best": worst_p, "test": test}
    Path(out_dir, "paper_comparison.json").write_text(json.dumps({"cells": cells, "stars": stars}, indent=1))
    lines = ["# UCBRank Tables 2-3, MQ2008 column: this run against the paper", "",
             "Mean ± std over the run's trials (unit: trial); paper = UCBRank (SIGIR'22) Table 2 (c-NDCG@5) and "
             "Table 3 (NDCG@5 warm / cold), MQ2008 column; Δ = ours − paper.", "",
             "| row | setting | strategy | n | Cum ours | paper | Δ (%) | Warm ours | paper | Δ | Cold ours | paper | Δ |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for k, c in cells.items():
        cu, wa, co = (c[m] for m in METRICS)
        lines.append(f"| {k} | {c['setting']} | {c['strategy']} | {c['n_trials']} | {cu['mean']:.1f} ± {cu['std']:.1f}"
                     f" | {cu['paper']:g} | {cu['diff']:+.1f} ({100 * cu['rel_diff']:+.0f} %) | {wa['mean']:.3f} ± {wa['std']:.3f} | "
                     f"{wa['paper']:.3f} | {wa['diff']:+.3f} | {co['mean']:.3f} ± {co['std']:.3f} | {co['paper']:.3f} | "
                     f"{co['diff']:+.3f} |")
    lines += ["", "## The paper's * marks at the trial level", "",
              "Within each feature setting, every row against the setting's best by a two-sided paired t-test over "
              "the trials (`ltrjax.report.stats.trial_level_vs_best`); * = the best row is significantly (p < .05) "
              "above every other row of its setting.", "",
              "| metric | setting | paper's * | our best | * here | largest p against our best |",
              "|---|---|---|---|---|---:|"]
    for key, s in stars.items():
        m, setting = key.split("|")
        p = "—" if s["largest_p_vs_best"] is None else f"{s['largest_p_vs_best']:.2g}"
        lines.append(f"| {m} | {setting}{'' if s['complete'] else ' (rows missing)'} | {s['paper_star'] or 'none'} | "
                     f"{s['our_best']} | {'yes' if s['our_best_significant'] else 'no'} | {p} |")
    Path(out_dir, "paper_comparison.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(*sys.argv[1:3])
