"""UCBRank and its uncertainty-oblivious baselines (UCBRank §4-5; seed-code.md §2).

One MC-dropout MLP f (``ltrjax.models.mc_dropout``: 2 x 32 sigmoid, dropout 0.5 on the last
hidden layer), retrained at retrain points with the MSE to the affine label Delta (Eq. 8) of
training-split documents shown more than ``min_impressions`` times (default 0: shown at least
once), early-stopping on validation-split documents under the same filter (Adam, lr 1e-3).

Feature settings (``ltrjax.online.behaviour``):

- ``wo_behav``  f(x_nb)                                         (Eq. 10)
- ``concat``    f([x_nb, x_b]), x_b = Delta or CTR               (Eq. 11)
- ``ie``        x_b (Delta) if the document was shown (sum alpha_k > 0), else f(x_nb)  (Eq. 12)

Behaviour features are *refreshed* by default (``evidence="refreshed"``, the UCBRank code: "policy scores, doc_freq,
clicks and Delta are frozen within an interval", seed-code.md §2.1): x_b, the IE switch and every model output (the
deterministic f and the MC-dropout mean/std over ``n_passes`` shared masks, Eq. 15-16) are computed in ``prepare``
from the counters as of the segment start (a segment = one refresh, ``sim.refreshes``), and ``refresh`` stores a
fresh dropout key so each refresh redraws the masks. Inside the session scan only the exploration term is added.
With ``evidence="live"`` (``ie`` only; EBRank Table 3 sets it: under the EBRank protocol behaviour is read live, and
the EBRank code rebuilds its UCBRank's scores every session, seed-code.md §2.3) Eq. 12's switch and x_b = Delta are
read from the live counters in the scan; the model outputs still change only at refreshes. Strategies (K = 5):

- ``topk``     s = f                                                (lambda = 0)
- ``randomk``  s = U(0,1) per document and session: a uniform random K-subset (f still trains)
- ``epsilon``  s = f + lambda U(0,1)                                (EpsilonRank)
- ``ucb``      s = f + lambda es                                    (Eq. 13)
               es = MC-dropout std of the model score (Eq. 15-16), and under ``ie`` for documents
               shown at the refresh es = sqrt(log T_q / T_d) (Eq. 20) with the *live* T_q (the
               query's sessions so far, this one included) and T_d (the document's impressions).
               f under ``ucb`` is the MC-dropout mean (``ucb_center="mc_mean"``, the code's
               ``std_proposional``) or the deterministic forward (``"model"``, Eq. 13 literally).

The paper code's choices where they differ (seed-code.md §2.2): its Random-k is EpsilonRank with
lambda = 100 (1000 for IE), not a uniform subset; its IE-UCB (``merge_ucb``) gives a document not
yet shown the count bonus sqrt(log T_q / 1) (``ie_unshown_bonus="count"``) instead of the model's
MC-dropout std (the paper's §5.2.2 text; default here) and centres it on the deterministic f.

``test_scores``: the deterministic f (no dropout, no exploration); warm with x_b from the given
counters, cold with x_b at its unseen value (Delta: -2, CTR: 0) for concat and f(x_nb) for ie.
"""

from __future__ import annotations

from typing import Annotated

import jax
import jax.numpy as jnp
from flax import struct

from ltrjax.constraints import NonNegative, OneOf, PositiveInt, PositiveInts, Range
from ltrjax.data.layout import Bucket, PaddedDataset
from ltrjax.models.mc_dropout import ACTIVATIONS, N_PASSES, MCDropoutMLP
from ltrjax.models.train import FitConfig, MemberFit, fit_members
from ltrjax.online import behaviour as behav
from ltrjax.online import host_random
from ltrjax.online.policies.base import Policy, QueryView
from ltrjax.online.policies.counterfactual import counters_of, fit_examples
from ltrjax.online.state import DocCounters
from ltrjax.data.queryset import TRAIN, VALI
from ltrjax.online.training_data import member_splits, split_capacity

STRATEGIES = ("topk", "randomk", "epsilon", "ucb")
UCB_CENTERS = ("mc_mean", "model")
IE_UNSHOWN_BONUSES = ("mc_std", "count")
EVIDENCE = ("refreshed", "live")

# The paper code (seed-code.md §2.2): Keras Adam (lr 1e-3), <= 100 epochs, early stopping with restore-best
# (patience 40 on MQ2007/MQ2008, 5 on MSLR), batch the largest power of two below #validation docs (<= 4096).
# The papers' form of the stop rule (grace 1, no min_delta), not the online default (FitConfig: no forced epochs),
# which left the MC-dropout MLP near its initialisation on a toy check (docs/performance.md).
DEFAULT_FIT = {"optimizer": "adam", "learning_rate": 1e-3, "batch_size": 256, "max_epochs": 100, "patience": 40,
               "grace": 1, "min_delta": 0.0}


def ucb_bonus(issue_count, impressions) -> jax.Array:
    """Eq. 20's std estimate of Delta: sqrt(log T_q / T_d) (T_q, T_d clamped to >= 1)."""
    t_q = jnp.maximum(jnp.asarray(issue_count, jnp.float32), 1.0)
    t_d = jnp.maximum(jnp.asarray(impressions, jnp.float32), 1.0)
    return jnp.sqrt(jnp.log(t_q) / t_d)


@struct.dataclass
class UCBHyper:
    exploration: Annotated[jax.Array, NonNegative] = 0.0  # lambda of Eq. 13 (UCB) or the noise scale (EpsilonRank)


class UCBRank(Policy):
    Hyper = UCBHyper
    """An MC-dropout MLP on Delta labels, served by Top-k, Random-k, EpsilonRank or UCB (Eq. 13)."""

    name = "ucbrank"
    trains = True
    reads_logs = False  # retrains from the counters
    default_fit = DEFAULT_FIT

    def __init__(self, data: PaddedDataset, strategy: Annotated[str, OneOf(STRATEGIES)] = "ucb",
                 setting: Annotated[str, OneOf(behav.SETTINGS)] = "wo_behav",
                 behaviour: Annotated[str, OneOf(behav.FEATURES)] = "delta", exploration: float = 1.0,
                 hidden: PositiveInts = (32, 32), activation: Annotated[str, OneOf(ACTIVATIONS)] = "sigmoid",
                 dropout: Annotated[float, Range(0, 1, hi_open=True)] = 0.5, n_passes: PositiveInt = N_PASSES,
                 ucb_center: Annotated[str, OneOf(UCB_CENTERS)] = "mc_mean",
                 ie_unshown_bonus: Annotated[str, OneOf(IE_UNSHOWN_BONUSES)] = "mc_std",
                 evidence: Annotated[str, OneOf(EVIDENCE)] = "refreshed",
                 min_impressions: NonNegative = 0, ctr_prior_count: NonNegative = 0.0, train: bool = True,
                 fit: dict | None = None, name: str | None = None):
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {strategy!r}; expected one of {STRATEGIES}")
        if ucb_center not in UCB_CENTERS:
            raise ValueError(f"unknown ucb_center {ucb_center!r}; expected one of {UCB_CENTERS}")
        if ie_unshown_bonus not in IE_UNSHOWN_BONUSES:
            raise ValueError(f"unknown ie_unshown_bonus {ie_unshown_bonus!r}; expected one of {IE_UNSHOWN_BONUSES}")
        if evidence not in EVIDENCE:
            raise ValueError(f"unknown evidence {evidence!r}; expected one of {EVIDENCE}")
        if evidence == "live" and setting == "concat":
            raise ValueError("evidence='live' reads x_b in the session scan, which only setting='ie' can: under 'concat' "
                             "x_b is a model input, computed at refreshes (the CF *_concat learners read it live)")
        self.name = name or self.name
        self.strategy = strategy
        self.setting = behav.check_setting(setting)
        self.live = evidence == "live" and self.setting == "ie"  # Eq. 12 from the live counters in the scan
        self.behaviour = behav.check_feature(behaviour)
        self.exploration = float(exploration)
        self.ucb_center = ucb_center
        self.ie_unshown_bonus = ie_unshown_bonus
        self.min_impressions = float(min_impressions)
        self.ctr_prior_count = float(ctr_prior_count)
        self.trains = bool(train)
        self.model = MCDropoutMLP(data.n_features + int(self.setting == "concat"), hidden, activation, dropout,
                                  n_passes)
        self.fit_config = FitConfig.from_mapping({**self.default_fit, **dict(fit or {})})
        self._fit = MemberFit(self.model.loss, self.fit_config)

    # -- parameters
    def init(self, key, data: PaddedDataset):
        k_model, k_dropout = jax.random.split(key)
        return {"model": self.model.init(k_model), "dropout_key": k_dropout}

    def default_hyper(self):
        return UCBHyper(exploration=jnp.float32(self.exploration))

    def refresh(self, key, params):
        """A new dropout key per refresh: the N MC masks are redrawn (the code re-samples per interval)."""
        return {**params, "dropout_key": key}

    # -- features and model outputs
    def x_b(self, counters: DocCounters):
        return behav.feature(self.behaviour, counters, self.ctr_prior_count)

    def inputs(self, features, counters: DocCounters | None):
        """Model inputs: x_nb, or [x_nb, x_b] for concat (x_b unseen-valued when ``counters`` is None)."""
        if self.setting != "concat":
            return features
        x_b = (jnp.full(features.shape[:-1], behav.unseen_value(self.behaviour), features.dtype)
               if counters is None else self.x_b(counters).astype(features.dtype))
        return jnp.concatenate([features, x_b[..., None]], axis=-1)

    def evidence(self, model_scores, counters: DocCounters):
        """Eq. 12 under ``ie`` (x_b where sum alpha > 0, else the model); the model score otherwise."""
        if self.setting != "ie":
            return model_scores
        return behav.independent_evidence(model_scores, counters, self.behaviour, self.ctr_prior_count)

    def on_slots(self, fn, bucket: Bucket, counters: DocCounters | None):
        """``fn`` of the model inputs of every ``[query, slot]`` of ``bucket``. Without x_b among the inputs, once
        per document and then laid out (the MC-dropout masks are shared by every row, so the draws are the same
        as over padded slots); with concat's x_b, over the padded inputs (x_b from ``counters``, ``inputs``)."""
        if self.setting != "concat":
            return jax.tree_util.tree_map(bucket.on_slots, fn(bucket.doc_features))
        return fn(self.inputs(bucket.features, counters))

    def refreshed_evidence(self, model_scores, behaviour: DocCounters):
        """Eq. 12 at the refresh (``evidence``: ``evidence="live"`` applies it in the scan instead)."""
        return model_scores if self.live else self.evidence(model_scores, behaviour)

    def prepare(self, params, bucket: Bucket, behaviour: DocCounters):
        """Per-document values of one refresh from the counters at the segment start (dataset order)."""
        model = lambda x: self.model(params["model"], x)  # noqa: E731
        if self.strategy != "ucb":
            return {"score": self.refreshed_evidence(self.on_slots(model, bucket, behaviour), behaviour)}
        mean, std = self.on_slots(lambda x: self.model.mc_scores(params["model"], x, params["dropout_key"]), bucket,
                                  behaviour)
        center = mean if self.ucb_center == "mc_mean" else self.on_slots(model, bucket, behaviour)
        aux = {"score": self.refreshed_evidence(center, behaviour), "std": std}
        if self.setting == "ie" and not self.live:
            aux["shown"] = behaviour.alpha_sum > 0  # the Eq. 12 switch, frozen with x_b
        return aux

    # -- ranking
    def exploration_scale(self, aux, view: QueryView):
        """es of Eq. 13: the MC-dropout std, or sqrt(log T_q / T_d) (Eq. 20) for IE evidence documents."""
        if self.setting != "ie":
            return aux["std"]
        bonus = ucb_bonus(view.issue_count, view.counters.impressions)
        unshown = aux["std"] if self.ie_unshown_bonus == "mc_std" else bonus
        shown = view.counters.alpha_sum > 0 if self.live else aux["shown"]
        return jnp.where(shown, bonus, unshown)

    def session_scores(self, view: QueryView, key):
        if self.strategy == "randomk":
            return jax.random.uniform(key, view.counters.clicks.shape)
        scores = view.aux["score"]
        if self.live:
            scores = self.evidence(scores, view.counters)
        if self.strategy == "epsilon":
            scores = scores + view.hyper.exploration * jax.random.uniform(key, scores.shape)
        elif self.strategy == "ucb":
            scores = scores + view.hyper.exploration * self.exploration_scale(view.aux, view)
        return scores

    def test_scores(self, params, bucket: Bucket, counters: DocCounters, warm: bool):
        model = lambda x: self.model(params["model"], x)  # noqa: E731
        if not warm:
            return self.on_slots(model, bucket, None)
        return self.evidence(self.on_slots(model, bucket, counters), counters)

    # -- training
    def examples(self, docs: dict) -> dict:
        """Inputs (x_b from the counters at the retrain point for concat) and Delta labels (Eq. 8)."""
        counters = counters_of(docs)
        extra = self.x_b(counters) if self.setting == "concat" else None
        return fit_examples(docs, behav.delta(counters), extra)

    def update_population(self, keys, params, hyper, data, counters, entered, logs):
        """Every member's MLP in one compiled fit (fit_members): MSE to Delta (Eq. 8)."""
        split_keys = host_random.split(keys)  # [M, 2, 2], jax.vmap(jax.random.split)'s keys
        trains, vals, n_vals = [], [], []
        for i, split_docs in enumerate(member_splits(data, counters, entered, len(logs), self.min_impressions)):
            train, val = (self.examples(docs) for docs in split_docs)
            n_vals.append(len(val["target"]))
            if not n_vals[-1]:  # early-stop on the (dropout-free) training loss until validation data exist
                val = dict(train)
            # per-example dropout seeds (mc_dropout.example_masks): their presence makes the loss use dropout
            # (jax.random.bits' bits, drawn by NumPy: an eager draw compiled a program for every new example count)
            train["seed"] = host_random.random_bits(split_keys[i, 1], (len(train["target"]),))
            trains.append(train)
            vals.append(val)
        model, infos = fit_members(self._fit, params["model"], trains, vals, split_keys[:, 0], self.name,
                                   (split_capacity(data, TRAIN), split_capacity(data, VALI)), data.document_table())
        return {**params, "model": model}, [{**info, "n_val": n} for info, n in zip(infos, n_vals)]
