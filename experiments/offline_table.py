"""Offline counterfactual LTR table (SPEC §6-7): every estimator, NDCG@{1,3,5,10} and MAP.

    python experiments/offline_table.py --dataset mq2008 --out outputs/offline_mq2008
    python experiments/offline_table.py --dataset synthetic_mslr10k dataset.n_queries=3000 \
        experiment.trials=3 --out outputs/offline_synth

Extra ``key=value`` arguments are OmegaConf dot-list overrides of ``dataset.*`` and
``experiment.*`` (the same keys as ``python -m ltrjax.run experiment=offline``). Writes
results.json / results.md into ``--out``.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from omegaconf import OmegaConf

ROOT = pathlib.Path(__file__).resolve().parents[1]


def compose(dataset: str, overrides: list[str]):
    cfg = OmegaConf.create({
        "dataset": OmegaConf.load(ROOT / "conf" / "dataset" / f"{dataset}.yaml"),
        "experiment": OmegaConf.load(ROOT / "conf" / "experiment" / "offline.yaml"),
    })
    return OmegaConf.merge(cfg, OmegaConf.from_dotlist(overrides))


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="mq2008")
    ap.add_argument("--out", default=None)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args(argv)
    from ltrjax.offline.experiment import enable_compilation_cache, run_offline

    enable_compilation_cache()
    cfg = compose(args.dataset, args.overrides)
    out = pathlib.Path(args.out or ROOT / "outputs" / f"offline_{args.dataset}")
    print(OmegaConf.to_yaml(cfg.experiment), file=sys.stderr)
    return run_offline(cfg, out)


if __name__ == "__main__":
    main()
