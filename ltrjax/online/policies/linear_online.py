"""The linear model shared by the online learners PDGD, DBGD and MGD (baselines.md §3, §3.6).

A logging linear model s = w . x (no bias) serves the sessions between retrain points; per-session
updates computed inside the scan are summed in ``update`` with step sizes that decay per update
(see ``ltrjax.online.policies.pdgd`` for why that is exact for the §3.6 protocol). Feature settings:
``wo_behav`` (x = x_nb) and ``concat`` (x = [x_nb, x_b], x_b live from the counters); ``ie`` is
rejected (these learners need one scoring function).
"""

from __future__ import annotations

import functools
from typing import Annotated

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from ltrjax.constraints import NonNegative, OneOf, Positive, Range

from ltrjax.data.layout import Bucket, PaddedDataset
from ltrjax.data.queryset import TRAIN
from ltrjax.online import behaviour as behav
from ltrjax.online.policies.base import Policy
from ltrjax.online.state import DocCounters

INITS = ("uniform", "zeros")
MAX_CHUNK = 4096  # sessions per scan step when summing updates (bounds the [chunk, K, F] gather)


def padded_length(n: int, max_chunk: int = MAX_CHUNK) -> tuple[int, int]:
    """(padded n, chunk): n rounded up to a power of two (few compiled shapes), split into chunks."""
    padded = 1 << max(int(n) - 1, 0).bit_length()
    chunk = min(padded, 1 << (max(int(max_chunk), 1).bit_length() - 1))  # powers of two: chunk divides padded
    return padded, chunk


def pad_rows(a: np.ndarray, n: int) -> np.ndarray:
    """``a`` zero-padded along axis 0 to ``n`` rows."""
    return np.concatenate([a, np.zeros((n - a.shape[0],) + a.shape[1:], a.dtype)]) if n > a.shape[0] else a


@functools.partial(jax.jit, static_argnames="chunk")
def weighted_feature_sum(bucket: Bucket, rows: jax.Array, shown: jax.Array, weights: jax.Array,
                         chunk: int) -> jax.Array:
    """sum_{t,i} weights[t, i] * x[rows[t], shown[t, i]] ``[F]`` over the bucket's document features,
    scanning ``chunk`` sessions at a time."""

    def body(acc, xs):
        r, s, w = xs
        x = bucket.doc_features[bucket.doc_row[r[:, None], jnp.maximum(s, 0)]]  # [chunk, K, F]
        return acc + jnp.einsum("ck,ckf->f", w, x), None

    xs = tuple(a.reshape((-1, chunk) + a.shape[1:]) for a in (rows, shown, weights))
    acc, _ = jax.lax.scan(body, jnp.zeros(bucket.doc_features.shape[-1], jnp.float32), xs)
    return acc


@struct.dataclass
class LinearOnlineHyper:
    learning_rate: Annotated[jax.Array, Positive] = 0.1  # eta_0 of the §3.6 step sizes


class LinearOnlineLearner(Policy):
    """A linear scorer s = w . x under the §3.6 logging/learning protocol: shared by PDGD and DBGD/MGD.

    Subclasses define ``session_scores``/``session_record`` and ``update``; this class holds the
    feature setting, the parameters ``{"w", "learning_rate"}`` and the step-size schedule.
    """

    trains = True
    Hyper = LinearOnlineHyper

    def __init__(self, data: PaddedDataset, setting: Annotated[str, OneOf(("wo_behav", "concat"))] = "wo_behav",
                 behaviour: Annotated[str, OneOf(behav.FEATURES)] = "cn", learning_rate: float = 0.1,
                 decay: Annotated[float, Range(0, 1, lo_open=True)] = 0.9999,
                 init: Annotated[str, OneOf(INITS)] = "uniform", all_splits: bool = False,
                 ctr_prior_count: NonNegative = 0.0, name: str | None = None):
        self.name = name or self.name
        self.setting = behav.check_setting(setting)
        if self.setting == "ie":
            raise ValueError(f"{self.name} needs a single scoring function: feature setting 'ie' is not "
                             "supported (use wo_behav or concat)")
        if init not in INITS:
            raise ValueError(f"unknown init {init!r}; expected one of {INITS}")
        self.behaviour = behav.check_feature(behaviour)
        self.concat = self.setting == "concat"
        self.n_nb = int(data.n_features)
        self.n_in = self.n_nb + int(self.concat)
        self.learning_rate = float(learning_rate)
        self.decay = float(decay)
        self.init_mode = init
        self.all_splits = bool(all_splits)
        self.ctr_prior_count = float(ctr_prior_count)

    # -- parameters
    def init(self, key, data: PaddedDataset):
        w = (jax.random.uniform(key, (self.n_in,), jnp.float32) if self.init_mode == "uniform"
             else jnp.zeros((self.n_in,), jnp.float32))
        return {"w": w}

    def default_hyper(self):
        return LinearOnlineHyper(learning_rate=jnp.float32(self.learning_rate))

    def w_b(self, params):
        """The weight of the behaviour feature (0 without it)."""
        return params["w"][self.n_nb] if self.concat else jnp.float32(0.0)

    # -- scores
    def x_b(self, counters: DocCounters) -> jax.Array:
        return behav.feature(self.behaviour, counters, self.ctr_prior_count)

    def base(self, params, features: jax.Array) -> jax.Array:
        """w_nb . x_nb ``[...]`` (the model without its x_b term)."""
        return features @ params["w"][: self.n_nb]

    def bucket_base(self, params, bucket: Bucket) -> jax.Array:
        """``base`` of every ``[query, slot]`` of ``bucket``, computed once per document."""
        return bucket.on_slots(self.base(params, bucket.doc_features))

    def logging_scores(self, base: jax.Array, counters: DocCounters, w_b) -> jax.Array:
        """s = w_nb . x_nb + w_b x_b with the live x_b (concat), else the base."""
        return base + w_b * self.x_b(counters) if self.concat else base

    def test_scores(self, params, bucket: Bucket, counters: DocCounters, warm: bool):
        base = self.bucket_base(params, bucket)
        if not self.concat:
            return base
        x_b = self.x_b(counters) if warm else behav.unseen_value(self.behaviour)
        return base + params["w"][self.n_nb] * x_b

    # -- the §3.6 step sizes
    def training_sessions(self, data: PaddedDataset, query: np.ndarray) -> np.ndarray:
        """bool ``[n]``: sessions that may train (training-split queries unless ``all_splits``)."""
        query = np.asarray(query)
        return np.ones(query.shape, bool) if self.all_splits else data.split_of_query[query] == TRAIN

    def step_sizes(self, hyper, data: PaddedDataset, query: np.ndarray, updates: np.ndarray) -> np.ndarray:
        """eta_t ``[n]`` (float64, 0 where no update happens): lr * decay^(earlier updates since the retrain)."""
        active = np.asarray(updates, bool) & self.training_sessions(data, query)
        earlier = np.cumsum(active) - active
        return np.where(active, float(hyper.learning_rate) * self.decay ** earlier.astype(np.float64), 0.0)

    @staticmethod
    def update_info(eta: np.ndarray, step: np.ndarray, n_train: int) -> dict:
        n_updates = int(np.sum(eta > 0))
        return {"sessions": int(eta.shape[0]), "train_sessions": int(n_train), "updates": n_updates,
                "step_norm": float(np.linalg.norm(step)),
                "last_eta": float(eta[eta > 0][-1]) if n_updates else 0.0}

    def linear_weights(self, params):
        """The weight vector (x_b last), for exploitation ratios (EBRank Table 4); None without x_b."""
        return np.asarray(params["w"]) if self.concat else None
