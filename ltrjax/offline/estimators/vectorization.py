"""Vectorization (Chen et al. KDD'22; baselines.md §5.8).

Relevance embedding r(x) in R^d (a d-output scorer) and one observation vector o_k in R^d per
position (initialised to 1, frozen for the first ``freeze`` steps). Click logit
z_i = <r(x_i), o_{k_i}> trained with the listwise softmax loss (Vectorization Eq. 9). After the
freeze the Gaussian base model v(x) = (mu, log sigma^2) fits the observation vectors
(Eq. 10, on stop-gradient features and o):
  L_base = mean[(mu(x_i) - sg(o_{k_i}))^2 e^{-log sigma^2(x_i)}] + mean[log sigma^2(x_i)] + l2 sum ||W||^2/2
Ranking uses the base vector (Eq. 8) b_q = sum_i mu(x_i) e^{-log sigma^2(x_i)} / sum_i e^{-log sigma^2(x_i)}
(element-wise, over the query's candidates) and scores s_i = <r(x_i), b_q> (Eq. 3).

Schedule: validation-based early stopping may end training only after ``freeze +
joint_steps`` steps (default 500 + 4000; the paper trains 15k-30k). With the former ``freeze +
200`` the observation vectors had barely left their initial 1 when training stopped: on trust-bias
clicks Vectorization (d = 2) then trailed Affine by .047 NDCG@10, with 4000 joint steps it equals
it (docs/fidelity.md, ``tests/test_fidelity.py``). Validation selects the checkpoint from the
end of the freeze on (``Estimator.select_from``), as for every other estimator; before, the forced steps
left Vectorization with its last iterate (d = 3 vector-EH clicks: .742 -> .757 NDCG@10). ``observation_init`` and
``train_observation`` (diagnostics) start the o_k at given vectors and/or keep them fixed.
"""

import jax
import jax.numpy as jnp

from ltrjax.offline.estimators.base import Estimator, n_sessions, weighted_softmax_ce
from ltrjax.offline.rankers import GaussianBaseModel, kernel_l2


def base_vector(mu, logvar, mask):
    """Precision-weighted mean of mu over the masked candidates (Vectorization Eq. 8); [..., d]."""
    prec = jnp.exp(-logvar) * mask[..., None]
    return jnp.sum(mu * prec, axis=-2) / jnp.maximum(jnp.sum(prec, axis=-2), 1e-12)


def make(scorer, *, dim: int = 2, freeze: int = 500, joint_steps: int = 4000, l2: float = 1e-3,
         base_hidden: tuple[int, ...] = (256, 64), logvar_min: float = -10.0,
         observation_init: tuple | None = None, train_observation: bool = True) -> Estimator:
    """Vectorization with ``dim``-dimensional relevance (the scalar ``scorer`` widened to ``dim`` outputs).

    ``freeze``: steps with o_k frozen at 1; ``joint_steps``: steps after the freeze before early stopping may end
    training; ``l2``: base-model weight decay (Eq. 10); ``base_hidden``: base-model widths; ``logvar_min``: floor of
    the base model's log-variance; ``observation_init`` / ``train_observation``: diagnostics (start the o_k at
    given vectors, keep them fixed).
    """
    relevance_model = scorer.clone(out_dim=int(dim))
    dim, freeze, joint, l2 = int(dim), int(freeze), int(joint_steps), float(l2)
    # floor of the base model's log-variance: at the end of the freeze every o_k is 1, the base model can fit
    # mu = o exactly and Eq. 10's Gaussian NLL then drives log sigma^2 to -inf (loss unbounded below); on
    # Yahoo!-shaped data (700 features) that overflowed exp(-log sigma^2) one epoch after the freeze, and the
    # NaN reached every parameter through the global-norm clip (docs/results/fidelity_vec_synthetic_yahoo_mlp)
    logvar_min = float(logvar_min)
    obs_init = observation_init
    train_obs = bool(train_observation)
    base = GaussianBaseModel(dim=dim, hidden=tuple(base_hidden))

    def base_gaussian(params, features):
        """(mu, log sigma^2) of the base model, the log-variance floored at ``logvar_min``."""
        mu, logvar = base.apply(params["base"], features)
        return mu, jnp.maximum(logvar, logvar_min)

    def init(key, n_features, props):
        k = props.theta.shape[0]
        k1, k2 = jax.random.split(key)
        x = jnp.zeros((1, n_features), jnp.float32)
        obs = jnp.ones((k, dim), jnp.float32) if obs_init is None else jnp.asarray(obs_init, jnp.float32)[:k]
        params = {"ranker": relevance_model.init(k1, x), "observation": obs,
                  "base": base.init(k2, x)}
        return params, {"step": jnp.int32(0), "props": props}

    def loss(params, state, batch, key):
        frozen = state["step"] < freeze
        r = relevance_model.apply(params["ranker"], batch.features)  # [B, K, d]
        o_frozen = frozen | (not train_obs)
        o = jnp.where(o_frozen, jax.lax.stop_gradient(params["observation"]), params["observation"])
        z = jnp.sum(r * o, axis=-1)
        sup = weighted_softmax_ce(z, batch.clicks, batch.mask) / n_sessions(batch)
        mu, logvar = base_gaussian(params, jax.lax.stop_gradient(batch.features))
        w = jnp.where(batch.mask, batch.n_sessions[:, None], 0.0)
        per = jnp.mean((mu - jax.lax.stop_gradient(o)) ** 2 * jnp.exp(-logvar) + logvar, axis=-1)
        dens = jnp.sum(w * per) / jnp.maximum(jnp.sum(w), 1e-9) + l2 * kernel_l2(params["base"])
        total = sup + jnp.where(frozen, 0.0, 1.0) * dens
        return total, {**state, "step": state["step"] + 1}

    def score(params, state, features, mask):
        r = relevance_model.apply(params["ranker"], features)
        b = base_vector(*base_gaussian(params, features), mask)
        return jnp.sum(r * b[..., None, :], axis=-1)

    return Estimator("vectorization", init, loss, score, min_steps=freeze + joint, select_from=freeze)
