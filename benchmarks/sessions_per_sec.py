"""Sessions per second of the vectorized EBRank simulation vs the one-session-at-a-time NumPy reference.

Both run the same policy (EBRank with a frozen prior, exploration on), the same click model and
the same synthetic data in the same process; the ratio is what to compare across machines. Rates
are reported per wall-clock second (``speedup``) and per CPU second of this process
(``cpu_time_speedup``, robust to other load on a shared machine; XLA may use several threads, so
it is the conservative one for the vectorized side).

    python benchmarks/sessions_per_sec.py --json            # last line: a JSON object
    python benchmarks/sessions_per_sec.py --queries 30000   # bigger
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from ltrjax import clicks  # noqa: E402
from ltrjax.data.layout import pad_and_bucket  # noqa: E402
from ltrjax.data.registry import load_dataset  # noqa: E402
from ltrjax.online.policies.ebrank import EBRank  # noqa: E402
from ltrjax.online.schedule import update_points  # noqa: E402
from ltrjax.online.simulator import SimConfig, Simulator, trial_keys  # noqa: E402
from tests.reference.online_loop import ReferenceState, ebrank_scorer, run_sessions  # noqa: E402


def build(preset: str, n_queries: int, seed: int):
    cfg = OmegaConf.load(ROOT / "conf" / "dataset" / f"{preset}.yaml")
    cfg.n_queries = n_queries
    qs = load_dataset(cfg, seed=seed)
    return qs, pad_and_bucket(qs)


def vectorized_rate(sim: Simulator, policy, key, repeats: int) -> tuple[float, int, dict]:
    """Time the main phase (all segments, frozen model) after one compile run; best of ``repeats``."""
    keys = trial_keys(key)
    params = policy.init(keys.policy, sim.data)
    _, main = sim.session_plan(keys.plan)
    points = update_points(len(main), sim.config.n_updates)
    starts = np.concatenate([[0], points[:-1] + 1])
    segments = [main.slice(int(a), int(b)) for a, b in zip(starts, points + 1)]

    def simulate():
        states = sim.init_states(keys.init)
        plans = sim.plan(segments)
        for seg, plan in zip(segments, plans):
            states, *_ = sim.run_segment(policy, params, states, seg, keys.run, plan)
        jax.block_until_ready(states)

    tic = time.perf_counter()
    simulate()
    compile_and_run = time.perf_counter() - tic
    runs = [timed(simulate) for _ in range(repeats)]
    best_wall = min(r[0] for r in runs)
    best_cpu = min(r[1] for r in runs)
    return len(main) / best_wall, len(main), {"first_run_seconds": compile_and_run, "best_run_seconds": best_wall,
                                              "cpu_sessions_per_sec": len(main) / best_cpu}


def timed(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of one call; CPU time is robust to other load."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def reference_rate(sim: Simulator, policy, key, n_sessions: int) -> float:
    """The NumPy loop on the first ``n_sessions`` main sessions (uniforms drawn in bulk with NumPy)."""
    data = sim.data
    keys = trial_keys(key)
    params = policy.init(keys.policy, data)
    states = sim.init_states(keys.init)
    _, main = sim.session_plan(keys.plan)
    draws = main.slice(0, n_sessions)
    features, gains, n_docs, idcg = ([None] * data.n_queries for _ in range(4))
    doc_ids, n_entered = [None] * data.n_queries, np.zeros(data.n_queries, np.int64)
    for b, (bucket, st) in enumerate(zip(data.buckets, states)):
        g = np.asarray(sim.gains[b])
        for r, q in enumerate(np.asarray(bucket.query_index)):
            n = int(bucket.n_docs[r])
            features[q], gains[q], n_docs[q] = np.asarray(bucket.features[r]), g[r], n
            idcg[q] = float(sim.idcg[b][r])
            doc_ids[q], n_entered[q] = np.asarray(st.order[r])[:n], int(st.n_entered[r])
    ref = ReferenceState(doc_ids, n_entered)
    click = {k: np.asarray(getattr(sim.click_model, k)) for k in ("examination", "alpha", "beta")}
    rng = np.random.default_rng(0)
    score_fn = ebrank_scorer(params, policy.beta, features)
    def loop():
        uniforms = rng.random((len(draws), 1, sim.config.top_k), dtype=np.float32)
        run_sessions(ref, draws, score_fn, gains, n_docs, idcg, click, sim.config.top_k, uniforms)

    wall, cpu = timed(loop)
    return len(draws) / wall, len(draws) / cpu


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="synthetic_mq2007", help="conf/dataset/<preset>.yaml")
    parser.add_argument("--queries", type=int, default=4000)
    parser.add_argument("--reference-sessions", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-lanes", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print a JSON object as the last line")
    args = parser.parse_args(argv)

    qs, data = build(args.preset, args.queries, args.seed)
    sim = Simulator(data, clicks.make_click_model({"kind": "pbm", "examination": "log2"}, 5),
                    SimConfig(max_lanes=args.max_lanes))
    policy = EBRank(data, epsilon=20.0)
    key = jax.random.PRNGKey(args.seed)
    vec, n_main, extra = vectorized_rate(sim, policy, key, args.repeats)
    ref, ref_cpu = reference_rate(sim, policy, key, min(args.reference_sessions, n_main))
    out = {
        "sessions_per_sec": vec,
        "reference_sessions_per_sec": ref,
        "speedup": vec / ref,
        "cpu_time_speedup": extra["cpu_sessions_per_sec"] / ref_cpu,
        "reference_cpu_sessions_per_sec": ref_cpu,
        "sessions": n_main,
        "queries": data.n_queries,
        "mean_docs_per_query": float(np.mean(qs.docs_per_query)),
        "buckets": [list(b.labels.shape) for b in data.buckets],
        "lanes": list(sim.n_lanes),
        "device_kind": jax.devices()[0].device_kind,
        "backend": jax.default_backend(),
        **extra,
    }
    if not args.json:
        for k, v in out.items():
            print(f"{k:>28}: {v}")
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
