"""The one early-stopped loop (ltrjax/models/fit_loop.py), compiled and on the host, against a plain Python loop of
the same rule."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ltrjax.models import fit_loop


def reference(scores, rule: fit_loop.Rule):
    """(epochs, best epoch, validated epoch counts) of a fit whose score after e epochs is ``scores[e]``."""
    every = max(rule.every, 1)

    def validated(e):
        return (e >= rule.first and (e - rule.first) % every == 0) or e == rule.max_epochs or rule.keep_last

    best, best_s, bad, seen = 0, -np.inf, 0, []

    def consider(e, on):  # returns whether the validation was not better
        nonlocal best, best_s, bad
        if not on:
            return False
        seen.append(e)
        s = 0.0 if rule.keep_last else scores[e]
        first = e == rule.first or rule.keep_last
        progress = first or s > best_s + rule.min_delta
        if s > best_s or first:  # kept
            best, best_s = e, s
        if progress:
            bad = 0
            return False
        bad += every
        return True

    if rule.initial:
        consider(0, True)
    e, left = 0, -1
    while e < rule.max_epochs and left != 0:
        e += 1
        worse = consider(e, validated(e))
        if left > 0:
            left -= 1
        elif worse and bad >= rule.patience and e >= rule.min_epochs and not rule.keep_last:
            left = rule.grace
    return e, best, seen


def run(tables, rule):
    """(epochs, best epoch, best score) of the compiled loop for each row of ``tables``, all in one vmapped program
    (a batched while_loop: every row must stop at its own epoch)."""

    def one(table):
        def epoch(carry, key):
            return carry + 1, jnp.float32(0.0)

        best, info = fit_loop.early_stopped(epoch, lambda c: table[c], jnp.int32(0), jax.random.PRNGKey(0), rule)
        return best, info["epochs"], info["best_epoch"], info["best_score"]

    best, epochs, best_epoch, best_score = jax.jit(jax.vmap(one))(jnp.asarray(tables, jnp.float32))
    assert np.array_equal(np.asarray(best), np.asarray(best_epoch))
    return [(int(e), int(b), float(s)) for e, b, s in zip(epochs, best, best_score)]


def run_host(table, rule):
    """(epochs, best epoch, best score, validated epoch counts) of the host loop on one row. The carry after e
    epochs is the object ``carries[e]``: the best one must come back by reference, not copied."""
    carries, seen = [(0,)], []

    def epoch(carry, key):
        carries.append((carry[0] + 1,))
        return carries[-1], None

    def score(carry):
        seen.append(carry[0])
        return table[carry[0]]

    best, info = fit_loop.early_stopped(epoch, score, carries[0], None, rule, next_key=lambda key, e: (key, key),
                                        run=fit_loop.HOST)
    assert best is carries[info["best_epoch"]]
    assert all(type(info[k]) is t for k, t in [("epochs", int), ("best_epoch", int), ("best_score", float)])
    if rule.keep_last:  # never scored, every epoch validated
        assert seen == []
        seen = list(range(1, info["epochs"] + 1))
    return info["epochs"], info["best_epoch"], info["best_score"], seen


RULES = [fit_loop.Rule(max_epochs=m, patience=p, min_epochs=mi, first=f, every=ev, grace=g, initial=i)
         for m, p, mi, f, ev, g, i in [(0, 1, 0, 0, 1, 0, True), (1, 1, 0, 1, 1, 0, False), (12, 1, 0, 1, 1, 0, False),
                                       (12, 3, 0, 1, 1, 0, False), (12, 3, 7, 4, 3, 0, False),
                                       (12, 2, 7, 1, 3, 0, False), (12, 3, 0, 0, 1, 1, True),
                                       (12, 1, 0, 0, 1, 1, True), (12, 3, 7, 0, 3, 1, False),
                                       (12, 6, 0, 4, 3, 0, False), (12, 2, 12, 12, 1, 0, False),
                                       (12, 0, 3, 1, 1, 0, False), (12, 0, 0, 1, 2, 0, False)]]
RULES.append(fit_loop.Rule(max_epochs=9, patience=2, keep_last=True))
RULES += [fit_loop.Rule(max_epochs=12, patience=p, first=0, initial=True, grace=g, min_delta=0.15)  # online rules
          for p, g in [(1, 0), (2, 0), (3, 1)]]
RULES.append(fit_loop.Rule(max_epochs=12, patience=2, first=3, every=2, initial=True, grace=1, min_delta=0.15))


@pytest.mark.parametrize("rule", RULES, ids=range(len(RULES)))
def test_compiled_and_host_executions_match_the_python_loop(rule):
    """The one loop, compiled (vmapped) and on the host, on the same score sequences: the same epochs, best epoch
    and best score as the plain Python loop, and the host scores exactly the validated epochs."""
    rng = np.random.default_rng(0)
    tables = np.round(rng.normal(size=(40, rule.max_epochs + 1)), 1)  # ties happen: they must not count as better
    tables[-5:] = np.cumsum(np.abs(tables[-5:]) + 0.1, axis=1)  # always improving: runs to max_epochs
    tables = tables.astype(np.float32)
    expected = [reference(t, rule) for t in tables]
    host = [run_host(t.astype(np.float64), rule) for t in tables]
    compiled = run(tables, rule)
    assert [(e, b, seen) for e, b, _, seen in host] == expected
    assert compiled == [(e, b, s) for e, b, s, _ in host]
    if not rule.keep_last and rule.min_epochs < rule.max_epochs > 1:  # rows stop at different epochs
        assert len({e for e, _, _ in expected}) > 1


def test_online_form_trains_one_more_epoch_after_the_patience_runs_out():
    """The online fits (patience P: Rule(patience=P + 1, first=0, initial=True, grace=1)) validate the initial
    parameters, stop after P + 1 validations without improvement, then train and validate one more epoch."""
    p = 2
    rule = fit_loop.Rule(max_epochs=50, patience=p + 1, first=0, initial=True, grace=1)
    scores = np.array([0.0, 1.0] + [0.5] * 48 + [2.0], np.float32)
    ((epochs, best, best_score),) = run(scores[None], rule)
    assert (epochs, best, best_score) == (1 + (p + 1) + 1, 1, 1.0)
    assert run_host(scores.astype(np.float64), rule) == (epochs, best, best_score, list(range(epochs + 1)))


def test_patience_zero_stops_at_the_first_validation_that_is_not_better():
    rule = fit_loop.Rule(max_epochs=10, patience=0)
    scores = np.array([0, 1, 2, 3, 2.5, 4, 5, 6, 7, 8, 9], np.float32)
    assert run(scores[None], rule) == [(4, 3, 3.0)]
    assert run_host(scores.astype(np.float64), rule) == (4, 3, 3.0, [1, 2, 3, 4])


def test_min_delta_counts_only_improvements_above_it_as_progress():
    """An epoch better by no more than ``min_delta`` is kept but is no progress: with patience 1 and no grace (the
    online default ``FitConfig()``: patience 0, grace 0) the fit stops at the first such epoch and keeps it."""
    rule = fit_loop.Rule(max_epochs=10, patience=1, first=0, initial=True, grace=0, min_delta=0.1)
    scores = np.array([0, 1, 1.05, 3, 4, 5, 6, 7, 8, 9, 10], np.float32)
    assert run(scores[None], rule)[0][:2] == (2, 2)
    epochs, best, _, seen = run_host(scores.astype(np.float64), rule)
    assert (epochs, best, seen) == (2, 2, [0, 1, 2])
    worse = np.array([0, 1, 0.95, 3, 4, 5, 6, 7, 8, 9, 10], np.float32)  # a worse epoch is not kept
    assert run(worse[None], rule) == [(2, 1, 1.0)]
    strict = dataclasses.replace(rule, min_delta=0.0)  # the same gain is progress without a threshold
    assert run(scores[None], strict) == [(10, 10, 10.0)]


def test_small_gains_stop_the_fit_after_the_patience():
    """Gains below ``min_delta`` in a row are each kept, and stop the fit once the patience runs out."""
    rule = fit_loop.Rule(max_epochs=20, patience=3, first=0, initial=True, grace=0, min_delta=0.1)
    scores = np.array([0, 1] + [1 + 0.05 * k for k in range(1, 19)] + [9], np.float32)
    assert run(scores[None], rule)[0][:2] == (4, 4)
