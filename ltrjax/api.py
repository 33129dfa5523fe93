"""Run functions for library use: plain Python objects and dataclasses in, results out (no Hydra).

* ``queryset_from_arrays``: a ``QuerySet`` from feature/label/query-id arrays (rows grouped by query).
* ``algorithm``: the policy factory of a shipped algorithm (``conf/algorithm/NAME.yaml``), built exactly as
  ``python -m ltrjax.run`` builds that row (with ``experiment.tune=false``: its tune grid is not run).
* ``compare_online``: policies (or factories ``PaddedDataset -> Policy``) x trials under one protocol
  (``SimConfig``) and click model; returns every trial's ``TrialResult``. Trial t of every policy uses
  the key ``fold_in(PRNGKey(seed), t)``, as ``python -m ltrjax.run`` does, so policies share their
  session and click draws. Every policy is built and initialised on the data before any simulation.
* ``train_offline``: every offline estimator trained from a Parquet click log (``ltrjax.clicklog``) or
  from simulated logging, evaluated on the dataset's test queries (``OfflineSettings``).
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

import jax
import numpy as np

from ltrjax.clicklog import ClickLog, write_click_log
from ltrjax.clicks import ClickModel
from ltrjax.constraints import ConfigError
from ltrjax.data.checks import check_list_width
from ltrjax.data.layout import PaddedDataset, pad_and_bucket
from ltrjax.data.queryset import QuerySet, offsets_from_counts, random_split
from ltrjax.offline.config import OfflineConfig, as_mapping
from ltrjax.offline.train import TrainConfig
from ltrjax.online.policies.base import Policy
from ltrjax.online.policies.bm25 import BM25
from ltrjax.online.simulator import SimConfig, Simulator, TrialResult


def queryset_from_arrays(features, labels, qids, split=None, *, name: str = "arrays", y_max: int | None = None,
                         bm25_column: int = -1, seed: int = 0) -> QuerySet:
    """A QuerySet of documents ``features [N, F]``, ``labels [N]`` and query ids ``qids [N]``.

    Documents are grouped by query in order of first appearance (a query's documents keep their
    order); ``split`` ``[Q]`` (0 train, 1 vali, 2 test, per query in that order) defaults to a seeded
    60/20/20 split. Features are used as given (``ltrjax.data.preprocess.preprocess`` normalises).
    """
    features = np.asarray(features, np.float32)
    labels = np.asarray(labels)
    qids = np.asarray(qids, np.int64)
    if features.ndim != 2 or labels.shape != (features.shape[0],) or qids.shape != labels.shape:
        raise ValueError(f"expected features [N, F], labels [N] and qids [N]; got {features.shape}, "
                         f"{labels.shape} and {qids.shape}")
    if labels.size and (labels.min() < 0 or not np.issubdtype(labels.dtype, np.integer)):
        raise ValueError("labels must be non-negative integers")
    unique, first, inverse = np.unique(qids, return_index=True, return_inverse=True)
    order_of_query = np.argsort(np.argsort(first))  # query rank by first appearance
    rank = order_of_query[inverse.reshape(-1)]
    rows = np.argsort(rank, kind="stable")
    counts = np.bincount(rank, minlength=len(unique))
    n_q = len(unique)
    split = random_split(n_q, seed) if split is None else np.asarray(split, np.int8)
    if split.shape != (n_q,):
        raise ValueError(f"split must have one entry per query ({n_q}), got shape {split.shape}")
    return QuerySet(name=name, features=features[rows], labels=labels[rows].astype(np.int32),
                    query_offsets=offsets_from_counts(counts), qids=unique[np.argsort(first)], split=split,
                    y_max=int(labels.max(initial=0) if y_max is None else y_max), bm25_column=int(bm25_column),
                    feature_ids=np.arange(1, features.shape[1] + 1, dtype=np.int32))


PolicyFactory = Callable[[PaddedDataset], Policy]


def algorithm(name: str, **options) -> PolicyFactory:
    """A factory ``PaddedDataset -> Policy`` of shipped algorithm ``name`` (``conf/algorithm/NAME.yaml``, e.g.
    ``"ebrank"``) with ``options`` replacing its settings (``epsilon=10``, ``fit={...}``): the policy that
    ``python -m ltrjax.run`` builds for that row with ``experiment.tune=false`` (its ``tune`` grid is not run).
    Unknown names, keys and values raise ``ConfigError``, as on the command line."""
    from omegaconf import OmegaConf

    from ltrjax.schema import algorithm_spec
    from ltrjax.structured import conf_dir

    path = conf_dir() / "algorithm" / f"{name}.yaml"
    if not path.is_file():
        names = sorted(p.stem for p in path.parent.glob("*.yaml"))
        raise ConfigError("algorithm", name, f"expected a shipped algorithm ({', '.join(names)})")
    acfg = {**OmegaConf.to_container(OmegaConf.load(path), resolve=True), **options}
    spec = algorithm_spec(name, acfg)

    def build(data: PaddedDataset) -> Policy:
        return spec.build(data, name)

    build.__name__ = build.__qualname__ = f"algorithm_{name}"
    return build


def prepare_policies(data: PaddedDataset, policies: Mapping[str, Policy | PolicyFactory]) -> dict[str, Policy]:
    """Every policy built for ``data`` and initialised once, before any simulation: a factory or ``init``
    that fails raises ``ValueError`` naming the policy (not after the earlier policies' populations ran)."""
    out = {}
    for name, policy in policies.items():
        try:
            built = policy if isinstance(policy, Policy) else policy(data)
            if not isinstance(built, Policy):
                raise TypeError(f"expected a Policy or a factory returning one, got {type(built).__name__}")
            built.init(jax.random.PRNGKey(0), data)
        except (ConfigError, ValueError, TypeError, KeyError, IndexError) as err:
            raise ValueError(f"policy {name!r} cannot run on dataset {data.name!r} ({data.n_queries} queries, "
                             f"{data.n_features} features): {type(err).__name__}: {err}") from err
        built.name = name
        out[name] = built
    return out


def compare_online(queryset: QuerySet | PaddedDataset, policies: Mapping[str, Policy | PolicyFactory], *,
                   click_model: ClickModel, sim: SimConfig = SimConfig(), trials: int = 1, seed: int = 0,
                   warmup: bool = True, n_buckets: int = 4, progress: bool = False) -> dict[str, list[TrialResult]]:
    """Every policy x ``trials`` trials under ``sim`` and ``click_model``; {name: [TrialResult per trial]}.

    ``policies`` maps a name to a Policy built for this data or to a factory called with the padded
    data (``algorithm(NAME)``: a shipped algorithm as the command line builds it). ``warmup`` runs the
    protocol's BM25 warm-up sessions when the data has a BM25 column. Before any simulation, ``sim.top_k`` is
    checked against the data (``ConfigError``) and every policy is built and initialised (``prepare_policies``).
    """
    if int(trials) < 1:
        raise ValueError(f"trials must be >= 1, got {trials}")
    if isinstance(queryset, PaddedDataset):
        data = queryset
        narrow = min(b.width for b in data.buckets)
        check_list_width(max(b.width for b in data.buckets), sim.top_k, data.name)
        if sim.top_k > narrow:
            raise ConfigError("sim.top_k", sim.top_k, f"expected at most {narrow}, the narrowest bucket of the padded "
                              f"data; lay it out with pad_and_bucket(..., min_width={sim.top_k})")
    else:
        check_list_width(int(queryset.docs_per_query.max(initial=0)), sim.top_k, queryset.name)
        data = pad_and_bucket(queryset, n_buckets, min_width=sim.top_k)
    simulator = Simulator(data, click_model, sim, warmup_policy=BM25(data) if warmup and data.bm25_column >= 0 else None)
    built = prepare_policies(data, policies)
    keys = [jax.random.fold_in(jax.random.PRNGKey(int(seed)), t) for t in range(int(trials))]
    return {name: simulator.run_population(policy, keys, progress=progress) for name, policy in built.items()}


def summarize_online(results: Mapping[str, list[TrialResult]]) -> dict[str, dict[str, float]]:
    """Mean over trials of the test-split Cum-NDCG and the final Warm/Cold NDCG of every policy."""
    return {name: {"cum_ndcg": float(np.mean([r.cum_ndcg["test"] for r in rs])),
                   "warm_ndcg": float(np.mean([r.warm_ndcg for r in rs])),
                   "cold_ndcg": float(np.mean([r.cold_ndcg for r in rs]))} for name, rs in results.items()}


_CLI = OfflineConfig()  # `experiment=offline` of the command line: OfflineSettings takes its defaults from here


@dataclasses.dataclass(frozen=True)
class OfflineSettings:
    """The offline experiment's most used settings, with the command line's defaults (``experiment=offline``:
    ``ltrjax.offline.config.OfflineConfig``, where they are written) except ``trials`` (1) and ``progress`` (off).
    Every other key keeps the command line's default.

    ``click_model`` is the simulated user when no click log is given, and in any case the click model
    whose propensities the estimators are told (with a real click log: your estimate of it).
    """

    estimators: tuple[str, ...] = tuple(_CLI.estimators)
    trials: int = 1
    seed: int = 0
    n_clicks: int | None = _CLI.n_clicks  # the click budget when no click log is given
    clicks_per_query: float | None = _CLI.clicks_per_query  # set: the budget in clicks per logged query
    n_sessions: int | None = _CLI.n_sessions  # set: the budget in sessions
    list_size: int | None = _CLI.list_size  # None: the whole candidate list (at most list_cap)
    list_cap: int = _CLI.list_cap
    ranker: str = _CLI.ranker  # linear | mlp | lambdamart
    hidden: tuple[int, ...] = tuple(_CLI.hidden)
    click_model: Mapping = dataclasses.field(default_factory=lambda: as_mapping(_CLI.click_model))
    train: TrainConfig = _CLI.train
    estimator_options: Mapping = dataclasses.field(default_factory=dict)  # {estimator: {option: value}}
    eval_buckets: int = _CLI.eval_buckets
    logging_chunk: int | None = _CLI.logging_chunk
    progress: bool = False

    def experiment(self) -> dict:
        """The ``experiment`` mapping of ``ltrjax.offline_runner.run_offline``."""
        exp = dataclasses.asdict(self)
        exp.update(estimators=list(self.estimators), hidden=list(self.hidden), click_model=dict(self.click_model),
                   estimator_options={k: dict(v) for k, v in self.estimator_options.items()})
        return exp


def train_offline(queryset: QuerySet, click_log: ClickLog | str | Path | None = None, *,
                  settings: OfflineSettings = OfflineSettings(), out_dir: str | Path | None = None) -> dict:
    """Train and evaluate ``settings.estimators`` on ``queryset`` from ``click_log`` (a ``ClickLog`` or a
    Parquet file; None: simulate the logging), writing results.json, results.md and the saved models
    into ``out_dir`` (a temporary folder when None). Returns the results mapping of ``run_offline``."""
    from ltrjax.offline_runner import run_offline
    from ltrjax.schema import offline_run

    with tempfile.TemporaryDirectory(prefix="ltrjax-offline-") as tmp:
        out = Path(out_dir) if out_dir is not None else Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        if isinstance(click_log, ClickLog):
            path = out / "click_log.parquet"
            write_click_log(path, click_log)
            click_log = path
        exp = {**settings.experiment(), "click_log": str(click_log) if click_log is not None else None}
        return run_offline(offline_run({"experiment": exp}), out, queryset=queryset)
