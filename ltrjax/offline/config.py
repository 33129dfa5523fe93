"""Typed configuration of the offline experiments (SPEC §6; PRS §5.2; Vectorization §6.1).

``OfflineConfig`` is ``experiment=offline``, ``FidelityConfig`` is ``experiment=offline_fidelity``. Every
default is written once, here; ``conf/experiment/offline*.yaml`` only mirror them (a test checks they agree).
``ltrjax.schema`` turns the OmegaConf mapping into these dataclasses with its generic machinery; Python
callers use ``from_mapping`` (unknown keys and bad values raise ``ConfigError`` naming the dotted key) and
``override`` (a copy with nested fields replaced). The offline package reads typed fields only.

The logging protocol is the papers' (PRS §5.2 after Joachims et al. 2017): the production ranker presents
the whole candidate list (``list_size`` null; at most ``list_cap`` documents), and the budget is counted in
clicks (``n_clicks``, the paper's 128K), or in clicks per logged query (``clicks_per_query``), or in
sessions (``n_sessions``); the first of ``n_sessions``, ``clicks_per_query`` that is set replaces ``n_clicks``.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Annotated, Any, Dict, List, Optional

from ltrjax.clicks import ClickModelConfig
from ltrjax.constraints import (ConfigError, Each, NonNegative, NonNegativeInt, OneOf, Positive, PositiveInt, Range,
                                check_fields, unknown_key)
from ltrjax.offline.rankers import RANKERS
from ltrjax.offline.train import TrainConfig


def relevance_mappings() -> tuple[str, ...]:
    """The relevance mappings ``ltrjax.clicks.relevance`` accepts."""
    from ltrjax.clicks import RELEVANCE_MAPPINGS

    return tuple(RELEVANCE_MAPPINGS)


def estimator_names() -> tuple[str, ...]:
    from ltrjax.offline.estimators import ALL_ESTIMATORS

    return tuple(ALL_ESTIMATORS)


def is_oracle(name: str) -> bool:
    """Whether estimator ``name`` is told the true click model (a labelled upper reference, never a claim's
    comparator; the registry's ``ORACLE_ESTIMATORS``)."""
    from ltrjax.offline.estimators import ORACLE_ESTIMATORS

    return name in ORACLE_ESTIMATORS


# --------------------------------------------------------------------------- blocks
@dataclasses.dataclass(frozen=True)
class LoggingBoost:
    """The logging policy ranks by production score / its std + ``weight`` x the z-scored feature ``column``
    (0-based): a business rule promoting documents on a feature the labels do not reward."""

    column: Optional[NonNegativeInt] = None  # null: the production ranker's order
    weight: float = 0.0

    def __post_init__(self):
        check_fields(self)


@dataclasses.dataclass(frozen=True)
class OfflineClickModel(ClickModelConfig):
    """The click model of the logged sessions (SPEC §4): ``ltrjax.clicks.ClickModelConfig`` (the click model's keys
    and their defaults, shared with the online runs) and the relevance mapping R(y) of the logged documents."""

    relevance: Annotated[str, OneOf(relevance_mappings)] = "binary"  # binary (PRS) | ebrank | vectorization | ...
    threshold: Optional[NonNegativeInt] = None  # binarization y >= threshold; null: 1 if y_max <= 2 else 3
    noise: Annotated[float, Range(0, 1)] = 0.1  # mu: eps+ = 1 - mu, eps- = mu (binary relevance only)

    def mapping(self) -> dict:
        """The mapping ``ltrjax.clicks.make_click_model`` reads."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    binarize: Any = "auto"  # auto: binarize test/vali labels iff the click relevance is binary; true | false
    map_threshold: NonNegativeInt = 1  # MAP: relevant = (evaluation) label >= this
    drop_no_relevant: bool = True  # leave test queries without a relevant document out of the means

    def __post_init__(self):
        check_fields(self)
        if self.binarize not in ("auto", True, False):
            raise ConfigError("binarize", self.binarize, "expected auto, true or false")


def default_train() -> TrainConfig:
    """Every estimator of a table: the best validation NDCG@10 within a fixed step budget (the papers' rule),
    validated at the same steps; Adam .01 (``PAPER_TRAIN`` is the Vectorization paper's AdaGrad .05)."""
    return TrainConfig(batch_size=64, optimizer="adam", learning_rate=0.01, clip_norm=5.0, max_epochs=100_000,
                       max_steps=3000, eval_every_steps=100)


# The Vectorization paper's schedule (§6.1, App. D): AdaGrad lr .05, gradient clip 5, batch 256, best validation
# NDCG@10 within 15k steps (the preset ``train_preset: paper``; CPU-heavy).
PAPER_TRAIN = TrainConfig(batch_size=256, optimizer="adagrad", learning_rate=0.05, clip_norm=5.0, max_epochs=100_000,
                          max_steps=15_000, eval_every_steps=500)
TRAIN_PRESETS = {"paper": PAPER_TRAIN}

PROPENSITY_SOURCES = ("known", "randomization")

# the run-level keys an offline experiment leaves null to take from conf/config.yaml, and their values without one
TOP_LEVEL = {"seed": 0, "trials": 5, "progress": False, "click_log": None, "save_click_logs": False}

DEFAULT_ESTIMATORS = ["naive", "ips", "pns", "prs", "prs_lambda", "dla", "regression_em", "pair_debias", "affine",
                      "vectorization", "production", "labeled"]


@dataclasses.dataclass(frozen=True)
class OfflineConfig:
    """``experiment`` of ``experiment=offline`` (``ltrjax.offline_runner.run_offline``)."""

    kind: Annotated[str, OneOf(("offline",))] = "offline"
    name: str = "offline"
    seed: Optional[NonNegativeInt] = None  # null: the top-level `seed` of conf/config.yaml; trial t uses seed + t
    trials: Optional[PositiveInt] = None  # null: the top-level `trials`
    progress: Optional[bool] = None  # null: the top-level `progress`
    estimators: Annotated[List[str], Each(OneOf(estimator_names))] = dataclasses.field(
        default_factory=lambda: list(DEFAULT_ESTIMATORS))
    # the table's named baseline: every other estimator against it, paired over trials, Holm-corrected over the rows
    # (results.md "Against ..."; null: none; an estimator the run does not train: none)
    baseline: Annotated[Optional[str], OneOf(estimator_names, optional=True)] = "naive"
    n_clicks: Optional[PositiveInt] = 128_000  # click budget (PRS §5.2: 128K clicks)
    clicks_per_query: Optional[Positive] = None  # set: the budget is this many clicks per logged query
    n_sessions: Optional[PositiveInt] = None  # set: the budget is this many sessions (replaces the click budget)
    list_size: Optional[PositiveInt] = None  # displayed positions; null: the whole candidate list (PRS §5.2)
    list_cap: PositiveInt = 128  # the most documents a displayed list shows (memory: [Q, K, K] pair statistics)
    production_fraction: Annotated[float, Range(0, 1, lo_open=True)] = 0.01
    logging_chunk: Optional[PositiveInt] = None  # sessions per jitted chunk; null: 2^24 / K^2 (at most 2^17)
    logging_boost: LoggingBoost = dataclasses.field(default_factory=LoggingBoost)
    ranker: Annotated[str, OneOf(RANKERS)] = "linear"  # linear | mlp | lambdamart
    hidden: Annotated[List[int], Each(Range(1))] = dataclasses.field(default_factory=lambda: [64, 32])
    max_docs: PositiveInt = 256  # cap on documents per query for labeled training lists (random subset)
    eval_buckets: PositiveInt = 4  # padded size buckets for validation/test lists (shared widths)
    # the experiment's click model: PRS §5.2's PBM, theta_k = (1/k)^eta (the click model's own default is EBRank's log2)
    click_model: OfflineClickModel = dataclasses.field(
        default_factory=lambda: OfflineClickModel(examination="inverse"))
    assumed_eta: Optional[NonNegative] = None  # eta of the propensities IPS/PNS/PRS are told (null: the true eta)
    propensities: Annotated[str, OneOf(PROPENSITY_SOURCES)] = "known"  # or estimated by result randomization
    randomization_sessions: PositiveInt = 20_000  # sessions of the simulated result-randomization experiment
    eval: EvalConfig = dataclasses.field(default_factory=EvalConfig)
    # per estimator: {name: {option: value}} over ``estimator_option_defaults(name)``
    estimator_options: Dict[str, Dict[str, Any]] = dataclasses.field(default_factory=dict)
    train: TrainConfig = dataclasses.field(default_factory=default_train)
    train_preset: Annotated[Optional[str], OneOf(tuple(TRAIN_PRESETS), optional=True)] = None  # set: replaces `train`
    # per estimator overrides of `train` (empty: equal treatment; the results show every estimator's schedule)
    train_overrides: Dict[str, Dict[str, Any]] = dataclasses.field(default_factory=dict)
    click_log: Optional[str] = None  # a Parquet click log to train the click estimators from
    save_click_logs: Optional[bool] = None  # write every trial's sessions to RUN/click_logs/trialT.parquet
    save_models: bool = True
    resume: bool = True  # a rerun into the same directory skips the trials already in its results.json

    def __post_init__(self):
        check_fields(self)
        if self.n_sessions is None and self.clicks_per_query is None and self.n_clicks is None:
            raise ConfigError("n_clicks", None, "expected a click budget: set n_clicks, clicks_per_query or "
                                                "n_sessions")
        if self.n_sessions is not None and self.clicks_per_query is not None:
            raise ConfigError("clicks_per_query", self.clicks_per_query,
                              "expected null when n_sessions is set (one budget: n_sessions, clicks_per_query or "
                              "n_clicks)")
        for name in self.train_overrides:
            if name not in estimator_names():
                raise ConfigError(f"train_overrides.{name}", self.train_overrides[name],
                                  f"expected an estimator name: one of {', '.join(estimator_names())}")
            _train_from(self.train, self.train_overrides[name], f"train_overrides.{name}")
        check_estimator_options(self.estimator_options)

    # ---- what the run does
    @property
    def budget(self) -> tuple[str, float]:
        """(unit, amount): ("sessions", n), ("clicks_per_query", c) or ("clicks", n)."""
        if self.n_sessions is not None:
            return "sessions", int(self.n_sessions)
        if self.clicks_per_query is not None:
            return "clicks_per_query", float(self.clicks_per_query)
        return "clicks", int(self.n_clicks)

    def resolved(self, top=None) -> OfflineConfig:
        """``seed``, ``trials``, ``progress``, ``click_log``, ``save_click_logs`` left null taken from ``top`` (the
        run's top level, ``conf/config.yaml``: a value, or None, for every key of ``TOP_LEVEL``), else
        ``TOP_LEVEL``'s values (also without a ``top``)."""
        fill = {k: (v if top is None or top[k] is None else top[k]) for k, v in TOP_LEVEL.items()
                if getattr(self, k) is None}
        return dataclasses.replace(self, **fill) if fill else self

    def base_train(self) -> TrainConfig:
        return TRAIN_PRESETS[self.train_preset] if self.train_preset else self.train

    def train_for(self, name: str) -> TrainConfig:
        """The training schedule of estimator ``name`` (``train`` or its preset, with ``train_overrides``)."""
        return _train_from(self.base_train(), self.train_overrides.get(name, {}), f"train_overrides.{name}")

    def options_for(self, name: str) -> dict:
        """Keyword options of estimator ``name`` (its ``estimator_options`` entry; the rest are its defaults)."""
        return dict(self.estimator_options.get(name, {}))

    def training_plan(self, names=None) -> dict:
        """{estimator: its schedule} as a run records it: the cadence and budget of every estimator."""
        return {n: dataclasses.asdict(self.train_for(n)) for n in (names or self.estimators)}


def _train_from(base: TrainConfig, over, where: str) -> TrainConfig:
    over = dict(over or {})
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    for key in over:
        if key not in known:
            raise unknown_key(f"{where}.{key}", over[key], known, where)
    try:
        return dataclasses.replace(base, **over)
    except ConfigError as err:
        raise err.within(where) from None


def check_estimator_options(options: dict, where: str = "estimator_options") -> None:
    """Every ``{estimator: {option: value}}`` names a registered estimator and options it takes."""
    from ltrjax.offline.estimator_api import estimator_option_defaults

    for name, opts in (options or {}).items():
        if name not in estimator_names():
            raise ConfigError(f"{where}.{name}", opts, f"expected an estimator name: one of {', '.join(estimator_names())}")
        if not isinstance(opts, dict):
            raise ConfigError(f"{where}.{name}", opts, "expected a mapping {option: value}")
        known = estimator_option_defaults(name)
        for key in opts:
            if key not in known:
                raise unknown_key(f"{where}.{name}.{key}", opts[key], list(known) or ["(none)"],
                                  f"the options of estimator {name}")


# --------------------------------------------------------------------------- fidelity
@dataclasses.dataclass(frozen=True)
class VectorizationPart:
    """Vectorization Tables 1-2 (and the PBM d = 1 check) on 5-grade data, with a d-sweep (Fig. 4)."""

    ranker: Annotated[str, OneOf(("linear", "mlp"))] = "mlp"  # ULTRA's rankers are MLPs
    dims: Annotated[List[int], Each(Range(1))] = dataclasses.field(default_factory=lambda: [1, 2, 5])
    estimators: Annotated[List[str], Each(OneOf(estimator_names))] = dataclasses.field(
        default_factory=lambda: ["naive", "dla", "regression_em", "pair_debias", "affine", "affine_oracle",
                                 "ips_oracle", "production", "labeled"])
    settings: Annotated[List[str], Each(OneOf(("tiangong", "trust_bias", "pbm")))] = dataclasses.field(
        default_factory=lambda: ["tiangong", "trust_bias", "pbm"])
    list_size: PositiveInt = 10  # the paper shows the production top-10 (§6.1)
    n_sessions: PositiveInt = 200_000  # logged sessions per setting

    def __post_init__(self):
        check_fields(self)


@dataclasses.dataclass(frozen=True)
class PrsPart:
    """PRS (SIGIR'20) Fig. 3-6 analogues on whole lists, and the Table 1 tree pair."""

    ranker: Annotated[str, OneOf(RANKERS)] = "linear"
    # ips_oracle is ips itself while the propensities are known (add it to see it under assumed_eta)
    estimators: Annotated[List[str], Each(OneOf(estimator_names))] = dataclasses.field(
        default_factory=lambda: ["naive", "ips", "pns", "prs"])
    # the step budget of every estimator of the PRS tables (replaces train.max_steps there): a linear ranker on
    # whole lists converges within it, and 10 trials of the part fit a CPU budget
    max_steps: PositiveInt = 600
    clicks_per_query: Positive = 126.0  # MQ2007 at 128K clicks (PRS Fig. 3's MQ2007 panel)
    click_sweep: Annotated[List[float], Each(Range(0, lo_open=True))] = dataclasses.field(
        default_factory=lambda: [6.0, 126.0])  # clicks per query: Yahoo! and MQ2007 at 128K (Fig. 3)
    noise: Annotated[List[float], Each(Range(0, 1))] = dataclasses.field(
        default_factory=lambda: [0.1, 0.3])  # click noise mu (Fig. 5); the first is the table's
    assumed_eta: Annotated[List[float], Each(Range(0))] = dataclasses.field(
        default_factory=lambda: [1.0, 2.0])  # eta the estimators are told, true eta = 1 (Fig. 6)
    table1: bool = True  # prs_lambda against an IPS-lambda tree baseline, propensities by randomization
    table1_ranker: Annotated[str, OneOf(RANKERS)] = "lambdamart"
    table1_rounds: PositiveInt = 100  # boosting rounds of both trees (best validated round kept)

    def __post_init__(self):
        check_fields(self)


# the names of ``ltrjax.offline.fidelity.BEDS`` (the vector-EH test beds), checked here without importing it
TEST_BEDS = ("linear_noisy", "confounded_mlp")


@dataclasses.dataclass(frozen=True)
class VectorEhPart:
    """The vector-EH checks of ``ltrjax.offline.fidelity`` on its synthetic ``basis_queryset`` (seeds 0: skipped):
    Vectorization with the true d against every scalar bias model (``vec_eh_beats_scalar``), paired over seeds.
    The PBM and trust-bias checks of ``fidelity.vector_eh_checks`` are left to the Vectorization part, which runs
    them on the papers' click models."""

    bed: Annotated[str, OneOf(TEST_BEDS)] = "confounded_mlp"
    seeds: NonNegativeInt = 8
    first_seed: NonNegativeInt = 100
    n_queries: PositiveInt = 600
    n_sessions: PositiveInt = 200_000
    dims: Annotated[List[int], Each(Range(1))] = dataclasses.field(default_factory=lambda: [3])
    old_schedule: List[int] = dataclasses.field(default_factory=list)

    def __post_init__(self):
        check_fields(self)


@dataclasses.dataclass(frozen=True)
class FidelityConfig:
    """``experiment`` of ``experiment=offline_fidelity`` (``ltrjax.offline_runner.run_fidelity``)."""

    kind: Annotated[str, OneOf(("offline_fidelity",))] = "offline_fidelity"
    name: str = "offline_fidelity"
    seed: NonNegativeInt = 0
    trials: PositiveInt = 10  # paired over trials (PRS: 5 runs x folds; Vectorization: 8 runs)
    progress: bool = False
    list_cap: PositiveInt = 128
    production_fraction: Annotated[float, Range(0, 1, lo_open=True)] = 0.01
    logging_chunk: Optional[PositiveInt] = None
    hidden: Annotated[List[int], Each(Range(1))] = dataclasses.field(default_factory=lambda: [64, 32])
    max_docs: PositiveInt = 256
    eval_buckets: PositiveInt = 4
    margin: NonNegative = 0.01  # the vector-EH bed's equivalence margin on NDCG@10 (absolute)
    # the tables' equivalence / non-inferiority claims: margin = margin_fraction x the run's headroom (labelled
    # skyline minus production ranker, NDCG@10; the papers' .01 of Yahoo!'s .04), refused below headroom_floor
    margin_fraction: Annotated[float, Range(0, 1, lo_open=True)] = 0.25
    headroom_floor: NonNegative = 0.02
    randomization_sessions: PositiveInt = 20_000
    estimator_options: Dict[str, Dict[str, Any]] = dataclasses.field(default_factory=dict)
    vectorization: VectorizationPart = dataclasses.field(default_factory=VectorizationPart)
    prs: PrsPart = dataclasses.field(default_factory=PrsPart)
    vector_eh: VectorEhPart = dataclasses.field(default_factory=VectorEhPart)
    parts: Annotated[List[str], Each(OneOf(("vectorization", "prs", "vector_eh")))] = dataclasses.field(
        default_factory=lambda: ["vectorization", "prs", "vector_eh"])
    train: TrainConfig = dataclasses.field(default_factory=default_train)  # one schedule for every estimator

    def __post_init__(self):
        check_fields(self)
        check_estimator_options(self.estimator_options)


# --------------------------------------------------------------------------- from plain mappings
def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def _dataclass_of(hint):
    origin = typing.get_origin(hint)
    if origin is typing.Union or (origin is not None and type(None) in typing.get_args(hint)):
        hint = next((a for a in typing.get_args(hint) if a is not type(None)), hint)
    return hint if dataclasses.is_dataclass(hint) else None


def _field_default(cls, name: str):
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None if f.default is dataclasses.MISSING else f.default


def from_mapping(cls, mapping, where: str = ""):
    """An instance of config dataclass ``cls`` from a plain nested mapping (missing keys: the defaults);
    an unknown key or a refused value is a ``ConfigError`` naming the dotted key under ``where``."""
    if isinstance(mapping, cls):
        return mapping
    mapping = dict(mapping or {})
    hints = _hints(cls)
    known = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in mapping.items():
        path = f"{where}.{key}" if where else key
        if key not in hints:
            raise unknown_key(path, value, known, where or cls.__name__)
        sub = _dataclass_of(hints[key])
        if sub is not None and isinstance(value, dict):
            default = _field_default(cls, key)  # a partial block overrides this config's own defaults of it
            value = override(default, value, path) if dataclasses.is_dataclass(default) else \
                from_mapping(sub, value, path)
        kwargs[key] = value
    try:
        return cls(**kwargs)
    except ConfigError as err:
        raise err.within(where) if where else err from None
    except TypeError as err:
        raise ConfigError(where or cls.__name__, mapping, f"expected a {cls.__name__} mapping ({err})") from None


def as_mapping(cfg) -> dict:
    """A config dataclass as a plain nested dict (what ``results.json`` records)."""
    return dataclasses.asdict(cfg)


def override(cfg, over: dict, where: str = ""):
    """A copy of config dataclass ``cfg`` with the nested fields of ``over`` replaced (mappings merge)."""
    changes = {}
    hints = _hints(type(cfg))
    for key, value in (over or {}).items():
        path = f"{where}.{key}" if where else key
        if key not in hints:
            raise unknown_key(path, value, [f.name for f in dataclasses.fields(cfg)], where or type(cfg).__name__)
        current = getattr(cfg, key)
        if dataclasses.is_dataclass(current) and isinstance(value, dict):
            value = override(current, value, path)
        elif isinstance(current, dict) and isinstance(value, dict) and key in ("estimator_options", "train_overrides"):
            value = {**current, **{k: {**current.get(k, {}), **v} for k, v in value.items()}}
        elif _dataclass_of(hints[key]) is not None and isinstance(value, dict):
            value = from_mapping(_dataclass_of(hints[key]), value, path)
        elif isinstance(value, dict) and not isinstance(current, dict) and current is not None:
            raise ConfigError(path, value, f"expected {type(current).__name__}, not a mapping")
        changes[key] = value
    try:
        return dataclasses.replace(cfg, **changes)
    except ConfigError as err:
        raise err.within(where) if where else err from None


__all__ = ["DEFAULT_ESTIMATORS", "PAPER_TRAIN", "EvalConfig", "FidelityConfig", "LoggingBoost", "OfflineClickModel",
           "OfflineConfig", "PrsPart", "TRAIN_PRESETS", "VectorEhPart", "VectorizationPart", "as_mapping",
           "check_estimator_options", "from_mapping", "is_oracle", "override"]
