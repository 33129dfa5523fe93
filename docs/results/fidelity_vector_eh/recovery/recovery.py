"""Why Vectorization's o_k are not recovered at d = 3 on the confounded_mlp bed (issue 11): controlled runs.

    python docs/results/fidelity_vector_eh/recovery/recovery.py RUN OUT.json [--seeds 100,101] [--junk 0.3]
        [--sessions 200000] [--queries 600] [--joint 4000]

One Vectorization fit (d = 3, the bed's MLP ranker, logging and click model) per seed, with
* the o_k at every validated epoch (``traj``: step, validation NDCG@10, smallest principal cosine with the
  true O), the selected checkpoint's and the last iterate's cosine;
* the learned r(x) stack over the logged documents against the true r(y) stack (singular values, principal
  cosines of the column spans);
* oracle-r fits of O on the same clicks, r fixed to the true r(y): the softmax loss of Eq. 9 (the estimator's
  link, <r, o> = log-click-rate + const) and per-position least squares of the click rate (the identity link
  of Eq. 2, the model the clicks follow);
* per-position smallest singular value of the true r stack (is O identified by the logged grades?).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize

from ltrjax.offline import experiment as E
from ltrjax.offline.estimators import ClickBatch, make_estimator
from ltrjax.offline.estimators.base import weighted_softmax_ce
from ltrjax.offline.evaluate import make_evaluator, make_validator
from ltrjax.offline.fidelity import BEDS, VectorEH, basis_queryset, principal_cosines, shuffled_positions, vector_eh, vector_eh_config
from ltrjax.offline.logging import log_click_stats
from ltrjax.clicks import make_click_model
from ltrjax.offline.rankers import make_scorer
from ltrjax.offline.train import fit


def smallest_cos(a, b) -> float:
    return float(principal_cosines(a, b)[-1])


def oracle_softmax_o(r, clicks, mask, n_sess) -> np.ndarray:
    """argmin_O of the softmax loss (Eq. 9) with z_qk = <r_qk, o_k> and r fixed (convex in O)."""
    k, d = r.shape[1], r.shape[2]
    r, clicks, mask = jnp.asarray(r), jnp.asarray(clicks), jnp.asarray(mask)
    tot = float(np.sum(n_sess))

    def f(flat):
        o = flat.reshape(k, d)
        z = jnp.sum(r * o[None], -1)
        return weighted_softmax_ce(z, clicks, mask) / tot

    vg = jax.jit(jax.value_and_grad(f))

    def fun(x):
        v, g = vg(jnp.asarray(x, jnp.float32))
        return float(v), np.asarray(g, np.float64)

    res = scipy.optimize.minimize(fun, np.ones(k * d), jac=True, method="L-BFGS-B", options={"maxiter": 5000})
    return res.x.reshape(k, d)


def oracle_rate_o(r, clicks, mask, n_sess) -> np.ndarray:
    """Per-position least squares of the click rate on r (weights = sessions): the identity link of Eq. 2."""
    k, d = r.shape[1], r.shape[2]
    rate = clicks / np.maximum(n_sess[:, None], 1e-9)
    out = np.zeros((k, d))
    for j in range(k):
        m = mask[:, j]
        w = np.sqrt(n_sess[m])
        out[j] = np.linalg.lstsq(r[m, j] * w[:, None], rate[m, j] * w, rcond=None)[0]
    return out


def link_fit(features, mask, clicks, n_sess, o_true, link: str, key, steps: int = 4500, freeze: int = 500,
             batch: int = 64, lr: float = 0.01, hidden=(64, 32), every: int = 250) -> dict:
    """The same MLP r(x) (d = 3) and o_k (initialised to 1, frozen ``freeze`` steps), Adam, minibatches of lists,
    trained on one of two links: ``softmax`` (Eq. 9, <r, o> = log click rate + per-list constant) or
    ``identity`` (Eq. 2, <r, o> = click rate: session-weighted squared error of the per-(list, position) click
    rate). The smallest principal cosine with the true O every ``every`` steps."""
    import optax

    scorer = make_scorer("mlp", 3, tuple(hidden))
    k1, key = jax.random.split(key)
    params = {"ranker": scorer.init(k1, jnp.zeros((1, features.shape[-1]))),
              "o": jnp.ones((clicks.shape[1], 3), jnp.float32)}
    opt = optax.adam(lr)
    st = opt.init(params)
    feats, msk = jnp.asarray(features), jnp.asarray(mask)
    c, n = jnp.asarray(clicks, jnp.float32), jnp.asarray(n_sess, jnp.float32)

    def loss(p, idx, frozen):
        o = jnp.where(frozen, jax.lax.stop_gradient(p["o"]), p["o"])
        z = jnp.sum(scorer.apply(p["ranker"], feats[idx]) * o[None, None], -1)
        if link == "softmax":
            return weighted_softmax_ce(z, c[idx], msk[idx]) / jnp.maximum(jnp.sum(n[idx]), 1.0)
        rate = c[idx] / jnp.maximum(n[idx][:, None], 1e-9)
        w = jnp.where(msk[idx], n[idx][:, None], 0.0)
        return jnp.sum(w * (rate - z) ** 2) / jnp.maximum(jnp.sum(n[idx]), 1.0)

    @jax.jit
    def step(p, st, idx, frozen):
        g = jax.grad(loss)(p, idx, frozen)
        up, st = opt.update(g, st, p)
        return optax.apply_updates(p, up), st

    rows = features.shape[0]
    traj = []
    for t in range(steps):
        key, kb = jax.random.split(key)
        idx = jax.random.choice(kb, rows, (batch,), replace=False)
        params, st = step(params, st, idx, t < freeze)
        if (t + 1) % every == 0:
            traj.append({"step": t + 1, "cos": smallest_cos(o_true, np.asarray(params["o"], np.float64))})
    return {"link": link, "cos_last": traj[-1]["cos"], "cos_max": max(x["cos"] for x in traj),
            "cos_min_after_freeze": min(x["cos"] for x in traj if x["step"] > freeze + every), "traj": traj,
            "o_last": np.asarray(params["o"]).tolist()}


def run_seed(seed: int, junk: float, sessions: int, queries: int, joint: int, expected: bool = False,
             boost: float | None = None, shuffle: int = 0, noise: float | None = None, loglink: bool = False) -> dict:
    t0 = time.time()
    tb = BEDS["confounded_mlp"]
    qs = tb.queryset(queries) if noise is None else basis_queryset(n_queries=queries, noise=noise)
    model = vector_eh(3, junk=junk)
    lm = np.log(model.matrix)
    u, sv3, vt = np.linalg.svd(lm)
    v_log = vt[:3].T  # position factor of the best rank-3 fit of log M (what Eq. 9's softmax link can identify)
    ones = np.ones((lm.shape[1], 1))
    if loglink:  # clicks with log P(click | y, k) = <r'(y), o'_k> exactly: M' = exp(rank-3 part of log M)
        low = (u[:, :3] * sv3[:3]) @ vt[:3]
        model = VectorEH(relevance=u[:, :3] * np.sqrt(sv3[:3]), observation=vt[:3].T * np.sqrt(sv3[:3]))
        click_matrix = np.minimum(np.exp(low), 1.0)
    else:
        click_matrix = model.matrix
    over = tb.over()
    if boost is not None:
        over.pop("logging_boost", None)
        if boost:
            over["logging_boost"] = {"column": 8, "weight": boost}
    cfg = vector_eh_config(vector_eh(3, junk=junk), sessions, **over)
    cfg["click_model"] = {"kind": "matrix", "matrix": click_matrix.tolist(), "relevance": "linear"}
    cfg["estimator_options"]["vec_joint_steps"] = joint
    exp = E.experiment_config({**cfg, "estimators": ["vectorization"]})
    trial = E.prepare_trial(qs, exp, seed)
    key = jax.random.fold_in(jax.random.PRNGKey(trial.seed), 7)  # as run_setting
    lg = trial.logged
    if shuffle:
        lg = shuffled_positions(lg, shuffle, seed)
    logged = lg.replace(relevance=jnp.where(lg.mask, E.click_relevance(lg.labels, exp, trial.y_max), 0.0))
    stats = log_click_stats(jax.random.fold_in(key, 2), make_click_model(exp["click_model"], 10), logged,
                            int(exp["n_sessions"]), chunk=int(exp["logging_chunk"]))
    if expected:  # noise-free: expected click counts n_q M[y, k] instead of sampled ones
        lab, msk = np.asarray(logged.labels), np.asarray(logged.mask)
        exp_clicks = np.asarray(stats.n_sessions)[:, None] * click_matrix[lab, np.arange(lab.shape[1])[None]] * msk
        stats = stats.replace(clicks=jnp.asarray(exp_clicks, jnp.float32))
    data = ClickBatch(features=logged.features, mask=logged.mask, n_sessions=stats.n_sessions,
                      clicks=stats.clicks, pairs=stats.pairs, pairs_lambda=stats.pairs_lambda)
    props = E.estimator_propensities(exp, logged, trial.y_max)
    est = make_estimator("vectorization", exp["estimator_options"], exp["ranker"], exp["hidden"])
    val = make_validator(est, trial.vali)
    traj = []
    scorer = make_scorer(exp["ranker"], 3, tuple(exp["hidden"]))
    lab_, msk_ = np.asarray(logged.labels), np.asarray(logged.mask)
    clicks_expected = jnp.asarray(np.asarray(stats.n_sessions)[:, None]
                                  * click_matrix[lab_, np.arange(lab_.shape[1])[None]] * msk_, jnp.float32)
    tot = jnp.maximum(jnp.sum(stats.n_sessions), 1.0)

    @jax.jit
    def sup_losses(ranker, o):
        z = jnp.sum(scorer.apply(ranker, logged.features) * o[None, None], -1)
        return (weighted_softmax_ce(z, stats.clicks, logged.mask) / tot,
                weighted_softmax_ce(z, clicks_expected, logged.mask) / tot)

    def validate(params, state):
        v = float(val(params, state))
        o = np.asarray(params["observation"], np.float64)
        lt, le = sup_losses(params["ranker"], params["observation"])
        traj.append({"step": int(state["step"]), "vali": v, "cos": smallest_cos(model.observation, o),
                     "cos_with_ones": smallest_cos(o, np.concatenate([model.observation, ones], 1)),
                     "cos_log_target": smallest_cos(v_log, o), "sup_loss": float(lt), "sup_loss_expected": float(le),
                     "o": o})
        return v

    fr = fit(est, data, jax.random.fold_in(key, 100), trial.n_features, E._train_cfg(exp, "vectorization"),
             validate=validate, props=props)
    ndcg = float(make_evaluator(est, trial.test)(fr.params, fr.state)["ndcg@10"])
    o_sel = np.asarray(fr.params["observation"], np.float64)
    o_last = traj[-1]["o"]

    mask = np.asarray(logged.mask)
    labels = np.asarray(logged.labels)
    clicks = np.asarray(stats.clicks, np.float64)
    n_sess = np.asarray(stats.n_sessions, np.float64)
    r_true = model.relevance[labels]  # [Q, K, 3]
    r_hat = np.asarray(scorer.apply(fr.params["ranker"], logged.features), np.float64)
    sv = lambda a: (np.linalg.svd(a, compute_uv=False) / np.sqrt(len(a))).tolist()  # noqa: E731
    links = {lk: link_fit(np.asarray(logged.features), mask, clicks, n_sess, model.observation, lk,
                          jax.random.fold_in(key, 200)) for lk in ("softmax", "identity")}
    o_soft = oracle_softmax_o(r_true.astype(np.float32), clicks.astype(np.float32), mask, n_sess)
    z_or = np.sum(r_true * o_soft[None], -1)
    oracle_sup = [float(weighted_softmax_ce(jnp.asarray(z_or, jnp.float32), c, logged.mask) / tot)
                  for c in (stats.clicks, clicks_expected)]
    o_rate = oracle_rate_o(r_true, clicks, mask, n_sess)
    per_pos_sv = [float(np.linalg.svd(r_true[mask[:, j], j], compute_uv=False)[-1] / np.sqrt(mask[:, j].sum()))
                  for j in range(mask.shape[1])]
    best = max(traj, key=lambda t: t["vali"])
    nb = fr.history["n_batches"]
    for t in traj:
        t["train_loss"] = fr.history["loss"][max(t["step"] // nb - 1, 0)]
    out = {"seed": seed, "junk": junk, "sessions": sessions, "queries": queries, "joint": joint,
           "expected_clicks": expected, "boost": boost, "shuffle_copies": shuffle,
           "ndcg": ndcg, "best_epoch": fr.history["best_epoch"], "epochs": fr.history["epochs"],
           "selected_step": best["step"], "cos_selected": smallest_cos(model.observation, o_sel),
           "cos_last": smallest_cos(model.observation, o_last), "last_step": traj[-1]["step"],
           "cos_max_over_traj": max(t["cos"] for t in traj),
           "cos_oracle_r_softmax": smallest_cos(model.observation, o_soft),
           "cos_oracle_r_rate": smallest_cos(model.observation, o_rate),
           "cos_last_log_target": smallest_cos(v_log, o_last), "cos_log_target_true_o": smallest_cos(v_log, model.observation),
           "cos_last_with_ones": smallest_cos(o_last, np.concatenate([model.observation, ones], 1)),
           "oracle_r_sup_loss": oracle_sup, "link_fits": links, "loglink": loglink, "feature_noise": noise,
           "cos_oracle_softmax_vs_learned_last": smallest_cos(o_soft, o_last),
           "sv_true_r": sv(r_true[mask]), "sv_learned_r": sv(r_hat[mask]),
           "sv_learned_r_centered": sv(r_hat[mask] - r_hat[mask].mean(0)),
           "r_span_cos": principal_cosines(r_true[mask], r_hat[mask]).tolist(),
           "sv_o_true": np.linalg.svd(model.observation, compute_uv=False).tolist(),
           "sv_o_selected": np.linalg.svd(o_sel, compute_uv=False).tolist(),
           "sv_o_last": np.linalg.svd(o_last, compute_uv=False).tolist(),
           "per_position_min_sv_true_r": per_pos_sv,
           "o_selected": o_sel.tolist(), "o_last": o_last.tolist(), "o_oracle_softmax": o_soft.tolist(),
           "o_oracle_rate": o_rate.tolist(),
           "traj": [{k: v for k, v in t.items() if k != "o"} for t in traj],
           "seconds": time.time() - t0}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seeds", default="100,101,102,103,104")
    ap.add_argument("--junk", type=float, default=0.3)
    ap.add_argument("--sessions", type=int, default=200_000)
    ap.add_argument("--queries", type=int, default=600)
    ap.add_argument("--joint", type=int, default=4000)
    ap.add_argument("--expected", action="store_true", help="noise-free expected click counts")
    ap.add_argument("--boost", type=float, default=None, help="logging boost weight (default: the bed's 1.5)")
    ap.add_argument("--shuffle", type=int, default=0, help="shuffled copies of every logged list")
    ap.add_argument("--noise", type=float, default=None, help="feature noise of basis_queryset (default: the bed's 0.35)")
    ap.add_argument("--loglink", action="store_true", help="clicks follow exp(rank-3 part of log M): Eq. 9's own link")
    a = ap.parse_args(argv)
    res = {"command": "python docs/results/fidelity_vector_eh/recovery/recovery.py " + " ".join(sys.argv[1:]),
           "runs": []}
    for s in [int(x) for x in a.seeds.split(",")]:
        r = run_seed(s, a.junk, a.sessions, a.queries, a.joint, a.expected, a.boost, a.shuffle, a.noise, a.loglink)
        res["runs"].append(r)
        print(f"seed {s}: ndcg={r['ndcg']:.4f} sel_step={r['selected_step']} cos sel={r['cos_selected']:.3f} "
              f"last={r['cos_last']:.3f} max={r['cos_max_over_traj']:.3f} oracle-r softmax={r['cos_oracle_r_softmax']:.3f} "
              f"rate={r['cos_oracle_r_rate']:.3f} last_log={r['cos_last_log_target']:.3f} last_w1={r['cos_last_with_ones']:.3f} "
              f"link softmax last/max={r['link_fits']['softmax']['cos_last']:.3f}/{r['link_fits']['softmax']['cos_max']:.3f} "
              f"identity last/max={r['link_fits']['identity']['cos_last']:.3f}/{r['link_fits']['identity']['cos_max']:.3f} "
              f"sup_last={r['traj'][-1]['sup_loss_expected']:.4f} sup_oracle={r['oracle_r_sup_loss'][1]:.4f} r_span_cos={np.round(r['r_span_cos'], 3)} "
              f"sv_r_hat={np.round(r['sv_learned_r'], 3)} ({r['seconds']:.0f}s)", flush=True)
        pathlib.Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(a.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
