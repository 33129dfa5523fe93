"""The one optimiser factory of every fit in ltrjax (online retraining and offline estimators)."""

from __future__ import annotations

import optax

OPTIMIZERS = {"adam": optax.adam, "adamw": optax.adamw, "adagrad": optax.adagrad, "sgd": optax.sgd}


def make_optimizer(name: str, learning_rate: float, clip_norm: float | None = None,
                   weight_decay: float = 0.0) -> optax.GradientTransformation:
    """``name`` (adam, adamw, adagrad, sgd) at ``learning_rate``, after optional global-norm clipping and
    decoupled weight decay (in that order)."""
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; expected one of {sorted(OPTIMIZERS)}")
    parts = []
    if clip_norm:
        parts.append(optax.clip_by_global_norm(float(clip_norm)))
    if weight_decay:
        parts.append(optax.add_decayed_weights(float(weight_decay)))
    parts.append(OPTIMIZERS[name](float(learning_rate)))
    return parts[0] if len(parts) == 1 else optax.chain(*parts)


def optimizer_of(cfg) -> optax.GradientTransformation:
    """The optimiser a fit config names (a ``ltrjax.models.fit_config.FitFields``: ``FitConfig``, ``TrainConfig``):
    ``make_optimizer`` of its ``optimizer``, ``learning_rate``, ``clip_norm`` and ``weight_decay``, or L-BFGS with
    ``lbfgs_memory`` past updates (full-batch online fits only)."""
    if cfg.optimizer == "lbfgs":
        return optax.lbfgs(memory_size=int(cfg.lbfgs_memory))
    return make_optimizer(cfg.optimizer, cfg.learning_rate, cfg.clip_norm, cfg.weight_decay)
