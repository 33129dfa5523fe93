"""Typed configuration: the schemas of every config block, and the check a run makes before loading data.

Each block of ``conf/`` has a dataclass schema (Hydra structured configs, registered in Hydra's
ConfigStore under ``schema/``):

| block | schema |
|---|---|
| ``sim`` | ``ltrjax.online.simulator.SimConfig`` (the simulator's own settings) |
| ``click_model`` | ``ltrjax.clicks.ClickModelConfig`` (a kind may only carry the keys it reads: ``KIND_KEYS``) |
| ``dataset`` | ``ltrjax.data.registry.DatasetConfig`` (+ ``preset`` and the ``SyntheticParams`` fields for synthetic data) |
| ``experiment`` | ``OnlineExperimentConfig``, ``OnlineTableExperimentConfig`` (here) or, for ``kind: offline`` / ``offline_fidelity``, ``ltrjax.offline.config.OfflineConfig`` / ``FidelityConfig`` |
| ``algorithms.NAME`` | derived from the ``_target_`` policy's constructor signature; ``fit`` is ``ltrjax.models.train.FitConfig``, ``tune`` names fields of the policy's ``Hyper`` |
| ``fit_overrides`` | {glob of algorithm keys: some fields of ``FitConfig``} |
| ``population``, ``layout``, ``data``, ``jax`` and the top level | ``RunConfig`` and its parts (here) |

Types come from the annotations (OmegaConf converts and checks them), allowed values from their
``Annotated`` constraints (``ltrjax.constraints``), the same ones the dataclasses check in
``__post_init__`` and ``Policy.make_hyper`` checks for tune grids. The generic machinery (a mapping typed as a
dataclass, where the shipped configs are) is ``ltrjax.structured``; the dataset check is the data package's own
(``ltrjax.data.registry.check_dataset``). ``resolve`` checks a composed config against all of them and returns the
typed configuration a run uses (``ResolvedRun``, frozen dataclasses: the defaults are written once, in the schemas,
and the runners read attributes); ``validate`` returns the same as a ``DictConfig`` (what ``resolved_config.yaml``
records). Whatever they refuse raises a ``ConfigError``, one paragraph naming the key, the value and what is
allowed (``python -m ltrjax.run`` prints it and exits with status 2).
"""

from __future__ import annotations

import collections.abc
import dataclasses
import fnmatch
import functools
import inspect
import itertools
import logging
import pathlib
import types
import typing
from typing import Annotated, Any, Dict, List, Optional

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

from ltrjax.clicks import KIND_KEYS, ClickModelConfig
from ltrjax.constraints import (ConfigError, Each, NonNegative, NonNegativeInt, OneOf, Positive, PositiveInt,
                                Range, check_value, checks_of, field_checks, strict_fields, unknown_key)
from ltrjax.data.registry import DatasetConfig, check_dataset, synthetic_schema
from ltrjax.models.train import FitConfig
from ltrjax.offline.config import TOP_LEVEL as OFFLINE_TOP_LEVEL
from ltrjax.offline.config import FidelityConfig, OfflineConfig, from_mapping
from ltrjax.offline.train import TrainConfig
from ltrjax.online.simulator import SimConfig
from ltrjax.precision import DEFAULT_MATMUL_PRECISION, MATMUL_PRECISIONS
from ltrjax.record import atomic_write
from ltrjax.structured import allowed_text, conf_dir, join_key, lookup, typed, writable

log = logging.getLogger("ltrjax")

ONLINE_KINDS = ("online", "online_table")


# --------------------------------------------------------------------------- the schemas
@dataclasses.dataclass(frozen=True)
class PopulationConfig:
    """Members of one compiled population (``Simulator.run_population``)."""

    max_members: PositiveInt | None = None  # cap on members per compiled chunk (null: as many as fit)
    memory_gb: Positive | None = None  # memory budget of one chunk (null: simulator.memory_budget_default)
    # on a CPU, the most member state (counters, order, rank, entry sessions) one chunk holds, GiB (null: no cap):
    # larger chunks ran no faster at MSLR-30K shape, their memory grew (docs/results/chunk_size_mslr/)
    cpu_state_gb: Positive | None = 1.5


@dataclasses.dataclass(frozen=True)
class LayoutConfig:
    """Size buckets of the padded [query, doc] layout (``ltrjax.data.layout.pad_and_bucket``)."""

    n_buckets: PositiveInt = 4
    merge_tolerance: NonNegative = 0.25
    single_bucket_cells: NonNegativeInt = 200_000


@dataclasses.dataclass(frozen=True)
class DataConfig:
    cache_dir: str | None = None  # parsed-LETOR cache; null: $LTRJAX_CACHE or ~/.cache/ltrjax


@dataclasses.dataclass(frozen=True)
class JaxConfig:
    compilation_cache: bool = True
    # float32 matrix products: "highest" (float32 on every backend), or "default" (a GPU's TF32; ltrjax.precision)
    matmul_precision: Annotated[str, OneOf(MATMUL_PRECISIONS)] = DEFAULT_MATMUL_PRECISION


@dataclasses.dataclass(frozen=True)
class EtaSweepConfig:
    """EBRank Fig. 4: the protocol rerun at other entry probabilities."""

    values: Annotated[List[float], Each(Range(0, 1, lo_open=True))] = dataclasses.field(
        default_factory=lambda: [0.2, 0.5, 1.0])
    algorithms: List[str] = dataclasses.field(default_factory=list)
    trials: PositiveInt = 2


@dataclasses.dataclass(frozen=True)
class OnlineExperimentConfig:
    """``experiment`` of ``experiment=online`` (``ltrjax.runner.run_online``)."""

    kind: Annotated[str, OneOf(ONLINE_KINDS)] = "online"
    tune: bool = True  # pick each algorithm's tune-grid value per trial on tune_split sessions
    tune_split: Annotated[str, OneOf(("train", "vali"))] = "vali"  # never the test split
    curve_points: PositiveInt = 100
    objective: Optional[str] = None  # the algorithm key whose validation Cum-NDCG the run returns
    resume: bool = True
    only: Optional[List[str]] = None
    entry_bins: PositiveInt = 10


@dataclasses.dataclass(frozen=True)
class OnlineTableExperimentConfig(OnlineExperimentConfig):
    """``experiment`` of the papers' tables (``experiment=online_table``, ``ucbrank_table``)."""

    kind: Annotated[str, OneOf(ONLINE_KINDS)] = "online_table"
    title: str = "Online performance"
    alpha: Annotated[float, Range(0, 1, lo_open=True, hi_open=True)] = 0.05
    permutations: PositiveInt = 10_000
    click_rate_algorithms: Optional[List[str]] = None
    eta_sweep: Optional[EtaSweepConfig] = None


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """The top level of ``conf/config.yaml``; ``click_model``, ``experiment``, ``algorithms``, ``fit_overrides``
    and ``dataset`` have schemas of their own (they depend on the experiment kind and the algorithm)."""

    seed: NonNegativeInt = 0
    trials: PositiveInt = 3
    progress: bool = True
    save_click_logs: bool = False
    click_log: Optional[str] = None  # experiment=offline only
    sim: SimConfig = dataclasses.field(default_factory=SimConfig)
    population: PopulationConfig = dataclasses.field(default_factory=PopulationConfig)
    layout: LayoutConfig = dataclasses.field(default_factory=LayoutConfig)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    jax: JaxConfig = dataclasses.field(default_factory=JaxConfig)


SEPARATE_BLOCKS = ("click_model", "experiment", "algorithms", "fit_overrides", "dataset")
# what experiment=offline does not read (refused when set on the command line, left out of the resolved config)
ONLINE_ONLY = ("sim", "population", "layout", "click_model", "fit_overrides", "algorithms")


@dataclasses.dataclass(frozen=True)
class ResolvedRun:
    """The configuration a run uses, typed (``resolve``'s result; ``validate`` returns its ``to_config()``).

    Every value is checked and every default filled in (defaults live in the schema dataclasses, nowhere else):
    the runners read attributes and never restate a default or re-check a value. ``experiment`` is the typed
    experiment block (``OnlineExperimentConfig``, ``OnlineTableExperimentConfig``, ``OfflineConfig`` with its
    run-level keys filled in, ``FidelityConfig`` or a registered offline kind's schema) and ``click_model`` the typed
    ``ltrjax.clicks.ClickModelConfig`` (``to_config`` records the keys its kind reads). The blocks whose keys depend
    on a choice stay plain mappings, complete and checked: ``fit_overrides`` and ``dataset`` (a
    ``ltrjax.data.registry`` mapping). ``algorithms`` is {key: ``AlgorithmSpec``}, each row resolved once (class,
    options with ``fit_overrides`` applied, tune grid). The online blocks are None for the
    offline kinds (they read none of them: ``ONLINE_ONLY``)."""

    seed: int
    trials: int
    progress: bool
    save_click_logs: bool
    click_log: Optional[str]
    data: DataConfig
    jax: JaxConfig
    experiment: Any
    dataset: Optional[Dict[str, Any]]  # None: a Python caller's run that passes its query set
    sim: Optional[SimConfig] = None
    population: Optional[PopulationConfig] = None
    layout: Optional[LayoutConfig] = None
    click_model: Optional[ClickModelConfig] = None
    fit_overrides: Optional[Dict[str, Any]] = None
    algorithms: Optional[Dict[str, AlgorithmSpec]] = None

    @property
    def kind(self) -> str:
        return self.experiment.kind

    def to_config(self) -> DictConfig:
        """The same configuration as a ``DictConfig`` (what ``resolved_config.yaml`` records), in the order of
        ``conf/config.yaml``; the offline kinds without the online blocks."""
        order = [f.name for f in dataclasses.fields(RunConfig)] + ["experiment", "click_model", "fit_overrides",
                                                                    "algorithms", "dataset"]
        out = {}
        for name in order:
            value = getattr(self, name)
            if value is None and name in ONLINE_ONLY:
                continue
            if isinstance(value, ClickModelConfig):
                out[name] = value.settings()  # the keys its kind reads (the others would be refused)
            elif name == "algorithms":
                out[name] = {key: spec.settings() for key, spec in value.items()}
            else:
                out[name] = dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value
        return OmegaConf.create(out)

    def replace(self, **changes) -> ResolvedRun:
        return dataclasses.replace(self, **changes)


# --------------------------------------------------------------------------- typing through OmegaConf
# --------------------------------------------------------------------------- click models, datasets
def check_click_model(mapping, where: str = "click_model") -> ClickModelConfig:
    """A ``click_model`` mapping typed and checked; a key its kind does not read is refused (it would be ignored)."""
    model = typed(ClickModelConfig, mapping, where, label="click model")
    reads = KIND_KEYS[model.kind]
    for key in mapping or {}:
        if key != "kind" and key not in reads and (mapping or {})[key] is not None:
            groups = ", ".join(f"click_model={p.stem}" for p in sorted((conf_dir() / "click_model").glob("*.yaml")))
            raise ConfigError(f"{where}.{key}", mapping[key],
                              f"kind {model.kind!r} does not read it (it reads {', '.join(reads) or 'no other key'}); "
                              f"choose a click model with its own keys instead ({groups})")
    return model


# --------------------------------------------------------------------------- algorithms
@functools.lru_cache(maxsize=None)
def policy_class(target: str) -> type:
    import importlib

    from ltrjax.online.policies.base import Policy

    module, _, name = target.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        cls = None
    if not (inspect.isclass(cls) and issubclass(cls, Policy)):
        raise ConfigError("_target_", target, "expected the import path of a Policy class "
                          "(e.g. ltrjax.online.policies.ebrank.EBRank)")
    return cls


@functools.lru_cache(maxsize=None)
def constructor_options(cls) -> dict[str, tuple[Any, Any]]:
    """{option: (annotation, default)} of a policy class's constructor, following ``**kwargs`` up the MRO."""
    out: dict[str, tuple[Any, Any]] = {}
    for klass in cls.__mro__:
        if "__init__" not in vars(klass) or klass is object:
            continue
        init = vars(klass)["__init__"]
        hints = typing.get_type_hints(init, include_extras=True)
        params = list(inspect.signature(init).parameters.values())[1:]  # no self
        for p in params:
            if p.name == "data" or p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
                continue
            out.setdefault(p.name, (hints.get(p.name, Any), p.default))
        if not any(p.kind == p.VAR_KEYWORD for p in params):
            break
    return out


def _omegaconf_type(hint):
    """The plain type OmegaConf can check for a constructor annotation."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated:
        return _omegaconf_type(args[0])
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return Optional[_omegaconf_type(inner[0])] if len(inner) == 1 else Any
    if origin in (list, tuple, List, collections.abc.Sequence):
        return List[_omegaconf_type(args[0])] if args else List[Any]
    if origin in (dict, Dict, collections.abc.Mapping) or hint is dict:
        return Optional[Dict[str, Any]]
    return hint if hint in (int, float, str, bool) else Any


@functools.lru_cache(maxsize=None)
def algorithm_schema(cls) -> type:
    """The options of policy class ``cls`` as a dataclass (Hydra structured config) derived from its constructor;
    ``_target_`` and ``tune`` added, ``fit`` typed by ``FitConfig`` (checked separately)."""
    fields = [("_target_", str, dataclasses.field(default=f"{cls.__module__}.{cls.__qualname__}")),
              ("tune", Optional[Dict[str, Any]], dataclasses.field(default=None))]
    for name, (hint, default) in constructor_options(cls).items():
        plain = _omegaconf_type(hint)
        if name == "fit":
            plain = Optional[Dict[str, Any]]
        if default is inspect.Parameter.empty:
            field = dataclasses.field(default="???")
        elif isinstance(default, (list, tuple, dict)):
            field = dataclasses.field(default_factory=lambda d=default: list(d) if isinstance(d, tuple) else d)
        else:
            field = dataclasses.field(default=default)
        fields.append((name, plain, field))
    schema = dataclasses.make_dataclass(f"{cls.__name__}Options", fields)
    _store("schema/algorithm", cls.__name__, schema)
    return schema


def fit_override(key: str, overrides) -> dict:
    """The ``fit`` fields that ``overrides`` ({glob of algorithm keys: {field: value}}, conf/fit_overrides/)
    sets for algorithm ``key``; later globs win."""
    if isinstance(overrides, DictConfig):
        overrides = OmegaConf.to_container(overrides, resolve=True)
    out = {}
    for pattern, fields in (overrides or {}).items():
        if fnmatch.fnmatchcase(key, pattern):
            out.update(fields or {})
    return out


def check_fit_overrides(overrides) -> dict:
    if isinstance(overrides, DictConfig):
        overrides = OmegaConf.to_container(overrides, resolve=True)
    if overrides is None:
        return {}
    if not isinstance(overrides, dict):
        raise ConfigError("fit_overrides", overrides, "expected a mapping {glob of algorithm keys: fit fields}")
    for pattern, fields in overrides.items():
        where = f"fit_overrides.{pattern}"
        try:
            FitConfig(**strict_fields(FitConfig, fields, "a fit block"))
        except ConfigError as err:
            raise err.within(where) from None
        except TypeError as err:
            raise ConfigError(where, fields, f"expected a mapping of fit fields ({err})") from None
    return overrides


class _Unset:
    """An option the algorithm's config does not write (the constructor's own default applies)."""

    def __repr__(self) -> str:
        return "UNSET"

    def __reduce__(self):  # copies and pickles are the one UNSET
        return "UNSET"


UNSET = _Unset()


@functools.lru_cache(maxsize=None)
def options_class(cls) -> type:
    """The constructor options of policy class ``cls`` as a frozen dataclass; each field ``UNSET`` unless the config
    writes it (an unwritten option keeps the constructor's default, written once there), ``fit`` a ``FitConfig``."""
    fields = [(name, Any, dataclasses.field(default=UNSET)) for name in constructor_options(cls)]
    return dataclasses.make_dataclass(f"{cls.__name__}Settings", fields, frozen=True)

SETTING_SUFFIXES = ("_wo_behav", "_concat", "_ie")


def row_name(key: str, setting: str | None) -> str:
    """``ALGORITHM@SETTING`` for algorithms with a feature setting (``cftopk_concat`` -> ``cftopk@concat``,
    ``ucbrank_ctr`` with setting concat -> ``ucbrank_ctr@concat``); others (ebrank, bm25) keep their key."""
    if not setting:
        return key
    base = key
    for suffix in SETTING_SUFFIXES:
        if base.endswith(suffix):
            base = base[: -len(suffix)]
            break
    return f"{base}@{setting}"



@dataclasses.dataclass(frozen=True)
class AlgorithmSpec:
    """One algorithm row resolved once (``algorithm_spec``, at the door): its key, policy class, the options its
    config writes (``options_class(cls)``, checked and typed) and its tune grid {Hyper field: [values]}. The runner
    builds the policy (``build``), its grid (``grid``) and its recorded settings (``settings``) from it; nothing
    below the door resolves the row again."""

    key: str
    cls: type
    options: Any  # an instance of options_class(cls)
    tune: Optional[Dict[str, List[Any]]] = None
    order: tuple = ()  # the written options in the config's order (what the records list them in)

    @property
    def target(self) -> str:
        return f"{self.cls.__module__}.{self.cls.__qualname__}"

    @property
    def setting(self) -> Optional[str]:
        """The feature setting (``wo_behav``, ``concat``, ``ie``) of a policy whose constructor takes one."""
        value = getattr(self.options, "setting", UNSET)
        return None if value is UNSET else value

    @property
    def name(self) -> str:
        """The row's result name (``row_name``: ``cftopk_concat`` -> ``cftopk@concat``)."""

        return row_name(self.key, self.setting)

    def kwargs(self) -> dict:
        """The constructor keyword arguments: the written options (``fit`` as the mapping the constructors take)."""
        out = {}
        for name in self.order:
            value = getattr(self.options, name)
            out[name] = dataclasses.asdict(value) if isinstance(value, FitConfig) else value
        return out

    def settings(self) -> dict:
        """The row as ``resolved_config.yaml`` and results.json record it: ``_target_``, the written options (``fit``
        complete) and ``tune``."""
        return _plain({"_target_": self.target, **self.kwargs(), "tune": self.tune})

    def grid(self, tune: bool = True) -> list[dict]:
        """Every combination of the tune grid's values ([{}] without a grid, or with ``tune`` false)."""
        if not (tune and self.tune):
            return [{}]
        names = sorted(self.tune)
        return [dict(zip(names, combo)) for combo in itertools.product(*(list(self.tune[n]) for n in names))]

    def build(self, data, name: str | None = None):
        """The policy on padded data ``data``, named ``name`` (default: the row's result name)."""
        policy = self.cls(data, **self.kwargs())
        policy.name = self.name if name is None else name
        return policy

    def with_options(self, key: str | None = None, **changes) -> AlgorithmSpec:
        """This row with some options replaced (and another key)."""
        return dataclasses.replace(self, key=self.key if key is None else key,
                                   options=dataclasses.replace(self.options, **changes),
                                   order=self.order + tuple(n for n in changes if n not in self.order))


def algorithm_spec(key: str, acfg, fit_overrides=None) -> AlgorithmSpec:
    """The ``AlgorithmSpec`` of algorithm config ``acfg`` (key ``key``), checked against the class's constructor
    (``algorithm_schema``), its ``Hyper`` (``tune`` and same-named options) and ``FitConfig`` (``fit`` with
    ``fit_overrides`` applied and the class's ``default_fit`` filled in). An ``AlgorithmSpec`` is returned as it is."""
    if isinstance(acfg, AlgorithmSpec):
        return acfg
    where = f"algorithms.{key}"
    if isinstance(acfg, DictConfig):
        acfg = OmegaConf.to_container(acfg, resolve=True)
    if not isinstance(acfg, dict):
        raise ConfigError(where, acfg, "expected an algorithm mapping with a _target_ (conf/algorithm/*.yaml)")
    if "_target_" not in acfg:
        raise ConfigError(f"{where}._target_", None, "missing: expected the import path of a Policy class",
                          show_value=False)
    try:
        cls = policy_class(str(acfg["_target_"]))
    except ConfigError as err:
        raise err.within(where) from None
    schema = algorithm_schema(cls)
    options = constructor_options(cls)
    for name, value in acfg.items():
        if name not in ("_target_", "tune") and name not in options:
            raise unknown_key(f"{where}.{name}", value, ["tune", *options], f"{cls.__name__} ({where})")
    typed_values = OmegaConf.to_container(_merge_typed(schema, acfg, where), resolve=True)
    hyper_checks = field_checks(cls.Hyper)
    kwargs = {}
    for name in acfg:
        if name in ("_target_", "tune", "fit"):
            continue
        value = typed_values[name]
        checks = checks_of(options[name][0]) + hyper_checks.get(name, [])
        check_value(f"{where}.{name}", value, checks)
        kwargs[name] = value
    if "fit" in options:
        fit = {**getattr(cls, "default_fit", {}), **(acfg["fit"] if acfg.get("fit") else {}),
               **fit_override(key, fit_overrides)}
        try:
            kwargs["fit"] = FitConfig(**strict_fields(FitConfig, fit, "a fit block")).resolved()
        except ConfigError as err:
            raise err.within(f"{where}.fit") from None
    tune = typed_values["tune"]
    if tune:
        from ltrjax.online.policies.base import check_hyper

        for name, values in tune.items():
            if not isinstance(values, list) or not values:
                raise ConfigError(f"{where}.tune.{name}", values, "expected a non-empty list of values to try")
            for value in values:
                try:
                    check_hyper(cls.Hyper, {name: value}, cls.__name__)
                except ConfigError as err:
                    raise ConfigError(f"{where}.tune.{name}", values, err.allowed) from None
    return AlgorithmSpec(key=key, cls=cls, options=options_class(cls)(**kwargs), tune=tune, order=tuple(kwargs))


def algorithm_options(key: str, acfg, fit_overrides=None) -> tuple[type, dict, dict | None]:
    """(policy class, constructor keyword arguments, tune grid) of ``algorithm_spec(key, acfg, fit_overrides)``."""
    spec = algorithm_spec(key, acfg, fit_overrides)
    return spec.cls, spec.kwargs(), spec.tune


def _merge_typed(schema, mapping, where):
    try:
        return OmegaConf.merge(writable(OmegaConf.structured(schema)), mapping)
    except ConfigKeyError as err:  # pragma: no cover - unknown keys are refused before
        raise unknown_key(join_key(where, str(err.full_key)), None, [f.name for f in dataclasses.fields(schema)],
                          where) from None
    except ValidationError as err:
        full = str(err.full_key or err.key)
        name = full.split(".", 1)[0]
        cls = policy_class(mapping["_target_"])
        hint = constructor_options(cls).get(name, (Any, None))[0] if name not in ("tune", "fit") else dict
        raise ConfigError(join_key(where, full), lookup(mapping, full), allowed_text(hint)) from None


# --------------------------------------------------------------------------- experiments
def check_offline_experiment(mapping, top: dict | None = None) -> OfflineConfig:
    """``experiment`` of ``experiment=offline`` typed as ``ltrjax.offline.config.OfflineConfig`` (its run-level keys
    left null taken from ``top``)."""
    return typed(OfflineConfig, mapping, "experiment", label="offline experiment").resolved(top)


def check_fidelity_experiment(mapping, top: dict | None = None) -> FidelityConfig:
    """``experiment`` of ``experiment=offline_fidelity`` typed as ``ltrjax.offline.config.FidelityConfig``."""
    del top
    return typed(FidelityConfig, mapping, "experiment", label="offline_fidelity experiment")


# experiment kinds that read none of the online blocks (ONLINE_ONLY): {kind: check of the experiment mapping}
OFFLINE_KINDS: dict[str, Any] = {"offline": check_offline_experiment, "offline_fidelity": check_fidelity_experiment}


def register_offline_kind(kind: str, schema: type) -> None:
    """Accept ``experiment.kind == kind`` for an experiment of the offline family, typed by dataclass ``schema``; the
    online blocks are refused as for ``experiment=offline``."""
    _store("schema", f"experiment_{kind}", schema)
    OFFLINE_KINDS[kind] = lambda mapping, top=None: typed(schema, mapping, "experiment", label=kind)


def experiment_kinds() -> tuple[str, ...]:
    return (*ONLINE_KINDS, *OFFLINE_KINDS)


def override_key(text: str) -> str:
    """The config key an override sets (``+sim.x=1`` -> ``sim.x``; ``+algorithm@algorithms.a=b`` -> ``algorithms.a``)."""
    key = str(text).lstrip("+~").split("=", 1)[0]
    return key.split("@", 1)[1] if "@" in key else key


def _refuse_unused(kind: str, overrides, plain: dict) -> None:
    for text in overrides or ():
        key = override_key(text)
        top = key.split(".", 1)[0]
        if kind in OFFLINE_KINDS and top in ONLINE_ONLY:
            where = {"click_model": "its clicks come from experiment.click_model (e.g. experiment.click_model.kind="
                                    "trust_bias)",
                     "sim": "it logs experiment.n_clicks clicks on the production ranker's lists (experiment.list_size)",
                     "layout": "it pads evaluation lists into experiment.eval_buckets buckets",
                     "algorithms": "it trains the estimators of experiment.estimators",
                     "fit_overrides": "its estimators train with experiment.train and experiment.train_overrides",
                     "population": "it runs no populations"}[top] if kind == "offline" else "an offline experiment"
            raise ConfigError(key, text, f"experiment={kind} does not read {top} ({where}); leave it out",
                              show_value=False)
        if kind != "offline" and top == "click_log" and plain.get("click_log") is not None:
            raise ConfigError("click_log", plain.get("click_log"),
                              f"only experiment=offline trains from a click log; experiment={kind} does not read it")


def _check_keys_exist(where: str, names, algorithms: dict) -> None:
    for name in names or ():
        if name not in algorithms:
            raise ConfigError(where, list(names), f"expected algorithm keys of this run: {', '.join(algorithms)}")


def _warn_tuned(overrides, algorithms: dict, tune_on: bool) -> None:
    if not tune_on:
        return
    for text in overrides or ():
        parts = override_key(text).split(".")
        if len(parts) == 3 and parts[0] == "algorithms" and parts[1] in algorithms:
            tune = algorithms[parts[1]].tune or {}
            if parts[2] in tune:
                log.warning("%s: the tune grid algorithms.%s.tune.%s %s replaces this value, since experiment.tune "
                            "is true; set experiment.tune=false to run this value alone", text, parts[1], parts[2],
                            tune[parts[2]])


# --------------------------------------------------------------------------- the whole config
def _plain(value):
    """``value`` as the plain containers its ``DictConfig`` form reads back (tuples as lists), so that the typed run
    and the recorded ``resolved_config.yaml`` hold the same values."""
    return OmegaConf.to_container(OmegaConf.create(value), resolve=True) if value is not None else None


def resolve(cfg, overrides=(), cwd: pathlib.Path | None = None) -> ResolvedRun:
    """The typed configuration of a run (``ResolvedRun``), checked before any data is loaded.

    ``cfg`` is the composed config (``python -m ltrjax.run``'s, or ``hydra.compose``'s); ``overrides`` the
    command-line overrides (to refuse groups the experiment does not read and to warn about values a tune grid
    replaces); ``cwd`` the directory relative data paths are taken from. The result has every schema default filled
    in, the dataset included (``conf/dataset/synthetic.yaml`` without ``+dataset``), each algorithm's ``fit`` with
    ``fit_overrides`` applied, and — for ``experiment=offline`` — none of the online blocks. Raises ``ConfigError``.
    """
    if isinstance(cfg, DictConfig):
        try:
            plain = OmegaConf.to_container(cfg, resolve=True)
        except OmegaConfBaseException as err:
            key = getattr(err, "full_key", "") or ""
            raise ConfigError(str(key), None, f"cannot be resolved: {str(err).splitlines()[0]}",
                              show_value=False) from None
    else:
        plain = dict(cfg)
    plain.pop("hydra", None)
    experiment = plain.get("experiment")
    if not isinstance(experiment, dict):
        raise ConfigError("experiment", experiment, "expected an experiment config (experiment=online, online_table, "
                          "ucbrank_table or offline)")
    kind = experiment.get("kind")
    if kind not in experiment_kinds():
        raise ConfigError("experiment.kind", kind, f"expected one of {', '.join(experiment_kinds())}")
    known = [f.name for f in dataclasses.fields(RunConfig)] + list(SEPARATE_BLOCKS)
    for key in plain:
        if key not in known:
            raise unknown_key(key, plain[key], known, "the configuration (conf/config.yaml)")
    _refuse_unused(kind, overrides, plain)
    top = typed(RunConfig, {k: v for k, v in plain.items() if k not in SEPARATE_BLOCKS}, "", label="run")
    run = {f.name: getattr(top, f.name) for f in dataclasses.fields(RunConfig)}
    if kind in OFFLINE_KINDS:
        run["experiment"] = OFFLINE_KINDS[kind](experiment, {k: run[k] for k in OFFLINE_TOP_LEVEL})
        for key in ONLINE_ONLY:
            run.pop(key, None)
    else:
        if top.click_log is not None:
            raise ConfigError("click_log", top.click_log, "only experiment=offline trains from a click log; "
                              "the online experiments simulate their own clicks")
        dataset = plain.get("dataset")
        dataset_kind = dataset.get("kind") if isinstance(dataset, dict) else None
        if dataset_kind == "baidu_ultr":
            raise ConfigError("dataset", "baidu_ultr", f"expected a labelled dataset for experiment={kind}: an online "
                              "simulation draws its clicks from every query's labels, and Baidu-ULTR's training "
                              "queries have none (only its annotated vali/test queries do); run experiment=offline, "
                              "which trains from its real clicks")
        run["sim"] = top.sim.resolved()  # click_rng "auto" made concrete for this backend: what the run records
        if top.sim.sessions is not None:
            check_segments(top.sim, top.sim.sessions)
        schema = OnlineExperimentConfig if kind == "online" else OnlineTableExperimentConfig
        ecfg = typed(schema, experiment, "experiment", label=f"{kind} experiment")
        run["experiment"] = ecfg
        run["click_model"] = check_click_model(plain.get("click_model"))
        if run["click_model"].kind == "tiangong" and top.sim.top_k > 10:
            raise ConfigError("sim.top_k", top.sim.top_k, "expected at most 10 with click_model=tiangong "
                              "(its click matrix has 10 positions)")
        fit_overrides = check_fit_overrides(plain.get("fit_overrides"))
        algorithms = plain.get("algorithms") or {}
        if not isinstance(algorithms, dict) or not algorithms:
            raise ConfigError("algorithms", algorithms, "expected at least one algorithm (conf/algorithm/*.yaml)")
        run["fit_overrides"] = _plain(fit_overrides)
        run["algorithms"] = {k: algorithm_spec(k, v, fit_overrides) for k, v in algorithms.items()}
        if any(override_key(o).split(".", 1)[0] == "fit_overrides" for o in overrides or ()):
            retrain = [k for k, a in run["algorithms"].items() if "fit" in a.kwargs()]
            unused = [p for p in fit_overrides if not any(fnmatch.fnmatchcase(k, p) for k in retrain)]
            if unused:
                log.warning("fit_overrides %s match none of this run's retraining algorithms (%s): they change nothing",
                            unused, ", ".join(retrain) or "none")
        _check_keys_exist("experiment.only", ecfg.only, algorithms)
        if isinstance(ecfg, OnlineTableExperimentConfig):
            _check_keys_exist("experiment.click_rate_algorithms", ecfg.click_rate_algorithms, algorithms)
        if ecfg.objective is not None:
            _check_keys_exist("experiment.objective", [ecfg.objective], algorithms)
        _warn_tuned(overrides, run["algorithms"], ecfg.tune)
    run["dataset"] = _plain(check_dataset(plain.get("dataset"), cwd))
    return ResolvedRun(**run)


def check_segments(sim: SimConfig, n_sessions: int, counted: str = "") -> None:
    """``ConfigError`` when the main phase's ``n_sessions`` sessions cannot fill ``sim``'s segments (``sim.refreshes``,
    else ``sim.n_updates``): each segment needs a session. ``counted`` says where a counted ``n_sessions`` came
    from. ``resolve`` checks a given ``sim.sessions``; the runner a count made from the data, before simulating."""
    if sim.n_segments > n_sessions:
        key = "sim.refreshes" if sim.refreshes else "sim.n_updates"
        raise ConfigError(key, sim.n_segments, f"expected at most the main phase's {n_sessions} sessions{counted}: "
                          "each segment between two updates needs at least one session")


def validate(cfg, overrides=(), cwd: pathlib.Path | None = None) -> DictConfig:
    """``resolve``'s typed run as a ``DictConfig`` (``ResolvedRun.to_config``: what ``resolved_config.yaml``
    records). Raises ``ConfigError``."""
    return resolve(cfg, overrides, cwd).to_config()


def as_run(cfg) -> ResolvedRun:
    """``cfg`` as a ``ResolvedRun``: a ``ResolvedRun`` as it is; a config not yet resolved (a composed
    ``DictConfig``, ``validate``'s result, or a mapping; Hydra's own ``hydra`` and ``defaults`` keys of an
    uncomposed ``conf/config.yaml`` ignored) resolved once (``resolve``). The door of Python callers (scripts,
    benchmarks, tests) of the runners, which take the typed run only (``ltrjax.runner.run_online``,
    ``build_simulator``)."""
    if isinstance(cfg, ResolvedRun):
        return cfg
    if isinstance(cfg, DictConfig):
        cfg = OmegaConf.masked_copy(cfg, [k for k in cfg.keys() if k not in ("hydra", "defaults")])
    else:
        cfg = {k: v for k, v in dict(cfg).items() if k not in ("hydra", "defaults")}
    return resolve(cfg)


def offline_run(cfg, kind: str = "offline") -> ResolvedRun:
    """The typed run of ``ltrjax.offline_runner.run_offline`` (``kind`` offline) or ``run_fidelity``
    (offline_fidelity), from what the Python callers (``ltrjax.api``, scripts, tests) pass: a ``ResolvedRun`` as it
    is; an ``OfflineConfig`` / ``FidelityConfig`` alone; a run mapping or ``DictConfig`` with an ``experiment`` block
    (its ``dataset``, ``data.cache_dir`` and run-level keys read); or an experiment mapping alone. A mapping's
    experiment is typed by ``ltrjax.offline.config.from_mapping`` (the run-level keys it leaves null from the top
    level, else ``OFFLINE_TOP_LEVEL``); the dataset is kept as given (None: the caller passes a query set)."""
    if isinstance(cfg, ResolvedRun):
        return cfg
    schema = FidelityConfig if kind == "offline_fidelity" else OfflineConfig
    dataset, cache_dir, top = None, None, None
    if isinstance(cfg, schema):
        exp = cfg
    else:
        if OmegaConf.is_config(cfg):
            cfg = OmegaConf.to_container(cfg, resolve=True)
        cfg = dict(cfg or {})
        if cfg.get("experiment") is not None:  # a run mapping
            top = {k: cfg.get(k) for k in OFFLINE_TOP_LEVEL}
            dataset = cfg.get("dataset")
            cache_dir = (cfg.get("data") or {}).get("cache_dir")
        exp = from_mapping(schema, dict(cfg.get("experiment", cfg) or {}))
    if isinstance(exp, OfflineConfig):
        exp = exp.resolved(top)
    defaults = RunConfig()
    return ResolvedRun(seed=exp.seed, trials=exp.trials, progress=exp.progress,
                       save_click_logs=getattr(exp, "save_click_logs", defaults.save_click_logs),
                       click_log=getattr(exp, "click_log", defaults.click_log), data=DataConfig(cache_dir=cache_dir),
                       jax=defaults.jax, experiment=exp, dataset=dataset)


def offline_experiment_config(cfg) -> OfflineConfig:
    """``offline_run(cfg).experiment``: the ``OfflineConfig`` of what a script or test passes."""
    return offline_run(cfg).experiment


def fidelity_experiment_config(cfg) -> FidelityConfig:
    """``offline_run(cfg, "offline_fidelity").experiment``."""
    return offline_run(cfg, "offline_fidelity").experiment


def offline_dataset(cfg) -> tuple[Optional[dict], Optional[str]]:
    """(``dataset`` block, ``data.cache_dir``) of ``offline_run(cfg)``."""
    run = offline_run(cfg)
    return run.dataset, run.data.cache_dir


RESOLVED_CONFIG = "resolved_config.yaml"


def write_resolved_config(cfg, out_dir) -> pathlib.Path:
    """Record the config a run actually uses (a ``ResolvedRun``, or ``validate``'s result) as
    ``OUT_DIR/resolved_config.yaml``."""
    path = pathlib.Path(out_dir) / RESOLVED_CONFIG
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, OmegaConf.to_yaml(cfg.to_config() if isinstance(cfg, ResolvedRun) else cfg))
    return path


# --------------------------------------------------------------------------- Hydra's ConfigStore
def _store(group: str, name: str, node) -> None:
    from hydra.core.config_store import ConfigStore

    if isinstance(node, type) and dataclasses.is_dataclass(node):  # typed, but without the read-only flags of a
        node = writable(OmegaConf.structured(node))  # frozen dataclass, so that a config may set its values
    ConfigStore.instance().store(group=group, name=name, node=node)


def register_configs() -> None:
    """Store the schemas in Hydra's ConfigStore (group ``schema``), so that a config of your own can extend them
    (``defaults: [/schema/sim@sim, _self_]``). Each policy's (``schema/algorithm/CLASS``) is stored when first built
    (``algorithm_schema``)."""
    for name, node in (("run", RunConfig), ("sim", SimConfig), ("click_model", ClickModelConfig),
                       ("dataset", DatasetConfig), ("dataset_synthetic", synthetic_schema()), ("fit", FitConfig),
                       ("population", PopulationConfig), ("layout", LayoutConfig), ("train", TrainConfig),
                       ("experiment_online", OnlineExperimentConfig),
                       ("experiment_online_table", OnlineTableExperimentConfig),
                       ("experiment_offline", OfflineConfig), ("experiment_offline_fidelity", FidelityConfig)):
        _store("schema", name, node)


register_configs()
