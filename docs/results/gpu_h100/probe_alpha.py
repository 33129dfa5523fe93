"""The GPU probe of 2026-11-26 (docs/results/gpu_h100/results.md, run 2), kept as it ran: which of EBRank's block-alpha
cases differ from the member computed alone, with the code's block_alpha ("current") and with an
optimization_barrier around the block body ("barrier"). Run from the repository root with tests/ importable."""
import sys
import jax, jax.numpy as jnp, numpy as np
sys.path.insert(0, "tests")
import toy_sims
from ltrjax.online.policies import ebrank as eb
from ltrjax.online.policies.ebrank import EBRank, MEMBER_BLOCK

def barrier_alpha(model, priors, features, block=MEMBER_BLOCK):
    n = jax.tree_util.tree_leaves(priors)[0].shape[0]
    pad = (-n) % block
    blocks = jax.tree_util.tree_map(
        lambda a: jnp.concatenate([a, jnp.repeat(a[-1:], pad, axis=0)]).reshape((-1, block) + a.shape[1:]), priors)
    def body(b):
        b, f = jax.lax.optimization_barrier((b, features))
        return jax.lax.optimization_barrier(jax.vmap(lambda p: model.apply(p, f))(b))
    out = jax.lax.map(body, blocks)
    return out.reshape((-1,) + out.shape[2:])[:n]

sim = toy_sims.small_sim()
bucket = sim.data.buckets[0]
for variant, fn in (("current", eb.block_alpha), ("barrier", barrier_alpha)):
    eb_fn = fn
    for hidden in [(), (8,)]:
        policy = EBRank(sim.data, hidden=hidden)
        members = [jax.tree_util.tree_map(lambda a, i=i: a * (1.0 + 0.1 * i) + 0.01 * i,
                                          policy.init(jax.random.PRNGKey(i), sim.data)) for i in range(11)]
        stack = lambda ms: jax.tree_util.tree_map(lambda *a: np.stack(a), *ms)
        pop = jax.jit(lambda p, fn=fn: fn(policy.model, p["prior"], bucket.features))
        solo = [np.asarray(pop(stack([m])))[0] for m in members]
        prep = [np.asarray(jax.jit(policy.prepare)(m, bucket)) for m in members] if variant == "current" else solo
        res = []
        for size in (1, 7, MEMBER_BLOCK, MEMBER_BLOCK + 3, 16, 24):
            order = np.random.RandomState(size).permutation(len(members))[:min(size, 11)]
            if size > 11:
                order = np.concatenate([order, order])[:size]
            got = np.asarray(pop(stack([members[i] for i in order])))
            bad = sum(not np.array_equal(got[p], solo[i]) for p, i in enumerate(order))
            badp = sum(not np.array_equal(got[p], prep[i]) for p, i in enumerate(order))
            res.append(f"size {size}: {bad}/{len(order)} differ from pop(1), {badp} from prepare")
        print(variant, hidden, "; ".join(res), flush=True)
