"""Sessions per second of the vectorized simulation, per online family and population size, vs the NumPy reference.

What is timed: ``Simulator.simulate_frozen`` (the main-phase sessions of every member with the policy frozen
at its initial parameters: no warm-up, retraining or evaluation), best of ``--repeats`` after one compile run.
A population of P members is P distinct trial keys (seeds), so every member has its own session plan and
click draws. Rates are total sessions of all members per second.

Host work inside ``simulate_frozen``. Besides the compiled segment program it does, on the host:
  * setup, once per call: each trial's session draws (``protocol.session_plan``), initial states
    (``protocol.host_init_states``) and each member's policy parameters (``Policy.init``);
  * planning, once per call: every segment's lane schedule (``plan.plan``);
  * per segment: the click uniforms (NumPy PCG64), stacking the scan inputs per member (``segment.prepare``),
    and putting the outputs back in session order (``segment.collect``). The next segment is prepared while
    the device runs the current one (asynchronous dispatch), so on two or more cores part of it is hidden.
Setup and planning do not depend on the simulation state and the reference loop gets its draws and initial
state prepared outside its timing too, so they are timed separately (the wrapped methods below, in the same
call) and excluded from ``sessions_per_sec``: it counts the segment program and the per-segment host work.
``wall_sessions_per_sec`` includes everything; ``program_sessions_per_sec`` counts only the compiled segment
program (``programs.compiled(policy)["segment"]``, timed in one extra run that waits for it after every call,
which serializes the overlap); ``segment_host_seconds`` is the simulation's time beyond the program's, i.e. the
host work that was not hidden (two different runs: on a loaded machine it can come out negative, as can
``host_fraction_of_wall``; ``program_run_simulation_seconds`` is the blocking run's own simulation time, which
contains the program's); the per-population ``detail`` gives every part.
(Until the population API, this benchmark timed the initial states and the lane planning with the sessions.)
Measured on the project's 2-core CPU while shared with other work (EBRank, 3,967 queries, all 143,474 main
sessions): setup and planning were 17-26% of the wall time, the per-segment host work another 13-19% (it
also gathers the session outputs, which ``simulate_frozen`` then drops). A default run took about 13 minutes
(EBRank 3, the four other families 10), mostly population 64 and compilation.

Families (``--families``) are built from conf/algorithm/<family>.yaml through ``ltrjax.runner.make_policy``:
EBRank (``ebrank``), UCBRank-IE (``ucbrank_ie``), CFTopK-concat (``cftopk_concat``), PDGD (``pdgd``) and
MGD (``mgd``), at population sizes ``--populations`` (default 1, 8, 64). EBRank runs ``--segments`` segments
of the protocol (default: all ``sim.n_updates``, the whole main phase); the other families run the first
``--family-segments`` segments of the same size (the per-session work of a segment does not depend on how
many follow; the slow families would otherwise take many minutes at population 64).

The reference is the one-session-at-a-time NumPy loop of tests/reference/online_loop.py with EBRank's NumPy
scorer, on the same data, policy and draws (``--reference-sessions`` sessions), in the same process.
``speedup`` = EBRank population 1 / reference, ``population_speedup`` = EBRank population 8 / reference (wall
clock); ``cpu_time_speedup`` compares sessions per CPU second of this process (XLA may use several threads,
so it is the conservative one, and robust to other load on a shared machine).

    python benchmarks/sessions_per_sec.py --json                   # last line: a JSON object
    python benchmarks/sessions_per_sec.py --families ebrank --populations 1,8
    python benchmarks/sessions_per_sec.py --queries 30000          # bigger
    python benchmarks/sessions_per_sec.py --smoke --json           # seconds, for tests (ebrank, pdgd; 1, 2)
    python benchmarks/sessions_per_sec.py --families ebrank --populations 1,8,64,256 sim.click_rng=device  # a GPU

Trailing arguments are Hydra overrides of conf/config.yaml, applied after the script's own (``overrides`` in the
JSON); the JSON also gives the backend and device (``backend``, ``device_kind``) and the JAX version.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import (ONLINE_SMOKE, PLAN_PARTS, SETUP_PARTS, CompileMeter, Stopwatch,  # noqa: E402
                      add_cache_arguments, algorithm_config, call_by_name, dataset_overrides, emit, load_data,
                      load_run, machine, timed, trial_targets, use_compilation_cache)

FAMILIES = ("ebrank", "ucbrank_ie", "cftopk_concat", "pdgd", "mgd")
SMOKE_FAMILIES = ("ebrank", "pdgd")  # the headline family and one learner: the test's time budget
HEADLINE = "ebrank"


def build_policy(family: str, data):
    from ltrjax.runner import make_policy

    policy, _ = make_policy(family, algorithm_config(family), data)
    return policy


def segment_sessions(cfg, data) -> tuple[int, int]:
    """(main-phase sessions of a trial, sessions per segment) under ``cfg.sim``."""
    from ltrjax.runner import build_simulator

    n_main = build_simulator(cfg, data).session_counts()[1]
    return n_main, n_main // int(cfg.sim.n_updates)


def measure(cfg, data, policy, population: int, segments: int, repeats: int, seed: int,
            trial_setup: str = "host") -> dict:
    """Rates of ``population`` members (distinct trial keys) over the first ``segments`` protocol segments, the
    trials set up on ``trial_setup`` (host or device); where the wall goes (program, set-up, planning, the rest)
    and the bytes moved to the device per segment."""
    from ltrjax.online import host_random, transfers
    from ltrjax.runner import build_simulator

    n_main, per_segment = segment_sessions(cfg, data)
    n_updates = int(cfg.sim.n_updates)
    segments = max(1, min(int(segments), n_updates))
    n_sessions = n_main if segments == n_updates else per_segment * segments
    # a fresh simulator per population: its padded step count is this population's own (it is sticky)
    sim = build_simulator(cfg, data, n_updates=segments, refreshes=None, trial_setup=trial_setup)
    keys = [host_random.fold_in(host_random.prng_key(seed), t) for t in range(population)]  # no eager programs

    def run(block_programs: bool = False):
        targets, program_names = trial_targets(sim, policy, sim.config.trial_setup)
        block = ("policy_init",) + (program_names if block_programs else ())
        with Stopwatch(targets, block=block) as watch, transfers.TransferMeter() as moved:
            (_, per_member), wall, cpu = timed(sim.simulate_frozen, policy, keys, None, n_sessions)
        program = sum(watch.wall[k] or 0.0 for k in program_names)
        return {"per_member": per_member, "wall": wall, "cpu": cpu, "watch": watch, "program": program,
                "moved": moved}

    with CompileMeter() as meter:
        first_wall = run()["wall"]
    # the programs' own time: one run that waits for each after every call (this serializes the host work that
    # the simulator otherwise overlaps with them: the next segment is prepared while one runs)
    # as many blocking runs as timed ones: the one with the median serialized host seconds is kept (those are tens of
    # milliseconds with a device set-up, within the noise of one run)
    blockings = sorted((run(block_programs=True) for _ in range(max(1, repeats))), key=lambda r: r["wall"] - r["program"])
    blocking = blockings[len(blockings) // 2]
    program = blocking["program"]
    runs = [run() for _ in range(max(1, repeats))]
    for r in runs:
        excluded = [k for k in SETUP_PARTS + PLAN_PARTS if k in r["watch"].wall]
        r["simulation"] = r["wall"] - r["watch"].seconds(excluded)
        r["simulation_cpu"] = r["cpu"] - sum(r["watch"].cpu[k] or 0.0 for k in excluded)
    best = min(runs, key=lambda r: r["simulation"])
    total = population * best["per_member"]
    watch = best["watch"]
    setup, planning = watch.seconds(SETUP_PARTS), watch.seconds(PLAN_PARTS)
    steps, lanes, occupancy = scan_shape(sim, best["per_member"], segments)
    return {
        "trial_setup": sim.config.trial_setup,
        "sessions_per_sec": total / best["simulation"],
        "wall_sessions_per_sec": total / best["wall"],
        "program_sessions_per_sec": total / program if program else None,
        "cpu_sessions_per_sec": total / best["simulation_cpu"],
        "members": population, "segments": segments, "sessions_per_member": best["per_member"],
        "total_sessions": total,
        "wall_seconds": best["wall"], "simulation_seconds": best["simulation"], "setup_seconds": setup,
        "planning_seconds": planning,
        # every compiled program of the trial (the segment program; a device set-up's too), in the blocking run
        "program_seconds": program,
        "program_parts": {k: blocking["watch"].wall[k] for k in trial_targets(sim, policy, sim.config.trial_setup)[1]},
        # the Python and NumPy work: the wall beyond the programs' own time (two runs: on a loaded machine it can
        # come out negative)
        "host_seconds": best["wall"] - program,
        "program_run_seconds": blocking["wall"],
        # the same split within the blocking run, where no program overlaps the host's work: its wall minus its
        # programs' seconds (the Python and NumPy work, measured in one run)
        "serialized_host_seconds": blocking["wall"] - program,
        # that run's simulation time (set-up and planning excluded): the programs' own time is part of it
        "program_run_simulation_seconds": blocking["wall"] - blocking["watch"].seconds(SETUP_PARTS + PLAN_PARTS),
        "segment_host_seconds": best["simulation"] - program,
        "host_fraction_of_wall": (best["wall"] - program) / best["wall"],
        "setup_and_planning_fraction_of_wall": (setup + planning) / best["wall"],
        # bytes put on the device: by the set-up (keys; a host set-up's states and parameters move at the first call)
        # and per segment (what the segment program is called with from the host)
        "h2d_setup_bytes": best["moved"].count("setup"),
        "h2d_bytes_per_segment": best["moved"].count("segment") / segments,
        "program_calls": watch.calls["segment"],
        "first_run_seconds": first_wall, "compile_seconds": meter.seconds, "compiles": meter.compiles,
        "lanes": list(lanes), "steps_per_segment": steps,
        # sessions / (steps x lanes x segments): the busy share of the scan's slots (classes: steps per bucket, the
        # padded steps past a class's bounds included, though they are not run)
        "lane_occupancy": occupancy,
        "repeats_wall_seconds": [r["wall"] for r in runs],
    }


def scan_shape(sim, per_member: int, segments: int):
    """(steps per segment, lanes per bucket, lane occupancy) of the plans the simulator used (``PlanMemory``): width
    classes keep them under "classes", a step count per bucket (each bucket runs its own loop), a device set-up
    as a ``PhaseShape``, the other modes under "main"."""
    if sim.config.trial_setup == "device":
        shape = sim.memo.device_shapes["main"]
        steps, lanes = shape.steps, shape.lanes
    else:
        phase = "classes" if sim.config.segment_widths == "classes" else "main"
        steps, lanes = sim.memo.steps.get(phase), sim.memo.lanes.get(phase, sim.n_lanes)
    if isinstance(steps, tuple):
        slots = sum(s * n for s, n in zip(steps, lanes))
        steps = list(steps)
    else:
        slots = steps * sum(lanes) if steps else 0
    return steps, lanes, per_member / (slots * segments) if slots else None


def reference_rate(cfg, data, policy, n_sessions: int, seed: int) -> tuple[float, float, int]:
    """(sessions per wall second, per CPU second, sessions) of the NumPy loop on the first main sessions of
    trial 0 with EBRank's NumPy scorer (uniforms drawn in bulk with NumPy inside the timing)."""
    import numpy as np

    from ltrjax.online import host_random
    from ltrjax.online.simulator import trial_keys
    from ltrjax.runner import build_simulator
    from tests.reference import online_loop as ref

    sim = build_simulator(cfg, data)
    keys = trial_keys(host_random.fold_in(host_random.prng_key(seed), 0))
    params = policy.init(keys.policy, data)
    _, main = sim.session_plan(keys.plan)
    draws = main.slice(0, min(n_sessions, len(main)))
    discount = np.asarray(sim.discount, np.float32)
    inputs = call_by_name(ref.reference_inputs, data=data, discount=discount)
    state = call_by_name(ref.reference_state, data=data, states=sim.init_states(keys.init))
    hyper = policy.default_hyper()
    score_fn = call_by_name(ref.ebrank_scorer, params=params, hyper=hyper, epsilon=float(hyper.epsilon),
                            beta=policy.beta, features=inputs["features"])
    click = {k: np.asarray(getattr(sim.click_model, k)) for k in ("examination", "alpha", "beta")}
    rng = np.random.default_rng(seed)
    top_k = sim.config.top_k

    def loop():
        uniforms = rng.random((len(draws), sim.uniform_rows, top_k), dtype=np.float32)
        call_by_name(ref.run_sessions, state=state, draws=draws, score_fn=score_fn, gains=inputs["gains"],
                     n_docs=inputs["n_docs"], idcg=inputs["idcg"], click=click, top_k=top_k, uniforms=uniforms,
                     discount=discount)

    _, wall, cpu = timed(loop)
    return len(draws) / wall, len(draws) / cpu, len(draws)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="synthetic_mq2007", help="conf/dataset/<preset>.yaml")
    parser.add_argument("--queries", type=int, default=4000)
    parser.add_argument("--families", default=None,
                        help=f"comma-separated conf/algorithm names (default: {','.join(FAMILIES)}; "
                             f"--smoke: {','.join(SMOKE_FAMILIES)})")
    parser.add_argument("--populations", default="1,8,64", help="comma-separated population sizes")
    parser.add_argument("--trial-setups", default="auto",
                        help="comma-separated sim.trial_setup values measured per population (auto, host, device); "
                             "the first is the headline's (the other families run it only)")
    parser.add_argument("--segments", type=int, default=None,
                        help="protocol segments simulated per EBRank member (default: all sim.n_updates)")
    parser.add_argument("--family-segments", type=int, default=2,
                        help="protocol segments simulated per member of the other families")
    parser.add_argument("--reference-sessions", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-lanes", type=int, default=None, help="sim.max_lanes (default: conf/config.yaml)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (seconds): for tests")
    parser.add_argument("--json", action="store_true", help="print only the JSON object (as the last line)")
    parser.add_argument("--progress-json", action="store_true",
                        help="also print each population's detail as one line 'population {JSON}' once measured "
                             "(what survives if the run is stopped before its final JSON)")
    add_cache_arguments(parser)
    parser.add_argument("overrides", nargs="*",
                        help="extra Hydra overrides, applied last, e.g. sim.click_rng=device (recorded in the JSON)")
    args = parser.parse_args(argv)
    cache = use_compilation_cache(args)
    if args.smoke:
        args.queries, args.populations, args.repeats = min(args.queries, 60), "1,2", 1
        args.segments, args.family_segments, args.reference_sessions = 2, 1, min(args.reference_sessions, 300)

    import numpy as np

    trial_setups = [value for value in args.trial_setups.split(",") if value]
    families = [f for f in (args.families or ",".join(SMOKE_FAMILIES if args.smoke else FAMILIES)).split(",") if f]
    populations = [int(p) for p in args.populations.split(",") if p]
    overrides = dataset_overrides(args.preset, args.queries) + [f"seed={args.seed}", "progress=false"]
    if args.smoke:  # the other online benchmarks' smoke protocol: their one-member segment programs are these
        overrides += [o for o in ONLINE_SMOKE if o.startswith("sim.")]
    if args.max_lanes:
        overrides.append(f"sim.max_lanes={args.max_lanes}")
    cfg = load_run(overrides + list(args.overrides))
    queryset, data = load_data(cfg)
    n_updates = int(cfg.sim.n_updates)

    families_table, detail = {}, {}
    for family in families:
        policy = build_policy(family, data)
        segments = (args.segments or n_updates) if family == HEADLINE else args.family_segments
        detail[family] = {}
        for population in populations:
            setups = trial_setups if family == HEADLINE else trial_setups[:1]
            by_setup = {s: measure(cfg, data, policy, population, segments, args.repeats, args.seed, s)
                        for s in setups}
            detail[family][population] = {**by_setup[setups[0]], "by_trial_setup": by_setup}
            if not args.json:
                d = detail[family][population]
                print(f"{family:>14} x{population:<3} {d['sessions_per_sec']:>12,.0f} sessions/s "
                      f"(wall {d['wall_sessions_per_sec']:,.0f}, program {d['program_sessions_per_sec'] or 0:,.0f}; "
                      f"{d['total_sessions']} sessions, compile {d['compile_seconds'] or 0:.1f} s)", flush=True)
            if args.progress_json:
                print("population " + json.dumps({"family": family, **detail[family][population]}, default=str),
                      flush=True)
        families_table[family] = {p: detail[family][p]["sessions_per_sec"] for p in populations}

    out = {"queries": data.n_queries, "mean_docs_per_query": float(np.mean(queryset.docs_per_query)),
           "buckets": [list(b.labels.shape) for b in data.buckets], "sessions": segment_sessions(cfg, data)[0],
           "populations": populations, "families": families_table,
           "overrides": list(args.overrides), "click_rng": str(cfg.sim.click_rng), "compilation_cache": cache,
           "trial_setups": trial_setups}
    if HEADLINE in families:
        policy = build_policy(HEADLINE, data)
        ref, ref_cpu, n_ref = reference_rate(cfg, data, policy, args.reference_sessions, args.seed)
        head = detail[HEADLINE]
        one = head.get(1) or head[min(head)]
        pop = head.get(8) or head[max(head)]
        out.update({
            "sessions_per_sec": one["sessions_per_sec"],
            "reference_sessions_per_sec": ref,
            "speedup": one["sessions_per_sec"] / ref,
            "cpu_time_speedup": one["cpu_sessions_per_sec"] / ref_cpu,
            "reference_cpu_sessions_per_sec": ref_cpu,
            "reference_sessions": n_ref,
            "population_members": pop["members"],
            "population_sessions_per_sec": pop["sessions_per_sec"],
            "population_speedup": pop["sessions_per_sec"] / ref,
            "population_cpu_time_speedup": pop["cpu_sessions_per_sec"] / ref_cpu,
            "wall_sessions_per_sec": one["wall_sessions_per_sec"],
            "population_wall_sessions_per_sec": pop["wall_sessions_per_sec"],
            "first_run_seconds": one["first_run_seconds"],
            "best_run_seconds": one["simulation_seconds"],
            "cpu_sessions_per_sec": one["cpu_sessions_per_sec"],
            "lanes": one["lanes"],
        })
    out["detail"] = detail
    out.update(machine())
    if not args.json:
        print(f"families (sessions/s): {families_table}")
    return emit(out, True)


if __name__ == "__main__":
    main()
