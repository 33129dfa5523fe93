"""Why Vectorization does not recover the o_k on the d = 3 vector-EH bed (issue 11; established by the runs in
docs/results/fidelity_vector_eh/recovery/): fast, deterministic checks of the facts behind it.

* Given the true r(y), the clicks identify the o_k, also through Eq. 9's softmax loss (the data is not the limit).
* In feature space the click rate P(click | x, k) = <E[r(y) | x], o_k> has rank 3, but with uncertain grades
  (feature noise 0.35, the confounded_mlp bed) its logarithm, which the softmax link fits with <r(x), o_k>, does not:
  its 4th direction is a third of its 3rd, and the span of its top 3 position factors is not the true O. With sharp
  features (noise 0.05) log P is rank 3 to 2% and its factors span the true O.
"""

import numpy as np
import pytest

from ltrjax.offline.fidelity import basis_posterior, principal_cosines, vector_eh


def _oracle_softmax_o(r, clicks, n_sess):
    """argmin_O of the listwise softmax loss with z_qk = <r_qk, o_k>, r fixed (convex in O)."""
    import jax
    import jax.numpy as jnp
    import scipy.optimize

    from ltrjax.offline.estimators.base import weighted_softmax_ce

    q, k, d = r.shape
    r, c, mask = jnp.asarray(r, jnp.float32), jnp.asarray(clicks, jnp.float32), jnp.ones((q, k), bool)
    tot = float(np.sum(n_sess))
    vg = jax.jit(jax.value_and_grad(lambda f: weighted_softmax_ce(jnp.sum(r * f.reshape(k, d)[None], -1), c, mask) / tot))

    def fun(x):
        v, g = vg(jnp.asarray(x, jnp.float32))
        return float(v), np.asarray(g, np.float64)

    return scipy.optimize.minimize(fun, np.ones(k * d), jac=True, method="L-BFGS-B").x.reshape(k, d)


def test_true_relevance_identifies_observation_vectors_d3():
    model = vector_eh(3, junk=0.3)
    rng = np.random.default_rng(0)
    y = rng.choice(5, size=(400, 10), p=[0.5, 0.25, 0.13, 0.08, 0.04])  # grades at random positions
    n = np.full(400, 100.0)
    clicks = n[:, None] * model.matrix[y, np.arange(10)[None]]  # expected clicks of Eq. 2
    r = model.relevance[y]
    o_soft = _oracle_softmax_o(r, clicks, n)
    assert principal_cosines(model.observation, o_soft)[-1] > 0.95
    # the identity link (per-position least squares of the click rate) recovers O exactly
    o_rate = np.stack([np.linalg.lstsq(r[:, j], clicks[:, j] / n, rcond=None)[0] for j in range(10)])
    assert principal_cosines(model.observation, o_rate)[-1] > 0.999


@pytest.mark.parametrize("noise, sharp", [(0.05, True), (0.35, False)])
def test_log_click_rate_not_rank3_with_uncertain_grades(noise, sharp):
    model = vector_eh(3, junk=0.3)
    post = basis_posterior(n_queries=200, noise=noise)
    rate = post @ model.matrix  # P(click | x, k) in feature space
    sv_rate = np.linalg.svd(rate, compute_uv=False)
    assert sv_rate[3] < 1e-8 * sv_rate[2]  # the rate is exactly rank 3 (Eq. 2 holds in feature space)
    log_rate = np.log(rate)
    _, sv, vt = np.linalg.svd(log_rate - log_rate.mean(), full_matrices=False)
    cos = principal_cosines(model.observation, vt[:3].T)[-1]
    if sharp:
        assert sv[3] < 0.05 * sv[2] and cos > 0.95
    else:
        assert sv[3] > 0.25 * sv[2] and cos < 0.9


def test_vectorization_base_model_log_variance_is_floored():
    """Eq. 10's Gaussian NLL is unbounded below once the base model fits the o_k exactly (all o_k are 1 at the end
    of the freeze): log sigma^2 -> -inf overflowed exp(-log sigma^2) and the NaN reached every parameter through
    the global-norm clip (Yahoo!-shaped data: NDCG@10 .33-.48 from the end-of-freeze checkpoint). With the floor
    (``logvar_min``, default -10) the loss, its gradient and the scores stay finite."""
    import jax
    import jax.numpy as jnp

    from ltrjax.offline.estimators import ClickBatch, Propensities
    from ltrjax.offline.estimators.vectorization import make
    from ltrjax.offline.rankers import make_scorer

    q, k, f = 4, 5, 3
    est = make(make_scorer("linear"), dim=2, freeze=0, base_hidden=(8,))
    props = Propensities(*(jnp.ones((k,)) for _ in range(3)))
    params, state = est.init(jax.random.PRNGKey(0), f, props)
    base = params["base"]["params"]["Dense_1"]
    params["base"]["params"]["Dense_1"] = {**base, "bias": base["bias"].at[2:].set(-1000.0)}  # log sigma^2 = -1000
    x = jax.random.uniform(jax.random.PRNGKey(1), (q, k, f))
    mask = jnp.ones((q, k), bool)
    batch = ClickBatch(features=x, mask=mask, n_sessions=jnp.full((q,), 10.0), clicks=jnp.ones((q, k)),
                       pairs=jnp.zeros((q, k, k)), pairs_lambda=jnp.zeros((q, k, k)))
    # jitted (one program each, as training runs them) rather than one compiled program per eager operation
    (loss, _), grads = jax.jit(jax.value_and_grad(est.loss, has_aux=True))(params, state, batch, jax.random.PRNGKey(2))
    assert np.isfinite(float(loss))
    assert all(np.all(np.isfinite(np.asarray(g))) for g in jax.tree_util.tree_leaves(grads))
    assert np.all(np.isfinite(np.asarray(jax.jit(est.score)(params, state, x, mask))))
