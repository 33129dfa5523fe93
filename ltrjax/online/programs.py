"""A policy's compiled population programs (``compiled``: segment, class segment, evaluation, refresh), built once
per policy object and kept on it; every phase that runs one on the device (``segment``, ``evaluate``, ``trial``)
takes it from here."""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax

from ltrjax.models.blocks import map_in_blocks
from ltrjax.online import step as step_lib
from ltrjax.online.policies.base import Policy


def per_bucket(fn: Callable, protocol, params, *per_bucket_args):
    """``fn(protocol, params, *args)`` for every bucket, ``per_bucket_args`` tuples over the buckets: one program
    evaluates them all (a program per bucket shape would be compiled, and traced, once each)."""
    return tuple(fn(protocol, params, *args) for args in zip(*per_bucket_args))


def member_by_member(fn: Callable, in_axes: tuple) -> Callable:
    """``fn`` over the leading member axis of the arguments whose ``in_axes`` is 0 (the others shared), one member
    after another (``map_in_blocks`` with blocks of one, a ``lax.map``) where ``jax.vmap`` would hold every member's transients at once: an evaluation
    puts each member's counters in dataset order and sorts its scores, about 0.08 GB per EBRank member at
    MSLR-30K shape (vmapped, the peak of a 14-member chunk of a short protocol: docs/performance.md#memory)."""
    mapped = tuple(i for i, axis in enumerate(in_axes) if axis == 0)

    def over_members(*args):
        def one(member_args):
            full = list(args)
            for i, value in zip(mapped, member_args):
                full[i] = value
            return fn(*full)

        return map_in_blocks(one, tuple(args[i] for i in mapped), 1)

    return over_members


def compiled(policy: Policy) -> dict[str, Callable]:
    """The policy's population programs (segment, evaluation, refresh), built once per policy object and
    kept on it, so they are freed with the policy. Shapes (members, buckets, lanes) are traced arguments:
    one program serves every simulator and population size of the same shapes."""
    programs = policy.__dict__.get("_ltrjax_programs")
    if programs is None:
        segment = functools.partial(step_lib.population_segment, policy)
        evaluate = functools.partial(step_lib.evaluate_bucket, policy)
        evaluate_rows = functools.partial(step_lib.evaluate_rows, policy)
        programs = {
            # states are donated: the scan updates their buffers in place instead of copying them
            "segment": jax.jit(segment, donate_argnums=3, static_argnames=("widths",)),
            "class_segment": jax.jit(functools.partial(step_lib.population_class_segment, policy), donate_argnums=3,
                                     static_argnames=("widths",)),
            # every bucket in one program (tuples over the buckets: states, buckets, gains, idcg, [rows,] aux)
            "evaluate": jax.jit(functools.partial(
                per_bucket, member_by_member(evaluate, in_axes=(None, 0, 0, None, None, None, 0)))),
            "evaluate_rows": jax.jit(functools.partial(
                per_bucket, member_by_member(evaluate_rows, in_axes=(None, 0, 0, None, None, None, None, 0)))),
            "refresh": jax.jit(jax.vmap(policy.refresh)),
        }
        policy.__dict__["_ltrjax_programs"] = programs
    return programs
