"""Two or more values of one setting, timed in one process on the same data: rounds alternating, same results.

A performance setting (``sim.retrain_examples``, ``sim.segment_widths``, ``fit.threads``, ...) changes how fast a
run is, not what it computes. This script loads the data once, builds one simulator and policy per value (as
``python -m ltrjax.run KEY=VALUE`` builds them), runs each value once to compile its programs, then ``--rounds``
rounds of one run per value, the order reversed every other round (A B, B A, ...), so drift and warm caches
favour no value. Each run is the same trial (or ``--members`` trials as one population) of ``--algorithm``.

Reported per value: the timed runs' wall seconds and their ``simulate`` / ``train`` / ``evaluate`` split
(``TrialResult.timings``), the compile seconds during the timed runs (0 when the warm-up compiled everything), and
each timing's median over the first value's; ``same_results`` says whether every run of every value gave the
same Cum-NDCG, Warm- and Cold-NDCG for every member, bit for bit, and ``max_abs_diff`` is the largest difference
of any of them from the first run's. A performance setting must not change the sessions, clicks and counters; a
population's float metrics can differ at float rounding between two settings whose programs differ (members are
vmapped: ``docs/performance.md``, tolerance 1e-5 in ``tests/test_population.py``), a single trial's should not.

    python benchmarks/settings_ab.py sim.retrain_examples host,device --json
    python benchmarks/settings_ab.py sim.retrain_examples host,device --preset synthetic_mslr30k --rounds 2
    python benchmarks/settings_ab.py sim.segment_widths phase,classes --members 7
    python benchmarks/settings_ab.py sim.retrain_examples host,device --smoke --json   # seconds

Trailing arguments are Hydra overrides applied to every value (before ``KEY=VALUE``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import (CompileMeter, add_online_arguments, emit, load_data, load_run, machine,  # noqa: E402
                      online_overrides, online_policy, phase_timings, use_compilation_cache)


def run_once(sim, policy, keys) -> tuple[float, list]:
    """Wall seconds of one population run of ``keys`` (its results fetched), and the results."""
    import jax

    tic = time.perf_counter()
    results = sim.run_population(policy, keys, progress=False)
    jax.block_until_ready([r.final_params for r in results])
    return time.perf_counter() - tic, results


def setting(cfg, key: str):
    """The typed run's value at a dotted Hydra key (attributes, or items of a mapping), as resolved for this backend
    (``auto`` made concrete)."""
    node = cfg
    for part in key.split("."):
        node = node[part] if isinstance(node, dict) else getattr(node, part)
    return node


def fingerprint(results) -> list[tuple[float, float, float]]:
    return [(float(r.cum_ndcg["test"]), float(r.warm_ndcg), float(r.cold_ndcg)) for r in results]


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("key", help="the setting, as a Hydra key (e.g. sim.retrain_examples)")
    parser.add_argument("values", help="comma-separated values, the first the reference (e.g. host,device)")
    parser.add_argument("--algorithm", default="ebrank", help="conf/algorithm/<name>.yaml (default: ebrank)")
    parser.add_argument("--members", type=int, default=1, help="trials run as one population (default 1)")
    parser.add_argument("--rounds", type=int, default=2, help="timed rounds, one run per value each (default 2)")
    add_online_arguments(parser, "60 queries, 1,500 sessions in 2 segments (one retrain), one round")
    args = parser.parse_args(argv)
    values = [v for v in args.values.split(",") if v]
    if len(values) < 2 or args.members < 1 or args.rounds < 1:
        parser.error("give at least two values, --members >= 1 and --rounds >= 1")
    if args.smoke:
        args.rounds = 1

    from ltrjax.runner import trial_key

    cache = use_compilation_cache(args)
    base = online_overrides(args) + list(args.overrides)
    configs = {v: load_run(base + [f"{args.key}={v}"]) for v in values}
    tic = time.perf_counter()
    _, data = load_data(configs[values[0]])
    data_seconds = time.perf_counter() - tic
    built = {v: online_policy(cfg, data, args.algorithm)[:2] for v, cfg in configs.items()}
    keys = [trial_key(configs[values[0]], t) for t in range(args.members)]
    # the first member of each chunk: members of a chunk share its timings
    starts = {v: range(0, len(keys), sim.chunk_size(len(keys), policy=policy)) for v, (sim, policy) in built.items()}

    warmup, timed = {}, {v: [] for v in values}
    prints = []
    for v in values:  # each value's programs compiled (or read from the persistent cache) before any timing
        with CompileMeter() as meter:
            seconds, results = run_once(*built[v], keys)
        warmup[v] = {"seconds": seconds, "compile_seconds": meter.seconds, "compiles": meter.compiles}
        prints.append(fingerprint(results))
    for r in range(args.rounds):
        for v in (values if r % 2 == 0 else values[::-1]):
            with CompileMeter() as meter:
                seconds, results = run_once(*built[v], keys)
            timings = phase_timings(results, starts[v])
            timed[v].append({"round": r + 1, "seconds": seconds, **timings, "compile_seconds": meter.seconds,
                             "compiles": meter.compiles})
            prints.append(fingerprint(results))
            if not args.json:
                split = ", ".join(f"{k} {t:.2f}" for k, t in timings.items())
                print(f"round {r + 1} {args.key}={v}: {seconds:.2f} s ({split})", flush=True)

    def median(v, k):
        return statistics.median(run[k] for run in timed[v])

    fields = ("seconds", "simulate", "train", "evaluate")
    resolved = {v: str(setting(cfg, args.key)) for v, cfg in configs.items()}
    out = {
        "key": args.key,
        "values": values,
        "resolved": resolved,
        "algorithm": args.algorithm,
        "members": args.members,
        "rounds": args.rounds,
        "order": "each value once untimed (compiles), then rounds alternating, the order reversed every other round",
        "warmup": warmup,
        "runs": timed,
        "median": {v: {k: median(v, k) for k in fields} for v in values},
        "over_first": {v: {k: median(v, k) / median(values[0], k) if median(values[0], k) > 0 else None
                           for k in fields} for v in values[1:]},
        "same_results": all(p == prints[0] for p in prints),
        "max_abs_diff": max(abs(a - b) for p in prints for row, first in zip(p, prints[0])
                            for a, b in zip(row, first)),
        "cum_ndcg_test": [row[0] for row in prints[0]] if all(p == prints[0] for p in prints) else None,
        "preset": args.preset,
        "queries": data.n_queries,
        "data_seconds": data_seconds,
        "overrides": list(args.overrides),
        "compilation_cache": cache,
        **machine(),
    }
    return emit(out, args.json)


if __name__ == "__main__":
    main()
