"""Counterfactual online learners: CFTopK, CFRandomK, CFEpsilon (EBRank baselines; baselines.md §4.1).

One model f, retrained between segments with the counterfactual L2 loss

    L = mean_d ( f(x_d) - y_d )^2,   y_d = (sum_t c_{d,t} / theta_{k_t(d)}) / n_d

over documents of training-split queries shown more than ``min_impressions`` (20) times,
early-stopping on validation-split documents under the same filter. y_d is unbiased for R
under PBM. They differ only in how they serve (K = 5):

- ``CFTopK``    top-K by f(x);
- ``CFRandomK`` a uniformly random K-subset in random order (U(0,1) scores per session); f is
                still trained, for the Warm/Cold evaluation;
- ``CFEpsilon`` top-K by f(x) + epsilon U(0,1) (epsilon a traced hyper-parameter, so a tuning grid
                compiles once).

Feature settings (``ltrjax.online.behaviour``): ``wo_behav`` (f(x_nb)), ``concat``
(f([x_nb, x_b]), x_b live from the counters of the current session) and ``ie`` (x_b for shown
documents, f(x_nb) otherwise; UCBRank Eq. 12).

The model is linear (``MLPScorer(hidden=())``) with an optional LeakyReLU(0.01) on the output, as
in the EBRank code (``TorchLeakyReluNeuralModel`` is Linear -> LeakyReLU). Linearity makes the
concat model exact *and* cheap inside the session scan: w . [x_nb, x_b] + b splits into the
per-segment part w_nb . x_nb + b (``prepare``) plus w_b x_b from the live counters
(``doc_scores``); the output activation is applied after the sum. ``hidden`` (an MLP) is
allowed for ``wo_behav``/``ie`` only.

Warm test scores use the live x_b; cold test scores set x_b to its unseen value (0 for
cn/ctr, -2 for delta) for concat and use f(x_nb) for ie.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from ltrjax.constraints import NonNegative, OneOf, PositiveInts

from ltrjax.data.layout import Bucket, PaddedDataset
from ltrjax.models.scorers import MLPScorer
from ltrjax.models.train import FitConfig, MemberFit, fit_members
from ltrjax.online import behaviour as behav
from ltrjax.online.policies.base import Policy, QueryView
from ltrjax.online.state import STAT_NAMES, DocCounters
from ltrjax.data.queryset import TRAIN, VALI
from ltrjax.online.training_data import member_splits, split_capacity

SERVING = ("topk", "randomk", "epsilon")
TARGETS = ("ips", "delta")

# The paper code's training (seed-code.md §1.3): plain SGD, lr 0.05 (CFTopK, PRIOR; 0.01 for CFRandomK and
# CFEpsilon, set in their configs), batch 64, <= 1000 epochs, early stopping with patience 60 (PRIOR 30) and
# restore-best, warm-started from the current weights with a fresh optimizer at every update. The papers' form of
# the stop rule (grace 1, no min_delta), not the online default (FitConfig: no forced epochs), which left these
# SGD fits under-trained on a toy check (docs/performance.md).
DEFAULT_FIT = {"optimizer": "sgd", "learning_rate": 0.05, "batch_size": 64, "max_epochs": 1000, "patience": 60,
               "grace": 1, "min_delta": 0.0}


def counters_of(docs: dict) -> DocCounters:
    """``DocCounters`` view of a ``collect_documents`` result (host arrays)."""
    return DocCounters(**{k: np.asarray(docs[k], np.float32) for k in STAT_NAMES})


def regression_target(target: str, counters: DocCounters):
    """y_d for the L2 loss: ``ips`` = (sum c/theta)/n (baselines.md §4.1), ``delta`` = UCBRank Eq. 8."""
    if target == "ips":
        return behav.cf_target(counters)
    if target == "delta":
        return behav.delta(counters)
    raise ValueError(f"unknown regression target {target!r}; expected one of {TARGETS}")


class LinearL2Model:
    """A Flax scorer plus its output activation, the L2 loss, and the linear split of its input.

    ``n_in`` = number of non-behaviour features (+1 when x_b is the last input column).
    """

    def __init__(self, n_nb: int, with_behaviour: bool, hidden: Sequence[int] = (), leaky_output: bool = True,
                 leaky_slope: float = 0.01, bias_init: float = 0.01):
        if with_behaviour and tuple(hidden):
            raise ValueError("x_b is concatenated by splitting a linear model; use hidden=() with concat features")
        self.n_nb = int(n_nb)
        self.with_behaviour = bool(with_behaviour)
        self.n_in = self.n_nb + int(self.with_behaviour)
        self.leaky_output = bool(leaky_output)
        self.leaky_slope = float(leaky_slope)
        self.module = MLPScorer(hidden=tuple(hidden), bias_init=bias_init)

    def init(self, key):
        return self.module.init(key, jnp.zeros((1, self.n_in), jnp.float32))

    def activate(self, z):
        return jax.nn.leaky_relu(z, self.leaky_slope) if self.leaky_output else z

    def __call__(self, params, x):
        """f(x) for full inputs ``[..., n_in]``."""
        return self.activate(self.module.apply(params, x))

    def dense(self, params):
        return params["params"]["Dense_0"]

    def base(self, params, x_nb):
        """Pre-activation score without the x_b term: w_nb . x_nb + b (the full model without x_b)."""
        if not self.with_behaviour:
            return self.module.apply(params, x_nb)
        dense = self.dense(params)
        return x_nb @ dense["kernel"][: self.n_nb, 0] + dense["bias"][0]

    def behaviour_weight(self, params):
        """w_b, the weight of the x_b column (0 without behaviour)."""
        if not self.with_behaviour:
            return jnp.float32(0.0)
        return self.dense(params)["kernel"][self.n_nb, 0]

    def combine(self, base, w_b, x_b):
        """f([x_nb, x_b]) = act(base + w_b x_b)."""
        return self.activate(base + w_b * x_b) if self.with_behaviour else self.activate(base)

    def loss(self, params, batch):
        return (self(params, batch["features"]) - batch["target"]) ** 2


def fit_examples(docs: dict, target, extra=None) -> dict:
    """A fit's examples: the documents' ids (``collect_documents``), their regression target and, when given, the
    ``extra`` input columns that follow their features (x_b)."""
    out = {"doc": docs["doc"], "target": np.asarray(target, np.float32)}
    if extra is None:
        return out
    extra = np.asarray(extra, np.float32)
    return {**out, "extra": extra[:, None] if extra.ndim == 1 else extra}  # a column per input, none shown yet too


@struct.dataclass
class CFHyper:
    epsilon: Annotated[jax.Array, NonNegative] = 0.0  # CFEpsilon's noise scale


class CounterfactualL2(Policy):
    """A linear model trained with the CF L2 loss; ``serving`` picks Top-K, Random-K or epsilon-noise."""

    name = "cf"
    trains = True
    reads_logs = False  # retrains from the counters
    serving = "topk"
    Hyper = CFHyper
    default_fit = DEFAULT_FIT

    def __init__(self, data: PaddedDataset, setting: Annotated[str, OneOf(behav.SETTINGS)] = "wo_behav",
                 behaviour: Annotated[str, OneOf(behav.FEATURES)] = "cn", epsilon: float = 0.0,
                 leaky_output: bool = True, hidden: PositiveInts = (), min_impressions: NonNegative = 20,
                 target: Annotated[str, OneOf(TARGETS)] = "ips", ctr_prior_count: NonNegative = 0.0,
                 train: bool = True, fit: dict | None = None,
                 serving: Annotated[str | None, OneOf(SERVING, optional=True)] = None, name: str | None = None):
        self.name = name or self.name
        self.serving = serving or self.serving
        if self.serving not in SERVING:
            raise ValueError(f"unknown serving mode {self.serving!r}; expected one of {SERVING}")
        if target not in TARGETS:
            raise ValueError(f"unknown regression target {target!r}; expected one of {TARGETS}")
        self.setting = behav.check_setting(setting)
        self.behaviour = behav.check_feature(behaviour)
        self.epsilon = float(epsilon)
        self.min_impressions = float(min_impressions)
        self.target = target
        self.ctr_prior_count = float(ctr_prior_count)
        self.trains = bool(train)
        self.n_features = data.n_features
        self.model = LinearL2Model(data.n_features, self.setting == "concat", hidden, leaky_output)
        self.fit_config = FitConfig.from_mapping({**self.default_fit, **dict(fit or {})})
        self._fit = MemberFit(self.model.loss, self.fit_config)

    # -- parameters
    def init(self, key, data: PaddedDataset):
        return {"model": self.model.init(key)}

    def default_hyper(self):
        return CFHyper(epsilon=jnp.float32(self.epsilon))

    def w_b(self, params):
        """The weight of the behaviour feature (0 without it)."""
        return self.model.behaviour_weight(params["model"])

    # -- features
    def x_b(self, counters: DocCounters):
        return behav.feature(self.behaviour, counters, self.ctr_prior_count)

    def prepare(self, params, bucket: Bucket, behaviour=None):
        """Pre-activation w_nb . x_nb + b per document (the model is frozen within a segment)."""
        return bucket.on_slots(self.model.base(params["model"], bucket.doc_features))

    # -- ranking
    def doc_scores(self, base, counters: DocCounters, w_b):
        """f with the live behaviour feature (no exploration noise); ``w_b`` from ``self.w_b(params)``."""
        if self.setting == "concat":
            return self.model.combine(base, w_b, self.x_b(counters))
        if self.setting == "ie":
            return behav.independent_evidence(self.model.activate(base), counters, self.behaviour,
                                                  self.ctr_prior_count)
        return self.model.activate(base)

    def session_scores(self, view: QueryView, key):
        if self.serving == "randomk":
            return jax.random.uniform(key, view.counters.clicks.shape)
        scores = self.doc_scores(view.aux, view.counters, self.w_b(view.params))
        if self.serving == "epsilon":
            scores = scores + view.hyper.epsilon * jax.random.uniform(key, scores.shape)
        return scores

    def test_scores(self, params, bucket: Bucket, counters: DocCounters, warm: bool):
        base = self.prepare(params, bucket)
        if warm:
            return self.doc_scores(base, counters, self.w_b(params))
        if self.setting == "concat":  # x_b as for a document never shown
            unseen = behav.unseen_value(self.behaviour)
            return self.model.combine(base, self.model.behaviour_weight(params["model"]), unseen)
        return self.model.activate(base)

    def linear_weights(self, params):
        """The weight vector (x_b last) of a linear model that sees x_b, for exploitation ratios; else None."""
        if self.setting != "concat":
            return None
        return np.asarray(self.model.dense(params["model"])["kernel"][:, 0])

    # -- training
    def examples(self, docs: dict) -> dict:
        counters = counters_of(docs)
        extra = self.x_b(counters) if self.setting == "concat" else None
        return fit_examples(docs, regression_target(self.target, counters), extra)

    def update_population(self, keys, params, hyper, data, counters, entered, logs):
        """Every member's model in one compiled fit (fit_members) on its own documents."""
        sets = [[self.examples(docs) for docs in split_docs]
                for split_docs in member_splits(data, counters, entered, len(logs), self.min_impressions,
                                               keys, self.fit_config.max_examples)]
        model, infos = fit_members(self._fit, params["model"], [s[0] for s in sets], [s[1] for s in sets], keys,
                                   self.name, (split_capacity(data, TRAIN), split_capacity(data, VALI)),
                                   data.document_table())
        return {**params, "model": model}, infos


class CFTopK(CounterfactualL2):
    """Top-K by f(x) (EBRank's ``NNTopK``)."""

    name = "cftopk"
    serving = "topk"


class CFRandomK(CounterfactualL2):
    """A uniformly random K-subset in random order; f is trained for the Warm/Cold evaluation only."""

    name = "cfrandomk"
    serving = "randomk"


class CFEpsilon(CounterfactualL2):
    """Top-K by f(x) + epsilon U(0,1) with fresh uniforms per document and session (``NNEpsilon``)."""

    name = "cfepsilon"
    serving = "epsilon"

    def __init__(self, data: PaddedDataset, epsilon: float = 1.0, **kwargs):
        super().__init__(data, epsilon=epsilon, **kwargs)
