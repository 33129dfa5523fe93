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
from ltrjax.offline.toy import toy_queryset
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
import logging, sys, warnings
import matplotlib
matplotlib.use("svg")
import jax
import flax, optax, scipy.sparse, scipy.special, pyarrow.parquet, hydra, omegaconf  # dependencies' own import-time filters
before = (matplotlib.get_backend(), jax.config.jax_compilation_cache_dir, jax.config.jax_enable_x64,
          logging.getLogger().level, len(logging.getLogger().handlers), len(warnings.filters),
          logging.getLogger("jax._src.xla_bridge").level)
import ltrjax
for name in ltrjax.__all__:
    getattr(ltrjax, name)
import ltrjax.runner, ltrjax.report.plots, ltrjax.report.online_report, ltrjax.experiment, ltrjax.offline.experiment
after = (matplotlib.get_backend(), jax.config.jax_compilation_cache_dir, jax.config.jax_enable_x64,
         logging.getLogger().level, len(logging.getLogger().handlers), len(warnings.filters),
         logging.getLogger("jax._src.xla_bridge").level)
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
    for i in range(3):
        for policy in (RandomK(data, seed=i), EBRank(data, fit={"max_epochs": 2})):
            sim.run(policy, jax.random.PRNGKey(i), progress=False)
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
