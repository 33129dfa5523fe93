"""Reports of online runs: per-trial measurements, the papers' tables with significance, and figures.

A run (``ltrjax.runner``) writes to its output directory:

- ``results.json``  one entry per row (``ALGORITHM@SETTING``; EBRank and BM25 plain), per-trial values;
  rewritten after every finished trial, and read back by a rerun into the same directory (``resume``),
  which skips the trials already there — an interrupted run loses only the trial it was in;
- ``arrays/NAME/trialT.npz``  per test query Warm/Cold NDCG and per test session NDCG of every trial (finer
  units for analyses that name their own unit; the tables test at the trial level);
- ``results.md``  the table (EBRank Table 3 layout) with paired t-tests over trials against the best row,
  the exploitation ratios (EBRank Table 4), the click rates of perfect documents by entry time
  (UCBRank Fig. 1) and the figures: ``ndcg_over_time.png`` (EBRank Fig. 3), ``click_rate_by_entry.png``,
  ``exploration_sweep.png`` (UCBRank Fig. 2, from the validation grids every trial runs anyway),
  ``eta_sweep.png`` (EBRank Fig. 4) and ``exploitation_ratio.png``.
"""

from __future__ import annotations

import re

import numpy as np

from ltrjax.report import analysis, plots, stats
from ltrjax.report.tables import exploitation_ratio_markdown, metric_labels, online_table_markdown, trials_phrase
from ltrjax.report.results import atomic_write

METRICS = ("cum_ndcg", "warm_ndcg", "cold_ndcg")
TABLE_METRICS = ("cold_ndcg", "warm_ndcg", "cum_ndcg")  # EBRank Table 3 column order


def safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


# --------------------------------------------------------------------------- the reports
def run_labels(run) -> dict[str, str]:
    """The metric names of ``run`` at the ``sim.top_k`` its results header records."""
    return metric_labels(run.writer.header["sim"]["top_k"])


def _value_text(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def run_summary(header: dict) -> str:
    """What results.md opens with: dataset, click model, protocol, seed, trials and the commit that ran it."""
    cm = header.get("click_model") or {}
    sim = header.get("sim") or {}
    record = header.get("record") or {}
    splits = header.get("queries_per_split") or {}
    options = ", ".join(f"{k} {_value_text(v)}" for k, v in cm.items() if k != "kind" and v is not None)
    docs = sim.get("initial_docs")
    docs_text = f"{docs[0]}–{docs[1]}" if isinstance(docs, (list, tuple)) and len(docs) == 2 else str(docs)
    split_text = "/".join(str(splits.get(s, "?")) for s in ("train", "vali", "test"))
    warmup = header.get("warmup_sessions") or 0
    protocol = (f"{header.get('sessions')} sessions per trial" + (f" after {warmup} BM25 warm-up sessions" if warmup
                                                                   else " (no warm-up)")
                + f"; top-K {sim.get('top_k')}, {docs_text} initial documents, entry probability "
                  f"{_value_text(sim.get('entry_prob'))}, {sim.get('n_updates')} evaluate-then-retrain points, "
                  f"Cum-NDCG discount γ = {_value_text(sim.get('gamma'))}")
    commit = record.get("commit") or "unknown (not run from a git checkout)"
    return "\n".join([
        f"- **Dataset**: {header.get('dataset')}, {header.get('queries')} queries (train/vali/test {split_text})",
        f"- **Click model**: {click_model_text(cm, options)}",
        f"- **Protocol**: {protocol}",
        f"- **Seed** {header.get('seed')}, **{trials_phrase(int(header.get('trials') or 0))}** (trial t uses key "
        f"(seed, t))",
        f"- **ltrjax** {record.get('version')}, commit {commit}",
    ])


def click_model_name(cm: dict) -> str | None:
    """The shipped ``conf/click_model/NAME.yaml`` the resolved click model ``cm`` is exactly (what the command line
    calls it: ``ebrank_pbm``, where its kind is ``pbm``), else None."""
    from omegaconf import OmegaConf

    from ltrjax.structured import conf_dir

    for path in sorted((conf_dir() / "click_model").glob("*.yaml")):
        shipped = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
        if isinstance(shipped, dict) and shipped == {k: cm.get(k) for k in shipped} and set(cm) <= set(shipped):
            return path.stem
    return None


def click_model_text(cm: dict, options: str) -> str:
    """"`click_model=ebrank_pbm` (pbm, examination log2, eta 1)", or the kind and options of one no file names."""
    what = f"{cm.get('kind')}, {options}" if options else str(cm.get("kind"))
    name = click_model_name(cm)
    return f"`click_model={name}` ({what})" if name else what


def memory_phrase(header: dict) -> str:
    """", peak resident memory X GB (R× the float32 feature matrix's Y MB)" from a run header
    (``ltrjax.measure.memory_record``), or "" when the header has none."""
    peak, features = header.get("peak_rss_bytes"), header.get("feature_bytes")
    if not peak:
        return ""

    def size(n: int) -> str:
        return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"

    text = f", peak resident memory {size(peak)}"
    if features:
        text += f" ({peak / features:.1f}× the float32 feature matrix's {size(features)})"
    return text


def write_simple_report(run, title: str, wall: float) -> str:
    """``results.md`` (mean ± std per algorithm, one trial: its value) and ``ndcg_over_time.png`` of the default
    comparison; results.md opens with ``run_summary``."""
    several = any(len(e["trials"]) > 1 for e in run.writer.algorithms.values())
    spread = "Mean ± std over trials" if several else "One trial per row (no spread)"
    table = run.writer.write_markdown(title, run_labels(run), extra=f"{spread}; test-split metrics. "
                                                                    f"Wall time {wall:.1f} s"
                                                                    f"{memory_phrase(run.writer.header)}.",
                                      summary=run_summary(run.writer.header))
    plots.plot_ndcg_over_time(run.writer.as_dict(), run.out_dir / "ndcg_over_time.png")
    return table


def per_trial_values(algorithms: dict) -> dict[str, dict[str, dict]]:
    """{metric: {row: {trial seed: value}}} from results.json's rows (the trials pair up by their seed)."""
    return {m: {n: {t["seed"]: t[m] for t in e["trials"] if t.get(m) is not None} for n, e in algorithms.items()}
            for m in METRICS}


def significance(run, alpha: float, n_permutations: int | None = None) -> dict[str, dict[str, dict]]:
    """Every row against the column's best at the unit of replication, the trial (``stats.trial_level_vs_best``:
    a paired t-test over the trials' Cum/Warm/Cold values); ``n_permutations`` is unused (the sign-flip test over
    (trial, session) and (trial, query) units it sized treated units sharing one model as replicates)."""
    if len(run.writer.algorithms) < 2:
        return {}
    return {m: stats.trial_level_vs_best(rows, alpha=alpha) for m, rows in
            per_trial_values(run.writer.algorithms).items()}


def undecided_line(sig: dict[str, dict[str, dict]], labels: dict[str, str]) -> str:
    """The rows no test separated from a column's best, with the trials a power estimate asks for."""
    parts = []
    for m, rows in sig.items():
        for name, r in rows.items():
            if not r["best"] and r["p_value"] is not None and not r["significantly_worse"]:
                need = r["trials_needed"]
                parts.append(f"{name} ({labels.get(m, m)}, p = {r['p_value']:.2g}: "
                             + (f"{need} trials)" if need else f"more than {stats.trial_stats.MAX_TRIALS} trials)"))
    return ("Not separated from the column's best; the trials a power estimate from the observed spread asks for: "
            + "; ".join(parts) + ".") if parts else ""


def sweep_series(algorithms: dict) -> dict[tuple, dict]:
    """Exploration-strength curves from the validation grids every trial runs anyway (rows tuning one
    hyper-parameter), grouped by (hyper-parameter, grid): {(hyper, grid): {row: {metric: per-point trials}}}."""
    groups: dict[tuple, dict] = {}
    for name, entry in algorithms.items():
        grids = [t.get("tuning") or {} for t in entry["trials"]]
        if not grids or not grids[0]:
            continue
        labels = list(grids[0])
        keys = {tuple(g["values"]) for g in grids[0].values()}
        if len(keys) != 1 or len(next(iter(keys))) != 1:
            continue
        hyper = next(iter(keys))[0]
        values = tuple(grids[0][lab]["values"][hyper] for lab in labels)
        groups.setdefault((hyper, values), {})[name] = {
            metric: [[g[lab][metric] for g in grids if lab in g] for lab in labels] for metric in METRICS}
    return groups


def click_rate_markdown(curves: dict[str, dict]) -> str:
    """UCBRank Fig. 1 as numbers: click rate of perfect documents per entry-time bin, mean over trials."""
    labels = next(iter(curves.values()))["labels"]
    lines = ["## Click rate of perfect documents by entry time (UCBRank Fig. 1)", "",
             "| method | " + " | ".join(str(x) for x in labels) + " |", "|---|" + "---:|" * len(labels)]
    for name, c in curves.items():
        cells = ["—" if not np.isfinite(r) else f"{r:.3f}" for r in np.asarray(c["rate"], np.float64)]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "#clicks / #sessions with the document as a candidate, for documents with the top label, by the "
                  "time they entered (first column: the initial candidates, whose clicks include the BM25 warm-up; "
                  "then equal bins of the main phase); mean over trials."]
    return "\n".join(lines)


def write_report(run, title: str, wall: float, eta: dict | None, order: list[str]) -> str:
    """The table report of a finished run (``ltrjax.runner.OnlineRun``); ``order`` = the rows' order."""
    exp = run.cfg.experiment  # an OnlineTableExperimentConfig (ltrjax.schema)
    rank = {name: i for i, name in enumerate(order)}
    run.writer.algorithms = dict(sorted(run.writer.algorithms.items(), key=lambda kv: rank.get(kv[0], len(rank))))
    results = run.writer.as_dict()
    rows = results["algorithms"]
    sig = significance(run, exp.alpha, exp.permutations)
    trial_wall = sum(t.get("wall_seconds", 0.0) for e in rows.values() for t in e["trials"])
    n_trials = max(len(e["trials"]) for e in rows.values())
    labels = run_labels(run)
    notes = (f"{results['dataset']}: {results['sessions']} sessions per trial "
             f"(+{results['warmup_sessions']} BM25 warm-up), {trials_phrase(n_trials)}; "
             f"test-split metrics, {'mean ± std over trials' if n_trials > 1 else 'one trial (no spread)'}; "
             f"wall time {wall:.0f} s for this invocation{memory_phrase(run.writer.header)}, "
             f"{trial_wall:.0f} s summed over the trials' own runs (a resumed run reuses earlier trials). "
             f"Significance at the unit of replication, the trial: two-sided paired t-tests over the "
             f"{trials_phrase(n_trials)}' values against the column's best row. " + undecided_line(sig, labels))
    per_trial = {n: {m: [t[m] for t in e["trials"]] for m in METRICS} for n, e in rows.items()}
    parts = [f"# {title}\n\n{run_summary(run.writer.header)}",
             online_table_markdown(per_trial, TABLE_METRICS, sig, "", notes, labels=labels, alpha=exp.alpha)]
    ratios = {}
    for n, e in rows.items():
        found = [t["exploitation_ratio"] for t in e["trials"] if t.get("exploitation_ratio")]
        if found:
            ratios[n] = {k: [f[k] for f in found] for k in found[0]}
    if ratios:
        parts.append(exploitation_ratio_markdown(ratios, "Exploitation ratios of the linear models (EBRank Table 4)"))
        plots.plot_exploitation_ratio(ratios, run.out_dir / "exploitation_ratio.png",
                                      f"{results['dataset']}: exploitation ratios (EBRank Table 4)")
        parts.append("![exploitation ratios](exploitation_ratio.png)")
    curves = {n: analysis.average_click_rates([t["click_rate_by_entry"] for t in e["trials"]])
              for n, e in rows.items() if e["trials"] and all(t.get("click_rate_by_entry") for t in e["trials"])}
    if curves:
        plots.plot_click_rate_by_entry(curves, run.out_dir / "click_rate_by_entry.png",
                                       f"{results['dataset']}: click rate of perfect documents by entry time")
        parts.append(click_rate_markdown(curves))
        parts.append("![click rate of perfect documents by entry time](click_rate_by_entry.png)")
    for (hyper, values), series in sweep_series(rows).items():
        grid = "_".join(f"{v:g}" if isinstance(v, (int, float)) else str(v) for v in values)
        path = run.out_dir / f"exploration_sweep_{safe_name(hyper)}_{safe_name(grid)}.png"
        plots.plot_sweep(list(values), series, path, f"exploration strength ({hyper})", labels,
                         title=f"{results['dataset']}: test metrics against {hyper} (validation grid runs)")
        parts.append(f"![test metrics against {hyper}]({path.name})")
    plots.plot_ndcg_over_time(results, run.out_dir / "ndcg_over_time.png")
    parts.append("![NDCG over time](ndcg_over_time.png)")
    if eta:
        plots.plot_sweep(eta["x"], eta["series"], run.out_dir / "eta_sweep.png", "entry probability η", labels,
                         title=f"{results['dataset']}: metrics against the entry probability (EBRank Fig. 4)")
        parts.append("![metrics against the entry probability](eta_sweep.png)")
    text = "\n\n".join(parts) + "\n"
    atomic_write(run.out_dir / "results.md", text)
    run.writer.header["significance"] = sig
    run.writer.header["wall_seconds"] = wall
    run.writer.write()
    return text


