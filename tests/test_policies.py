"""Every registered algorithm config builds, jits and runs; trials reuse the compiled programs."""

from pathlib import Path

import jax
import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from ltrjax import clicks
from ltrjax.data.layout import pad_and_bucket
from ltrjax.data.toy import toy_queryset
from ltrjax.runner import make_policy, tune_grid
from ltrjax.online.policies.bm25 import BM25
from ltrjax.online.simulator import SimConfig, Simulator, compiled
from tests.online_toy import KEY, toy_data, toy_sim

CONF = Path(__file__).resolve().parent.parent / "conf"
ALGORITHMS = sorted(p.stem for p in (CONF / "algorithm").glob("*.yaml"))
# Shipped configs that combine a policy's exploration strategy with a feature setting that other configs already run
# here: the UCB strategies (ucb_topk, ucb_epsilon, ucb_randomk) run with the default setting, and each setting runs
# with UCBRank (ucbrank_concat, ucbrank_ctr, ucbrank_ie). Their combinations run under -m slow; by default they are
# covered by tests/test_ucbrank.py::test_configs_build_policies (every combination builds with its strategy and
# setting), tests/test_config.py::test_every_shipped_algorithm_config_validates, and the vectorized-equals-reference
# checks of the concat learners (test_counterfactual.py: cftopk_concat, cfepsilon_concat; test_online_learners.py:
# pdgd_concat, mgd_concat, whose one-candidate case is DBGD).
COMBINED = {f"{strategy}_{setting}" for strategy in ("ucb_topk", "ucb_epsilon", "ucb_randomk")
            for setting in ("concat", "ctr", "ie")} | {f"{learner}_concat" for learner in (
                "cftopk", "cfepsilon", "cfrandomk", "dbgd", "mgd", "pdgd")}


@pytest.fixture(scope="module")
def sim():
    """The shared toy protocol (tests/online_toy.py): a config's programs are those of the policy tests."""
    return toy_sim(toy_data(), clicks.make_click_model({"kind": "pbm"}, 5))


def algorithm_config(name: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=[f"+algorithm@probe={name}"]).probe


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in COMBINED else n
                                  for n in ALGORITHMS])
def test_algorithm_config_runs(sim, name):
    acfg = algorithm_config(name)
    if "min_impressions" in acfg:
        acfg.min_impressions = 1  # so the toy run retrains
    policy, tune = make_policy(name, acfg, sim.data)
    result = sim.run(policy, KEY, hyper=tune_grid(tune)[-1], progress=False)
    assert policy.name == name
    assert np.all(np.isfinite(result.session_ndcg)) and np.all(result.session_ndcg <= 1 + 1e-6)
    assert np.isfinite(result.warm_ndcg) and np.isfinite(result.cold_ndcg)
    for info in result.train_info:
        assert all(np.isfinite(v) for v in info.values() if isinstance(v, float))
    if policy.trains:
        assert any(not info.get("skipped") for info in result.train_info)


def test_combined_configs_are_shipped_configs():
    assert COMBINED <= set(ALGORITHMS)  # a renamed config must not drop out of the slow runs unnoticed


def test_trials_reuse_compiled_segments():
    """Its own protocol: on the shared one a later seed's busiest lane outgrows the step ladder's headroom."""
    data = pad_and_bucket(toy_queryset(n_queries=30, n_features=5, docs=(6, 14), y_max=2, seed=1, recipe="latent"),
                          n_buckets=1)
    sim = Simulator(data, clicks.make_click_model({"kind": "pbm"}, 5),
                    SimConfig(sessions=300, warmup_sessions_per_query=2, n_updates=3, min_lanes=4),
                    warmup_policy=BM25(data))
    policy, _ = make_policy("ebrank", algorithm_config("ebrank"), sim.data)
    for seed in range(3):
        sim.run(policy, jax.random.PRNGKey(seed), progress=False)
    assert compiled(policy)["segment"]._cache_size() <= sim.width_shapes()  # one per per-segment width tuple


def test_fit_overrides_large_replace_only_matching_fit_fields(sim):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["experiment=online_table", "fit_overrides=large"])
    fits = {key: make_policy(key, cfg.algorithms[key], sim.data, cfg.fit_overrides, key)[0].fit_config
            for key in ("cftopk_concat", "prior_concat", "ucbrank_ie", "ebrank")}
    assert (fits["cftopk_concat"].optimizer, fits["cftopk_concat"].batch_size, fits["cftopk_concat"].patience) == (
        "adam", 1024, 5)
    assert fits["prior_concat"].max_epochs == 50
    assert (fits["ucbrank_ie"].learning_rate, fits["ucbrank_ie"].batch_size, fits["ucbrank_ie"].patience) == (
        0.001, 4096, 5)
    assert fits["ebrank"] == make_policy("ebrank", cfg.algorithms.ebrank, sim.data)[0].fit_config
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        default = compose(config_name="config", overrides=["experiment=online_table"])
    assert make_policy("cftopk", default.algorithms.cftopk, sim.data, default.fit_overrides,
                       "cftopk")[0].fit_config.optimizer == "sgd"
