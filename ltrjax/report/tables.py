"""Markdown renderings of the online tables: EBRank Table 3 (Cold/Warm/Cum-NDCG per method and
feature setting) and Table 4 (exploitation ratios of linear models)."""

from __future__ import annotations

import numpy as np



def metric_labels(top_k: int) -> dict[str, str]:
    """The online metrics' names at cutoff ``top_k`` (``sim.top_k``): Cum-NDCG@K, Warm-NDCG@K, Cold-NDCG@K."""
    return {"cold_ndcg": f"Cold-NDCG@{top_k}", "warm_ndcg": f"Warm-NDCG@{top_k}", "cum_ndcg": f"Cum-NDCG@{top_k}"}


METRIC_LABELS = metric_labels(5)  # the papers' K; a run labels its tables with its own sim.top_k


def mean_cell(values: np.ndarray, fmt) -> str:
    """``mean ± std`` (sample std) over several trials; one trial is its value alone (no ± 0)."""
    if values.size == 1:
        return fmt(values[0])
    return f"{fmt(values.mean())} ± {fmt(values.std(ddof=1))}"


def trials_phrase(n: int) -> str:
    """"1 trial", "3 trials"."""
    return f"{n} trial" if n == 1 else f"{n} trials"
SETTING_LABELS = {
    "wo_behav": "W/o-Behav",
    "concat": "W/-Behav (Concat)",
    "ctr": "W/-ctr (Concat)",
    "delta": "W/-Δ (Concat)",
    "ie": "W/-Behav (IE)",
}
WORSE_MARK = "▾"
BEST_MARK = "∗"


def split_row_name(name: str) -> tuple[str, str]:
    """``"ALGORITHM@SETTING"`` -> (algorithm, setting label); plain names get "—"."""
    if "@" in name:
        algorithm, setting = name.split("@", 1)
        return algorithm, SETTING_LABELS.get(setting, setting)
    return name, "—"


def _values(entry, metric: str) -> np.ndarray:
    v = entry.get(metric) if isinstance(entry, dict) else None
    if v is None:
        return np.zeros(0)
    arr = np.atleast_1d(np.asarray(v, np.float64))
    return arr[np.isfinite(arr)]


def _fmt(x: float, scale: float) -> str:
    return f"{x:.2f}" if abs(scale) >= 10 else f"{x:.4f}"


def online_table_markdown(rows: dict[str, dict], metrics=("cold_ndcg", "warm_ndcg", "cum_ndcg"),
                          significance: dict[str, dict[str, dict]] | None = None, title: str = "",
                          notes: str = "", labels: dict[str, str] | None = None, alpha: float = 0.05) -> str:
    """EBRank Table 3 as Markdown: method | feature setting | metric mean ± std ... | trials.

    ``rows[name][metric]`` is the list of per-trial values (a scalar is one trial); names are
    ``ALGORITHM@SETTING`` (settings wo_behav, concat, ie, ...) or plain (ebrank, bm25). Rows keep the
    input order. Per metric the best mean is bold; with ``significance[metric]`` (the output of
    :func:`ltrjax.report.stats.significance_vs_best` over that metric's paired units) rows significantly
    worse than the best get ``▾``, and the best row gets ``*`` when it is significantly better than
    every other row tested (``alpha`` only labels the legend: the flags come from ``significance``).
    A legend line follows the table, then ``notes``.
    """
    labels = {**METRIC_LABELS, **(labels or {})}
    significance = significance or {}
    stats = {name: {m: _values(entry, m) for m in metrics} for name, entry in rows.items()}
    best: dict[str, str | None] = {}
    for m in metrics:
        means = {n: s[m].mean() for n, s in stats.items() if s[m].size}
        best[m] = max(means, key=means.get) if means else None

    lines = []
    if title:
        lines += [f"## {title}", ""]
    lines.append("| method | feature setting | " + " | ".join(labels.get(m, m) for m in metrics) + " | trials |")
    lines.append("|---|---|" + "---:|" * len(metrics) + "---:|")
    any_worse = any_best = False
    for name, per_metric in stats.items():
        algorithm, setting = split_row_name(name)
        cells = []
        for m in metrics:
            v = per_metric[m]
            if not v.size:
                cells.append("—")
                continue
            mean = v.mean()
            cell = mean_cell(v, lambda x, scale=mean: _fmt(x, scale))
            if name == best[m]:
                cell = f"**{cell}**"
            sig = significance.get(m, {}).get(name)
            if sig:
                if sig.get("significantly_worse"):
                    cell += f" {WORSE_MARK}"
                    any_worse = True
                if sig.get("best") and sig.get("best_significant"):
                    cell += f" {BEST_MARK}"
                    any_best = True
            cells.append(cell)
        n_trials = max((v.size for v in per_metric.values()), default=0)
        lines.append(f"| {algorithm} | {setting} | " + " | ".join(cells) + f" | {n_trials} |")

    several = any(v.size > 1 for per_metric in stats.values() for v in per_metric.values())
    legend = ["Mean ± std over trials;" if several else "One trial (no spread);", "**bold**: best mean per column."]
    if significance:
        unit = next((r.get("unit") for rows in significance.values() for r in rows.values() if r.get("unit")),
                    "paired units (Fisher randomization test, two-sided)")
        legend.append(f"{WORSE_MARK}: significantly worse than the column's best row (unit: {unit}; p < {alpha});")
        legend.append(f"{BEST_MARK}: the best row is significantly better than every other row.")
        if not (any_worse or any_best):
            legend.append("(no significant differences)")
    lines += ["", " ".join(legend)]
    if notes:
        lines += ["", notes]
    return "\n".join(lines) + "\n"


def exploitation_ratio_markdown(ratios: dict, title: str = "", notes: str = "") -> str:
    """EBRank Table 4 as Markdown: method | x^b ratio mean ± std [| max x^nb ratio] | trials.

    ``ratios[method]`` is the list of per-trial behaviour ratios, or a mapping
    ``{"behaviour": [...], "max_nonbehaviour": [...]}`` (see
    :func:`ltrjax.report.analysis.exploitation_ratios`).
    """
    groups = {n: (dict(v) if isinstance(v, dict) else {"behaviour": v}) for n, v in ratios.items()}
    columns = list(dict.fromkeys(c for g in groups.values() for c in g))
    names = {"behaviour": "x^b ratio", "max_nonbehaviour": "max x^nb ratio"}
    lines = [f"## {title}", ""] if title else []
    lines.append("| method | feature setting | " + " | ".join(names.get(c, c) for c in columns) + " | trials |")
    lines.append("|---|---|" + "---:|" * len(columns) + "---:|")
    for name, g in groups.items():
        algorithm, setting = split_row_name(name)
        cells, n_trials = [], 0
        for c in columns:
            v = _values(g, c)
            n_trials = max(n_trials, v.size)
            cells.append(mean_cell(v, "{:.3f}".format) if v.size else "—")
        lines.append(f"| {algorithm} | {setting} | " + " | ".join(cells) + f" | {n_trials} |")
    lines += ["", "Exploitation ratio |w_j| / Σ_i |w_i| of the learnt linear model (EBRank Eq. 29); mean ± std "
                  "over trials (one trial: its value)."]
    if notes:
        lines += ["", notes]
    return "\n".join(lines) + "\n"
