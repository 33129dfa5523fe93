"""EBRank: empirical-Bayes relevance with marginal-certainty exploration (EBRank Alg. 1).

A Beta(alpha, beta) prior per document comes from its non-behaviour features,
alpha = f_theta(x_nb) > 0 with beta fixed; clicks turn it into a Beta posterior whose mean is
the warm relevance estimate and whose marginal certainty drives exploration:

    R_hat = (C + alpha) / (N + alpha + beta)                         (Eq. 25)
    MC    = R_hat / (E + alpha + beta)^2                             (Eq. 27)
    score = R_hat + epsilon * MC                                     (Eq. 13)
    loss  = log B(alpha, beta) - log B(C + alpha, N - C + beta)      (Eq. 14)

Two statistic choices (SPEC §5.1): ``exposure`` (default; the code behind the published table:
C = raw clicks, N = E = sum theta_k) and ``ips`` (the paper's text: C = sum c/theta_k,
N = impressions n, E = exposure).
"""

from __future__ import annotations

from typing import Annotated

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.scipy.special import betaln

from ltrjax.constraints import NonNegative, OneOf, Positive, PositiveInts
from ltrjax.data.layout import Bucket, PaddedDataset
from ltrjax.models.scorers import BetaPrior
from ltrjax.models.train import FitConfig, MemberFit, fit_members
from ltrjax.online.policies.base import Policy
from ltrjax.online.state import DocCounters
from ltrjax.data.queryset import TRAIN, VALI
from ltrjax.online.training_data import member_splits, split_capacity

STATISTICS = ("exposure", "ips")
# Prior training (conf/algorithm/ebrank.yaml). The paper code's SGD 0.05 / batch 64 / <= 1000 epochs /
# patience 60 reaches the same quality but took 1.8x as long on an MQ2007-sized run. Every retrain starts from the
# current prior (warm start), so patience 5 suffices (docs/results/retrain_mq2008_patience/).
DEFAULT_FIT = {"optimizer": "adam", "learning_rate": 0.01, "batch_size": 256, "max_epochs": 300, "patience": 5}
# Members per prior-alpha product: a population's members are padded to a multiple of this and each block of
# MEMBER_BLOCK priors is one matrix product over the features ([cells, F] x [F, MEMBER_BLOCK]), a single member
# too, so a member's alpha rounds the same alone and at any position of any population (tests/test_ebrank.py).
MEMBER_BLOCK = 8


def beta_statistics(statistic: str, clicks, ips_clicks, impressions, exposure):
    """(C, N, E) of the chosen statistic."""
    if statistic == "exposure":
        return clicks, exposure, exposure
    if statistic == "ips":
        return ips_clicks, impressions, exposure
    raise ValueError(f"unknown EBRank statistic {statistic!r}; expected one of {STATISTICS}")


def posterior_mean(alpha, beta, c, n):
    """R_hat = (C + alpha) / (N + alpha + beta)  (Eq. 25)."""
    return (c + alpha) / (n + alpha + beta)


def marginal_certainty(r_hat, alpha, beta, e):
    """MC = R_hat / (E + alpha + beta)^2  (Eq. 27)."""
    return r_hat / (e + alpha + beta) ** 2


def prior_nll(alpha, beta, c, n, clamp: float):
    """Negative Beta-binomial marginal log-likelihood per document, up to a constant (Eq. 14).

    N - C + beta <= 0 can happen when C > N (IPS clicks, or clicks above exposure); it is
    clamped to ``clamp`` so the loss and its gradient stay finite.
    """
    b_post = jnp.maximum(n - c + beta, clamp)
    return betaln(alpha, beta) - betaln(c + alpha, b_post)


def block_alpha(model, priors, features: jax.Array, block: int = MEMBER_BLOCK) -> jax.Array:
    """alpha ``[P, *features.shape[:-1]]`` of ``P`` stacked priors (leading member axis) over one shared feature
    array ``[..., F]`` (Eq. 14's prior f_theta): the members, padded with copies of the last one to a multiple of
    ``block``, go ``block`` at a time through one product over the features (``vmap`` of the prior over the block
    with the features unbatched: a single GEMM), so the features are read once per block instead of per member."""
    n = jax.tree_util.tree_leaves(priors)[0].shape[0]
    pad = (-n) % block
    blocks = jax.tree_util.tree_map(
        lambda a: jnp.concatenate([a, jnp.repeat(a[-1:], pad, axis=0)]).reshape((-1, block) + a.shape[1:]), priors)
    out = jax.lax.map(lambda b: jax.vmap(lambda p: model.apply(p, features))(b), blocks)
    return out.reshape((-1,) + out.shape[2:])[:n]


@struct.dataclass
class EBRankHyper:
    epsilon: Annotated[jax.Array, NonNegative] = 20.0  # exploration strength (Eq. 13)


class EBRank(Policy):
    name = "ebrank"
    narrow_rows = True
    trains = True
    test_from_prepare = True
    Hyper = EBRankHyper
    default_fit = DEFAULT_FIT

    def __init__(self, data: PaddedDataset, epsilon: float = 20.0, beta: Positive = 5.0,
                 statistic: Annotated[str, OneOf(STATISTICS)] = "exposure",
                 hidden: PositiveInts = (), min_impressions: NonNegative = 20,
                 clamp: Positive = 1e-3, fit: dict | None = None, name: str | None = None):
        if statistic not in STATISTICS:
            raise ValueError(f"unknown EBRank statistic {statistic!r}; expected one of {STATISTICS}")
        self.name = name or self.name
        self.epsilon = float(epsilon)
        self.beta = float(beta)
        self.statistic = statistic
        self.min_impressions = float(min_impressions)
        self.clamp = float(clamp)
        self.n_features = data.n_features
        self.model = BetaPrior(hidden=tuple(hidden), n_features=data.n_features)
        self.fit_config = FitConfig.from_mapping({**self.default_fit, **dict(fit or {})})
        self._fit = MemberFit(self._loss, self.fit_config)

    # -- model
    def init(self, key, data: PaddedDataset):
        return {"prior": self.model.init(key, jnp.zeros((1, self.n_features), jnp.float32))}

    def default_hyper(self):
        return EBRankHyper(epsilon=jnp.float32(self.epsilon))

    def alpha(self, params, features):
        """One member's alpha, through the same member block as a population's (``block_alpha``)."""
        return self.population_alpha(jax.tree_util.tree_map(lambda a: jnp.asarray(a)[None], params), features)[0]

    def population_alpha(self, params, features):
        """alpha ``[P, ...]`` of every member (``params`` with a leading member axis): ``block_alpha``."""
        return block_alpha(self.model, params["prior"], features)

    def prepare(self, params, bucket: Bucket, behaviour=None):
        return self.alpha(params, bucket.features)

    def prepare_population(self, params, bucket: Bucket, behaviour=None):
        """Every member's alpha in member blocks (one product per block over the shared features)."""
        return self.population_alpha(params, bucket.features)

    def _stats(self, counters: DocCounters):
        return beta_statistics(self.statistic, counters.clicks, counters.ips_clicks, counters.impressions,
                               counters.exposure)

    # -- ranking
    def doc_scores(self, alpha, counters: DocCounters, hyper: EBRankHyper):
        c, n, e = self._stats(counters)
        r_hat = posterior_mean(alpha, self.beta, c, n)
        return r_hat + hyper.epsilon * marginal_certainty(r_hat, alpha, self.beta, e)

    def test_scores(self, params, bucket: Bucket, counters: DocCounters, warm: bool):
        return self.scores_from_prepared(self.prepare(params, bucket), counters, warm)

    def scores_from_prepared(self, alpha, counters: DocCounters, warm: bool):
        """Test scores from alpha and the counters (elementwise, any layout): cold the prior mean
        alpha / (alpha + beta), warm the posterior mean (Eq. 25)."""
        if not warm:
            return alpha / (alpha + self.beta)
        c, n, _ = self._stats(counters)
        return posterior_mean(alpha, self.beta, c, n)

    # -- training
    def _loss(self, prior, batch):
        alpha = self.model.apply(prior, batch["features"])
        return prior_nll(alpha, self.beta, batch["c"], batch["n"], self.clamp)

    def _examples(self, docs: dict) -> dict:
        c, n, _ = beta_statistics(self.statistic, docs["clicks"], docs["ips_clicks"], docs["impressions"],
                                  docs["exposure"])
        return {"features": docs["features"].astype(np.float32), "c": c.astype(np.float32),
                "n": n.astype(np.float32)}

    def update_population(self, keys, params, hyper, data, counters, entered, logs):
        """Every member's prior in one compiled fit (fit_members) on its own documents (Eq. 14)."""
        sets = [[self._examples(docs) for docs in split_docs]
                for split_docs in member_splits(data, counters, entered, len(logs), self.min_impressions,
                                               keys, self.fit_config.max_examples)]
        capacity = (split_capacity(data, TRAIN), split_capacity(data, VALI))
        prior, infos = fit_members(self._fit, params["prior"], [s[0] for s in sets], [s[1] for s in sets], keys,
                                   self.name, capacity)
        for (train, _), info in zip(sets, infos):
            if not info.get("skipped"):
                info["clamped_fraction"] = float(np.mean(train["n"] - train["c"] + self.beta <= self.clamp))
        return {**params, "prior": prior}, infos


class EBRankOnlyPrior(EBRank):
    """Ablation: rank by the prior mean alpha / (alpha + beta) alone, always."""

    name = "ebrank_only_prior"

    def doc_scores(self, alpha, counters, hyper):
        return alpha / (alpha + self.beta)

    def scores_from_prepared(self, alpha, counters, warm):
        return alpha / (alpha + self.beta)


class EBRankOnlyBehaviour(Policy):
    """Ablation: rank by the behaviour estimate C / N alone, no prior and no training; cold = 0."""

    name = "ebrank_only_behav"
    narrow_rows = True

    def __init__(self, data: PaddedDataset, statistic: Annotated[str, OneOf(STATISTICS)] = "exposure",
                 min_denominator: Positive = 0.01, name: str | None = None):
        if statistic not in STATISTICS:
            raise ValueError(f"unknown EBRank statistic {statistic!r}; expected one of {STATISTICS}")
        self.name = name or self.name
        self.statistic = statistic
        self.min_denominator = float(min_denominator)

    def _ratio(self, counters: DocCounters):
        c, n, _ = beta_statistics(self.statistic, counters.clicks, counters.ips_clicks, counters.impressions,
                                  counters.exposure)
        return c / jnp.maximum(n, self.min_denominator)

    def doc_scores(self, aux, counters, hyper):
        return self._ratio(counters)

    def test_scores(self, params, bucket, counters, warm):
        return self._ratio(counters) if warm else jnp.zeros(bucket.labels.shape, jnp.float32)
