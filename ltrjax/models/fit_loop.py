"""The one early-stopped training loop of ltrjax, online and offline.

A fit trains epoch by epoch, validates some epochs, keeps the best validated parameters and stops when the
validation score stops improving. ``Rule`` says when to validate and when to stop; ``decide`` is that rule's
arithmetic and ``early_stopped`` the loop: its state (``Loop``), ``cond`` and ``body`` are written once, and an
``Execution`` runs them:

* ``COMPILED``: one ``lax.while_loop``, so the whole fit is one program that can be ``vmap``ped / ``lax.map``ped
  over the members of a population (the online retraining, ``ltrjax.models.train.make_fit``, validated by a loss
  computed on the device); a non-validated epoch's score is a ``lax.cond`` branch, the best carry a ``jnp.where``;
* ``HOST``: a Python while-loop with the same (cond, body, init) signature, on Python scalars, over a jitted
  epoch: ``score`` is a host function called exactly at the validated epochs and the best carry is kept by
  reference. It runs the offline estimators (``ltrjax.offline.train.fit``: validation NDCG by the offline
  evaluator) and LightGBM's boosting rounds (``ltrjax.offline.gbdt``: a round is an epoch). Compiling such a fit
  as one program would put the validation scoring inside every estimator's program: measured at cbfd8fc, that
  raised the CI suite from 485 s to 696 s. A host fit keeps its history (losses, scores, a progress bar) in its
  own ``epoch`` and ``score``.

Validated epoch counts are ``first, first + every, ...`` and the last epoch (``initial`` validates the initial
parameters too, as epoch count 0). The first validated epoch is kept whatever its score, later ones when strictly
better (the best validated carry is returned). A kept epoch is progress only when better by more than
``min_delta`` (0: every kept epoch is); after a validation without progress, ``bad`` (epochs since the last
progress) grows by ``every``, and once ``bad >= patience`` and at least ``min_epochs`` epochs ran, training stops
after ``grace`` more epochs (each validated). The online fits (``ltrjax.models.train.online_rule``) use
``patience = FitConfig.patience + 1`` and ``grace = FitConfig.grace``: by default patience 0, grace 0 and
``min_delta`` 1e-4, which stops a warm start after its first epoch without progress; the papers' settings
(``fit_overrides=papers``: their patience, grace 1, min_delta 0) are the form the fits had before (validate, train
one more epoch, then test the patience). The offline fits (``ltrjax.offline.train.fit_rule``) use no grace and
no ``min_delta``.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable
from typing import Any, NamedTuple

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
    # a validated epoch with a higher score is kept (and its score becomes the best) whatever this; it is progress
    # (resets the patience) only when its score beats the best by more than this
    min_delta: float = 0.0

    def validated(self, e):
        """Whether epoch count ``e`` is validated (a Python int or a traced integer)."""
        regular = (e >= self.first) & ((e - self.first) % max(self.every, 1) == 0)
        return regular | (e == self.max_epochs) | self.keep_last

    @property
    def validates_every_epoch(self) -> bool:
        """Every epoch count from 1 on is validated (the loop then scores every epoch without a branch)."""
        return self.keep_last or (self.first <= 1 and self.every == 1)


@dataclasses.dataclass(frozen=True)
class Execution:
    """How the one loop runs: its control flow, selects and scalar types (``COMPILED`` or ``HOST``)."""

    while_loop: Callable  # (cond, body, init) -> final state
    cond: Callable  # (pred, true_fn, false_fn, operand): the score of an epoch that may not be validated
    where: Callable  # (flag, a, b) on scalars
    select: Callable  # (flag, new, old) on carries: the best carry
    logical_not: Callable
    int: Callable
    float: Callable


def _host_while(cond, body, state):
    while cond(state):
        state = body(state)
    return state


def _either(flag, a, b):
    return a if flag else b


# one compiled program (vmappable); every selected carry is a ``jnp.where`` of the two
COMPILED = Execution(jax.lax.while_loop, jax.lax.cond, jnp.where,
                     lambda flag, new, old: jax.tree_util.tree_map(lambda a, b: jnp.where(flag, a, b), new, old),
                     jnp.logical_not, jnp.int32, jnp.float32)
# Python scalars, a Python loop and branches: ``score`` runs exactly at the validated epochs, the best carry is kept
# by reference
HOST = Execution(_host_while, lambda flag, f, g, x: f(x) if flag else g(x), _either, _either, operator.not_,
                 int, float)


def decide(rule: Rule, e, on, score, best_score, bad, left, run: Execution = COMPILED):
    """The rule after epoch count ``e`` (validated when ``on``, with ``score``): returns (better, best_score,
    bad, left). ``better``: keep this epoch (a higher score, or the first validated epoch); it resets the patience
    only when higher by more than ``rule.min_delta`` (progress). ``left`` counts the grace epochs still to run (-1:
    not stopping; 0: stop now)."""
    first = (e == rule.first) | rule.keep_last
    better = on & ((score > best_score) | first)
    progress = on & ((score > best_score + rule.min_delta) | first)  # = better when min_delta is 0
    best_score = run.where(better, score, best_score)
    bad = run.where(progress, 0, run.where(on, bad + max(rule.every, 1), bad))
    fire = on & run.logical_not(progress) & (bad >= rule.patience) & (e >= rule.min_epochs) & (not rule.keep_last)
    left = run.where(left > 0, left - 1, run.where(fire, rule.grace, left))
    return better, best_score, bad, left


class Loop(NamedTuple):
    """The loop's state."""

    epochs: Any  # epochs trained
    carry: Carry
    key: Any
    best: Carry  # ``keep`` of the best validated carry
    best_score: Any
    best_epoch: Any  # 0: the initial carry
    bad: Any  # epochs since the last progress
    left: Any  # grace epochs still to run (-1: not stopping; 0: stop)


def split_key(key, epoch):
    """``next_key`` of a key chain: (next chain key, this epoch's key)."""
    del epoch
    return tuple(jax.random.split(key))


def fold_key(key, epoch):
    """``next_key`` of per-epoch keys ``fold_in(key, epoch)`` (the chain key does not move)."""
    return key, jax.random.fold_in(key, epoch)


def early_stopped(epoch: Callable, score: Callable, carry: Carry, key, rule: Rule, next_key: Callable = split_key,
                  keep: Callable = lambda carry: carry, run: Execution = COMPILED) -> tuple[Any, dict]:
    """Train ``carry`` epoch by epoch until ``rule`` stops it, as one ``lax.while_loop`` (``run=COMPILED``) or a
    Python loop over a jitted ``epoch`` (``run=HOST``).

    ``epoch(carry, key) -> (carry, loss)`` trains one epoch (the loss is not kept); ``score(carry) -> scalar``
    rates it (higher is better), called only at validated epochs under ``HOST``; ``keep(carry)`` is the part of
    the best carry to return (e.g. the parameters, not the optimizer state). Returns (``keep`` of the best
    validated carry, info): ``epochs`` trained, ``best_score`` and ``best_epoch`` (0 = the initial carry).
    """
    def rate(carry):
        return run.float(0.0) if rule.keep_last else run.float(score(carry))

    def consider(s: Loop, on) -> Loop:
        if rule.validates_every_epoch:  # no branch: every epoch is scored
            value = rate(s.carry)
        else:
            value = run.cond(on, rate, lambda carry: run.float(float("nan")), s.carry)
        better, best_score, bad, left = decide(rule, s.epochs, on, value, s.best_score, s.bad, s.left, run)
        return s._replace(best=run.select(better, keep(s.carry), s.best), best_score=best_score,
                          best_epoch=run.where(better, s.epochs, s.best_epoch), bad=bad, left=left)

    def cond(s: Loop):
        return (s.epochs < rule.max_epochs) & (s.left != 0)

    def body(s: Loop) -> Loop:
        key, k_epoch = next_key(s.key, s.epochs)
        carry, _ = epoch(s.carry, k_epoch)
        s = s._replace(epochs=s.epochs + 1, carry=carry, key=key)
        return consider(s, rule.validated(s.epochs))

    s = Loop(run.int(0), carry, key, keep(carry), run.float(-float("inf")), run.int(0), run.int(0), run.int(-1))
    if rule.initial:
        s = consider(s, True)
    s = run.while_loop(cond, body, s)
    return s.best, {"epochs": s.epochs, "best_score": s.best_score, "best_epoch": s.best_epoch}
