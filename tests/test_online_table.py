"""The online-table experiment: row names, resumable trials, significance units, report files."""

import json
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from ltrjax import runner
from ltrjax.online import trial as trial_lib
from ltrjax.online.simulator import Simulator
from ltrjax.report.online_report import safe_name
from ltrjax.runner import result_name
from ltrjax.schema import as_run
from ltrjax.data.toy import toy_queryset

CONF = Path(__file__).resolve().parent.parent / "conf"


def test_result_names():
    assert result_name("cftopk", {"setting": "wo_behav"}) == "cftopk@wo_behav"
    assert result_name("cftopk_concat", {"setting": "concat"}) == "cftopk@concat"
    assert result_name("ucbrank_ie", {"setting": "ie"}) == "ucbrank@ie"
    assert result_name("ucbrank_ctr", {"setting": "concat"}) == "ucbrank_ctr@concat"
    assert result_name("ebrank", {"epsilon": 20}) == "ebrank"
    assert result_name("bm25", {}) == "bm25"


@pytest.mark.parametrize("experiment", ["online_table", "ucbrank_table"])
def test_table_configs_compose(experiment):
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose("config", overrides=[f"experiment={experiment}"])
    names = [result_name(k, v) for k, v in cfg.algorithms.items()]
    assert len(names) == len(set(names))  # one row per algorithm and setting
    assert cfg.trials == 5 and cfg.experiment.kind == "online_table"
    settings = {n.split("@")[1] for n in names if "@" in n}
    if experiment == "online_table":
        assert cfg.sim.relevance == "ebrank" and cfg.click_model.kind == "pbm" and cfg.sim.refreshes is None
        assert {"ebrank", "bm25", "cftopk@wo_behav", "cftopk@concat", "pdgd@concat", "prior@concat"} <= set(names)
        assert settings == {"wo_behav", "concat", "ie"}
    else:  # the UCBRank protocol preset
        assert cfg.sim.relevance == "linear" and cfg.click_model.kind == "ucbrank_affine"
        assert cfg.sim.entry_prob == 0.5 and cfg.sim.refreshes == 100 and cfg.sim.n_updates == 20
        assert {"ucbrank@ie", "ucbrank@concat", "ucbrank_ctr@concat", "pdgd_ctr@concat"} <= set(names)
        assert cfg.algorithms.pdgd_concat.behaviour == "delta" and cfg.algorithms.pdgd_ctr.behaviour == "ctr"


@pytest.fixture(scope="module")
def table_cfg():
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose("config", overrides=[
            "experiment=online_table", "trials=2", "progress=false", "sim.sessions=400",
            "sim.warmup_sessions_per_query=2", "sim.n_updates=2", "sim.min_lanes=4", "experiment.entry_bins=3",
            "experiment.permutations=500", "experiment.eta_sweep.values=[0.5,1.0]",
            "experiment.eta_sweep.algorithms=[bm25]", "experiment.eta_sweep.trials=1"])
    keep = {"bm25", "cftopk_concat", "ebrank"}
    OmegaConf.set_struct(cfg, False)
    cfg.algorithms = {k: v for k, v in cfg.algorithms.items() if k in keep}
    cfg.algorithms.cftopk_concat.fit = {"max_epochs": 4, "batch_size": 256}
    cfg.algorithms.ebrank.fit = {"max_epochs": 4, "batch_size": 256}
    cfg.algorithms.ebrank.tune = {"epsilon": [0.0, 20.0]}
    return cfg


def test_online_table_run_and_resume(table_cfg, tmp_path, monkeypatch):
    queryset = toy_queryset(n_queries=30, n_features=5, docs=(6, 14), y_max=2, seed=2, recipe="latent")
    objective = runner.run_online(as_run(table_cfg), tmp_path, queryset)
    results = json.loads((tmp_path / "results.json").read_text())
    assert set(results["algorithms"]) == {"bm25", "cftopk@concat", "ebrank"}
    for name, entry in results["algorithms"].items():
        assert [t["seed"] for t in entry["trials"]] == [0, 1]
        for t in entry["trials"]:
            assert {"cum_ndcg", "warm_ndcg", "cold_ndcg", "click_rate_by_entry"} <= set(t)
            assert (tmp_path / "arrays" / safe_name(name) / f"trial{t['seed']}.npz").exists()
    # the run returns the validation-split objective (EBRank's Cum-NDCG on vali sessions), never a test figure
    vali = [t["cum_ndcg_vali"] for t in results["algorithms"]["ebrank"]["trials"]]
    assert objective == pytest.approx(np.mean(vali)) and results["objective"]["metric"] == "cum_ndcg_vali"
    assert objective != pytest.approx(results["algorithms"]["ebrank"]["cum_ndcg"])
    # each algorithm ran as one population of trials x grid values
    assert results["algorithms"]["ebrank"]["trials"][0]["population"] == {
        "members": 4, "trials": 2, "grid": 2, "wall_seconds": pytest.approx(
            results["algorithms"]["ebrank"]["trials"][0]["population"]["wall_seconds"])}
    ratio = results["algorithms"]["cftopk@concat"]["trials"][0]["exploitation_ratio"]
    assert 0.0 <= ratio["behaviour"] <= 1.0
    assert results["algorithms"]["ebrank"]["trials"][0]["exploitation_ratio"] is None
    assert set(results["significance"]) == {"cum_ndcg", "warm_ndcg", "cold_ndcg"}
    assert sum(r["best"] for r in results["significance"]["cum_ndcg"].values()) == 1
    report = (tmp_path / "results.md").read_text()
    assert "| cftopk | W/-Behav (Concat) |" in report and "Click rate of perfect documents" in report
    for figure in ("ndcg_over_time.png", "click_rate_by_entry.png", "eta_sweep.png", "exploitation_ratio.png"):
        assert (tmp_path / figure).stat().st_size > 0, figure
    assert list(tmp_path.glob("exploration_sweep_epsilon_*.png"))
    assert (tmp_path / "eta_sweep" / "eta_0.5" / "results.json").exists()  # eta = 1 reuses the main run

    # an interrupted run: drop one finished trial; a rerun recomputes only that one, identically
    before = results["algorithms"]["ebrank"]["trials"][1]
    results["algorithms"]["ebrank"]["trials"] = results["algorithms"]["ebrank"]["trials"][:1]
    (tmp_path / "results.json").write_text(json.dumps(results))
    calls = []
    original = Simulator.run_population
    monkeypatch.setattr(Simulator, "run_population",
                        lambda self, policy, keys, *a, **k: calls.append((policy.name, len(keys)))
                        or original(self, policy, keys, *a, **k))
    runner.run_online(as_run(table_cfg), tmp_path, queryset)
    assert calls == [("ebrank", 2)]  # one trial x the 2-value grid
    again = json.loads((tmp_path / "results.json").read_text())["algorithms"]["ebrank"]["trials"][1]
    assert again["cum_ndcg"] == pytest.approx(before["cum_ndcg"]) and again["chosen"] == before["chosen"]

    # a results file of another protocol is refused instead of being mixed in
    other = OmegaConf.merge(table_cfg, {"sim": {"entry_prob": 0.5}})
    with pytest.raises(ValueError, match="sim.entry_prob: 1.0 → 0.5.*another folder"):
        runner.run_online(as_run(other), tmp_path, queryset)


def test_cum_units_sum_to_cum_ndcg():
    """The Cum-NDCG significance units of a trial add up to its Cum-NDCG (EBRank Eq. 7)."""
    from ltrjax.report import stats

    nd = np.random.default_rng(0).random(50)
    total = 0.0
    for x in nd:
        total = 0.995 * total + x
    assert stats.discounted_contributions(nd, 0.995).sum() == pytest.approx(total)


def test_a_row_interrupted_in_its_second_chunk_keeps_the_trial_of_its_first(table_cfg, tmp_path, monkeypatch):
    """A row's trials are written as soon as all their members have run (``run_population(on_chunk=...)``), not when
    the whole population has: a run interrupted in EBRank's second chunk (one trial of 2 grid values per chunk) keeps
    trial 0, its record saying the population had not finished; the rerun simulates only trial 1, and every trial
    then equals the uninterrupted run's, its population's time filled in."""
    queryset = toy_queryset(n_queries=30, n_features=5, docs=(6, 14), y_max=2, seed=2, recipe="latent")
    cfg = OmegaConf.merge(table_cfg, {"population": {"max_members": 2}})
    OmegaConf.set_struct(cfg, False)
    cfg.algorithms = {"ebrank": table_cfg.algorithms.ebrank}
    cfg.experiment.eta_sweep["values"] = []
    runner.run_online(as_run(cfg), tmp_path / "whole", queryset)
    whole = json.loads((tmp_path / "whole" / "results.json").read_text())["algorithms"]["ebrank"]["trials"]

    chunks, populations = [], []
    run_members, run_population = trial_lib.run_members, Simulator.run_population

    def interrupted_in_the_second_chunk(*args, **kwargs):
        chunks.append(1)
        if len(chunks) == 2:
            raise KeyboardInterrupt
        return run_members(*args, **kwargs)

    monkeypatch.setattr(trial_lib, "run_members", interrupted_in_the_second_chunk)
    with pytest.raises(KeyboardInterrupt):
        runner.run_online(as_run(cfg), tmp_path / "cut", queryset)
    kept = json.loads((tmp_path / "cut" / "results.json").read_text())["algorithms"]["ebrank"]["trials"]
    assert [t["seed"] for t in kept] == [0] and kept[0]["population"]["finished"] is False
    assert (tmp_path / "cut" / "arrays" / safe_name("ebrank") / "trial0.npz").exists()
    assert kept[0]["cum_ndcg"] == whole[0]["cum_ndcg"] and kept[0]["chosen"] == whole[0]["chosen"]

    monkeypatch.setattr(trial_lib, "run_members", run_members)
    monkeypatch.setattr(Simulator, "run_population", lambda self, policy, keys, *a, **k: populations.append(
        len(keys)) or run_population(self, policy, keys, *a, **k))
    runner.run_online(as_run(cfg), tmp_path / "cut", queryset)
    assert populations == [2]  # trial 1's two members only
    resumed = json.loads((tmp_path / "cut" / "results.json").read_text())["algorithms"]["ebrank"]["trials"]
    assert [t["seed"] for t in resumed] == [0, 1]
    for a, b in zip(resumed, whole):
        for k in ("cum_ndcg", "warm_ndcg", "cold_ndcg", "cum_ndcg_vali", "chosen", "test_session_ndcg_curve"):
            assert a[k] == b[k], k
    assert "finished" not in resumed[1]["population"] and resumed[1]["population"]["trials"] == 1
    assert all("finished" not in t["population"] and t["population"]["trials"] == 2 for t in whole)


def test_rows_equal_to_grid_members_reuse_them(table_cfg, tmp_path, monkeypatch):
    """ebrank_wo_explore is EBRank's epsilon=0 grid member (same class, options, trial keys): the runner simulates
    it once and reuses it; the reused row equals that row run on its own, and a row whose options differ (beta)
    is simulated."""
    queryset = toy_queryset(n_queries=30, n_features=5, docs=(6, 14), y_max=2, seed=2, recipe="latent")
    cfg = OmegaConf.merge(table_cfg, {"trials": 1})
    OmegaConf.set_struct(cfg, False)
    ebrank = cfg.algorithms.ebrank
    cfg.algorithms = {"ebrank": ebrank, "ebrank_wo_explore": OmegaConf.merge(ebrank, {"epsilon": 0.0, "tune": None}),
                      "ebrank_beta4": OmegaConf.merge(ebrank, {"epsilon": 0.0, "beta": 4.0, "tune": None})}
    calls = []
    original = Simulator.run_population
    monkeypatch.setattr(Simulator, "run_population", lambda self, policy, keys, *a, **k: calls.append(
        (policy.name, len(keys))) or original(self, policy, keys, *a, **k))
    runner.run_online(as_run(cfg), tmp_path / "shared", queryset)
    assert calls == [("ebrank", 2), ("ebrank_beta4", 1)]
    rows = json.loads((tmp_path / "shared" / "results.json").read_text())["algorithms"]
    shared = rows["ebrank_wo_explore"]["trials"][0]
    assert shared["shared_with"] == "ebrank" and "shared_with" not in rows["ebrank_beta4"]["trials"][0]
    grid_member = rows["ebrank"]["trials"][0]["tuning"]["epsilon=0.0"]
    assert shared["cum_ndcg"] == grid_member["cum_ndcg"] and shared["warm_ndcg"] == grid_member["warm_ndcg"]
    assert shared["cum_ndcg"] != rows["ebrank_beta4"]["trials"][0]["cum_ndcg"]

    alone = OmegaConf.merge(cfg, {})
    alone.algorithms = {"ebrank_wo_explore": cfg.algorithms.ebrank_wo_explore}
    calls.clear()
    runner.run_online(as_run(alone), tmp_path / "alone", queryset)
    assert calls == [("ebrank_wo_explore", 1)]
    own = json.loads((tmp_path / "alone" / "results.json").read_text())["algorithms"]["ebrank_wo_explore"]["trials"][0]
    for metric in ("cum_ndcg", "warm_ndcg", "cold_ndcg"):  # a member of a population of 2 vs 1: float rounding
        assert own[metric] == pytest.approx(shared[metric], abs=1e-4), metric


def test_reporting_keys_do_not_change_the_protocol(tmp_path):
    """A results.json written before ``sim.history_splits`` existed (or with another value) resumes: the key
    changes only what is evaluated along the way; any other sim key is still refused."""
    from ltrjax.record import protocol_of
    from ltrjax.report.online_report import METRICS
    from ltrjax.report.results import ResultsWriter

    sim = {"top_k": 5, "entry_prob": 1.0}
    assert protocol_of({**sim, "history_splits": "all"}) == protocol_of(sim) == sim
    old = {"dataset": "toy", "sim": sim, "algorithms": {}}
    (tmp_path / "results.json").write_text(json.dumps(old))
    assert ResultsWriter(tmp_path, {"dataset": "toy", "sim": {**sim, "history_splits": "test"}}, METRICS).resume() == 0
    with pytest.raises(ValueError, match="sim.entry_prob: 1.0 → 0.5.*another folder"):
        ResultsWriter(tmp_path, {"dataset": "toy", "sim": {**sim, "entry_prob": 0.5}}, METRICS).resume()
