"""A custom online policy in ~40 lines, compared against EBRank with the Python API (no Hydra).

``UCBClickRate`` ranks by the position-debiased click rate C / (E + 1) plus an upper-confidence bonus
``c * sqrt(log(T + 1) / (n + 1))`` (T: the query's sessions so far, n: the document's impressions), with
a feature prior for documents never shown; it has no model to train. Its exploration strength ``c`` is a
typed hyper-parameter, so a grid of values could run as one population.

    python examples/custom_policy.py                 # synthetic MQ2007-shaped data, 2 trials
    python examples/custom_policy.py --smoke --json  # tiny, for the test suite
"""

from __future__ import annotations

import argparse
import json

import jax.numpy as jnp
from flax import struct

import ltrjax
from ltrjax.compile_cache import ensure_compilation_cache


@struct.dataclass
class UCBHyper:
    exploration: jnp.ndarray  # c


class UCBClickRate(ltrjax.Policy):
    """Click rate plus a UCB bonus; unseen documents are ordered by the mean of their features."""

    name = "ucb_click_rate"
    Hyper = UCBHyper

    def __init__(self, data, exploration: float = 0.5):
        self.exploration = float(exploration)

    def default_hyper(self):
        return UCBHyper(exploration=jnp.float32(self.exploration))

    def prepare(self, params, bucket, behaviour=None):
        """Per-document values frozen for a segment: here a feature prior in [0, 1]."""
        return jnp.mean(bucket.features, axis=-1)

    def rate(self, prior, counters):
        return (counters.clicks + prior) / (counters.exposure + 1.0)

    def session_scores(self, view: ltrjax.QueryView, key):
        counters = view.counters
        bonus = jnp.sqrt(jnp.log(view.issue_count + 1.0) / (counters.impressions + 1.0))
        return self.rate(view.aux, counters) + view.hyper.exploration * bonus

    def test_scores(self, params, bucket, counters, warm: bool):
        prior = self.prepare(params, bucket)
        return self.rate(prior, counters) if warm else prior


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (the test suite runs this)")
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON line")
    args = parser.parse_args(argv)
    ensure_compilation_cache()  # compiled programs persist: a second run compiles nothing (docs/python-api.md)
    n_queries, trials = (60, 1) if args.smoke else (500, args.trials)
    queryset = ltrjax.load_dataset({"kind": "synthetic", "preset": "synthetic", "n_queries": n_queries}, seed=0)
    click_model = ltrjax.make_click_model({"kind": "pbm", "examination": "log2"}, 5)  # EBRank §5.1.2
    # --smoke: the sizes of docs/python-api.md's snippet (same data, protocol and EBRank fit), whose compiled
    # EBRank programs the test suite then runs once for both
    sim = (ltrjax.SimConfig(sessions=300, n_updates=2, warmup_sessions_per_query=2) if args.smoke
           else ltrjax.SimConfig(n_updates=20))
    ebrank_fit = {"max_epochs": 3} if args.smoke else None
    results = ltrjax.compare_online(queryset, {
        "ucb_click_rate": lambda data: UCBClickRate(data, exploration=0.5),
        "ebrank": lambda data: ltrjax.EBRank(data, fit=ebrank_fit),
    }, click_model=click_model, sim=sim, trials=trials, seed=0)
    summary = {"queries": queryset.n_queries, "trials": trials,
               "sessions": int(results["ebrank"][0].session_ndcg.size), "policies": ltrjax.summarize_online(results)}
    print(f"{'policy':<16} {'Cum-NDCG':>9} {'Warm':>7} {'Cold':>7}   ({summary['sessions']} sessions, {trials} trial{'s' * (trials != 1)})")
    for name, row in summary["policies"].items():
        print(f"{name:<16} {row['cum_ndcg']:9.2f} {row['warm_ndcg']:7.4f} {row['cold_ndcg']:7.4f}")
    if args.json:
        print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
