"""The one early-stopped training loop of ltrjax, online and offline: a ``lax.while_loop`` over epochs.

Every fit is ``early_stopped(epoch, score, carry, key, rule, next_key)``: ``epoch(carry, key) -> (carry, loss)``
trains one epoch, ``score(carry) -> scalar`` rates the parameters (higher is better: a negated validation loss
online, validation NDCG offline), and ``Rule`` says when to validate and when to stop. The loop keeps the best
validated carry. It is a pure function: the online retraining ``vmap``s / ``lax.map``s it over the members of a
population (``ltrjax.models.train.make_fit``), the offline estimators ``jit`` it once per estimator and data
shape (``ltrjax.offline.train.fit``).

Validated epoch counts are ``first, first + every, ...`` and the last epoch (``initial`` validates the initial
parameters too, as epoch count 0). After each validation, ``bad`` (epochs since the best) is compared with ``patience``; once
``bad >= patience`` and at least ``min_epochs`` epochs ran, training stops after ``grace`` more epochs (each
validated). The online fits use ``grace = 1`` and ``patience = FitConfig.patience + 1``: the form they always
had (validate, train one more epoch, then test the patience), kept so their results do not change.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

Carry = Any


@dataclasses.dataclass(frozen=True)
class Rule:
    """When a fit validates and when it stops (see the module docstring)."""

    max_epochs: int
    patience: int
    min_epochs: int = 0
    first: int = 1
    every: int = 1
    grace: int = 0
    initial: bool = False  # also validate (and possibly keep) the initial carry, as epoch count 0
    keep_last: bool = False  # no validation: the result is the last epoch's carry


def split_key(key, epoch):
    """``next_key`` of a key chain: (next chain key, this epoch's key)."""
    del epoch
    return tuple(jax.random.split(key))


def fold_key(key, epoch):
    """``next_key`` of per-epoch keys ``fold_in(key, epoch)`` (the chain key does not move)."""
    return key, jax.random.fold_in(key, epoch)


def _select(flag, new, old):
    return jax.tree_util.tree_map(lambda a, b: jnp.where(flag, a, b), new, old)


def early_stopped(epoch: Callable, score: Callable, carry: Carry, key, rule: Rule,
                  next_key: Callable = split_key) -> tuple[Carry, dict]:
    """Train ``carry`` epoch by epoch until ``rule`` stops it; return (best validated carry, info).

    ``info``: ``epochs`` trained, ``best_score``, ``best_epoch`` (epoch count of the best carry; 0 = the
    initial one), ``losses`` [max_epochs] (NaN after the last epoch) and ``scores`` [max_epochs + 1] (the score
    after each epoch count, NaN where not validated).
    """
    max_epochs = int(rule.max_epochs)
    nan = jnp.float32(jnp.nan)
    losses = jnp.full((max(max_epochs, 1),), nan)  # one slot at least: the body is traced even if it never runs
    scores = jnp.full((max_epochs + 1,), nan)

    def validated(e):
        regular = (e >= rule.first) & ((e - rule.first) % max(rule.every, 1) == 0)
        return regular | (e == max_epochs) | rule.keep_last

    def rate(carry):
        return jnp.float32(0.0) if rule.keep_last else jnp.asarray(score(carry), jnp.float32)

    def consider(e, on, carry, best, best_score, best_epoch, bad, scores):
        # score only validated epochs (a host validator is called exactly then; vmapped, both branches run)
        s = jax.lax.cond(on, rate, lambda c: nan, carry)
        better = on & ((s > best_score) | (e == rule.first) | rule.keep_last)
        best = _select(better, carry, best)
        best_score = jnp.where(better, s, best_score)
        best_epoch = jnp.where(better, e, best_epoch)
        bad = jnp.where(better, 0, jnp.where(on, bad + max(rule.every, 1), bad))
        scores = scores.at[e].set(jnp.where(on, s, nan))
        return best, best_score, best_epoch, bad, scores

    best, best_score, best_epoch, bad = carry, jnp.float32(-jnp.inf), jnp.int32(0), jnp.int32(0)
    if rule.initial:
        best, best_score, best_epoch, bad, scores = consider(0, True, carry, best, best_score, best_epoch, bad, scores)

    def cond(state):
        e, left = state[0], state[-1]
        return (e < max_epochs) & (left != 0)

    def body(state):
        e, carry, key, best, best_score, best_epoch, bad, losses, scores, left = state
        key, k_epoch = next_key(key, e)
        carry, loss = epoch(carry, k_epoch)
        e = e + 1
        losses = losses.at[e - 1].set(jnp.asarray(loss, jnp.float32))
        best, best_score, best_epoch, bad, scores = consider(e, validated(e), carry, best, best_score, best_epoch, bad,
                                                             scores)
        fire = validated(e) & (bad >= rule.patience) & (e >= rule.min_epochs) & (not rule.keep_last)
        left = jnp.where(left > 0, left - 1, jnp.where(fire, rule.grace, left))
        return e, carry, key, best, best_score, best_epoch, bad, losses, scores, left

    init = (jnp.int32(0), carry, key, best, best_score, best_epoch, bad, losses, scores, jnp.int32(-1))
    e, _, _, best, best_score, best_epoch, _, losses, scores, _ = jax.lax.while_loop(cond, body, init)
    return best, {"epochs": e, "best_score": best_score, "best_epoch": best_epoch, "losses": losses, "scores": scores}
