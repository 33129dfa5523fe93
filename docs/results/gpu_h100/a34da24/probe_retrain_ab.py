"""One EBRank trial at synthetic_mslr30k shape, sim.retrain_examples device/host alternating, data loaded once."""
import json, sys, time
sys.path.insert(0, "benchmarks")
from benchlib import CompileMeter, load_data, load_run, online_overrides, machine
import argparse, jax
from ltrjax.runner import build_simulator, make_policy, trial_key
ns = argparse.Namespace(preset=sys.argv[1], queries=None, seed=0, smoke=len(sys.argv) > 3, json=True)
modes = sys.argv[2].split(",")
cfg0 = load_run(online_overrides(ns))
tic = time.perf_counter(); _, data = load_data(cfg0); print("data", round(time.perf_counter() - tic, 1), flush=True)
built = {}
for i, mode in enumerate(modes):
    if mode not in built:
        cfg = load_run(online_overrides(ns) + [f"sim.retrain_examples={mode}"])
        built[mode] = (cfg, build_simulator(cfg, data),
                       make_policy("ebrank", cfg.algorithms["ebrank"], data, cfg.fit_overrides, "ebrank")[0])
    cfg, sim, policy = built[mode]
    with CompileMeter() as cm:
        tic = time.perf_counter()
        r = sim.run(policy, trial_key(cfg, 0), progress=False)
        jax.block_until_ready(r.final_params)
        t = time.perf_counter() - tic
    print(json.dumps({"i": i, "mode": mode, "resolved": str(cfg.sim.retrain_examples), "run": t,
                      **{k: float(v) for k, v in r.timings.items()}, "compile": cm.seconds, "compiles": cm.compiles,
                      "programs": {k: v for k, v in cm.programs.items() if k in ("_members_documents", "_members_dataset_order_views")},
                      "cum": r.cum_ndcg["test"], "backend": machine()["backend"]}), flush=True)
