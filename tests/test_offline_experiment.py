"""Training loop, evaluation against a NumPy reference, and a tiny end-to-end ``run_offline``."""

import json

import jax
import jax.numpy as jnp
import numpy as np

from ltrjax.schema import offline_run
from ltrjax.offline.estimators import LabeledBatch, make_estimator
from ltrjax.offline.evaluate import make_evaluator, make_validator
from ltrjax.offline_runner import run_offline
from ltrjax.offline.lists import bucket_queries, pad_queries
from ltrjax.data.toy import toy_queryset
from ltrjax.offline.train import TrainConfig, fit


def _ndcg_ref(scores, labels, k):
    order = np.argsort(-scores, kind="stable")
    disc = 1 / np.log2(np.arange(2, len(scores) + 2))
    gains = 2.0 ** labels - 1
    dcg = np.sum(gains[order][:k] * disc[:k])
    idcg = np.sum(np.sort(gains)[::-1][:k] * disc[:k])
    return dcg / idcg if idcg > 0 else 0.0


def _ap_ref(scores, labels):
    rel = labels[np.argsort(-scores, kind="stable")] >= 1
    if not rel.any():
        return 0.0
    return float(np.sum(np.cumsum(rel) / np.arange(1, len(rel) + 1) * rel) / rel.sum())


def test_evaluator_matches_numpy_reference():
    qs = toy_queryset(n_queries=40, docs=(3, 40), seed=3)
    buckets = bucket_queries(qs, np.arange(40), np.random.default_rng(0), n_buckets=3)
    est = make_estimator("labeled")
    params, state = est.init(jax.random.PRNGKey(0), qs.n_features)
    params = {"ranker": jax.tree_util.tree_map(lambda x: x + 0.3 * jnp.ones_like(x), params["ranker"])}
    res = make_evaluator(est, buckets, drop_no_relevant=True)(params, state)
    feats = qs.features @ np.asarray(params["ranker"]["params"]["Dense_0"]["kernel"])[:, 0]
    per = {f"ndcg@{k}": [] for k in (1, 3, 5, 10)} | {"map": []}
    for q in range(40):
        sl = qs.query_slice(q)
        s, y = feats[sl], qs.labels[sl]
        if not (y > 0).any():
            continue
        for k in (1, 3, 5, 10):
            per[f"ndcg@{k}"].append(_ndcg_ref(s, y, k))
        per["map"].append(_ap_ref(s, y))
    assert res["n_queries"] == len(per["map"])
    for name, vals in per.items():
        np.testing.assert_allclose(res[name], np.mean(vals), rtol=1e-4)
    np.testing.assert_allclose(make_validator(est, buckets)(params, state), res["ndcg@10"], rtol=1e-5)


def test_fit_improves_validation_and_keeps_the_best_epoch():
    qs = toy_queryset(n_queries=80, seed=4)
    rng = np.random.default_rng(0)
    train = pad_queries(qs, np.flatnonzero(qs.split == 0), rng)
    vali = bucket_queries(qs, np.flatnonzero(qs.split == 1), rng)
    est = make_estimator("labeled", form="listwise")
    data = LabeledBatch(features=jnp.asarray(train.features), labels=jnp.asarray(train.labels, jnp.float32),
                        mask=jnp.asarray(train.mask))
    val = make_evaluator(est, vali)
    res = fit(est, data, jax.random.PRNGKey(0), qs.n_features, TrainConfig(batch_size=16, max_epochs=15, patience=50),
              validate=lambda p, s: val(p, s)["ndcg@10"])
    h = res.history
    assert h["epochs"] == 15 and h["n_batches"] == -(-data.mask.shape[0] // 16)
    assert h["best_vali"] == max(h["vali"])
    assert h["best_epoch"] == int(np.argmax(h["vali"])) + 1
    assert val(res.params, res.state)["ndcg@10"] == h["best_vali"]
    assert h["loss"][-1] < h["loss"][0]


def test_run_offline_end_to_end(tmp_path):
    qs = toy_queryset(n_queries=120, seed=5)
    cfg = {"experiment": {"trials": 2, "n_sessions": 20_000, "progress": False,
                          "estimators": ["prs", "production", "labeled"],
                          "click_model": {"threshold": 2}, "train": {"max_epochs": 5, "patience": 2},
                          "logging_chunk": 8192, "eval_buckets": 1}}
    out = run_offline(offline_run(cfg), tmp_path, queryset=qs)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert (tmp_path / "results.md").exists()
    assert set(saved["algorithms"]) == {"prs", "production", "labeled"}
    for name, entry in saved["algorithms"].items():
        for m in ("ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "map"):
            assert 0.0 <= entry[m] <= 1.0
            assert entry[m] == np.mean([t[m] for t in entry["trials"]])
        assert len(entry["trials"]) == 2
    assert out["trials_info"][0]["sessions"] == 20_000
    # two trials use different seeds, so their production rankers differ
    prod = saved["algorithms"]["production"]["trials"]
    assert prod[0]["ndcg@10"] != prod[1]["ndcg@10"]


# --------------------------------------------------------------------------- typed configuration, protocol
REPO = __import__("pathlib").Path(__file__).resolve().parent.parent


def test_yaml_files_mirror_the_dataclass_defaults():
    """Defaults are written once, in ``ltrjax.offline.config``; the YAML files only mirror them."""
    import dataclasses

    from omegaconf import OmegaConf

    from ltrjax.offline.config import FidelityConfig, OfflineConfig

    for name, cls in (("offline", OfflineConfig), ("offline_fidelity", FidelityConfig)):
        yaml = OmegaConf.to_container(OmegaConf.load(REPO / "conf" / "experiment" / f"{name}.yaml"))
        assert yaml == dataclasses.asdict(cls()), name


def test_bad_offline_settings_are_refused_naming_the_key():
    """Checked before any work: unknown keys, bad values and estimator options that the estimator does not take
    are a ConfigError naming the dotted key (``python -m ltrjax.run`` prints it and exits 2)."""
    import pytest
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from ltrjax.constraints import ConfigError
    from ltrjax.offline.config import FidelityConfig, OfflineConfig, from_mapping
    from ltrjax.schema import validate

    def refused(*overrides):
        with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
            cfg = compose("config", overrides=list(overrides))
        with pytest.raises(ConfigError) as info:
            validate(cfg, overrides)
        return str(info.value)

    assert "experiment.estimator_options.ips.clp" in refused("experiment=offline", "+experiment.estimator_options.ips.clp=1")
    assert "experiment.estimator_options.nosuch" in refused("experiment=offline",
                                                            "+experiment.estimator_options.nosuch.x=1")
    assert "experiment.list_cap" in refused("experiment=offline", "experiment.list_cap=0")
    assert "experiment.click_model.noise" in refused("experiment=offline", "experiment.click_model.noise=2")
    assert "experiment.prs.clicks_per_query" in refused("experiment=offline_fidelity", "experiment.prs.clicks_per_query=-1")
    assert "experiment.vectorization.estimators" in refused("experiment=offline_fidelity",
                                                            "experiment.vectorization.estimators=[nosuch]")
    assert "experiment.clicks_per_query" in refused("experiment=offline", "experiment.n_sessions=10",
                                                    "experiment.clicks_per_query=3")
    with pytest.raises(ConfigError, match="train.max_stepz"):
        from_mapping(OfflineConfig, {"train": {"max_stepz": 3}})
    with pytest.raises(ConfigError, match="vectorization.dims"):
        from_mapping(FidelityConfig, {"vectorization": {"dims": [0]}})
    # a valid run config comes back typed, its run-level keys filled from the top level
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = validate(compose("config", overrides=["experiment=offline", "seed=4"]), ["seed=4"])
    exp = from_mapping(OfflineConfig, OmegaConf.to_container(cfg.experiment))
    assert exp.seed == 4 and exp.budget == ("clicks", 128_000) and exp.list_size is None


def test_no_offline_module_imports_the_config_layer_or_online():
    """issue 23: ``ltrjax/offline/`` imports neither ``ltrjax.schema`` nor ``ltrjax.online`` (no import cycle)."""
    import ast

    for path in sorted((REPO / "ltrjax" / "offline").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                assert not name.startswith(("ltrjax.schema", "ltrjax.online", "ltrjax.runner")), (path, name)


def test_presented_lists_are_whole_candidate_lists_and_the_budget_counts_clicks(tmp_path):
    """The PRS protocol by default: the whole candidate list (up to list_cap) is presented, the budget is counted
    in clicks, and the results give clicks per logged query; list_size cuts the list where a user asks."""
    qs = toy_queryset(n_queries=60, seed=3)  # the fidelity smoke's data: its PRS part compiled these programs
    cfg = {"experiment": {"trials": 1, "n_clicks": 3000, "progress": False, "estimators": ["prs", "ips_oracle"],
                          "train": {"max_steps": 6, "eval_every_steps": 3}, "eval_buckets": 1, "save_models": False}}
    out = run_offline(offline_run(cfg), tmp_path, queryset=qs)
    info = out["trials_info"][0]
    sizes = np.diff(qs.query_offsets)
    assert info["list_size"] <= sizes.max() and info["list_size"] > 10 and info["mean_presented"] > 10
    assert 3000 <= info["clicks"] < 3000 + info["list_size"]
    assert abs(info["clicks_per_query"] - info["clicks"] / info["n_logged_queries"]) < 1e-6
    assert out["algorithms"]["ips_oracle"]["trials"][0]["told"] == "true click model"
    assert out["algorithms"]["prs"]["trials"][0]["told"] == "known"
    drop = ("best_step",)  # what each fit made of the same schedule
    assert {k: v for k, v in out["training"]["prs"].items() if k not in drop} == \
        {k: v for k, v in out["training"]["ips_oracle"].items() if k not in drop}
    cut = run_offline(offline_run({"experiment": {**cfg["experiment"], "list_size": 10, "clicks_per_query": 5.0}}),
                      tmp_path / "cut", queryset=qs)["trials_info"][0]
    assert cut["list_size"] == 10 and abs(cut["clicks_per_query"] - 5.0) < 0.5
