"""Wall time of one whole EBRank run, end to end: data, compile, BM25 warm-up, sessions, 20 retrains.

    python benchmarks/end_to_end.py                          # MQ2007-sized synthetic data (1692 queries)
    python benchmarks/end_to_end.py --preset synthetic_mslr30k
    python benchmarks/end_to_end.py --smoke --json           # 60 queries, 1,500 sessions, one retrain: seconds
    python benchmarks/end_to_end.py --json --breakdown sim.trial_setup=device   # and where a warm run's wall goes

The run is what ``python -m ltrjax.run`` does for one EBRank trial (conf/config.yaml composed with Hydra:
its sim block and click model, conf/algorithm/ebrank.yaml through ``ltrjax.runner.make_policy``, BM25
warm-up when the data has a BM25 column), as a population of one. ``run_seconds`` splits into the trial's
``TrialResult.timings`` (simulate: warm-up and main sessions; train: retrains; evaluate: Warm/Cold NDCG
after every segment) and the rest (setup, results); ``compile_seconds`` is JAX's tracing, lowering and
compile time during the run (included in the splits). The EBRank paper's code needs about 198 s for an
MQ2007-sized run on a 2-core CPU (seed-code.md §5).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import (PLAN_PARTS, SETUP_PARTS, CompileMeter, Stopwatch, add_online_arguments, emit,  # noqa: E402
                      load_data, load_run, machine, online_overrides, ratio, simulator_prepare_sharing, trial_targets,
                      use_compilation_cache)



def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epsilon", type=float, default=None, help="default: conf/algorithm/ebrank.yaml")
    parser.add_argument("--occupancy-only", action="store_true",
                        help="only the main phase's doc_slot_occupancy and scanned widths, from the trial's plans "
                             "(nothing is simulated or compiled; a minute at synthetic_mslr30k shape)")
    parser.add_argument("--breakdown", action="store_true",
                        help="after the cold run, two warm runs of the same trial: where the wall goes (programs, "
                             "retrains, host work) and the bytes moved to the device ('warm_breakdown')")
    add_online_arguments(parser, "60 queries, 1,500 sessions in 2 segments (one retrain)")
    args = parser.parse_args(argv)

    import jax

    from ltrjax.runner import build_simulator, make_policy, trial_key

    cache = use_compilation_cache(args)
    overrides = online_overrides(args)
    if args.epsilon is not None:
        overrides.append(f"algorithms.ebrank.epsilon={args.epsilon}")
    cfg = load_run(overrides + list(args.overrides))

    tic = time.perf_counter()
    _, data = load_data(cfg)
    t_data = time.perf_counter() - tic
    sim = build_simulator(cfg, data)
    acfg = cfg.algorithms["ebrank"]
    policy, _ = make_policy("ebrank", acfg, data, cfg.fit_overrides, "ebrank")
    if args.occupancy_only:
        return emit(occupancy_only(sim, policy, trial_key(cfg, 0), args.preset, data.n_queries), args.json)
    with CompileMeter() as compile_meter:
        tic = time.perf_counter()
        result = sim.run(policy, trial_key(cfg, 0), progress=not args.json)
        jax.block_until_ready(result.final_params)
        t_run = time.perf_counter() - tic
    warm, main_ = sim.session_counts()
    where = wall_breakdown(sim, policy, trial_key(cfg, 0)) if args.breakdown else {}
    occupancy = sim.doc_slot_occupancy(policy, [trial_key(cfg, 0)])  # the run's plans again (deterministic)
    sharing = simulator_prepare_sharing(sim, policy, trial_key(cfg, 0))
    timings = {k: float(v) for k, v in result.timings.items()}
    split = {k: timings.get(k, 0.0) for k in ("simulate", "train", "evaluate")}
    out = {"preset": args.preset, "queries": data.n_queries, "sessions": main_,
           "warmup_sessions": warm if sim.warmup_policy is not None else 0,
           "epsilon": float(policy.default_hyper().epsilon),
           "data_seconds": t_data, "run_seconds": t_run, "total_seconds": t_data + t_run,
           "wall_seconds": t_data + t_run, **{f"{k}_seconds": v for k, v in split.items()},
           "other_seconds": t_run - sum(split.values()),
           "compile_seconds": compile_meter.seconds, "compiles": compile_meter.compiles,
           "compile_cache_hits": compile_meter.cache_hits, "compile_programs": compile_meter.programs,
           "compile_share": ratio(compile_meter.seconds, t_data + t_run), "compilation_cache": cache,
           "doc_slot_occupancy": occupancy, "segment_width_shapes": sim.width_shapes(),
           "alpha_seconds_7_over_1": sharing["ratio"], "alpha_sharing": sharing,
           "timings": timings, "retrains": len([i for i in result.train_info if not i.get("skipped")]),
           "cum_ndcg": result.cum_ndcg["test"], "warm_ndcg": result.warm_ndcg, "cold_ndcg": result.cold_ndcg,
           "click_rng": str(cfg.sim.click_rng), "retrain_examples": str(cfg.sim.retrain_examples),
           "segment_widths": str(cfg.sim.segment_widths), "trial_setup": sim.config.trial_setup,
           "warm_breakdown": where, "overrides": list(args.overrides), **machine()}
    return emit(out, args.json)


def wall_breakdown(sim, policy, key) -> dict:
    """Where a warm run's wall goes (the same trial again, its programs compiled): ``wall_seconds`` of a plain run;
    ``program_seconds``, every compiled program of the trial (segments, evaluations, refreshes, a device set-up's
    programs; ``benchlib.trial_targets``) in a second run that waits for each; ``train_seconds``, the retrains
    (host examples and fits); ``host_seconds`` the rest (wall minus programs and retrains: the Python and NumPy
    work); ``setup_seconds`` and ``planning_seconds`` inside them; the bytes put on the device by the set-up and per
    segment (``transfers.TransferMeter``)."""
    import jax

    from ltrjax.online import transfers

    def run(block: bool) -> dict:
        targets, programs = trial_targets(sim, policy, sim.config.trial_setup)
        with Stopwatch(targets, block=programs if block else ()) as watch, transfers.TransferMeter() as moved:
            tic = time.perf_counter()
            result = sim.run(policy, key, progress=False)
            jax.block_until_ready(result.final_params)
            wall = time.perf_counter() - tic
        return {"wall": wall, "program": sum(watch.wall[k] or 0.0 for k in programs), "watch": watch,
                "train": float(result.timings["train"]), "moved": moved,
                "parts": {k: watch.wall[k] for k in programs}}

    plain, blocking = run(False), run(True)
    segments = sim.config.n_segments + (1 if sim.warmup_policy is not None else 0)
    return {"wall_seconds": plain["wall"], "program_seconds": blocking["program"], "train_seconds": plain["train"],
            "host_seconds": plain["wall"] - blocking["program"] - plain["train"],
            "setup_seconds": plain["watch"].seconds(SETUP_PARTS),
            "planning_seconds": plain["watch"].seconds(PLAN_PARTS),
            "program_parts": blocking["parts"], "h2d_setup_bytes": plain["moved"].count("setup"),
            "h2d_bytes_per_segment": plain["moved"].count("segment") / segments,
            "h2d_retrain_bytes": plain["moved"].count("retrain")}


def occupancy_only(sim, policy, key, preset: str, n_queries: int) -> dict:
    """The plans' figures of one EBRank trial, nothing simulated: ``doc_slot_occupancy``, the widths its main phase
    scans per bucket (``sim.segment_widths``: one width, or the class widths) and ``step_copies``, the copies of the
    session step in the phase's segment program (one per bucket, or per bucket and class width)."""
    occupancy = sim.doc_slot_occupancy(policy, [key])
    widths = sim.width_sets()
    copies = [sum(len(w) if isinstance(w, tuple) else 1 for w in shape) for shape in widths]
    return {"preset": preset, "queries": n_queries, "sessions": sim.session_counts()[1],
            "segment_widths": sim.config.segment_widths, "width_classes": sim.config.width_classes,
            "doc_slot_occupancy": occupancy, "segment_width_shapes": sim.width_shapes(), "widths": widths,
            "step_copies": max(copies), **machine()}


if __name__ == "__main__":
    main()
