"""A simulator's fixed values (``SimContext``), made once by ``make_context`` from the data, the click model and the
settings: what every phase (``protocol``, ``plan``, ``memory``, ``segment``, ``evaluate``, ``retrain``, ``trial``)
reads and none changes. Its ``caches`` hold values computed when first needed (Cum-NDCG weights, the policies'
``prepare`` sizes, the layout's document cells); they change no result."""

from __future__ import annotations

import dataclasses
import functools
import weakref

import jax
import numpy as np

from ltrjax import clicks as click_lib
from ltrjax import metrics
from ltrjax.data.layout import PaddedDataset
from ltrjax.data.queryset import TEST
from ltrjax.online import memory
from ltrjax.online import step as step_lib
from ltrjax.online.config import SimConfig
from ltrjax.online.policies.base import Policy
from ltrjax.online.retrain_documents import DocumentCells


@functools.partial(jax.jit, static_argnames=("y_max", "mapping", "eps_min"))
def bucket_gains(labels: tuple, masks: tuple, discount: jax.Array, y_max: int, mapping: str, eps_min: float
                 ) -> tuple[tuple, tuple]:
    """Every bucket's gains g(R) (0 where padded) and ideal DCGs, in one program: computed eagerly, each
    operation of each bucket shape was a program of its own to compile (about 30, 1.5 s, at synthetic_mq2007)."""
    gains = tuple(click_lib.relevance(y, y_max, mapping, eps_min=eps_min) * m for y, m in zip(labels, masks))
    return gains, tuple(metrics.ideal_dcg(g, m, discount) for g, m in zip(gains, masks))


def ndcg_discount(config: SimConfig, click_model: click_lib.ClickModel) -> jax.Array:
    """The per-position NDCG discount of the protocol (see ``SimConfig.discount``)."""
    theta_host = np.asarray(click_model.examination)[: config.top_k]  # sliced and tested by NumPy: no program
    theta = jax.device_put(theta_host)  # jnp.asarray would compile a program (lax.stage)
    if config.discount == "examination":
        return theta
    if config.discount == "log2":
        return metrics.log2_discount(config.top_k)
    if config.discount != "auto":
        raise ValueError(f"unknown discount {config.discount!r}; expected auto, log2 or examination")
    if config.relevance == "ebrank" and click_model.kind == "affine" and bool(np.all(theta_host > 0)):
        return theta
    return metrics.log2_discount(config.top_k)


@dataclasses.dataclass
class Caches:
    """Values a simulator computes when first needed and keeps (they change no result).

    Attributes:
      cum_weights: Cum-NDCG's weights (``metrics.cumulative_weights``), the longest so far.
      aux_bytes: per policy, one member's ``prepare`` output bytes (``memory.aux_bytes``).
      document_cells: the layout's cells for retrains that filter on the device (``retrain.document_cells``).
      device_layout: the query layout on the device, for a trial set up there (``device_trial.DeviceSetup``).
      init_programs: per policy, its members' vmapped ``init`` (``device_trial``).
    """

    cum_weights: np.ndarray = dataclasses.field(default_factory=lambda: np.ones(0))
    aux_bytes: weakref.WeakKeyDictionary = dataclasses.field(default_factory=weakref.WeakKeyDictionary)
    document_cells: DocumentCells | None = None
    device_layout: object = None
    init_programs: weakref.WeakKeyDictionary = dataclasses.field(default_factory=weakref.WeakKeyDictionary)


@dataclasses.dataclass(frozen=True, eq=False)
class SimContext:
    """A simulator's fixed values (``make_context``).

    Attributes:
      data: the padded dataset.
      click_model: the click model.
      config: the settings, ``click_rng``/``retrain_examples`` resolved for JAX's backend (``SimConfig.resolved``).
      warmup_policy: the warm-up's policy (None: no warm-up sessions are run).
      max_members: the cap on members per compiled chunk (None: none).
      memory_budget: bytes one chunk may use (``memory.memory_budget_default`` when not given).
      state_budget: on a CPU, bytes of members' state one chunk may hold (None: no cap).
      discount: f32 [K] the NDCG discount (``ndcg_discount``).
      uniform_rows: click uniforms per position (2 for a cascade model: click, stop).
      protocol: what every session shares (``step.Protocol``).
      gains, idcg: per bucket, every document's gain and every query's ideal DCG.
      queries: per bucket, the same padded with a scratch row (``step.QueryConstants``).
      docs_per_query: i64 [Q] documents of every query (dataset order).
      n_lanes: per bucket, the configured lanes (``SimConfig.lanes_per_query``, clipped).
      test_rows: per bucket, the rows of its test queries (host); ``test_rows_device`` the same on the device.
      trims_heap: whether freed heap pages go back to the OS (``memory.HEAP_TRIM_SLOTS``).
      caches: values computed when first needed (``Caches``).
    """

    data: PaddedDataset
    click_model: click_lib.ClickModel
    config: SimConfig
    warmup_policy: Policy | None
    max_members: int | None
    memory_budget: int
    state_budget: int | None
    discount: jax.Array
    uniform_rows: int
    protocol: step_lib.Protocol
    gains: tuple
    idcg: tuple
    queries: tuple
    docs_per_query: np.ndarray
    n_lanes: tuple[int, ...]
    test_rows: tuple[np.ndarray, ...]
    test_rows_device: tuple
    trims_heap: bool
    caches: Caches = dataclasses.field(default_factory=Caches)


def make_context(data: PaddedDataset, click_model: click_lib.ClickModel, config: SimConfig,
                 warmup_policy: Policy | None = None, max_members: int | None = None,
                 memory_budget: int | None = None, state_budget: int | None = None) -> SimContext:
    """The ``SimContext`` of ``Simulator(...)``'s arguments (see ``Simulator``); ``ValueError`` on a click model
    with fewer positions than K or a cap below one member."""
    if click_model.n_positions < config.top_k:
        raise ValueError(f"click model has {click_model.n_positions} positions, top_k is {config.top_k}")
    if max_members is not None and int(max_members) < 1:
        raise ValueError(f"max_members must be >= 1, got {max_members}")
    config = config.resolved()
    budget = int(memory_budget) if memory_budget else memory.memory_budget_default()  # before the data's arrays
    discount = ndcg_discount(config, click_model)
    uniform_rows = 2 if click_model.kind == "cascade" else 1
    protocol = step_lib.Protocol(click_model=click_model, discount=discount, top_k=config.top_k,
                                 uniform_rows=uniform_rows, device_rng=config.click_rng == "device")
    gains, idcg = bucket_gains(tuple(b.labels for b in data.buckets), tuple(b.doc_mask for b in data.buckets),
                               discount, data.y_max, config.relevance, config.relevance_eps_min)
    test_rows = tuple(np.flatnonzero(np.asarray(b.split) == TEST).astype(np.int32) for b in data.buckets)
    docs_per_query = np.zeros(data.n_queries, np.int64)  # documents of every query (dataset order)
    for b in data.buckets:
        docs_per_query[np.asarray(b.query_index)] = np.asarray(b.n_docs)
    n_lanes = tuple(int(np.clip(int(b.n_queries * config.lanes_per_query), min(config.min_lanes, b.n_queries),
                                config.max_lanes)) for b in data.buckets)
    return SimContext(
        data=data, click_model=click_model, config=config, warmup_policy=warmup_policy,
        max_members=None if max_members is None else int(max_members),
        memory_budget=budget,
        state_budget=int(state_budget) if state_budget and jax.default_backend() == "cpu" else None,
        discount=discount, uniform_rows=uniform_rows, protocol=protocol, gains=gains, idcg=idcg,
        # the same padded with a zero scratch row, as the session step reads them (``step.QueryConstants``): once
        queries=tuple(step_lib.query_constants(b, g, i) for b, g, i in zip(data.buckets, gains, idcg)),
        docs_per_query=docs_per_query, n_lanes=n_lanes,
        test_rows=test_rows, test_rows_device=tuple(jax.device_put(r) for r in test_rows),
        trims_heap=sum(int(np.prod(b.labels.shape)) for b in data.buckets) >= memory.HEAP_TRIM_SLOTS)
