"""The online retraining fits: minibatch epochs with optax and early stopping on a validation loss.

The whole fit — shuffling, the minibatch loop, validation, keeping the best parameters, the patience
counter — is one compiled program: the epochs run in ``ltrjax.models.fit_loop.early_stopped``, the loop the
offline estimators share (``ltrjax.offline.train``, driven from the host there); no Python DataLoader.
Example arrays are padded (weight 0) to a fixed size — ideally every document that could ever be
trained on — and each epoch runs only the minibatches that hold real examples, so a growing
training set neither recompiles nor pays for its padding.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import os
import threading
from collections.abc import Callable, Mapping
from typing import Annotated, Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ltrjax.constraints import NonNegative, NonNegativeInt, OneOf, PositiveInt
from ltrjax.models import fit_config, fit_loop, optim
from ltrjax.models.blocks import map_in_blocks
from ltrjax.models.fit_config import FitFields

PyTree = Any
LossFn = Callable[[PyTree, Mapping[str, jax.Array]], jax.Array]  # per-example losses [B]


def optimizer_names() -> tuple[str, ...]:
    """The optimizers an online fit accepts: every fit's (``ltrjax.models.fit_config``) and the full-batch ``lbfgs``."""
    return (*fit_config.optimizer_names(), "lbfgs")


@dataclasses.dataclass(frozen=True)
class FitConfig(FitFields, block="fit", learning_rate=0.01, batch_size=256, max_epochs=200, patience=0, min_epochs=0,
                clip_norm=None, weight_decay=0.0):
    """Settings of one online retraining fit; also the schema of an algorithm's ``fit`` block (``ltrjax.schema``).

    The shared fields are ``ltrjax.models.fit_config.FitFields``'; the defaults here are the online retrains'. Every
    retrain is warm-started from the current parameters, so the default stop rule forces no epochs: validate the
    warm start, then stop after the first epoch that does not lower the mean validation loss by more than
    ``min_delta`` (patience 0, grace 0), keeping the best parameters seen (``ltrjax.models.fit_loop``). EBRank's
    prior uses it; the CF learners, PRIOR and UCBRank keep their papers' rule in their ``fit`` blocks (their
    patience, ``grace: 1``, ``min_delta: 0``), which ``fit_overrides=papers`` gives every algorithm.
    """

    optimizer: Annotated[str, OneOf(optimizer_names)] = "adam"  # also lbfgs (full batch)
    min_examples: NonNegativeInt = 1
    # members fitted side by side (vmap) in blocks of exactly this width, a short last block padded to it; 1 = one
    # member per fit; None = by backend, 1 on a CPU and GPU_MEMBER_BLOCK on a GPU (``resolved``)
    member_batch: PositiveInt | None = None
    # this many blocks fit at once, each called from a host thread (a CPU program runs on the thread that calls
    # it); None = by backend, the usable cores on a CPU and 1 on a GPU (``resolved``)
    threads: PositiveInt | None = None
    max_examples: PositiveInt | None = None  # fit on a random subset of at most this many train (and val) examples
    lbfgs_memory: PositiveInt = 10  # optimizer=lbfgs: past updates kept by L-BFGS
    # The stop rule. The initial parameters and every epoch are validated; an epoch that lowers the mean validation
    # loss is kept (the best parameters are returned), but it counts as progress only when it lowers it by more than
    # min_delta (absolute, per example: the losses may drop constants of the data, e.g. EBRank's, so a relative
    # threshold would depend on them). After patience + 1 validations without progress the fit trains `grace` more
    # epochs and stops, once min_epochs ran. The default (patience 0, grace 0, min_delta 1e-4) stops a warm start
    # after its first epoch without progress; patience P, grace 1, min_delta 0 is the rule the fits had before
    # (at least P + 2 epochs; the papers' settings, conf/fit_overrides/papers.yaml).
    min_delta: NonNegative = 1e-4
    grace: NonNegativeInt = 0

    def resolved(self, backend: str | None = None) -> "FitConfig":
        """This config with ``member_batch=None`` and ``threads=None`` made concrete for ``backend`` (default JAX's):
        on a CPU one member after another (vmapped fits were slower, docs/performance.md) in one thread per usable
        core; on a GPU blocks of ``GPU_MEMBER_BLOCK`` in one thread (its programs run asynchronously). The runner
        resolves before it records an algorithm's settings."""
        gpu = (backend or jax.default_backend()) == "gpu"
        return dataclasses.replace(
            self, member_batch=self.member_batch or (GPU_MEMBER_BLOCK if gpu else 1),
            threads=self.threads or (1 if gpu else usable_cores()))


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the platform says, else ``os.cpu_count``)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


GPU_MEMBER_BLOCK = 8  # fit.member_batch=None on a GPU: members fitted 8 side by side (docs/results/gpu_h100/)


def online_rule(cfg: FitConfig) -> fit_loop.Rule:
    """The stop rule of an online fit: validate the initial parameters and every epoch; ``patience + 1`` validations
    without progress (a fall of the loss by more than ``min_delta``) stop the fit after ``grace`` more epochs."""
    return fit_loop.Rule(max_epochs=int(cfg.max_epochs), patience=int(cfg.patience) + 1, first=0, initial=True,
                         grace=int(cfg.grace), min_epochs=int(cfg.min_epochs), min_delta=float(cfg.min_delta))


def pad_examples(arrays: Mapping[str, np.ndarray], multiple: int, size: int | None = None) -> dict[str, np.ndarray]:
    """Pad every array along axis 0 (real examples first) and add ``weight`` (0 = padding).

    ``size`` fixes the padded length (e.g. every document of the split, so a growing training set
    never recompiles); otherwise the next power of two. Either way a multiple of ``multiple``.
    """
    n = len(next(iter(arrays.values())))
    if size is None:
        size = max(multiple, 1 << max(0, int(np.ceil(np.log2(max(n, 1))))))
    return {k: v[0] for k, v in stack_padded([arrays], multiple, size).items()}


def stack_padded(sets: list[Mapping[str, np.ndarray]], multiple: int, size: int) -> dict[str, np.ndarray]:
    """Every member's examples ``d`` padded to ``size`` (rounded up to a multiple of ``multiple``; ``weight`` added, 0 =
    padding) and stacked on a new leading axis, written straight into the stacked arrays (no padded copy per member on
    the way: at MSLR scale 33 MB per member and split). ``pad_examples`` is its one-member case."""
    longest = max(_length(d) for d in sets)
    if size < longest:
        raise ValueError(f"cannot pad {longest} examples to {size}")
    size = max(multiple, -(-size // multiple) * multiple)
    out = {k: np.zeros((len(sets), size) + sets[0][k].shape[1:], np.result_type(*(d[k] for d in sets)))
           for k in sets[0] if k != "weight"}
    out["weight"] = np.zeros((len(sets), size), np.float32)
    for i, d in enumerate(sets):
        n = _length(d)
        for k, v in d.items():
            if k != "weight":
                out[k][i, :n] = v
        out["weight"][i, :n] = d["weight"] if "weight" in d else 1.0
    return out


def padded_size(n: int, capacity: int | None, smallest: int = 4096) -> int:
    """Pad ``n`` examples to the next power of two (at least ``smallest``), at most ``capacity``.

    Every epoch shuffles and validates the whole padded array, so padding to the split's capacity
    (millions of documents on MSLR-30K) would make each epoch cost the capacity, not the data; powers
    of two keep the shapes — and compilations — to a handful per run. (Padding every capped fit to
    ``min(capacity, max_examples)``, one shape per run, was measured and dropped: docs/performance.md.)
    """
    size = max(smallest, 1 << max(0, int(np.ceil(np.log2(max(n, 1))))))
    return max(n, min(size, capacity)) if capacity is not None else size


def with_features(batch: Mapping[str, jax.Array], table) -> Mapping[str, jax.Array]:
    """``batch`` with ``features``: the rows of its document ids ``doc`` in ``table`` (``ltrjax.data.layout.
    DocumentTable``), followed by its ``extra`` columns when it has them (e.g. x_b); a batch without ``doc`` as it
    is. Retrain examples carry ids, so a fit gathers only the rows of each minibatch and validation."""
    if "doc" not in batch:
        return batch
    features = table.rows(batch["doc"])
    if "extra" in batch:
        features = jnp.concatenate([features, batch["extra"].astype(features.dtype)], axis=-1)
    return {**{k: v for k, v in batch.items() if k not in ("doc", "extra")}, "features": features}


def weighted_mean(losses: jax.Array, weight: jax.Array) -> jax.Array:
    return jnp.sum(losses * weight) / jnp.maximum(jnp.sum(weight), 1e-12)


def shuffled_order(key: jax.Array, real: jax.Array) -> jax.Array:
    """The ``real`` indices in a random order, then the others in index order: one epoch's order of the examples.

    Two rounds, each one sort of an int32 array: a random key in the high bits, the current position of a real
    example in the low ``b`` bits (the second round breaks the first's ties at random), so the sorted array's low
    bits are the new order. XLA:CPU sorts a lone integer array about 6x faster than ``argsort`` (a key-value
    sort), and the per-epoch argsort was a third to a half of an EBRank fit at MSLR-30K size (benchmarks/retrain.py).
    ``b`` comes from the highest position that holds a real example, not from ``len(real)``, and the random keys
    of an index do not depend on the array's length, so padding an example set further (a member fitted inside a
    population is padded to its largest member's size) leaves its order unchanged: populations stay equal to
    their members run one by one.
    """
    n = real.shape[0]
    if n > 1 << 30:
        raise ValueError(f"cannot shuffle {n} examples in int32 keys (at most 2^30)")
    position = jnp.arange(n, dtype=jnp.int32)
    n_first = jnp.sum(real)
    order, first = position, real
    for round_key in jax.random.split(key, 2):
        last = jnp.max(jnp.where(first, position, 0))
        bits = jnp.maximum(32 - jax.lax.clz(last), 1)  # bit length of the highest real position
        high = 31 - bits  # random bits above the position
        rand = (jax.random.bits(round_key, (n,), jnp.uint32) >> (32 - high).astype(jnp.uint32)).astype(jnp.int32)
        packed = (jnp.minimum(rand, (1 << high) - 2) << bits) | position
        ranked = jnp.sort(jnp.where(first, packed, jnp.iinfo(jnp.int32).max))  # the others sort last
        others = jnp.nonzero(~first, size=n, fill_value=0)[0].astype(jnp.int32)  # their positions, in order
        take = jnp.where(position < n_first, ranked & ((1 << bits) - 1), others[jnp.maximum(position - n_first, 0)])
        order, first = order[take], position < n_first
    return order


def make_fit(loss_fn: LossFn, cfg: FitConfig, shuffle: Callable = shuffled_order) -> Callable:
    """Return ``fit(params, train, val, key, table=None) -> (best_params, info)``, a pure function (jit or vmap it).

    ``train``/``val`` are dicts of equally long arrays including ``weight`` (0 = padding); examples with document
    ids ``doc`` get their ``features`` from ``table`` where the loss reads them (``with_features``). Under
    ``jax.vmap`` (one fit per member of a population, ``fit_members``) the data-dependent loop bounds —
    the number of real minibatches and the early-stopping ``while_loop`` — become per-member masks:
    a member that has stopped keeps its parameters while the others train on.

    ``optimizer="lbfgs"`` fits full-batch with L-BFGS and a zoom line search (``optax.lbfgs``): an
    "epoch" is then one L-BFGS step on the whole training set (``batch_size`` and ``learning_rate``
    are unused); early stopping is the same. ``shuffle(key, real)`` orders each epoch's examples
    (``shuffled_order``; benchmarks/retrain.py passes the former argsort to compare).
    """
    tx = optim.optimizer_of(cfg)

    full_batch = cfg.optimizer == "lbfgs"
    rule = online_rule(cfg)

    def fit(params, train, val, key, table=None):
        def batch_loss(params, batch):
            return weighted_mean(loss_fn(params, with_features(batch, table)), batch["weight"])

        grad_fn = jax.value_and_grad(batch_loss)
        n = train["weight"].shape[0]
        batch = min(cfg.batch_size, n)
        real = train["weight"] > 0
        n_real = jnp.sum(real)
        n_batches = (n_real + batch - 1) // batch  # dynamic: padding beyond the last real batch is skipped

        def lbfgs_step(params, opt_state, key):
            value_fn = functools.partial(batch_loss, batch=train)
            value, grads = optax.value_and_grad_from_state(value_fn)(params, state=opt_state)
            updates, opt_state = tx.update(grads, opt_state, params, value=value, grad=grads, value_fn=value_fn)
            return optax.apply_updates(params, updates), opt_state

        def epoch(params, opt_state, key):
            perm = shuffle(key, real)  # real examples first, in a fresh random order; padding after them
            perm = jnp.concatenate([perm, perm[:batch]])  # room for the last batch's slice

            def step(i, carry):
                params, opt_state = carry
                idx = jax.lax.dynamic_slice(perm, (i * batch,), (batch,))
                mb = jax.tree_util.tree_map(lambda a: a[idx], train)
                mb["weight"] = jnp.where(i * batch + jnp.arange(batch) < n_real, mb["weight"], 0.0)
                _, grads = grad_fn(params, mb)
                updates, opt_state = tx.update(grads, opt_state, params)
                return optax.apply_updates(params, updates), opt_state

            return jax.lax.fori_loop(0, n_batches, step, (params, opt_state))

        def run_epoch(carry, key):
            return (lbfgs_step if full_batch else epoch)(*carry, key), None

        def score(carry):
            return -batch_loss(carry[0], val)

        best_params, info = fit_loop.early_stopped(run_epoch, score, (params, tx.init(params)), key, rule,
                                                   keep=lambda carry: carry[0])
        # passes over the training examples' gradients: one per epoch (minibatch), one per L-BFGS step's first
        # evaluation (its line search's further evaluations are not counted)
        return best_params, {"epochs": info["epochs"], "fit_passes": info["epochs"], "val_loss": -info["best_score"],
                             "train_loss": batch_loss(best_params, train)}

    return fit


class MemberFit:
    """``make_fit``'s fit over the members of a population, one compiled program per example shape.

    Members are fitted in blocks of exactly ``block`` (``cfg.resolved().member_batch``, ``ltrjax.models.blocks``):
    a population whose size is not a multiple of the block — a single member too — is padded with members without
    examples, whose fits are dropped (``fit_members``). A vmapped fit masks a member that has stopped while the
    others of its block train on, so each member still stops at its own epoch; and since every block has the same
    width, a member is computed by the same batched program wherever it sits, alone or in any population:
    bit-identical (tests/test_train.py; a batch of another width, or none, rounds differently).
    ``block=1`` (a CPU's default) fits one member after another.

    The program takes one block: a population's fits call it block after block, so it is the same program at every
    population size (one compilation serves a population and its members run alone). ``threads``
    (``cfg.resolved().threads``; a CPU's default: one per usable core) blocks run at once, each in a host thread: a
    CPU program runs on the thread that calls it, so one member after another would keep one core busy.
    """

    def __init__(self, loss_fn: LossFn, cfg: FitConfig, shuffle: Callable = shuffled_order):
        self.cfg = cfg = cfg.resolved()
        self.fit = make_fit(loss_fn, cfg, shuffle)
        self.block = block = int(cfg.member_batch)
        self.threads = int(cfg.threads)
        self.shapes_run: set[tuple] = set()  # (train rows, val rows) of the blocks fitted so far
        self.compiling = threading.Lock()  # held while a block of a new shape runs (and compiles) alone

        def member_fits(params, train, val, keys, table=None):  # named: compile logs and CompileMeter.programs show it
            return map_in_blocks(lambda member, table: self.fit(*member, table), (params, train, val, keys), block,
                                 table)

        self.batched = jax.jit(member_fits)


def _length(d: Mapping[str, np.ndarray]) -> int:
    return len(next(iter(d.values())))


def subset_indices(n: int, limit: int | None, seed) -> np.ndarray | None:
    """Sorted indices of at most ``limit`` of ``n`` examples, drawn uniformly without replacement; None
    (keep all) when there are no more than ``limit``."""
    if limit is None or n <= limit:
        return None
    return np.sort(np.random.default_rng(seed).choice(n, int(limit), replace=False))


def subsample(arrays: Mapping[str, np.ndarray], limit: int | None, seed) -> Mapping[str, np.ndarray]:
    """At most ``limit`` examples, drawn uniformly without replacement (kept in their order); all when fewer."""
    keep = subset_indices(_length(arrays), limit, seed)
    return arrays if keep is None else {k: v[keep] for k, v in arrays.items()}


def key_seed(key: jax.Array) -> list[int]:
    """A NumPy seed (list of uint32 words) from a JAX key, typed or raw."""
    data = jax.random.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else key
    return np.asarray(data, np.uint32).ravel().tolist()


def fit_members(member_fit: MemberFit, params, trains: list[Mapping[str, np.ndarray]],
                vals: list[Mapping[str, np.ndarray]], keys: jax.Array, name: str,
                capacity: tuple[int | None, int | None] = (None, None), table=None) -> tuple[Any, list[dict]]:
    """Retrain every member of a population, early-stopped, block after block; returns (params, infos).

    ``params`` and ``keys`` carry a leading member axis; ``trains[i]``/``vals[i]`` are member i's examples (host
    arrays; document ids ``doc`` are rows of ``table``, a ``DocumentTable``, gathered inside the fit). The blocks
    (``MemberFit``) run ``member_fit.threads`` at a time, each in a host thread. Each member early-stops on its
    validation loss, or on its training loss while it has no validation examples yet; a block's members are padded
    to one power-of-two size capped at ``capacity`` (the most examples a split can hold), so a run compiles a handful
    of shapes (a fit does not depend on its padding). A member with fewer than ``min_examples`` training examples is
    skipped: its parameters are kept. With ``max_examples`` set, each member fits on a random subset of at most that
    many training and validation examples (seeded by its key). Non-finite parameters are refused.
    """
    cfg, block = member_fit.cfg, member_fit.block
    host_params = jax.device_get(params)  # small; each block's share is taken on the host
    typed = jnp.issubdtype(keys.dtype, jax.dtypes.prng_key)
    key_data = np.asarray(jax.random.key_data(keys) if typed else keys)
    n = len(key_data)
    if not len(trains) == len(vals) == n:
        raise ValueError(f"{name}: {len(trains)} training and {len(vals)} validation sets for {n} members")
    impl = jax.random.key_impl(keys) if typed else None
    n_train, n_val, pending, outs = [], [], [], []
    pool = concurrent.futures.ThreadPoolExecutor(member_fit.threads) if member_fit.threads > 1 and n > block else None
    try:
        for i, (train, val) in enumerate(zip(trains, vals)):
            n_train.append(_length(train))
            n_val.append(_length(val))
            if cfg.max_examples is not None:  # the same subset for a member whatever the population
                seed = key_seed(key_data[i])
                train = subsample(train, cfg.max_examples, seed + [0])
                val = subsample(val, cfg.max_examples, seed + [1])
            pending.append((train, val if n_val[-1] else train))
            if len(pending) == block or i == n - 1:
                # with threads, each waits for its block (so that the threads' programs run side by side); else
                # the blocks are queued and fetched at once (a GPU runs them while the next ones are stacked)
                job = functools.partial(_fit_block, member_fit, host_params, key_data, impl, i + 1 - len(pending),
                                        pending, capacity, table, fetch=pool is not None)
                outs.append(pool.submit(job) if pool else job())
                pending = []
        blocks = [out.result() if pool else out for out in outs]
        fetched = jax.device_get([out for out, _ in blocks])
        new, info = jax.tree_util.tree_map(lambda *a: np.concatenate(a),
                                           *[jax.tree_util.tree_map(lambda a: a[:real], out)
                                             for out, (_, real) in zip(fetched, blocks)])
    finally:
        if pool:
            pool.shutdown(cancel_futures=True)
    trained = np.asarray(n_train) >= cfg.min_examples
    # on the host: the parameters are small, and each eager jnp op would be a program to compile
    new = jax.tree_util.tree_map(lambda a, b: np.where(trained.reshape((-1,) + (1,) * (a.ndim - 1)), a, b), new,
                                 host_params)
    finite = np.ones(n, bool)
    for a in jax.tree_util.tree_leaves(new):
        finite &= np.all(np.isfinite(a.reshape(a.shape[0], -1)), axis=1)
    if not finite.all():
        raise FloatingPointError(f"{name}: parameters of members {np.flatnonzero(~finite).tolist()} became "
                                 "non-finite after training")
    infos = []
    for i in range(n):
        if not trained[i]:
            infos.append({"skipped": True, "n_train": n_train[i], "n_val": n_val[i]})
        else:
            infos.append({**{k: float(v[i]) for k, v in info.items()}, "n_train": n_train[i], "n_val": n_val[i]})
    return new, infos


def _fit_block(member_fit: MemberFit, params, key_data: np.ndarray, key_impl, start: int, sets: list,
               capacity: tuple[int | None, int | None], table, fetch: bool):
    """``member_fit.batched`` on the members ``start, start + 1, ...`` with examples ``sets``, padded to a block with
    members without examples (their fits end at once); ((params, info) of the whole block, on the host if ``fetch``,
    the number of real members first in it). The first block of a new shape runs alone (it compiles the program;
    the other threads wait for it)."""
    cfg, block, real = member_fit.cfg, member_fit.block, len(sets)
    sets = sets + [tuple({k: v[:0] for k, v in d.items()} for d in sets[0])] * (block - real)
    take = start + np.r_[np.arange(real), np.zeros(block - real, int)]
    train_size = max(padded_size(_length(t), capacity[0]) for t, _ in sets)
    val_size = max(padded_size(_length(v), capacity[1]) for _, v in sets)

    def run():
        # ids and counters, a few numbers per example (the features are gathered in the fit), handed to the program
        # as host arrays (cheaper per call than device_put)
        train = stack_padded([t for t, _ in sets], cfg.batch_size, train_size)
        val = stack_padded([v for _, v in sets], cfg.batch_size, val_size)
        keys = jax.random.wrap_key_data(key_data[take], impl=key_impl) if key_impl else key_data[take]
        out = member_fit.batched(jax.tree_util.tree_map(lambda a: a[take], params), train, val, keys, table)
        return (jax.device_get(out) if fetch else out), real

    shape = (train_size, val_size)
    if shape not in member_fit.shapes_run:
        with member_fit.compiling:
            if shape not in member_fit.shapes_run:
                out = run()
                member_fit.shapes_run.add(shape)
                return out
    return run()
