"""Offline counterfactual LTR table (SPEC §6-7): every estimator, NDCG@{1,3,5,10} and MAP.

    python experiments/offline_table.py --dataset mq2008 --out outputs/offline_mq2008
    python experiments/offline_table.py --dataset synthetic_mslr10k dataset.n_queries=3000 \
        experiment.trials=3 --out outputs/offline_synth

Extra ``key=value`` arguments are OmegaConf dot-list overrides of ``dataset.*`` and
``experiment.*`` (the same keys as ``python -m ltrjax.run experiment=offline``). Writes
results.json / results.md into ``--out``. ``--smoke`` runs a tiny table (the synthetic dataset unless
``--dataset`` is given, 100 queries, 4k sessions, 3 estimators, at most 5 epochs; seconds), for tests; overrides
given on the command line still win.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from omegaconf import OmegaConf

ROOT = pathlib.Path(__file__).resolve().parents[1]

# --smoke: a tiny offline run (dataset.*/experiment.* dot-list overrides, applied before the user's)
SMOKE = ["dataset.n_queries=100", "experiment.trials=1", "experiment.n_sessions=4000", "experiment.progress=false",
         "experiment.estimators=[prs,production,labeled]", "experiment.train.max_epochs=5",
         "experiment.train.patience=2", "experiment.logging_chunk=8192", "experiment.eval_buckets=1"]
SMOKE_DATASET = "synthetic"


def compose(dataset: str, overrides: list[str]):
    cfg = OmegaConf.create({
        "dataset": OmegaConf.load(ROOT / "conf" / "dataset" / f"{dataset}.yaml"),
        "experiment": OmegaConf.load(ROOT / "conf" / "experiment" / "offline.yaml"),
    })
    return OmegaConf.merge(cfg, OmegaConf.from_dotlist(overrides))


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default=None, help=f"conf/dataset/<name>.yaml (default: mq2008; --smoke: "
                                                    f"{SMOKE_DATASET})")
    ap.add_argument("--out", default=None)
    ap.add_argument("--smoke", action="store_true", help="a tiny run (seconds), for tests")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args(argv)
    from ltrjax.experiment import configure_jax

    configure_jax()  # as ltrjax.run: float32 products, compiled programs persist between runs
    from ltrjax.offline_runner import run_offline
    from ltrjax.schema import offline_run

    dataset = args.dataset or (SMOKE_DATASET if args.smoke else "mq2008")
    cfg = compose(dataset, (SMOKE if args.smoke else []) + args.overrides)
    out = pathlib.Path(args.out or ROOT / "outputs" / f"offline_{dataset}{'_smoke' if args.smoke else ''}")
    print(OmegaConf.to_yaml(cfg.experiment), file=sys.stderr)
    return run_offline(offline_run(cfg), out)


if __name__ == "__main__":
    main()
