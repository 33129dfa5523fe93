"""The toy online set-up that the policy tests share (test_policies, test_ucbrank, test_counterfactual,
test_online_learners): one dataset shape and one protocol, so a policy's programs (segment, evaluation, refresh,
fit) and the BM25 warm-up have the same shapes in every file and the persistent XLA cache compiles them once."""

import jax

from ltrjax.data.layout import pad_and_bucket
from ltrjax.data.toy import toy_queryset
from ltrjax.online.policies.bm25 import BM25
from ltrjax.online.simulator import SimConfig, Simulator

N_FEATURES = 5
# 6 segments (UCBRank's behaviour refreshes), a retrain after every second one: 2 retrains per trial.
# history_splits="all": every evaluation is the one all-query program (the test-only one is test_population's).
CONFIG = SimConfig(sessions=600, warmup_sessions_per_query=3, n_updates=3, refreshes=6, entry_prob=0.5,
                   min_lanes=4, lanes_per_query=0.3, history_splits="all")
# The trials' key: a simulator's lane plan (steps x lanes per segment) depends on the trial's session draws (here
# 13-16 steps x 7-9 lanes for keys 0, 3, 4, 5, 11), and every plan shape is its own program.
KEY = jax.random.PRNGKey(11)


def toy_data():
    """30 latent-recipe queries of 6-20 documents, 5 features, grades 0-2, one bucket."""
    return pad_and_bucket(toy_queryset(n_queries=30, n_features=N_FEATURES, docs=(6, 20), y_max=2, seed=3,
                                       recipe="latent"), n_buckets=1)


def toy_sim(data, click_model, config=CONFIG):
    """The shared protocol on ``data`` with a BM25 warm-up (the click model's values are traced: any affine one)."""
    return Simulator(data, click_model, config, warmup_policy=BM25(data))
