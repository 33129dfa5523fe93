"""PRIOR (Gupta et al. 2020, as implemented in the EBRank code; baselines.md §4.2).

Two linear models, both trained with the counterfactual L2 loss against y_d = (sum c/theta)/n:

- h(x_nb):        the prior model, predicting the behaviour signal from non-behaviour features;
- g([x_nb, x_b]): the full model, with the behaviour feature concatenated.

Serving and warm evaluation score g with x_b := h(x_nb) for documents never shown
(impressions == 0) and the live x_b otherwise; cold evaluation ranks by h(x_nb) alone.
Training uses every shown training-split document (n >= 1, no impression filter), early stops
on validation documents with patience 30, and refits both models at every update.

As in ``counterfactual``, g is linear, so g([x_nb, x_b]) = act(w_nb . x_nb + b + w_b x_b)
splits into a per-segment part and the live x_b term.
"""

from __future__ import annotations

from typing import Annotated

import jax
import jax.numpy as jnp
import numpy as np

from ltrjax.constraints import NonNegative, OneOf
from ltrjax.data.layout import Bucket, PaddedDataset
from ltrjax.models.train import FitConfig, MemberFit, fit_members
from ltrjax.online import behaviour as behav
from ltrjax.online import host_random
from ltrjax.online.policies.base import Policy, QueryView
from ltrjax.online.policies.counterfactual import (
    DEFAULT_FIT,
    TARGETS,
    LinearL2Model,
    counters_of,
    fit_examples,
    regression_target,
)
from ltrjax.online.state import DocCounters
from ltrjax.data.queryset import TRAIN, VALI
from ltrjax.online.training_data import member_splits, split_capacity


class Prior(Policy):
    name = "prior_concat"
    trains = True
    reads_logs = False  # retrains from the counters
    default_fit = {**DEFAULT_FIT, "patience": 30}

    def __init__(self, data: PaddedDataset, behaviour: Annotated[str, OneOf(behav.FEATURES)] = "cn",
                 leaky_output: bool = True, min_impressions: NonNegative = 0,
                 target: Annotated[str, OneOf(TARGETS)] = "ips", ctr_prior_count: NonNegative = 0.0,
                 train: bool = True, fit: dict | None = None, name: str | None = None,
                 setting: Annotated[str, OneOf(("concat",))] = "concat"):
        if setting != "concat":
            raise ValueError(f"PRIOR exists only in the concat feature setting (its g sees x_b), got {setting!r}")
        self.setting = setting
        if target not in TARGETS:
            raise ValueError(f"unknown regression target {target!r}; expected one of {TARGETS}")
        self.name = name or self.name
        self.behaviour = behav.check_feature(behaviour)
        self.min_impressions = float(min_impressions)
        self.target = target
        self.ctr_prior_count = float(ctr_prior_count)
        self.trains = bool(train)
        self.prior_model = LinearL2Model(data.n_features, False, (), leaky_output)  # h(x_nb)
        self.model = LinearL2Model(data.n_features, True, (), leaky_output)  # g([x_nb, x_b])
        self.fit_config = FitConfig.from_mapping({**self.default_fit, **dict(fit or {})})
        self._fit_prior = MemberFit(self.prior_model.loss, self.fit_config)
        self._fit_model = MemberFit(self.model.loss, self.fit_config)

    # -- parameters
    def init(self, key, data: PaddedDataset):
        k_prior, k_model = jax.random.split(key)
        return {"prior": self.prior_model.init(k_prior), "model": self.model.init(k_model)}

    def w_b(self, params):
        return self.model.behaviour_weight(params["model"])

    # -- features
    def x_b(self, counters: DocCounters):
        return behav.feature(self.behaviour, counters, self.ctr_prior_count)

    def prior_scores(self, params, features):
        """h(x_nb), also the behaviour feature substituted for documents never shown."""
        return self.prior_model(params["prior"], features)

    def prepare(self, params, bucket: Bucket, behaviour=None):
        """(w_nb . x_nb + b of g, h(x_nb)) per document."""
        return (bucket.on_slots(self.model.base(params["model"], bucket.doc_features)),
                bucket.on_slots(self.prior_scores(params, bucket.doc_features)))

    def filled_x_b(self, prior, counters: DocCounters):
        """x_b for shown documents, h(x_nb) for documents with no impression."""
        return jnp.where(behav.shown(counters), self.x_b(counters), prior)

    # -- ranking
    def doc_scores(self, aux, counters: DocCounters, w_b):
        base, prior = aux
        return self.model.combine(base, w_b, self.filled_x_b(prior, counters))

    def session_scores(self, view: QueryView, key):
        return self.doc_scores(view.aux, view.counters, self.w_b(view.params))

    def test_scores(self, params, bucket: Bucket, counters: DocCounters, warm: bool):
        aux = self.prepare(params, bucket)
        return self.doc_scores(aux, counters, self.w_b(params)) if warm else aux[1]

    def linear_weights(self, params):
        """g's weight vector (x_b last), for exploitation ratios."""
        return np.asarray(self.model.dense(params["model"])["kernel"][:, 0])

    # -- training
    def _examples(self, docs: dict) -> tuple[dict, dict]:
        counters = counters_of(docs)
        y = regression_target(self.target, counters)
        return fit_examples(docs, y), fit_examples(docs, y, self.x_b(counters))

    def update_population(self, keys, params, hyper, data, counters, entered, logs):
        """Every member's h and g, each in one compiled fit (fit_members)."""
        sets = [[self._examples(docs) for docs in split_docs]
                for split_docs in member_splits(data, counters, entered, len(logs), self.min_impressions)]
        split_keys = host_random.split(keys)  # [M, 2, 2], jax.vmap(jax.random.split)'s keys without a program
        capacity = (split_capacity(data, TRAIN), split_capacity(data, VALI))
        table = data.document_table()
        prior, info_h = fit_members(self._fit_prior, params["prior"], [t[0] for t, _ in sets], [v[0] for _, v in sets],
                                    split_keys[:, 0], f"{self.name} prior", capacity, table)
        model, info_g = fit_members(self._fit_model, params["model"], [t[1] for t, _ in sets],
                                    [v[1] for _, v in sets], split_keys[:, 1], self.name, capacity, table)
        infos = [{**{f"prior_{k}": v for k, v in h.items()}, **g} for h, g in zip(info_h, info_g)]
        return {"prior": prior, "model": model}, infos
