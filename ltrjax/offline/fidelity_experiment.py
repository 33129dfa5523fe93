"""``experiment=offline_fidelity``: the Vectorization (KDD'22) and PRS (SIGIR'20) settings side by side
with the papers' own numbers, a d-sweep and a noise / propensity-misestimation sweep, and one line per claim.

``run_fidelity(cfg, out_dir, queryset=None)`` writes ``results.json`` (``{"claims": [{"paper", "claim",
"verdict", "p_value", ...}], "tables": ..., "sweeps": ...}``), ``results.md`` and ``d_sweep.png``,
``prs_sweeps.png``. Every trial t (seed ``seed + t``) prepares the dataset's split, production ranker and
logged lists once per evaluation mode (graded for Vectorization, binarized for PRS) and reuses them across
settings, so every comparison is paired over trials.

* Vectorization Tables 1-2 (§6.1): TianGong-ST matrix clicks (Eq. 11) and graded trust bias (Eq. 12-13),
  the ULTRA listwise naive / IPS forms, DLA, RegressionEM, Affine, Vectorization (d = 5 and d = 2, the
  paper's configs), an MLP ranker; the d-sweep runs Vectorization for every d in ``vectorization.dims``.
* PRS Table 1 / Figs. 5-6 (§5.2): PBM clicks with theta_k = 1/k (eta = 1) and click noise mu, binarized
  relevance; naive, IPS, PNS, PRS; a noise sweep over mu and a sweep of the eta the estimators are told.
* The vector-EH checks of ``ltrjax.offline.fidelity`` on its synthetic ``basis_queryset`` (``vector_eh``).
"""

from __future__ import annotations

import pathlib
import time

import numpy as np

from ltrjax.offline import fidelity as F
from ltrjax.offline import experiment as E
from ltrjax.report.record import check_experiment, experiment_record, write_results

# The papers' numbers (NDCG@10 unless noted). Vectorization Table 1 (Yahoo!, TianGong clicks, 8 runs): only the
# NDCG@10 column is unambiguous in the paper's text (its table is garbled there); Table 2 (Yahoo!, trust bias).
PAPER = {
    "vectorization_table1": {"dataset": "Yahoo! (Vectorization Table 1, nDCG@10)",
                             "labeled": 0.758, "naive": 0.718, "dla": 0.725, "pair_debias": 0.717,
                             "regression_em": 0.709, "affine": 0.733, "vectorization": 0.747},
    "vectorization_table2": {"dataset": "Yahoo! (Vectorization Table 2, nDCG@10)",
                             "labeled": 0.758, "naive": 0.719, "dla": 0.751, "pair_debias": 0.723,
                             "regression_em": 0.737, "affine": 0.755, "vectorization": 0.755},
    # PRS Table 1 (Yahoo!, n = 128K clicks, eta = 1, mu = 0.1): LambdaMART-based rows; IPS/PNS with a linear
    # ranker are not in the paper's table, Unbiased LambdaMART (IPS on both sides) is the nearest.
    "prs_table1": {"dataset": "Yahoo! (PRS Table 1, NDCG@10)", "ips": 0.6173, "prs": 0.6264, "dla": 0.6009,
                   "propensity_svm": 0.5978},
}

FIDELITY_DEFAULTS = {
    "kind": "offline_fidelity", "name": "offline_fidelity", "seed": 0, "trials": 3, "progress": False,
    "n_sessions": 200_000, "list_size": 10, "production_fraction": 0.01, "logging_chunk": 1 << 17,
    "hidden": [64, 32], "max_docs": 256, "eval_buckets": 4, "margin": 0.01, "estimator_options": {},
    "vectorization": {"ranker": "mlp", "dims": [1, 2, 3, 5],
                      "estimators": ["naive", "ips", "dla", "regression_em", "affine", "production", "labeled"],
                      "settings": ["tiangong", "trust_bias"]},
    "prs": {"ranker": "linear", "estimators": ["naive", "ips", "pns", "prs"], "noise": [0.0, 0.1, 0.2, 0.3],
            "assumed_eta": [0.5, 1.0, 1.5, 2.0]},
    "vector_eh": {"bed": "confounded_mlp", "seeds": 10, "first_seed": 100, "n_queries": 600, "n_sessions": 200_000,
                  "dims": [3, 2], "old_schedule": []},
    "train": {"batch_size": 64, "optimizer": "adam", "learning_rate": 0.01, "clip_norm": 5.0, "weight_decay": 0.0,
              "max_epochs": 300, "patience": 30, "eval_every": 1},
}

VEC_SETTINGS = {
    "tiangong": {"click_model": {"kind": "tiangong", "relevance": "vectorization"}, "dim": 5,
                 "paper": "vectorization_table1", "title": "Vectorization Table 1: TianGong-ST click matrix"},
    "trust_bias": {"click_model": {"kind": "trust_bias", "examination": "joachims", "eta": 1.0,
                                   "relevance": "vectorization", "noise": 0.0}, "dim": 2,
                   "paper": "vectorization_table2", "title": "Vectorization Table 2: trust bias"},
}


def fidelity_config(cfg) -> dict:
    """``cfg.experiment`` merged over ``FIDELITY_DEFAULTS`` (plain dicts)."""
    exp = {k: v for k, v in E.plain_experiment(cfg).items() if v is not None}
    return E._merge(FIDELITY_DEFAULTS, exp)


def _base(fx: dict, ranker: str, **over) -> dict:
    keep = ("seed", "trials", "progress", "n_sessions", "list_size", "production_fraction", "logging_chunk",
            "hidden", "max_docs", "eval_buckets", "train", "estimator_options")
    return E.experiment_config(E._merge({k: fx[k] for k in keep} | {"ranker": ranker}, over))


def _quiet(*a, **k):
    return None


def _claim(paper, setting, claim, test, **extra) -> dict:
    if "margin" in test:  # an equivalence (TOST) test
        return {"paper": paper, "setting": setting, "claim": claim, **test, "verdict": F.equivalence_verdict(test),
                **extra}
    holds = test["p_value"] is not None and test["p_value"] < 0.05
    weak = not holds and test.get("mean_diff", 0) > 0 and test["p_value"] is not None and test["p_value"] < 0.2
    return {"paper": paper, "setting": setting, "claim": claim, **test,
            "verdict": "holds" if holds else ("holds weakly" if weak else "does not hold"), **extra}


def vectorization_part(qs, fx: dict, log=print) -> tuple[dict, dict, list]:
    """Tables 1-2 and the d-sweep: {setting: {name: [per trial]}}, {setting: {d: [per trial]}}, claims."""
    vx = fx["vectorization"]
    tables, sweep = {}, {}
    for name in vx["settings"]:
        s = VEC_SETTINGS[name]
        over = {"click_model": s["click_model"], "eval": {"binarize": False},
                "estimator_options": {"naive_form": "listwise", "ips_form": "listwise"},
                "train_overrides": {"vectorization": {"eval_every": 25}}}
        exp = _base(fx, vx["ranker"], **over)
        tables[name] = {e: [] for e in vx["estimators"] + ["vectorization"]}
        sweep[name] = {int(d): [] for d in sorted(set(vx["dims"]) | {s["dim"]})}
        for t in range(int(fx["trials"])):
            trial = E.prepare_trial(qs, exp, int(fx["seed"]) + t)
            res = E.run_setting(trial, exp, estimators=vx["estimators"], log=_quiet)
            for e in vx["estimators"]:
                tables[name][e].append(res[e]["ndcg@10"])
            for d in sweep[name]:
                ed = E._merge(exp, {"estimator_options": {"vec_dim": int(d)}})
                r = E.run_setting(trial, ed, estimators=["vectorization"], log=_quiet)
                sweep[name][d].append(r["vectorization"]["ndcg@10"])
            tables[name]["vectorization"].append(sweep[name][s["dim"]][-1])
            log(f"[vectorization/{name}] trial {t}: " + " ".join(f"{e}={v[-1]:.4f}" for e, v in tables[name].items())
                + " | d: " + " ".join(f"{d}={v[-1]:.4f}" for d, v in sweep[name].items()))
    claims = []
    for name, tab in tables.items():
        s = VEC_SETTINGS[name]
        for ref in ("naive", "ips", "dla", "regression_em", "affine"):
            if ref not in tab:
                continue
            if name == "trust_bias" and ref == "affine":
                claims.append(_claim("Vectorization", f"{qs.name}, trust bias, d=2",
                                     f"Vectorization = Affine within {fx['margin']} NDCG@10 (Table 2)",
                                     F.equivalence_test(tab["vectorization"], tab[ref], fx["margin"])))
                continue
            claims.append(_claim("Vectorization", f"{qs.name}, {name}, d={s['dim']}",
                                 f"Vectorization > {ref} on NDCG@10 (Table {1 if name == 'tiangong' else 2})",
                                 F.paired_test(tab["vectorization"], tab[ref])))
    return tables, sweep, claims


def prs_part(qs, fx: dict, log=print) -> tuple[dict, list]:
    """Noise and misestimation sweeps: {"noise": {mu: {name: [...]}}, "assumed_eta": {eta: {...}}}, claims."""
    px = fx["prs"]
    exp0 = _base(fx, px["ranker"], click_model={"kind": "pbm", "examination": "inverse", "eta": 1.0,
                                                 "relevance": "binary", "noise": 0.1})
    sweeps = {"noise": {float(m): {e: [] for e in px["estimators"]} for m in px["noise"]},
              "assumed_eta": {float(a): {e: [] for e in px["estimators"]} for a in px["assumed_eta"]}}
    for t in range(int(fx["trials"])):
        trial = E.prepare_trial(qs, exp0, int(fx["seed"]) + t)
        for mu in sweeps["noise"]:
            res = E.run_setting(trial, E._merge(exp0, {"click_model": {"noise": mu}}), estimators=px["estimators"],
                                log=_quiet)
            for e in px["estimators"]:
                sweeps["noise"][mu][e].append(res[e]["ndcg@10"])
        for a in sweeps["assumed_eta"]:
            if a == 1.0 and 0.1 in sweeps["noise"]:
                res = {e: {"ndcg@10": sweeps["noise"][0.1][e][-1]} for e in px["estimators"]}
            else:
                res = E.run_setting(trial, E._merge(exp0, {"assumed_eta": a}), estimators=px["estimators"], log=_quiet)
            for e in px["estimators"]:
                sweeps["assumed_eta"][a][e].append(res[e]["ndcg@10"])
        log(f"[prs] trial {t}: " + " ".join(f"mu={m}:" + ",".join(f"{e}={v[-1]:.4f}" for e, v in r.items())
                                             for m, r in sweeps["noise"].items()))
    claims = []
    default = sweeps["noise"].get(0.1)
    if default:
        for ref in ("ips", "pns", "naive"):
            claims.append(_claim("PRS", f"{qs.name}, {px['ranker']}, eta=1, mu=0.1",
                                 f"PRS > {ref} on NDCG@10 (Table 1, Fig. 3)",
                                 F.paired_test(default["prs"], default[ref])))
    mus = sorted(sweeps["noise"])
    if len(mus) > 1:
        hi = sweeps["noise"][mus[-1]]
        gap = lambda r: np.asarray(r["prs"]) - np.asarray(r["ips"])  # noqa: E731
        claims.append(_claim("PRS", f"{qs.name}, {px['ranker']}, mu={mus[-1]} vs mu={mus[0]}",
                             "PRS - IPS grows with click noise (Fig. 5)",
                             F.paired_test(gap(hi), gap(sweeps["noise"][mus[0]]))))
    etas = sorted(sweeps["assumed_eta"])
    if etas and etas[-1] > 1.0:
        r = sweeps["assumed_eta"][etas[-1]]
        claims.append(_claim("PRS", f"{qs.name}, {px['ranker']}, assumed eta={etas[-1]} (true 1)",
                             "PRS > IPS with underestimated propensities (Fig. 6)", F.paired_test(r["prs"], r["ips"])))
    return sweeps, claims


# --------------------------------------------------------------------------- files
def _cell(v) -> str:
    v = np.asarray(v, np.float64)
    return f"{v.mean():.4f} ± {v.std(ddof=1) if len(v) > 1 else 0.0:.4f}"


def markdown(results: dict) -> str:
    out = [f"# Offline fidelity: {results['dataset']}", "", f"Sizes: {results['sizes']}", ""]
    for name, tab in results.get("tables", {}).items():
        s = VEC_SETTINGS[name]
        paper = PAPER[s["paper"]]
        out += [f"## {s['title']} (d = {s['dim']}, {results['sizes']['vectorization_ranker']} ranker)", "",
                f"| estimator | NDCG@10 here ({results['dataset']}) | paper: {paper['dataset']} |", "|---|---|---|"]
        for e, v in tab.items():
            p = paper.get(e)
            out.append(f"| {e} | {_cell(v)} | {'' if p is None else f'{p:.3f}'} |")
        out.append("")
    if results.get("d_sweep"):
        out += ["## d-sweep (Vectorization, NDCG@10; figure d_sweep.png)", "",
                "| setting | " + " | ".join(f"d={d}" for d in next(iter(results["d_sweep"].values()))) + " |",
                "|---|" + "---|" * len(next(iter(results["d_sweep"].values())))]
        for name, row in results["d_sweep"].items():
            out.append(f"| {name} | " + " | ".join(_cell(v) for v in row.values()) + " |")
        out.append("")
    if results.get("prs"):
        paper = PAPER["prs_table1"]
        tab = results["prs"]["noise"].get("0.1") or results["prs"]["noise"].get(0.1)
        if tab:
            ranker = results["sizes"].get("prs_ranker", "linear")
            out += [f"## PRS Table 1 setting (eta = 1, mu = 0.1, {ranker} ranker)", "",
                    f"| estimator | NDCG@10 here (mean ± std over trials) | paper: {paper['dataset']} |",
                    "|---|---|---|"]
            for e, v in tab.items():
                p = paper.get(e)
                out.append(f"| {e} | {_cell(v)} | {'' if p is None else f'{p:.4f}'} |")
            out += ["", "Paper rows are LambdaMART-based (IPS = Unbiased LambdaMART); here every estimator trains "
                    + ("LightGBM trees on the gradients and hessian diagonal of its own loss (ltrjax.offline.gbdt: IPS "
                       "= the PRS paper's IPS-weighted pairwise LambdaMART with known propensities, PRS = "
                       "PRS-LambdaMART with the logistic pair loss)." if ranker == "lambdamart"
                       else f"the same {ranker} ranker."), ""]
        for key, label in (("noise", "click noise mu (PRS Fig. 5)"), ("assumed_eta", "assumed eta, true 1 (PRS Fig. 6)")):
            sw = results["prs"][key]
            names = list(next(iter(sw.values())))
            out += [f"## PRS sweep: {label} (NDCG@10, mean ± std over trials; figure prs_sweeps.png)", "",
                    f"| {key} | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
            for x, row in sw.items():
                out.append(f"| {x} | " + " | ".join(_cell(row[n]) for n in names) + " |")
            out.append("")
    out += ["## Claims", "", "| paper | setting | claim | verdict | mean diff | p |", "|---|---|---|---|---|---|"]
    for c in results["claims"]:
        md = c.get("mean_diff")
        p = c.get("p_value")
        extra = f" (R^2 {c['recovery_r2']:.3f})" if "recovery_r2" in c else ""
        out.append(f"| {c['paper']} | {c['setting']} | {c['claim']}{extra} | {c['verdict']} | "
                   f"{'' if md is None else f'{md:+.4f}'} | {'' if p is None else f'{p:.3g}'} |")
    return "\n".join(out) + "\n"


def plot(results: dict, out_dir: pathlib.Path) -> None:
    from matplotlib.figure import Figure

    if results.get("d_sweep"):
        fig = Figure(figsize=(5, 3.5))
        ax = fig.add_subplot()
        for name, row in results["d_sweep"].items():
            ds = [int(d) for d in row]
            m = [np.mean(v) for v in row.values()]
            s = [np.std(v) for v in row.values()]
            line = ax.errorbar(ds, m, yerr=s, marker="o", capsize=3, label=f"Vectorization, {name}")
            for ref, ls in (("affine", "--"), ("dla", ":")):
                if ref in results["tables"].get(name, {}):
                    ax.axhline(np.mean(results["tables"][name][ref]), ls=ls, lw=1, color=line[0].get_color(),
                               label=f"{ref}, {name}")
        ax.set_xlabel("d")
        ax.set_ylabel("NDCG@10")
        ax.legend(fontsize=6)
        fig.tight_layout()
        fig.savefig(out_dir / "d_sweep.png", dpi=120)
    if results.get("prs"):
        fig = Figure(figsize=(9, 3.5))
        for i, (key, label) in enumerate((("noise", "click noise mu"), ("assumed_eta", "assumed eta (true 1)"))):
            ax = fig.add_subplot(1, 2, i + 1)
            sw = results["prs"][key]
            xs = [float(x) for x in sw]
            for n in next(iter(sw.values())):
                ax.errorbar(xs, [np.mean(sw[x][n]) for x in sw], yerr=[np.std(sw[x][n]) for x in sw], marker="o",
                            capsize=3, label=n)
            ax.set_xlabel(label)
            ax.set_ylabel("NDCG@10")
            ax.legend(fontsize=7)
        fig.suptitle(f"{results['dataset']}, {results['sizes'].get('prs_ranker', 'linear')} ranker, mean ± std over "
                     f"{results['sizes']['trials']} trials", fontsize=9)
        fig.tight_layout()
        fig.savefig(out_dir / "prs_sweeps.png", dpi=120)


RESUME_IGNORES = ("trials", "progress")  # a rerun recomputes every part; other settings are refused (ltrjax.report.record)


def run_fidelity(cfg, out_dir, queryset=None, log=print) -> dict:
    """Run every part named in the config on the run's dataset; write results.json / results.md / figures."""
    fx = fidelity_config(cfg)
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    qs = queryset if queryset is not None else E.load_queryset(cfg, E.experiment_config({"seed": fx["seed"]}))
    check_experiment(out_dir, "offline_fidelity", E._jsonable(fx), RESUME_IGNORES, getattr(qs, "name", "?"))
    t0 = time.perf_counter()
    results = {"dataset": getattr(qs, "name", "?"), "claims": [], "config": fx,
               "record": experiment_record("offline_fidelity", cfg),
               "sizes": {"trials": int(fx["trials"]), "n_sessions": int(fx["n_sessions"]),
                         "n_queries": int(qs.n_queries), "vectorization_ranker": fx["vectorization"]["ranker"],
                         "prs_ranker": (fx.get("prs") or {}).get("ranker")}}

    def save():
        results["seconds"] = time.perf_counter() - t0
        write_results(out_dir, E._jsonable(results))
        (out_dir / "results.md").write_text(markdown(E._jsonable(results)))

    if fx.get("vectorization"):
        tables, sweep, claims = vectorization_part(qs, fx, log)
        results.update(tables=tables, d_sweep=sweep)
        results["claims"] += claims
        save()
    if fx.get("prs") and fx["prs"].get("estimators"):  # prs.estimators=[] skips the PRS part
        sweeps, claims = prs_part(qs, fx, log)
        results["prs"] = sweeps
        results["claims"] += claims
        save()
    vx = fx.get("vector_eh")
    if vx and int(vx.get("seeds", 0)) > 0:
        seeds = range(int(vx["first_seed"]), int(vx["first_seed"]) + int(vx["seeds"]))
        chk = F.run_checks(vx["bed"], seeds, int(vx["n_queries"]), int(vx["n_sessions"]), vx["dims"],
                           float(fx["margin"]), vx["old_schedule"], log=log,
                           over={"train": fx["train"], "estimator_options": fx["estimator_options"]})
        for c in chk["claims"]:
            c["setting"] = f"{vx['bed']} bed, basis_queryset({vx['n_queries']} queries), {c['setting']}"
        results["claims"] += chk["claims"]
        results["vector_eh"] = chk["raw"]
        results["sizes"]["vector_eh"] = {k: vx[k] for k in ("bed", "seeds", "first_seed", "n_queries", "n_sessions")}
    save()
    results = E._jsonable(results)
    plot(results, out_dir)
    print(markdown(results))
    return results
