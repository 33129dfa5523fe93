"""Offline fidelity of Vectorization and PRS (issue 11; ``ltrjax.offline.fidelity_experiment``).

    python experiments/offline_fidelity.py --dataset mq2008 --out outputs/fidelity_mq2008
    python experiments/offline_fidelity.py --dataset mq2008 experiment.trials=5 experiment.vector_eh.seeds=0

The same run as ``python -m ltrjax.run experiment=offline_fidelity +dataset=NAME``. Extra ``key=value``
arguments are OmegaConf dot-list overrides of ``dataset.*`` and ``experiment.*``. ``--smoke``: toy data
(60 queries), 2 trials, 5k sessions, a few epochs, Vectorization d in {1, 2} with a 4-step freeze and joint
phase; for tests (the numbers mean nothing).
"""

from __future__ import annotations

import argparse
import pathlib

from omegaconf import OmegaConf

ROOT = pathlib.Path(__file__).resolve().parents[1]
SMOKE = {"trials": 2, "n_sessions": 5000, "logging_chunk": 4096, "eval_buckets": 1,
         "train": {"max_epochs": 2, "patience": 1},
         "estimator_options": {"vec_freeze": 2, "vec_joint_steps": 2, "vec_base_hidden": [8]},
         "vectorization": {"dims": [1, 2], "estimators": ["naive", "dla", "affine"], "settings": ["trust_bias"]},
         "prs": {"noise": [0.0, 0.2], "assumed_eta": [1.0, 2.0]},
         "vector_eh": {"seeds": 0}}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="mq2008")
    ap.add_argument("--out", default=None)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args(argv)
    from ltrjax.offline.experiment import enable_compilation_cache
    from ltrjax.offline.fidelity_experiment import run_fidelity

    enable_compilation_cache()
    cfg = OmegaConf.create({"experiment": OmegaConf.load(ROOT / "conf" / "experiment" / "offline_fidelity.yaml")})
    queryset = None
    if args.smoke:
        from ltrjax.offline.toy import toy_queryset

        cfg = OmegaConf.merge(cfg, {"experiment": SMOKE})
        queryset = toy_queryset(n_queries=60, seed=3)
    else:
        cfg = OmegaConf.merge(cfg, {"dataset": OmegaConf.load(ROOT / "conf" / "dataset" / f"{args.dataset}.yaml")})
    cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(args.overrides))
    out = pathlib.Path(args.out or ROOT / "outputs" / f"fidelity_{'smoke' if args.smoke else args.dataset}")
    return run_fidelity(cfg, out, queryset=queryset)


if __name__ == "__main__":
    main()
