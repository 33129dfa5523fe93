"""The interface every online policy implements (SPEC §2).

The simulator never names a policy. Per segment it asks the policy to ``refresh`` any
per-segment randomness and to ``prepare`` per-document values from its frozen parameters and the
behaviour counters as of the segment start (model scores, priors, refreshed behaviour features),
then, inside the per-session scan, for ``session_scores`` of one query from those values and the
query's live counters, and for a ``session_record`` of what a learner needs from that session
(e.g. a PDGD gradient or a multileaving winner). At retrain points ``update`` retrains from the
counters and the log of every session since the previous retrain. Offline evaluation asks for
``test_scores`` with (warm) or without (cold) behaviour information.

Segments are the behaviour-feature refresh points (``sim.refreshes``; UCBRank: 100); models
retrain at every ``refreshes / n_updates``-th of them (``sim.n_updates``; both papers: 20).

Arrays handed to ``session_scores`` are one query's rows in entry order; everything else is
``[Qb, Db]`` in dataset order. A policy is an immutable Python object holding its static
hyper-parameters; its learnable state is the ``params`` pytree it returns from ``init``; its traced
hyper-parameters (exploration strengths, learning rates: what a validation grid sweeps) are a typed
pytree ``Policy.Hyper`` (a ``flax.struct`` dataclass, the way gymnax passes ``EnvParams``), which a
population of members stacks along a leading axis.

Retraining is population-wise: ``update_population`` gets every member's parameters and log with a
leading member axis, and its counters as ``MemberViews`` (``member(counters, i)`` reads member i's), and
may train them all in one compiled fit; the default calls ``update`` member by member, so a simple policy
only writes ``update``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from flax import struct

from ltrjax.constraints import ConfigError, check_value, field_checks

from ltrjax.data.layout import Bucket, PaddedDataset
from ltrjax.online.state import STAT_NAMES, DocCounters

Params = Any
Aux = Any


class QueryView(NamedTuple):
    """What a policy may read about one query inside the session scan."""

    aux: Aux  # the policy's own per-document values from ``prepare`` (entry order) [Db]
    hyper: Any  # the policy's typed hyper-parameters (``Policy.Hyper``), e.g. exploration strength
    params: Params  # the policy's parameters, frozen for the segment
    counters: DocCounters  # live counters [Db]
    n_entered: jax.Array  # i32 []
    issue_count: jax.Array  # i32 [] including the current session
    # the query's document features [Db, F] (entry order), gathered in the step from the one dataset-order copy
    # that every member shares; read these instead of returning features from ``prepare``, which would copy
    # them per member (XLA drops the gather when a policy does not read it)
    features: jax.Array | None = None


class SessionLog(NamedTuple):
    """What happened in the sessions of a segment (global time order), for learners that replay them."""

    query: Any  # i32 [n]  global query index
    shown: Any  # i32 [n, K]  document slot (dataset order) per position, -1 for empty slots
    clicks: Any  # bool [n, K]
    session: Any  # i32 [n] global session index
    record: Any = None  # the policy's ``session_record`` pytree, leaves with leading axis n (None: none)


@struct.dataclass
class NoHyper:
    """The hyper-parameters of a policy that has none."""


def member(tree, i: int):
    """Member ``i`` of a pytree with a leading member axis, or of ``MemberViews`` (computed when read)."""
    if isinstance(tree, MemberViews):
        return tree.read(i)
    return jax.tree_util.tree_map(lambda a: a[i], tree)


class MemberViews:
    """A population's per-member values read one member at a time, through ``member(views, i)``: a retrain's
    dataset-order counters and entered masks, computed on the device for member i and copied to the host when
    read. A retrain then holds one member's copy at a time, not the population's (7 EBRank members at MSLR-30K
    shape: 0.55 GB on the device and again on the host). A retrain's counters may also carry ``documents(i,
    min_impressions)``: member i's eligible (training, validation) documents filtered on the device
    (``ltrjax.online.retrain_documents``; ``training_data.member_splits`` then reads those instead)."""

    def __init__(self, read: Callable[[int], Any], n_members: int, documents: Callable | None = None):
        self.read = read
        self.n_members = n_members
        self.documents = documents

    def __len__(self) -> int:
        return self.n_members


HOST_STACK_SIZE = 1 << 16  # leaves of at most this many numbers are stacked on the host (``stack_members``)


def stack_members(trees):
    """Stack a sequence of equally shaped pytrees along a new leading member axis. Host leaves and small device
    leaves (parameters, hyper-parameters: at most ``HOST_STACK_SIZE`` numbers) are stacked with NumPy: an eager
    ``jnp.stack`` compiles one program per leaf shape, which costs more than copying a few numbers to the host."""
    return jax.tree_util.tree_map(_stack, *trees)


def _stack(*xs):
    if all(isinstance(x, (np.ndarray, np.generic)) or (isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer)
                                                      and x.size <= HOST_STACK_SIZE)
           for x in xs):
        return np.stack([np.asarray(x) for x in xs])
    return jnp.stack([jnp.asarray(x) for x in xs])


def check_hyper(hyper_class, values: dict, name: str = "policy") -> None:
    """Refuse (``ConfigError``) names that ``hyper_class`` (a ``Policy.Hyper``) does not have and values outside its
    fields' constraints (``Annotated[jax.Array, NonNegative]``)."""
    checks = field_checks(hyper_class)
    for key, value in values.items():
        if key not in checks:
            raise ConfigError(key, value, f"{name} has no tunable hyper-parameter {key!r}; it has "
                              f"{', '.join(sorted(checks)) or 'none'}")
        check_value(key, value, checks[key])


class Policy:
    """Base class: a deterministic scorer with no learning. Subclasses override what they need."""

    name: str = "policy"
    trains: bool = False
    Hyper: type = NoHyper  # the typed traced hyper-parameters
    # a document's session score and record depend on its own slot only (no random draw over the whole row):
    # the simulator may then skip the entry slots no document can reach in a run (step.scan_segment)
    narrow_rows: bool = False
    # ``test_scores`` is ``scores_from_prepared(prepare(params, bucket), counters, warm)``: evaluation after a segment
    # reuses the segment's ``prepare`` output (same frozen parameters) instead of computing it again
    test_from_prepare: bool = False
    # ``prepare`` returns per-document values ``[Nb+1, ...]`` (one per row of ``bucket.doc_features``, the zero row
    # last) instead of ``[Qb, Db, ...]``: a population computes them once per document and the simulator lays them
    # out in entry order in one gather (``state.documents_in_entry_order``); ``bucket.on_slots`` gives the padded
    # dataset-order layout (``test_scores``)
    prepared_per_document: bool = False
    # the counters (``STAT_NAMES``) that ``update``/``update_population`` read: a retrain brings only these to the
    # host in dataset order (the others are None), ``impressions`` always (the example filter)
    retrain_counters: tuple[str, ...] = STAT_NAMES
    # every counter the policy reads anywhere (scores, records, ``prepare``, evaluation, retrains): the simulator's
    # state keeps only these and ``clicks`` (``state.kept_counters``), the others are None, so the session step
    # neither scatters nor carries them. A counter read but not listed is None where it is read: an error, never a
    # silently different result
    counters_read: tuple[str, ...] = STAT_NAMES
    # ``update``/``update_population`` read the sessions' logs (``SessionLog``: shown lists, clicks, records). A
    # trainer that retrains from the counters alone says False: the simulator then brings no session's shown list
    # or clicks to the host and passes None logs (unless the run keeps the click logs)
    reads_logs: bool = True

    def init(self, key: jax.Array, data: PaddedDataset) -> Params:
        return ()

    def default_hyper(self) -> Any:
        """The hyper-parameters of the policy's configuration (``Hyper`` with the configured values)."""
        return self.Hyper()

    def make_hyper(self, **values) -> Any:
        """``default_hyper()`` with some fields replaced (validation grids); unknown names are refused."""
        check_hyper(self.Hyper, values, self.name)
        return self.default_hyper().replace(**{k: jnp.float32(v) for k, v in values.items()})

    def refresh(self, key: jax.Array, params: Params) -> Params:
        """Called before every segment (a behaviour refresh), e.g. to redraw MC-dropout masks."""
        return params

    def prepare(self, params: Params, bucket: Bucket, behaviour: DocCounters) -> Aux:
        """Per-document values ``[Qb, Db, ...]`` (dataset order; ``[Nb+1, ...]`` with ``prepared_per_document``),
        computed once per segment.

        ``behaviour`` holds the bucket's counters ``[Qb, Db]`` (dataset order) as of the segment start:
        the refreshed behaviour features of a policy that freezes them between refreshes. XLA drops
        it when a policy does not read it.
        """
        return jnp.zeros(bucket.labels.shape, jnp.float32)

    def prepare_population(self, params: Params, bucket: Bucket, behaviour: DocCounters) -> Aux:
        """``prepare`` of every member (``params`` and ``behaviour`` with a leading member axis; outputs too).
        The default runs ``prepare`` member by member (``lax.map``), so each member rounds as in a population of
        one; a policy may share work across members if each member's output stays the same (EBRank's blocks)."""
        return jax.lax.map(lambda m: self.prepare(m[0], bucket, m[1]), (params, behaviour))

    def scores_from_prepared(self, aux: Aux, counters: DocCounters, warm: bool) -> jax.Array:
        """Test scores from ``prepare``'s output and counters in one layout (policies with ``test_from_prepare``)."""
        raise NotImplementedError(f"{self.name} does not score from its prepare output")

    def doc_scores(self, aux: Aux, counters: DocCounters, hyper: Any) -> jax.Array:
        """Logging scores from each document's own values (any shape); the default session score."""
        return aux

    def session_scores(self, view: QueryView, key: jax.Array) -> jax.Array:
        """Logging scores ``[Db]`` of one query for one session (higher is shown first)."""
        return self.doc_scores(view.aux, view.counters, view.hyper)

    def session_record(self, view: QueryView, key: jax.Array, scores: jax.Array, shown: jax.Array,
                       slot_valid: jax.Array, clicked: jax.Array) -> Any:
        """What an online learner keeps of one session, computed inside the scan (None: nothing).

        ``key`` is the key ``session_scores`` got, ``scores`` its output ``[Db]`` (entry order),
        ``shown`` the entry-order slots ``[K]`` in display order, ``slot_valid``/``clicked`` bool
        ``[K]``. The leaves reach ``update`` stacked in ``SessionLog.record`` (sessions in time order).
        """
        return None

    def test_scores(self, params: Params, bucket: Bucket, counters: DocCounters, warm: bool) -> jax.Array:
        """Deterministic scores ``[Qb, Db]`` for offline evaluation, with or without behaviour."""
        return self.prepare(params, bucket, counters)

    def update(self, key: jax.Array, params: Params, hyper: Any, data: PaddedDataset,
               counters: tuple[DocCounters, ...], entered: tuple[jax.Array, ...],
               log: SessionLog | None) -> tuple[Params, dict]:
        """Retrain one member at a retrain point from dataset-order counters of every bucket and the log of
        all sessions since the previous retrain; returns (params, info)."""
        return params, {}

    def update_population(self, keys: jax.Array, params: Params, hyper: Any, data: PaddedDataset,
                          counters: tuple[DocCounters, ...], entered: tuple[jax.Array, ...],
                          logs: list[SessionLog | None]) -> tuple[Params, list[dict]]:
        """Retrain every member: ``keys``, ``params`` and ``hyper`` carry a leading member axis, ``counters``
        and ``entered`` too or are ``MemberViews`` (the simulator's: read member i's host arrays with
        ``member(counters, i)``), ``logs`` is one log per member. The default retrains member by member with
        ``update``; trainers override it with one compiled fit (``ltrjax.models.train.fit_members``)."""
        out = [self.update(keys[i], member(params, i), member(hyper, i), data, member(counters, i),
                           member(entered, i), logs[i]) for i in range(len(logs))]
        return stack_members([o[0] for o in out]), [o[1] for o in out]


def update_one(policy: Policy, key, params, hyper, data, counters, entered, log) -> tuple[Params, dict]:
    """Retrain a single member through ``update_population`` (a population of one)."""
    one = lambda tree: jax.tree_util.tree_map(lambda a: jnp.asarray(a)[None], tree)  # noqa: E731
    new, infos = policy.update_population(jnp.asarray(key)[None], one(params), one(hyper), data, one(counters),
                                          one(entered), [log])
    return member(new, 0), infos[0]
