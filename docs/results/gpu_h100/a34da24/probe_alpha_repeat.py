"""Does EBRank's block alpha (hidden=(8,)) differ between compilations on this GPU? Fresh programs, no persistent cache."""
import os, sys, time
import jax, numpy as np
jax.config.update("jax_enable_compilation_cache", False)
from ltrjax.precision import set_matmul_precision
set_matmul_precision()
sys.path.insert(0, "tests")
import toy_sims
from ltrjax.online.policies.ebrank import EBRank, MEMBER_BLOCK
print("XLA_FLAGS", os.environ.get("XLA_FLAGS"), jax.default_backend(), flush=True)
sim = toy_sims.small_sim()
bucket = sim.data.buckets[0]
for hidden in [(8,), ()]:
    policy = EBRank(sim.data, hidden=hidden)
    members = [jax.tree_util.tree_map(lambda a, i=i: a * (1.0 + 0.1 * i) + 0.01 * i,
                                      policy.init(jax.random.PRNGKey(i), sim.data)) for i in range(11)]
    stack = lambda ms: jax.tree_util.tree_map(lambda *a: np.stack(a), *ms)
    first = None
    for rep in range(3):
        prepare = jax.jit(lambda m, b, rep=rep: policy.prepare(m, b))
        solo = [np.asarray(prepare(m, bucket)) for m in members]
        if first is None:
            first = solo
        across = sum(not np.array_equal(a, b) for a, b in zip(solo, first))
        res = []
        for size in (1, 7, MEMBER_BLOCK, MEMBER_BLOCK + 3):
            population = jax.jit(lambda p, size=size, rep=rep: policy.prepare_population(p, bucket, None))
            order = np.random.RandomState(size).permutation(len(members))[:size]
            got = np.asarray(population(stack([members[i] for i in order])))
            bad = [p for p, i in enumerate(order) if not np.array_equal(got[p], solo[i])]
            rel = max([float(np.max(np.abs(got[p] - solo[order[p]]) / np.abs(solo[order[p]]))) for p in bad] or [0.0])
            res.append(f"{size}:{len(bad)}/{size} (rel {rel:.1e})")
        print(f"hidden {hidden} rep {rep}: solo differs from rep 0's solo in {across}/11; differ from solo by size "
              + ", ".join(res), flush=True)
