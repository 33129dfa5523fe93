"""Offline protocol timings: logging throughput and per-estimator training time (SPEC §6, §8).

    python benchmarks/offline_throughput.py --dataset synthetic_mslr10k dataset.n_queries=3000

Measures, on this machine:
  * logging N sessions (default 1M) with the vectorized jitted logger: first call (with
    compilation) and a second call (compiled), in sessions/s;
  * the one-session-at-a-time NumPy reference on a small number of sessions, in sessions/s;
  * preparing a trial (production ranker, top-10 lists) and training each estimator to
    convergence (early stopping on validation NDCG@10), with epochs and seconds.
No persistent compilation cache unless --cache, so times include compilation. Writes JSON.
``--smoke`` (for tests; seconds): the synthetic dataset unless ``--dataset`` is given, 100 queries, 4k
logged sessions, 2k reference sessions, three estimators, 5 epochs; arguments given still win.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

import jax

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "experiments"))
from offline_table import ROOT, SMOKE, SMOKE_DATASET, compose  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default=None, help=f"default: synthetic_mslr10k (--smoke: {SMOKE_DATASET})")
    ap.add_argument("--sessions", type=int, default=None, help="default 1,000,000 (--smoke: 4,000)")
    ap.add_argument("--reference-sessions", type=int, default=None, help="default 20,000 (--smoke: 2,000)")
    ap.add_argument("--cache", action="store_true")
    ap.add_argument("--out", default=None, help="default: outputs/bench_offline[_smoke].json")
    ap.add_argument("--smoke", action="store_true", help="a tiny run (seconds), for tests")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args(argv)
    if args.smoke:
        args.overrides = SMOKE + args.overrides
    args.dataset = args.dataset or (SMOKE_DATASET if args.smoke else "synthetic_mslr10k")
    args.sessions = args.sessions or (4_000 if args.smoke else 1_000_000)
    args.reference_sessions = args.reference_sessions or (2_000 if args.smoke else 20_000)
    args.out = args.out or str(ROOT / "outputs" / f"bench_offline{'_smoke' if args.smoke else ''}.json")
    from ltrjax.clicks import make_click_model
    from ltrjax.compile_cache import enable_compilation_cache
    from ltrjax.offline.config import override
    from ltrjax.offline.experiment import prepare_trial, run_setting
    from ltrjax.offline_runner import experiment_config, load_queryset, run_dataset
    from ltrjax.offline.logging import log_click_stats, log_sessions, reference_session_clicks
    from ltrjax.experiment import configure_process

    if args.cache:
        enable_compilation_cache()
    configure_process()  # float32 products, Python's collector relaxed: as ltrjax.run
    cfg = compose(args.dataset, args.overrides)
    exp = override(experiment_config(cfg), {"progress": False, "n_sessions": args.sessions})
    res = {"dataset": args.dataset, "overrides": args.overrides, "smoke": args.smoke, "cpu_count": os.cpu_count(),
           "devices": [str(d) for d in jax.devices()]}
    t0 = time.perf_counter()
    qs = load_queryset(*run_dataset(cfg), seed=exp.seed)
    res["load_seconds"] = time.perf_counter() - t0
    res["n_queries"], res["n_docs"] = int(qs.n_queries), int(qs.n_docs)
    t0 = time.perf_counter()
    trial = prepare_trial(qs, exp, int(exp.seed))
    res["prepare_seconds"] = time.perf_counter() - t0
    model = make_click_model(exp.click_model.mapping(), int(trial.logged.mask.shape[1]))
    from ltrjax.offline.experiment import click_relevance
    import jax.numpy as jnp

    logged = trial.logged.replace(relevance=jnp.where(trial.logged.mask,
                                                      click_relevance(trial.logged.labels, exp, trial.y_max), 0.0))
    for tag, seed in (("logging_first_call", 0), ("logging_compiled", 1)):
        t0 = time.perf_counter()
        stats = log_click_stats(jax.random.PRNGKey(seed), model, logged, args.sessions, chunk=exp.logging_chunk)
        dt = time.perf_counter() - t0
        res[tag] = {"seconds": dt, "sessions_per_s": args.sessions / dt, "clicks": stats.total_clicks}
    s = log_sessions(jax.random.PRNGKey(2), model, logged, args.reference_sessions)
    t0 = time.perf_counter()
    reference_session_clicks(model, logged.relevance, logged.labels, logged.mask, s.query, s.uniforms)
    dt = time.perf_counter() - t0
    res["numpy_reference"] = {"sessions": args.reference_sessions, "seconds": dt,
                              "sessions_per_s": args.reference_sessions / dt}
    out = run_setting(trial, exp, log=lambda m: print(m, flush=True))
    res["estimators"] = {n: {"seconds": v["seconds"], "epochs": v.get("epochs"), "ndcg@10": v["ndcg@10"]}
                         for n, v in out.items() if not n.startswith("_")}
    res["run_setting_logging_seconds"] = out["_timing"].get("logging")
    res["trial_info"] = trial.info
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.out).write_text(json.dumps(res, indent=1))
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
