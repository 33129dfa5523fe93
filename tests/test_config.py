"""Typed configuration (ltrjax.schema), the configs shipped as package data, and the BM25 fallback."""

import dataclasses
import json
import runpy
import subprocess
import sys
import time
import tomllib
import zipfile
from pathlib import Path
from typing import Annotated

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from ltrjax.constraints import ConfigError
from ltrjax.data.queryset import QuerySet, random_split
from ltrjax.models.train import FitConfig
from ltrjax.offline.train import TrainConfig
from ltrjax.online.simulator import SimConfig
from ltrjax.schema import (RESOLVED_CONFIG, algorithm_schema, conf_dir, constructor_options, policy_class, resolve,
                           validate)
from tests.shared_data import MQ2008, needs_mq2008
from tests.tiny_run import run_ltrjax

REPO = Path(__file__).resolve().parent.parent
CONF = REPO / "conf"


def composed(*overrides):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def refused(*overrides) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        validate(composed(*overrides), overrides)
    return info.value


# --------------------------------------------------------------------------- configs as package data
def test_configs_found_in_the_checkout():
    assert conf_dir() == CONF


def test_package_data_covers_every_config():
    """What the wheel gets: setup.py maps ltrjax.conf onto conf/ (each folder a package), pyproject.toml's
    package data takes every package's YAML files."""
    setup = runpy.run_path(str(REPO / "setup.py"), run_name="setup")
    assert setup["PACKAGE_DIR"] == {"ltrjax.conf": "conf"}
    packages = set(setup["packages"]())
    folders = {p.parent for p in (REPO / "ltrjax").rglob("*.py") if "__pycache__" not in p.parts}
    assert {".".join(f.relative_to(REPO).parts) for f in folders} <= packages
    assert (CONF / "__init__.py").is_file()
    patterns = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["*"]
    configs = list(CONF.rglob("*.yaml"))
    assert configs and patterns == ["*.yaml"]
    assert {".".join(("ltrjax", *p.parent.relative_to(REPO).parts)) for p in configs} <= packages


@pytest.mark.slow
def test_wheel_contains_every_config(tmp_path):
    """Builds the wheel (pip, ~15 s with build isolation) and lists its YAML files."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO)],
                   check=True, cwd=tmp_path)
    (wheel,) = tmp_path.glob("ltrjax-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"ltrjax/conf/{p.relative_to(CONF)}" for p in CONF.rglob("*.yaml")} <= names
    assert {f"ltrjax/{p.relative_to(REPO / 'ltrjax')}" for p in (REPO / "ltrjax").rglob("*.py")} <= names


# --------------------------------------------------------------------------- the acceptance overrides
@pytest.mark.parametrize("override, key, says", [
    ("sim.entry_prob=abc", "sim.entry_prob", "a number in [0, 1]"),
    ("+sim.entry_prb=0.5", "sim.entry_prb", "did you mean entry_prob"),
    ("trials=0", "trials", "an integer >= 1"),
    ("algorithms.ebrank.epsilon=-5", "algorithms.ebrank.epsilon", ">= 0"),
    ("click_model.kind=nonsense", "click_model.kind", "one of pbm, trust_bias"),
])
def test_bad_overrides_name_key_value_and_what_is_allowed(override, key, says):
    err = refused(override)
    assert err.key == key and says in str(err)
    assert key in str(err) and "\n" not in str(err)


@pytest.mark.parametrize("overrides, key", [
    (["sim.n_updates=3", "+sim.refreshes=10"], "sim.refreshes"),
    (["sim.initial_docs=[9,5]"], "sim.initial_docs"),
    (["sim.gamma=0"], "sim.gamma"),
    (["seed=-1"], "seed"),
    (["population.memory_gb=0"], "population.memory_gb"),
    (["layout.n_buckets=0"], "layout.n_buckets"),
    (["experiment.tune_split=test"], "experiment.tune_split"),
    (["+experiment.only=[nope]"], "experiment.only"),
    (["+experiment.alpha=0.1"], "experiment.alpha"),  # a table setting: unknown to experiment=online
    (["click_model.kind=cascade"], "click_model.examination"),  # a PBM key a cascade would ignore
    (["click_model=tiangong", "sim.top_k=12"], "sim.top_k"),
    (["+algorithms.ebrank.epsilom=1"], "algorithms.ebrank.epsilom"),
    (["algorithms.ebrank.statistic=median"], "algorithms.ebrank.statistic"),
    (["algorithms.ebrank.hidden=[0]"], "algorithms.ebrank.hidden"),
    (["algorithms.ebrank.fit.optimizer=adamm"], "algorithms.ebrank.fit.optimizer"),
    (["+algorithms.ebrank.fit.patiense=3"], "algorithms.ebrank.fit.patiense"),
    (["algorithms.ebrank.tune.epsilon=[1,-2]"], "algorithms.ebrank.tune.epsilon"),
    (["+algorithms.ebrank.tune.gamma=[1]"], "algorithms.ebrank.tune.gamma"),
    (["+algorithms.random_k.fit={}"], "algorithms.random_k.fit"),  # RandomK does not retrain
    (["algorithms.ebrank._target_=no.such.Policy"], "algorithms.ebrank._target_"),
    (["+fit_overrides.ebrank.batch_size=0"], "fit_overrides.ebrank.batch_size"),
    (["click_log=logs.parquet"], "click_log"),  # only experiment=offline reads it
    (["+dataset=letor", "dataset.normalize=zscore"], "dataset.normalize"),
    (["+dataset=letor", "+dataset.n_queries=10"], "dataset.n_queries"),  # a synthetic key
    (["+dataset=mq2008", "dataset.warmup_feature=3"], "dataset.warmup_feature"),  # mq2008 has BM25
    (["+dataset=synthetic", "dataset.n_queries=many"], "dataset.n_queries"),
    (["experiment=offline", "experiment.n_sessions=0"], "experiment.n_sessions"),
    (["experiment=offline", "+experiment.n_session=5"], "experiment.n_session"),
    (["experiment=offline", "experiment.estimators=[ips,magic]"], "experiment.estimators"),
    (["experiment=offline", "experiment.train.patience=-1"], "experiment.train.patience"),
    (["experiment=offline", "+experiment.train_overrides.ips={patiense: 3}"], "experiment.train_overrides.ips.patiense"),
    (["experiment=offline", "experiment.click_model.noise=2"], "experiment.click_model.noise"),
])
def test_refused_before_any_data(overrides, key):
    assert refused(*overrides).key == key


@pytest.mark.parametrize("override", ["click_model=cascade", "click_model.kind=trust_bias", "sim.entry_prob=0.5",
                                      "+algorithm@algorithms.pdgd=pdgd", "fit_overrides=large"])
def test_online_groups_are_refused_by_offline(override):
    err = refused("experiment=offline", override)
    assert "experiment=offline does not read" in str(err)


def test_default_and_table_configs_validate():
    for overrides in ([], ["experiment=online_table"], ["experiment=ucbrank_table"], ["experiment=offline"],
                      ["experiment=online_table", "fit_overrides=large"], ["click_model=cascade"],
                      ["+dataset=letor", "dataset.path=x"]):
        validate(composed(*overrides), overrides)


def test_resolved_config_is_complete():
    cfg = validate(composed("fit_overrides=fast"), ["fit_overrides=fast"])
    assert cfg.dataset.name == "synthetic" and cfg.dataset.preset == "synthetic"  # the default dataset, recorded
    assert cfg.sim.refreshes is None and cfg.population.max_members is None
    fit = cfg.algorithms.ebrank.fit  # every FitConfig field, the fast overrides applied
    assert set(fit) == {f.name for f in dataclasses.fields(FitConfig)} and fit.batch_size == 1024
    assert cfg.click_model == {"kind": "pbm", "examination": "log2", "eta": 1.0, "cutoff": None}
    offline = validate(composed("experiment=offline"), ["experiment=offline"])
    assert not {"sim", "click_model", "algorithms", "fit_overrides", "layout", "population"} & set(offline)
    assert offline.experiment.train.min_epochs == 1 and offline.dataset.kind == "synthetic"


def test_relative_data_path_taken_from_the_working_directory(tmp_path):
    cfg = validate(composed("+dataset=letor", "dataset.path=data/letor"), cwd=tmp_path)
    assert cfg.dataset.path == str(tmp_path / "data" / "letor")


def test_tuned_value_set_on_the_command_line_warns(caplog):
    validate(composed("algorithms.ebrank.epsilon=50"), ["algorithms.ebrank.epsilon=50"])
    assert "algorithms.ebrank.tune.epsilon" in caplog.text and "experiment.tune=false" in caplog.text


# --------------------------------------------------------------------------- one design with the dataclasses
def test_from_mapping_refuses_unknown_keys():
    for cls, key in ((SimConfig, "entry_prb"), (FitConfig, "patiense"), (TrainConfig, "epochs")):
        with pytest.raises(ConfigError, match=f"no key '{key}'"):
            cls.from_mapping({key: 1})
    with pytest.raises(ConfigError, match="entry_prob"):
        SimConfig(entry_prob=1.5)


def test_fit_configs_share_one_definition_with_per_use_defaults():
    """FitConfig (online retrains) and TrainConfig (offline estimators) are both ``FitFields``: the shared fields are
    declared once (same constraints, same refusals), each use gives its own defaults."""
    from ltrjax.models.fit_config import FitFields

    shared = [f.name for f in dataclasses.fields(FitFields)]
    assert {"optimizer", "learning_rate", "batch_size", "max_epochs", "patience", "min_epochs", "clip_norm",
            "weight_decay"} == set(shared)
    for cls in (FitConfig, TrainConfig):
        assert issubclass(cls, FitFields) and [f.name for f in dataclasses.fields(cls)][:len(shared)] == shared
        with pytest.raises(ConfigError, match="learning_rate"):
            cls(learning_rate=0.0)
    online, offline = FitConfig(), TrainConfig()
    assert (online.batch_size, online.clip_norm, online.min_epochs) == (256, None, 0)
    assert (offline.batch_size, offline.clip_norm, offline.min_epochs) == (64, 5.0, 1)
    assert FitConfig(optimizer="lbfgs").optimizer == "lbfgs"  # full-batch L-BFGS: online fits only
    with pytest.raises(ConfigError, match="optimizer"):
        TrainConfig(optimizer="lbfgs")
    with pytest.raises(TypeError, match="no default"):
        @dataclasses.dataclass(frozen=True)
        class Partial(FitFields, batch_size=1):
            pass


# The papers' retraining (fit_overrides=papers): each family's optimizer settings and its code's patience, in the
# form the fits had before the online default stop rule (grace 1, no min_delta), for every retrained algorithm.
PAPERS_FIT = {"ebrank": ("sgd", 0.05, 64, 1000, 60), "cftopk_concat": ("sgd", 0.05, 64, 1000, 60),
              "cfrandomk": ("sgd", 0.01, 64, 1000, 60), "cfepsilon_concat": ("sgd", 0.01, 64, 1000, 60),
              "prior_concat": ("sgd", 0.05, 64, 1000, 30), "ucbrank_ie": ("adam", 0.001, 256, 100, 40)}


def test_fit_overrides_papers_keep_the_papers_rule_and_ebranks_default_forces_no_epochs():
    from ltrjax.schema import algorithm_options

    def fits(*overrides):
        cfg = composed("experiment=online_table", *overrides)
        return {key: FitConfig(**algorithm_options(key, cfg.algorithms[key], cfg.fit_overrides)[1]["fit"])
                for key in PAPERS_FIT}

    for key, fit in fits("fit_overrides=papers").items():
        assert (fit.optimizer, fit.learning_rate, fit.batch_size, fit.max_epochs, fit.patience) == PAPERS_FIT[key]
        assert (fit.grace, fit.min_delta, fit.min_epochs, fit.clip_norm, fit.weight_decay) == (1, 0.0, 0, None, 0.0)
        assert fit.max_examples is None
    default, papers = fits(), fits("fit_overrides=papers")
    ebrank = default.pop("ebrank")  # EBRank's prior: Adam and the online default rule, no forced epochs
    assert (ebrank.optimizer, ebrank.patience, ebrank.grace, ebrank.min_delta, ebrank.min_epochs) == (
        "adam", 0, 0, 1e-4, 0)
    assert default == {k: papers[k] for k in default}  # the others' fit blocks are the papers' (rule included)
    for key, fit in fits("fit_overrides=quick").items():  # the online default rule for every retrained algorithm
        assert (fit.patience, fit.grace, fit.min_delta, fit.min_epochs) == (0, 0, 1e-4, 0), key


def test_algorithm_schemas_derive_from_the_constructors():
    from hydra.core.config_store import ConfigStore

    from ltrjax.online.policies.dbgd import DBGD, MGD
    from ltrjax.online.policies.ebrank import EBRank
    options = constructor_options(DBGD)  # DBGD(**kwargs) -> MGD -> LinearOnlineLearner
    assert {"multileave", "n_candidates", "decay", "setting", "learning_rate", "init"} <= set(options)
    assert constructor_options(MGD)["n_candidates"][1] == 9
    fields = {f.name for f in dataclasses.fields(algorithm_schema(EBRank))}
    assert fields == {"_target_", "tune", "epsilon", "beta", "statistic", "hidden", "min_impressions", "clamp", "fit",
                      "name"}
    assert policy_class("ltrjax.online.policies.ebrank.EBRank") is EBRank
    repo = ConfigStore.instance().repo["schema"]
    assert {"sim.yaml", "click_model.yaml", "dataset.yaml", "fit.yaml", "experiment_offline.yaml"} <= set(repo)
    assert "EBRank.yaml" in repo["algorithm"]


def test_every_shipped_algorithm_config_validates():
    """All shipped algorithm configs as rows of one run (one composition, one validation: a bad config is named by
    its row's key, ``algorithms.probe_NAME``)."""
    names = sorted(path.stem for path in (CONF / "algorithm").glob("*.yaml"))
    overrides = [f"+algorithm@algorithms.probe_{name}={name}" for name in names]
    cfg = validate(composed(*overrides), overrides)
    assert {f"probe_{name}" for name in names} <= set(cfg.algorithms)


def test_make_policy_and_make_hyper_check_values():
    from ltrjax.data.layout import pad_and_bucket
    from ltrjax.runner import make_policy
    from ltrjax.data.toy import toy_queryset

    data = pad_and_bucket(toy_queryset(n_queries=40, n_features=6, docs=(6, 30), y_max=2, recipe="latent"), 1)
    acfg = OmegaConf.load(CONF / "algorithm" / "ebrank.yaml")
    with pytest.raises(ConfigError, match="algorithms.ebrank.betta"):
        make_policy("ebrank", OmegaConf.merge(acfg, {"betta": 2.0}), data)
    policy, tune = make_policy("ebrank", acfg, data)
    assert tune["epsilon"][0] == 0
    with pytest.raises(ConfigError, match=">= 0"):
        policy.make_hyper(epsilon=-1.0)


# --------------------------------------------------------------------------- the command line
def run_cli(cwd, *overrides, timeout=120):
    """``python -m ltrjax.run`` in ``cwd`` (outputs and data caches there), with the suite's persistent XLA cache."""
    return run_ltrjax(*overrides, f"hydra.run.dir={cwd / 'out'}", f"data.cache_dir={cwd / 'cache'}", cwd=cwd,
                      timeout=timeout)


@pytest.mark.parametrize("override, key", [("+sim.entry_prb=0.5", "sim.entry_prb"),
                                           ("algorithms.ebrank.epsilon=-5", "algorithms.ebrank.epsilon")])
def test_cli_refuses_with_status_2_and_one_paragraph(tmp_path, override, key):
    tic = time.perf_counter()
    proc = run_cli(tmp_path, override)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert time.perf_counter() - tic < 30  # ~5 s: nothing is loaded or compiled (the acceptance bound is 10 s)
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ltrjax: invalid configuration: ") and key in lines[0]
    assert not (tmp_path / "out" / "results.json").exists()


# --------------------------------------------------------------------------- data without BM25
def small_letor(root: Path, n_queries=(24, 8, 8)) -> Path:
    """The first queries of MQ2008 Fold1, written as a LETOR folder (train/vali/test.txt)."""
    root.mkdir(parents=True)
    for split, n in zip(("train", "vali", "test"), n_queries):
        lines, seen = [], []
        with open(MQ2008 / "Fold1" / f"{split}.txt") as f:
            for line in f:
                qid = line.split()[1]
                if qid not in seen:
                    if len(seen) == n:
                        break
                    seen.append(qid)
                lines.append(line)
        (root / f"{split}.txt").write_text("".join(lines))
    return root


def test_bm25_fallback_replaces_or_drops_the_bm25_rows(caplog):
    from ltrjax.data.layout import pad_and_bucket
    from ltrjax.runner import bm25_fallback, build_simulator

    rng = np.random.default_rng(0)
    counts = np.full(30, 8)
    qs = QuerySet(name="nobm25", features=rng.random((240, 4), dtype=np.float32), labels=rng.integers(0, 3, 240),
                  query_offsets=np.concatenate([[0], np.cumsum(counts)]), qids=np.arange(30), split=random_split(30, 0),
                  y_max=2, bm25_column=-1, feature_ids=np.array([1, 2, 5, 7], np.int32))
    data = pad_and_bucket(qs, 1)
    overrides = ["+dataset=letor", "dataset.path=x", "experiment=online_table"]
    cfg = resolve(composed(*overrides), overrides)  # the runner takes the typed run
    dropped = bm25_fallback(cfg, data)
    assert "bm25" not in dropped.algorithms and "bm25" not in dropped.experiment.eta_sweep.algorithms
    assert "dataset.bm25_feature" in caplog.text
    assert build_simulator(dropped, data).warmup_policy is None
    replaced = bm25_fallback(cfg.replace(dataset={**cfg.dataset, "warmup_feature": 5}), data)
    assert list(replaced.algorithms)[0] == "feature_5" and replaced.algorithms["feature_5"].options.feature == 5
    assert "feature_5" in replaced.experiment.eta_sweep.algorithms
    sim = build_simulator(replaced, data)
    assert sim.warmup_policy.column == 2  # feature id 5 is the third kept column


@needs_mq2008
def test_letor_folder_without_bm25_runs_the_default_command(tmp_path):
    folder = small_letor(tmp_path / "letor")
    proc = run_cli(tmp_path, "+dataset=letor", "dataset.path=letor", "dataset.bm25_feature=null", "trials=1",
                   "sim.sessions=400", "sim.n_updates=2", "experiment.tune=false", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert "dataset.bm25_feature" in proc.stderr + proc.stdout  # the logged warning
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert "bm25" not in results["algorithms"] and "ebrank" in results["algorithms"]
    assert results["warmup_sessions"] == 0
    resolved = OmegaConf.load(tmp_path / "out" / RESOLVED_CONFIG)
    assert resolved.dataset.path == str(folder) and "bm25" not in resolved.algorithms


def test_an_offline_family_kind_can_be_registered():
    from ltrjax.constraints import Range
    from ltrjax.schema import OFFLINE_KINDS, register_offline_kind

    @dataclasses.dataclass(frozen=True)
    class Inner:
        mu: Annotated[float, Range(0, 1)] = 0.1

    @dataclasses.dataclass(frozen=True)
    class Probe:
        kind: str = "probe_offline"
        n_sessions: int = 10
        inner: Inner = dataclasses.field(default_factory=Inner)

    register_offline_kind("probe_offline", Probe)

    def config(experiment):
        return {**OmegaConf.to_container(composed()), "experiment": experiment}

    try:
        cfg = validate(config({"kind": "probe_offline", "n_sessions": 5}))
        assert cfg.experiment == {"kind": "probe_offline", "n_sessions": 5, "inner": {"mu": 0.1}} and "sim" not in cfg
        with pytest.raises(ConfigError, match="experiment.inner.mu"):
            validate(config({"kind": "probe_offline", "inner": {"mu": 2}}))
        with pytest.raises(ConfigError, match="does not read sim"):
            validate(config({"kind": "probe_offline"}), ["sim.top_k=3"])
    finally:
        OFFLINE_KINDS.pop("probe_offline")


def test_fit_overrides_that_match_nothing_warn(caplog):
    validate(composed("fit_overrides=large"), ["fit_overrides=large"])
    assert "match none of this run's retraining algorithms" in caplog.text


def test_only_bm25_rows_without_bm25_is_refused():
    from ltrjax.data.layout import pad_and_bucket
    from ltrjax.runner import bm25_fallback
    from ltrjax.data.toy import toy_queryset

    qs = dataclasses.replace(toy_queryset(n_queries=40, n_features=6, docs=(6, 30), y_max=2, recipe="latent"),
                             bm25_column=-1)
    overrides = ["+dataset=letor", "dataset.path=x", "+experiment.only=[bm25]"]
    with pytest.raises(ConfigError, match="experiment.only"):
        bm25_fallback(resolve(composed(*overrides), overrides), pad_and_bucket(qs, 1))


def test_offline_fidelity_is_checked_like_offline():
    validate(composed("experiment=offline_fidelity"), ["experiment=offline_fidelity"])
    assert refused("experiment=offline_fidelity", "experiment.prs.noise=[0.1,2]").key == "experiment.prs.noise"
    assert "does not read click_model" in str(refused("experiment=offline_fidelity", "click_model=cascade"))
