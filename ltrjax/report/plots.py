"""Figures of an online run: NDCG@K over time (EBRank Fig. 3 style), click rates, sweeps, exploitation ratios.

Figures are ``matplotlib.figure.Figure`` objects saved directly (no pyplot), so drawing them neither
needs nor changes the user's matplotlib backend or pyplot's figure list. matplotlib is imported when a figure is
drawn, not with this module (0.25 s of every command's start-up otherwise).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ltrjax.record import writing


def subplots(*args, figsize, **kwargs):
    """(figure, axes) like ``pyplot.subplots``, without pyplot's global state."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    return fig, fig.subplots(*args, **kwargs)


def series_color(i: int, n: int):
    """A distinct colour for series ``i`` of ``n``: the default cycle up to 10 series, tab20 up to 20, then a
    continuous map (EBRank Table 3 has 16 rows; ``C{i % 10}`` would give two rows one colour)."""
    import matplotlib

    if n <= 10:
        return f"C{i}"
    if n <= 20:
        return matplotlib.colormaps["tab20"](i)
    return matplotlib.colormaps["turbo"](i / max(n - 1, 1))


LINE_STYLES = ("-", "--", ":")


def series_style(i: int, n: int) -> dict:
    """Colour and line style of series ``i`` of ``n``: the default colour cycle, solid up to 10 series, then each
    colour again dashed and dotted (up to 30), so 16 rows have 16 strong, distinct lines (tab20's light tints
    read poorly on white); more than 30 rows, ``series_color`` solid."""
    if n <= 10 * len(LINE_STYLES):
        return {"color": f"C{i % 10}", "linestyle": LINE_STYLES[i // 10]}
    return {"color": series_color(i, n), "linestyle": "-"}


def smooth(values: np.ndarray, window: int) -> np.ndarray:
    """Centred moving average over ``window`` points (shorter at the ends), same length as ``values``."""
    if window <= 1 or values.size < 3:
        return values
    kernel = np.ones(window)
    return np.convolve(values, kernel, mode="same") / np.convolve(np.ones_like(values), kernel, mode="same")


def legend_outside(fig, ax, **kwargs) -> None:
    """The axes' legend to the right of the axes, off the data."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, **kwargs)


def shared_legend(fig, handles, labels) -> None:
    """One legend for every panel, below them, in as many columns as keep it to about 4 rows: every label visible
    at 16 rows (EBRank Table 3) without running off the figure."""
    ncol = len(labels) if len(labels) <= 6 else int(np.ceil(len(labels) / 4))
    fig.legend(handles, labels, loc="outside lower center", ncol=ncol, fontsize=8, frameon=False)


def _online_panel(ax, name: str, entry: dict, style: dict, sessions: int) -> object:
    """The shown lists' NDCG@K on test sessions: mean over trials (thin), ± one std band, smoothed mean (thick)."""
    curves = [t["test_session_ndcg_curve"] for t in entry["trials"] if t["test_session_ndcg_curve"]]
    if not curves:
        return None
    n = min(len(c) for c in curves)
    stack = np.asarray([c[:n] for c in curves], np.float64)
    mean, x = stack.mean(axis=0), np.linspace(0, sessions, n)
    ax.plot(x, mean, color=style["color"], linewidth=0.5, alpha=0.4)
    if len(stack) > 1:
        std = stack.std(axis=0, ddof=1)
        ax.fill_between(x, mean - std, mean + std, color=style["color"], alpha=0.10, linewidth=0)
    return ax.plot(x, smooth(mean, max(1, n // 10)), linewidth=1.8, label=name, **style)[0]


def _eval_panel(ax, name: str, entry: dict, key: str, style: dict) -> None:
    """Warm or Cold NDCG@K per evaluation point: mean over trials, ± one std band."""
    points = np.asarray(entry["trials"][0]["eval_points"]) + 1
    stack = np.asarray([t[key] for t in entry["trials"]], np.float64)
    mean = stack.mean(axis=0)
    ax.plot(points, mean, marker="o", markersize=2.5, linewidth=1.5, label=name, **style)
    if len(stack) > 1:
        std = stack.std(axis=0, ddof=1)
        ax.fill_between(points, mean - std, mean + std, color=style["color"], alpha=0.08, linewidth=0)


def plot_ndcg_over_time(results: dict, path: Path) -> None:
    """``ndcg_over_time_figure(results)`` saved to ``path``."""
    _save(ndcg_over_time_figure(results), path)


def ndcg_over_time_figure(results: dict):
    """EBRank Fig. 3 style, three panels side by side, one colour per row and one legend below them all: the shown
    lists' NDCG@K (``sim.top_k``) on test sessions over time (smoothed mean, ± one std band over trials), then Warm
    and Cold NDCG@K per evaluation in panels of their own, on one y scale (a Cold curve equal to its Warm one is
    seen in both, not hidden under it)."""
    top_k = (results.get("sim") or {}).get("top_k", "K")
    from matplotlib.figure import Figure

    rows = results["algorithms"]
    fig = Figure(figsize=(16, 5.2 + 0.22 * int(np.ceil(len(rows) / 4))), layout="constrained")
    ax_online, ax_warm, ax_cold = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1.25, 1, 1]})
    ax_cold.sharey(ax_warm)
    sessions = results.get("sessions", 1)
    n_trials = max((len(e["trials"]) for e in rows.values()), default=0)
    handles = []
    for i, (name, entry) in enumerate(rows.items()):
        style = series_style(i, len(rows))
        line = _online_panel(ax_online, name, entry, style, sessions)
        _eval_panel(ax_warm, name, entry, "warm_history", style)
        _eval_panel(ax_cold, name, entry, "cold_history", style)
        handles.append(line or ax_warm.lines[-1])
    ax_online.set(xlabel="session", ylabel=f"NDCG@{top_k}", title=f"Online NDCG@{top_k} of shown lists")
    ax_warm.set(xlabel="session", ylabel=f"NDCG@{top_k} (test queries)", title=f"Warm NDCG@{top_k} (with clicks)")
    ax_cold.set(xlabel="session", title=f"Cold NDCG@{top_k} (no clicks)")
    for ax in (ax_online, ax_warm, ax_cold):
        ax.grid(alpha=0.3)
    shared_legend(fig, handles, list(rows))
    band = "; thick: smoothed mean, band: ± 1 std over trials" if n_trials > 1 else "; thick: smoothed mean"
    fig.suptitle(f"{results.get('dataset', '')}: {sessions} sessions, "
                 + ("1 trial" if n_trials == 1 else f"{n_trials} trials (mean over trials)") + band)
    return fig


# --- analysis figures (UCBRank Fig. 1 and 2, EBRank Fig. 4 and Table 4) ---------------------------

def _save(fig, path) -> None:
    """Write to a temporary file next to ``path`` and rename it, so readers never see half a PNG."""
    import os

    path = Path(path)
    fmt = path.suffix.lstrip(".") or "png"
    tmp = path.with_name(f".{path.name}.tmp")
    with writing(path, tmp):  # a failed write: WriteError naming the figure, no temporary file left
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(tmp, dpi=120, format=fmt)
        os.replace(tmp, path)


def _mean_std(values) -> tuple[np.ndarray, np.ndarray]:
    """Per point: a float (std 0), a list of trial values (mean, std), or NaN/None (missing)."""
    means, stds = [], []
    for v in values:
        arr = np.asarray([np.nan if x is None else x for x in np.atleast_1d(np.asarray(v, object))], np.float64)
        arr = arr[np.isfinite(arr)]
        means.append(arr.mean() if arr.size else np.nan)
        stds.append(arr.std() if arr.size > 1 else 0.0)
    return np.asarray(means), np.asarray(stds)


def _curve(entry, key: str = "rate") -> tuple[np.ndarray, np.ndarray]:
    """``{key: [...], key_std: [...]}`` or ``{key: [[trial values per point] ...]}`` -> mean, std."""
    if isinstance(entry, dict) and f"{key}_std" in entry:
        return (np.asarray(entry[key], np.float64), np.nan_to_num(np.asarray(entry[f"{key}_std"], np.float64)))
    return _mean_std(entry[key] if isinstance(entry, dict) else entry)


def plot_click_rate_by_entry(curves: dict[str, dict], path, title: str = "") -> None:
    """UCBRank Fig. 1: click rate of perfect documents by entry time, one line per algorithm.

    ``curves[algorithm]`` is a ``click_rate_by_entry`` / ``average_click_rates`` output: ``rate``
    (n_bins + 1 values, bin 0 = initial documents; or per point a list of trial values), optional
    ``rate_std`` (drawn as a band) and ``labels``. "initial" is the leftmost point, set apart.
    """
    fig, ax = subplots(figsize=(8, 4.5))
    labels = None
    for i, (name, entry) in enumerate(curves.items()):
        mean, std = _curve(entry)
        n = mean.size
        x = np.concatenate([[-1.0], np.arange(n - 1, dtype=np.float64)])
        style = series_style(i, len(curves))
        color = style["color"]
        ax.plot(x[1:], mean[1:], marker="o", markersize=3, label=name, **style)
        x0 = x[:1] + 0.08 * (i - (len(curves) - 1) / 2)  # initial points side by side, not on top of each other
        ax.plot(x0, mean[:1], marker="s", markersize=6, color=color, linestyle="none")
        if np.any(std > 0):
            ax.fill_between(x[1:], (mean - std)[1:], (mean + std)[1:], color=color, alpha=0.15, linewidth=0)
            ax.errorbar(x0, mean[:1], yerr=std[:1], color=color, capsize=3, linestyle="none")
        if labels is None and isinstance(entry, dict) and "labels" in entry:
            labels = list(entry["labels"])
        if labels is None:
            labels = ["initial"] + [str(j) for j in range(n - 1)]
    if labels is not None:
        ax.set_xticks(np.concatenate([[-1.0], np.arange(len(labels) - 1)]))
        ax.set_xticklabels(labels, rotation=45, ha="right", fontsize=8)
        ax.axvline(-0.5, color="grey", linewidth=0.8, linestyle=":")
    ax.set(xlabel="entry time of the document (share of the main phase)",
           ylabel="#clicks / #sessions as candidate", title=title or "Click rate of perfect documents by entry time")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    legend_outside(fig, ax, fontsize=8)
    fig.tight_layout()
    _save(fig, path)


def _x_scale(ax, x: np.ndarray) -> None:
    """Log x when the positive values span more than 2 decades; symlog when 0 is among them."""
    positive = x[x > 0]
    if positive.size < 2 or np.any(x < 0) or positive.max() / positive.min() <= 100:
        return
    if np.any(x == 0):
        ax.set_xscale("symlog", linthresh=float(positive.min()), linscale=0.5)
    else:
        ax.set_xscale("log")


def plot_sweep(x_values, series: dict[str, dict[str, list]], path, xlabel: str, metrics, title: str = "") -> None:
    """One panel per metric, one line per algorithm, mean +- std band over trials.

    ``series[algorithm][metric]`` has one item per x value: a float, or the list of that point's
    per-trial values. ``metrics`` is a sequence of metric keys or a {key: label} mapping. The x axis
    is logarithmic when the values span more than 2 decades (symlog, linear around 0, when 0 is
    one of them, e.g. lambda in {0, 0.1, ..., 1000}).
    """
    x = np.asarray(x_values, np.float64)
    labels = dict(metrics) if isinstance(metrics, dict) else {m: m for m in metrics}
    fig, axes = subplots(1, len(labels), figsize=(4.8 * len(labels), 4), squeeze=False)
    for ax, (metric, label) in zip(axes[0], labels.items()):
        for i, (name, per_metric) in enumerate(series.items()):
            if metric not in per_metric:
                continue
            mean, std = _mean_std(per_metric[metric])
            if mean.size != x.size:
                raise ValueError(f"plot_sweep: {name}/{metric} has {mean.size} points for {x.size} x values")
            style = series_style(i, len(series))
            color = style["color"]
            ax.plot(x, mean, marker="o", markersize=4, label=name, **style)
            if np.any(std > 0):
                ax.fill_between(x, mean - std, mean + std, color=color, alpha=0.15, linewidth=0)
        _x_scale(ax, x)
        ax.set(xlabel=xlabel, ylabel=label, title=label)
        ax.grid(alpha=0.3)
    legend_outside(fig, axes[0][-1], fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    _save(fig, path)


def plot_exploitation_ratio(ratios: dict, path, title: str = "") -> None:
    """EBRank Table 4 as bars: mean +- std over trials of the behaviour feature's exploitation ratio.

    ``ratios[algorithm]`` is the list of per-trial ratios, or a mapping of such lists (e.g.
    ``{"behaviour": [...], "max_nonbehaviour": [...]}``), drawn as grouped bars.
    """
    names = list(ratios)
    groups = {n: (dict(v) if isinstance(v, dict) else {"behaviour": v}) for n, v in ratios.items()}
    columns = list(dict.fromkeys(c for g in groups.values() for c in g))
    width = 0.8 / max(len(columns), 1)
    fig, ax = subplots(figsize=(max(5.0, 1.1 * len(names) + 2), 4))
    x = np.arange(len(names), dtype=np.float64)
    for j, col in enumerate(columns):
        stats = [_mean_std([groups[n].get(col, [])]) for n in names]
        mean = np.array([s[0][0] for s in stats])
        std = np.array([s[1][0] for s in stats])
        ax.bar(x + (j - (len(columns) - 1) / 2) * width, np.nan_to_num(mean), width, yerr=std, capsize=3,
               color=f"C{j % 10}", label={"behaviour": "$x^b$ ratio",
                                          "max_nonbehaviour": "max $x^{nb}$ ratio"}.get(col, col))
    ax.set_xticks(x)
    ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
    ax.set(ylabel=r"$|w_j| \,/\, \sum_i |w_i|$", title=title or "Exploitation ratio of linear models", ylim=(0, 1))
    ax.grid(alpha=0.3, axis="y")
    if len(columns) > 1:
        legend_outside(fig, ax, fontsize=8)
    fig.tight_layout()
    _save(fig, path)
