"""A click model of your own, checked against its formula and simulated online, with nothing changed in ltrjax.

``distracted_user`` examines position k with Joachims et al.'s eye-tracking rate theta_k and clicks an examined
document with probability R (its relevance) plus a distraction rate d on any examined document:
P(click | d, k) = theta_k [R (1 - d) + d]. That is an affine click model (alpha_k = theta_k (1 - d), beta_k =
theta_k d; ``ltrjax.trust_bias`` with eps+ = 1, eps- = d), so the simulator runs it as it runs PBM, and the
affine counters (Delta) correct for it. The script (1) draws clicks with ``sample_clicks`` and compares their rate
per position with the formula, (2) runs EBRank and Random-k under it with ``ltrjax.compare_online``.

    python examples/custom_click_model.py                 # synthetic data, 500 queries, 2 trials
    python examples/custom_click_model.py --smoke --json  # tiny, for the test suite
"""

from __future__ import annotations

import argparse
import json

import jax
import numpy as np

import ltrjax
from ltrjax.clicks import ClickModel, relevance, sample_clicks
from ltrjax.compile_cache import ensure_compilation_cache


def distracted_user(n_positions: int, distraction: float = 0.1) -> ClickModel:
    """P(click | d, k) = theta_k [R (1 - d) + d], theta = Joachims et al.'s examination curve."""
    theta = ltrjax.examination("joachims", n_positions)
    return ltrjax.trust_bias(theta, eps_plus=np.ones(n_positions), eps_minus=np.full(n_positions, distraction))


def click_rate_check(model: ClickModel, n_sessions: int, distraction: float, seed: int = 0) -> dict:
    """Clicks drawn by the simulator's ``sample_clicks`` against the formula, per position: the largest gap in
    standard errors (a draw of ``n_sessions`` lists of random grades 0-4)."""
    k = model.n_positions
    key_labels, key_draws = jax.random.split(jax.random.PRNGKey(seed))
    labels = jax.random.randint(key_labels, (n_sessions, k), 0, 5)
    rel = relevance(labels, 4)  # EBRank's mapping of grades to click probabilities
    clicks = sample_clicks(model, jax.random.uniform(key_draws, (n_sessions, 2, k)), rel, labels)
    theta = ltrjax.examination("joachims", k)
    expected = np.asarray(theta * (np.asarray(rel) * (1 - distraction) + distraction)).mean(axis=0)
    observed = np.asarray(clicks, np.float64).mean(axis=0)
    se = np.sqrt(expected * (1 - expected) / n_sessions)
    return {"observed": observed.round(4).tolist(), "expected": expected.round(4).tolist(),
            "max_gap_in_se": float(np.max(np.abs(observed - expected) / se))}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (the test suite runs this)")
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--distraction", type=float, default=0.1)
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON line")
    args = parser.parse_args(argv)
    ensure_compilation_cache()
    n_queries, trials = (60, 1) if args.smoke else (500, args.trials)
    model = distracted_user(5, args.distraction)
    check = click_rate_check(model, 20_000 if args.smoke else 200_000, args.distraction)
    print(f"click rate per position: observed {check['observed']}, formula {check['expected']} "
          f"(largest gap {check['max_gap_in_se']:.1f} standard errors)")

    queryset = ltrjax.load_dataset({"kind": "synthetic", "preset": "synthetic", "n_queries": n_queries}, seed=0)
    # --smoke: the sizes of examples/custom_policy.py (same programs, compiled once for both)
    sim = (ltrjax.SimConfig(sessions=300, n_updates=2, warmup_sessions_per_query=2) if args.smoke
           else ltrjax.SimConfig(n_updates=20))
    ebrank_fit = {"max_epochs": 3} if args.smoke else None
    results = ltrjax.compare_online(queryset, {
        "ebrank": lambda data: ltrjax.EBRank(data, fit=ebrank_fit),
        "random_k": ltrjax.RandomK,
    }, click_model=model, sim=sim, trials=trials, seed=0)
    summary = {"queries": queryset.n_queries, "trials": trials, "distraction": args.distraction,
               "click_rates": check, "policies": ltrjax.summarize_online(results)}
    print(f"{'policy':<10} {'Cum-NDCG':>9} {'Warm':>7} {'Cold':>7}   (distracted user, d = {args.distraction}; "
          f"{trials} trial{'s' * (trials != 1)})")
    for name, row in summary["policies"].items():
        print(f"{name:<10} {row['cum_ndcg']:9.2f} {row['warm_ndcg']:7.4f} {row['cold_ndcg']:7.4f}")
    if args.json:
        print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
