"""Probes of why Vectorization loses on d = 3 vector-EH clicks (issue 11; docs/fidelity.md).

    python experiments/fidelity_probes.py OUT_DIR [probe ...]      # the committed figures (docs/results/
                                                                    # fidelity_vector_eh/probes/; ~1 h on one core)
    python experiments/fidelity_probes.py --smoke OUT_DIR            # every probe at toy size (seconds): for tests

probes (default: all), each writing OUT_DIR/<probe>.json with per-seed figures:

* ``position_rankings``: population NDCG@10 (no clicks, no training) of ranking by the true click rate at each
  position, by its best linear fits, by E[gain | x] (``fidelity.position_rankings``), d = 3 and d = 2;
* ``convergence``: every estimator trained 1500 epochs (4500 steps) with no early stopping; test NDCG@10 of
  the final iterate and of the checkpoint validation selects (every 25 epochs), linear rankers, 5 seeds;
* ``linear``: Vectorization in the checks' d = 3 setting (linear rankers), 5 seeds;
* ``oracle_features``: the same comparison as the checks, on features that let a linear r(x) represent the
  softmax link's target: the top 3 singular vectors of log P(click | x, k) (Bayes posterior), 3 seeds;
* ``mlp``: the checks' d = 3 comparison with the MLP ranker ({64, 32}), 3 seeds;
* ``oracle_o``: Vectorization with the o_k fixed at the rank-3 factors of log M (V_3 S_3^1/2), 4 seeds.

Every Vectorization fit also reports the test NDCG@10 of ranking by <r(x), o_k> for k = 1, 5, 10 and by
<r(x), b*>, b* the least-squares fit of the test gains on r(x) (the best its embedding can rank linearly).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

from ltrjax.clicks import make_click_model
from ltrjax.offline import experiment as E
from ltrjax.offline import fidelity as F
from ltrjax.offline.config import override
from ltrjax.offline.estimator_api import estimator_option_defaults
from ltrjax.offline.estimators import ClickBatch, Estimator
from ltrjax.offline.evaluate import make_evaluator, make_validator
from ltrjax.offline.logging import log_click_stats
from ltrjax.offline.rankers import make_scorer
from ltrjax.offline.train import fit

NOISE = 1.0  # as the checks (tests/test_fidelity.py `checks`)


@dataclasses.dataclass(frozen=True)
class Sizes:
    """The probes' sizes: the committed runs' defaults, or ``SMOKE``."""

    queries: int = 300
    sessions: int = 200_000
    seeds: int = 5  # at most this many seeds per probe (each probe's own count otherwise)
    epochs: int = 1500  # convergence: epochs trained without early stopping
    every: int = 25  # convergence: validate every this many epochs
    vec_steps: tuple[int, int] | None = None  # Vectorization's (freeze, joint steps); None: the experiment's
    scalar: tuple[str, ...] = F.SCALAR  # the scalar-EH estimators compared


SMOKE = Sizes(queries=40, sessions=2_000, seeds=1, epochs=4, every=2, vec_steps=(2, 2), scalar=("dla",))


def sized(cfg, size: Sizes):
    """An experiment config at ``size`` (Vectorization's schedule shortened for the smoke size)."""
    if size.vec_steps is None:
        return cfg
    freeze, joint = size.vec_steps
    return override(cfg, {"estimator_options": {"vectorization": {"freeze": freeze, "joint_steps": joint}},
                          "train": {"max_epochs": size.epochs}})


def vec_diag(trial, exp, fr) -> dict:
    o = np.asarray(fr.params["observation"])
    scorer = make_scorer(exp.ranker, int(o.shape[1]), tuple(exp.hidden))

    def ndcg(b):
        b = jnp.asarray(b, jnp.float32)
        est = Estimator("probe", None, None,
                        lambda params, state, features, mask: jnp.sum(scorer.apply(params["ranker"], features) * b, -1))
        return float(make_evaluator(est, trial.test)(fr.params, fr.state)["ndcg@10"])

    out = {f"rank_by_o{k + 1}": ndcg(o[k]) for k in (0, 4, 9)}
    rs, gs = [], []
    for b in trial.test:
        r = np.asarray(scorer.apply(fr.params["ranker"], jnp.asarray(b.features)))
        m = np.asarray(b.mask)
        g = 2.0 ** np.asarray(b.labels) - 1
        n = m.sum(1, keepdims=True)
        rs.append((r - (r * m[..., None]).sum(1, keepdims=True) / n[..., None])[m])
        gs.append((g - (g * m).sum(1, keepdims=True) / n)[m])
    out["rank_by_best_b"] = ndcg(np.linalg.lstsq(np.concatenate(rs), np.concatenate(gs), rcond=None)[0])
    out["best_epoch"] = int(fr.history["best_epoch"])
    return out


def compare(qs, cfg, seeds, estimators) -> dict:
    exp = override(cfg, {"estimators": list(estimators)})
    out = {e: [] for e in estimators}
    for s in seeds:
        trial = E.prepare_trial(qs, exp, int(s))
        fits = {}
        res = E.run_setting(trial, exp, log=lambda *a: None, on_fit=lambda n, est, fr: fits.__setitem__(n, fr))
        for e in estimators:
            out[e].append(float(res[e]["ndcg@10"]))
        if "vectorization" in fits:
            for k, v in vec_diag(trial, exp, fits["vectorization"]).items():
                out.setdefault(f"vectorization_{k}", []).append(v)
        print(f"seed {s}: " + " ".join(f"{e}={out[e][-1]:.4f}" for e in estimators), flush=True)
    return out


def position_rankings(size: Sizes) -> dict:
    return {f"d{d}": F.position_rankings(F.vector_eh(d), noise=NOISE) for d in (3, 2)}


def convergence(size: Sizes, n_seeds=5) -> dict:
    seeds, epochs, every = range(min(n_seeds, size.seeds)), size.epochs, size.every
    names = ("vectorization", *size.scalar, "labeled")
    qs = F.basis_queryset(n_queries=size.queries, noise=NOISE)
    cfg = sized(F.vector_eh_config(F.vector_eh(3), size.sessions), size)
    exp = override(cfg, {"estimators": list(names)})
    out = {n: {"final": [], "selected": [], "selected_epoch": []} for n in names}
    for s in seeds:
        trial = E.prepare_trial(qs, exp, int(s))
        key = jax.random.fold_in(jax.random.PRNGKey(trial.seed), 7)
        logged = trial.logged.replace(relevance=jnp.where(
            trial.logged.mask, E.click_relevance(trial.logged.labels, exp, trial.y_max), 0.0))
        stats = log_click_stats(jax.random.fold_in(key, 2), make_click_model(exp.click_model.mapping(), 10), logged,
                                int(exp.n_sessions), chunk=exp.logging_chunk)
        data = ClickBatch(features=logged.features, mask=logged.mask, n_sessions=stats.n_sessions,
                          clicks=stats.clicks, pairs=stats.pairs, pairs_lambda=stats.pairs_lambda)
        props = E.estimator_propensities(exp, logged, trial.y_max)
        for n in names:
            est = E.make_named_estimator(exp, n)
            est = dataclasses.replace(est, min_steps=0, select_from=None)
            val, ev, rec = make_validator(est, trial.vali), make_evaluator(est, trial.test), []

            def validate(params, state, val=val, ev=ev, rec=rec):
                rec.append((val(params, state), ev(params, state)["ndcg@10"]))
                return rec[-1][0]

            cfg = dataclasses.replace(exp.train, max_epochs=epochs, patience=10**9, eval_every=every, max_steps=None)
            fit(est, trial.labeled_train if n == "labeled" else data, jax.random.fold_in(key, 100), trial.n_features,
                cfg, validate=validate, props=props)
            v = np.asarray(rec)
            # Vectorization's checkpoints before the end of its freeze score an untrained base model: not selectable
            n_batches = -(-int(data.features.shape[0]) // int(exp.train.batch_size))
            freeze = {**estimator_option_defaults("vectorization"), **exp.options_for("vectorization")}["freeze"]
            freeze_epochs = -(-int(freeze) // n_batches)
            start = -(-freeze_epochs // every) if n == "vectorization" else 0
            best = start + int(np.argmax(v[start:, 0]))
            out[n]["final"].append(float(v[-1, 1]))
            out[n]["selected"].append(float(v[best, 1]))
            out[n]["selected_epoch"].append((best + 1) * every)
        print(f"seed {s}: " + " ".join(f"{n}={out[n]['selected'][-1]:.4f}/{out[n]['final'][-1]:.4f}" for n in names),
              flush=True)
    return out


def oracle_features(size: Sizes, n_seeds=3, n_dirs=3) -> dict:
    seeds = range(min(n_seeds, size.seeds))
    model = F.vector_eh(3)
    qs = F.basis_queryset(n_queries=size.queries, noise=NOISE)
    log_rate = np.log(F.basis_posterior(n_queries=size.queries, noise=NOISE) @ model.matrix)
    mean = log_rate.mean(0)
    u, s, vt = np.linalg.svd(log_rate - mean, full_matrices=False)
    low = (u[:, :n_dirs] * s[:n_dirs]) @ vt[:n_dirs] + mean
    f = u[:, :n_dirs]
    f = ((f - f.min(0)) / np.ptp(f, 0)).astype(np.float32)
    qs2 = dataclasses.replace(qs, features=f, feature_ids=np.arange(1, n_dirs + 1, dtype=np.int32))
    res = compare(qs2, sized(F.vector_eh_config(model, size.sessions), size), seeds,
                  ("vectorization", *size.scalar, "labeled"))
    return {**res, "n_dirs": n_dirs, "max_click_rate_error_of_fit": float(np.abs(np.exp(low) - np.exp(log_rate)).max())}


def linear(size: Sizes, n_seeds=5) -> dict:
    seeds = range(min(n_seeds, size.seeds))
    qs = F.basis_queryset(n_queries=size.queries, noise=NOISE)
    return compare(qs, sized(F.vector_eh_config(F.vector_eh(3), size.sessions), size), seeds, ("vectorization",))


def mlp(size: Sizes, n_seeds=3) -> dict:
    seeds = range(min(n_seeds, size.seeds))
    qs = F.basis_queryset(n_queries=size.queries, noise=NOISE)
    return compare(qs, sized(F.vector_eh_config(F.vector_eh(3), size.sessions, ranker="mlp"), size), seeds,
                   ("vectorization", *size.scalar, "labeled"))


def oracle_o(size: Sizes, n_seeds=4) -> dict:
    seeds = range(min(n_seeds, size.seeds))
    model = F.vector_eh(3)
    u, s, vt = np.linalg.svd(np.log(model.matrix), full_matrices=False)
    o = vt[:3].T * np.sqrt(s[:3])
    qs = F.basis_queryset(n_queries=size.queries, noise=NOISE)
    cfg = override(sized(F.vector_eh_config(model, size.sessions), size),
                   {"estimator_options": {"vectorization": {"observation_init": o.tolist(), "train_observation": False}}})
    return {**compare(qs, cfg, seeds, ("vectorization",)), "observation": o.tolist(),
            "max_click_rate_error_rank3": float(np.abs(np.exp((u[:, :3] * s[:3]) @ vt[:3]) - model.matrix).max())}


PROBES = {"position_rankings": position_rankings, "convergence": convergence, "linear": linear,
          "oracle_features": oracle_features, "mlp": mlp, "oracle_o": oracle_o}

def main(argv=None) -> dict:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=pathlib.Path)
    parser.add_argument("probes", nargs="*", choices=[[], *PROBES], help="default: all")
    parser.add_argument("--smoke", action="store_true", help="toy sizes (seconds): for tests")
    args = parser.parse_args(argv)
    from ltrjax.experiment import configure_jax

    configure_jax()  # as ltrjax.run: float32 products, compiled programs persist between runs
    size = SMOKE if args.smoke else Sizes()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    results = {}
    for name in args.probes or PROBES:
        t0 = time.time()
        res = PROBES[name](size)
        smoke = "--smoke " if args.smoke else ""
        res = {"command": f"python experiments/fidelity_probes.py {smoke}{args.out_dir} {name}",
               "seconds": round(time.time() - t0, 1), "sizes": dataclasses.asdict(size), **res}
        (args.out_dir / f"{name}.json").write_text(json.dumps(res, indent=1))
        print(f"{name}: {res['seconds']} s", flush=True)
        results[name] = res
    return results


if __name__ == "__main__":
    main()
