"""Wall time of one whole EBRank run, end to end: data, compile, BM25 warm-up, sessions, 20 retrains.

    python benchmarks/end_to_end.py                          # MQ2007-sized synthetic data (1692 queries)
    python benchmarks/end_to_end.py --preset synthetic_mslr30k

The EBRank paper's code needs about 198 s for an MQ2007-sized run on a 2-core CPU (seed-code.md §5).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax
from omegaconf import OmegaConf

from ltrjax import clicks
from ltrjax.data.layout import pad_and_bucket
from ltrjax.data.registry import load_dataset
from ltrjax.online.policies.bm25 import BM25
from ltrjax.online.experiment import make_policy
from ltrjax.online.simulator import SimConfig, Simulator

ROOT = Path(__file__).resolve().parent.parent


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="synthetic_mq2007")
    parser.add_argument("--queries", type=int, default=None, help="override the preset's query count")
    parser.add_argument("--epsilon", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    tic = time.perf_counter()
    cfg = OmegaConf.load(ROOT / "conf" / "dataset" / f"{args.preset}.yaml")
    if args.queries:
        cfg.n_queries = args.queries
    data = pad_and_bucket(load_dataset(cfg, seed=args.seed))
    t_data = time.perf_counter() - tic
    sim_cfg = SimConfig.from_mapping(OmegaConf.load(ROOT / "conf" / "config.yaml").sim)
    sim = Simulator(data, clicks.make_click_model({"kind": "pbm", "examination": "log2"}, 5), sim_cfg,
                    warmup_policy=BM25(data))
    acfg = OmegaConf.load(ROOT / "conf" / "algorithm" / "ebrank.yaml")
    acfg.epsilon = args.epsilon
    policy, _ = make_policy("ebrank", acfg, data)  # the configured EBRank, as `python -m ltrjax.run` builds it
    tic = time.perf_counter()
    result = sim.run(policy, jax.random.PRNGKey(args.seed))
    t_run = time.perf_counter() - tic
    warm, main_ = sim.session_counts()
    out = {"preset": args.preset, "queries": data.n_queries, "sessions": main_, "warmup_sessions": warm,
           "data_seconds": t_data, "run_seconds": t_run, "total_seconds": t_data + t_run,
           "timings": result.timings, "retrains": len(result.train_info),
           "cum_ndcg": result.cum_ndcg["test"], "warm_ndcg": result.warm_ndcg, "cold_ndcg": result.cold_ndcg,
           "device_kind": jax.devices()[0].device_kind}
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
