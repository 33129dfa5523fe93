"""Exactness of ``sim.trial_setup=device`` against the host set-up: the same trials, bit for bit.

Runs each case twice in one process, on data loaded once, with ``sim.click_rng=device`` in both (the device set-up
draws its click uniforms in the step): once with the trials set up on the host (NumPy draws, initial states, lane
plans and segment inputs, ``host_trial``), once on the device (``device_trial``). Compared per member: the NDCG of
every main session, Cum-NDCG per split, the evaluation history (Warm/Cold per split at every point), the final
per-query NDCG, every counter of the final state and every model parameter. The cases (issue 40's acceptance):

* ``ebrank``: one EBRank trial (conf/algorithm/ebrank.yaml);
* ``sweep``: ``benchmarks/sweep.py``'s population, ``--seeds`` trials x EBRank's tuning grid (35 members by
  default: 5 seeds x 7 epsilon values), and whether both pick the same epsilon per seed;
* ``pdgd``: one PDGD trial (a learner that reads its sessions' records);
* ``ucbrank_ie``: one UCBRank-IE trial (MC-dropout refreshes, independent evidence).

    python benchmarks/trial_setup_check.py --json                  # synthetic MQ2007 shape, 35-member sweep
    python benchmarks/trial_setup_check.py --smoke --json          # 60 queries, 2 seeds x 2 values (a minute)

Trailing arguments are Hydra overrides applied to both set-ups. ``equal`` is true only if every compared array of
every member is equal bit for bit; ``max_abs_diff`` is the largest difference of any compared float.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import (add_online_arguments, algorithm_config, emit, load_data, load_run, machine,  # noqa: E402
                      online_overrides, use_compilation_cache)

CASES = ("ebrank", "sweep", "pdgd", "ucbrank_ie")


def compared(result) -> dict:
    """The arrays of one member's ``TrialResult`` that must agree, by name."""
    import jax
    import numpy as np

    out = {"session_ndcg": result.session_ndcg,
           "cum_ndcg": np.asarray([result.cum_ndcg[s] for s in sorted(result.cum_ndcg)]),
           "history": np.asarray([[h[s][m] for s in sorted(h) for m in ("warm", "cold")] for h in result.eval_history]),
           "query_ndcg": np.stack([result.query_ndcg["warm"], result.query_ndcg["cold"]])}
    for i, leaf in enumerate(jax.tree_util.tree_leaves(result.final_states)):
        out[f"state_{i}"] = np.asarray(leaf)
    for i, leaf in enumerate(jax.tree_util.tree_leaves(result.final_params)):
        out[f"param_{i}"] = np.asarray(leaf)
    return out


def difference(a: list, b: list) -> dict:
    """Whether two runs' members agree bit for bit (NaN equal to NaN), and the largest float difference."""
    import numpy as np

    equal, worst = len(a) == len(b), 0.0
    for x, y in zip(a, b):
        cx, cy = compared(x), compared(y)
        equal &= cx.keys() == cy.keys()
        for name in cx.keys() & cy.keys():
            u, v = np.asarray(cx[name]), np.asarray(cy[name])
            same = u.shape == v.shape and np.array_equal(u, v, equal_nan=u.dtype.kind == "f")
            equal &= bool(same)
            if u.shape == v.shape and u.dtype.kind == "f":
                gap = np.abs(u.astype(np.float64) - v.astype(np.float64))
                worst = max(worst, float(np.nanmax(gap)) if np.any(np.isfinite(gap)) else 0.0)
    return {"equal": bool(equal), "max_abs_diff": worst}


def build(cfg, data, name: str, setup: str):
    """(simulator, policy, tune grid) of algorithm ``name`` with the trials set up on ``setup``."""
    from ltrjax.runner import build_simulator, make_policy

    acfg = algorithm_config(name)
    policy, tune = make_policy(name, acfg, data, cfg.fit_overrides, name)
    sim = build_simulator(cfg, data, trial_setup=setup)
    return sim, policy, tune


def run_case(cfg, data, name: str, seeds: int, smoke: bool = False) -> dict:
    """One case with both set-ups: their equality, and each one's wall seconds (compilation included)."""
    from ltrjax.runner import choose, grid_label, trial_key, tune_grid

    algorithm = "ebrank" if name == "sweep" else name
    runs, seconds, grids = {}, {}, {}
    for setup in ("host", "device"):
        sim, policy, tune = build(cfg, data, algorithm, setup)
        grid = tune_grid(tune) if name == "sweep" else [None]
        grid = [grid[0], grid[len(grid) // 2]] if smoke and len(grid) > 2 else grid  # sweep.py's smoke grid
        keys = [trial_key(cfg, t) for t in range(seeds if name == "sweep" else 1) for _ in grid]
        hypers = [g for _ in range(len(keys) // len(grid)) for g in grid]
        tic = time.perf_counter()
        runs[setup] = sim.run_population(policy, keys, hypers, progress=False)
        seconds[setup] = time.perf_counter() - tic
        grids[setup] = grid
    out = {**difference(runs["host"], runs["device"]), "members": len(runs["host"]), "seconds": seconds}
    if name == "sweep":
        grid, n = grids["host"], len(grids["host"])
        picks = {s: [grid_label(choose(runs[s][i * n:(i + 1) * n], grid, cfg.experiment.tune_split)[1])
                     for i in range(len(runs[s]) // n)] for s in runs}
        out.update(chosen=picks, same_choice=picks["host"] == picks["device"])
    return out


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5, help="the sweep's trials (x EBRank's tuning grid)")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    add_online_arguments(parser, "60 queries, 1,500 sessions, the sweep 2 seeds x the grid")
    args = parser.parse_args(argv)
    cases = [c for c in args.cases.split(",") if c]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        parser.error(f"unknown cases {unknown}; expected some of {', '.join(CASES)}")
    if args.smoke:
        args.seeds = min(args.seeds, 2)
    cache = use_compilation_cache(args)
    cfg = load_run(online_overrides(args) + ["sim.click_rng=device"] + list(args.overrides))
    _, data = load_data(cfg)
    out = {"cases": {name: run_case(cfg, data, name, args.seeds, args.smoke) for name in cases}}
    out["equal"] = all(c["equal"] for c in out["cases"].values())
    out.update(dataset=data.name, queries=data.n_queries, seeds=args.seeds, overrides=list(args.overrides),
               compilation_cache=cache, **machine())
    return emit(out, args.json)


if __name__ == "__main__":
    main()
