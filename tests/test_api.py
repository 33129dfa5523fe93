"""The Python API: every documented name resolves, importing changes no global state, dropped policies
are freed with their compiled programs, and the array constructor groups documents by query."""

import gc
import subprocess
import sys
import weakref

import jax
import numpy as np
import pytest

import ltrjax
from ltrjax.clicks import make_click_model
from ltrjax.data.layout import pad_and_bucket
from ltrjax.data.toy import toy_queryset
from ltrjax.online.policies.ebrank import EBRank
from ltrjax.online.policies.random_k import RandomK
from ltrjax.online.simulator import SimConfig, Simulator, compiled


def test_every_exported_name_resolves():
    for name in ltrjax.__all__:
        assert getattr(ltrjax, name) is not None, name
    assert ltrjax.EBRank is EBRank and issubclass(ltrjax.RandomK, ltrjax.Policy)
    with pytest.raises(AttributeError):
        ltrjax.no_such_name  # noqa: B018


IMPORT_CHECK = """
import gc, logging, sys, warnings
import matplotlib
matplotlib.use("svg")
import jax
import flax, optax, scipy.sparse, scipy.special, pyarrow.parquet, hydra, omegaconf  # dependencies' own import-time filters
before = (matplotlib.get_backend(), jax.config.jax_compilation_cache_dir, jax.config.jax_enable_x64,
          logging.getLogger().level, len(logging.getLogger().handlers), len(warnings.filters),
          logging.getLogger("jax._src.xla_bridge").level, gc.get_threshold())
import ltrjax
for name in ltrjax.__all__:
    getattr(ltrjax, name)
import ltrjax.runner, ltrjax.report.plots, ltrjax.report.online_report, ltrjax.experiment, ltrjax.offline_runner
import ltrjax.gc_tuning
after = (matplotlib.get_backend(), jax.config.jax_compilation_cache_dir, jax.config.jax_enable_x64,
         logging.getLogger().level, len(logging.getLogger().handlers), len(warnings.filters),
         logging.getLogger("jax._src.xla_bridge").level, gc.get_threshold())
print(before == after, before, after)
sys.exit(0 if before == after else 1)
"""


def test_import_changes_no_global_state():
    proc = subprocess.run([sys.executable, "-c", IMPORT_CHECK], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]


def test_dropped_policies_and_their_programs_are_freed():
    """Compiled programs live on the policy object: a loop building policies keeps none of the old ones."""
    qs = toy_queryset(n_queries=12, docs=(6, 10), n_features=4, seed=0)
    data = pad_and_bucket(qs, 1)
    sim = Simulator(data, make_click_model({"kind": "pbm"}, 5), SimConfig(sessions=40, n_updates=2,
                                                                         warmup_sessions_per_query=0))
    refs = []
    for _ in range(2):  # one seed and key: the later policies' programs are the first's (read from the XLA cache)
        for policy in (RandomK(data, seed=0), EBRank(data, fit={"max_epochs": 2})):
            sim.run(policy, jax.random.PRNGKey(0), progress=False)
            assert "segment" in compiled(policy)
            refs.append(weakref.ref(policy))
        del policy
    gc.collect()
    alive = [r() for r in refs if r() is not None]
    assert not alive, f"{len(alive)} dropped policies are still referenced: {[type(p).__name__ for p in alive]}"


def test_queryset_from_arrays_groups_by_query_in_order_of_appearance():
    qids = np.array([7, 3, 7, 3, 9])
    feats = np.arange(10, dtype=np.float32).reshape(5, 2)
    qs = ltrjax.queryset_from_arrays(feats, [0, 1, 2, 0, 1], qids, split=[0, 1, 2])
    assert qs.qids.tolist() == [7, 3, 9] and qs.query_offsets.tolist() == [0, 2, 4, 5]
    assert qs.features[:, 0].tolist() == [0, 4, 2, 6, 8] and qs.labels.tolist() == [0, 2, 1, 0, 1]
    assert qs.y_max == 2 and qs.split.tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match="one entry per query"):
        ltrjax.queryset_from_arrays(feats, [0, 1, 2, 0, 1], qids, split=[0, 1])


# --------------------------------------------------------------------------- the API equals the command line
from tests.shared_data import MQ2008, needs_mq2008  # noqa: E402
from tests.test_run import run_cli  # noqa: E402

SESSIONS = 400  # both sides use it; everything else is the shipped protocol (20 x #queries warm-up sessions)


def readme_snippet(path, sessions):
    """The documented snippet (docs/python-api.md "The same as the command line"), the
    session count and trials made small; returns its summary."""
    qs = ltrjax.load_dataset("mq2008", path=path)                      # conf/dataset/mq2008.yaml, as +dataset=mq2008
    click_model = ltrjax.make_click_model({"kind": "pbm", "examination": "log2"}, 5)   # click_model=ebrank_pbm
    results = ltrjax.compare_online(qs, {"ebrank": ltrjax.algorithm("ebrank")},         # conf/algorithm/ebrank.yaml
                                    click_model=click_model, sim=ltrjax.SimConfig(sessions=sessions, n_updates=2),
                                    trials=1, seed=0)
    return ltrjax.summarize_online(results)


@needs_mq2008
def test_readme_snippet_equals_the_cli_on_mq2008_trial_0(tmp_path):
    # run_cli's command line writes its programs to the suite's persistent XLA cache (tests/tiny_run.py), where the
    # API side below finds them
    proc = run_cli(tmp_path, "+dataset=mq2008", f"dataset.path={MQ2008}", "trials=1", f"sim.sessions={SESSIONS}",
                   "sim.n_updates=2", "experiment.tune=false", "~algorithms.bm25", "~algorithms.random_k",
                   "~algorithms.ebrank_wo_explore", "~algorithms.ebrank_only_prior", "~algorithms.ebrank_only_behav")
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    trial = json.loads((tmp_path / "out" / "results.json").read_text())["algorithms"]["ebrank"]["trials"][0]
    api = readme_snippet(str(MQ2008), SESSIONS)["ebrank"]
    for metric in ("cum_ndcg", "warm_ndcg", "cold_ndcg"):
        assert api[metric] == pytest.approx(trial[metric], rel=1e-6, abs=1e-7), metric


@needs_mq2008
def test_load_dataset_by_name_equals_the_cli_dataset():
    from ltrjax.data.registry import load_dataset
    from ltrjax.schema import validate

    with hydra_compose("+dataset=mq2008", f"dataset.path={MQ2008}") as cfg:
        cli = load_dataset(validate(cfg, (), cwd=None).dataset)
    api = ltrjax.load_dataset("mq2008", path=str(MQ2008))
    for field in ("features", "labels", "query_offsets", "qids", "split", "feature_ids"):
        np.testing.assert_array_equal(getattr(api, field), getattr(cli, field), err_msg=field)
    assert (api.bm25_column, api.y_max) == (cli.bm25_column, cli.y_max) and api.bm25_column >= 0
    assert api.preprocess_report == cli.preprocess_report


def test_every_shipped_dataset_name_resolves_as_the_cli_does(tmp_path, monkeypatch):
    from ltrjax.data.registry import dataset_settings
    from ltrjax.schema import validate

    monkeypatch.chdir(tmp_path)
    names = ltrjax.shipped_datasets()
    assert {"mq2008", "synthetic", "mslr10k", "yahoo"} <= set(names)
    for name in names:
        offline_only = ("experiment=offline",) if name == "baidu_ultr" else ()  # unlabelled training queries
        with hydra_compose(f"+dataset={name}", "dataset.min_docs=3", *offline_only) as cfg:
            cli = dict(validate(cfg, (), cwd=tmp_path).dataset)
        assert dataset_settings(name, min_docs=3) == cli, name
    qs = ltrjax.load_dataset("synthetic", n_queries=60)
    with hydra_compose("+dataset=synthetic", "dataset.n_queries=60") as cfg:
        from ltrjax.data.registry import load_dataset

        cli = load_dataset(validate(cfg, (), cwd=tmp_path).dataset)
    np.testing.assert_array_equal(qs.features, cli.features)
    np.testing.assert_array_equal(qs.labels, cli.labels)


def test_protocol_defaults_equal_the_cli():
    """``SimConfig()`` and the snippet's click model are the command line's defaults."""
    from omegaconf import OmegaConf

    with hydra_compose() as cfg:
        assert SimConfig.from_mapping(OmegaConf.to_container(cfg.sim, resolve=True)) == SimConfig()
        cli_clicks = make_click_model(OmegaConf.to_container(cfg.click_model, resolve=True), 5)
    snippet = make_click_model({"kind": "pbm", "examination": "log2"}, 5)
    a, b = jax.tree_util.tree_flatten(cli_clicks), jax.tree_util.tree_flatten(snippet)
    assert a[1] == b[1]
    for x, y in zip(a[0], b[0]):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_compare_online_refuses_a_policy_that_cannot_run_before_any_simulation():
    qs = toy_queryset(n_queries=12, n_features=4, docs=(6, 10), seed=0)
    ran = []

    def broken(data):
        raise ValueError("needs 99 features")

    class Counting(RandomK):
        def init(self, key, data):
            ran.append(self.name)
            return super().init(key, data)

    click_model = make_click_model({"kind": "pbm", "examination": "log2"}, 5)
    with pytest.raises(ValueError, match="policy 'broken' cannot run on dataset .*needs 99 features"):
        ltrjax.compare_online(qs, {"first": Counting, "broken": broken}, click_model=click_model,
                              sim=SimConfig(sessions=50, n_updates=1, warmup_sessions_per_query=0))
    assert len(ran) == 1, ran  # built and initialised once by the check; never simulated
    from ltrjax.constraints import ConfigError

    with pytest.raises(ConfigError, match="sim.top_k = 11: expected at most 10"):
        ltrjax.compare_online(qs, {"r": RandomK}, click_model=make_click_model({"kind": "pbm"}, 11),
                              sim=SimConfig(top_k=11, sessions=50))


import contextlib  # noqa: E402


@contextlib.contextmanager
def hydra_compose(*overrides):
    from hydra import compose, initialize_config_dir

    from ltrjax.schema import conf_dir

    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        yield compose(config_name="config", overrides=list(overrides))


def test_offline_settings_have_the_command_lines_defaults():
    """``ltrjax.OfflineSettings`` keeps ``experiment=offline``'s defaults (``OfflineConfig``): same budget, lists,
    estimators, schedule; only trials (1), seed (0) and progress (off) are fixed instead of read from the top level."""
    import ltrjax
    from ltrjax.offline.config import OfflineConfig, as_mapping

    api, cli = ltrjax.OfflineSettings().experiment(), as_mapping(OfflineConfig())
    assert set(api) <= set(cli)
    assert {k for k in api if api[k] != cli[k]} == {"trials", "seed", "progress"}
    assert cli["trials"] is None and cli["seed"] is None and cli["progress"] is None  # top-level values on the CLI


def test_relaxed_garbage_collection_raises_the_first_threshold_only():
    """``ltrjax.gc_tuning``: the entry points (here ``configure_jax``, as ``python -m ltrjax.run`` and the experiment
    scripts call it) raise the collector's first threshold, keep the others, and never lower it."""
    from ltrjax.experiment import configure_jax
    from ltrjax.gc_tuning import FIRST_GENERATION_THRESHOLD, relax_garbage_collection

    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 11, 12)
        configure_jax()
        assert gc.get_threshold() == (FIRST_GENERATION_THRESHOLD, 11, 12)
        relax_garbage_collection(1000)
        assert gc.get_threshold() == (FIRST_GENERATION_THRESHOLD, 11, 12)
        relax_garbage_collection(10 * FIRST_GENERATION_THRESHOLD)
        assert gc.get_threshold() == (10 * FIRST_GENERATION_THRESHOLD, 11, 12)
    finally:
        gc.set_threshold(*before)
