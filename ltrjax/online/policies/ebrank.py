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
from ltrjax.models.blocks import map_in_blocks
from ltrjax.models.scorers import BetaPrior
from ltrjax.models.train import FitConfig, MemberFit, fit_members
from ltrjax.online.policies.base import Policy
from ltrjax.online.state import DocCounters
from ltrjax.data.queryset import TRAIN, VALI
from ltrjax.online.training_data import member_splits, split_capacity

STATISTICS = ("exposure", "ips")
# Prior training (conf/algorithm/ebrank.yaml). The paper code's SGD 0.05 / batch 64 / <= 1000 epochs /
# patience 60 (`fit_overrides=papers`) reaches the same quality but took 1.8x as long on an MQ2007-sized run. Every
# retrain starts from the current prior (warm start), so the online default stop rule (FitConfig: stop after the
# first epoch without progress) applies; patience 5 with the old rule was within noise
# (docs/results/retrain_mq2008_patience/).
DEFAULT_FIT = {"optimizer": "adam", "learning_rate": 0.01, "batch_size": 256, "max_epochs": 300}
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


def statistic_counters(statistic: str) -> tuple[str, ...]:
    """The counters ``beta_statistics`` reads for ``statistic``."""
    return ("clicks", "exposure") if statistic == "exposure" else ("ips_clicks", "impressions", "exposure")


def posterior_mean(alpha, beta, c, n):
    """R_hat = (C + alpha) / (N + alpha + beta)  (Eq. 25)."""
    return (c + alpha) / (n + alpha + beta)


def marginal_certainty(r_hat, alpha, beta, e):
    """MC = R_hat / (E + alpha + beta)^2  (Eq. 27)."""
    return r_hat / (e + alpha + beta) ** 2


# Below this many clicks the posterior term of Eq. 14 is evaluated with lgamma; from it on, with Stirling's series.
STIRLING_MIN = 8.0


def _stirling_tail(z):
    """lgamma(z) - [(z - 1/2) log z - z + log(2 pi) / 2]: Stirling's series to z^-5 (error < 3e-10 for z >= 8)."""
    r = 1 / z
    r2 = r * r
    return r * (1 / 12 - r2 * (1 / 360 - r2 / 1260))


def _digamma_tail(z):
    """digamma(z) - log z: the asymptotic series to z^-6 (error < 3e-10 for z >= 8)."""
    r = 1 / z
    r2 = r * r
    return -0.5 * r - r2 * (1 / 12 - r2 * (1 / 120 - r2 / 252))


def _lgamma_step(u, v):
    """lgamma(u + v) - lgamma(u) for u >= STIRLING_MIN by Stirling's series, without forming either lgamma:
    (u - 1/2) log1p(v/u) + v log(u + v) - v + tail(u + v) - tail(u)."""
    return (u - 0.5) * jnp.log1p(v / u) + v * jnp.log(u + v) - v + _stirling_tail(u + v) - _stirling_tail(u)


def _posterior_term(alpha, c, y):
    """lgamma(x + y) - lgamma(x) less a constant of (C, y), for x = C + alpha, y = N - C + beta (Eq. 14's
    -log B(C + alpha, N - C + beta), its alpha-dependent part). The branch depends on the data only, so each
    document's dropped constant does not move with alpha, and the value stays of the size of its alpha-dependence
    (float32 resolves it however large C or N):

    * C >= STIRLING_MIN: [lgamma(C + y + alpha) - lgamma(C + y)] - [lgamma(C + alpha) - lgamma(C)], each step by
      Stirling's series (about alpha log1p(y / C)), i.e. less lgamma(C + y) - lgamma(C);
    * C < STIRLING_MIN <= y: [lgamma(x + y) - lgamma(y)] (Stirling in y) - lgamma(x), i.e. less lgamma(y);
    * both small: lgamma(x + y) - lgamma(x), nothing dropped.
    """
    x = c + alpha
    s = x + y
    c8 = jnp.maximum(c, STIRLING_MIN)  # the C >= STIRLING_MIN branch's C (finite where it is not taken)
    s0 = c8 + y
    lg_x = jax.lax.lgamma(x)
    large_c = ((s0 - 0.5) * jnp.log1p(alpha / s0) - (c8 - 0.5) * jnp.log1p(alpha / c8) + alpha * jnp.log1p(y / x)
               + _stirling_tail(s) - _stirling_tail(s0) - _stirling_tail(x) + _stirling_tail(c8))
    large_y = _lgamma_step(y, x) - lg_x
    small = jax.lax.lgamma(s) - lg_x
    return jnp.where(c >= STIRLING_MIN, large_c, jnp.where(y >= STIRLING_MIN, large_y, small))


def _posterior_term_dx(x, y, c):
    """d/dx of ``_posterior_term``: digamma(x + y) - digamma(x), by the same data-dependent branches
    (log1p(y/x) plus the series' tails when C >= STIRLING_MIN, so no cancellation of two digammas near log x)."""
    s = x + y
    large_c = jnp.log1p(y / x) + _digamma_tail(s) - _digamma_tail(x)
    digamma_s = jnp.where(y >= STIRLING_MIN, jnp.log(s) + _digamma_tail(s), jax.lax.digamma(s))
    return jnp.where(c >= STIRLING_MIN, large_c, digamma_s - jax.lax.digamma(x))


@jax.custom_jvp
def beta_binomial_nll(alpha, beta, c, b_post):
    """Eq. 14 per document, log B(alpha, beta) - log B(C + alpha, b_post), as its alpha-dependent lgammas:
    -[lgamma(alpha + beta) - lgamma(alpha)] + [lgamma(C + alpha + b_post) - lgamma(C + alpha)], less a constant
    of (beta, C, b_post) (``prior_nll_constant``). Differentiable in alpha only (a ``custom_jvp`` with
    digamma); beta, C and b_post are data."""
    return _posterior_term(alpha, c, b_post) - (jax.lax.lgamma(alpha + beta) - jax.lax.lgamma(alpha))


@beta_binomial_nll.defjvp
def _beta_binomial_nll_jvp(primals, tangents):
    alpha, beta, c, b_post = primals
    d_alpha = (_posterior_term_dx(c + alpha, b_post, c)
               - (jax.lax.digamma(alpha + beta) - jax.lax.digamma(alpha)))
    return beta_binomial_nll(alpha, beta, c, b_post), d_alpha * tangents[0]


def posterior_b(beta, c, n, clamp: float):
    """N - C + beta, clamped below at ``clamp``: N - C + beta <= 0 can happen when C > N (IPS clicks, or clicks
    above exposure), and the clamp keeps the loss and its gradient finite."""
    return jnp.maximum(n - c + beta, clamp)


def prior_nll(alpha, beta, c, n, clamp: float):
    """Negative Beta-binomial marginal log-likelihood per document, up to a constant of the data (Eq. 14):
    ``beta_binomial_nll``, differentiated in alpha only (C, N are counts)."""
    alpha = jnp.asarray(alpha)
    c = jax.lax.stop_gradient(jnp.asarray(c, alpha.dtype))
    b_post = jax.lax.stop_gradient(posterior_b(beta, c, jnp.asarray(n, alpha.dtype), clamp))
    alpha, c, b_post = jnp.broadcast_arrays(alpha, c, b_post)
    return beta_binomial_nll(alpha, jnp.asarray(beta, alpha.dtype), c, b_post)


def prior_nll_constant(beta, c, n, clamp: float):
    """What ``prior_nll`` drops: betaln(alpha, beta) - betaln(C + alpha, b_post) - prior_nll, a function of the
    data alone (for tests and for reading absolute loss values)."""
    y = posterior_b(beta, c, n, clamp)
    lg = jax.lax.lgamma
    dropped = jnp.where(c >= STIRLING_MIN, lg(c + y) - lg(jnp.maximum(c, STIRLING_MIN)),
                        jnp.where(y >= STIRLING_MIN, lg(y), 0.0))
    return lg(jnp.asarray(beta, y.dtype)) - lg(y) + dropped


def prior_nll_betaln(alpha, beta, c, n, clamp: float):
    """Eq. 14 through ``betaln`` (the former loss; the reference of tests and benchmarks/retrain.py)."""
    return betaln(alpha, beta) - betaln(c + alpha, posterior_b(beta, c, n, clamp))


def block_alpha(model, priors, features: jax.Array, block: int = MEMBER_BLOCK) -> jax.Array:
    """alpha ``[P, *features.shape[:-1]]`` of ``P`` stacked priors (leading member axis) over one shared feature
    array ``[..., F]`` (Eq. 14's prior f_theta): the members go ``block`` at a time through one product over the
    features (``ltrjax.models.blocks.map_in_blocks``: ``vmap`` of the prior over the block with the features
    unbatched, a single GEMM), so the features are read once per block instead of per member."""
    return map_in_blocks(lambda prior, f: model.apply(prior, f), priors, block, features)


@struct.dataclass
class EBRankHyper:
    epsilon: Annotated[jax.Array, NonNegative] = 20.0  # exploration strength (Eq. 13)


class EBRank(Policy):
    name = "ebrank"
    narrow_rows = True
    trains = True
    reads_logs = False  # retrains from the counters (Eq. 14)
    test_from_prepare = True
    prepared_per_document = True
    Hyper = EBRankHyper
    default_fit = DEFAULT_FIT

    def __init__(self, data: PaddedDataset, epsilon: float = EBRankHyper.epsilon, beta: Positive = 5.0,
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

        def init_prior(key):  # one program (eager, flax's init compiles one per operation it runs)
            return self.model.init(key, jnp.zeros((1, self.n_features), jnp.float32))

        self._init_prior = jax.jit(init_prior)

    # -- model
    def init(self, key, data: PaddedDataset):
        return {"prior": self._init_prior(key)}

    def default_hyper(self):
        return EBRankHyper(epsilon=jnp.float32(self.epsilon))

    def alpha(self, params, features):
        """One member's alpha, through the same member block as a population's (``block_alpha``)."""
        return self.population_alpha(jax.tree_util.tree_map(lambda a: jnp.asarray(a)[None], params), features)[0]

    def population_alpha(self, params, features):
        """alpha ``[P, ...]`` of every member (``params`` with a leading member axis): ``block_alpha``."""
        return block_alpha(self.model, params["prior"], features)

    def prepare(self, params, bucket: Bucket, behaviour=None):
        """alpha of every document of the bucket ``[Nb+1]`` (``prepared_per_document``)."""
        return self.alpha(params, bucket.doc_features)

    def prepare_population(self, params, bucket: Bucket, behaviour=None):
        """Every member's alpha ``[P, Nb+1]`` in member blocks (one product per block over the shared features),
        once per document; the simulator lays each member's out in entry order."""
        return self.population_alpha(params, bucket.doc_features)

    @property
    def retrain_counters(self) -> tuple[str, ...]:
        """The counters of the chosen statistic (``beta_statistics``); impressions filter the examples."""
        return statistic_counters(self.statistic)

    @property
    def counters_read(self) -> tuple[str, ...]:
        """The statistic's counters (Eq. 25-27) and impressions (the retrain's example filter)."""
        return (*self.retrain_counters, "impressions")

    def _stats(self, counters: DocCounters):
        return beta_statistics(self.statistic, counters.clicks, counters.ips_clicks, counters.impressions,
                               counters.exposure)

    # -- ranking
    def doc_scores(self, alpha, counters: DocCounters, hyper: EBRankHyper):
        c, n, e = self._stats(counters)
        r_hat = posterior_mean(alpha, self.beta, c, n)
        return r_hat + hyper.epsilon * marginal_certainty(r_hat, alpha, self.beta, e)

    def test_scores(self, params, bucket: Bucket, counters: DocCounters, warm: bool):
        return self.scores_from_prepared(bucket.on_slots(self.prepare(params, bucket)), counters, warm)

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
        c, n, _ = beta_statistics(self.statistic, *(docs.get(k) for k in ("clicks", "ips_clicks", "impressions",
                                                                          "exposure")))  # only those it reads
        return {"doc": docs["doc"], "c": c.astype(np.float32), "n": n.astype(np.float32)}

    def update_population(self, keys, params, hyper, data, counters, entered, logs):
        """Every member's prior in one compiled fit (fit_members) on its own documents (Eq. 14)."""
        sets = [[self._examples(docs) for docs in split_docs]
                for split_docs in member_splits(data, counters, entered, len(logs), self.min_impressions,
                                               keys, self.fit_config.max_examples)]
        capacity = (split_capacity(data, TRAIN), split_capacity(data, VALI))
        prior, infos = fit_members(self._fit, params["prior"], [s[0] for s in sets], [s[1] for s in sets], keys,
                                   self.name, capacity, data.document_table())
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

    @property
    def counters_read(self) -> tuple[str, ...]:
        """The chosen statistic's counters (``beta_statistics``)."""
        return statistic_counters(self.statistic)

    def _ratio(self, counters: DocCounters):
        c, n, _ = beta_statistics(self.statistic, counters.clicks, counters.ips_clicks, counters.impressions,
                                  counters.exposure)
        return c / jnp.maximum(n, self.min_denominator)

    def doc_scores(self, aux, counters, hyper):
        return self._ratio(counters)

    def test_scores(self, params, bucket, counters, warm):
        return self._ratio(counters) if warm else jnp.zeros(bucket.labels.shape, jnp.float32)
