"""Offline fidelity of Vectorization and PRS (issue 11; ``ltrjax.offline.fidelity_experiment``, run by
``ltrjax.offline_runner.run_fidelity``).

    python experiments/offline_fidelity.py --dataset mq2008 --out outputs/fidelity_mq2008
    python experiments/offline_fidelity.py --dataset mq2008 experiment.trials=5 experiment.vector_eh.seeds=0

The same run as ``python -m ltrjax.run experiment=offline_fidelity +dataset=NAME``. Extra ``key=value``
arguments are OmegaConf dot-list overrides of ``dataset.*`` and ``experiment.*``. ``--smoke``: toy data
(60 queries, 5 grades), 2 trials, few clicks and sessions, a 40-step budget, Vectorization d in {1, 2} with a
4-step freeze and joint phase; for tests (the numbers mean nothing).
"""

from __future__ import annotations

import argparse
import pathlib

from omegaconf import OmegaConf

ROOT = pathlib.Path(__file__).resolve().parents[1]
SMOKE = {"trials": 2, "eval_buckets": 1, "train": {"max_steps": 20, "eval_every_steps": 10},
         "estimator_options": {"vectorization": {"freeze": 4, "joint_steps": 4, "base_hidden": [8]}},
         "vectorization": {"dims": [1, 2], "estimators": ["naive", "dla", "affine", "affine_oracle", "production",
                                                                 "labeled"],
                           "settings": ["trust_bias", "pbm"], "n_sessions": 3000},
         "prs": {"estimators": ["naive", "ips", "pns", "prs", "ips_oracle"], "clicks_per_query": 20, "max_steps": 20,
                 "click_sweep": [5, 20], "table1": False},
         "vector_eh": {"seeds": 0}}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="mq2008")
    ap.add_argument("--out", default=None)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args(argv)
    from ltrjax.experiment import configure_jax

    configure_jax()  # as ltrjax.run: float32 products, compiled programs persist between runs
    from ltrjax.offline_runner import run_fidelity
    from ltrjax.schema import offline_run
    cfg = OmegaConf.create({"experiment": OmegaConf.load(ROOT / "conf" / "experiment" / "offline_fidelity.yaml")})
    queryset = None
    if args.smoke:
        from ltrjax.data.toy import toy_queryset

        cfg = OmegaConf.merge(cfg, {"experiment": SMOKE})
        queryset = toy_queryset(n_queries=60, seed=3)
    else:
        cfg = OmegaConf.merge(cfg, {"dataset": OmegaConf.load(ROOT / "conf" / "dataset" / f"{args.dataset}.yaml")})
    cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(args.overrides))
    out = pathlib.Path(args.out or ROOT / "outputs" / f"fidelity_{'smoke' if args.smoke else args.dataset}")
    return run_fidelity(offline_run(cfg, "offline_fidelity"), out, queryset=queryset)


if __name__ == "__main__":
    main()
