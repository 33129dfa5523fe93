"""Trials set up on the device (``sim.trial_setup=device``) equal the host set-up bit for bit, and a population's
segment loop moves nothing from the host to the device.

Compared per member (``benchmarks/trial_setup_check.compared``): every main session's NDCG, Cum-NDCG, the
evaluation history, the final per-query NDCG, every counter of the final state and every model parameter; logs
where kept. Both set-ups draw click uniforms in the step (``click_rng=device``)."""

import dataclasses
import jax
import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from ltrjax import clicks
from ltrjax.constraints import ConfigError
from ltrjax.online import segment, transfers
from ltrjax.online.config import SimConfig
from ltrjax.online.policies.bm25 import BM25
from ltrjax.online.simulator import Simulator
from ltrjax.runner import make_policy
from tests.online_toy import CONFIG as TOY_CONFIG
from tests.online_toy import KEY, toy_data
from tests.scripts import load_script, run_main
from tests.test_policies import CONF
from tests.toy_sims import KEYS, SMALL_CONFIG, small_data, small_ebrank

PBM = {"kind": "pbm", "examination": "log2"}
difference = load_script("benchmarks/trial_setup_check.py").difference


def simulator(data, config: SimConfig, setup: str) -> Simulator:
    config = dataclasses.replace(config, click_rng="device", trial_setup=setup)
    return Simulator(data, clicks.make_click_model(PBM, 5), config, warmup_policy=BM25(data))


def both(data, config, policy, keys, hypers=None, **kwargs) -> dict:
    return {setup: simulator(data, config, setup).run_population(policy, keys, hypers, progress=False, **kwargs)
            for setup in ("host", "device")}


def test_an_ebrank_population_of_shared_trials_equals_the_host_setup():
    """Two trials, three members (two share a trial's plan: a validation grid), a BM25 warm-up, retrains; logs kept."""
    data = small_data()
    runs = both(data, SMALL_CONFIG, small_ebrank(data), [KEYS[0], KEYS[0], KEYS[1]],
                [{"epsilon": 1.0}, {"epsilon": 50.0}, {"epsilon": 20.0}], keep_logs=True)
    assert difference(runs["host"], runs["device"]) == {"equal": True, "max_abs_diff": 0.0}
    for host, device in zip(runs["host"], runs["device"]):
        assert len(host.logs) == len(device.logs) == SMALL_CONFIG.n_segments
        for a, b in zip(host.logs, device.logs):
            for field in ("query", "shown", "clicks", "session"):
                np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
        np.testing.assert_array_equal(host.session_query, device.session_query)
        np.testing.assert_array_equal(host.warmup_query, device.warmup_query)
        assert [i.get("skipped") for i in host.train_info] == [i.get("skipped") for i in device.train_info]


def test_a_retrain_after_the_warm_up_equals_the_host_setup():
    data = small_data()
    config = dataclasses.replace(SMALL_CONFIG, train_after_warmup=True)
    runs = both(data, config, small_ebrank(data), [KEYS[1]])
    assert difference(runs["host"], runs["device"])["equal"]


def algorithm(name: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=[f"+algorithm@probe={name}"]).probe


@pytest.mark.parametrize("name", ["pdgd", "ucbrank_ie"])
def test_a_learner_and_ucbrank_ie_equal_the_host_setup(name):
    """PDGD reads its sessions' records every segment; UCBRank-IE refreshes its dropout masks (refresh keys made on
    the device) and retrains; both from their shipped configs."""
    data = toy_data()
    acfg = algorithm(name)
    if "min_impressions" in acfg:
        acfg.min_impressions = 1  # so the toy run retrains
    policy, _ = make_policy(name, acfg, data)
    runs = both(data, TOY_CONFIG, policy, [KEY])
    assert difference(runs["host"], runs["device"]) == {"equal": True, "max_abs_diff": 0.0}
    assert any(not i.get("skipped") for i in runs["device"][0].train_info)


def test_the_frozen_simulation_equals_the_host_setup():
    data = small_data()
    policy = small_ebrank(data)
    states = {s: simulator(data, SMALL_CONFIG, s).simulate_frozen(policy, [KEYS[0], KEYS[1]])[0]
              for s in ("host", "device")}
    for a, b in zip(jax.tree_util.tree_leaves(states["host"]), jax.tree_util.tree_leaves(states["device"])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def guarded_loop(monkeypatch):
    """Every ``segment.run_segments`` (warm-up and main phase) under ``transfer_guard_host_to_device("disallow")``:
    only the transfers a retrain declares (``transfers.declared_transfers``) are allowed."""
    loop = segment.run_segments

    def guarded(*args, **kwargs):
        with jax.transfer_guard_host_to_device("disallow"):
            return loop(*args, **kwargs)

    monkeypatch.setattr(segment, "run_segments", guarded)


def segment_bytes(sim, policy, keys) -> dict:
    with transfers.TransferMeter() as meter:
        sim.run_population(policy, keys, progress=False)
    return meter.bytes


def test_a_device_setup_segment_loop_moves_nothing_to_the_device(monkeypatch):
    data = small_data()
    policy = small_ebrank(data)
    device = simulator(data, SMALL_CONFIG, "device")
    device.run_population(policy, [KEYS[0]], progress=False)  # compiled outside the guard: constants move once
    guarded_loop(monkeypatch)
    one, three = (segment_bytes(device, policy, keys) for keys in ([KEYS[0]], [KEYS[0], KEYS[1], KEYS[0]]))
    assert one["segment"] == three["segment"] == 0
    assert one["setup"] > 0 and three["setup"] > one["setup"]  # the trials' keys: a few bytes each


def test_the_guard_catches_the_host_setup(monkeypatch):
    """The check can fail: the host set-up's scan inputs are NumPy, moved at every segment program's call."""
    data = small_data()
    policy = small_ebrank(data)
    host = simulator(data, SMALL_CONFIG, "host")
    assert segment_bytes(host, policy, [KEYS[0]])["segment"] > 0
    guarded_loop(monkeypatch)
    with pytest.raises(Exception, match="Disallowed host-to-device transfer"):
        host.run_population(policy, [KEYS[0]], progress=False)


def test_trial_setup_is_validated_and_resolved():
    with pytest.raises(ConfigError, match="click_rng=host"):
        SimConfig(trial_setup="device", click_rng="host")
    with pytest.raises(ConfigError, match="segment_widths=phase"):
        SimConfig(trial_setup="device", segment_widths="classes")
    assert SimConfig().resolved("cpu").trial_setup == "host"
    gpu = SimConfig().resolved("gpu")
    assert (gpu.trial_setup, gpu.click_rng) == ("device", "device")
    assert SimConfig(segment_widths="ladder").resolved("gpu").trial_setup == "host"
    assert SimConfig().resolved("tpu").trial_setup == "device"  # click_rng device there too
    assert SimConfig(trial_setup="device").resolved("cpu").click_rng == "device"


def test_the_trial_setup_check_smoke(capsys):
    """benchmarks/trial_setup_check.py --smoke: the sweep's population (2 seeds x 2 epsilon values) equal."""
    out, _ = run_main("benchmarks/trial_setup_check.py", ["--smoke", "--json", "--cases", "sweep"], capsys)
    assert out["equal"] and out["cases"]["sweep"]["same_choice"] and out["cases"]["sweep"]["members"] == 4
