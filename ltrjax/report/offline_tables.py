"""Tables of the offline experiment (``experiment=offline``): the estimators' test metrics over trials
(results.json's ``algorithms``) and results.md. Plain values in, plain values out: nothing here reads an
estimator or a config object (``ltrjax.offline_runner`` passes what it needs)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ltrjax.report.stats import TRIAL_UNIT, trial_level_vs_baseline, trial_level_vs_best
from ltrjax.report.tables import WORSE_MARK, trials_phrase


def summarize(trials: list[dict], names, metrics: Sequence[str]) -> dict:
    """{estimator: mean and std of every metric over the trials that ran it, mean seconds, the trials}."""
    algos = {}
    for name in names:
        rows = [t[name] for t in trials if name in t]
        if not rows:
            continue
        entry = {m: float(np.mean([r[m] for r in rows])) for m in metrics}
        entry["std"] = {m: float(np.std([r[m] for r in rows])) for m in metrics}
        entry["seconds"] = float(np.mean([r["seconds"] for r in rows]))
        entry["trials"] = rows
        algos[name] = entry
    return algos


def significance(trials: list[dict], names, metrics: Sequence[str], alpha: float = 0.05) -> dict:
    """{metric: ``stats.trial_level_vs_best``}: every estimator against the column's best, paired over the trials
    (trial t of ``trials``) both ran."""
    return {m: trial_level_vs_best({n: {t: row[n][m] for t, row in enumerate(trials) if n in row} for n in names
                                    if any(n in row for row in trials)}, alpha=alpha) for m in metrics}


def vs_baseline(trials: list[dict], names, metrics: Sequence[str], baseline: str | None, alpha: float = 0.05) -> dict:
    """{metric: ``stats.trial_level_vs_baseline``}: every estimator against the named ``baseline``, paired over the
    trials both ran, Holm-corrected over the table's rows; {} without a baseline among ``names``."""
    if baseline is None or baseline not in names:
        return {}
    return {m: trial_level_vs_baseline({n: {t: row[n][m] for t, row in enumerate(trials) if n in row} for n in names
                                        if any(n in row for row in trials)}, baseline, alpha=alpha) for m in metrics}


def markdown_vs_baseline(comparison: dict, baseline: str | None, alpha: float = 0.05) -> str:
    """A table of every estimator's difference from ``baseline`` per metric with its Holm-adjusted p (``vs_baseline``);
    "" without one."""
    if not comparison:
        return ""
    metrics = list(comparison)
    rows = list(next(iter(comparison.values())))
    lines = ["", f"### Against {baseline} (paired over trials, Holm-corrected over the {len(rows)} rows)", "",
             "| estimator | " + " | ".join(metrics) + " |", "|---|" + "---|" * len(metrics)]
    for name in rows:
        cells = []
        for m in metrics:
            r = comparison[m][name]
            mark = " ▲" if r["better"] else (" ▼" if r["worse"] else "")
            p = "n/a" if r["p_holm"] is None else f"{r['p_holm']:.3g}"
            cells.append(f"{r['difference']:+.4f} (p {p}){mark}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", f"▲/▼: better/worse than {baseline} at Holm-adjusted p < {alpha} (unit: {TRIAL_UNIT})."]
    return "\n".join(lines) + "\n"


def markdown_table(algos: dict, metrics: Sequence[str], title: str = "", sig: dict | None = None,
                   alpha: float = 0.05) -> str:
    """The estimators' test metrics: mean ± std over trials (the mean alone for one trial), and the trial count;
    with ``sig`` (``significance``), rows significantly worse than the column's best marked, the unit named."""
    lines = [f"### {title}", ""] if title else []
    lines.append("| estimator | " + " | ".join(metrics) + " | trials | train s |")
    lines.append("|---|" + "---|" * (len(metrics) + 2))
    for name, e in algos.items():
        n = len(e["trials"])
        cells = [(f"{e[m]:.4f} ± {e['std'][m]:.4f}" if n > 1 else f"{e[m]:.4f}")
                 + (f" {WORSE_MARK}" if ((sig or {}).get(m, {}).get(name) or {}).get("significantly_worse") else "")
                 for m in metrics]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {n} | {e['seconds']:.1f} |")
    if sig:
        lines += ["", f"{WORSE_MARK}: significantly worse than the column's best row (unit: {TRIAL_UNIT}; "
                      f"p < {alpha})."]
    return "\n".join(lines) + "\n"


def markdown_header(dataset: str, click_model: Mapping, ranker: str, seed: int, source: str, n_trials: int,
                    commit: str | None) -> str:
    """The opening lines of results.md: dataset, click model, protocol, seed, trials, commit."""
    return "\n".join([f"# Offline results on {dataset}", "",
                      f"- **Dataset**: {dataset}", f"- **Click model**: {dict(click_model)}",
                      f"- **Protocol**: {source}; ranker {ranker}",
                      f"- **Seed** {seed}, **{trials_phrase(n_trials)}** (trial t uses seed + t)",
                      f"- **Commit**: {commit or 'unknown (not a git checkout)'}", "", ""])


def protocol_line(budget: tuple[str, float], list_size: int | None, list_cap: int, infos: list[dict]) -> str:
    """One line: the presented list, the budget (``OfflineConfig.budget``) and the clicks per query the run logged."""
    unit, amount = budget
    lists = f"top-{list_size}" if list_size else f"whole candidate lists (at most {list_cap})"
    cpq = [i["clicks_per_query"] for i in infos if "clicks_per_query" in i]
    per_q = f", {np.mean(cpq):.1f} clicks per logged query" if cpq else ""
    return f"{lists}, budget {amount} {unit.replace('_', ' ')}{per_q}"
