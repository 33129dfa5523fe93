"""The one early-stopped training loop of ltrjax, online and offline.

A fit trains epoch by epoch, validates some epochs, keeps the best validated parameters and stops when the
validation score stops improving. ``Rule`` says when to validate and when to stop; ``decide`` is that rule's
arithmetic, written once. Two drivers train an epoch, validate it and ``decide``, epoch by epoch:

* ``early_stopped``: a ``lax.while_loop``, so the whole fit is one compiled program that can be ``vmap``ped /
  ``lax.map``ped over the members of a population (the online retraining, ``ltrjax.models.train.make_fit``,
  validated by a loss computed on the device);
* ``early_stopped_host``: a Python loop over a jitted epoch, for fits validated on the host
  (the offline estimators, ``ltrjax.offline.train.fit``: validation NDCG by the offline evaluator). Compiling
  such a fit as one program would put the validation scoring inside every estimator's program.
  Measured at cbfd8fc, that raised the CI suite from 485 s to 696 s.
  ``HostStopping`` is the same rule for loops that are not ours (LightGBM's boosting rounds,
  ``ltrjax.offline.gbdt``).

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
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

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
        return self.keep_last or (self.first <= 1 and self.every == 1)


@dataclasses.dataclass(frozen=True)
class Ops:
    """The array functions ``decide`` uses: ``jnp`` inside compiled loops, NumPy on the host."""

    where: Callable
    logical_not: Callable


JNP = Ops(jnp.where, jnp.logical_not)
NP = Ops(np.where, np.logical_not)


def decide(rule: Rule, e, on, score, best_score, bad, left, ops: Ops = JNP):
    """The rule after epoch count ``e`` (validated when ``on``, with ``score``): returns (better, best_score,
    bad, left). ``better``: keep this epoch (a higher score, or the first validated epoch); it resets the patience
    only when higher by more than ``rule.min_delta`` (progress). ``left`` counts the grace epochs still to run (-1:
    not stopping; 0: stop now)."""
    first = (e == rule.first) | rule.keep_last
    better = on & ((score > best_score) | first)
    progress = on & ((score > best_score + rule.min_delta) | first)  # = better when min_delta is 0
    best_score = ops.where(better, score, best_score)
    bad = ops.where(progress, 0, ops.where(on, bad + max(rule.every, 1), bad))
    fire = on & ops.logical_not(progress) & (bad >= rule.patience) & (e >= rule.min_epochs) & (not rule.keep_last)
    left = ops.where(left > 0, left - 1, ops.where(fire, rule.grace, left))
    return better, best_score, bad, left


@dataclasses.dataclass
class HostStopping:
    """``Rule`` on the host, epoch by epoch, for training loops that are not ``early_stopped_host``'s (the tree
    ensembles' boosting rounds): ``update(e, value) -> (keep this checkpoint, stop training)``."""

    rule: Rule
    best_value: float = -float("inf")
    best_epoch: int = 0
    bad: int = 0
    left: int = -1

    def validates(self, e: int) -> bool:
        return bool(self.rule.validated(e))

    def update(self, e: int, value: float, on: bool = True) -> tuple[bool, bool]:
        """After epoch count ``e``: ``value`` its validation score (``on=False``: not validated, only the grace
        epochs count down)."""
        better, best, self.bad, self.left = decide(self.rule, e, np.bool_(on), value, self.best_value, self.bad,
                                                   self.left, NP)
        self.bad, self.left = int(self.bad), int(self.left)
        if better:
            self.best_value, self.best_epoch = float(best), e
        return bool(better), self.left == 0


def split_key(key, epoch):
    """``next_key`` of a key chain: (next chain key, this epoch's key)."""
    del epoch
    return tuple(jax.random.split(key))


def fold_key(key, epoch):
    """``next_key`` of per-epoch keys ``fold_in(key, epoch)`` (the chain key does not move)."""
    return key, jax.random.fold_in(key, epoch)


def _select(flag, new, old):
    return jax.tree_util.tree_map(lambda a, b: jnp.where(flag, a, b), new, old)


def early_stopped(epoch: Callable, score: Callable, carry: Carry, key, rule: Rule, next_key: Callable = split_key,
                  keep: Callable = lambda carry: carry) -> tuple[Any, dict]:
    """Train ``carry`` epoch by epoch in one ``lax.while_loop`` until ``rule`` stops it.

    ``epoch(carry, key) -> (carry, loss)`` trains one epoch (the loss is not kept); ``score(carry) -> scalar``
    rates it (higher is better);
    ``keep(carry)`` is the part of the best carry to return (e.g. the parameters, not the optimizer state).
    Returns (``keep`` of the best validated carry, info): ``epochs`` trained, ``best_score`` and ``best_epoch``
    (0 = the initial carry).
    """
    max_epochs = int(rule.max_epochs)

    def rate(carry):
        return jnp.float32(0.0) if rule.keep_last else jnp.asarray(score(carry), jnp.float32)

    def consider(e, carry, best, best_score, best_epoch, bad, left):
        on = jnp.asarray(rule.validated(e))
        if rule.validates_every_epoch:  # no branch: every epoch is scored
            s = rate(carry)
        else:  # score only validated epochs (vmapped, both branches run)
            s = jax.lax.cond(on, rate, lambda c: jnp.float32(jnp.nan), carry)
        better, best_score, bad, left = decide(rule, e, on, s, best_score, bad, left)
        return _select(better, keep(carry), best), best_score, jnp.where(better, e, best_epoch), bad, left

    state = (keep(carry), jnp.float32(-jnp.inf), jnp.int32(0), jnp.int32(0), jnp.int32(-1))
    if rule.initial:
        state = consider(jnp.int32(0), carry, *state)

    def cond(loop):
        e, left = loop[0], loop[-1]
        return (e < max_epochs) & (left != 0)

    def body(loop):
        e, carry, key, *state = loop
        key, k_epoch = next_key(key, e)
        carry, _ = epoch(carry, k_epoch)
        return (e + 1, carry, key, *consider(e + 1, carry, *state))

    e, _, _, best, best_score, best_epoch, _, _ = jax.lax.while_loop(cond, body, (jnp.int32(0), carry, key, *state))
    return best, {"epochs": e, "best_score": best_score, "best_epoch": best_epoch}


def early_stopped_host(epoch: Callable, score: Callable, carry: Carry, key, rule: Rule,
                       next_key: Callable = fold_key, keep: Callable = lambda carry: carry, progress=None
                       ) -> tuple[Any, dict]:
    """``early_stopped`` driven from Python: ``epoch(carry, key) -> (carry, loss)`` is a jitted function and
    ``score(carry)`` a host function called exactly at the validated epochs (``HostStopping``'s rule).

    Returns (``keep`` of the best validated carry, info): ``epochs``, ``best_score`` (0.0 when ``keep_last``),
    ``best_epoch``, ``losses`` (every epoch's mean training loss) and ``scores`` (every validated epoch's score).
    ``progress`` (e.g. a tqdm bar) is updated once per epoch.
    """
    stopping = HostStopping(rule)
    best = keep(carry)
    losses, scores = [], []
    if rule.initial:
        s = 0.0 if rule.keep_last else float(score(carry))
        scores += [] if rule.keep_last else [s]
        stopping.update(0, s)
    e = 0
    while e < rule.max_epochs and stopping.left != 0:
        key, k_epoch = next_key(key, e)
        carry, loss = epoch(carry, k_epoch)
        e += 1
        losses.append(float(loss))
        if progress is not None:
            progress.update(1)
        if not stopping.validates(e):
            stopping.update(e, float("nan"), on=False)
            continue
        s = 0.0 if rule.keep_last else float(score(carry))
        if not rule.keep_last:
            scores.append(s)
        better, _ = stopping.update(e, s)
        if better:
            best = keep(carry)
    return best, {"epochs": e, "best_score": 0.0 if rule.keep_last else stopping.best_value,
                  "best_epoch": stopping.best_epoch, "losses": losses, "scores": scores}
