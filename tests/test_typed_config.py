"""The configuration is typed once, at the door (``ltrjax.schema.resolve``), and flows one way: the runners read
attributes of the frozen ``ResolvedRun`` and restate no default (issue 23)."""

import ast
import dataclasses
import pathlib

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from ltrjax.clicks import KIND_KEYS
from ltrjax.offline.config import FidelityConfig, OfflineConfig
from ltrjax.online.simulator import SimConfig
from ltrjax.schema import (DataConfig, EtaSweepConfig, JaxConfig, LayoutConfig, OnlineExperimentConfig,
                           OnlineTableExperimentConfig, PopulationConfig, ResolvedRun, as_run, resolve, validate)

ROOT = pathlib.Path(__file__).resolve().parents[1]


def composed(*overrides):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        return compose("config", overrides=list(overrides))


def test_default_config_resolves_to_the_typed_run():
    run = resolve(composed(), [])
    assert isinstance(run, ResolvedRun) and run.kind == "online"
    assert isinstance(run.experiment, OnlineExperimentConfig)
    assert isinstance(run.sim, SimConfig) and isinstance(run.population, PopulationConfig)
    assert isinstance(run.layout, LayoutConfig) and isinstance(run.data, DataConfig) and isinstance(run.jax, JaxConfig)
    assert (type(run.seed), type(run.trials), type(run.progress), type(run.save_click_logs)) == (int, int, bool, bool)
    assert set(run.click_model.settings()) == {"kind", *KIND_KEYS[run.click_model.kind]}
    assert all("_target_" in a.settings() for a in run.algorithms.values()) and run.dataset["kind"] == "synthetic"
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.trials = 5  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.experiment.tune = False  # type: ignore[misc]


def test_table_and_offline_configs_resolve_to_their_typed_blocks():
    table = resolve(composed("experiment=online_table"), ["experiment=online_table"])
    assert isinstance(table.experiment, OnlineTableExperimentConfig)
    assert isinstance(table.experiment.eta_sweep, EtaSweepConfig)
    offline = resolve(composed("experiment=offline"), ["experiment=offline"])
    assert isinstance(offline.experiment, OfflineConfig) and offline.experiment.seed == offline.seed
    assert offline.sim is offline.population is offline.layout is offline.click_model is offline.algorithms is None
    fidelity = resolve(composed("experiment=offline_fidelity"), ["experiment=offline_fidelity"])
    assert isinstance(fidelity.experiment, FidelityConfig)


@pytest.mark.parametrize("overrides", [[], ["experiment=online_table"], ["experiment=offline"]])
def test_validate_is_the_typed_runs_dictconfig_and_resolving_it_again_changes_nothing(overrides):
    run = resolve(composed(*overrides), overrides)
    assert OmegaConf.to_yaml(validate(composed(*overrides), overrides)) == OmegaConf.to_yaml(run.to_config())
    assert as_run(run) is run and as_run(run.to_config()) == run


CONFIG_NAMES = {"cfg", "ecfg", "scfg", "exp", "pop", "acfg", "config", "run", "top", "fx", "experiment"}
RESULT_NAMES = {"res", "result", "results", "old", "info", "i", "timings"}  # plain result dicts, not configs
# the offline runner's functions: everything reads the typed OfflineConfig / FidelityConfig (experiment_config and
# fidelity_config are the door of callers that pass plain mappings; they convert them once, restating no default)
OFFLINE_RUNNERS = {"ltrjax/offline_runner.py": ("run_offline", "load_queryset", "_run_trial", "finished_trials",
                                                "offline_markdown", "run_fidelity", "fidelity_header")}


def _receiver(node: ast.AST) -> str:
    """The innermost name of ``a.b.c`` (``c``) or of a name (``a``)."""
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def config_reads(tree: ast.AST) -> list[str]:
    """``.get(`` calls on a config object (receiver named like one, or ``X.experiment`` / ``X.sim``...), and any
    ``.get(key, default)`` with a literal default on anything but a result dict (``RESULT_NAMES``): options'
    defaults restated outside the schemas."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            receiver = _receiver(node.func.value)
            literal_default = (len(node.args) > 1 and isinstance(node.args[1], (ast.Constant, ast.Dict, ast.List))
                               and receiver not in RESULT_NAMES)
            if receiver in CONFIG_NAMES or receiver in {f.name for f in dataclasses.fields(ResolvedRun)} or \
                    literal_default:
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_runner_reads_no_config_with_get_or_defaults():
    tree = ast.parse((ROOT / "ltrjax" / "runner.py").read_text())
    assert config_reads(tree) == []
    assert "OmegaConf" not in (ROOT / "ltrjax" / "runner.py").read_text()  # it takes the typed run, never a mapping


def test_offline_runners_read_no_config_with_get_or_defaults():
    for path, names in OFFLINE_RUNNERS.items():
        tree = ast.parse((ROOT / path).read_text())
        functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        for name in names:
            assert config_reads(functions[name]) == [], f"{path}:{name}"


def test_benchmarks_read_the_typed_run():
    """The benchmark scripts measure the configured protocol: they take the typed run (``benchlib.load_run``, as
    ``python -m ltrjax.run`` resolves it) and read no config with ``.get`` or a default of their own."""
    scripts = sorted((ROOT / "benchmarks").glob("*.py"))
    assert scripts
    for path in scripts:
        assert config_reads(ast.parse(path.read_text())) == [], path.name
    assert "def load_run" in (ROOT / "benchmarks" / "benchlib.py").read_text()


def test_the_scan_finds_what_it_looks_for():
    code = ("def f(cfg, run, results, options):\n    cfg.get('tune', True)\n    run.experiment.get('only')\n"
            "    options.get('x', 1)\n    results.get('y', 1)\n")
    assert len(config_reads(ast.parse(code))) == 3


def test_a_config_of_your_own_extends_the_frozen_schemas(tmp_path):
    (tmp_path / "mine.yaml").write_text("defaults:\n  - /schema/sim@sim\n  - /schema/population@population\n"
                                        "  - _self_\nsim:\n  top_k: 3\npopulation:\n  max_members: 4\n")
    with initialize_config_dir(config_dir=str(tmp_path), version_base=None):
        cfg = compose("mine", overrides=["population.memory_gb=2"])
        assert (cfg.sim.top_k, cfg.population.max_members, cfg.population.memory_gb) == (3, 4, 2.0)
        with pytest.raises(Exception, match="population.memory_gb"):
            compose("mine", overrides=["population.memory_gb=lots"])  # still typed


# the door: modules that read untyped input by design, left out of the package scan
DOOR_MODULES = {
    "ltrjax/api.py": "the Python API's door: plain arguments and mappings converted to typed configs",
    "ltrjax/run.py": "the Hydra entry point: Hydra's DictConfig and HydraConfig",
    "ltrjax/schema.py": "the door itself: resolve, as_run, offline_run, algorithm_spec type the composed config",
    "ltrjax/structured.py": "the door's machinery: a mapping typed as a dataclass (schema.typed)",
    "ltrjax/collect.py": "reads finished run folders (results.json records and their override lists), not a config",
    "ltrjax/score.py": "a command-line door: a saved model's metadata (JSON written by ltrjax.saved)",
    "ltrjax/report/": "renders results.json records read back (JSON data), never a config",
}
# below the door, reads of genuinely dynamic data: (module, the call as the scan prints it) -> why it may stay
ALLOWED_READS = {
    ("ltrjax/offline/config.py", "self.train_overrides.get(name, {})"):
        "per-estimator table: an estimator without an entry has no overrides (the defaults live in TrainConfig)",
    ("ltrjax/offline/config.py", "self.estimator_options.get(name, {})"):
        "per-estimator table: an estimator without an entry keeps its constructor's defaults",
    ("ltrjax/offline/config.py", "current.get(k, {})"):
        "override(): merges a mapping into the per-estimator tables (the offline configs' own door)",
    ("ltrjax/offline/click_likelihood.py", "state.get('intercept', 0.0)"):
        "a fitted estimator's state pytree: RegressionEM carries an intercept only when it fits one",
    ("ltrjax/offline/click_stream.py", "totals.get(key, 0)"): "running counters keyed by what a log holds",
    ("ltrjax/offline/click_stream.py", "totals.get('usable', 0)"): "the same running counters",
    ("ltrjax/offline/click_stream.py", "totals.get('usable_clicks', 0)"): "the same running counters",
    ("ltrjax/offline/click_stream.py", "totals.get('usable_shown', 0)"): "the same running counters",
    ("ltrjax/offline/fidelity_experiment.py", "(part or {}).get('tables', {})"):
        "a part's results (a results.json block) that may lack tables",
    ("ltrjax/offline/gbdt.py", "t.get('num_leaves', 1)"): "LightGBM's dumped model (JSON from the library)",
    ("ltrjax/offline/gbdt.py", "node.get('leaf_index', 0)"): "LightGBM's dumped model (JSON from the library)",
    ("ltrjax/offline/gbdt.py", "node.get('missing_type', 'None')"): "LightGBM's dumped model (JSON from the library)",
    ("ltrjax/offline/per_query.py", "row.get('n_queries', 0)"): "a group's row of per-query results",
    ("ltrjax/online/memory.py", "memo.steps.get('main', 0)"): "step counters per phase (phases absent: none run)",
    ("ltrjax/online/memory.py", "stats.get('bytes_in_use', 0)"): "a device's memory_stats() (absent on some backends)",
    ("ltrjax/online/plan.py", "memo.steps.get(phase, 0)"): "step counters per phase (phases absent: none run)",
    ("ltrjax/online/transfers.py", "meter.bytes.get(part, 0)"): "byte counters per transferred part",
    ("ltrjax/record.py", "config.get('kind')"): "a results.json file's recorded config block (JSON, old files too)",
}


def package_config_reads() -> tuple[dict[tuple[str, str], str], set[str]]:
    """Every ``config_reads`` hit of the package outside ``DOOR_MODULES`` ({(module, call): line}) and the modules
    scanned."""
    found, scanned = {}, set()
    for path in sorted((ROOT / "ltrjax").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if any(rel == door or (door.endswith("/") and rel.startswith(door)) for door in DOOR_MODULES):
            continue
        scanned.add(rel)
        for hit in config_reads(ast.parse(path.read_text())):
            line, call = hit.split(": ", 1)
            found[(rel, call)] = line
    return found, scanned


def test_the_package_below_the_door_reads_no_config_with_get_or_defaults():
    """Issue 43: below the door (every module of ``ltrjax`` but ``DOOR_MODULES``) no config is read with ``.get``
    and no default restated with ``.get(key, default)``; what remains reads dynamic data (``ALLOWED_READS``, each
    with its reason). An allowance that no longer matches anything is stale and fails too."""
    found, scanned = package_config_reads()
    assert {"ltrjax/runner.py", "ltrjax/offline_runner.py", "ltrjax/clicks.py", "ltrjax/experiment.py",
            "ltrjax/online/simulator.py", "ltrjax/online/policies/ebrank.py", "ltrjax/offline/experiment.py",
            "ltrjax/data/registry.py"} <= scanned
    unexpected = {f"{rel}:{line[5:]}: {call}" for (rel, call), line in found.items() if (rel, call) not in ALLOWED_READS}
    assert not unexpected, sorted(unexpected)
    stale = [key for key in ALLOWED_READS if key not in found]
    assert not stale, stale
    for door in DOOR_MODULES:
        assert (ROOT / door).exists(), door


def test_click_models_read_no_config_with_get_or_defaults():
    """``make_click_model`` and the relevance mappings read the typed ``ClickModelConfig``: no default restated."""
    assert config_reads(ast.parse((ROOT / "ltrjax" / "clicks.py").read_text())) == []


def test_online_and_offline_click_models_share_one_set_of_defaults():
    from ltrjax.clicks import ClickModelConfig, click_model_config, make_click_model
    from ltrjax.constraints import ConfigError
    from ltrjax.offline.config import OfflineClickModel, OfflineConfig

    shared = [f.name for f in dataclasses.fields(ClickModelConfig)]
    offline = OfflineClickModel()
    assert isinstance(offline, ClickModelConfig)
    assert {k: getattr(offline, k) for k in shared} == dataclasses.asdict(ClickModelConfig())
    # the offline experiment's own choice (PRS §5.2's (1/k)^eta), written once, in OfflineConfig
    assert OfflineConfig().click_model.examination == "inverse" and ClickModelConfig().examination == "log2"
    typed = click_model_config({"kind": "pbm", "relevance": "binary", "noise": 0.1})  # an offline mapping
    assert typed == ClickModelConfig()
    with pytest.raises(ConfigError, match="click_model.examinaton"):
        click_model_config({"kind": "pbm", "examinaton": "log2"})
    for cfg in (None, {}, ClickModelConfig(), OfflineClickModel(examination="log2")):
        assert (make_click_model(cfg, 5).examination == make_click_model({"kind": "pbm"}, 5).examination).all()


def test_the_click_model_reaches_the_simulator_typed(monkeypatch):
    """From ``conf/click_model/trust_bias.yaml`` and a command-line override to ``make_click_model``: a typed
    ``ClickModelConfig`` all the way (no mapping re-read with defaults of its own), and the model it builds is that
    config's."""
    from ltrjax import runner
    from ltrjax.clicks import ClickModelConfig, examination, make_click_model, vardasbi_trust_epsilons
    from ltrjax.data.toy import toy_queryset

    overrides = ["click_model=trust_bias", "click_model.eps_minus_scale=0.4", "sim.top_k=4"]
    run = resolve(composed(*overrides), overrides)
    assert type(run.click_model) is ClickModelConfig and run.click_model.eps_minus_scale == 0.4
    seen = []

    def spy(cfg, *args, **kwargs):
        seen.append(cfg)
        return make_click_model(cfg, *args, **kwargs)

    monkeypatch.setattr(runner, "make_click_model", spy)
    sim = runner.build_simulator(run, runner.padded_data(run, toy_queryset(n_queries=12, n_features=5)))
    assert seen == [run.click_model] and isinstance(seen[0], ClickModelConfig)
    theta = examination("inverse", 4)
    eps_plus, eps_minus = vardasbi_trust_epsilons(4, 0.4)
    np.testing.assert_allclose(np.asarray(sim.click_model.beta), theta * eps_minus, rtol=1e-6)
    assert run.to_config().click_model == {"kind": "trust_bias", **{k: getattr(run.click_model, k)
                                                                   for k in KIND_KEYS["trust_bias"]}}


def test_an_algorithm_option_reaches_the_policy_typed(monkeypatch, tmp_path):
    """From ``conf/algorithm/ebrank.yaml`` and a command-line override to the function that uses EBRank's
    ``min_impressions`` (``member_splits`` at each retrain, through ``run_online``): the option is typed once at the
    door into an ``AlgorithmSpec`` whose options are a frozen dataclass, and no mapping (dict or DictConfig) carries
    it below; the runner builds the policy from the spec without resolving the row again."""
    from omegaconf import DictConfig

    from ltrjax import runner, schema
    from ltrjax.data.toy import toy_queryset
    from ltrjax.models.train import FitConfig
    from ltrjax.online.policies import ebrank as ebrank_module
    from ltrjax.schema import AlgorithmSpec

    assert OmegaConf.load(ROOT / "conf" / "algorithm" / "ebrank.yaml").min_impressions == 20  # the YAML's value
    overrides = ["algorithms.ebrank.min_impressions=7", "+experiment.only=[ebrank]", "experiment.tune=false",
                 "trials=1", "progress=false", "sim.sessions=300", "sim.warmup_sessions_per_query=2",
                 "sim.n_updates=2", "sim.min_lanes=4", "algorithms.ebrank.fit.max_epochs=2"]
    run = resolve(composed(*overrides), overrides)
    spec = run.algorithms["ebrank"]
    assert type(spec) is AlgorithmSpec and spec.cls is ebrank_module.EBRank
    assert dataclasses.is_dataclass(spec.options) and not isinstance(spec.options, (dict, DictConfig))
    assert spec.options.min_impressions == 7 and type(spec.options.min_impressions) is float  # its annotation
    assert type(spec.options.fit) is FitConfig and spec.options.fit.max_epochs == 2
    assert spec.options.epsilon == 20.0 and spec.tune == {"epsilon": [0, 0.1, 1, 10, 20, 100, 1000]}  # the YAML's

    def no_resolving(*args, **kwargs):
        raise AssertionError("an algorithm row resolved again below the door")

    monkeypatch.setattr(schema, "algorithm_spec", no_resolving)
    monkeypatch.setattr(runner, "algorithm_spec", no_resolving)
    built, seen = [], []
    original_init, original_splits = ebrank_module.EBRank.__init__, ebrank_module.member_splits

    def init(self, data, **kwargs):
        built.append(kwargs)
        original_init(self, data, **kwargs)

    def splits(data, counters, entered, n_logs, min_impressions, *args):
        seen.append(min_impressions)
        return original_splits(data, counters, entered, n_logs, min_impressions, *args)

    monkeypatch.setattr(ebrank_module.EBRank, "__init__", init)
    monkeypatch.setattr(ebrank_module, "member_splits", splits)
    queryset = toy_queryset(n_queries=30, n_features=5, docs=(6, 14), y_max=2, seed=2, recipe="latent")
    runner.run_online(run, tmp_path, queryset)
    assert built and all(k["min_impressions"] == 7 and not isinstance(k["min_impressions"], (dict, DictConfig))
                         for k in built)
    assert seen and set(seen) == {7.0} and all(type(v) is float for v in seen)  # EBRank.min_impressions, Eq. 14
