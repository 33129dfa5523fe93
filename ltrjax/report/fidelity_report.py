"""results.md and figures of the fidelity experiment (``experiment=offline_fidelity``), from its results.json
mapping: the claims, the PRS and Vectorization tables beside the papers' cells, the sweeps and each fit's schedule.
The papers' numbers and the settings' titles come in as arguments (``ltrjax.offline.fidelity_experiment``'s
``PAPER`` and ``VEC_SETTINGS``; ``ltrjax.offline_runner`` passes them): ``report/`` reads results, never the
protocol."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _values(v) -> np.ndarray:
    """Per-trial figures as floats (results.json writes a non-finite one as null: NaN here)."""
    return np.asarray([np.nan if x is None else x for x in v], np.float64)


def _number(v) -> str:
    return "nan" if v is None else f"{v:.4f}"


def _cell(v) -> str:
    v = _values(v)
    return f"{v.mean():.4f} ± {v.std(ddof=1) if len(v) > 1 else 0.0:.4f}" if len(v) else ""


def _label(name: str, oracles) -> str:
    return f"{name} (oracle: told the true click model; upper reference)" if name in oracles else name


CLAIMS_LEGEND = (
    "Every test is paired over trials (unit: trial; one-sided paired t, intersection-union where a claim has several "
    "comparators). An equivalence or non-inferiority margin is a fraction of the run's headroom (labelled skyline "
    "minus production ranker, NDCG@10), refused below a floor. Beside each verdict, the same test with the subject "
    "replaced by the production ranker and by naive: a claim whose test such a control passes is \"uninformative in "
    "this regime\". \"holds\": p < .05 (the papers' level) and no control passes; \"undecided at n trials\": on the "
    "claim's side but not significant (the cause gives the trials a power estimate from the observed spread asks for)."
)


def _control(c: dict, name: str) -> str:
    t = (c.get("controls") or {}).get(name)
    if not t or t.get("p_value") is None:
        return ""
    return f"{t['mean_diff']:+.4f}, p = {t['p_value']:.3g}" + (" (passes)" if t.get("passes") else "")


def claim_row(c: dict) -> str:
    """One row of the claims table."""
    ours = c.get("ours")
    if isinstance(ours, dict):
        ours = "; ".join(f"{k} {_number(v)}" if v is None or isinstance(v, float) else f"{k}: " + ", ".join(
            f"{kk} {_number(vv)}" for kk, vv in v.items()) for k, v in ours.items())
    p, diff = c.get("p_value"), c.get("mean_diff")
    diff = "" if diff is None else f" (paired diff {diff:+.4f})"
    room = c.get("headroom")
    margin = (f"{c['margin']:.4f} ({room:.4f})" if c.get("margin_fraction") is not None
              else "" if room is None else f"— ({room:.4f})")
    n = f"{c['n']} ({c.get('unit', 'trial')})" if c.get("n") else ""
    return (f"| `{c['id']}` | {c['paper_cell']} | {ours or ''}{diff} | {n} | {margin} | {c['verdict']} | "
            f"{'' if p is None else f'{p:.3g}'} | {_control(c, 'production')} | {_control(c, 'naive')} | "
            f"{c.get('cause') or c.get('reason') or ''} |")


def gaps_line(tab: dict, cells: dict) -> str:
    """The room a bias model has in one table: labelled skyline minus production ranker (the headroom the margins
    scale with) and minus naive, beside the paper's naive-to-skyline gap."""
    mean = lambda e: float(np.nanmean(_values(tab[e])))  # noqa: E731
    if "labeled" not in tab:
        return "No labelled skyline in this table: no headroom measured."
    parts = [f"{ref} {mean('labeled') - mean(ref):.4f}" for ref in ("production", "naive") if ref in tab]
    paper = (f" (paper, labelled minus naive: {cells['labeled'] - cells['naive']:.3f})"
             if "labeled" in cells and "naive" in cells else "")
    return "Labelled skyline minus " + ", minus ".join(parts) + f" NDCG@10{paper}."


def markdown(results: dict, settings: dict, paper: dict, oracles=()) -> str:
    """results.md of a fidelity run: the header, the claims, every table and sweep with the papers' cells, and each
    fit's schedule. ``settings``: the Vectorization settings (``fidelity_experiment.VEC_SETTINGS``: title, d and
    the paper's table of each); ``paper``: the papers' numbers (``fidelity_experiment.PAPER``); ``oracles``: the
    estimators told the true click model (labelled as upper references)."""
    h = results["header"]
    out = [f"# Offline fidelity: {results['dataset']}", "",
           f"- dataset: {h['dataset']}", f"- click models: {h['click_models']}", f"- protocol: {h['protocol']}",
           f"- seed: {h['seed']}, trials: {h['trials']}", f"- commit: {h['commit']}", "",
           "## Claims", "", CLAIMS_LEGEND, "",
           "| id | paper's cell | ours | n (unit) | margin (headroom) | verdict | p | production, same test | "
           "naive, same test | cause / reason |", "|---|---|---|---|---|---|---|---|---|---|"]
    for c in results["claims"]:
        out.append(claim_row(c))
    out.append("")
    for name, tab in (results.get("vectorization") or {}).get("tables", {}).items():
        s = settings[name]
        cells = paper.get(s["paper"]) or {}
        out += [f"## {s['title']} (d = {s['dim']})", "",
                f"| estimator | NDCG@10 here | paper: {cells.get('dataset', '-')} |", "|---|---|---|"]
        for e, v in tab.items():
            p = cells.get(e)
            out.append(f"| {_label(e, oracles)} | {_cell(v)} | {'' if p is None else f'{p:.3f}'} |")
        out += ["", gaps_line(tab, cells), ""]
    sweep = (results.get("vectorization") or {}).get("d_sweep")
    if sweep:
        for name, row in sweep.items():
            out += [f"d-sweep, {name}: " + ", ".join(f"d={d}: {_cell(v)}" for d, v in row.items()), ""]
    prs = results.get("prs")
    if prs:
        out += [f"## PRS: {prs['setting']['lists']}, {prs['setting']['clicks_per_query']:g} clicks per logged query, "
                f"eta = 1, mu = {prs['setting']['mu']}, {prs['setting']['ranker']} ranker", "",
                "| estimator | NDCG@10 here |", "|---|---|"]
        for e, v in prs["table"].items():
            out.append(f"| {_label(e, oracles)} | {_cell(v)} |")
        out.append("")
        for key, label in (("clicks", "clicks per logged query (Fig. 3)"), ("noise", "click noise mu (Fig. 5)"),
                           ("assumed_eta", "assumed eta, true 1 (Fig. 6)")):
            sw = prs["sweeps"][key]
            names = list(next(iter(sw.values())))
            out += [f"### PRS sweep: {label}", "", f"| {key} | " + " | ".join(names) + " |",
                    "|---|" + "---|" * len(names)]
            for x, row in sw.items():
                out.append(f"| {x} | " + " | ".join(_cell(row[n]) for n in names) + " |")
            out.append("")
        t1 = prs.get("table1") or {}
        if "table" in t1:
            out += ["### PRS Table 1 analogue (trees, theta by result randomization)", "",
                    "| estimator | NDCG@10 here | paper |", "|---|---|---|"]
            for n, v in t1["table"].items():
                out.append(f"| {n} | {_cell(v)} | {paper['prs_table1'].get(n, '')} |")
            out.append("")
    out += ["## Training schedule of every estimator (steps; trees: boosting rounds)", ""]
    for table, plan in results.get("training", {}).items():
        for name, sch in (plan or {}).items():
            out.append(f"- {table} / {name}: {sch}")
    return "\n".join(out) + "\n"


def plot(results: dict, out_dir: Path) -> None:
    """prs_sweeps.png (the PRS sweeps: clicks, noise, assumed eta) and d_sweep.png (Vectorization's d) in ``out_dir``,
    for the parts the run has."""
    from matplotlib.figure import Figure

    prs = results.get("prs")
    if prs:
        fig = Figure(figsize=(12, 3.5))
        for i, (key, label) in enumerate((("clicks", "clicks per logged query"), ("noise", "click noise mu"),
                                          ("assumed_eta", "assumed eta (true 1)"))):
            ax = fig.add_subplot(1, 3, i + 1)
            sw = prs["sweeps"][key]
            xs = [float(x) for x in sw]
            for n in next(iter(sw.values())):
                per_x = [_values(sw[x][n]) for x in sw]
                ax.errorbar(xs, [np.mean(v) for v in per_x], yerr=[np.std(v) for v in per_x], marker="o", capsize=3,
                            label=n)
            ax.set_xlabel(label)
            ax.set_ylabel("NDCG@10")
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out_dir / "prs_sweeps.png", dpi=120)
    vec = results.get("vectorization") or {}
    if vec.get("d_sweep"):
        fig = Figure(figsize=(5, 3.5))
        ax = fig.add_subplot()
        for name, row in vec["d_sweep"].items():
            ds = [int(d) for d in row]
            line = ax.errorbar(ds, [np.mean(_values(v)) for v in row.values()],
                               yerr=[np.std(_values(v)) for v in row.values()], marker="o", capsize=3,
                               label=f"Vectorization, {name}")
            for ref, ls in (("affine", "--"), ("dla", ":")):
                if ref in vec["tables"].get(name, {}):
                    ax.axhline(np.mean(_values(vec["tables"][name][ref])), ls=ls, lw=1, color=line[0].get_color(),
                               label=f"{ref}, {name}")
        ax.set_xlabel("d")
        ax.set_ylabel("NDCG@10")
        ax.legend(fontsize=6)
        fig.tight_layout()
        fig.savefig(out_dir / "d_sweep.png", dpi=120)
