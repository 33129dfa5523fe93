"""LambdaMART-style gradient-boosted trees for the offline estimators (``ranker: lambdamart``; PRS §5.1).

PRS-LambdaMART (PRS §5.1, its unnumbered lambda equations) weights LambdaMART's lambda gradients by
theta_j / theta_i.
Here every estimator keeps its own JAX loss L(s) (PRS Eq. 9/11, IPS Eq. 6, ...) evaluated on a
*pass-through* scorer whose input already is the score (``rankers.ScoreInput``), and LightGBM grows
the trees on its derivatives with respect to the scores (a custom objective), so naive / IPS / PNS / PRS /
PRS-lambda and the labeled losses all train trees with no per-estimator code:

* gradient g_i = dL/ds_i (``jax.grad``);
* hessian h_i = d^2L/ds_i^2, the exact diagonal. For the pairwise logistic losses
  L = sum w_ij log(1 + exp(-(s_i - s_j))) with w constant in s (``Estimator.pair_weights``: naive, IPS, PNS,
  PRS and their lambda forms) it is h_i = sum_j (w_ij + w_ji) rho_ij (1 - rho_ij), rho_ij = sigma(s_i - s_j):
  LambdaMART's own Newton step (Burges 2010, MSR-TR-2010-82, "LambdaMART"; sigma = 1, |Delta Z_ij| inside w_ij
  for ``prs_lambda``), in closed form. Any other loss takes one Hessian-vector product per list slot (the loss
  is a sum of per-list terms, so a one-hot tangent at slot k of every list gives column k of every list's
  block); the two agree (tests/test_gbdt.py).

Both are multiplied by the number of lists, i.e. the loss is a sum over lists (LambdaMART's sum over queries)
rather than a mean over sessions; the Newton step -sum g / sum h of a leaf does not change, LightGBM's
absolute thresholds (``min_sum_hessian_in_leaf``) do.

Model selection is the offline protocol's (``train.fit``), in the same fit loop (``ltrjax.models.fit_loop``, run on
the host): one boosting round (``Booster.update``, as ``lgb.train`` runs it) is one epoch, the validator's NDCG@10
on the validation lists is computed at the validated rounds (from LightGBM's incremental validation scores, a
custom eval), the best round is kept and training stops after ``patience`` rounds without a better one, or at
``max_epochs`` rounds. The selected ensemble becomes a pytree of arrays (``tree_arrays``) scored in JAX
(``tree_scores``), so evaluation, saving and loading treat it as any other ranker's parameters.
"""

from __future__ import annotations

import dataclasses
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

from ltrjax.offline.estimators.base import n_sessions, pair_hessian_diagonal

GBDT_DEFAULTS = {"learning_rate": 0.1, "num_leaves": 31, "min_data_in_leaf": 20, "min_sum_hessian_in_leaf": 1e-3,
                 "lambda_l2": 0.0, "max_bin": 255,  # LightGBM's lambdarank defaults; ``estimator_options.gbdt``
                 # LightGBM's OpenMP threads (0: its default, one per core). The trees do not depend on it
                 # (``deterministic``, column-wise histograms); on small data in a busy process (the tests, whose other
                 # xdist worker holds the second core) 1 thread boosts a round 20-40x faster than 2 that wait on each other
                 "num_threads": 0}


# --------------------------------------------------------------------------- derivatives of the estimator's loss
@functools.lru_cache(maxsize=64)
def score_derivatives(estimator, by_columns: bool = False):
    """jitted (scores [B, K], state, batch) -> (g, h, new state): dL/ds and the exact diagonal of d^2L/ds^2 [B, K],
    and the state the loss returns (an estimator's bias model, e.g. ``pair_debias_lambda``'s t+/t-, is updated once
    per boosting round from all the lists).

    ``estimator`` must score through ``rankers.ScoreInput`` (the loss reads the scores from ``batch.features``).
    A pairwise estimator (``Estimator.pair_weights``) gets h in closed form (``pair_hessian_diagonal``, O(K^2) a
    list); any other loss, or ``by_columns``, one Hessian-vector product per list slot (O(K^3) a list: on whole
    MQ2008 lists, K = 121, that was 3.6 s of every boosting round). Both are exact; tests/test_gbdt.py checks
    that they agree.
    """

    def loss_and_state(scores, state, batch):
        return estimator.loss({"ranker": {}}, state, batch.replace(features=scores[..., None]), jax.random.PRNGKey(0))

    grad_and_state = jax.grad(loss_and_state, has_aux=True)

    def grad(scores, state, batch):
        return grad_and_state(scores, state, batch)[0]

    def by_slot_columns(scores, state, batch):
        def column(e):  # H e for the one-hot e at one slot of every list: column k of every list's block
            return jax.jvp(lambda s: grad(s, state, batch), (scores,), (jnp.broadcast_to(e, scores.shape),))[1]

        k = scores.shape[-1]
        cols = jax.lax.map(column, jnp.eye(k, dtype=scores.dtype), batch_size=min(k, 16))  # [K, B, K]
        return jnp.diagonal(cols, axis1=0, axis2=2)

    def closed_form(scores, state, batch):
        w = jax.lax.stop_gradient(estimator.pair_weights(state, batch, scores))
        return pair_hessian_diagonal(scores, w, batch.mask) / n_sessions(batch)

    hessian = by_slot_columns if by_columns or estimator.pair_weights is None else closed_form

    @jax.jit
    def derivatives(scores, state, batch):
        g, new_state = grad_and_state(scores, state, batch)
        return g, hessian(scores, state, batch), new_state

    return derivatives


# --------------------------------------------------------------------------- the ensemble as arrays
def tree_arrays(booster, num_iteration: int | None = None, n_trees: int = 1, n_leaves: int = 2) -> dict:
    """The first ``num_iteration`` trees as arrays: ``root`` [T], ``feature``, ``threshold``, ``left``, ``right``
    [T, N-1] (child >= 0: internal node, < 0: leaf ~child) and ``leaf`` [T, N] values. T and N are at least
    ``n_trees`` and ``n_leaves`` (fixed shapes: one compiled scorer for every fit); padding trees are one leaf 0.

    Thresholds are the largest float32 <= LightGBM's double threshold, so float32 ``x <= t`` routes as LightGBM.
    """
    trees = booster.dump_model(num_iteration=num_iteration)["tree_info"]
    n = max(2, n_leaves, *(t.get("num_leaves", 1) for t in trees))
    size = max(1, n_trees, len(trees))
    out = {"feature": np.zeros((size, n - 1), np.int32), "threshold": np.zeros((size, n - 1), np.float32),
           "left": np.full((size, n - 1), -1, np.int32), "right": np.full((size, n - 1), -1, np.int32),
           "leaf": np.zeros((size, n), np.float32), "root": np.full((size,), -1, np.int32)}
    for t, tree in enumerate(trees):
        def visit(node):  # -> child code of ``node``
            if "leaf_value" in node:
                i = node.get("leaf_index", 0)
                out["leaf"][t, i] = node["leaf_value"]
                return ~i
            i = node["split_index"]
            if node["decision_type"] != "<=" or node.get("missing_type", "None") == "Zero":
                raise ValueError(f"unsupported split {node['decision_type']} / missing {node.get('missing_type')}")
            thr = np.float32(node["threshold"])
            out["threshold"][t, i] = np.nextafter(thr, np.float32(-np.inf)) if thr > node["threshold"] else thr
            out["feature"][t, i] = node["split_feature"]
            out["left"][t, i], out["right"][t, i] = visit(node["left_child"]), visit(node["right_child"])
            return i

        out["root"][t] = visit(tree["tree_structure"])
    return {k: jnp.asarray(v) for k, v in out.items()}


def tree_scores(trees: dict, features):
    """Sum of the trees' leaf values for ``features`` [..., F] (the booster's raw prediction), in JAX."""
    shape = features.shape[:-1]
    x = features.reshape(-1, features.shape[-1])
    rows = jnp.arange(x.shape[0])[:, None]
    t = jnp.arange(trees["root"].shape[0])[None, :]
    node = jnp.broadcast_to(trees["root"][None, :], (x.shape[0], t.shape[1]))

    def step(node):
        i = jnp.maximum(node, 0)
        left = x[rows, trees["feature"][t, i]] <= trees["threshold"][t, i]
        return jnp.where(node >= 0, jnp.where(left, trees["left"][t, i], trees["right"][t, i]), node)

    node = jax.lax.while_loop(lambda n: jnp.any(n >= 0), step, node)
    return jnp.sum(trees["leaf"][t, ~node], axis=-1).reshape(shape)


def score(params, state, features, mask):
    """``Estimator.score`` of a tree ensemble ``params["trees"]``."""
    del state, mask
    return tree_scores(params["trees"], features)


# --------------------------------------------------------------------------- fitting
def _rows(features, mask):
    return np.asarray(features, np.float32)[np.asarray(mask)]


def make_objective(estimator, data, state):
    """LightGBM's custom objective: preds of the rows ``data.features[data.mask]`` -> (g, h) of those rows,
    ``score_derivatives`` times the number of lists (module docstring). Each call (one boosting round) moves the
    estimator's state on to what its loss returns (``objective.state``): a bias model learned with the trees."""
    mask = np.asarray(data.mask)
    lean = data.replace(features=jnp.zeros(mask.shape + (1,), jnp.float32))
    derivatives = score_derivatives(estimator)
    scale = float(mask.shape[0])

    def objective(preds, _=None):
        s = np.zeros(mask.shape, np.float32)
        s[mask] = preds
        g, h, objective.state = derivatives(jnp.asarray(s), objective.state, lean)
        return np.asarray(g, np.float64)[mask] * scale, np.asarray(h, np.float64)[mask] * scale

    objective.state = state
    return objective


def tree_estimator(estimator, options=None):
    """``estimator`` (its loss written on ``rankers.ScoreInput``) as a tree ensemble: the same loss and state,
    ``score`` of the trees, fitted by ``fit`` with the LightGBM ``options`` over ``GBDT_DEFAULTS``."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(GBDT_DEFAULTS))
    if unknown:
        raise ValueError(f"estimator_options.gbdt: unknown keys {unknown}; expected some of {sorted(GBDT_DEFAULTS)}")
    return dataclasses.replace(estimator, score=score,
                               fitter=functools.partial(fit, options=tuple(sorted(options.items()))))


def fit(estimator, data, key, n_features: int, cfg, validate=None, props=None, progress: bool = False,
        desc: str = "", options=()):
    """``train.fit`` for a tree ensemble: LightGBM on the derivatives of ``estimator.loss`` (module docstring).

    ``validate`` must come from ``evaluate.make_validator`` (its ``buckets`` and ``k`` are scored incrementally
    by LightGBM); ``None`` keeps the last round. ``options``: LightGBM settings over ``GBDT_DEFAULTS``.
    """
    import lightgbm as lgb

    from ltrjax.models import fit_loop
    from ltrjax.offline.evaluate import mean_ndcg
    from ltrjax.offline.train import FitResult

    del progress, desc
    _, state = estimator.init(key, n_features, props)
    mask = np.asarray(data.mask)
    objective = make_objective(estimator, data, state)
    seed = int(jax.random.randint(key, (), 0, 2**31 - 1))
    opts = {**GBDT_DEFAULTS, **dict(options)}
    max_rounds = max(cfg.max_epochs, cfg.min_epochs)
    # what ``lgb.train`` runs for a custom objective: datasets built with every parameter, ``update(fobj=...)``
    lgb_params = {**opts, "objective": "none", "metric": "None", "verbosity": -1, "seed": seed,
                  "deterministic": True, "force_col_wise": True, "num_iterations": max_rounds}
    t0 = time.perf_counter()
    train = lgb.Dataset(_rows(data.features, mask), label=np.zeros(int(mask.sum())), free_raw_data=False,
                        params={"max_bin": opts["max_bin"], **lgb_params})
    booster = lgb.Booster(params=lgb_params, train_set=train)
    history = {"loss": [], "vali": [], "n_batches": 1, "epochs": 0}
    if validate is not None:
        buckets = validate.buckets
        sizes = np.cumsum([0] + [int(np.asarray(b.mask).sum()) for b in buckets])
        booster.add_valid(lgb.Dataset(np.concatenate([_rows(b.features, b.mask) for b in buckets]),
                                      label=np.zeros(sizes[-1]), reference=train, params=lgb_params), "valid_0")

    def feval(preds, _):  # the validator's NDCG@k, from LightGBM's running validation scores
        scores = []
        for b, lo, hi in zip(buckets, sizes[:-1], sizes[1:]):
            s = np.zeros(np.asarray(b.mask).shape, np.float32)
            s[np.asarray(b.mask)] = preds[lo:hi]
            scores.append(jnp.asarray(s))
        return f"ndcg@{validate.k}", mean_ndcg(scores, buckets, validate.k), True

    def boost(rounds, key):  # one boosting round is one epoch; the carry is the number of rounds
        booster.update(fobj=objective)
        return rounds + 1, None

    def score(rounds):
        history["vali"].append(booster.eval_valid(feval)[0][2])
        return history["vali"][-1]

    rule = fit_loop.Rule(first=cfg.min_epochs, every=max(cfg.eval_every, 1), patience=cfg.patience,
                         min_epochs=cfg.min_epochs, max_epochs=max_rounds, keep_last=validate is None)
    best, info = fit_loop.early_stopped(boost, score, 0, key, rule, next_key=lambda key, e: (key, key),
                                        run=fit_loop.HOST)
    params = {"trees": tree_arrays(booster, best, max_rounds, int(opts["num_leaves"]))}
    history["epochs"] = info["epochs"]
    history.update(best_vali=info["best_score"], best_epoch=best, seconds=time.perf_counter() - t0)
    # the estimator's state after the last round (its bias model, e.g. pair_debias_lambda's t+/t-, learned with the trees)
    return FitResult(params=params, state=objective.state, history=history)
