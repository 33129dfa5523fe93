"""The training of every offline estimator.

An epoch is one jitted function: a random permutation of the training rows (logged or labeled
queries) is cut into minibatches and ``lax.scan`` runs the optimizer over them; padded batch
rows are zeroed so they contribute nothing. The epochs run in the fit loop the online retraining
shares (``ltrjax.models.fit_loop``), run on the host (``fit_loop.HOST``) because the validation
metric (NDCG of the evaluator) is computed there; it keeps the best parameters (early stopping with
``patience``; ``Estimator.min_steps`` delays stopping, e.g. for Vectorization's freeze and joint
phases; ``Estimator.select_from`` is the step from which validation may already select a checkpoint).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax

from ltrjax.constraints import PositiveInt
from ltrjax.models import fit_loop, optim
from ltrjax.models.fit_config import FitFields
from ltrjax.offline.estimators.base import Estimator


@dataclasses.dataclass(frozen=True)
class TrainConfig(FitFields, block="train", optimizer="adam", learning_rate=0.01, batch_size=64, patience=10,
                  min_epochs=1, clip_norm=5.0, weight_decay=0.0):
    """Settings of an offline estimator's fit; also the schema of ``experiment.train`` (``ltrjax.schema``).

    The shared fields are ``ltrjax.models.fit_config.FitFields``'; the defaults here are the offline estimators'.
    ``patience``: validations without a better validation score before stopping (``fit_rule``).
    """

    max_epochs: PositiveInt = 100  # an offline fit trains (and validates) at least one epoch
    eval_every: PositiveInt = 1  # validate every n epochs (and at the last epoch)
    # a fixed step budget (the papers' rule): run max_steps steps (rounded up to whole epochs, at most max_epochs
    # epochs), validate every eval_every_steps steps (rounded to whole epochs), keep the best validated checkpoint;
    # no early stopping, and an estimator's min_steps/select_from do not change it (a table treats all alike)
    max_steps: PositiveInt | None = None
    eval_every_steps: PositiveInt | None = None


@dataclasses.dataclass
class FitResult:
    params: dict
    state: dict
    history: dict


def _mask_rows(a, valid):
    v = valid.reshape(valid.shape + (1,) * (a.ndim - 1))
    return a & v if a.dtype == jnp.bool_ else a * v.astype(a.dtype)


@functools.lru_cache(maxsize=64)
def make_epoch(estimator: Estimator, cfg: TrainConfig, n_rows: int):
    """jitted epoch(params, opt_state, state, key, data) -> (params, opt_state, state, mean loss).

    Memoized on (estimator, config, rows) so repeated fits reuse the compiled epoch; the 64 most recent
    are kept, so a loop over many settings or data sizes does not keep every compiled epoch alive.
    """
    opt = optim.optimizer_of(cfg)
    batch_size = int(min(cfg.batch_size, n_rows))
    n_batches = -(-n_rows // batch_size)
    grad_fn = jax.value_and_grad(estimator.loss, has_aux=True)

    def step(carry, inp):
        params, opt_state, state, data = carry
        idx, key = inp
        valid = idx >= 0
        batch = jax.tree_util.tree_map(lambda a: _mask_rows(a[jnp.maximum(idx, 0)], valid), data)
        (loss, state), grads = grad_fn(params, state, batch, key)
        updates, opt_state = opt.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return (params, opt_state, state, data), loss

    @jax.jit
    def epoch(params, opt_state, state, key, data):
        kperm, kloss = jax.random.split(key)
        perm = jax.random.permutation(kperm, n_rows)
        idx = jnp.concatenate([perm, -jnp.ones(n_batches * batch_size - n_rows, perm.dtype)])
        idx = idx.reshape(n_batches, batch_size)
        keys = jax.random.split(kloss, n_batches)
        (params, opt_state, state, _), losses = jax.lax.scan(step, (params, opt_state, state, data), (idx, keys))
        return params, opt_state, state, jnp.mean(losses)

    return epoch, n_batches


def fit_rule(estimator: Estimator, cfg: TrainConfig, n_batches: int, keep_last: bool = False) -> fit_loop.Rule:
    """When a fit validates and stops: a fixed step budget (``cfg.max_steps``) or early stopping."""
    if cfg.max_steps is not None:
        epochs = min(-(-int(cfg.max_steps) // n_batches), int(cfg.max_epochs))
        every = max(1, round((cfg.eval_every_steps or n_batches) / n_batches))
        return fit_loop.Rule(max_epochs=epochs, patience=epochs + 1, min_epochs=epochs, first=every, every=every,
                             keep_last=keep_last)
    min_epochs = max(cfg.min_epochs, -(-estimator.min_steps // n_batches))
    max_epochs = max(cfg.max_epochs, min_epochs)
    # first validated epoch: checkpoints are selected from here on, stopping waits for min_epochs
    first = min_epochs if estimator.select_from is None else min(
        max(cfg.min_epochs, -(-estimator.select_from // n_batches)), min_epochs)
    return fit_loop.Rule(max_epochs=max_epochs, patience=cfg.patience, min_epochs=min_epochs, first=first,
                         every=max(cfg.eval_every, 1), keep_last=keep_last)


def schedule(rule: fit_loop.Rule, n_batches: int) -> dict:
    """The schedule a fit ran under, in steps: budget, first validated step, validation cadence, patience."""
    return {"max_steps": rule.max_epochs * n_batches, "first_validated_step": rule.first * n_batches,
            "eval_every_steps": rule.every * n_batches, "patience_steps": rule.patience * n_batches,
            "min_steps": rule.min_epochs * n_batches, "steps_per_epoch": n_batches}


def fit(estimator: Estimator, data, key, n_features: int, cfg: TrainConfig,
        validate: Callable | None = None, props=None, progress: bool = False, desc: str = "") -> FitResult:
    """Train ``estimator`` on ``data`` (a ClickBatch/LabeledBatch with leading axis = row).

    ``props`` (``Propensities``) is what the estimator is told about the click model. An estimator with its
    own ``fitter`` (a tree ensemble, ``ltrjax.offline.gbdt``) is fitted by it, with the same validation.
    """
    if estimator.fitter is not None:
        return estimator.fitter(estimator, data, key, n_features, cfg, validate=validate, props=props,
                                progress=progress, desc=desc)
    kinit, key = jax.random.split(key)
    params, state = estimator.init(kinit, n_features, props)
    opt = optim.optimizer_of(cfg)
    opt_state = opt.init(params)
    n_rows = int(jax.tree_util.tree_leaves(data)[0].shape[0])
    epoch, n_batches = make_epoch(estimator, cfg, n_rows)
    rule = fit_rule(estimator, cfg, n_batches, keep_last=validate is None)
    max_epochs = rule.max_epochs
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=max_epochs, desc=desc or estimator.name, leave=False, disable=None)  # off on non-TTY output
    t0 = time.perf_counter()

    losses, scores = [], []  # the host's history: every epoch's mean training loss, every validation's score

    def run_epoch(carry, k):
        params, opt_state, state, loss = epoch(*carry, k, data)
        losses.append(float(loss))
        if bar is not None:
            bar.update(1)
        return (params, opt_state, state), loss

    def score(carry):
        scores.append(float(validate(carry[0], carry[2])))
        return scores[-1]

    best, info = fit_loop.early_stopped(run_epoch, score, (params, opt_state, state), key, rule,
                                        next_key=fit_loop.fold_key, keep=lambda carry: (carry[0], carry[2]),
                                        run=fit_loop.HOST)
    if bar is not None:
        bar.close()
    history = {"loss": losses, "vali": scores, "n_batches": n_batches,
               "best_vali": info["best_score"], "best_epoch": info["best_epoch"], "epochs": info["epochs"],
               "steps": info["epochs"] * n_batches, "best_step": info["best_epoch"] * n_batches,
               "schedule": schedule(rule, n_batches), "seconds": time.perf_counter() - t0}
    return FitResult(params=best[0], state=best[1], history=history)
