"""A population sharded over 4 forced host devices equals the single-device run (issue: many devices)."""

import json
import os
import subprocess
import sys

import numpy as np

from tests.tiny_run import REPO, suite_cache_env


def population_run() -> dict:
    """A population of EBRank (2 trials x 3 epsilons) and its frozen simulation on this process's devices."""
    import jax

    from ltrjax import clicks
    from ltrjax.data.layout import pad_and_bucket
    from ltrjax.data.toy import toy_queryset
    from ltrjax.online.policies.bm25 import BM25
    from ltrjax.online.policies.ebrank import EBRank
    from ltrjax.online.simulator import SimConfig, Simulator

    qs = toy_queryset(n_queries=36, n_features=6, docs=(6, 30), y_max=2, seed=3, recipe="latent")
    data = pad_and_bucket(qs, n_buckets=2, single_bucket_cells=0)
    model = clicks.make_click_model({"kind": "pbm", "examination": "log2"}, 5)
    cfg = SimConfig(sessions=600, warmup_sessions_per_query=3, n_updates=3, entry_prob=0.5, min_lanes=4,
                    lanes_per_query=0.3)
    sim = Simulator(data, model, cfg, warmup_policy=BM25(data))
    policy = EBRank(data, epsilon=20.0, min_impressions=2, fit={"max_epochs": 5, "batch_size": 32})
    keys = [jax.random.PRNGKey(s) for s in (1, 2) for _ in range(3)]
    grid = [{"epsilon": e} for _ in range(2) for e in (0.0, 1.0, 20.0)]
    results = sim.run_population(policy, keys, grid, progress=False)
    states, _ = sim.simulate_frozen(policy, keys[:4], grid[:4], n_sessions=200)
    return {
        "devices": jax.device_count(),
        "state_devices": len(states[0].counters.clicks.sharding.device_set),
        "cum": [r.cum_ndcg["test"] for r in results], "warm": [r.warm_ndcg for r in results],
        "cold": [r.cold_ndcg for r in results], "session_ndcg": [r.session_ndcg.tolist() for r in results],
        "clicks": [float(r.final_states[0].counters.clicks.sum()) for r in results],
    }


def start_four_devices() -> subprocess.Popen:
    """``population_run`` in a process with 4 forced host devices (the suite's XLA flags and persistent cache)."""
    env = suite_cache_env()
    env["XLA_FLAGS"] = " ".join(f for f in (os.environ.get("XLA_FLAGS", ""),
                                            "--xla_force_host_platform_device_count=4") if f)  # conftest's level
    script = "import json\nfrom tests.test_sharding import population_run\nprint(json.dumps(population_run()))"
    return subprocess.Popen([sys.executable, "-c", script], env=env, cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_four_host_devices_equal_one():
    proc = start_four_devices()
    try:
        one = population_run()  # this process (one device) while the other compiles: each on its own core
        stdout, stderr = proc.communicate(timeout=600)
    finally:  # a timed-out or failed run does not outlive the test (kill is a no-op once it ended)
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, stderr[-3000:]
    four = json.loads(stdout.strip().splitlines()[-1])
    assert one["devices"] == 1 and four["devices"] == 4
    assert four["state_devices"] == 4  # the member axis really was split over the devices
    assert one["clicks"] == four["clicks"]
    np.testing.assert_array_equal(np.asarray(one["session_ndcg"]), np.asarray(four["session_ndcg"]))
    for metric in ("cum", "warm", "cold"):
        np.testing.assert_allclose(one[metric], four[metric], rtol=0, atol=1e-6)
