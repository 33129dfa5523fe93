"""Register a new offline estimator from outside the package and compare it with the built-in ones.

The estimator is Propensity SVM-Rank (Joachims et al. WSDM'17; a baseline of PRS Table 1): the pairwise hinge
loss max(0, 1 - (s_i - s_j)) over (clicked i, unclicked j) pairs of a logged list, weighted by the inverse
examination propensity 1 / theta_{k_i} of the clicked document (clipped at ``clip``). Adding an estimator is
one ``make(scorer, *, option=default) -> Estimator`` function and one ``register_estimator`` line; nothing
inside ``ltrjax/`` changes. Its options are keyword arguments (``estimator_option_defaults`` reads them).

    python examples/custom_estimator.py                 # synthetic data, 200k logged sessions
    python examples/custom_estimator.py --smoke --json  # tiny, for the test suite
"""

from __future__ import annotations

import argparse
import json

import jax.numpy as jnp

import ltrjax
from ltrjax.compile_cache import ensure_compilation_cache
from ltrjax.offline.estimators import Estimator, estimator_option_defaults, register_estimator
from ltrjax.offline.estimators.base import (init_scalar_ranker, n_sessions, next_step, pair_mask, ranker_scores,
                                            scalar_scores)


def make_propensity_svm(scorer, *, clip: float = 100.0, margin: float = 1.0) -> Estimator:
    """Propensity SVM-Rank: sum over (clicked i, unclicked j) of min(1/theta_{k_i}, clip) max(0, margin - (s_i - s_j))."""

    def loss(params, state, batch, key):
        s = ranker_scores(scorer, params, batch.features)  # [B, K]
        w = jnp.minimum(1.0 / jnp.maximum(state["props"].theta, 1e-12), clip)  # [K], position of the clicked doc
        hinge = jnp.maximum(0.0, margin - (s[..., :, None] - s[..., None, :]))  # [B, K, K]
        total = jnp.sum(jnp.where(pair_mask(batch.mask), batch.pairs * w[:, None] * hinge, 0.0))
        return total / n_sessions(batch), next_step(state)

    return Estimator("propensity_svm", init_scalar_ranker(scorer), loss, scalar_scores(scorer.apply))


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=200_000, help="logged sessions")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (the test suite runs this)")
    parser.add_argument("--json", action="store_true", help="print the results as one JSON line")
    args = parser.parse_args(argv)
    ensure_compilation_cache()  # compiled programs persist: a second run compiles nothing (docs/python-api.md)

    register_estimator("propensity_svm", make_propensity_svm, tree=True)  # the one registry line
    print("propensity_svm options:", estimator_option_defaults("propensity_svm"))

    queryset = ltrjax.load_dataset({"kind": "synthetic", "name": "synthetic", "preset": "synthetic",
                                    "n_queries": 120 if args.smoke else 500, "min_docs": 0}, seed=0)
    settings = ltrjax.OfflineSettings(
        estimators=("naive", "ips", "propensity_svm", "production"),
        n_sessions=20_000 if args.smoke else args.sessions,
        click_model={"kind": "pbm", "examination": "inverse", "eta": 1.0, "relevance": "binary", "noise": 0.1},
        train=ltrjax.TrainConfig(max_epochs=5 if args.smoke else 300, patience=30), eval_buckets=2)
    results = ltrjax.train_offline(queryset, settings=settings)
    summary = {"dataset": results["dataset"],
               "estimators": {name: {m: entry[m] for m in ("ndcg@5", "ndcg@10", "map")}
                              for name, entry in results["algorithms"].items()}}
    for name, row in summary["estimators"].items():
        print(f"{name:>16}  NDCG@10 {row['ndcg@10']:.3f}")
    if args.json:
        print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
