"""The offline estimators' fit: one compiled program per estimator and data shape.

An epoch is a pure function: a random permutation of the training rows (logged or labeled
queries) is cut into minibatches and ``lax.scan`` runs the optimizer over them; padded batch
rows are zeroed so they contribute nothing. The epochs run in ``ltrjax.models.fit_loop.early_stopped``,
the loop the online retraining shares (``ltrjax.models.train``): validation NDCG (``make_validator``,
computed inside the program) after each epoch, the best parameters kept, early stopping with
``patience``; ``Estimator.min_steps`` delays stopping, e.g. for Vectorization's freeze and joint
phases; ``Estimator.select_from`` is the step from which validation may already select a checkpoint.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from typing import Annotated

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ltrjax.constraints import NonNegative, NonNegativeInt, OneOf, Positive, PositiveInt, check_fields, strict_fields
from ltrjax.models import fit_loop, optim
from ltrjax.offline.estimators.base import Estimator
from ltrjax.offline.evaluate import _ndcg_sum


def optimizer_names() -> tuple[str, ...]:
    return tuple(optim.OPTIMIZERS)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Settings of an offline estimator's fit; also the schema of ``experiment.train`` (``ltrjax.schema``)."""

    batch_size: PositiveInt = 64
    optimizer: Annotated[str, OneOf(optimizer_names)] = "adam"
    learning_rate: Positive = 0.01
    clip_norm: Positive | None = 5.0
    weight_decay: NonNegative = 0.0
    max_epochs: PositiveInt = 100
    patience: NonNegativeInt = 10  # epochs without a better validation score before stopping
    min_epochs: NonNegativeInt = 1
    eval_every: PositiveInt = 1  # validate every n epochs (and at the last epoch)

    def __post_init__(self):
        check_fields(self)

    @classmethod
    def from_mapping(cls, m) -> TrainConfig:
        """A TrainConfig from a ``train`` mapping; a key it does not have is refused (``ConfigError``)."""
        return cls(**strict_fields(cls, m, "train"))


@dataclasses.dataclass
class FitResult:
    params: dict
    state: dict
    history: dict


def make_optimizer(cfg: TrainConfig) -> optax.GradientTransformation:
    """The shared factory (``ltrjax.models.optim``), chained so optimizer states keep one structure."""
    return optax.chain(optim.make_optimizer(cfg.optimizer, cfg.learning_rate, cfg.clip_norm, cfg.weight_decay))


def _mask_rows(a, valid):
    v = valid.reshape(valid.shape + (1,) * (a.ndim - 1))
    return a & v if a.dtype == jnp.bool_ else a * v.astype(a.dtype)


def make_epoch(estimator: Estimator, cfg: TrainConfig, n_rows: int):
    """(epoch, n_batches): epoch((params, opt_state, state), key, data) -> ((params, opt_state, state), mean loss),
    a pure function: a random permutation of the rows cut into minibatches, ``lax.scan`` over them."""
    opt = make_optimizer(cfg)
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

    def epoch(carry, key, data):
        params, opt_state, state = carry
        kperm, kloss = jax.random.split(key)
        perm = jax.random.permutation(kperm, n_rows)
        idx = jnp.concatenate([perm, -jnp.ones(n_batches * batch_size - n_rows, perm.dtype)])
        idx = idx.reshape(n_batches, batch_size)
        keys = jax.random.split(kloss, n_batches)
        (params, opt_state, state, _), losses = jax.lax.scan(step, (params, opt_state, state, data), (idx, keys))
        return (params, opt_state, state), jnp.mean(losses)

    return epoch, n_batches


def _ndcg_mean(estimator: Estimator, params, state, vali, k: int):
    """Mean NDCG@k over the validation lists with a relevant document (``make_validator``, inside the program)."""
    tot, cnt = jnp.float32(0.0), jnp.float32(0.0)
    for features, labels, mask in vali:
        s, c = _ndcg_sum(estimator.score(params, state, features, mask), labels, mask, k)
        tot, cnt = tot + s, cnt + c
    return tot / jnp.maximum(cnt, 1.0)


def _program(estimator: Estimator, cfg: TrainConfig, n_rows: int, rule: fit_loop.Rule, k: int, host=None,
             tick=None):
    """The jitted fit ``(carry, key, data, vali) -> (best carry, info)``: validation NDCG@k of ``vali`` inside
    the program, or ``host(params, state)`` called through ``jax.pure_callback`` when given; ``tick()`` is
    called on the host after every epoch (a progress bar) when given."""
    epoch, _ = make_epoch(estimator, cfg, n_rows)

    def run_epoch(carry, key, data):
        out = epoch(carry, key, data)
        if tick is not None:
            jax.debug.callback(tick)
        return out

    def score(carry, vali):
        params, _, state = carry
        if host is None:
            return _ndcg_mean(estimator, params, state, vali, k)
        return jax.pure_callback(host, jax.ShapeDtypeStruct((), jnp.float32), params, state)

    @jax.jit
    def program(carry, key, data, vali):
        return fit_loop.early_stopped(lambda c, key: run_epoch(c, key, data), lambda c: score(c, vali), carry, key,
                                      rule, fit_loop.fold_key)

    return program


# memoized on the static settings (the 64 most recent), so repeated fits reuse the compiled program
_cached_program = functools.lru_cache(maxsize=64)(_program)


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
    opt_state = make_optimizer(cfg).init(params)
    n_rows = int(jax.tree_util.tree_leaves(data)[0].shape[0])
    n_batches = make_epoch(estimator, cfg, n_rows)[1]
    min_epochs = max(cfg.min_epochs, -(-estimator.min_steps // n_batches))
    max_epochs = max(cfg.max_epochs, min_epochs)
    # first validated epoch: checkpoints are selected from here on, stopping waits for min_epochs
    first = min_epochs if estimator.select_from is None else min(
        max(cfg.min_epochs, -(-estimator.select_from // n_batches)), min_epochs)
    rule = fit_loop.Rule(max_epochs=max_epochs, patience=cfg.patience, min_epochs=min_epochs, first=first,
                         every=max(cfg.eval_every, 1), keep_last=validate is None)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=max_epochs, desc=desc or estimator.name, leave=False)
    buckets = getattr(validate, "buckets", None)
    vali = () if buckets is None else tuple(
        (jnp.asarray(b.features), jnp.asarray(b.labels), jnp.asarray(b.mask)) for b in buckets)
    k = 0 if buckets is None else int(validate.k)
    host = None if validate is None or buckets is not None else (lambda p, s: np.float32(validate(p, s)))
    if host is None and bar is None:  # make_validator (NDCG inside the program) or none (the last epoch)
        program = _cached_program(estimator, cfg, n_rows, rule, k)
    else:  # a host validator (called at the validated epochs) or a progress bar: compiled for this call
        program = _program(estimator, cfg, n_rows, rule, k, host, None if bar is None else (lambda: bar.update(1)))
    t0 = time.perf_counter()
    (params, _, state), info = program((params, opt_state, state), key, data, vali)
    epochs = int(info["epochs"])
    if bar is not None:
        bar.close()
    scores = np.asarray(info["scores"])[1:epochs + 1]
    history = {"loss": np.asarray(info["losses"])[:epochs].astype(float).tolist(), "n_batches": n_batches,
               "vali": [] if validate is None else scores[~np.isnan(scores)].astype(float).tolist(),
               "best_vali": float(info["best_score"]), "best_epoch": int(info["best_epoch"]), "epochs": epochs,
               "seconds": time.perf_counter() - t0}
    return FitResult(params=params, state=state, history=history)

