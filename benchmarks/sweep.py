"""A validation sweep as one program vs one trial at a time: EBRank, seeds x the epsilon grid, default protocol.

The sweep is what ``python -m ltrjax.run`` runs for EBRank: ``--seeds`` trials (trial keys as the runner
makes them, ``ltrjax.runner.trial_key``) x the ``tune`` grid of conf/algorithm/ebrank.yaml (7 epsilon
values), on the ``synthetic_mq2007`` preset under the default protocol of conf/config.yaml (BM25 warm-up,
Eq. 28 session count, 20 evaluate-then-retrain points). It is run twice:

  (a) population: every member in one ``Simulator.run_population`` call (one vmapped program; chunked only
      if the members do not fit the memory budget);
  (b) serial: the same members one by one with ``Simulator.run``, on a fresh simulator and policy (so (b)
      compiles its own programs and reuses nothing compiled for (a)).

(a) runs first. ``population_seconds`` and ``serial_seconds`` are wall clock *including* each phase's
compilation (what a user's command costs); JAX's tracing/lowering/compile time inside each phase is
metered (``jax.monitoring``) and subtracted for the ``*_excluding_compile`` figures. ``max_abs_diff`` is
the largest absolute difference between (a) and (b) of any member's Cum-NDCG (test), Warm-NDCG and
Cold-NDCG; ``same_choice`` says whether every seed picks the same epsilon by validation Cum-NDCG
(``ltrjax.runner.choose``) in (a) and (b). The two agree to float rounding (a vmapped fit and a single one
round differently); on long runs a rounding difference can flip a near-tie (a ranking, an early stop) and
the members' trajectories part, which ``max_abs_diff`` and ``same_choice`` then show.

    python benchmarks/sweep.py --json                  # 5 seeds x 7 values = 35 members (many minutes)
    python benchmarks/sweep.py --seeds 2 --queries 400
    python benchmarks/sweep.py --smoke --json          # 2 seeds x 2 values, 60 queries, one retrain: seconds
    python benchmarks/sweep.py --json --member-batch 8 sim.click_rng=device   # fits in blocks of 8 (a GPU's default)

``--member-batch B`` sets EBRank's ``fit.member_batch`` (both runs: fits vmapped in blocks of exactly B, the serial
run's single member padded to a block; default: the backend's, 1 on a CPU and 8 on a GPU); trailing arguments are
Hydra overrides. ``member_batch``, ``click_rng`` and ``retrain_examples`` (as resolved for the backend) and ``overrides``
are in the JSON.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import (CompileMeter, add_online_arguments, emit, load_data, load_run, machine, minus,  # noqa: E402
                      online_overrides, online_policy, phase_timings, plus, simulator_prepare_sharing, ratio,
                      use_compilation_cache)

ALGORITHM = "ebrank"


def build(cfg, data):
    """A simulator and the EBRank policy of ``cfg`` (as ``ltrjax.runner.OnlineRun`` builds them), its grid."""
    from ltrjax.runner import tune_grid

    sim, policy, tune = online_policy(cfg, data, ALGORITHM)
    return sim, policy, tune_grid(tune)


def _round(seconds):
    return None if seconds is None else round(seconds, 1)


def retrains(result) -> int:
    return len([i for i in result.train_info if not i.get("skipped")])


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5, help="trials (seed, t) for t < this")
    parser.add_argument("--grid", default=None, help="comma-separated epsilon values (default: ebrank.yaml tune)")
    parser.add_argument("--member-batch", type=int, default=None,
                        help="EBRank's fit.member_batch: members' retraining fits vmapped in blocks of this many "
                             "(default: the backend's, 1 on a CPU, 8 on a GPU)")
    add_online_arguments(parser, "2 seeds x 2 values, 60 queries, 1,500 sessions (one retrain)")
    args = parser.parse_args(argv)

    import jax
    import numpy as np

    from ltrjax.runner import choose, grid_label, trial_key

    if args.smoke:
        args.seeds = min(args.seeds, 2)
    cache = use_compilation_cache(args)
    member_batch = [f"++algorithms.{ALGORITHM}.fit.member_batch={args.member_batch}"] if args.member_batch else []
    cfg = load_run(online_overrides(args) + member_batch + list(args.overrides))
    tune_split = cfg.experiment.tune_split
    tic = time.perf_counter()
    _, data = load_data(cfg)
    data_seconds = time.perf_counter() - tic

    sim, policy, grid = build(cfg, data)
    if args.grid:
        name = next(iter(grid[0])) if grid[0] else "epsilon"
        grid = [{name: float(v)} for v in args.grid.split(",")]
    elif args.smoke:
        grid = [grid[0], grid[len(grid) // 2]]
    seeds = list(range(args.seeds))
    keys = [trial_key(cfg, t) for t in seeds for _ in grid]
    hypers = [values for _ in seeds for values in grid]
    n_warm, n_main = sim.session_counts()
    if not args.json:
        print(f"{len(keys)} members ({len(seeds)} seeds x {len(grid)} values) on {data.name}: {data.n_queries} "
              f"queries, {n_warm if sim.warmup_policy is not None else 0} warm-up + {n_main} sessions each",
              flush=True)

    # (a) one population
    chunk = sim.chunk_size(len(keys), policy=policy)
    with CompileMeter() as pop_compile:
        tic = time.perf_counter()
        population = sim.run_population(policy, keys, hypers, progress=False)
        jax.block_until_ready([r.final_params for r in population])
        population_seconds = time.perf_counter() - tic
    if not args.json:
        print(f"population: {population_seconds:.1f} s (compile {_round(pop_compile.seconds)} s)", flush=True)

    # (b) the same members one at a time, on a fresh simulator and policy
    serial_sim, serial_policy, _ = build(cfg, data)
    serial, per_member = [], []
    with CompileMeter() as serial_compile:
        tic = time.perf_counter()
        for key, hyper in zip(keys, hypers):
            t0 = time.perf_counter()
            serial.append(serial_sim.run(serial_policy, key, hyper=hyper, progress=False))
            per_member.append(time.perf_counter() - t0)
        serial_seconds = time.perf_counter() - tic
    if not args.json:
        print(f"serial: {serial_seconds:.1f} s (compile {_round(serial_compile.seconds)} s)", flush=True)

    diffs = {"cum_ndcg": [], "warm_ndcg": [], "cold_ndcg": []}
    for a, b in zip(population, serial):
        diffs["cum_ndcg"].append(abs(a.cum_ndcg["test"] - b.cum_ndcg["test"]))
        diffs["warm_ndcg"].append(abs(a.warm_ndcg - b.warm_ndcg))
        diffs["cold_ndcg"].append(abs(a.cold_ndcg - b.cold_ndcg))
    chosen = {"population": [], "serial": []}
    for i in range(len(seeds)):
        block = slice(i * len(grid), (i + 1) * len(grid))
        chosen["population"].append(choose(population[block], grid, tune_split)[1])
        chosen["serial"].append(choose(serial[block], grid, tune_split)[1])
    values = np.asarray([v for d in diffs.values() for v in d], np.float64)

    occupancy = sim.doc_slot_occupancy(policy, keys)  # the population's plans again (deterministic)
    sharing = simulator_prepare_sharing(sim, policy, trial_key(cfg, 0))
    pop_excl = minus(population_seconds, pop_compile.seconds)
    serial_excl = minus(serial_seconds, serial_compile.seconds)
    out = {
        "population_seconds": population_seconds,
        "serial_seconds": serial_seconds,
        "speedup": serial_seconds / population_seconds,
        "timing": "wall clock including each phase's own compilation (population first, then serial)",
        "population_compile_seconds": pop_compile.seconds,
        "serial_compile_seconds": serial_compile.seconds,
        "population_compiles": pop_compile.compiles,
        "compiles": plus(pop_compile.compiles, serial_compile.compiles),
        "compile_cache_hits": plus(pop_compile.cache_hits, serial_compile.cache_hits),
        "compile_seconds": plus(pop_compile.seconds, serial_compile.seconds),
        "compilation_cache": cache,
        "doc_slot_occupancy": occupancy,
        "segment_width_shapes": sim.width_shapes(),
        "alpha_seconds_7_over_1": sharing["ratio"],
        "alpha_sharing": sharing,
        "serial_compiles": serial_compile.compiles,
        "population_seconds_excluding_compile": pop_excl,
        "serial_seconds_excluding_compile": serial_excl,
        "speedup_excluding_compile": ratio(serial_excl, pop_excl),
        "max_abs_diff": float(values.max()) if values.size else 0.0,
        "max_abs_diff_by_metric": {k: float(max(v)) for k, v in diffs.items()},
        "same_choice": chosen["population"] == chosen["serial"],
        "chosen": {k: [grid_label(c) for c in v] for k, v in chosen.items()},
        "tune_split": tune_split,
        "member_batch": int(policy.fit_config.resolved().member_batch),  # the fits' vmap block (1: one after another)
        "click_rng": str(cfg.sim.click_rng),
        "retrain_examples": str(cfg.sim.retrain_examples),
        "overrides": member_batch + list(args.overrides),
        "members": len(keys),
        "seeds": len(seeds),
        "grid": [grid_label(g) for g in grid],
        "chunks": -(-len(keys) // chunk),
        "members_per_chunk": chunk,
        "sessions_per_trial": n_main,
        "warmup_sessions_per_trial": n_warm if sim.warmup_policy is not None else 0,
        "queries": data.n_queries,
        "dataset": data.name,
        "data_seconds": data_seconds,
        "population_retrains": sum(retrains(r) for r in population),  # over all members
        "serial_retrains": sum(retrains(r) for r in serial),
        "population_timings": phase_timings(population, range(0, len(keys), chunk)),
        "serial_timings": phase_timings(serial, range(len(keys))),
        "serial_member_seconds": {"first": per_member[0], "median": float(np.median(per_member)),
                                  "max": float(max(per_member))},
        "cum_ndcg_test": {"population": [r.cum_ndcg["test"] for r in population],
                          "serial": [r.cum_ndcg["test"] for r in serial]},
        **machine(),
    }
    return emit(out, args.json)


if __name__ == "__main__":
    main()
